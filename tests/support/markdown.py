"""Fenced code blocks of the project's Markdown files, for the tests that run them."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def blocks(path: Path, language: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced block of ``language`` in ``path``, in order."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


def run_session(path: Path) -> dict:
    """Run the Python blocks of ``path`` top to bottom as one session; its names."""
    session = {"__name__": "__docs__"}
    for line, source in blocks(path, "python"):
        exec(compile(source, f"{path}:{line}", "exec"), session)
    return session


def check_run_file(path: Path, source: str, line: int, tmp_path: Path) -> None:
    """The checks ``bnnzoo run`` makes on a run file before any engine starts."""
    from bnnzoo.cli import read_run_file
    from bnnzoo.data import load
    from bnnzoo.inference import check_run
    from bnnzoo.models import BNN

    file = tmp_path / f"block{line}.toml"
    file.write_text(source)
    plan = read_run_file(file)
    common = {k: plan[k] for k in ("num_samples", "warmup_steps", "num_chains", "seed") if k in plan}
    for engine in plan["engines"]:
        options = dict(engine)
        check_run(options.pop("kind"), **{**common, **options})
    BNN(plan["spec"])
    assert load(plan["data"]["name"]).n_train > 0, f"{path}:{line}"
