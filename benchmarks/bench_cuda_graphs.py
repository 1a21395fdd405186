"""Microseconds per leapfrog step on a GPU: the step launched op by op against one replay of
its captured CUDA graph (:mod:`bnnzoo.inference.cuda_graphs`), eager and compiled.

The cosine MLP (1-50-1 tanh, 100 points) and the digits MLP (64-128-128-10 ReLU, 1000
points, categorical likelihood), N(0, 1) priors, for 8, 32 and 128 chains: a trajectory of
``--steps`` leapfrog steps with energy tracking, as ChEES and HMC run it, timed to the end of
the GPU's work; per step. The four variants of a row run interleaved, ``--rounds`` times,
medians. Needs CUDA (``--device cpu`` runs the plain steps only, to check the script).

``--against DIR`` compares this checkout with another commit's checkout in ``DIR`` (made by
``git worktree add`` or ``git archive``; a GPU machine may have no git history): alternating
processes, ``--processes`` per tree, each tree with its own inductor cache, so the second process
of a tree reuses its compiled graphs; reports each tree's medians and the median ratio new/old.

Usage: ``python benchmarks/bench_cuda_graphs.py [--steps 50] [--rounds 5] [--chains 8 32 128]
[--modes eager compiled] [--against DIR [--against-name NAME] [--processes 2]]``; writes
``benchmarks/results/cuda_graphs.{json,md}`` (``--against``: ``cuda_graphs_against.{json,md}``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_device_argument, alternate, machine, markdown_table, paired_medians,  # noqa: E402
                    probe_json, synchronize, write_results)

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.cuda_graphs import GraphedLeapfrog  # noqa: E402
from bnnzoo.inference.integrators import EnergyTracker, kinetic_energy, leapfrog  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

CHAINS = (8, 32, 128)
ROOT = Path(__file__).resolve().parents[1]


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


def measure(args, device) -> list[dict]:
    """Rows of medians over ``args.rounds`` interleaved rounds, this process's bnnzoo."""
    graphs = device.type == "cuda"
    rows = []
    for name, (spec, data) in networks().items():
        for chains in args.chains:
            variants = {}
            for mode in args.modes:
                compile = mode == "compiled"
                potential = BNNPotential(BNN(spec), data.x_train, data.y_train, compile=compile, device=device)
                variants[f"{mode}_us"] = trajectory(potential, chains, args.steps, None)
                if graphs:
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
            for mode in args.modes:
                if f"{mode}_graph_us" in row:
                    row[f"graph_speedup_{mode}"] = row[f"{mode}_us"] / row[f"{mode}_graph_us"]
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def against(args, other: Path) -> tuple[list[dict], dict]:
    """This tree against ``other`` (a checkout of another commit): ``args.processes`` processes
    each, alternating (other, this, this, other, ...), each inductor cache its tree's own; per
    row and timing, the median over processes of each tree and the median ratio this/other."""
    flags = ["--probe", "--steps", str(args.steps), "--rounds", str(args.rounds), "--device", str(args.device),
             "--chains", *map(str, args.chains), "--modes", *args.modes]

    def process(which: str) -> list[dict]:
        tree = other if which == "old" else ROOT
        cache = Path(tempfile.gettempdir()) / f"bnnzoo-cuda-graphs-{which}"
        path = os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))  # the tree's bnnzoo first
        env = {**os.environ, "PYTHONPATH": path, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
               "BNNZOO_CACHE": str(cache)}
        return probe_json([sys.executable, __file__, *flags], tree, env)

    runs = alternate(args.processes, process)
    rows = []
    for j, row in enumerate(runs["new"][0]):
        out = {"model": row["model"], "chains": row["chains"]}
        for key in (k for k in row if k.endswith("_us")):
            out[f"old {key}"], out[f"new {key}"], out[f"{key[:-3]} new/old"] = paired_medians(
                [r[j][key] for r in runs["old"]], [r[j][key] for r in runs["new"]])
        rows.append(out)
    return rows, runs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="leapfrog steps per timed trajectory")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported")
    parser.add_argument("--chains", type=int, nargs="+", default=list(CHAINS), help="chain counts (default 8 32 128)")
    parser.add_argument("--modes", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"],
                        help="the potential's modes to time (default both)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="a checkout of another commit to compare with, in alternating processes")
    parser.add_argument("--against-name", help="with --against: what DIR holds, for the table (default: DIR's name)")
    parser.add_argument("--processes", type=int, default=2, help="with --against: processes per tree (default 2)")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # one measuring process
    add_device_argument(parser)
    parser.set_defaults(device=torch.device("cuda") if torch.cuda.is_available() else None)
    args = parser.parse_args(argv)
    if args.device is None:
        raise SystemExit("bench_cuda_graphs.py needs a CUDA device; this machine has none "
                         "(--device cpu checks the script: its plain steps only)")
    if args.against is not None and not (args.against / "bnnzoo").is_dir():
        raise SystemExit(f"--against {args.against}: no bnnzoo package there")
    device = args.device
    if args.probe:
        print(json.dumps(measure(args, device)))
        return
    timings = [f"{m}_us" for m in args.modes] + ([f"{m}_graph_us" for m in args.modes] if device.type == "cuda" else [])
    payload = {"machine": machine(device), "settings": {k: v for k, v in vars(args).items() if k != "probe"}}
    if args.against is None:
        rows = measure(args, device)
        columns = ["model", "chains", *timings, *(f"graph_speedup_{m}" for m in args.modes if device.type == "cuda")]
        name = "cuda_graphs"
        note = f"medians of {args.rounds} interleaved rounds"
    else:
        rows, payload["runs"] = against(args, args.against.resolve())
        columns = ["model", "chains", *(c for t in timings for c in (f"old {t}", f"new {t}", f"{t[:-3]} new/old"))]
        name = "cuda_graphs_against"
        note = (f"old: {args.against_name or args.against.name}, new: this checkout; medians over "
                f"{args.processes} alternating processes per tree of each process's median of {args.rounds} "
                f"interleaved rounds, and the median ratio")
    payload["rows"] = rows
    table = markdown_table(rows, columns)
    table += (f"\n\nMicroseconds per leapfrog step (energy tracked), all chains together, in trajectories of "
              f"{args.steps} steps; {note}. *_graph_us: each step one replay of the captured CUDA graph.")
    js, md = write_results(name, payload, table)
    print(table)
    print(f"wrote {js} and {md}")


if __name__ == "__main__":
    main()
