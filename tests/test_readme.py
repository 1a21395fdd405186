"""README.md's code, run as written: its Python blocks top to bottom as one session (as the
README says), with ``BNNZOO_QUICK=1`` (every draw and iteration count divided by ten), and
its TOML run and sweep files read and checked as ``bnnzoo run`` / ``bnnzoo sweep`` would
before running anything."""

import re
from pathlib import Path

import numpy as np

from bnnzoo.cli import read_run_file, read_sweep_file
from bnnzoo.diagnostics import groups
from bnnzoo.data import load
from bnnzoo.inference import check_run
from bnnzoo.models import BNN

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def blocks(language: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced block of ``language`` in README.md, in order."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


def test_the_readme_documents_its_quick_switch():
    text = README.read_text()
    assert "BNNZOO_QUICK=1" in text
    first = blocks("python")[0][1]
    assert 'S = 10 if os.environ.get("BNNZOO_QUICK") == "1" else 1' in first


def test_python_blocks_run_top_to_bottom_as_one_session(monkeypatch, tmp_path):
    monkeypatch.setenv("BNNZOO_QUICK", "1")
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    session = {"__name__": "__readme__"}
    for line, source in blocks("python"):
        exec(compile(source, f"{README}:{line}", "exec"), session)
    assert session["S"] == 10
    # what the blocks promise in their comments
    table = session["table"]
    assert list(table["engine"]) == ["chees", "rwmh", "svi"]
    assert np.isfinite(table["rmse"]).all()
    assert session["obs"].shape == (8 * 30, 100)
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(groups(session["idata"]))
    assert 0.0 <= session["curve"].optimal_acceptance <= 1.0
    assert session["r"].pruning_mask["layers.0.weight"].shape == (1, 5, 1000)
    assert session["kept"].numel() <= 1000
    grid = session["grid_table"]
    assert list(grid["kind"]) == ["fixed_hmc"] * 4 + ["rwmh"] * 2 and grid["acceptance"].between(0, 1).all()
    assert len(list((tmp_path / "out" / "sweep_python").glob("*.nc"))) == 6


def test_toml_blocks_are_valid_run_files(tmp_path):
    files = [(line, source) for line, source in blocks("toml") if "[sweep]" not in source]
    assert files
    for i, (line, source) in enumerate(files):
        path = tmp_path / f"block{i}.toml"
        path.write_text(source)
        plan = read_run_file(path)
        common = {k: plan[k] for k in ("num_samples", "warmup_steps", "num_chains", "seed") if k in plan}
        for engine in plan["engines"]:  # the checks `bnnzoo run` makes before any engine starts
            options = dict(engine)
            check_run(options.pop("kind"), **{**common, **options})
        BNN(plan["spec"])
        assert load(plan["data"]["name"]).n_train > 0, f"README.md:{line}"


def test_the_sweep_file_is_the_example_grid_and_valid():
    (line, source), = [(line, source) for line, source in blocks("toml") if "[sweep]" in source]
    example = ROOT / "examples" / "sweep_small.toml"
    assert source == example.read_text(), f"README.md:{line} differs from {example}"
    plan = read_sweep_file(example)  # every cell checked, as `bnnzoo sweep` does before running any
    assert len(plan["cells"]) == 12 and BNN(plan["spec"]).num_params > 0
