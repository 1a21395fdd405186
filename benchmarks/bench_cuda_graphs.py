"""Microseconds per leapfrog step on a GPU: the step launched op by op against one replay of
its captured CUDA graph (:mod:`bnnzoo.inference.cuda_graphs`), eager and compiled.

The cosine MLP (1-50-1 tanh, 100 points) and the digits MLP (64-128-128-10 ReLU, 1000
points, categorical likelihood), N(0, 1) priors, for 8, 32 and 128 chains: a trajectory of
``--steps`` leapfrog steps with energy tracking, as ChEES and HMC run it, timed to the end of
the GPU's work; per step. The four variants of a row run interleaved, ``--rounds`` times,
medians. Needs CUDA.

Usage: ``python benchmarks/bench_cuda_graphs.py [--steps 50] [--rounds 5]``; writes
``benchmarks/results/cuda_graphs.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, synchronize, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.cuda_graphs import GraphedLeapfrog  # noqa: E402
from bnnzoo.inference.integrators import EnergyTracker, kinetic_energy, leapfrog  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

CHAINS = (8, 32, 128)


def networks():
    return {"cosine MLP 1-50-1": (zoo.cosine_mlp(hidden=50), load("cosine", seed=0)),
            "digits MLP 64-128-128-10": (zoo.digits_mlp(hidden=128), load("digits", seed=0, n_train=1000))}


def trajectory(potential, chains, steps, graphed: GraphedLeapfrog | None):
    """A timed callable: ``steps`` leapfrog steps with energy tracking from a fixed start."""
    torch.manual_seed(0)
    theta = initial_theta(potential, chains)
    p = torch.randn_like(theta)
    value, grad = potential.value_and_grad(theta)
    inv_mass = torch.ones_like(theta[0])
    energy = value + kinetic_energy(p, inv_mass)

    def plain():
        tracker = EnergyTracker(energy, inv_mass)
        return leapfrog(theta, p, grad, 1e-3, steps, potential.value_and_grad, inv_mass, value,
                        step=potential.leapfrog_step, track_energy=tracker)

    def replayed():
        tracker = EnergyTracker(energy, inv_mass)
        return graphed.leapfrog(theta, p, grad, 1e-3, steps, inv_mass, tracker)

    return plain if graphed is None else replayed


def seconds(fn) -> float:
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="leapfrog steps per timed trajectory")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda_graphs.py needs a CUDA device; this machine has none")
    device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for name, (spec, data) in networks().items():
        for chains in CHAINS:
            variants = {}
            for mode, compile in (("eager", False), ("compiled", True)):
                potential = BNNPotential(BNN(spec), data.x_train, data.y_train, compile=compile, device=device)
                variants[f"{mode}_us"] = trajectory(potential, chains, args.steps, None)
                graphed = GraphedLeapfrog(potential.leapfrog_step, key=compile)
                variants[f"{mode}_graph_us"] = trajectory(potential, chains, args.steps, graphed)
            for fn in variants.values():  # compile, capture and warm up before timing
                fn()
                fn()
            times = {k: [] for k in variants}
            for _ in range(args.rounds):
                for k, fn in variants.items():
                    times[k].append(seconds(fn) / args.steps * 1e6)
            row = {"model": name, "chains": chains, **{k: statistics.median(v) for k, v in times.items()}}
            row["graph_speedup_eager"] = row["eager_us"] / row["eager_graph_us"]
            row["graph_speedup_compiled"] = row["compiled_us"] / row["compiled_graph_us"]
            print(row, flush=True)
            rows.append(row)
    columns = ["model", "chains", "eager_us", "eager_graph_us", "compiled_us", "compiled_graph_us",
               "graph_speedup_eager", "graph_speedup_compiled"]
    table = markdown_table(rows, columns)
    table += (f"\n\nMicroseconds per leapfrog step (energy tracked), all chains together, in trajectories of "
              f"{args.steps} steps; medians of {args.rounds} interleaved rounds. *_graph_us: each step one "
              f"replay of the captured CUDA graph.")
    js, md = write_results("cuda_graphs", {"machine": machine(device), "settings": vars(args), "rows": rows}, table)
    print(table)
    print(f"wrote {js} and {md}")


if __name__ == "__main__":
    main()
