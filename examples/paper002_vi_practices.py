#!/usr/bin/env python
"""Paper 002 (J. W. Book 2020, "Training Bayesian neural networks"): variational
training practices, reproduced on a LeNet-style Bayesian CNN sized for the 8x8
scikit-learn digits (1437 training / 360 validation images).

Five studies, each a set of mean-field SVI fits of the same network that differ
in one practice (all other settings: ``BASE`` below):

1. ``estimators``  score function vs total derivative vs path derivative (STL)
2. ``kl_weighting``  uniform (1/M), Blundell (lambda = 1/2), reverse (lambda = 2), none
3. ``optimizers``  SGD(+momentum), Adam, AdaBound, each with a small random search
   (values drawn from N(v, v/2) around the thesis' grid, table 5.2)
4. ``lr_ratio``  r = alpha_sigma / alpha_mu with alpha_mu = 1e-3 (Adam)
5. ``plateau``  ReduceLROnPlateau on the NLL (means) and the KL (scales) vs constant rates

Per epoch it records the validation accuracy and NLL (posterior predictive from
the guide), the training NLL and KL (epoch means) and the learning rates.

Usage::

    python examples/paper002_vi_practices.py            # default: 20 epochs, 2 seeds; a few minutes on 2 cores
    python examples/paper002_vi_practices.py --full     # 60 epochs, 3 seeds, 10 search samples
    python examples/paper002_vi_practices.py --only estimators lr_ratio --epochs 5
    python examples/paper002_vi_practices.py --smoke --jobs 1 --out out/paper002_smoke   # seconds: checks the script

Writes to ``out/paper002/`` (``--out``): ``summary.md`` and ``summary.csv`` (one
row per configuration, final epoch, mean over seeds), ``epochs.csv`` (every
epoch of every run), ``<study>.png`` (validation accuracy, validation NLL and KL
over epochs) and ``optimizers_search.csv``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bnnzoo.data import load
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.inference.vi import VIOptions, fit_mean_field, num_batches
from bnnzoo.models import BNN, BNNSpec, Categorical, Conv2d, Dense, Gaussian

STUDIES = ("estimators", "kl_weighting", "optimizers", "lr_ratio", "plateau")

#: every run starts from these settings (thesis sec. 4.2: Kaiming-scaled Gaussian
#: priors, Kaiming-uniform means, a hand-set narrow initial sigma, Adam at 1e-3, batches of 100)
BASE = dict(optimizer="adam", lr=1e-3, schedule="constant", estimator="reparam", kl="auto",
            kl_weighting="uniform", init_loc="kaiming", init_rho=-6.0, batch_size=100)


def lenet_spec() -> BNNSpec:
    """LeNet-5 shrunk to 8x8 inputs: conv(6) pool conv(16) pool, dense 120-84-10, ReLU,
    max-pooling (as in the thesis), N(0, 2/fan_in) priors per layer."""
    layers = [Conv2d(6, 3, padding=1, activation="relu", pool=2),   # 6 x 4 x 4
              Conv2d(16, 3, padding=1, activation="relu", pool=2),  # 16 x 2 x 2
              Dense(120, "relu"), Dense(84, "relu"), Dense(10)]
    fan_in = [1 * 9, 6 * 9, 16 * 2 * 2, 120, 84]
    priors = {f"layers.{i}": Gaussian(math.sqrt(2.0 / f)) for i, f in enumerate(fan_in)}
    return BNNSpec(layers=layers, input_shape=(1, 8, 8), priors=priors, likelihood=Categorical(),
                   name="lenet_digits")


# ------------------------------------------------------------------ studies
def study_configs(study: str, rng: np.random.Generator, search_samples: int) -> list[tuple[str, dict]]:
    """``(label, overrides of BASE)`` for every configuration of a study."""
    if study == "estimators":
        return [("score function", dict(estimator="score", kl="mc", num_particles=2)),
                ("total derivative (MC KL)", dict(estimator="reparam", kl="mc")),
                ("path derivative / STL", dict(estimator="stl", kl="mc")),
                ("reparam, closed-form KL", dict(estimator="reparam", kl="auto"))]
    if study == "kl_weighting":
        return [("uniform 1/M", dict(kl_weighting="uniform")),
                ("Blundell (lambda=1/2)", dict(kl_weighting="blundell")),
                ("reverse (lambda=2)", dict(kl_weighting=2.0)),
                ("none (full KL per batch)", dict(kl_weighting="none"))]
    if study == "optimizers":
        return optimizer_search(rng, search_samples)
    if study == "lr_ratio":
        return [(f"r = {r:g}", dict(lr=1e-3, scale_lr=r * 1e-3)) for r in (0.01, 0.1, 1.0, 10.0)]
    if study == "plateau":
        # the thesis' fig. 5.11 (patience 1, factor 0.1) one decade higher: from 1e-3 no
        # plateau is met within a short run here, so the schedule would never act
        plateau = dict(lr=1e-2, schedule="plateau", plateau_patience=1, plateau_factor=0.1)
        return [("constant 1e-2", dict(lr=1e-2)),
                ("constant 1e-3", dict(lr=1e-3)),
                ("plateau NLL/KL from 1e-2", dict(plateau, plateau_metric="split")),
                ("plateau -ELBO from 1e-2", dict(plateau, plateau_metric="elbo"))]
    raise ValueError(f"study {study!r}: choose from {', '.join(STUDIES)}")


def _around(rng: np.random.Generator, values, low: float, high: float = math.inf) -> float:
    """A value drawn from N(v, v/2) around a random grid value v (thesis sec. 5.3), kept in [low, high]."""
    v = float(rng.choice(values))
    return float(np.clip(abs(rng.normal(v, v / 2)) if v > 0 else abs(rng.normal(0, 0.05)), low, high))


def optimizer_search(rng: np.random.Generator, samples: int) -> list[tuple[str, dict]]:
    """Random search: SGD (lr, momentum), Adam (lr, AMSGrad), AdaBound (lr, final lr)."""
    lrs = (1e-3, 1e-2, 1e-1)
    configs = []
    for k in range(samples):
        lr, mom = _around(rng, lrs, 1e-5), _around(rng, (0.0, 0.5, 0.9), 0.0, 0.99)
        configs.append((f"sgd #{k}", dict(optimizer={"kind": "sgd", "momentum": round(mom, 3)}, lr=lr)))
    for k in range(samples):
        lr, ams = _around(rng, lrs, 1e-5), bool(rng.integers(2))
        configs.append((f"adam #{k}", dict(optimizer="amsgrad" if ams else "adam", lr=lr)))
    for k in range(samples):
        lr, final = _around(rng, lrs, 1e-5), _around(rng, (1e-2, 1e-1), 1e-5)
        configs.append((f"adabound #{k}", dict(optimizer={"kind": "adabound", "final_lr": round(final, 5)}, lr=lr)))
    return configs


# ------------------------------------------------------------------ runs
class Workbench:
    """The data, the network and the evaluation shared by every run."""

    def __init__(self, eval_draws: int, seed: int = 0):
        self.data = load("digits", seed=seed)
        self.model = BNN(lenet_spec())
        self.potential = BNNPotential(self.model, self.data.x_train, self.data.y_train)
        self.eval_draws = eval_draws

    @property
    def num_data(self) -> int:
        return self.potential.num_data

    def evaluate(self, guide) -> tuple[float, float]:
        """Validation accuracy and NLL of the guide's posterior predictive (``eval_draws`` draws)."""
        theta = guide.sample(self.eval_draws)
        with torch.no_grad():
            f = self.model.apply(self.potential.constrain(theta), self.data.x_test)
            log_p = torch.logsumexp(torch.log_softmax(f, -1), 0) - math.log(self.eval_draws)
        y = self.data.y_test
        if not bool(torch.isfinite(log_p).all()):
            return math.nan, math.nan
        acc = float((log_p.argmax(-1) == y).double().mean())
        return acc, float(-log_p[torch.arange(len(y)), y].mean())

    def fit(self, study: str, label: str, overrides: dict, epochs: int, seed: int) -> list[dict]:
        """One fit; a row per epoch."""
        options = VIOptions(**{**BASE, **overrides,
                               "num_steps": epochs * num_batches(self.num_data, BASE["batch_size"])})
        rows: list[dict] = []
        start = time.perf_counter()

        def record(epoch, guide, summary):
            acc, nll = self.evaluate(guide)
            rows.append(dict(study=study, config=label, seed=seed, epoch=epoch + 1, val_acc=acc, val_nll=nll,
                             train_nll=summary["nll"] / self.num_data, kl=summary["kl"],
                             neg_elbo=-summary["elbo"] / self.num_data, lr_loc=summary["lr_loc"],
                             lr_scale=summary["lr_scale"], wall_s=time.perf_counter() - start))

        torch.manual_seed(seed)
        fit_mean_field(self.potential, options, callback=record)
        for row in rows:
            row["options"] = _describe(overrides)
        return rows


def _describe(overrides: dict) -> str:
    return ", ".join(f"{k}={v}" if not isinstance(v, float) else f"{k}={v:.3g}" for k, v in overrides.items())


# ------------------------------------------------------------------ output
SUMMARY_COLUMNS = ["val_acc", "best_val_acc", "val_nll", "train_nll", "kl", "neg_elbo", "wall_s"]


def summarise(epochs: pd.DataFrame) -> pd.DataFrame:
    """Final epoch of every run (best validation accuracy over epochs too), mean over seeds."""
    best = epochs.groupby(["study", "config", "seed"], sort=False)["val_acc"].max().rename("best_val_acc")
    last = epochs.sort_values("epoch").groupby(["study", "config", "seed"], sort=False).tail(1)
    last = last.set_index(["study", "config", "seed"]).join(best).reset_index()
    agg = last.groupby(["study", "config"], sort=False).agg(
        **{c: (c, "mean") for c in SUMMARY_COLUMNS}, val_acc_sd=("val_acc", "std"), seeds=("seed", "count"),
        options=("options", "first")).reset_index()
    order = {key: i for i, key in enumerate(dict.fromkeys(zip(epochs.study, epochs.config)))}
    return agg.iloc[np.argsort([order[k] for k in zip(agg.study, agg.config)], kind="stable")].reset_index(drop=True)


def optimizer_table(summary: pd.DataFrame, threshold: float = 0.15) -> pd.DataFrame:
    """Per optimizer: success rate (final validation accuracy above ``threshold``, as in the
    thesis' fig. 5.3), mean and best final accuracy over the search."""
    runs = summary[summary.study == "optimizers"].copy()
    if runs.empty:
        return runs
    runs["optimizer"] = runs.config.str.split(" #").str[0]
    ok = runs.val_acc > threshold
    table = runs.assign(ok=ok).groupby("optimizer", sort=False).agg(
        runs=("config", "count"), success_rate=("ok", "mean"),
        mean_val_acc=("val_acc", lambda a: float(np.nanmean(a[a > threshold])) if (a > threshold).any() else math.nan),
        best_val_acc=("val_acc", "max"), best_val_nll=("val_nll", "min"))
    best = runs.loc[runs.groupby("optimizer", sort=False).val_acc.idxmax().dropna()]
    table["best_config"] = best.set_index("optimizer").options
    return table.reset_index()


def markdown(df: pd.DataFrame, floatfmt: dict | None = None) -> str:
    floatfmt = floatfmt or {}
    cols = list(df.columns)

    def cell(c, v):
        if isinstance(v, float):
            if math.isnan(v):
                return "–"
            return format(v, floatfmt.get(c, ".4g"))
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(cols, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def plot_study(epochs: pd.DataFrame, study: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    part = epochs[epochs.study == study]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    metrics = [("val_acc", "validation accuracy"), ("val_nll", "validation NLL (per image)"),
               ("kl", "KL(q || p) (nats)")]
    colors = {}
    styles = ["-", "--", "-.", ":"]  # identical curves stay visible
    for k, (config, runs) in enumerate(part.groupby("config", sort=False)):
        mean = runs.groupby("epoch").mean(numeric_only=True)
        family = config.split(" #")[0]
        color = colors.setdefault(family, f"C{len(colors)}")
        search = study == "optimizers"
        for ax, (m, _) in zip(axes, metrics):
            ax.plot(mean.index, mean[m], color=color, lw=1.0 if search else 1.8, alpha=0.6 if search else 0.9,
                    ls="-" if search else styles[k % len(styles)], label=family if search else config)
    for ax, (m, title) in zip(axes, metrics):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[0].legend(unique.values(), unique.keys(), fontsize=8)
    fig.suptitle(f"paper 002, {study}: LeNet-style Bayesian CNN on 8x8 digits")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ main
_BENCH: Workbench | None = None


def _init_worker(eval_draws: int, threads: int) -> None:
    global _BENCH
    torch.set_num_threads(threads)
    _BENCH = Workbench(eval_draws)


def _run_task(task: tuple) -> list[dict]:
    return _BENCH.fit(*task)


def run_tasks(tasks: list[tuple], jobs: int, eval_draws: int, threads: int):
    """Every ``(study, label, overrides, epochs, seed)`` fit, in ``jobs`` processes; yields
    ``(index, rows)`` as fits finish (each fit is seeded, so results do not depend on ``jobs``)."""
    if jobs == 1:
        _init_worker(eval_draws, threads)
        for i, task in enumerate(tasks):
            yield i, _run_task(task)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                             initargs=(eval_draws, threads)) as pool:
        futures = {pool.submit(_run_task, task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="60 epochs, 3 seeds, 10 search samples per optimizer")
    group.add_argument("--smoke", action="store_true", help="1 epoch, 1 seed, 1 search sample: checks the script")
    parser.add_argument("--epochs", type=int, help="epochs per run (default 20, --full 60)")
    parser.add_argument("--seeds", type=int, help="seeds per configuration (default 2, --full 3)")
    parser.add_argument("--search", type=int, help="random-search samples per optimizer (default 4, --full 10)")
    parser.add_argument("--eval-draws", type=int, default=10, help="guide draws for the validation metrics")
    parser.add_argument("--only", nargs="+", choices=STUDIES, help="run only these studies")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="fits run in parallel processes (default: 2, or 1 on one core)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads per process (1 is fastest for this small network)")
    parser.add_argument("--out", default="out/paper002", help="output folder")
    args = parser.parse_args(argv)
    epochs = args.epochs or (60 if args.full else 1 if args.smoke else 20)
    seeds = args.seeds or (3 if args.full else 1 if args.smoke else 2)
    search = args.search or (10 if args.full else 1 if args.smoke else 4)
    for name, value in (("--epochs", epochs), ("--seeds", seeds), ("--search", search), ("--jobs", args.jobs),
                        ("--eval-draws", args.eval_draws), ("--threads", args.threads)):
        if value < 1:
            parser.error(f"{name} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    studies = args.only or STUDIES

    bench = Workbench(args.eval_draws)
    print(f"LeNet-style BNN: {bench.potential.dim} parameters, {bench.num_data} training images, "
          f"{num_batches(bench.num_data, BASE['batch_size'])} batches per epoch, {epochs} epochs, "
          f"{seeds} seed(s), {args.jobs} job(s)")
    rng = np.random.default_rng(2020)
    tasks = []
    for study in studies:
        # optimizer searches: one seed per sample (the search is the replication)
        for label, overrides in study_configs(study, rng, search):
            tasks += [(study, label, overrides, epochs, seed) for seed in range(1 if study == "optimizers" else seeds)]
    results: list = [None] * len(tasks)
    started = time.perf_counter()
    for i, run_rows in run_tasks(tasks, args.jobs, args.eval_draws, args.threads):
        results[i] = run_rows
        study, label, _, _, seed = tasks[i]
        last = run_rows[-1]
        print(f"  {study:12s} {label:28s} seed {seed}: val acc {last['val_acc']:.3f}  "
              f"val NLL {last['val_nll']:.3f}  KL {last['kl']:.0f}  ({last['wall_s']:.1f}s)", flush=True)
    total = time.perf_counter() - started
    rows = [row for run_rows in results for row in run_rows]

    epochs_df = pd.DataFrame(rows)
    epochs_df.to_csv(out / "epochs.csv", index=False)
    summary = summarise(epochs_df)
    summary.to_csv(out / "summary.csv", index=False)
    fmt = {"val_acc": ".3f", "best_val_acc": ".3f", "val_acc_sd": ".3f", "val_nll": ".3f", "train_nll": ".3f",
           "kl": ".0f", "neg_elbo": ".2f", "wall_s": ".1f", "success_rate": ".2f", "mean_val_acc": ".3f",
           "best_val_nll": ".3f"}
    text = ["# Paper 002: VI practices on a LeNet-style BNN (8x8 digits)\n",
            f"{bench.potential.dim} parameters; {bench.num_data} training / {len(bench.data.y_test)} validation "
            f"images; batches of {BASE['batch_size']}; {epochs} epochs; {seeds} seed(s); base settings "
            f"`{_describe(BASE)}`. Final epoch (mean over seeds); `val_*`: posterior predictive of "
            f"{args.eval_draws} guide draws; `train_nll`, `neg_elbo`: per training image; `kl` in nats. "
            f"Total {total:.0f}s.\n"]
    for study in studies:
        part = summary[summary.study == study].drop(columns=["study"])
        if study == "optimizers":
            text += [f"## {study}\n", markdown(optimizer_table(summary), fmt), "",
                     "All sampled configurations:\n", markdown(part, fmt), ""]
            part.to_csv(out / "optimizers_search.csv", index=False)
        else:
            text += [f"## {study}\n", markdown(part, fmt), ""]
        plot_study(epochs_df, study, out / f"{study}.png")
    (out / "summary.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    print(f"wrote {out}/summary.md, summary.csv, epochs.csv and {len(studies)} figures in {total:.0f}s")


if __name__ == "__main__":
    main()
