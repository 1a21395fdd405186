"""Pyro's NUTS on bnnzoo's potential: the analytic gradient through ``potential_fn`` against autograd.

Pyro's HMC and NUTS differentiate ``potential_fn`` with autograd. On the analytic
path (dense layers, iid priors) :meth:`BNNPotential.potential_fn` returns a value whose
backward is the hand-written gradient, computed with the value. This script times,
on the cosine MLP (1-50-1, 100 points) and the digits MLP (64-128-128-10, 1000 points),
one chain, 1 torch thread:

* ``potential_grad``: Pyro's value-and-gradient call, analytic vs autograd;
* ``nuts run``: the wall time of a NUTS run (``--draws`` warm-up + draws, ``max_tree_depth``
  5, same seed: both paths follow the same trajectories up to rounding).

The two paths alternate within each of ``--rounds`` rounds; medians are reported
with their ratio. ``--device cuda``: both on the GPU. Writes ``benchmarks/results/pyro_gradient.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_device_argument, machine, markdown_table, time_call, write_results  # noqa: E402

from pyro.infer.mcmc.util import potential_grad  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference import run  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402


def _autograd(potential):
    return lambda params: potential(potential.flatten(params))


def measure(rounds: int, draws: int, device="cpu") -> list[dict]:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rows = []
    for name, model, data in (("cosine MLP", BNN(zoo.cosine_mlp()), load("cosine", seed=0)),
                              ("digits MLP", BNN(zoo.digits_mlp()), load("digits", seed=0))):
        potential = BNNPotential(model, data.x_train, data.y_train, device=device)
        params = potential.unflatten(initial_theta(potential, 1, 1.0)[0])
        grad = {"analytic": [], "autograd": []}
        nuts = {"analytic": [], "autograd": []}
        for _ in range(rounds):
            for path in ("analytic", "autograd"):
                fn = potential.potential_fn if path == "analytic" else _autograd(potential)
                grad[path].append(time_call(lambda: potential_grad(fn, params), min_time=0.3))
                original = BNNPotential.potential_fn
                if path == "autograd":
                    BNNPotential.potential_fn = lambda self, p: self(self.flatten(p))
                try:
                    start = time.perf_counter()
                    result = run(model, data, engine="nuts", num_samples=draws, warmup_steps=draws, num_chains=1,
                                 max_tree_depth=5, progress=False, threads=1, device=device)
                    wall = time.perf_counter() - start
                finally:
                    BNNPotential.potential_fn = original
                nuts[path].append(wall)
                leapfrogs = int(result.sample_stats["n_steps"].sum())
        row = {"model": name}
        for label, values, unit, scale in (("potential_grad", grad, "us", 1e6), ("nuts run", nuts, "s", 1.0)):
            a, b = statistics.median(values["analytic"]), statistics.median(values["autograd"])
            row[f"{label} analytic ({unit})"], row[f"{label} autograd ({unit})"] = scale * a, scale * b
            row[f"{label} speed-up"] = b / a
        row["nuts leapfrogs (draws)"] = leapfrogs
        rows.append(row)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=30)
    add_device_argument(parser)
    args = parser.parse_args(argv)
    rows = measure(args.rounds, args.draws, args.device)
    table = markdown_table(rows, list(rows[0]))
    print(table)
    write_results("pyro_gradient", {"machine": machine(args.device), "rounds": args.rounds, "draws": args.draws,
                                    "rows": rows}, table)


if __name__ == "__main__":
    main()
