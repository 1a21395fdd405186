"""Paper 001: adaptive empirical Bayes with spike-and-slab priors (SGLD-SA / SGHMC-SA).

Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for sparse
deep learning", NeurIPS. Two experiments:

1. **Large-p-small-n regression** (Sec. 5.1, Table 1, Fig. 1): ``linear_p1000``
   (n = 100, p = 1000, beta = (3, 2, 1, 0, ...), noise variance 3, 50 test points).
   SGLD-SA vs SGLD-EM (omega = 1) vs SGLD (the same hierarchical model with the
   latent variables fixed: sigma and delta at their initial values, the
   indicator marginalised), for v0 in {0.01, 0.1} and sigma_init in {2, 1};
   v1 = 10, delta_init = 0.5, a = 1, b = p, nu = lambda = 1; step size
   eps_k = 0.001 k^(-1/3), omega_k = 10 (k + 1000)^(-0.7), minibatches of 50.
   Test MAE / MSE of the posterior mean, and a figure of beta_1..3's traces and
   posterior densities per method (v0 = 0.1, sigma = 1, the paper's Fig. 1).
2. **Classification with a small CNN on scikit-learn digits** (Sec. 5.2-5.3):
   SGHMC-SA (spike-and-slab prior on the first dense layer, adapted) vs SGHMC
   (the same prior, fixed) vs the same network trained by Adam (lr 0.001, no
   prior: the paper's "Vanilla"). Test accuracy of the posterior mean and
   accuracy under the fast gradient sign attack
   ``x_adv = clip(x - eps * sign(d/dx max_y log P(y | x)), 0, 1)`` on pixels in
   [0, 1], eps = 0.1 ... 0.5 (the paper's Fig. 2). Beside them, optimise then
   sample (``run(..., warm_start="ensemble")``): ``cls_members`` MAP fits of the
   spike-and-slab network (AdamW, validation split, early stopping), then
   ``cls_chains`` short SGHMC-SA chains from each ("SGHMC-SA, ensemble start"), and
   the members alone ("Ensemble (members alone)", a deep ensemble). Every method's
   posterior predictive is scored on the test split (accuracy, NLL, ECE), and the
   SG-MCMC runs' convergence is judged within each member in function space
   (``bnnzoo.diagnostics.members.member_mixing``: split R-hat of the test points'
   class probabilities on each member's chains; a chain started at random is its own
   member; modes visited).

Default sizes run in a few minutes on 2 CPU cores (the regression's 12 runs go
to ``--workers`` processes); ``--full`` uses the paper's iteration counts
(500,000 SGLD iterations per regression run; 1000 epochs for the CNN).

    python examples/paper001_sgld_sa.py                 # -> out/paper001/
    python examples/paper001_sgld_sa.py --full --out out/paper001_full
    python examples/paper001_sgld_sa.py --smoke --workers 1 --out out/paper001_smoke   # seconds: checks the script

Writes ``regression.md/.csv``, ``classification.md/.csv``, ``coefficients.png``,
``hyperparameters.png``, ``adversarial.png`` and ``timing.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from bnnzoo.diagnostics.members import RHAT_WITHIN

#: Table 1 of the paper: MAE / MSE on the test set, per (v0, sigma_init)
PAPER_TABLE1 = {
    "SGLD-SA": ["1.89/5.56", "1.72/5.64", "1.48/3.51", "1.54/4.42"],
    "SGLD-EM": ["3.49/19.31", "2.23/8.22", "2.23/19.28", "2.07/6.94"],
    "SGLD": ["15.85/416.39", "15.85/416.39", "11.86/229.38", "7.72/88.90"],
}
SETTINGS = [(0.01, 2.0), (0.1, 2.0), (0.01, 1.0), (0.1, 1.0)]  # (v0, sigma_init), the paper's column order
METHODS = ("SGLD-SA", "SGLD-EM", "SGLD")
#: Table 2 of the paper (MNIST, no data augmentation): test accuracy in %
PAPER_TABLE2_MNIST = {"SGHMC-SA": 99.59, "SGHMC": 99.47, "Adam (Vanilla)": 99.31}
#: the optimise-then-sample rows (not in the paper)
ENSEMBLE_START, MEMBERS_ALONE = "SGHMC-SA, ensemble start", "Ensemble (members alone)"
EPSILONS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
#: sizes: default, --full (the paper's iteration counts) and --smoke (seconds)
#: cls_members MAP members of cls_member_epochs at most, then cls_chains SGHMC-SA chains from each for
#: cls_ens_epochs epochs (half warm-up), cls_ens_draws draws kept per chain
ENSEMBLE = dict(cls_members=4, cls_chains=2, cls_member_epochs=200, cls_ens_epochs=20, cls_ens_draws=50)
DEFAULT = dict(reg_iterations=10_000, reg_draws=1000, cls_epochs=100, cls_draws=100, cls_seeds=3, **ENSEMBLE)
FULL = dict(DEFAULT, reg_iterations=500_000, cls_epochs=1000, cls_ens_epochs=100, cls_ens_draws=100)
SMOKE = dict(reg_iterations=200, reg_draws=20, cls_epochs=1, cls_draws=5, cls_seeds=2, cls_members=2, cls_chains=2,
             cls_member_epochs=3, cls_ens_epochs=1, cls_ens_draws=5)


def _setup_torch() -> None:
    torch.set_num_threads(1)


# ------------------------------------------------------------ regression
def write_table(out: Path, name: str, lines: list[str], rows: list[dict]) -> str:
    """``<name>.md`` (the markdown ``lines``) and ``<name>.csv`` (``rows``) under ``out``; the markdown text."""
    import pandas as pd

    text = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(text)
    pd.DataFrame(rows).to_csv(out / f"{name}.csv", index=False)
    return text


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def regression_spec(p: int, v0: float, sigma: float, learned_noise: bool):
    from bnnzoo.models import BNNSpec, Dense, GaussianLikelihood, SpikeAndSlab

    likelihood = GaussianLikelihood("learned") if learned_noise else GaussianLikelihood(sigma)
    return BNNSpec(layers=[Dense(1, bias=False)], input_dim=p,
                   prior=SpikeAndSlab(v0=v0, v1=10.0, sigma=sigma, inclusion_prob=0.5),
                   likelihood=likelihood, name="sparse_linear")


def regression_run(method: str, v0: float, sigma: float, iterations: int, num_draws: int, seed: int) -> dict:
    """One cell of Table 1: returns the test errors and beta_1..3's draws."""
    _setup_torch()
    from bnnzoo.data import load
    from bnnzoo.inference import run

    data = load("linear_p1000", seed=seed)
    p = data.input_dim
    warmup = iterations // 5
    thin = max(1, (iterations - warmup) // num_draws)
    common = dict(num_samples=num_draws, warmup_steps=warmup, num_chains=1, seed=seed, step_size=1e-3,
                  schedule="polynomial", decay_power=1 / 3, batch_size=50, thin=thin, init_radius=0.1)
    start, cpu = time.perf_counter(), time.process_time()
    if method == "SGLD":  # latent variables fixed: sigma (noise and prior scale) and delta at their initial values
        r = run(regression_spec(p, v0, sigma, learned_noise=False), data, engine="sgld", **common)
    else:
        mode = "sa" if method == "SGLD-SA" else "em"
        r = run(regression_spec(p, v0, sigma, learned_noise=True), data, engine="sgld_sa", mode=mode,
                sa_scale=10.0, sa_offset=1000.0, sa_power=0.7, beta_a=1.0, ig_nu=1.0, ig_lambda=1.0, **common)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    w = r.samples["layers.0.weight"][:, :, 0, :]  # [chain, draw, p]
    prediction = r.predict(data.x_test)[..., 0].mean((0, 1))
    y = data.y_test.numpy()
    out = {
        "method": method, "v0": v0, "sigma": sigma, "seconds": seconds, "cpu_seconds": cpu, "iterations": iterations,
        "mae": float(np.abs(prediction - y).mean()), "mse": float(((prediction - y) ** 2).mean()),
        "beta123": w[0, :, :3], "beta_mean": w.mean((0, 1)), "divergences": int(r.sample_stats["diverging"].sum()),
    }
    if method != "SGLD":
        stats = r.sample_stats
        out["sigma_trace"] = stats["sigma[layers.0.weight]"][0]
        out["delta_trace"] = stats["delta[layers.0.weight]"][0]
        rho = r.inclusion_prob["layers.0.weight"][0, 0]
        out["selected"] = [int(j) for j in np.flatnonzero(rho > 0.5)]
    return out


def regression_experiment(args, pool) -> list[dict]:
    jobs = [(m, v0, s) for (v0, s) in SETTINGS for m in METHODS]
    futures = [pool.submit(regression_run, m, v0, s, args.reg_iterations, args.reg_draws, args.seed)
               for m, v0, s in jobs]
    return [f.result() for f in futures]


def regression_tables(results: list[dict], out: Path) -> str:
    header = "| method | " + " | ".join(f"v0={v0}, σ={s:g}" for v0, s in SETTINGS) + " |"
    rule = "|---" * (len(SETTINGS) + 1) + "|"
    lines = ["Test MAE / MSE of the posterior mean on the 50 test points. "
             "Each cell: measured (paper's Table 1).", "", header, rule]
    rows = []
    for method in METHODS:
        cells = []
        for i, (v0, s) in enumerate(SETTINGS):
            r = next(r for r in results if r["method"] == method and r["v0"] == v0 and r["sigma"] == s)
            cells.append(f"{r['mae']:.2f}/{r['mse']:.2f} ({PAPER_TABLE1[method][i]})")
            rows.append({"method": method, "v0": v0, "sigma_init": s, "mae": r["mae"], "mse": r["mse"],
                         "paper_mae_mse": PAPER_TABLE1[method][i], "seconds": r["seconds"],
                         "iterations": r["iterations"], "divergences": r["divergences"],
                         "beta1_mean": r["beta_mean"][0], "beta2_mean": r["beta_mean"][1],
                         "beta3_mean": r["beta_mean"][2],
                         "selected": " ".join(map(str, r.get("selected", []))) if "selected" in r else ""})
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Posterior means of beta_1..3 (truth 3, 2, 1) and the coefficients with inclusion "
              "probability > 0.5 (0-based):", "",
              "| method | v0 | σ_init | β1 | β2 | β3 | selected |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['method']} | {row['v0']} | {row['sigma_init']:g} | {row['beta1_mean']:.2f} | "
                     f"{row['beta2_mean']:.2f} | {row['beta3_mean']:.2f} | {row['selected'] or '-'} |")
    return write_table(out, "regression", lines, rows)


def regression_figures(results: list[dict], out: Path) -> None:
    plt = pyplot()

    picked = {r["method"]: r for r in results if r["v0"] == 0.1 and r["sigma"] == 1.0}
    colours = {"SGLD-SA": "tab:red", "SGLD-EM": "tab:blue", "SGLD": "tab:green"}
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for j, truth in enumerate((3.0, 2.0, 1.0)):
        for method in METHODS:
            draws = picked[method]["beta123"][:, j]
            axes[0, j].plot(draws, lw=0.6, color=colours[method], label=method)
            axes[1, j].hist(draws, bins=40, density=True, alpha=0.45, color=colours[method], label=method)
        for ax in axes[:, j]:
            (ax.axhline if ax in axes[0] else ax.axvline)(truth, color="k", ls="--", lw=1)
        axes[0, j].set_title(f"β{j + 1} trace (truth {truth:g})")
        axes[1, j].set_title(f"β{j + 1} posterior density")
        axes[0, j].set_xlabel("draw")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("linear_p1000, v0 = 0.1, σ_init = 1 (paper 001, Fig. 1 a-c)")
    fig.tight_layout()
    fig.savefig(out / "coefficients.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for method in ("SGLD-SA", "SGLD-EM"):
        axes[0].plot(picked[method]["sigma_trace"], color=colours[method], label=method)
        axes[1].semilogy(picked[method]["delta_trace"], color=colours[method], label=method)
    axes[0].set_title("σ (noise sd and prior scale)")
    axes[1].set_title("δ (prior inclusion probability)")
    for ax in axes:
        ax.set_xlabel("draw")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "hyperparameters.png", dpi=110)
    plt.close(fig)


# -------------------------------------------------------- classification
def cnn_spec(sparse_prior):
    from bnnzoo.models import BNNSpec, Categorical, Conv2d, Dense, Gaussian

    return BNNSpec(
        layers=[Conv2d(8, 3, padding=1, activation="relu", pool=2), Dense(64, "relu"), Dense(10)],
        input_shape=(1, 8, 8), prior=Gaussian(1.0), priors={"layers.1.weight": sparse_prior},
        likelihood=Categorical(), name="digits_cnn")


def _pixels(data):
    """Standardised inputs <-> pixels in [0, 1] (digits are 0..16)."""
    mean = torch.as_tensor(data.meta["mean"], dtype=torch.get_default_dtype())
    std = torch.as_tensor(data.meta["std"], dtype=torch.get_default_dtype())
    return (lambda x: (x * std + mean) / 16.0), (lambda p: (p * 16.0 - mean) / std)


def fgsm_accuracy(model, values: dict, data, epsilons=EPSILONS) -> list[float]:
    """Accuracy of the predictive ``mean_s softmax(f(x; w_s))`` under the fast gradient sign
    attack on the pixels: ``x - eps * sign(d/dx log max_y P(y | x))``, clipped to [0, 1]."""
    to_pixels, to_inputs = _pixels(data)
    pixels = to_pixels(data.x_test).detach().requires_grad_(True)
    probs = torch.softmax(model.apply(values, to_inputs(pixels)), -1)
    probs = probs.mean(0) if probs.dim() == 3 else probs
    top = probs.max(-1).values.log().sum()
    (grad,) = torch.autograd.grad(top, pixels)
    accuracies = []
    with torch.no_grad():
        for eps in epsilons:
            adv = (pixels - eps * grad.sign()).clamp(0.0, 1.0)
            p = torch.softmax(model.apply(values, to_inputs(adv)), -1)
            p = p.mean(0) if p.dim() == 3 else p
            accuracies.append(float((p.argmax(-1) == data.y_test).double().mean()))
    return accuracies


def train_adam(data, epochs: int, seed: int, batch_size: int = 100, lr: float = 1e-3):
    """The "Vanilla" network: the same CNN, no prior, Adam on the mean cross-entropy."""
    from bnnzoo.models import BNN, Gaussian

    torch.manual_seed(seed)
    model = BNN(cnn_spec(Gaussian(1.0)))
    params = {}
    for name, shape in model.param_shapes.items():
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
        scale = math.sqrt(2.0 / fan_in) if name.endswith("weight") else 0.0
        params[name] = (torch.randn(shape) * scale).requires_grad_(True)
    optim = torch.optim.Adam(params.values(), lr=lr)
    n = data.n_train
    for _ in range(epochs):
        order = torch.randperm(n)
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            loss = torch.nn.functional.cross_entropy(model.apply(params, data.x_train[rows]), data.y_train[rows])
            optim.zero_grad()
            loss.backward()
            optim.step()
    return model, {k: v.detach() for k, v in params.items()}


def predictive_scores(model, values: dict, data) -> dict:
    """Test accuracy, NLL (mean -log of the predictive probability of the label) and ECE (10 bins) of
    the predictive ``mean_s softmax(f(x; w_s))`` (one point: its softmax)."""
    from bnnzoo.diagnostics.predictive import accuracy, expected_calibration_error

    with torch.no_grad():
        probs = torch.softmax(model.apply(values, data.x_test).double(), -1)
    probs = (probs.mean(0) if probs.dim() == 3 else probs).numpy()
    y = data.y_test.numpy()
    return {"accuracy": accuracy(probs, y), "nll": float(-np.log(np.maximum(probs[np.arange(len(y)), y], 1e-300)).mean()),
            "ece": expected_calibration_error(probs, y)}


def sa_state(r) -> dict:
    """SGHMC-SA's sparse layer at the end of the first chain: sigma, delta, the share of weights included."""
    stats = r.sample_stats
    rho = r.inclusion_prob["layers.1.weight"]
    return {"sigma": float(stats["sigma[layers.1.weight]"][0, -1]), "delta": float(stats["delta[layers.1.weight]"][0, -1]),
            "included": float((rho > 0.5).mean())}


def classification_run(method: str, epochs: int, num_draws: int, seed: int, ensemble: dict | None = None) -> list[dict]:
    """One method on one seed's split: its row (and, for the ensemble start, the members' row too)."""
    _setup_torch()
    from bnnzoo.data import load
    from bnnzoo.diagnostics.members import ensemble_run, member_mixing
    from bnnzoo.inference import run
    from bnnzoo.models import SpikeAndSlab

    data = load("digits", seed=seed)
    start, cpu = time.perf_counter(), time.process_time()
    alone = None
    if method == "Adam (Vanilla)":
        model, values = train_adam(data, epochs, seed)
        extra, chains = {}, 1
    else:
        batch = 100
        if method == ENSEMBLE_START:
            epochs, num_draws = ensemble["cls_ens_epochs"], ensemble["cls_ens_draws"]
        iterations = epochs * math.ceil(data.n_train / batch)
        warmup = iterations // 2
        thin = max(1, (iterations - warmup) // num_draws)
        prior = SpikeAndSlab(v0=0.1, v1=1.0, sigma=1.0, inclusion_prob=0.5)
        common = dict(num_samples=num_draws, warmup_steps=warmup, seed=seed, step_size=2e-5,
                      schedule="constant", friction=0.1, batch_size=batch, thin=thin)
        p = math.prod(cnn_spec(prior).param_shapes()["layers.1.weight"])
        sa = dict(sa_scale=1.0, sa_offset=1000.0, sa_power=0.75, beta_a=float(p), beta_b=float(p), ig_nu=1.0,
                  ig_lambda=1.0)
        if method == "SGHMC-SA":
            r = run(cnn_spec(prior), data, engine="sghmc_sa", num_chains=1, init_radius=0.2, **sa, **common)
            extra = sa_state(r)
        elif method == ENSEMBLE_START:  # optimise, then sample: MAP members, then SGHMC-SA chains from each
            r = run(cnn_spec(prior), data, engine="sghmc_sa", warm_start="ensemble",
                    num_members=ensemble["cls_members"], chains_per_member=ensemble["cls_chains"],
                    ensemble={"num_epochs": ensemble["cls_member_epochs"]}, progress=False, threads=None,
                    **sa, **common)
            extra = {**sa_state(r), "member_seconds": r.notes["member_seconds"],
                     "member_epochs": " ".join(str(m.epochs) for m in r.members)}
            alone = ensemble_run(r)
        else:
            r = run(cnn_spec(prior), data, engine="sghmc", num_chains=1, init_radius=0.2, **common)
            extra = {}
        extra["divergences"] = int(r.sample_stats["diverging"].sum())
        judged = member_mixing(r)  # within each member, in function space (a chain from a random point: its own)
        within = [v for v in (judged["rhat_f_within_max"], judged["rhat_lp_within_max"]) if not math.isnan(v)]
        extra.update(rhat_within=max(within, default=math.nan), modes=judged["modes"], verdict=judged["verdict"])
        model, values, chains = r.model, r.values(), r.num_chains
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    accuracies = fgsm_accuracy(model, values, data)
    scores = predictive_scores(model, values, data)
    rows = [{"method": method, "seed": seed, "seconds": seconds, "cpu_seconds": cpu, "epochs": epochs,
             "chains": chains, "accuracy": accuracies[0], "nll": scores["nll"], "ece": scores["ece"],
             "fgsm": accuracies, **extra}]
    if alone is not None:
        accuracies = fgsm_accuracy(alone.model, alone.values(), data)
        scores = predictive_scores(alone.model, alone.values(), data)
        rows.insert(0, {"method": MEMBERS_ALONE, "seed": seed, "seconds": alone.wall_time, "cpu_seconds": math.nan,
                        "epochs": ensemble["cls_member_epochs"], "chains": alone.num_draws,
                        "accuracy": accuracies[0], "nll": scores["nll"], "ece": scores["ece"], "fgsm": accuracies})
    return rows


CLASSIFIERS = ("SGHMC-SA", "SGHMC", "Adam (Vanilla)", MEMBERS_ALONE, ENSEMBLE_START)
#: the methods run (the members alone come out of ENSEMBLE_START's run)
RUN_CLASSIFIERS = ("SGHMC-SA", "SGHMC", "Adam (Vanilla)", ENSEMBLE_START)


def classification_experiment(args, pool) -> list[dict]:
    ensemble = {k: getattr(args, k) for k in ENSEMBLE}
    jobs = [(m, args.seed + i) for i in range(args.cls_seeds) for m in RUN_CLASSIFIERS]
    futures = [pool.submit(classification_run, m, args.cls_epochs, args.cls_draws, seed, ensemble)
               for m, seed in jobs]
    return [row for f in futures for row in f.result()]


def classification_tables(results: list[dict], out: Path) -> str:
    seeds = sorted({r["seed"] for r in results})
    eps_cols = " | ".join(f"FGSM ε={e}" for e in EPSILONS[1:])
    lines = [f"Test accuracy (%) on scikit-learn digits (360 test images), mean ± sd over {len(seeds)} seeds "
             "(data split and chain), and under the fast gradient sign attack; the paper's column is its "
             "MNIST result (Table 2, no data augmentation).", "",
             f"| method | accuracy | {eps_cols} | paper (MNIST) |", "|---" * (len(EPSILONS) + 2) + "|"]
    for method in CLASSIFIERS:
        acc = 100 * np.array([r["fgsm"] for r in results if r["method"] == method])  # [seed, eps]
        cells = [f"{m:.1f} ± {s:.1f}" for m, s in zip(acc.mean(0), acc.std(0, ddof=1) if len(acc) > 1 else 0 * acc[0])]
        lines.append(f"| {method} | {' | '.join(cells)} | {PAPER_TABLE2_MNIST.get(method, '–')} |")
    lines += ["", f"The posterior predictive on the test split, mean ± sd over {len(seeds)} seeds: accuracy (%), NLL "
              "(mean −log predictive probability of the label), ECE (10 bins); convergence judged within each "
              "member in function space: the largest split R-hat over the test points' class probabilities and "
              "lp on one member's chains (a chain started at random is its own member; range over the seeds; "
              f"converged at ≤ {RHAT_WITHIN}) and the modes the members visit (per seed). Chains: per run "
              "(the members alone: members).", "",
              "| method | chains | accuracy | NLL | ECE | within-member R-hat | modes | seconds |",
              "|---|---|---|---|---|---|---|---|"]
    for method in CLASSIFIERS:
        mine = [r for r in results if r["method"] == method]

        def spread(key, scale=1.0, digits=3):
            v = scale * np.array([r[key] for r in mine], dtype=float)
            return f"{v.mean():.{digits}f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.{digits}f}"

        rhat = [r["rhat_within"] for r in mine if "rhat_within" in r]
        rhat_cell = f"{min(rhat):.2f}–{max(rhat):.2f}" if rhat else "–"
        modes = " ".join(str(r["modes"]) for r in mine if "modes" in r) or "–"
        lines.append(f"| {method} | {mine[0]['chains']} | {spread('accuracy', 100, 1)} | {spread('nll')} | "
                     f"{spread('ece')} | {rhat_cell} | {modes} | {np.mean([r['seconds'] for r in mine]):.0f} |")
    rows = [{"method": r["method"], "seed": r["seed"], "chains": r["chains"], "accuracy": r["accuracy"],
             "nll": r["nll"], "ece": r["ece"], **{f"fgsm_{e}": a for e, a in zip(EPSILONS, r["fgsm"])},
             "paper_mnist_accuracy": PAPER_TABLE2_MNIST.get(r["method"], math.nan) / 100,
             "seconds": r["seconds"], "epochs": r["epochs"],
             **{k: r[k] for k in ("sigma", "delta", "included", "divergences", "rhat_within", "modes", "verdict",
                                  "member_seconds", "member_epochs") if k in r}}
            for r in results]
    verdicts = [f"{r['method']}, seed {r['seed']}: {r['verdict']}" for r in results if "verdict" in r]
    lines += ["", "Verdicts: " + "; ".join(verdicts) + "."]
    members = [r for r in results if "member_seconds" in r]
    if members:
        lines += ["", f"{ENSEMBLE_START}: per seed, the members' training took "
                  + "; ".join(f"{r['member_seconds']:.0f} s ({r['member_epochs']} epochs)" for r in members)
                  + " of the run's seconds."]
    sa = [r for r in results if "sigma" in r]
    if sa:
        lines += ["", "SGHMC-SA's sparse layer (layers.1.weight, 64 x 128) at the end (first chain), per run: "
                  + "; ".join(f"{r['method']}, seed {r['seed']}: σ = {r['sigma']:.3g}, δ = {r['delta']:.3g}, "
                              f"{100 * r['included']:.1f}% of the weights with inclusion probability > 0.5"
                              for r in sa) + "."]
    return write_table(out, "classification", lines, rows)


def classification_figure(results: list[dict], out: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in CLASSIFIERS:
        acc = 100 * np.array([r["fgsm"] for r in results if r["method"] == method])
        ax.errorbar(EPSILONS, acc.mean(0), yerr=acc.std(0) if len(acc) > 1 else None, marker="o", capsize=3,
                    label=method)
    ax.set_xlabel("FGSM ε (pixels in [0, 1])")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("digits CNN under adversarial attack (paper 001, Fig. 2)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "adversarial.png", dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ main
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="the paper's iteration counts")
    group.add_argument("--smoke", action="store_true", help="a tiny run (seconds): checks the script, not the paper")
    parser.add_argument("--out", default="out/paper001")
    parser.add_argument("--part", choices=("all", "regression", "classification"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="processes for the independent runs")
    parser.add_argument("--reg-iterations", type=int, default=None,
                        help="SGLD iterations per regression run (default 10000; --full 500000)")
    parser.add_argument("--reg-draws", type=int, default=None, help="draws kept per regression run (default 1000)")
    parser.add_argument("--cls-epochs", type=int, default=None, help="CNN epochs (default 100; --full 1000)")
    parser.add_argument("--cls-draws", type=int, default=None, help="draws kept per SG-MCMC CNN run (default 100)")
    parser.add_argument("--cls-seeds", type=int, default=None, help="seeds (data split and chain) per CNN method "
                        "(default 3)")
    parser.add_argument("--cls-members", type=int, default=None, help="MAP members of the ensemble start (default 4)")
    parser.add_argument("--cls-chains", type=int, default=None, help="SGHMC-SA chains per member (default 2)")
    parser.add_argument("--cls-member-epochs", type=int, default=None,
                        help="most epochs of a member's fit (early stopping; default 200)")
    parser.add_argument("--cls-ens-epochs", type=int, default=None,
                        help="SGHMC-SA epochs from the members, half warm-up (default 20)")
    parser.add_argument("--cls-ens-draws", type=int, default=None, help="draws kept per ensemble-started chain "
                        "(default 50)")
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else FULL if args.full else DEFAULT
    for key, value in size.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    timing = {"workers": args.workers, "cpu_count": os.cpu_count()}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        if args.part in ("all", "regression"):
            t = time.perf_counter()
            results = regression_experiment(args, pool)
            print(regression_tables(results, out))
            regression_figures(results, out)
            timing["regression_s"] = time.perf_counter() - t
            timing["regression_runs_s"] = {f"{r['method']} v0={r['v0']} sigma={r['sigma']}": r["seconds"]
                                           for r in results}
            timing["regression_cpu_s"] = sum(r["cpu_seconds"] for r in results)
        if args.part in ("all", "classification"):
            t = time.perf_counter()
            results = classification_experiment(args, pool)
            print(classification_tables(results, out))
            classification_figure(results, out)
            timing["classification_s"] = time.perf_counter() - t
            timing["classification_runs_s"] = {f"{r['method']} seed={r['seed']}": r["seconds"] for r in results}
            timing["classification_cpu_s"] = sum(r["cpu_seconds"] for r in results)
    timing["total_s"] = time.perf_counter() - start
    (out / "timing.json").write_text(json.dumps(timing, indent=2))
    print(f"wrote {out}/ in {timing['total_s']:.0f} s")


if __name__ == "__main__":
    main()
