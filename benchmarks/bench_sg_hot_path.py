"""The SG-MCMC hot path of this checkout against another commit, measured in one run.

Checks out ``--against REV`` (default ``HEAD~1``) into a temporary git worktree and times, in
alternating subprocesses (one tree, then the other, ``--rounds`` times, so both see the same
machine load), with one intra-op thread, ``run(engine="sghmc")`` on the cosine MLP (20 hidden
units, 200 rows, minibatches of 32, 4 vectorized chains, step size 1e-3), 100 warm-up and 900
sampling iterations, wall time per iteration (the driver, the kernel's statistics and the expected
sd inflation included):

* ``sghmc run``: the default polynomial schedule;
* ``sghmc run, constant schedule``: ``schedule="constant"``;

and the same as the process's CPU time (``time.process_time``: one thread, so the work done, less
disturbed than the wall time where other processes share the cores). Each process runs each
configuration once untimed, then five times, and reports the fastest (the least disturbed).
Reports the median over rounds of each tree and the median of the round-by-round ratios. Usage:
``python benchmarks/bench_sg_hot_path.py [--against REV] [--rounds 5] [--name NAME]``; writes
``benchmarks/results/hot_path_sg.{json,md}`` (``--name``: ``NAME.{json,md}``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import against_report, alternate_against, machine, probe_json, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 1000

# Runs inside one tree: only run()'s API.
PROBE = r"""
import json, time, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
from bnnzoo.inference import run
from bnnzoo.models import zoo

spec = zoo.cosine_mlp(hidden=20)
data = {"name": "cosine", "n_train": 200, "n_test": 20}
base = dict(engine="sghmc", num_samples=900, warmup_steps=100, num_chains=4, seed=0, step_size=1e-3, batch_size=32,
            progress=False, threads=1)
out = {}
for metric, extra in (("sghmc run", {}), ("sghmc run, constant schedule", {"schedule": "constant"})):
    options = {**base, **extra}
    run(spec, data, **options)  # caches warm
    walls, cpus = [], []
    for _ in range(5):
        start, cpu = time.perf_counter(), time.process_time()
        run(spec, data, **options)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    out[metric] = min(walls) / %d
    out[metric + ", CPU time"] = min(cpus) / %d
print(json.dumps(out))
""" % (ITERATIONS, ITERATIONS)

METRICS = ("sghmc run", "sghmc run, constant schedule", "sghmc run, CPU time", "sghmc run, constant schedule, CPU time")


def probe(tree: Path) -> dict:
    env = {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return probe_json([sys.executable, "-c", PROBE], tree, env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating measurements of each tree")
    parser.add_argument("--name", default="hot_path_sg", help="the results' file name in benchmarks/results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # what the probes use; machine() reports it
    load_start = os.getloadavg()
    rev, runs = alternate_against(ROOT, args.against, args.rounds, lambda tree: probe(tree))
    rows, table, load = against_report(runs, METRICS, rev, "us per iteration", args.rounds, load_start)
    table += " A shared machine: other processes ran beside it."
    payload = {"machine": machine(), "against": rev, "rounds": args.rounds, "runs": runs, "rows": rows,
               "load_average": load,
               "settings": {"threads": 1, "chains": 4, "model": "cosine_mlp(hidden=20)", "rows": 200,
                            "batch_size": 32, "iterations": ITERATIONS, "timed": "fastest of 5 runs per process"}}
    write_results(args.name, payload, table)
    print(table)


if __name__ == "__main__":
    main()
