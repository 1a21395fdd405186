"""A BNN off the analytic path: its autograd gradient against the traced graph that replays it.

A prior that the hand-written backward does not cover (a horseshoe, a group spike-and-slab: the
hierarchical priors) sends a BNN's gradient to autograd. After 32 calls the potential replays a
traced graph of what one call ran (``inference/traced_graphs.py``, as TorchScript). This script
times, per call of ``value_and_grad`` for ``--chains`` chains at one thread, on the zoo's diabetes
network (10-32-1 tanh, 442 rows) with each such prior on its first layer:

* ``autograd_ms``: the slow path as it runs before its graph (``traced.after = 0``);
* ``traced_ms``: the same potential after its graph took over (checked bit for bit against autograd);
* ``analytic_ms``: the analytic gradient of the same layers under Gaussian priors (what the
  run's one-line notice compares with),

alternating within each of ``--rounds`` rounds (the median per call of :func:`common.time_call`).

Usage: ``python benchmarks/bench_traced_gradient.py [--rounds 5] [--chains 8]``; writes
``benchmarks/results/traced_gradient.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, GroupSpikeAndSlab, Horseshoe, zoo  # noqa: E402

PRIORS = {"horseshoe": Horseshoe, "group spike-and-slab": GroupSpikeAndSlab}


def measure(prior: str, chains: int, rounds: int) -> dict:
    data = load("diabetes", seed=0)
    spec = dataclasses.replace(zoo.diabetes_mlp(), priors={"layers.0.weight": PRIORS[prior]()})
    traced, slow = (BNNPotential(BNN(spec), data.x_train, data.y_train) for _ in range(2))
    slow.traced.after = 0
    analytic = BNNPotential(BNN(zoo.diabetes_mlp()), data.x_train, data.y_train)
    theta = initial_theta(traced, chains, 0.5, generator=torch.Generator().manual_seed(0))
    for _ in range(traced.traced.after):
        traced.value_and_grad(theta)
    same = all(torch.equal(a, b) for a, b in zip(traced.value_and_grad(theta), slow.value_and_grad(theta)))
    pots = {"autograd": slow, "traced": traced, "analytic": analytic}
    points = {"autograd": theta, "traced": theta,
              "analytic": initial_theta(analytic, chains, 0.5, generator=torch.Generator().manual_seed(0))}
    times = {k: [] for k in pots}
    before = os.getloadavg()[0]
    for i in range(rounds):
        for which in list(pots) if i % 2 == 0 else list(pots)[::-1]:
            pot, point = pots[which], points[which]
            times[which].append(time_call(lambda: pot.value_and_grad(point), min_time=0.5, repeats=3))
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {"prior": prior, "D": traced.dim, "chains": chains, "slow_path": traced.slow_path,
            "traced": traced.traced.traced, "same_bits": same, "autograd_ms": ms["autograd"],
            "traced_ms": ms["traced"], "analytic_ms": ms["analytic"], "autograd_over_traced": ms["autograd"] / ms["traced"],
            "traced_over_analytic": ms["traced"] / ms["analytic"], "load_1min_before": before,
            "load_1min_after": os.getloadavg()[0]}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chains", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [measure(prior, args.chains, args.rounds) for prior in PRIORS]
    for row in rows:
        print(row, flush=True)
    table = (f"A BNN off the analytic path (the zoo's diabetes network, its first layer under the prior named), "
             f"value and gradient for {args.chains} chains, float32, one thread: autograd, its traced graph "
             f"(bit for bit autograd's: same_bits) and the analytic gradient of the same layers under Gaussian "
             f"priors; medians of {args.rounds} interleaved rounds.\n\n"
             + markdown_table(rows, ["prior", "D", "chains", "traced", "same_bits", "autograd_ms", "traced_ms",
                                     "analytic_ms", "autograd_over_traced", "traced_over_analytic",
                                     "load_1min_before", "load_1min_after"]))
    write_results("traced_gradient", {"machine": machine(), "args": vars(args), "rows": rows}, table)
    print(table)
    return rows


if __name__ == "__main__":
    main()
