"""Subnormal floats in a compiled gradient: its time with and without flushing them to zero.

A float below 1.2e-38 (float32) is subnormal, and many CPUs take a slow path for every
operation on one; a compiled graph's intermediate values can be subnormal even where its
outputs hold none. bnnzoo runs every compiled graph with
``torch.set_flush_denormal(True)`` (``compiled_graphs._flushing_denormals``); this script
measures what that buys: the median seconds of one ``value_and_grad`` of the compiled graph and
of the eager analytic gradient, with flushing on and off, for 8 chains at points drawn
N(0, s^2) in the unconstrained space for several scales s (the prior's scale is 1), on the
digits MLP (64-128-128-10, 1437 rows) and the cosine MLP (1-50-1, 100 rows). Interleaved
rounds (on, off, off, on, ...), one intra-op thread; ``subnormal`` is the share of the
gradient's entries that are subnormal when nothing is flushed.

Usage: ``python benchmarks/bench_denormals.py [--rounds 3] [--models digits cosine]``; writes
``benchmarks/results/denormals.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.compiled_graphs import compiled  # noqa: E402
from bnnzoo.inference.potential import BNNPotential  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

CHAINS = 8
SCALES = (0.1, 0.5, 1.0, 2.0)
MODELS = {"digits": ("digits_mlp", "digits"), "cosine": ("cosine_mlp", "cosine")}


def subnormal_share(grad: torch.Tensor) -> float:
    tiny = torch.finfo(grad.dtype).tiny
    return float(((grad != 0) & (grad.abs() < tiny)).double().mean())


def measure(model: str, rounds: int) -> list[dict]:
    spec, data = MODELS[model]
    d = load(data, seed=0)
    potential = BNNPotential(BNN(getattr(zoo, spec)()), d.x_train, d.y_train, compile=True)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for scale in SCALES:
        theta = torch.randn(CHAINS, potential.dim, generator=generator) * scale
        potential.value_and_grad(theta)  # the first call of a shape runs eagerly, the second compiles
        potential.value_and_grad(theta)
        graph = compiled("value_and_grad")
        torch.set_flush_denormal(False)
        share = subnormal_share(graph(potential, theta)[1])
        calls = {"compiled": lambda: graph(potential, theta),
                 "eager": lambda: potential.analytic_value_and_grad(theta)}
        for path, call in calls.items():
            times = {True: [], False: []}
            for i in range(rounds):
                for flush in (True, False) if i % 2 == 0 else (False, True):
                    torch.set_flush_denormal(flush)
                    times[flush].append(time_call(call, min_time=0.3, repeats=3))
            torch.set_flush_denormal(False)
            on, off = statistics.median(times[True]), statistics.median(times[False])
            rows.append({"model": model, "path": path, "scale": scale, "subnormal": share,
                         "flushed_ms": on * 1e3, "unflushed_ms": off * 1e3, "unflushed_over_flushed": off / on})
            print(rows[-1], flush=True)
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    rows = [row for model in args.models for row in measure(model, args.rounds)]
    columns = ["model", "path", "scale", "subnormal", "flushed_ms", "unflushed_ms", "unflushed_over_flushed"]
    table = (f"One `value_and_grad` for {CHAINS} chains at points N(0, s^2) (s: `scale`), compiled graph and "
             f"eager analytic gradient, with subnormals flushed to zero and without; medians over "
             f"{args.rounds} interleaved rounds, one intra-op thread; 1-minute load average "
             f"{load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.\n\n"
             + markdown_table(rows, columns))
    payload = {"machine": machine(), "settings": vars(args) | {"out": None}, "rows": rows}
    write_results("denormals", payload, table, **({"out": args.out} if args.out else {}))
    return rows


if __name__ == "__main__":
    main()
