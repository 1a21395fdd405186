#!/usr/bin/env python
"""Paper 003 (HMC on ReLU networks is inefficient): acceptance of fixed-step leapfrog HMC
for sigmoid, ReLU and leaky-ReLU networks, beside the paper's Table 2.

The paper's setting: a Bayesian MLP with one hidden layer of 50 units, N(0, 1)
prior on every weight and bias, Gaussian likelihood (noise 0.1: the zoo's
``cosine_mlp``), 100 points of the cosine data; HMC with unit mass, a fixed
step size and a fixed number of leapfrog steps, no adaptation
(:class:`~bnnzoo.inference.FixedStepHMC`, the ``fixed_hmc`` engine), each
cell repeated with 5 seeds (here: 5 independent chains of one batch).

Three parts (``--only``):

* ``table``: mean acceptance ± standard error over chains for every step size
  (0.0005 ... 0.0025) and number of steps (200 ... 1000), beside Table 2;
  divergences (non-finite energy, or an energy error > 1000: rejected) counted;
  figure ``acceptance.png`` (the paper's Fig. 1);
* ``efficiency``: at a fixed travel time T = eps L, the efficiency (accepted
  proposals per leapfrog step, a / L = a eps / T) against the acceptance, its
  empirical optimum beside the paper's (0.755 / 0.6525 / 0.724) and the theory's
  (0.651 smooth, 0.45 piecewise affine); figure ``efficiency.png`` (Fig. 2a, with
  the theoretical curves);
* ``size``: acceptance against the number of parameters, widening one hidden
  layer and stacking layers of 20 units, at one step size and number of steps;
  figure ``size.png`` (Fig. 3).

The paper does not print its travel time for Fig. 2 nor the step size and
steps of Fig. 3; this script uses T = 0.3 and (eps, L) = (0.001, 200). It also
prints the target acceptance that bnnzoo's HMC engines now default to for each
network (:func:`~bnnzoo.inference.recommend_target_accept`).

Every cell of the chosen parts is one cell of one study
(:class:`~bnnzoo.experiments.Study`), run in this process or, with ``--ray``, as Ray
tasks side by side (the same numbers either way; the longest cells start first).
Each cell's NetCDF and row are written to ``runs/`` as it finishes, so running the
same command again after a kill skips the finished cells.

Usage::

    python examples/paper003_relu_hmc.py                  # L in (200, 600), 3 chains x 30 draws: ~5 min on one core
    python examples/paper003_relu_hmc.py --ray            # the same cells on a local Ray, one per core
    python examples/paper003_relu_hmc.py --full --ray     # the paper's grid, 5 chains x 2000 draws: ~10 h of one core
    python examples/paper003_relu_hmc.py --smoke --out out/paper003_smoke   # seconds: checks the script
    python examples/paper003_relu_hmc.py --full --only table --activations relu --out out/paper003_relu

``--full`` costs about 9 h for the table (3 h per activation), 1.5 h for the
efficiency curves and 2 h for the size sweep on one core (estimates); ``--ray``
divides that among the cores of the machine or cluster (``--ray ADDRESS``).

Writes to ``out/paper003/`` (``--out``): ``table.md`` and ``table.csv`` (every
cell, ours beside the paper's), ``efficiency.csv``, ``size.csv``, the three
figures, and ``runs/`` (each cell's NetCDF, its row in ``runs/cells/``,
``runs/sweep.csv``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from bnnzoo.data import load
from bnnzoo.diagnostics import plot_acceptance_sweep, plot_acceptance_vs_size, plot_efficiency
from bnnzoo.experiments import (
    SWEEP_COLUMNS, Cell, EfficiencyCurve, RayExecutor, acceptance_cells, efficiency_cells, run_sweep, size_cells,
)
from bnnzoo.inference import recommend_target_accept
from bnnzoo.models.zoo import cosine_mlp

ACTIVATIONS = ("sigmoid", "relu", "leaky_relu")
PARTS = ("table", "efficiency", "size")
STEP_SIZES = (0.0005, 0.0010, 0.0015, 0.0020, 0.0025)

#: Table 2 of the paper: mean acceptance (standard error over 5 seeds), by activation,
#: number of steps, then step size 0.0005 ... 0.0025
PAPER_TABLE2 = {
    "sigmoid": {
        200: ((0.994, 0.001), (0.981, 0.002), (0.960, 0.002), (0.925, 0.002), (0.861, 0.002)),
        400: ((0.996, 0.001), (0.980, 0.001), (0.954, 0.003), (0.911, 0.003), (0.849, 0.004)),
        600: ((0.996, 0.001), (0.982, 0.001), (0.956, 0.002), (0.916, 0.002), (0.851, 0.003)),
        800: ((0.997, 0.001), (0.980, 0.001), (0.955, 0.002), (0.920, 0.003), (0.841, 0.005)),
        1000: ((0.996, 0.001), (0.983, 0.001), (0.954, 0.002), (0.918, 0.001), (0.848, 0.005)),
    },
    "relu": {
        200: ((0.933, 0.003), (0.652, 0.019), (0.160, 0.071), (0.083, 0.022), (0.003, 0.003)),
        400: ((0.928, 0.003), (0.627, 0.006), (0.161, 0.025), (0.029, 0.010), (0.001, 0.001)),
        600: ((0.921, 0.003), (0.588, 0.007), (0.091, 0.004), (0.004, 0.002), (0.000, 0.000)),
        800: ((0.905, 0.005), (0.556, 0.012), (0.047, 0.007), (0.000, 0.000), (0.000, 0.000)),
        1000: ((0.897, 0.003), (0.527, 0.006), (0.030, 0.004), (0.000, 0.000), (0.000, 0.000)),
    },
    "leaky_relu": {
        200: ((0.937, 0.002), (0.653, 0.014), (0.192, 0.052), (0.000, 0.000), (0.000, 0.000)),
        400: ((0.923, 0.003), (0.597, 0.015), (0.063, 0.031), (0.000, 0.000), (0.000, 0.000)),
        600: ((0.914, 0.002), (0.577, 0.006), (0.019, 0.005), (0.000, 0.000), (0.000, 0.000)),
        800: ((0.911, 0.003), (0.535, 0.012), (0.008, 0.008), (0.000, 0.000), (0.000, 0.000)),
        1000: ((0.904, 0.004), (0.468, 0.029), (0.001, 0.001), (0.000, 0.000), (0.000, 0.000)),
    },
}
#: the paper's empirically optimal acceptance on the synthetic data (Sec. 4.1)
PAPER_OPTIMAL = {"sigmoid": 0.755, "relu": 0.6525, "leaky_relu": 0.724}

DEFAULT = dict(num_steps=(200, 600), chains=3, warmup=20, samples=30,
               travel_time=0.3, eff_step_sizes=(0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006),
               eff_warmup=10, eff_samples=30,
               size_step=0.001, size_steps=200, widths=(10, 50, 100, 200), depths=(1, 2, 3, 4),
               size_warmup=10, size_samples=30)
FULL = dict(DEFAULT, num_steps=(200, 400, 600, 800, 1000), chains=5, warmup=100, samples=2000,
            eff_step_sizes=(0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.006),
            eff_warmup=100, eff_samples=2000, widths=(10, 50, 100, 200, 400), size_warmup=100, size_samples=2000)
SMOKE = dict(DEFAULT, num_steps=(200,), chains=2, warmup=2, samples=3, eff_step_sizes=(0.002, 0.005), eff_warmup=2,
             eff_samples=3, size_steps=50, widths=(10, 20), depths=(1, 2), size_warmup=2, size_samples=3)


# ------------------------------------------------------------------ cells
def paper_cells(cfg, parts, activations, seed) -> list[Cell]:
    """Every cell of the chosen parts and activations: one study, whichever part a cell serves."""
    cells = []
    for activation in activations:
        model, where = cosine_mlp(activation=activation), {"activation": activation}
        if "table" in parts:
            cells += acceptance_cells(model, STEP_SIZES, cfg["num_steps"], cfg["samples"], cfg["warmup"],
                                      cfg["chains"], seed, coords={"part": "table", **where})
        if "efficiency" in parts:
            cells += efficiency_cells(model, cfg["travel_time"], cfg["eff_step_sizes"], cfg["eff_samples"],
                                      cfg["eff_warmup"], cfg["chains"], seed, coords={"part": "efficiency", **where})
        if "size" in parts:
            cells += size_cells(model, cfg["size_step"], cfg["size_steps"], cfg["widths"], cfg["depths"], 20,
                                cfg["size_samples"], cfg["size_warmup"], cfg["chains"], seed,
                                coords={"part": "size", **where})
    return cells


def run_longest_first(cells: list[Cell], data, executor, out: Path) -> pd.DataFrame:
    """The study of ``cells``, the longest (leapfrog steps x transitions) started first so that workers
    finish together; rows back in cell order."""
    cost = [c.options["num_steps"] * (c.options["warmup_steps"] + c.options["num_samples"]) for c in cells]
    order = sorted(range(len(cells)), key=lambda i: -cost[i])
    rows = run_sweep([cells[i] for i in order], data, executor=executor, out=out, name="paper003")
    rows.index = order
    return rows.sort_index()


def part(rows: pd.DataFrame, name: str, columns) -> pd.DataFrame:
    return rows[rows.part == name][list(columns)].reset_index(drop=True)


def table_part(rows: pd.DataFrame) -> pd.DataFrame:
    """Every (activation, steps, step size) cell, with the paper's value beside ours."""
    table = part(rows, "table", ["activation", *SWEEP_COLUMNS])
    paper = [PAPER_TABLE2[a][n][STEP_SIZES.index(round(e, 4))]
             for a, n, e in zip(table.activation, table.num_steps, table.step_size)]
    table["paper"] = [p[0] for p in paper]
    table["paper_se"] = [p[1] for p in paper]
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """Rows (activation, L), columns step sizes, cells ``ours ± se (paper)``; divergent
    transitions marked with their count in brackets."""
    head = "| activation | L | " + " | ".join(f"eps={e:g}" for e in STEP_SIZES) + " |"
    lines = [head, "|" + "---|" * (2 + len(STEP_SIZES))]
    for (activation, steps), rows in table.groupby(["activation", "num_steps"], sort=False):
        cells = []
        for row in rows.sort_values("step_size").itertuples():
            div = f" [{row.divergences} div]" if row.divergences else ""
            cells.append(f"{row.acceptance:.3f} ± {row.acceptance_se:.3f} ({row.paper:.3f}){div}")
        lines.append(f"| {activation} | {steps} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(df: pd.DataFrame) -> str:
    """A plain markdown table (floats to 3 decimals)."""
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, row)) + " |" for row in df.itertuples(index=False)])


def efficiency_part(cfg, rows: pd.DataFrame, activations):
    curves, summary = {}, []
    table = part(rows, "efficiency", ["activation", *SWEEP_COLUMNS])
    for activation in activations:
        curve = EfficiencyCurve.from_table(table[table.activation == activation][list(SWEEP_COLUMNS)],
                                           cfg["travel_time"])
        curves[activation] = curve
        rec = recommend_target_accept(cosine_mlp(activation=activation))
        summary.append({"activation": activation, "optimal_acceptance": curve.optimal_acceptance,
                        "at_edge": curve.at_edge, "paper_optimal": PAPER_OPTIMAL[activation],
                        "theory_optimal": rec.value, "max_efficiency": curve.table.efficiency.max()})
    return curves, pd.DataFrame(summary)


def size_part(rows: pd.DataFrame) -> pd.DataFrame:
    sizes = part(rows, "size", ["activation", "architecture", "width", "depth", *SWEEP_COLUMNS])
    return sizes.astype({"width": int, "depth": int})


# ------------------------------------------------------------------- main
def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="the paper's grid and draws (hours)")
    group.add_argument("--smoke", action="store_true", help="a tiny run (seconds): checks the script, not the paper")
    parser.add_argument("--out", default="out/paper003", help="output folder")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--activations", nargs="+", choices=ACTIVATIONS, default=list(ACTIVATIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run the cells as Ray tasks: a local Ray (no ADDRESS) or a cluster (auto, HOST:PORT, "
                             "ray://HOST:PORT); pip install bnnzoo[ray]")
    parser.add_argument("--workers", type=int, default=None, help="with --ray: cells at once (default: the CPUs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = FULL if args.full else SMOKE if args.smoke else DEFAULT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = load("cosine", seed=args.seed)
    size = "--full" if args.full else "--smoke" if args.smoke else "default size"
    print(f"{data.describe()}; cosine_mlp (50 units, N(0,1) prior, noise 0.1); {size}: "
          f"{cfg['chains']} chains x ({cfg['warmup']} burn-in + {cfg['samples']} draws) per cell", flush=True)
    for activation in args.activations:
        rec = recommend_target_accept(cosine_mlp(activation=activation))
        print(f"  {activation}: default target_accept {rec.value} ({rec.reason})")
    executor = "inprocess" if args.ray is None else RayExecutor(None if args.ray == "local" else args.ray,
                                                                 workers=args.workers)
    rows = run_longest_first(paper_cells(cfg, args.only, args.activations, args.seed), data, executor, out / "runs")
    results = {}
    if "table" in args.only:
        table = table_part(rows)
        table.to_csv(out / "table.csv", index=False)
        text = markdown_table(table)
        (out / "table.md").write_text(f"{data.describe()}; {size}, seed {args.seed}; cells: ours ± se over "
                                      f"{cfg['chains']} chains (paper's Table 2); [n div]: divergent "
                                      f"transitions\n\n{text}\n")
        plot_acceptance_sweep(table, by="activation", path=out / "acceptance.png")
        print(text, flush=True)
        results["table"] = table
    if "efficiency" in args.only:
        curves, summary = efficiency_part(cfg, rows, args.activations)
        pd.concat([c.table.assign(activation=a) for a, c in curves.items()]).to_csv(out / "efficiency.csv",
                                                                                   index=False)
        plot_efficiency(curves, path=out / "efficiency.png")
        print(markdown(summary), flush=True)
        results["efficiency"] = summary
    if "size" in args.only:
        sizes = size_part(rows)
        sizes.to_csv(out / "size.csv", index=False)
        plot_acceptance_vs_size(sizes, by="activation", path=out / "size.png")
        print(markdown(sizes[["activation", "architecture", "width", "depth", "num_params", "acceptance",
                              "acceptance_se", "divergences"]]), flush=True)
        results["size"] = sizes
    print(f"total {time.perf_counter() - start:.0f} s; wrote {out}/")
    return results


if __name__ == "__main__":
    main()
