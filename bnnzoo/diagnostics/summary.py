"""One table per run: ArviZ's summary plus ESS per second, sparsity, per-chain
sampler statistics (cap hits of NUTS/ChEES trajectories: :func:`cap_hits`) and the run's own verdicts (:func:`summary`, :func:`chain_table`,
:func:`run_checks`: SG-MCMC chains that failed, SVI fits that did not converge; :func:`never_moved`:
chains that never left their start), and the mixing numbers that compare engines (:func:`mixing`).
:func:`run_diagnostics` computes every run-level number (``lp``, function space, acceptance,
divergences, chains that never moved) from a Run or its InferenceData alike: the report, the
comparison table, :func:`summary` and ``bnnzoo inspect`` all read it.

R-hat and ESS always come from ArviZ (rank-normalised split R-hat and bulk ESS,
Vehtari et al. 2021, "Rank-normalization, folding, and localization: an
improved R-hat for assessing convergence of MCMC").

Network weights are not identifiable (hidden units can be permuted, signs
flipped), so weight-space R-hat of a BNN is large even when the predictive
distribution has mixed. :func:`mixing` therefore reports function-space
ESS/R-hat (of :func:`~bnnzoo.diagnostics.predictive.function_draws` at the test
inputs) as the headline, next to the ESS/R-hat of ``lp`` and the weight-space numbers.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from . import _arviz
from ._mixing import ess_rhat, nanmax as _nanmax, nanmin as _nanmin, quiet as _quiet  # noqa: F401 (ess_rhat: public)
from .arviz import posterior_dataset, to_inference_data
from .members import idata_member_mixing
from .predictive import function_draws, function_scalars
from .nested_rhat import nested_rhat

SPARSITY_THRESHOLD = 1e-2
_WEIGHT = re.compile(r"^layers\.\d+\.weight$")


def _idata(idata_or_run):
    if hasattr(idata_or_run, "posterior"):
        return idata_or_run
    if hasattr(idata_or_run, "samples") and hasattr(idata_or_run, "engine"):
        return to_inference_data(idata_or_run)
    raise TypeError(f"expected arviz.InferenceData, an ArviZ DataTree or a bnnzoo Run, "
                    f"got {type(idata_or_run).__name__}")


def sampling_time(idata) -> float:
    """Seconds the run took (``sampling_time`` attribute), NaN when unknown."""
    for attrs in (idata.posterior.attrs, getattr(idata, "attrs", {}) or {}):
        if "sampling_time" in attrs:
            return float(attrs["sampling_time"])
    return math.nan


def weight_names(posterior) -> list[str]:
    """Posterior variables that are network weights (``layers.<i>.weight``); every
    variable when none is named so (a generic Pyro model)."""
    names = [str(k) for k in posterior.data_vars]
    weights = [k for k in names if _WEIGHT.match(k)]
    return weights or names


def sparsity(idata_or_run, threshold: float = SPARSITY_THRESHOLD, by_chain: bool = False):
    """Fraction of weight values with ``|w| < threshold`` over all weights and draws
    (per chain: an array ``[chain]``)."""
    posterior = _idata(idata_or_run).posterior
    names = weight_names(posterior)
    small = [np.abs(posterior[k].values) < threshold for k in names]
    counts = sum(s.reshape(s.shape[0], -1).sum(1) for s in small)
    sizes = sum(s[0].size for s in small)
    per_chain = counts / sizes
    return per_chain if by_chain else float(counts.sum() / (sizes * len(counts)))


#: the run-level verdicts :func:`run_checks` reads from the attributes
CHECKS = ("failed", "failed_at", "converged", "relative_change", "convergence_window", "convergence_tolerance",
          "num_steps_taken", "spread_elbo", "spread_loc")


def _attr(attrs, name: str):
    value = attrs.get(name)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def run_checks(idata_or_run) -> dict:
    """The run's own verdicts, from its InferenceData attributes (:func:`~bnnzoo.diagnostics.to_inference_data`):
    SG-MCMC ``failed`` (a bool per chain) and ``failed_at`` (per chain None or ``{phase, iteration,
    draw, reason}``); SVI ``converged`` (a bool per fit), ``relative_change`` (per fit, in standard
    errors), ``convergence_window``, ``convergence_tolerance``, ``num_steps_taken``, ``spread_elbo``
    (nats) and ``spread_loc`` (guide sds). Only what the run recorded."""
    idata = _idata(idata_or_run)
    attrs = {**(getattr(idata, "attrs", None) or {}), **idata.posterior.attrs}
    return {k: _attr(attrs, k) for k in CHECKS if k in attrs}


#: per-draw flags of a draw whose trajectory stopped at the engine's cap: the flag -> the option that sets the cap
CAPS = {"reached_max_tree_depth": "max_tree_depth", "reached_max_steps": "max_leapfrog_steps"}


def _options(source) -> dict:
    options = getattr(source, "options", None)
    if isinstance(options, dict):
        return options
    attrs = source.posterior.attrs if hasattr(source, "posterior") else {}
    try:
        return json.loads(attrs.get("options", "{}"))
    except (TypeError, ValueError):
        return {}


def _stats_dict(source) -> dict:
    if hasattr(source, "posterior"):
        stats = getattr(source, "sample_stats", None)
        return {} if stats is None else {str(k): stats[k].values for k in stats.data_vars}
    return dict(getattr(source, "sample_stats", None) or {})


def max_gradients_per_draw(option: str, cap) -> int | None:
    """The most leapfrog steps (gradients) one draw can cost at the cap ``option = cap``:
    NUTS ``2^max_tree_depth - 1``, ChEES ``max_leapfrog_steps``."""
    if cap is None:
        return None
    return 2 ** int(cap) - 1 if option == "max_tree_depth" else int(cap)


def cap_hits(idata_or_run) -> dict | None:
    """How often the trajectory stopped at the engine's cap (NUTS ``reached_max_tree_depth``,
    ChEES ``reached_max_steps``), from a Run or its InferenceData; None when the engine
    records no such flag.

    Returns
    -------
    dict
        ``stat`` (the flag), ``option`` (``max_tree_depth`` / ``max_leapfrog_steps``), ``cap``
        (its value, None if the run does not say), ``max_gradients`` (per draw at the cap:
        ``2^max_tree_depth - 1`` / ``max_leapfrog_steps``), ``per_chain`` (hits per chain),
        ``hits`` (their total), ``draws`` (all draws) and ``fraction`` (hits / draws).
    """
    stats = _stats_dict(idata_or_run)
    stat = next((k for k in CAPS if k in stats), None)
    if stat is None:
        return None
    flags = np.asarray(stats[stat]).astype(bool)
    flags = flags.reshape(flags.shape[0], -1)
    option = CAPS[stat]
    cap = _options(idata_or_run).get(option)
    per_chain = flags.sum(1).astype(int).tolist()
    return {"stat": stat, "option": option, "cap": None if cap is None else int(cap),
            "max_gradients": max_gradients_per_draw(option, cap), "per_chain": per_chain,
            "hits": int(sum(per_chain)), "draws": int(flags.size),
            "fraction": float(flags.mean()) if flags.size else math.nan}


def _stat(stats, name: str):
    return stats[name].values if stats is not None and name in stats else None


def _flags(checks: dict, name: str, chains: int) -> pd.array:
    values = checks.get(name)
    if not isinstance(values, list) or len(values) != chains:
        values = [None] * chains
    return pd.array(values, dtype="boolean")


def chain_table(idata_or_run, sparsity_threshold: float = SPARSITY_THRESHOLD) -> pd.DataFrame:
    """One row per chain: mean acceptance rate, divergences, mean step size, mean
    leapfrog steps, ``cap_hits`` (draws whose trajectory stopped at the engine's cap: NUTS
    ``reached_max_tree_depth``, ChEES ``reached_max_steps``; see :func:`cap_hits`), mean ``lp``,
    weight sparsity (NaN where the engine has no such stat), ``moved`` (False: the chain never
    left its start, :func:`never_moved`),
    and ``failed`` (SG-MCMC: the chain blew up) and ``converged`` (SVI: the fit settled),
    missing (``<NA>``) where the engine does not check."""
    idata = _idata(idata_or_run)
    stats = getattr(idata, "sample_stats", None)
    chains = idata.posterior.sizes["chain"]
    nan = np.full(chains, np.nan)

    def per_chain(name, reduce):
        v = _stat(stats, name)
        return nan if v is None else reduce(v.reshape(chains, -1).astype(float))

    table = pd.DataFrame({
        "acceptance_rate": per_chain("acceptance_rate", lambda v: v.mean(1)),
        "divergences": per_chain("diverging", lambda v: v.sum(1)),
        "step_size": per_chain("step_size", lambda v: v.mean(1)),
        "n_steps": per_chain("n_steps", lambda v: v.mean(1)),
        "cap_hits": per_chain(next((k for k in CAPS if stats is not None and k in stats), ""), lambda v: v.sum(1)),
        "lp_mean": per_chain("lp", lambda v: v.mean(1)),
        "sparsity": sparsity(idata, sparsity_threshold, by_chain=True),
    }, index=pd.Index(idata.posterior["chain"].values, name="chain"))
    stuck = {c["chain"] for c in never_moved(idata)}
    table["moved"] = [chain not in stuck for chain in table.index]
    checks = run_checks(idata)
    table["failed"] = _flags(checks, "failed", chains)
    table["converged"] = _flags(checks, "converged", chains)
    return table


def _labels(name: str, values) -> list[str]:
    """ArviZ's row labels of a variable's scalars: ``name`` or ``name[i, j]`` (its coordinate values)."""
    coords = [values[dim].values if dim in values.coords else np.arange(size)
              for dim, size in zip(values.dims[2:], values.shape[2:])]
    if not coords:
        return [name]
    grid = np.meshgrid(*coords, indexing="ij")
    return [f"{name}[{', '.join(str(c) for c in point)}]" for point in zip(*(g.ravel() for g in grid))]


def _sparsity_column(posterior, index, threshold: float) -> pd.Series:
    """Per summary row, the fraction of draws with ``|value| < threshold`` (NaN for rows of no
    posterior scalar, e.g. ``lp``)."""
    fractions = {}
    for name in posterior.data_vars:
        values = posterior[name]
        small = (np.abs(np.asarray(values.values, dtype=float)) < threshold).reshape(
            (-1,) + values.shape[2:]).mean(0)
        fractions.update(zip(_labels(str(name), values), np.ravel(small)))
    return pd.Series(fractions, dtype=float).reindex(index)


def summary(idata_or_run, var_names=None, *, sparsity_threshold: float = SPARSITY_THRESHOLD,
            include_lp: bool = True, **summary_kwargs) -> pd.DataFrame:
    """ArviZ's summary (``az.summary``) plus ESS per second, sparsity, acceptance and divergences.

    Parameters
    ----------
    idata_or_run : arviz.InferenceData or Run
    var_names : list of str, optional
        Posterior variables (default: all).
    sparsity_threshold : float
        A value counts as zero when ``|w| < sparsity_threshold``.
    include_lp : bool
        Add a row ``lp`` (the log density's mean, ESS, R-hat) from ``sample_stats``.
    **summary_kwargs
        Passed to ArviZ's summary (``round_to``; ``hdi_prob`` under ArviZ 0.2x, ``ci_prob`` and
        ``ci_kind`` under ArviZ 1.x).

    Returns
    -------
    pandas.DataFrame
        One row per scalar, ArviZ's summary columns (``mean``, ``sd``, the credible interval
        (0.2x: ``hdi_3%``, ``hdi_97%``; 1.x: e.g. ``eti89_lb``, ``eti89_ub``), ``mcse_mean``,
        ``mcse_sd``, ``ess_bulk``, ``ess_tail``, ``r_hat``) plus ``ess_bulk_per_s``,
        ``ess_tail_per_s`` (ESS over the run's wall time), ``sparsity`` (fraction
        of draws with ``|value| < threshold``) and the run-level ``acceptance`` (mean
        acceptance probability over every chain and draw), ``divergences`` (their
        total) and ``cap_hits`` (draws whose trajectory stopped at the engine's cap,
        :func:`cap_hits`), the same in every row and NaN where the engine records none.
        ``df.attrs`` holds ``sampling_time``, ``sparsity`` (over all weights), per chain
        ``acceptance_rate``, ``divergences`` (lists, see :func:`chain_table`), ``cap_hits``
        (the total, NaN where the engine has no cap flag) and ``cap`` (the dict of
        :func:`cap_hits`, None likewise), and the
        run's verdicts of :func:`run_checks` (SG-MCMC ``failed``, ``failed_at``; SVI
        ``converged``, ``relative_change``, ``spread_elbo``, ``spread_loc``, ...). A run started
        from an ensemble (a ``member`` coordinate) adds ``members``: the diagnostics of
        :func:`~bnnzoo.diagnostics.members.member_mixing` (within-member R-hat/ESS, nested R-hat over
        members, modes visited) and ``verdict``: "converged within modes" or not, in words.
    """
    idata = _idata(idata_or_run)
    with _quiet():
        table = pd.DataFrame(_arviz.summary(idata, var_names=var_names, **summary_kwargs))
        table["sparsity"] = _sparsity_column(idata.posterior, table.index, sparsity_threshold)
        stats = getattr(idata, "sample_stats", None)
        if include_lp and stats is not None and "lp" in stats:
            lp = pd.DataFrame(_arviz.summary(idata, group="sample_stats", var_names=["lp"], **summary_kwargs))
            table = pd.concat([table, lp])
    if "lp" in table.index:  # the run-level numbers, as run_diagnostics computes them (unrounded)
        lp = np.asarray(stats["lp"].values, dtype=np.float64)
        ess_lp, rhat_lp = ess_rhat(lp.reshape(lp.shape[0], -1))
        table.loc["lp", "ess_bulk"], table.loc["lp", "r_hat"] = float(ess_lp), float(rhat_lp)
    seconds = sampling_time(idata)
    for kind in ("bulk", "tail"):
        if f"ess_{kind}" in table:
            table[f"ess_{kind}_per_s"] = table[f"ess_{kind}"] / seconds
    chains = chain_table(idata, sparsity_threshold)
    acceptance, diverging = _stat(stats, "acceptance_rate"), _stat(stats, "diverging")
    table["acceptance"] = math.nan if acceptance is None else float(np.mean(acceptance))
    table["divergences"] = math.nan if diverging is None else int(np.sum(diverging))
    caps = cap_hits(idata)
    table["cap_hits"] = math.nan if caps is None else caps["hits"]
    table.attrs.update({
        "sampling_time": seconds,
        "sparsity": sparsity(idata, sparsity_threshold),
        "acceptance_rate": chains["acceptance_rate"].tolist(),
        "divergences": chains["divergences"].tolist(),
        "cap_hits": math.nan if caps is None else caps["hits"],
        "cap": caps,
        "never_moved": [c["message"] for c in never_moved(idata)],
        **run_checks(idata),
    })
    members = idata_member_mixing(idata)
    if members is not None:
        table.attrs.update(members=members, verdict=members["verdict"])
    return table


# ------------------------------------------------------------------ chains that never moved
def _posterior_arrays(source) -> dict[str, np.ndarray]:
    if hasattr(source, "posterior"):
        return {str(k): source.posterior[k].values for k in source.posterior.data_vars}
    return dict(source.samples)


def never_moved(idata_or_run) -> list[dict]:
    """The chains whose every draw equals their first (for every sampled value), with why:
    ``[{"chain", "lp", "message"}]``. A chain whose log density is not finite at its start
    rejects every proposal (the Metropolis ratio is not a number) and counts each as a
    divergence: the message says so and names the likely causes."""
    source = idata_or_run
    arrays = _posterior_arrays(source)
    if not arrays:
        return []
    first = next(iter(arrays.values()))
    chains, draws = first.shape[:2]
    if draws < 2:
        return []
    still = np.ones(chains, bool)
    for values in arrays.values():
        flat = np.asarray(values).reshape(chains, draws, -1)
        same = (flat == flat[:, :1]) | (np.isnan(flat) & np.isnan(flat[:, :1]))
        still &= same.all(axis=(1, 2))
    stats = _stats_dict(source)
    lp = stats.get("lp")
    lp = None if lp is None else np.asarray(lp, dtype=np.float64).reshape(chains, -1)
    accept = stats.get("acceptance_rate")
    accept = None if accept is None else np.asarray(accept, dtype=np.float64).reshape(chains, -1)
    labels = (source.posterior["chain"].values.tolist() if hasattr(source, "posterior") else list(range(chains)))
    out = []
    for c in np.flatnonzero(still):
        start = math.nan if lp is None else float(lp[c, 0])
        if lp is not None and not math.isfinite(start):
            message = (f"chain {labels[c]} never moved: its log density is not finite at the start (lp {start} "
                       f"at all {draws} draws, each a rejected proposal counted as a divergence); likely cause: "
                       "a start where the model's log density overflows or is undefined (data far from unit "
                       "scale, a NaN in the data, a start outside a prior's support, or initial_params/"
                       "init_radius); its draws are not posterior draws")
        else:
            rate = "" if accept is None else f" (mean acceptance {float(np.nanmean(accept[c])):.2g})"
            message = (f"chain {labels[c]} never moved: every proposal was rejected{rate}; likely cause: a step "
                       "size or proposal scale far too large for this posterior; its draws are not posterior draws")
        out.append({"chain": labels[c], "lp": start, "message": message})
    return out


# ------------------------------------------------------------------ run-level diagnostics
def _function_draws_of(source, x=None, chunk_size: int = 256) -> np.ndarray | None:
    """Function-space draws ``[chain, draw, N]``: of a Run (its model at ``x`` or its test inputs),
    or of an InferenceData's ``predictions`` group (``f_mean``; regression or classification as
    its shape says). None where neither is there."""
    if hasattr(source, "posterior"):
        predictions = getattr(source, "predictions", None)
        if predictions is None or "f_mean" not in predictions:
            return None
        means = np.asarray(predictions["f_mean"].values, dtype=np.float64)
        return function_scalars(means, "classification" if means.ndim == 4 else "regression")
    if getattr(source, "model", None) is None or getattr(source, "data", None) is None:
        return None
    return function_draws(source, x, chunk_size=chunk_size)


def run_diagnostics(idata_or_run, x=None, chunk_size: int = 256) -> dict:
    """Every run-level diagnostic, computed one way for a Run and for its InferenceData (the
    report, the comparison table, :func:`summary` and ``bnnzoo inspect`` read this):

    ``ess_lp``, ``rhat_lp``, ``nrhat_lp`` (of ``lp``; NaN where the engine has none);
    ``ess_f_min``, ``rhat_f_max``, ``nrhat_f_max`` (function space: :func:`~bnnzoo.diagnostics.
    predictive.function_draws` at the test inputs, or the InferenceData's ``predictions``; NaN
    where neither is there); ``acceptance`` (mean), ``divergences`` (total; NaN where not recorded)
    and ``never_moved`` (:func:`never_moved`). R-hat is rank-normalised split R-hat, ESS bulk ESS,
    both ArviZ's (:func:`ess_rhat`), never rounded."""
    stats = _stats_dict(idata_or_run)
    out: dict = {}
    lp = stats.get("lp")
    if lp is None:
        out["ess_lp"] = out["rhat_lp"] = out["nrhat_lp"] = math.nan
    else:
        lp = np.asarray(lp, dtype=np.float64)
        lp = lp.reshape(lp.shape[0], -1)
        ess_lp, rhat_lp = ess_rhat(lp)
        out["ess_lp"], out["rhat_lp"] = float(ess_lp), float(rhat_lp)
        out["nrhat_lp"] = float(nested_rhat(lp))
    f = _function_draws_of(idata_or_run, x, chunk_size)
    if f is None:
        out["ess_f_min"] = out["rhat_f_max"] = out["nrhat_f_max"] = math.nan
    else:
        ess_f, rhat_f = ess_rhat(f)
        out["ess_f_min"], out["rhat_f_max"] = _nanmin(ess_f), _nanmax(rhat_f)
        out["nrhat_f_max"] = _nanmax(nested_rhat(f))
    acceptance, diverging = stats.get("acceptance_rate"), stats.get("diverging")
    out["acceptance"] = math.nan if acceptance is None else float(np.mean(np.asarray(acceptance, dtype=float)))
    out["divergences"] = math.nan if diverging is None else int(np.sum(diverging))
    out["never_moved"] = never_moved(idata_or_run)
    return out


# ------------------------------------------------------------------ mixing
def _dataset_extremes(ds) -> tuple[float, float]:
    with _quiet():
        ess, rhat = _arviz.ess(ds, method="bulk"), _arviz.rhat(ds)
    ess_min = _nanmin(np.concatenate([np.ravel(ess[k].values) for k in ess.data_vars]))
    rhat_max = _nanmax(np.concatenate([np.ravel(rhat[k].values) for k in rhat.data_vars]))
    return ess_min, rhat_max


def mixing(run, x=None, chunk_size: int = 256) -> dict[str, float]:
    """How well a run mixed, in function space, in ``lp`` and in weight space.

    Returns
    -------
    dict
        ``ess_f_min``, ``rhat_f_max``: min bulk ESS and max R-hat over the test points
        of :func:`~bnnzoo.diagnostics.predictive.function_draws` (the headline);
        ``ess_lp``, ``rhat_lp``: of the ``lp`` statistic (NaN if the engine has none);
        ``ess_w_min``, ``rhat_w_max``: over every scalar of the posterior;
        ``nrhat_lp``, ``nrhat_f_max``: nested R-hat (:mod:`~bnnzoo.diagnostics.nested_rhat`,
        4 superchains; NaN below 8 chains), for many short chains.
        R-hat is NaN for a 1-chain run; constant draws give NaN (not an error).
    """
    diagnostics = run_diagnostics(run, x, chunk_size)
    out: dict[str, float] = {k: diagnostics[k] for k in ("ess_f_min", "rhat_f_max", "nrhat_f_max", "ess_lp",
                                                          "rhat_lp", "nrhat_lp")}
    out["ess_w_min"], out["rhat_w_max"] = _dataset_extremes(posterior_dataset(run.samples))
    return out
