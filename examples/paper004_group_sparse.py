"""Paper 004: group spike-and-slab SGHMC with MCMC-within-EM and one-shot pruning.

"On the optimization and pruning for Bayesian deep learning" (``docs/algorithms.md``,
"Group spike-and-slab SGHMC"). Two synthetic problems with 1000
correlated inputs (``x_j = (z_0 + z_j)/sqrt(2)``), of which only the first few matter:

1. **Regression** (``group_sparse_regression``): ``y = tanh(2 tanh(2 x1 - x2)) +
   2 tanh(tanh(x3 - 2 x4)) - tanh(2 x5) + N(0, 1)``, a 1000-5-3-1 ReLU network.
2. **Classification** (``group_sparse_classification``): ``y = 1[exp(x1) + x2^2 +
   5 sin(x3 x4) - 3 > 0]``, a 1000-6-4-3-1 ReLU network.

Three samplers on the same data and network: ``sghmc_group_ss`` (group
spike-and-slab prior on the input columns of the first layer, E-step once per
epoch after 50 warm-up epochs, hard pruning; cyclical step size with 6 cycles,
draws at the last 4 cycle ends), SGHMC-SA (paper 001: a Gaussian-Laplace
spike-and-slab prior on the same layer, hyperparameters by stochastic
approximation) and plain SGHMC (Gaussian prior). Reported: test MSE (accuracy) of
the ensemble mean, sparsity of the first layer, and which inputs survive: for
``sghmc_group_ss`` the columns its hard mask keeps; for SGHMC-SA the columns with a
weight of inclusion probability > 0.5; for SGHMC (no selection of its own) the
columns whose mean ``w^2`` is at least the hard threshold 1e-3.

The excerpt gives no table; the reference is the paper's claim (``docs/algorithms.md``) that
the network keeps exactly the relevant inputs and prunes the rest.

Default size: 10240 training points, 600 epochs of minibatches of 1024 (about five
minutes on one core in all); ``--full`` uses the paper's 3000 epochs.

    python examples/paper004_group_sparse.py            # -> out/paper004/
    python examples/paper004_group_sparse.py --full --out out/paper004_full
    python examples/paper004_group_sparse.py --smoke --out out/paper004_smoke   # seconds: checks the script

Writes ``regression.md/.csv``, ``classification.md/.csv`` and ``timing.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

METHODS = ("sghmc_group_ss", "SGHMC-SA", "SGHMC")
BATCH = 1024
CYCLES, KEPT_CYCLES = 6, 4
HARD = 1e-3
#: the paper's settings of its two synthetic problems: step size C_0^2 and the E-step
PAPER = {
    "regression": dict(step_size=0.01, slab_decay=2e-4, spike_decay=1e-2, soft_threshold=1e-2,
                       hard_threshold=HARD, em_warmup=50),
    "classification": dict(step_size=0.1, slab_decay=5e-4, spike_decay=1e-2, soft_threshold=2e-2,
                           hard_threshold=HARD, em_warmup=50),
}
#: the paper's pruning (at the first E-step below the threshold) and PyTorch's start, biases included;
#: the engine's defaults instead: examples/robustness_sparse.py
PAPER_RULES = dict(prune_patience=1, init_radius="fan_in")


def spec(task: str, prior, p: int):
    from bnnzoo.models import Bernoulli, BNNSpec, Dense, Gaussian, GaussianLikelihood

    hidden = [5, 3] if task == "regression" else [6, 4, 3]
    likelihood = GaussianLikelihood(1.0) if task == "regression" else Bernoulli()
    priors = {} if prior is None else {"layers.0.weight": prior}
    return BNNSpec(layers=[Dense(h, "relu") for h in hidden] + [Dense(1)], input_dim=p, prior=Gaussian(1.0),
                   priors=priors, likelihood=likelihood, name=f"paper004_{task}")


def one_run(task: str, method: str, epochs: int, n_train: int, seed: int, threads: int = 1) -> dict:
    """One method on one problem: test error of the ensemble mean and the surviving inputs."""
    torch.set_num_threads(threads)
    from bnnzoo.data import load
    from bnnzoo.inference import run
    from bnnzoo.models import GroupSpikeAndSlab, SpikeAndSlab

    data = load(f"group_sparse_{task}", seed=seed, n_train=n_train)
    p = data.input_dim
    iterations = epochs * -(-n_train // BATCH)
    common = dict(num_chains=1, seed=seed, batch_size=BATCH)
    start = time.perf_counter()
    if method == "sghmc_group_ss":
        cycle = iterations // CYCLES
        r = run(spec(task, GroupSpikeAndSlab(), p), data, engine="sghmc_group_ss", cycle_length=cycle,
                warmup_steps=(CYCLES - KEPT_CYCLES) * cycle, num_samples=KEPT_CYCLES, **PAPER[task], **PAPER_RULES,
                **common)
        kept = r.pruning_mask["layers.0.weight"][0].any(0)
    else:
        warmup, draws = iterations // 2, 20
        sgd = dict(step_size=5e-7 if task == "regression" else 2e-6, schedule="constant", friction=0.1,
                   warmup_steps=warmup,
                   num_samples=draws, thin=max(1, (iterations - warmup) // draws), init_radius=0.1)
        if method == "SGHMC-SA":
            r = run(spec(task, SpikeAndSlab(v0=0.1, v1=10.0), p), data, engine="sghmc_sa", **sgd, **common)
            kept = (r.inclusion_prob["layers.0.weight"][0] > 0.5).any(0)
        else:
            r = run(spec(task, None, p), data, engine="sghmc", **sgd, **common)
            kept = (r.samples["layers.0.weight"][0, -1] ** 2).mean(0) >= HARD
    seconds = time.perf_counter() - start
    f = r.predict(data.x_test)[..., 0]  # [chain, draw, N]
    y = data.y_test.numpy()
    if task == "regression":
        error = float(((f.mean((0, 1)) - y) ** 2).mean())
    else:
        prob = (1 / (1 + np.exp(-f))).mean((0, 1))
        error = float(((prob > 0.5) == y).mean())
    w = r.samples["layers.0.weight"][0, -1]
    support = data.meta["support"]
    kept = [int(j) for j in np.flatnonzero(kept)]
    return {"task": task, "method": method, "error": error, "sparsity": float((w == 0).mean()),
            "kept": kept, "relevant_kept": sum(j in kept for j in support), "relevant": len(support),
            "irrelevant_kept": sum(j not in support for j in kept), "seconds": seconds, "epochs": epochs,
            "iterations": iterations, "divergences": int(r.sample_stats["diverging"].sum())}


def table(results: list[dict], task: str, out: Path) -> str:
    metric = "test MSE" if task == "regression" else "test accuracy"
    best = "1.0 (the noise variance)" if task == "regression" else "-"
    lines = [f"{task}: {metric} of the ensemble mean, first-layer sparsity (weights exactly 0) and the inputs "
             f"kept. Paper: keeps exactly the relevant inputs, prunes the rest; best possible {metric}: {best}.", "",
             f"| method | {metric} | sparsity | relevant inputs kept | irrelevant inputs kept | kept (0-based) "
             f"| seconds |", "|---|---|---|---|---|---|---|"]
    rows = [r for r in results if r["task"] == task]
    for r in rows:
        kept = " ".join(map(str, r["kept"][:12])) + (" ..." if len(r["kept"]) > 12 else "")
        lines.append(f"| {r['method']} | {r['error']:.3f} | {r['sparsity']:.3f} | {r['relevant_kept']}/"
                     f"{r['relevant']} | {r['irrelevant_kept']} | {kept or '-'} | {r['seconds']:.0f} |")
    text = "\n".join(lines) + "\n"
    (out / f"{task}.md").write_text(text)
    import pandas as pd

    pd.DataFrame([{**r, "kept": " ".join(map(str, r["kept"]))} for r in rows]).to_csv(out / f"{task}.csv",
                                                                                     index=False)
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="the paper's 3000 epochs")
    group.add_argument("--smoke", action="store_true", help="a tiny run (seconds): 12 epochs of 2048 points")
    parser.add_argument("--out", default="out/paper004")
    parser.add_argument("--part", choices=("all", "regression", "classification"), default="all")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default 600; --full 3000)")
    parser.add_argument("--n-train", type=int, default=None, help="training points (default the paper's 10240)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes for the independent runs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 3000 if args.full else 12 if args.smoke else 600
    if args.n_train is None:
        args.n_train = 2048 if args.smoke else 10240
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = ("regression", "classification") if args.part == "all" else (args.part,)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(one_run, task, m, args.epochs, args.n_train, args.seed, args.threads) for task in tasks
                   for m in METHODS]
        results = [f.result() for f in futures]
    for task in tasks:
        print(table(results, task, out))
    timing = {"workers": args.workers, "cpu_count": os.cpu_count(), "total_s": time.perf_counter() - start,
              "runs_s": {f"{r['task']} {r['method']}": r["seconds"] for r in results}}
    (out / "timing.json").write_text(json.dumps(timing, indent=2))
    print(f"wrote {out}/ in {timing['total_s']:.0f} s")


if __name__ == "__main__":
    main()
