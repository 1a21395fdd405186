#!/usr/bin/env python
"""Paper 000 (ns-HMC training of a sparse CNN): proximal HMC against random-walk
MH, NUTS, and MAP training with an L1 penalty under Adam and SGD.

The paper trains a small CNN with an L1 / Laplace prior by non-smooth HMC and
compares it with random-walk MH, Adam and SGD (test accuracy, test loss,
computing time, train/test curves). Its public code is not a valid MCMC
(``docs/algorithms.md``, "Proximal HMC"); this script runs bnnzoo's exact
:class:`~bnnzoo.inference.ProximalHMC` instead, on scikit-learn's 8x8 digits
and a CNN in the spirit of the paper's (conv, pool, conv, pool, dense; the zoo's
``laplace_cnn``), with a Laplace prior on every weight and bias and a softmax
likelihood (the paper uses a quadratic loss on two-class medical images).

Methods (all start from the same kind of random point, uniform in (-r, r)):

* ``proximal_hmc``: ProximalHMC (Moreau force, lam = step/2, step size and
  diagonal mass adapted in warm-up), vectorized chains;
* ``rwmh``: random-walk Metropolis, scale adapted toward acceptance 0.234, run
  for ``num_steps`` times as many iterations as proximal HMC (one potential
  evaluation each, no gradient), thinned back to the same number of draws;
* ``nuts``: Pyro's NUTS on the same potential (capped tree depth), one chain after another;
* ``adam``, ``sgd``: MAP by minibatch Adam / SGD on the negative log posterior per
  point (the Laplace prior is an L1 penalty; its subgradient gives no exact zeros);
* ``prox-sgd``: MAP by proximal SGD (gradient step on the smooth part, then
  soft-thresholding): exact zeros;
* ``phmc_ensemble``: optimise, then sample (``bnnzoo.inference.run(...,
  warm_start="ensemble")``): ``ens_members`` MAP fits (AdamW on minibatches, a
  validation split, early stopping), then ``ens_chains`` short proximal-HMC chains
  from each; and, from the same run, ``ensemble``: the members alone (a deep
  ensemble, uniform over the MAP points).

MAP rows are the mean over ``map_restarts`` independent fits (``chains`` in the
table; ``acc_sd`` is the sd of their test accuracy: single fits vary a lot);
their curves show the first fit.

Metrics on the held-out test split: accuracy and NLL (the loss) of the
posterior predictive (MCMC: the mean of the class probabilities over the kept
draws of every chain; MAP: the point estimate), wall time (warm-up included;
the curves are computed afterwards and not timed), the fraction of weights
(``layers.<i>.weight``, not biases) with |w| < 1e-2 over the kept draws, and
the fraction exactly 0. MCMC rows add the mean acceptance, divergences, leapfrog
steps (gradient evaluations) per draw and function-space ESS / R-hat
(``bnnzoo.diagnostics.summary.mixing``). Every row has the expected calibration
error (``ece``, 10 bins) of its predictive; MCMC rows the largest split R-hat
within a member (``rhat_f_within``: over the test points' function values and
``lp``; a chain started from a random point is its own member) and the modes its
members visit (``bnnzoo.diagnostics.members.member_mixing``).

Usage::

    python examples/paper000_proximal_hmc.py            # default size: a few minutes on 2 cores
    python examples/paper000_proximal_hmc.py --full     # all 1437 training images, wider CNN, longer runs
    python examples/paper000_proximal_hmc.py --smoke --out out/paper000_smoke   # seconds: checks the script
    python examples/paper000_proximal_hmc.py --only proximal_hmc adam --out /tmp/p000

Writes to ``out/paper000/`` (``--out``): ``table.md`` and ``table.csv`` (one row per
method), ``curves.csv`` (every checkpoint of every method) and ``curves.png``
(train/test loss and accuracy per method).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyro
import torch
from pyro.infer import MCMC

from bnnzoo.data import load
from bnnzoo.diagnostics.members import ensemble_run, member_mixing
from bnnzoo.diagnostics.predictive import predictive_metrics
from bnnzoo.diagnostics.summary import mixing
from bnnzoo.results import split_mcmc
from bnnzoo.inference import NUTS, ProximalHMC, RandomWalkMH, Run, run as run_engine
from bnnzoo.inference.map_fit import map_fit
from bnnzoo.inference.potential import BNNPotential, initial_theta
from bnnzoo.models import BNN
from bnnzoo.models.zoo import laplace_cnn

METHODS = ("proximal_hmc", "rwmh", "nuts", "adam", "sgd", "prox-sgd", "phmc_ensemble")
NEAR_ZERO = 1e-2

DEFAULT = dict(channels=4, n_train=500, prior_scale=0.2, init_radius=0.3, chains=2,
               phmc_warmup=150, phmc_samples=150, num_steps=10,
               nuts_warmup=75, nuts_samples=75, nuts_tree_depth=5,
               map_epochs=150, map_restarts=3, batch_size=50, adam_lr=1e-2, sgd_lr=0.1, every=5,
               ens_members=4, ens_chains=2, ens_epochs=200, ens_warmup=100, ens_samples=100)
FULL = dict(DEFAULT, channels=8, n_train=None, chains=4, phmc_warmup=400, phmc_samples=400, num_steps=20,
            nuts_warmup=200, nuts_samples=200, nuts_tree_depth=6, map_epochs=300, every=10,
            ens_members=8, ens_warmup=200, ens_samples=200)
SMOKE = dict(DEFAULT, channels=2, phmc_warmup=10, phmc_samples=10, num_steps=5, nuts_warmup=5, nuts_samples=5,
             nuts_tree_depth=3, map_epochs=20, map_restarts=2, ens_members=2, ens_epochs=5, ens_warmup=5,
             ens_samples=5)


# ------------------------------------------------------------ evaluation
class Evaluator:
    """Loss (mean NLL per point) and accuracy on the train and test splits, for
    single parameter vectors and for running ensembles."""

    def __init__(self, model: BNN, potential: BNNPotential, data):
        self.model, self.potential = model, potential
        self.splits = {"train": (data.x_train, data.y_train), "test": (data.x_test, data.y_test)}

    def log_probs(self, theta: torch.Tensor, split: str) -> torch.Tensor:
        """Log class probabilities ``[S, N, K]`` (float64) for ``theta [S, D]`` (chunks of 64)."""
        x = self.splits[split][0]
        parts = []
        with torch.no_grad():
            for chunk in theta.split(64):
                values = self.potential.constrain(chunk)
                parts.append(torch.log_softmax(self.model.apply(values, x).double(), -1))
        return torch.cat(parts)

    def scores(self, log_probs: torch.Tensor, split: str) -> tuple[float, float]:
        """(loss, accuracy) of log class probabilities ``[N, K]``."""
        y = self.splits[split][1]
        return float(-log_probs[torch.arange(len(y)), y].mean()), float((log_probs.argmax(-1) == y).double().mean())


def weight_mask(potential) -> torch.Tensor:
    return torch.cat([torch.full((size,), name.endswith(".weight"))
                      for name, size in zip(potential.names, potential.sizes)])


def sparsity_columns(theta: torch.Tensor, mask: torch.Tensor) -> dict:
    w = theta[:, mask].abs()
    return {"near_zero_frac": float((w < NEAR_ZERO).double().mean()),
            "exact_zero_frac": float((w == 0).double().mean())}


# ------------------------------------------------------------------ MCMC
def run_kernel(kernel, potential, warmup: int, samples: int, every: int, batched: bool, initial=None) -> tuple:
    """Drive one ``MCMC`` run, keeping a snapshot ``[C, D]`` of the chains every ``every`` iterations
    (``batched``: the kernel's sites carry a leading chain dim)."""
    snapshots = []

    def hook(_kernel, params, stage, i):
        step = i + 1 + (warmup if stage.startswith("Sample") else 0)
        if step % every == 0:
            flat = potential.flatten({k: v.detach() for k, v in params.items()}, batch_ndim=int(batched))
            snapshots.append((step, flat.reshape(-1, potential.dim).clone()))

    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, initial_params=initial,
                transforms=potential.transforms, disable_progbar=True, hook_fn=hook)
    start = time.perf_counter()
    mcmc.run()
    return mcmc, time.perf_counter() - start, snapshots


def stack_runs(parts: list[tuple]) -> tuple:
    """Concatenate sequential single-chain runs: draws, stats, time, snapshots (chains side by side)."""
    draws = [split_mcmc(m) for m, _, _ in parts]
    samples = {k: np.concatenate([d.samples[k] for d in draws]) for k in draws[0].samples}
    stats = {k: np.concatenate([d.sample_stats[k] for d in draws]) for k in draws[0].sample_stats}
    wall = sum(t for _, t, _ in parts)
    snaps = [(s0[0], torch.cat([p[2][j][1] for p in parts])) for j, s0 in enumerate(parts[0][2])]
    return samples, stats, wall, snaps


def mcmc_method(name: str, cfg: dict, model, potential, data, seed: int) -> tuple[Run, list]:
    pyro.set_rng_seed(seed)
    chains, steps, every = cfg["chains"], cfg["num_steps"], cfg["every"]
    warmup, samples = cfg["phmc_warmup"], cfg["phmc_samples"]
    thin = 1
    if name == "proximal_hmc":
        kernel = ProximalHMC(potential=potential, num_steps=steps, num_chains=chains, init_radius=cfg["init_radius"])
        mcmc, wall, snaps = run_kernel(kernel, potential, warmup, samples, every, chains > 1)
        draws = split_mcmc(mcmc)
        samples_, stats = draws.samples, draws.sample_stats
    elif name == "rwmh":
        thin = steps
        kernel = RandomWalkMH(potential=potential, scale=0.01, num_chains=chains, init_radius=cfg["init_radius"])
        mcmc, wall, snaps = run_kernel(kernel, potential, warmup * thin, samples * thin, every * thin, chains > 1)
        draws = split_mcmc(mcmc)
        samples_ = {k: v[:, thin - 1::thin] for k, v in draws.samples.items()}
        stats = {k: v[:, thin - 1::thin] for k, v in draws.sample_stats.items()}
        snaps = [(s // thin, t) for s, t in snaps]  # x-axis in units of proximal-HMC iterations
    else:  # nuts, one chain after another
        warmup, samples = cfg["nuts_warmup"], cfg["nuts_samples"]
        parts = []
        for c in range(chains):
            theta0 = initial_theta(potential, 1, cfg["init_radius"])[0]
            kernel = NUTS(potential_fn=potential.potential_fn, max_tree_depth=cfg["nuts_tree_depth"],
                          target_accept_prob=0.8)
            parts.append(run_kernel(kernel, potential, warmup, samples, every, False,
                                    initial=potential.unflatten(theta0)))
        samples_, stats, wall, snaps = stack_runs(parts)
    options = {"num_chains": chains, "warmup_steps": warmup, "num_samples": samples, "thin": thin}
    return Run(samples_, stats, engine=name, kind="mcmc", model=model, data=data, wall_time=wall,
               options=options), snaps


def ensemble_method(cfg: dict, model, data, seed: int) -> Run:
    """Optimise, then sample: ``ens_members`` MAP members, then ``ens_chains`` proximal-HMC chains
    from each (``run(..., warm_start="ensemble")``; the members are in ``Run.members``)."""
    members = {"lr": cfg["adam_lr"], "num_epochs": cfg["ens_epochs"], "batch_size": cfg["batch_size"],
               "init_radius": cfg["init_radius"]}
    return run_engine(model, data, engine="proximal_hmc", warm_start="ensemble", num_members=cfg["ens_members"],
                      chains_per_member=cfg["ens_chains"], ensemble=members, num_samples=cfg["ens_samples"],
                      warmup_steps=cfg["ens_warmup"], num_steps=cfg["num_steps"], seed=seed, progress=False,
                      threads=None)


def ensemble_row(run: Run, potential, mask) -> dict:
    """The members of an ensemble-started ``run`` alone: a uniform mixture of their MAP points."""
    alone = ensemble_run(run)
    theta = potential.flatten({k: torch.as_tensor(v[0]) for k, v in alone.samples.items()}, batch_ndim=1)
    metrics = predictive_metrics(alone)
    row = {"method": "ensemble", "kind": "ensemble", "chains": len(run.members), "draws": 1,
           "wall_time_s": alone.wall_time, "test_accuracy": metrics["accuracy"], "acc_sd": math.nan,
           "test_nll": metrics["nll"], "ece": metrics["ece"], **sparsity_columns(theta, mask)}
    row.update(acceptance=math.nan, divergences=math.nan, leapfrog_per_draw=math.nan, ess_f_min=math.nan,
               rhat_f_max=math.nan, rhat_f_within=math.nan, modes=math.nan)
    return row


def mcmc_row(run: Run, potential, mask) -> tuple[dict, torch.Tensor]:
    theta = torch.as_tensor(np.concatenate(
        [run.samples[n].reshape(run.num_chains * run.num_draws, -1) for n in potential.names], -1),
        dtype=torch.get_default_dtype())
    row = {"method": run.engine, "kind": "mcmc", "chains": run.num_chains, "draws": run.num_draws,
           "wall_time_s": run.wall_time}
    metrics = predictive_metrics(run)
    row.update(test_accuracy=metrics["accuracy"], test_nll=metrics["nll"], ece=metrics["ece"])
    row.update(sparsity_columns(theta, mask))
    members = member_mixing(run)  # chains grouped by member (a chain started at random: its own member)
    within = [v for v in (members["rhat_f_within_max"], members["rhat_lp_within_max"]) if not math.isnan(v)]
    row.update(rhat_f_within=max(within, default=math.nan),
               modes=members["modes"], verdict=members["verdict"])
    stats = run.sample_stats
    row["acceptance"] = float(np.mean(stats["acceptance_rate"]))
    row["divergences"] = int(np.sum(stats["diverging"]))
    row["leapfrog_per_draw"] = float(np.mean(stats["n_steps"])) if "n_steps" in stats else math.nan
    mix = mixing(run)
    row.update(ess_f_min=mix["ess_f_min"], rhat_f_max=mix["rhat_f_max"], acc_sd=math.nan)
    return row, theta


def mcmc_curves(name: str, snaps: list, warmup: int, evaluator: Evaluator) -> list[dict]:
    """Per snapshot: the current draw's loss/accuracy (mean over chains) and, after
    warm-up, the running posterior-predictive ensemble of the snapshots so far."""
    rows, ensemble = [], {"train": None, "test": None}
    count = 0
    for step, theta in snaps:
        row = {"method": name, "x": step, "unit": "iteration", "warmup": step <= warmup}
        post = step > warmup
        count += post
        for split in ("train", "test"):
            log_probs = evaluator.log_probs(theta, split)
            scores = [evaluator.scores(lp, split) for lp in log_probs]
            row[f"{split}_loss"] = float(np.mean([s[0] for s in scores]))
            row[f"{split}_acc"] = float(np.mean([s[1] for s in scores]))
            if post:  # running mean of the class probabilities over the kept snapshots
                mean = log_probs.exp().mean(0)
                old = ensemble[split]
                ensemble[split] = mean if old is None else old + (mean - old) / count
                row[f"{split}_loss_ens"], row[f"{split}_acc_ens"] = evaluator.scores(
                    ensemble[split].clamp(min=1e-300).log(), split)
        rows.append(row)
    return rows


# ------------------------------------------------------------------- MAP
def map_method(name: str, cfg: dict, model, potential, data, evaluator: Evaluator, seed: int, curve: bool = True):
    """One MAP fit; its train/test curve every ``every`` epochs (if ``curve``)."""
    torch.manual_seed(seed)
    rows = []

    def record(epoch, theta):
        if epoch % cfg["every"] and epoch != cfg["map_epochs"]:
            return
        row = {"method": name, "x": epoch, "unit": "epoch", "warmup": False}
        for split in ("train", "test"):
            row[f"{split}_loss"], row[f"{split}_acc"] = evaluator.scores(evaluator.log_probs(theta[None], split)[0],
                                                                        split)
        rows.append(row)

    init = initial_theta(potential, 1, cfg["init_radius"])[0]
    lr = cfg["adam_lr"] if name == "adam" else cfg["sgd_lr"]
    fit = map_fit(potential, optimizer=name, lr=lr, num_epochs=cfg["map_epochs"], batch_size=cfg["batch_size"],
                  init=init, callback=record if curve else None)
    samples = {k: v.numpy()[None] for k, v in potential.constrain(fit.theta[None]).items()}  # [1, 1, ...]
    run = Run(samples, engine=name, kind="map", model=model, data=data, wall_time=fit.wall_time,
              options={"lr": lr, "epochs": cfg["map_epochs"], "batch_size": cfg["batch_size"]})
    return run, fit.theta[None], rows


def map_row(fits: list, mask) -> dict:
    """Mean over the restarts (``chains``) of every column; ``acc_sd`` their sd of test accuracy."""
    rows = []
    for run, theta, _ in fits:
        metrics = predictive_metrics(run)
        rows.append({"wall_time_s": run.wall_time, "test_accuracy": metrics["accuracy"], "test_nll": metrics["nll"],
                     "ece": metrics["ece"], **sparsity_columns(theta, mask)})
    frame = pd.DataFrame(rows)
    row = {"method": fits[0][0].engine, "kind": "map", "chains": len(fits), "draws": 1, **frame.mean().to_dict(),
           "acc_sd": float(frame.test_accuracy.std(ddof=1)) if len(fits) > 1 else math.nan}
    row.update(acceptance=math.nan, divergences=math.nan, leapfrog_per_draw=math.nan, ess_f_min=math.nan,
               rhat_f_max=math.nan, rhat_f_within=math.nan, modes=math.nan)
    return row


# ------------------------------------------------------------------ output
COLUMNS = ["method", "kind", "chains", "draws", "wall_time_s", "test_accuracy", "acc_sd", "test_nll", "ece",
           "near_zero_frac", "exact_zero_frac", "acceptance", "divergences", "leapfrog_per_draw", "ess_f_min",
           "rhat_f_max", "rhat_f_within", "modes"]


def markdown(table: pd.DataFrame) -> str:
    def cell(col, v):
        if isinstance(v, str):
            return v
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if col in ("chains", "draws", "divergences", "ess_f_min", "leapfrog_per_draw", "modes"):
            return f"{v:.0f}"
        if col == "wall_time_s":
            return f"{v:.1f}"
        return f"{v:.3f}"

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(table.columns, r)) + " |"
              for r in table.itertuples(index=False)]
    return "\n".join(lines)


def plot_curves(curves: pd.DataFrame, methods: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(methods), figsize=(3.2 * len(methods), 5.6), squeeze=False)
    for j, method in enumerate(methods):
        c = curves[curves.method == method]
        for i, metric in enumerate(("loss", "acc")):
            ax = axes[i, j]
            ax.plot(c.x, c[f"train_{metric}"], label="train (draw)" if c.unit.iloc[0] == "iteration" else "train")
            ax.plot(c.x, c[f"test_{metric}"], label="test (draw)" if c.unit.iloc[0] == "iteration" else "test")
            if f"test_{metric}_ens" in c and c[f"test_{metric}_ens"].notna().any():
                ax.plot(c.x, c[f"test_{metric}_ens"], "k--", label="test (posterior mean)")
                ax.axvline(c[c.warmup].x.max(), color="grey", lw=0.8, ls=":")
            if metric == "loss":
                ax.set_yscale("log")
                ax.set_title(method)
            ax.set_xlabel(c.unit.iloc[0])
            ax.set_ylabel("NLL per point" if metric == "loss" else "accuracy")
            if j == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------- main
def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="paper-like size (much longer)")
    group.add_argument("--smoke", action="store_true", help="a tiny run (seconds): checks the script, not the paper")
    parser.add_argument("--out", default="out/paper000", help="output folder")
    parser.add_argument("--only", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: each call is small, and extra threads only add "
                             "overhead, catastrophically so on a busy machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = FULL if args.full else SMOKE if args.smoke else DEFAULT
    size = "--full" if args.full else "--smoke" if args.smoke else "default size"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    data = load("digits", seed=args.seed, n_train=cfg["n_train"])
    model = BNN(laplace_cnn(channels=cfg["channels"], scale=cfg["prior_scale"]))
    potential = BNNPotential(model, data.x_train, data.y_train)
    evaluator, mask = Evaluator(model, potential, data), weight_mask(potential)
    print(f"{data.describe()}; laplace_cnn(channels={cfg['channels']}, scale={cfg['prior_scale']}): "
          f"{potential.dim} parameters", flush=True)

    rows, curves, verdicts, members = [], [], {}, {}
    for name in args.only:
        seed = args.seed * 100 + METHODS.index(name)
        if name in ("adam", "sgd", "prox-sgd"):
            fits = [map_method(name, cfg, model, potential, data, evaluator, seed + 10 * k, curve=k == 0)
                    for k in range(cfg["map_restarts"])]
            rows.append(map_row(fits, mask))
            curve = fits[0][2]
        elif name == "phmc_ensemble":
            run = ensemble_method(cfg, model, data, seed)
            rows.append(ensemble_row(run, potential, mask))
            row, _ = mcmc_row(run, potential, mask)
            row["method"] = name
            rows.append(row)
            verdicts[name] = row["verdict"]
            members[name] = run.notes.get("member_seconds", math.nan), [m.epochs for m in run.members]
            curve = []  # run() keeps no snapshots: no curve
        else:
            run, snaps = mcmc_method(name, cfg, model, potential, data, seed)
            row, _ = mcmc_row(run, potential, mask)
            rows.append(row)
            verdicts[name] = row["verdict"]
            warmup = cfg["nuts_warmup"] if name == "nuts" else cfg["phmc_warmup"]
            curve = mcmc_curves(name, snaps, warmup, evaluator)
        curves.extend(curve)
        r = rows[-1]
        print(f"  {r['method']:13s} acc {r['test_accuracy']:.3f}  nll {r['test_nll']:.3f}  "
              f"{r['wall_time_s']:.1f} s  near-zero {r['near_zero_frac']:.3f}", flush=True)

    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    table.to_csv(out / "table.csv", index=False)
    curves = pd.DataFrame(curves)
    curves.to_csv(out / "curves.csv", index=False)
    drawn = [m for m in args.only if m != "phmc_ensemble"]  # phmc_ensemble has no curve
    if drawn:
        plot_curves(curves, drawn, out / "curves.png")
    text = markdown(table)
    notes = [f"- {name}: {verdict}" for name, verdict in verdicts.items()]
    if "phmc_ensemble" in members:
        seconds, epochs = members["phmc_ensemble"]
        notes.append(f"- phmc_ensemble: {cfg['ens_members']} members x {cfg['ens_chains']} chains, "
                     f"{cfg['ens_warmup']} warm-up + {cfg['ens_samples']} draws per chain; the members took "
                     f"{seconds:.1f} s ({', '.join(map(str, epochs))} epochs) of its wall time")
    (out / "table.md").write_text(
        f"{data.describe()}; laplace_cnn(channels={cfg['channels']}, scale={cfg['prior_scale']}), "
        f"{potential.dim} parameters; {size}, seed {args.seed}\n\n{text}\n\n" + "\n".join(notes) + "\n")
    print(text)
    print(f"total {time.perf_counter() - start:.0f} s; wrote {out}/table.md, table.csv, curves.csv"
          + (", curves.png" if drawn else ""))
    return table


if __name__ == "__main__":
    main()
