"""Where a compiled leapfrog step of the cosine MLP spends its time: the activation.

The cosine MLP (1-50-1, 100 points) with 8 chains computes 8 x 100 x 50 = 40,000 hidden
activations per gradient. This script times one step of bnnzoo's compiled four-step
leapfrog graph (``leapfrog_steps``, the call's Python and dispatch cost included, per
step) of the same network with its hidden activation swapped: ``tanh`` (the benchmark's
network), ``sigmoid``, ``relu`` and ``linear`` (none). Every other part of the step (the
matmuls, the likelihood, the prior, the update) is the same, so the differences are the
activation's forward and backward; ``linear`` is the step without one. One intra-op
thread, interleaved rounds, medians over rounds.

Usage: ``python benchmarks/bench_activation.py [--rounds 5]``; writes
``benchmarks/results/activation.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import leapfrog_steps_args, machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.potential import BNNPotential  # noqa: E402
from bnnzoo.inference.compiled_graphs import UNROLL  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

CHAINS = 8

ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear")


def leapfrog_step(activation: str):
    """One call of the compiled four-step graph of the cosine MLP with ``activation``."""
    data = load("cosine", seed=0)
    potential = BNNPotential(BNN(zoo.cosine_mlp(activation=activation)), data.x_train, data.y_train,
                             compile=True)
    args = leapfrog_steps_args(potential, CHAINS)
    return lambda: potential.graphs.leapfrog_steps(*args)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over all cases")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    torch.set_num_threads(1)
    cases = {name: leapfrog_step(name) for name in ACTIVATIONS}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.rounds):
        for name, fn in cases.items():
            times[name].append(time_call(fn) / UNROLL * 1e6)
        print(f"round {i + 1}/{args.rounds}: " + ", ".join(f"{n} {t[-1]:.1f}" for n, t in times.items()), flush=True)
    base = statistics.median(times["linear"])
    rows = [{"hidden activation": name, "us per leapfrog step": statistics.median(t),
             "range": f"{min(t):.1f}-{max(t):.1f}", "activation's share": 1 - base / statistics.median(t)}
            for name, t in times.items()]
    table = markdown_table(rows, list(rows[0]))
    table += (f"\n\nCosine MLP (1-50-1, 100 points), {CHAINS} chains, float32: microseconds per leapfrog step "
              f"of the compiled graph ({UNROLL} steps a call), medians of {args.rounds} interleaved rounds; "
              "activation's share: 1 - (the linear network's step) / (this step).")
    write_results("activation", {"machine": machine(), "settings": vars(args), "times_us": times, "rows": rows},
                  table)
    print(table)


if __name__ == "__main__":
    main()
