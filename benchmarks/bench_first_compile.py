"""What a first run's compile spends its time on: the C++ compiler's calls, by kind, cold and warm.

A default run that compiles (``compile="auto"`` on the cosine MLP) pays more on a fresh machine than
later: inductor's one-time set-up and the kernels' first build. This script runs bench_suite's
measurement of bnnzoo's default engine (``bench_suite.py --probe MODEL chees``) in a fresh process
on an empty folder that holds every cache (``$BNNZOO_CACHE``, ``$TORCHINDUCTOR_CACHE_DIR``, and
``$TMPDIR``, where inductor keeps its precompiled C++ headers: a fresh machine), then in a second
fresh process on what the first left (warm). The C++ compiler is reached through a wrapper named
``g++`` at the front of ``$PATH`` that times each call and names what it built:

* ``isa_check``: inductor's dry compile of a small program per vector instruction set (AVX-512,
  AVX2 and their extensions), done before its first CPU kernel to choose the one to generate for;
* ``header``: the precompiled C++ header (its preprocessing and its build);
* ``kernel``: a compiled graph's C++ module;
* ``other``: anything else (version queries).

``--header on off default`` runs each setting of inductor's precompiled header
(``TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS`` 1 or 0; inductor's default is on; ``default``: the
variable unset, as a user runs), the settings interleaved in each of ``--rounds`` rounds. Each row is written as soon as it is measured.

``--prewarm on off`` runs each setting of bnnzoo's background set-up of inductor
(:mod:`bnnzoo.inference.prewarm`, ``BNNZOO_PREWARM``), interleaved likewise; the set-up's own compiler
calls (in its background process) are counted with the process that started it.

``--against REV`` measures each setting on this checkout and on the commit ``REV`` (checked out into a
temporary git worktree), the trees alternating round by round; the rows name their tree.

Usage: ``python benchmarks/bench_first_compile.py [--model cosine] [--rounds 2] [--header on off default]
[--prewarm on off] [--against REV] [--note TEXT] [--out DIR] [--name first_compile]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (RESULTS, alternate_against, fresh_machine_env, machine, markdown_table, notes_text,  # noqa: E402
                    probe_json, write_results)

KINDS = ("isa_check", "header", "kernel", "other")

WRAPPER = """#!/bin/sh
# times one call of the C++ compiler and names the files it was given (bench_first_compile.py)
start=$(date +%s.%N)
{compiler} "$@"
status=$?
end=$(date +%s.%N)
echo "$start $end $*" >> {log}
exit $status
"""


def kind(arguments: str) -> str:
    """What one compiler call built, from its arguments (module docstring)."""
    words = arguments.split()
    if any(w.endswith((".gch", ".pch")) for w in words) or any(w.endswith("header.i") for w in words):
        return "header"
    if any(w.endswith(".main.cpp") for w in words):
        return "kernel"
    if any(w.endswith(".cpp") for w in words):
        return "isa_check"
    return "other"


def calls(log: Path) -> list[tuple[str, float]]:
    """``(kind, seconds)`` of each call in the wrapper's log."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        start, end, arguments = line.split(" ", 2)
        out.append((kind(arguments), float(end) - float(start)))
    return out


def wait_for_prewarm(folder: Path, limit: float = 300.0) -> None:
    """Wait (at most ``limit`` s) until no background set-up (:mod:`bnnzoo.inference.prewarm`) holds its
    lock under ``folder``'s cache, so that its compiler calls are counted with the process that started it."""
    start = time.time()
    while any((folder / "cache" / "prewarm").glob("*.lock")) and time.time() - start < limit:
        time.sleep(0.2)


def measure(model: str, header: str, round_: int, prewarm: str = "on", tree: Path = HERE.parent,
            label: str | None = None) -> list[dict]:
    """The cold and the warm process of one setting (module docstring), with bnnzoo and bench_suite from
    the checkout ``tree``; ``label`` names the tree in the rows (None: no tree column)."""
    folder = Path(tempfile.mkdtemp(prefix="bnnzoo-first-compile-"))
    shim, log = folder / "shim", folder / "compiler.log"
    shim.mkdir()
    compiler = shutil.which("g++")
    if compiler is None:
        raise SystemExit("bench_first_compile: no g++ on the PATH")
    wrapper = shim / "g++"
    wrapper.write_text(WRAPPER.format(compiler=compiler, log=log))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = fresh_machine_env(folder, tree)
    env.pop("CXX", None)
    env.pop("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", None)  # "default": unset, as a user runs
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    if header != "default":
        env["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] = "1" if header == "on" else "0"
    env["BNNZOO_PREWARM"] = "1" if prewarm == "on" else "0"
    command = [sys.executable, str(Path(tree) / "benchmarks" / "bench_suite.py"), "--probe", model, "chees", "--threads", "1"]
    rows = []
    for phase in ("cold", "warm"):
        seen = len(calls(log))
        (run,) = probe_json(command, Path(tree), env)
        wait_for_prewarm(folder)
        made = calls(log)[seen:]
        row = {"model": model, **({"tree": label} if label else {}), "header": header, "prewarm": prewarm,
               "round": round_, "phase": phase,
               "wall_s": run["wall_s"],
               "compile_s": run.get("compile_s"), "compiler_calls": len(made),
               "compiler_s": sum(s for _, s in made)}
        for k in KINDS:
            row[f"{k}_s"] = sum(s for c, s in made if c == k)
            row[f"{k}_calls"] = sum(1 for c, _ in made if c == k)
        rows.append(row)
        print({k: row.get(k) for k in ("tree", "header", "prewarm", "round", "phase", "wall_s", "compile_s", "compiler_s")},
              flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def report(payload: dict) -> str:
    rows = payload["rows"]
    columns = ["header", "prewarm", "phase", "rounds", "wall_s", "compile_s", "compiler_s", "isa_check_s", "isa_check_calls",
               "header_s", "kernel_s", "kernel_calls"]
    trees = any("tree" in r for r in rows)
    lines = []
    for setting in dict.fromkeys((r.get("tree"), r["header"], r.get("prewarm", "off")) for r in rows):
        for phase in ("cold", "warm"):
            group = [r for r in rows if (r.get("tree"), r["header"], r.get("prewarm", "off")) == setting
                     and r["phase"] == phase]
            if not group:
                continue
            line = {"tree": setting[0], "header": setting[1], "prewarm": setting[2], "phase": phase, "rounds": len(group)}
            for c in columns[4:]:
                values = [r[c] for r in group if r.get(c) is not None]
                line[c] = float(statistics.median(values)) if values else None
            lines.append(line)
    text = (f"Measured {payload['machine']['date']}: bnnzoo's default engine (ChEES, 8 chains, 1000 draws after "
            f"500 warm-up steps, one thread) on {payload['settings']['model']}, in a fresh process on an empty "
            "cache folder (cold), then a second fresh process on what it left (warm); medians over rounds. "
            "compile_s: bnnzoo's time in compiling calls; compiler_s: the C++ compiler's calls, by kind "
            "(isa_check: inductor's dry compiles per vector instruction set; header: the precompiled header; "
            "kernel: the graphs' C++ modules). header: inductor's precompiled header on (inductor's default), off, "
            "or default (the variable unset, as a user runs). prewarm: bnnzoo's background set-up of inductor on a free "
            "core (bnnzoo.inference.prewarm; its compiler calls counted with the process that started it; rows "
            "measured before it existed: off).")
    if trees:
        text += (" tree: the checkout measured (this one, or the commit --against named), the trees alternating "
                 "round by round; ratio: the cold run's wall time over the warm one's, the median over rounds.")
        for line in lines:
            if line["phase"] == "cold":
                pairs = [(c["wall_s"], w["wall_s"]) for c in rows for w in rows
                         if c["phase"] == "cold" and w["phase"] == "warm" and c["round"] == w["round"]
                         and all(c.get(k) == w.get(k) == line[k] for k in ("tree", "header", "prewarm"))]
                line["ratio"] = float(statistics.median(c / w for c, w in pairs)) if pairs else None
        columns = ["tree"] + columns + ["ratio"]
    text += "\n\n" + markdown_table(lines, columns)
    return text + notes_text(payload)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cosine")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--header", nargs="+", choices=["on", "off", "default"],
                        default=["on", "off"])
    parser.add_argument("--prewarm", nargs="+", choices=["on", "off"], default=["on", "off"],
                        help="bnnzoo's background set-up of inductor (BNNZOO_PREWARM), each setting measured")
    parser.add_argument("--against", metavar="REV", help="also measure the commit REV, alternating with this checkout")
    parser.add_argument("--note", help="a line for the results' notes (how this run was made)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="first_compile")
    parser.add_argument("--retable", action="store_true", help="rewrite the markdown from the JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the measuring processes run one thread (--threads 1); this one waits
    path = args.out / f"{args.name}.json"
    if args.retable:
        payload = json.loads(path.read_text())
        payload["notes"] = payload.get("notes", []) + ([args.note] if args.note else [])
        write_results(args.name, payload, report(payload), out=args.out)
        return payload
    payload = {"machine": machine(), "settings": {"model": args.model, "rounds": args.rounds, "header": args.header,
                                                  "prewarm": args.prewarm},
               "load_start": os.getloadavg()[0], "notes": [args.note] if args.note else [], "rows": []}
    settings = [(h, p) for h in args.header for p in args.prewarm]

    def one_round(round_: int, tree: Path = HERE.parent, label: str | None = None) -> None:
        for header, prewarm in settings if round_ % 2 == 0 else settings[::-1]:
            payload["rows"].extend(measure(args.model, header, round_, prewarm, tree, label))
            write_results(args.name, payload, report(payload), out=args.out)

    if not args.against:
        for round_ in range(args.rounds):
            one_round(round_)
        return payload
    rounds = {"old": 0, "new": 0}

    def measure_tree(tree: Path) -> str:
        which = "new" if tree == HERE.parent else "old"
        one_round(rounds[which], tree, "this" if which == "new" else payload["against"])
        rounds[which] += 1
        return which

    payload["against"] = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=HERE.parent,
                                        capture_output=True, text=True, check=True).stdout.strip()
    payload["settings"]["against"] = payload["against"]
    alternate_against(HERE.parent, args.against, args.rounds, measure_tree)
    return payload


if __name__ == "__main__":
    main()
