"""The eager leapfrog step that ``compile="auto"`` models, against measured gradients.

``compile="auto"`` prices the rest of a run with :func:`bnnzoo.inference.compilation.modeled_step_seconds`
(a function of the network, the rows, the chains and the device, never of a clock, so that the same seed
gives the same draws). This script times one eager value-and-gradient (:func:`common.time_call`, one torch
thread) of the zoo's MLPs on their data sets, at 1, 8 and 32 chains, beside the modeled step: the cosine
MLP (1-50-1), and the networks with wider inputs of the posterior benchmark (diabetes 10-32-1, breast
cancer 30-16-1, wine 13-16-3). On a shared machine absolute times move with the load, so the table also
gives each time over the cosine MLP's at the same chain count, measured in the same run, beside the
model's ratio.

Usage: ``python benchmarks/bench_step_model.py``; writes ``benchmarks/results/step_model.{json,md}``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.compilation import modeled_step_seconds  # noqa: E402
from bnnzoo.inference.potential import BNNPotential  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

PROBLEMS = (("cosine_mlp", "cosine"), ("diabetes_mlp", "diabetes"), ("breast_cancer_mlp", "breast_cancer"),
            ("wine_mlp", "wine"))
CHAINS = (1, 8, 32)


def main() -> None:
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
            rows.append({"model": name, "rows": int(d.x_train.shape[0]), "params": potential.dim, "chains": chains,
                         "measured_us": measured * 1e6, "modeled_us": modeled * 1e6,
                         "measured_over_cosine": measured / cosine[chains][0],
                         "modeled_over_cosine": modeled / cosine[chains][1]})
            print(rows[-1], flush=True)
    info = {**machine(), "load_1min": [load_before, os.getloadavg()[0]]}
    table = markdown_table(rows, list(rows[0]))
    note = (f"\n\n1-minute load average {load_before:.1f} before and {info['load_1min'][1]:.1f} after on "
            f"{info['cpus']} cores (a shared machine: absolute times move with the load; the "
            f"ratios to the cosine MLP were measured in the same run). measured: one eager value-and-gradient "
            f"(the median per call of common.time_call); modeled: compilation.modeled_step_seconds.")
    write_results("step_model", {"machine": info, "rows": rows}, table + note)
    print(table + note)


if __name__ == "__main__":
    main()
