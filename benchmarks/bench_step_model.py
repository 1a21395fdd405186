"""The eager leapfrog step that ``compile="auto"`` models, against measured gradients.

``compile="auto"`` prices the rest of a run with :func:`bnnzoo.inference.compilation.modeled_step_seconds`
(a function of the network, the rows, the chains and the device, never of a clock, so that the same seed
gives the same draws). This script times one eager value-and-gradient (:func:`common.time_call`, one torch
thread) of the zoo's MLPs on their data sets, at 1, 8 and 32 chains, beside the modeled step: the cosine
MLP (1-50-1), and the networks with wider inputs of the posterior benchmark (diabetes 10-32-1, breast
cancer 30-16-1, wine 13-16-3). On a shared machine absolute times move with the load, so the table also
gives each time over the cosine MLP's at the same chain count, measured in the same run, beside the
model's ratio.

At 8 and 32 chains it also times a whole eager ChEES run (100 warm-up iterations and 100 draws, one
seed): ``run_step_us`` is its seconds per leapfrog step (all chains' batch), ``update_us`` that less
one gradient (the position and momentum updates and the transition's own work spread over its steps),
beside ``modeled_update_us`` (:data:`~bnnzoo.inference.compilation.CPU_UPDATE`, which a kernel that
compiles the whole step counts in what it would save).

Usage: ``python benchmarks/bench_step_model.py [--name NAME]``; writes
``benchmarks/results/NAME.{json,md}`` (``step_model``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference import run  # noqa: E402
from bnnzoo.inference.compilation import modeled_step_seconds  # noqa: E402
from bnnzoo.inference.potential import BNNPotential  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

PROBLEMS = (("cosine_mlp", "cosine"), ("diabetes_mlp", "diabetes"), ("breast_cancer_mlp", "breast_cancer"),
            ("wine_mlp", "wine"))
CHAINS = (1, 8, 32)
#: chain counts at which a whole eager ChEES run is timed (ChEES needs two chains or more)
RUN_CHAINS = (8, 32)


def run_step_seconds(name: str, data, chains: int) -> float:
    """Seconds per leapfrog step of an eager ChEES run (100 + 100 iterations, seed 0, one thread)."""
    start = time.perf_counter()
    r = run(zoo.get(name), data, engine="chees", num_samples=100, warmup_steps=100, num_chains=chains, seed=0,
            compile=False, threads=1, progress=False)
    wall = time.perf_counter() - start
    steps = float(np.sum(r.warmup_sample_stats["n_steps"][0]) + np.sum(r.sample_stats["n_steps"][0]))
    return wall / steps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="step_model", help="the results' file name")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows, cosine = [], {}
    load_before = os.getloadavg()[0]
    for name, data in PROBLEMS:
        d = load(data, seed=0)
        potential = BNNPotential(BNN(zoo.get(name)), d.x_train, d.y_train)
        generator = torch.Generator().manual_seed(0)
        for chains in CHAINS:
            theta = 0.3 * torch.randn(chains, potential.dim, generator=generator)
            measured = time_call(lambda: potential.value_and_grad(theta))
            modeled = modeled_step_seconds(potential, theta)
            if name == "cosine_mlp":
                cosine[chains] = (measured, modeled)
            stepped = run_step_seconds(name, d, chains) if chains in RUN_CHAINS else None
            rows.append({"model": name, "rows": int(d.x_train.shape[0]), "params": potential.dim, "chains": chains,
                         "measured_us": measured * 1e6, "modeled_us": modeled * 1e6,
                         "measured_over_cosine": measured / cosine[chains][0],
                         "modeled_over_cosine": modeled / cosine[chains][1],
                         "run_step_us": None if stepped is None else stepped * 1e6,
                         "update_us": None if stepped is None else (stepped - measured) * 1e6,
                         "modeled_update_us": (modeled_step_seconds(potential, theta, update=True) - modeled) * 1e6})
            print(rows[-1], flush=True)
    info = {**machine(), "load_1min": [load_before, os.getloadavg()[0]]}
    table = markdown_table(rows, list(rows[0]))
    note = (f"\n\n1-minute load average {load_before:.1f} before and {info['load_1min'][1]:.1f} after on "
            f"{info['cpus']} cores (a shared machine: absolute times move with the load; the "
            f"ratios to the cosine MLP were measured in the same run). measured: one eager value-and-gradient "
            f"(the median per call of common.time_call); modeled: compilation.modeled_step_seconds; run_step_us: an "
            f"eager ChEES run's seconds per leapfrog step (100 + 100 iterations, seed 0), update_us: that less "
            f"measured_us, modeled_update_us: compilation.CPU_UPDATE's.")
    write_results(args.name, {"machine": info, "rows": rows}, table + note)
    print(table + note)


if __name__ == "__main__":
    main()
