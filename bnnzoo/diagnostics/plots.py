"""Figures of a run: trace, rank, energy, acceptance and step size (proposal scale), predictive
band; and of the acceptance studies of :mod:`bnnzoo.experiments.acceptance`, with the theory of
:mod:`bnnzoo.diagnostics.theory`.

Run figures look at identifiable quantities by default: the log density ``lp`` and the
network output ``f`` at a few test inputs (:func:`function_space`), never at every weight
(network weights can be permuted and sign-flipped, and ArviZ over every weight of a large
network takes minutes). They stay readable at many chains: traces overlay at most
``max_chains`` chains (their densities pool every chain), rank plots are one row per chain
in a heat map, energy plots pool the chains and give E-BFMI per chain, and the acceptance
figure draws the median and the 10-90% band over chains when there are many.

Every function returns the ``matplotlib`` Figure and, given ``path``, saves it
there. Without a display (no ``MPLBACKEND`` set, pyplot not yet imported) the
non-interactive Agg backend is used.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import xarray as xr  # noqa: E402

from . import _arviz  # noqa: E402
from .predictive import map_draws  # noqa: E402
from .theory import theoretical_efficiency, theoretical_optimal_acceptance  # noqa: E402

#: at most this many chains are drawn as separate lines; more are pooled or summarised
MAX_OVERLAID_CHAINS = 8
#: engines whose ``step_size`` statistic is a random-walk proposal scale, not a leapfrog step
PROPOSAL_SCALE_ENGINES = ("rwmh", "RandomWalkMH")


def _save(fig, path) -> None:
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight", dpi=100)


def _figure_of(axes):
    first = np.ravel(np.asarray(axes, dtype=object))[0]
    return first.get_figure()


# ------------------------------------------------------------------ sources
def _is_idata(source) -> bool:
    return hasattr(source, "posterior") and hasattr(source, "groups")


def _stats_of(source, warmup: bool = False) -> dict[str, np.ndarray]:
    """Per-draw statistics ``name -> [chain, draw]`` of a Run or an InferenceData."""
    if _is_idata(source):
        group = getattr(source, "warmup_sample_stats" if warmup else "sample_stats", None)
        return {} if group is None else {str(k): group[k].values for k in group.data_vars}
    return {k: np.asarray(v) for k, v in ((source.warmup_sample_stats if warmup else source.sample_stats) or {}).items()}


def _engine_of(source) -> str:
    if _is_idata(source):
        return str(source.posterior.attrs.get("engine", ""))
    return str(getattr(source, "engine", "") or "")


def spread_test_points(x_test, num_points: int = 3) -> np.ndarray:
    """Indices of ``num_points`` test inputs spread over the test set: for 1-D inputs at the
    10%..90% quantiles of ``x``, otherwise evenly spaced over the test set's order."""
    x = np.asarray(x_test)
    n = len(x)
    if n == 0 or num_points < 1:
        return np.zeros(0, dtype=int)
    order = np.argsort(x.reshape(n, -1)[:, 0], kind="stable") if x.ndim == 1 or x[0].size == 1 else np.arange(n)
    quantiles = np.linspace(0.1, 0.9, num_points) if num_points > 1 else np.array([0.5])
    picked = order[np.round(quantiles * (n - 1)).astype(int)]
    return np.array(list(dict.fromkeys(picked.tolist())), dtype=int)


def function_space(source, num_points: int = 3, include_lp: bool = True) -> xr.Dataset:
    """Identifiable scalars of a run as one ``(chain, draw)`` dataset: ``lp`` (when recorded) and
    the network output ``f`` at ``num_points`` test inputs spread over the test set
    (:func:`spread_test_points`), each named by its test index (and value, for 1-D inputs).

    ``source``: a Run (``f`` from ``run.predict``; for several outputs, the output of the class
    with the largest posterior-mean ``f`` at that input) or an InferenceData (its ``predictions``
    group's ``f_mean``, the predictive mean, when present).
    """
    out: dict[str, tuple] = {}
    stats = _stats_of(source)
    if include_lp and "lp" in stats:
        out["lp"] = (("chain", "draw"), np.asarray(stats["lp"], dtype=float))
    if _is_idata(source):
        predictions = getattr(source, "predictions", None)
        if predictions is not None and "f_mean" in predictions:
            f = predictions["f_mean"].values
            for i in spread_test_points(np.arange(f.shape[2]), num_points):
                values = f[:, :, i]
                name = f"f_mean[test {i}]"
                if values.ndim == 3:
                    k = int(values.mean((0, 1)).argmax())
                    values, name = values[..., k], f"f_mean[test {i}, class {k}]"
                out[name] = (("chain", "draw"), values.astype(float))
        chains, draws = source.posterior.sizes["chain"], source.posterior.sizes["draw"]
    else:
        data = getattr(source, "data", None)
        x_test = None if data is None else getattr(data, "x_test", None)
        if x_test is not None and getattr(source, "model", None) is not None and num_points > 0:
            x = x_test.detach().cpu().numpy() if torch.is_tensor(x_test) else np.asarray(x_test)
            index = spread_test_points(x, num_points)
            f = source.predict(x[index])  # [chain, draw, k, out]
            one_d = x.ndim == 1 or x[0].size == 1
            for j, i in enumerate(index):
                values = f[:, :, j].reshape(f.shape[:2] + (-1,))
                at = f"x={float(x[i].ravel()[0]):.3g}, test {i}" if one_d else f"test {i}"
                if values.shape[-1] > 1:
                    k = int(values.mean((0, 1)).argmax())
                    out[f"f({at})[class {k}]"] = (("chain", "draw"), values[..., k].astype(float))
                else:
                    out[f"f({at})"] = (("chain", "draw"), values[..., 0].astype(float))
        chains, draws = source.num_chains, source.num_draws
    if not out:
        raise ValueError("nothing to plot: the run has neither an 'lp' statistic nor test inputs")
    return xr.Dataset(out, coords={"chain": np.arange(chains), "draw": np.arange(draws)})


def _weight_scalars(source, var_names, max_elements: int, include_lp: bool) -> xr.Dataset:
    """A few posterior scalars (``name[i, j]``) and ``lp`` as one ``(chain, draw)`` dataset."""
    samples = ({str(k): source.posterior[k].values for k in source.posterior.data_vars} if _is_idata(source)
               else {k: np.asarray(v) for k, v in source.samples.items()})
    if isinstance(var_names, str):
        var_names = [var_names]
    unknown = [v for v in var_names if v not in samples and v != "lp"]
    if unknown:
        raise ValueError(f"var_names: {unknown} not in the posterior; choose from {list(samples)}")
    out = {}
    stats = _stats_of(source)
    if (include_lp or "lp" in var_names) and "lp" in stats:
        out["lp"] = (("chain", "draw"), np.asarray(stats["lp"], dtype=float))
    for name in var_names:
        if name == "lp":
            continue
        v = samples[name]
        values = v.reshape(v.shape[:2] + (-1,))
        for k in range(min(values.shape[-1], max_elements)):
            index = np.unravel_index(k, v.shape[2:]) if v.ndim > 2 else ()
            label = f"{name}[{', '.join(map(str, index))}]" if v.ndim > 2 else name
            out[label] = (("chain", "draw"), values[..., k].astype(float))
    if not out:
        raise ValueError("nothing to plot: no posterior variables selected")
    first = next(iter(out.values()))[1]
    return xr.Dataset(out, coords={"chain": np.arange(first.shape[0]), "draw": np.arange(first.shape[1])})


def _scalars(source, var_names, num_points: int, max_elements: int, include_lp: bool) -> xr.Dataset:
    if isinstance(source, xr.Dataset):
        return source
    if var_names is None:
        return function_space(source, num_points, include_lp)
    return _weight_scalars(source, var_names, max_elements, include_lp)


def _shown_chains(chains: int, max_chains: int) -> np.ndarray:
    """At most ``max_chains`` chain indices, evenly spread over ``range(chains)``."""
    if chains <= max_chains:
        return np.arange(chains)
    return np.unique(np.round(np.linspace(0, chains - 1, max_chains)).astype(int))


def plot_trace(source, var_names=None, *, num_points: int = 3, max_chains: int = MAX_OVERLAID_CHAINS,
               max_elements: int = 4, include_lp: bool = True, path=None):
    """Traces and densities of ``lp`` and of ``f`` at ``num_points`` test inputs
    (:func:`function_space`), one row per scalar.

    ``source``: a Run, an InferenceData or a ready ``(chain, draw)`` dataset (e.g. of
    :func:`function_space`). The trace overlays at most ``max_chains`` chains, evenly spread
    (the title says which); the density is a histogram of every chain pooled. ``var_names``
    plots those posterior variables instead (the first ``max_elements`` elements of each),
    for reference only: weights are not identifiable.
    """
    data = _scalars(source, var_names, num_points, max_elements, include_lp)
    names = list(data.data_vars)
    chains = data.sizes["chain"]
    shown = _shown_chains(chains, max_chains)
    fig, axes = plt.subplots(len(names), 2, figsize=(10, 1.7 * len(names) + 0.6), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    for row, name in zip(axes, names):
        values = np.asarray(data[name].values, dtype=float)
        trace, density = row
        for c in shown:
            trace.plot(values[c], lw=0.6, alpha=0.8)
        # a chain whose value is never finite draws no line: the title names it instead
        absent = [c for c in shown if not np.isfinite(values[c]).any()]
        title = name if not absent else (f"{name} (chain{'s' if len(absent) > 1 else ''} "
                                         f"{', '.join(map(str, absent))} not drawn: never finite)")
        trace.set_title(title, fontsize="medium", loc="left")
        trace.set_ylabel("lp" if name == "lp" else name.split("(")[0].split("[")[0], fontsize="small")
        finite = values[np.isfinite(values)]
        if finite.size:
            density.hist(finite, bins=40, density=True, color="grey", alpha=0.7, orientation="horizontal")
        density.set_ylim(trace.get_ylim())
        density.set_yticklabels([])
        density.set_xticks([])
    axes[-1, 0].set_xlabel("draw")
    axes[-1, 1].set_xlabel("density,\nall chains")
    which = (f"all {chains} chains" if len(shown) == chains
             else f"{len(shown)} of {chains} chains ({', '.join(map(str, shown))})")
    fig.suptitle(f"traces of {which}; density: every chain pooled", fontsize="medium")
    fig.tight_layout()
    _save(fig, path)
    return fig


def _rank_counts(values: np.ndarray, bins: int) -> np.ndarray:
    """Per chain, the counts of its draws' ranks (pooled over every chain) in ``bins`` equal bins."""
    from scipy.stats import rankdata

    chains, draws = values.shape
    ranks = rankdata(values.ravel(), method="average").reshape(chains, draws)
    edges = np.linspace(0.5, chains * draws + 0.5, bins + 1)
    return np.stack([np.histogram(r, edges)[0] for r in ranks])


def plot_rank(source, var_names=None, *, num_points: int = 3, bins: int | None = None,
              max_elements: int = 2, include_lp: bool = True, path=None):
    """Rank plots of ``lp`` and of ``f`` at ``num_points`` test inputs (:func:`function_space`):
    every draw ranked over all chains pooled, and per chain the histogram of its ranks, drawn as
    one row of a heat map per chain (colour: count / the count if the chains agreed, 1 is white).
    A chain that has not mixed shows as a red/blue row. One panel per scalar, titled with its
    R-hat; readable at 64 chains. ``bins`` defaults to about 10 draws per bin (4 to 20 bins)."""
    data = _scalars(source, var_names, num_points, max_elements, include_lp)
    names = list(data.data_vars)
    chains, draws = data.sizes["chain"], data.sizes["draw"]
    bins = int(bins or min(20, max(4, draws // 10)))
    columns = min(len(names), 4)
    rows = -(-len(names) // columns)
    height = min(2.0 + 0.06 * chains, 6.0)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns + 1, height * rows), squeeze=False)
    image = None
    for ax, name in zip(axes.ravel(), names):
        values = np.asarray(data[name].values, dtype=float)
        counts = _rank_counts(values, bins)
        image = ax.imshow(counts / (draws / bins), aspect="auto", cmap="RdBu_r", vmin=0, vmax=2,
                          interpolation="nearest", origin="lower", extent=(0, 1, -0.5, chains - 0.5))
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rhat = float(_arviz.rhat(values)) if chains > 1 else float("nan")
        ax.set_title(f"{name}\nR-hat {rhat:.3f}", fontsize="small")
        ax.set_xlabel("rank (fraction of all draws)", fontsize="small")
        step = max(1, -(-chains // 8))
        ax.set_yticks(np.arange(0, chains, step))
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"chain ({chains})")
    fig.tight_layout()
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.9, label="count / uniform count")
    _save(fig, path)
    return fig


def e_bfmi(energy: np.ndarray) -> np.ndarray:
    """E-BFMI per chain of ``energy [chain, draw]`` (ArviZ's ``bfmi`` of each chain's finite
    energies; NaN for a chain with fewer than 3); below 0.3 the momentum resampling explores
    the energy poorly."""
    out = []
    for chain in np.asarray(energy, dtype=float):
        finite = chain[np.isfinite(chain)]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out.append(float(np.ravel(_arviz.bfmi(finite[None]))[0]) if finite.size > 2 else np.nan)
    return np.array(out)


def plot_energy(source, path=None):
    """Energy diagnostics, every chain pooled: histograms of the marginal energy (centred per
    chain) and of the energy transitions between draws (they should match, Betancourt 2016),
    and E-BFMI per chain beside the 0.3 warning line. The legends sit below the axes.

    Raises
    ------
    ValueError
        If the run has no ``energy`` statistic (only HMC/NUTS-type engines record it).
    """
    stats = _stats_of(source)
    if "energy" not in stats:
        engine = _engine_of(source) or "this run"
        raise ValueError(f"plot_energy: {engine} has no 'energy' sample stat (HMC/NUTS engines record it)")
    energy = np.asarray(stats["energy"], dtype=float)
    if not np.isfinite(energy).any():
        raise ValueError("plot_energy: the 'energy' sample stat is all NaN")
    energy = np.where(np.isfinite(energy), energy, np.nan)
    chains = energy.shape[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        centred = energy - np.nanmean(energy, axis=1, keepdims=True)
    transition = np.diff(energy, axis=1)
    centred, transition = centred[np.isfinite(centred)], transition[np.isfinite(transition)]
    bfmi = e_bfmi(energy)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    both = np.concatenate([centred, transition]) if transition.size else centred
    edges = np.histogram_bin_edges(both, bins=40)
    ax.hist(centred, bins=edges, density=True, alpha=0.5, color="C0", label="marginal energy (centred per chain)")
    if transition.size:
        ax.hist(transition, bins=edges, density=True, alpha=0.5, color="C1", label="energy transition (draw to draw)")
    ax.set_xlabel("energy")
    ax.set_yticks([])
    ax.set_title(f"{chains} chain{'s' if chains > 1 else ''} pooled", fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize="small", frameon=False)
    bx.plot(np.arange(chains), bfmi, "o", ms=4 if chains <= 16 else 2.5, color="C0", label="E-BFMI per chain")
    bx.axhline(0.3, color="C3", ls="--", lw=0.8, label="0.3: low")
    low = int(np.sum(bfmi < 0.3))
    bx.set_title(f"E-BFMI: min {np.nanmin(bfmi):.2f}, {low} of {chains} below 0.3" if np.isfinite(bfmi).any()
                 else "E-BFMI: too few finite energies", fontsize="medium")
    bx.set_xlabel("chain")
    bx.set_ylim(0, max(1.2, float(np.nanmax(bfmi)) * 1.1) if np.isfinite(bfmi).any() else 1.2)
    bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize="small", frameon=False)
    fig.tight_layout()
    _save(fig, path)
    return fig


def _rolling_mean(v: np.ndarray, window: int) -> np.ndarray:
    window = max(1, min(window, len(v)))
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def step_label(source) -> str:
    """What the ``step_size`` statistic of the run's engine is: RWMH records its proposal scale."""
    return "proposal scale" if _engine_of(source) in PROPOSAL_SCALE_ENGINES else "step size"


def plot_acceptance(source, window: int = 20, *, max_chains: int = MAX_OVERLAID_CHAINS, path=None):
    """Acceptance rate over draws (rolling mean over ``window`` draws), and the step size
    (RWMH: the proposal scale, labelled so) when recorded, warm-up adaptation included at
    negative draw indices when warm-up statistics exist. Up to ``max_chains`` chains: one line
    per chain; more: the median over chains and the band of their 10% to 90% quantiles."""
    stats, warm = _stats_of(source), _stats_of(source, warmup=True)
    if "acceptance_rate" not in stats:
        raise ValueError("plot_acceptance: the run has no 'acceptance_rate' sample stat")
    has_step = "step_size" in stats
    fig, axes = plt.subplots(2 if has_step else 1, 1, figsize=(8, 5 if has_step else 3), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    chains = np.asarray(stats["acceptance_rate"]).shape[0]
    per_chain = chains <= max_chains
    for ax, name in zip(axes, ("acceptance_rate", "step_size")):
        parts = []
        if name in warm:
            parts.append(np.asarray(warm[name], dtype=float))
        parts.append(np.asarray(stats[name], dtype=float))
        values = np.concatenate(parts, axis=1)
        start = -parts[0].shape[1] if len(parts) == 2 else 0
        if name == "acceptance_rate":
            total = values.shape[1]
            values = np.stack([_rolling_mean(v, window) for v in values])
            start += total - values.shape[1]  # a rolling mean is drawn at the last draw of its window
        x = np.arange(values.shape[1]) + start
        if per_chain:
            for c in range(chains):
                ax.plot(x, values[c], label=f"chain {c}")
        else:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, mid, hi = np.nanpercentile(values, [10, 50, 90], axis=0)
            ax.fill_between(x, lo, hi, color="C0", alpha=0.3, label=f"10-90% of {chains} chains")
            ax.plot(x, mid, color="C0", label=f"median of {chains} chains")
    axes[0].set_ylabel(f"acceptance rate\n(rolling mean, {window})")
    axes[0].set_ylim(-0.02, 1.02)
    if has_step:
        axes[1].set_ylabel(step_label(source))
        axes[1].set_yscale("log")
    for ax in axes:
        ax.axvline(0, color="grey", lw=0.8, ls=":")
    axes[-1].set_xlabel("draw (negative: warm-up)")
    axes[0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1),
                   frameon=False)
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
