"""Refresh the figures the documentation shows: run an example, keep its PNGs and a stamp.

The examples write their figures under ``out/`` (not in git). The site shows the copies kept in
``docs/papers/figures/<script>/``, one folder per script of ``examples/``, beside the paper pages
that discuss them, with the markdown tables of the same run; each folder's ``figures.json`` says
which command drew them, when, on what machine (and its load), in how long, and at which commit. A build from a fresh clone therefore shows real
outputs of the scripts without running them (the default sizes take minutes each).

    python docs/figures.py paper000_proximal_hmc          # run it at its default size, keep its figures
    python docs/figures.py paper003_relu_hmc -- --ray     # extra arguments go to the script
    python docs/figures.py --all                          # every example that writes figures
    python docs/figures.py paper000_proximal_hmc --from out/paper000 --command "..." --wall 115
                                                          # keep the figures of a run already made

``make figures`` runs ``--all``. Each figure is re-saved at most ``MAX_WIDTH`` pixels wide, so the
folder stays small.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIGURES = ROOT / "docs" / "papers" / "figures"
#: widest figure kept, in pixels (the scripts save at 110 dpi, at most 1650 pixels wide; wider figures are scaled down)
MAX_WIDTH = 1700


def figure_scripts() -> list[str]:
    """The examples that write figures (their source calls ``savefig`` or a ``plot_`` helper with a path)."""
    return [p.stem for p in sorted(EXAMPLES.glob("*.py"))
            if "savefig" in p.read_text() or ".png" in p.read_text() and "plot_" in p.read_text()]


def machine() -> dict:
    """What the figures were drawn on: the benchmarks' record of the machine
    (:func:`benchmarks/common.machine`) and the load average."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import machine as measured_on

    info = {k: v for k, v in measured_on().items() if k not in ("device", "date", "torch_threads")}
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def shrink(src: Path, dst: Path) -> None:
    """Copy a PNG, scaled down to ``MAX_WIDTH`` pixels if wider (Pillow, a dependency of matplotlib)."""
    from PIL import Image

    with Image.open(src) as image:
        if image.width <= MAX_WIDTH:
            shutil.copyfile(src, dst)
            return
        height = round(image.height * MAX_WIDTH / image.width)
        image.resize((MAX_WIDTH, height), Image.LANCZOS).save(dst, optimize=True)


def keep(script: str, folder: Path, command: str, wall_s: float | None, load_before=None) -> Path:
    """Copy ``folder``'s PNGs and markdown tables to ``docs/papers/figures/<script>/`` and write its
    ``figures.json``: the tables are the same run's numbers, shown under its figures."""
    pngs = sorted(folder.glob("*.png"))
    tables = sorted(folder.glob("*.md"))
    if not pngs:
        raise SystemExit(f"docs/figures.py: {script}: no PNG in {folder}")
    target = FIGURES / script
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for png in pngs:
        shrink(png, target / png.name)
    for table in tables:
        shutil.copyfile(table, target / table.name)
    stamp = {"script": f"examples/{script}.py", "command": command,
             "date": datetime.date.today().isoformat(), "commit": commit(),
             "wall_s": None if wall_s is None else round(wall_s), "machine": machine(),
             "figures": [p.name for p in pngs], "tables": [t.name for t in tables]}
    stamp["machine"]["load_average_end"] = stamp["machine"].pop("load_average", None)  # 1, 5, 15 min
    if load_before is not None:
        stamp["machine"]["load_average_before"] = load_before
    (target / "figures.json").write_text(json.dumps(stamp, indent=2) + "\n")
    return target


def run(script: str, extra: list[str]) -> Path:
    """Run ``examples/<script>.py`` (default size unless ``extra`` says otherwise) into a scratch folder."""
    with tempfile.TemporaryDirectory(prefix=f"bnnzoo-{script}-") as scratch:
        args = [f"examples/{script}.py", *extra, "--out", scratch]
        command = "python " + " ".join(a for a in args if a != scratch).replace("--out", "").strip()
        command = " ".join(command.split())
        load = [round(x, 2) for x in os.getloadavg()]
        print(f"docs/figures.py: {command}", flush=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, check=True)
        wall = time.perf_counter() - start
        return keep(script, Path(scratch), command, wall, load)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", help="example names (examples/NAME.py)")
    parser.add_argument("--all", action="store_true", help="every example that writes figures")
    parser.add_argument("--from", dest="source", help="keep the figures of a finished run in this folder")
    parser.add_argument("--command", help="with --from: the command that made them")
    parser.add_argument("--wall", type=float, help="with --from: its wall time in seconds")
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    known = [p.stem for p in EXAMPLES.glob("*.py")]
    scripts = figure_scripts() if args.all else args.scripts
    for script in scripts:
        if script not in known:
            raise SystemExit(f"docs/figures.py: script={script!r}: no examples/{script}.py")
    if args.source:
        if len(scripts) != 1 or not args.command:
            raise SystemExit("docs/figures.py: --from needs one script and --command")
        print(keep(scripts[0], Path(args.source), args.command, args.wall))
        return
    for script in scripts:
        print(run(script, extra))


if __name__ == "__main__":
    main()
