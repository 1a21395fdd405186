"""Figures of a run: trace, rank, energy, acceptance and step size, predictive band; and of
the acceptance studies of :mod:`bnnzoo.experiments.acceptance`, with the theory of
:mod:`bnnzoo.diagnostics.theory`.

Every function returns the ``matplotlib`` Figure and, given ``path``, saves it
there. Without a display (no ``MPLBACKEND`` set, pyplot not yet imported) the
non-interactive Agg backend is used.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
    matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import xarray as xr  # noqa: E402

from .predictive import map_draws  # noqa: E402
from .theory import theoretical_efficiency, theoretical_optimal_acceptance  # noqa: E402


def _save(fig, path) -> None:
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight", dpi=100)


def _figure_of(axes):
    first = np.ravel(np.asarray(axes, dtype=object))[0]
    return first.get_figure()


def _scalars(idata, var_names, max_vars: int, max_elements: int, include_lp: bool) -> xr.Dataset:
    """A few posterior scalars (``name[i, j]``) and ``lp`` as one ``(chain, draw)`` dataset."""
    posterior = idata.posterior
    if var_names is None:
        var_names = [str(k) for k in posterior.data_vars][:max_vars]
    elif isinstance(var_names, str):
        var_names = [var_names]
    unknown = [v for v in var_names if v not in posterior and v != "lp"]
    if unknown:
        raise ValueError(f"var_names: {unknown} not in the posterior; choose from {list(posterior.data_vars)}")
    out = {}
    for name in var_names:
        if name == "lp":
            continue
        da = posterior[name]
        inner = da.dims[2:]
        values = da.values.reshape(da.shape[:2] + (-1,))
        for k in range(min(values.shape[-1], max_elements)):
            index = np.unravel_index(k, da.shape[2:]) if inner else ()
            label = f"{name}[{', '.join(map(str, index))}]" if inner else name
            out[label] = (("chain", "draw"), values[..., k])
    stats = getattr(idata, "sample_stats", None)
    if (include_lp or "lp" in var_names) and stats is not None and "lp" in stats:
        out["lp"] = (("chain", "draw"), stats["lp"].values)
    if not out:
        raise ValueError("nothing to plot: no posterior variables selected")
    return xr.Dataset(out, coords={"chain": posterior["chain"].values, "draw": posterior["draw"].values})


def plot_trace(idata, var_names=None, *, max_vars: int = 3, max_elements: int = 4, include_lp: bool = True,
               path=None):
    """``az.plot_trace`` of a few scalars: the first ``max_elements`` elements of each of
    ``var_names`` (default: the first ``max_vars`` posterior variables), plus ``lp``."""
    data = _scalars(idata, var_names, max_vars, max_elements, include_lp)
    axes = az.plot_trace(data, compact=False, figsize=(10, 1.8 * len(data.data_vars)))
    fig = _figure_of(axes)
    fig.tight_layout()
    _save(fig, path)
    return fig


def plot_rank(idata, var_names=None, *, max_vars: int = 3, max_elements: int = 2, include_lp: bool = True,
              path=None):
    """``az.plot_rank`` (rank histograms per chain) of a few scalars and ``lp``."""
    data = _scalars(idata, var_names, max_vars, max_elements, include_lp)
    axes = az.plot_rank(data)
    fig = _figure_of(axes)
    _save(fig, path)
    return fig


def plot_energy(idata, path=None):
    """``az.plot_energy``: marginal energy vs. energy transition distributions (E-BFMI).

    Raises
    ------
    ValueError
        If the run has no ``energy`` statistic (only HMC/NUTS-type engines record it).
    """
    stats = getattr(idata, "sample_stats", None)
    if stats is None or "energy" not in stats:
        engine = idata.posterior.attrs.get("engine", "this run")
        raise ValueError(f"plot_energy: {engine} has no 'energy' sample stat (HMC/NUTS engines record it)")
    if not np.isfinite(stats["energy"].values).any():
        raise ValueError("plot_energy: the 'energy' sample stat is all NaN")
    ax = az.plot_energy(idata)
    fig = _figure_of(ax)
    _save(fig, path)
    return fig


def _rolling_mean(v: np.ndarray, window: int) -> np.ndarray:
    window = max(1, min(window, len(v)))
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def plot_acceptance(idata, window: int = 20, path=None):
    """Acceptance rate per chain over draws (rolling mean over ``window`` draws),
    and the step size per chain when recorded (warm-up adaptation included, at
    negative draw indices, when ``warmup_sample_stats`` exists)."""
    stats = getattr(idata, "sample_stats", None)
    if stats is None or "acceptance_rate" not in stats:
        raise ValueError("plot_acceptance: the run has no 'acceptance_rate' sample stat")
    warm = getattr(idata, "warmup_sample_stats", None)
    has_step = "step_size" in stats
    fig, axes = plt.subplots(2 if has_step else 1, 1, figsize=(8, 5 if has_step else 3), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    for c, chain in enumerate(stats["chain"].values):
        for ax, name in zip(axes, ("acceptance_rate", "step_size")):
            parts = []
            if warm is not None and name in warm:
                parts.append(warm[name].values[c].astype(float))
            parts.append(stats[name].values[c].astype(float))
            values = np.concatenate(parts)
            start = -len(parts[0]) if len(parts) == 2 else 0
            if name == "acceptance_rate":
                smooth = _rolling_mean(values, window)
                ax.plot(np.arange(len(smooth)) + start + (len(values) - len(smooth)), smooth, label=f"chain {chain}")
            else:
                ax.plot(np.arange(len(values)) + start, values, label=f"chain {chain}")
    axes[0].set_ylabel(f"acceptance rate\n(rolling mean, {window})")
    axes[0].set_ylim(-0.02, 1.02)
    if has_step:
        axes[1].set_ylabel("step size")
        axes[1].set_yscale("log")
    for ax in axes:
        ax.axvline(0, color="grey", lw=0.8, ls=":")
    axes[-1].set_xlabel("draw (negative: warm-up)")
    if len(stats["chain"]) <= 10:
        axes[0].legend(fontsize="small", ncol=2)
    fig.tight_layout()
    _save(fig, path)
    return fig


def plot_predictive_band(run, x_grid=None, *, prob: float = 0.9, num_points: int = 200, seed: int = 0,
                         path=None):
    """1-D regression: training/test points, the posterior mean of ``f`` and central
    ``prob`` bands of ``f`` (epistemic) and of ``y`` (with the likelihood's noise).

    Raises
    ------
    ValueError
        If the model is not a 1-input regression model.
    """
    model, data = run.model, run.data
    if model.task != "regression" or data.input_dim != 1:
        raise ValueError(f"plot_predictive_band: needs a 1-D regression run, got a {model.task} "
                         f"model with input_dim={data.input_dim}")
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1), got {prob!r}")
    if x_grid is None:
        xs = np.concatenate([np.asarray(data.x_train)[:, 0], np.asarray(data.x_test)[:, 0]])
        pad = 0.1 * (xs.max() - xs.min() or 1.0)
        x_grid = np.linspace(xs.min() - pad, xs.max() + pad, num_points)
    grid = np.asarray(x_grid, dtype=float).reshape(-1, 1)

    def f_and_y(values, f):
        likelihood = model.likelihood.distribution(f, values)
        return torch.stack([model.likelihood.mean(f), likelihood.sample()], 1)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        both = map_draws(model, run.samples, grid, f_and_y)
    both = both.reshape((-1,) + both.shape[2:])
    f, y = both[:, 0], both[:, 1]
    lo, hi = 100 * (1 - prob) / 2, 100 * (1 + prob) / 2
    fig, ax = plt.subplots(figsize=(8, 4))
    x = grid[:, 0]
    ax.fill_between(x, *np.percentile(y, [lo, hi], axis=0), color="C0", alpha=0.15,
                    label=f"{prob:.0%} band of y")
    ax.fill_between(x, *np.percentile(f, [lo, hi], axis=0), color="C0", alpha=0.35,
                    label=f"{prob:.0%} band of f")
    ax.plot(x, f.mean(0), color="C0", label="posterior mean")
    ax.scatter(np.asarray(data.x_test)[:, 0], np.asarray(data.y_test), s=8, color="grey", alpha=0.6, label="test")
    ax.scatter(np.asarray(data.x_train)[:, 0], np.asarray(data.y_train), s=12, color="k", label="train")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"{getattr(run, 'engine', '')}: posterior predictive")
    ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig


# ------------------------------------------------- acceptance experiments
def _groups(table, by: str | None):
    """``(label, rows)`` per value of column ``by`` (one unnamed group when None)."""
    if by is None:
        return [("", table)]
    if by not in table:
        raise ValueError(f"by={by!r}: no such column; columns: {', '.join(map(str, table.columns))}")
    return [(str(label), rows) for label, rows in table.groupby(by, sort=False)]


def plot_acceptance_sweep(table, by: str | None = None, path=None):
    """Acceptance (± one standard error) against the number of leapfrog steps, one
    line per step size, one panel per value of column ``by`` (e.g. ``"activation"``):
    paper 003's Fig. 1, from :func:`~bnnzoo.experiments.acceptance.acceptance_sweep`."""
    groups = _groups(table, by)
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.4), sharey=True, squeeze=False)
    for ax, (label, rows) in zip(axes[0], groups):
        for i, (step_size, cell) in enumerate(rows.groupby("step_size")):
            cell = cell.sort_values("num_steps")
            ax.errorbar(cell["num_steps"], cell["acceptance"], yerr=cell["acceptance_se"].fillna(0), marker="o",
                        ms=3, capsize=2, color=f"C{i}", label=f"step {step_size:g}")
        ax.set_title(label)
        ax.set_xlabel("leapfrog steps L")
        ax.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("mean acceptance")
    axes[0, -1].legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig


def plot_efficiency(curves, theory: bool = True, path=None):
    """Efficiency (accepted proposals per leapfrog step, ± one standard error) against
    acceptance, one line per curve, the empirical optimum dashed (paper 003,
    Fig. 2); with ``theory``, a second panel of the theoretical curves (scaled to
    peak 1) for smooth and piecewise-affine targets.

    ``curves``: one :class:`~bnnzoo.experiments.acceptance.EfficiencyCurve` or a
    mapping label -> curve.
    """
    if not isinstance(curves, dict):
        curves = {"": curves}
    fig, axes = plt.subplots(1, 2 if theory else 1, figsize=(10 if theory else 5.5, 3.6), squeeze=False)
    ax = axes[0, 0]
    for i, (label, curve) in enumerate(curves.items()):
        rows = curve.table.sort_values("acceptance")
        ax.errorbar(rows["acceptance"], rows["efficiency"], yerr=rows["efficiency_se"].fillna(0), marker="o", ms=3,
                    capsize=2, color=f"C{i}", label=f"{label} (optimum {curve.optimal_acceptance:.2f})".strip())
        ax.axvline(curve.optimal_acceptance, color=f"C{i}", ls="--", lw=0.8)
    travel = ", ".join(sorted({f"{c.travel_time:g}" for c in curves.values()}))
    ax.set_title(f"travel time T = {travel}")
    ax.set_xlabel("mean acceptance")
    ax.set_ylabel("efficiency (acceptance / L)")
    ax.set_xlim(-0.02, 1.02)
    ax.legend(fontsize="small")
    if theory:
        ax = axes[0, 1]
        a = np.linspace(0.005, 0.995, 199)
        for smooth, name in ((True, "smooth (Beskos et al. 2013)"), (False, "piecewise affine (paper 003)")):
            peak = theoretical_optimal_acceptance(smooth)
            line, = ax.plot(a, theoretical_efficiency(a, smooth), label=f"{name}: optimum {peak:.3f}")
            ax.axvline(peak, color=line.get_color(), ls="--", lw=0.8)
        ax.set_title("theory (i.i.d. target, d large)")
        ax.set_xlabel("acceptance")
        ax.set_ylabel("efficiency / max")
        ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig


def plot_acceptance_vs_size(table, by: str | None = None, path=None):
    """Acceptance (± one standard error) against the number of parameters, one panel
    for growing width and one for growing depth, one line per value of column
    ``by`` (paper 003, Fig. 3), from :func:`~bnnzoo.experiments.acceptance.size_sweep`."""
    architectures = [a for a in ("width", "depth") if (table["architecture"] == a).any()]
    if not architectures:
        raise ValueError("plot_acceptance_vs_size: the table has no 'width' or 'depth' rows")
    fig, axes = plt.subplots(1, len(architectures), figsize=(5 * len(architectures), 3.4), sharey=True,
                             squeeze=False)
    for ax, architecture in zip(axes[0], architectures):
        for i, (label, rows) in enumerate(_groups(table[table["architecture"] == architecture], by)):
            rows = rows.sort_values("num_params")
            ax.errorbar(rows["num_params"], rows["acceptance"], yerr=rows["acceptance_se"].fillna(0), marker="o",
                        ms=3, capsize=2, color=f"C{i}", label=label or None)
        ax.set_xscale("log")
        ax.set_xlabel("number of parameters")
        ax.set_title(f"growing {architecture}")
        ax.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("mean acceptance")
    if by is not None:
        axes[0, -1].legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path)
    return fig
