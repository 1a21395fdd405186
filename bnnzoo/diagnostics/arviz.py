"""Every run as ArviZ data: :func:`to_inference_data`.

Under ArviZ 0.2x the result is an ``arviz.InferenceData``, under ArviZ 1.x the ``xarray.DataTree``
that ArviZ 1.x works on, with the same groups, variables, dims, statistic names and attributes;
:mod:`bnnzoo.diagnostics._arviz` holds the few calls that differ. It is built with ArviZ's
``from_dict`` only, never ``az.from_pyro`` (which keeps only ``diverging``, crashes on kernels
without divergences, and no longer exists in ArviZ 1.x).

Groups
------
posterior
    Every sampled site, constrained, ``(chain, draw, ...)``, and every ``pyro.deterministic``
    site of a plain Pyro model (recomputed from each draw when the model and its data are known). BNN weights get named
    dims: ``layers.0.weight -> (layers.0.weight_out, layers.0.weight_in)``, conv
    kernels ``(_out, _in, _kh, _kw)``, biases ``(_out,)``; other sites ``<name>_dim_<k>``.
sample_stats
    ArviZ names (``lp``, ``acceptance_rate``, ``diverging`` (bool), ``energy`` (H at
    the accepted state), ``energy_error``, ``max_energy_error``, ``step_size``,
    ``step_size_nom``, ``n_steps``, ``tree_depth`` (int64)) plus any engine extras;
    every float statistic float64.
log_likelihood, posterior_predictive, observed_data, constant_data
    For the training data: ``obs (chain, draw, obs_id)``, ``x (obs_id, feature)``.
prior, prior_predictive
    Draws from the model's priors at the training inputs (``pyro.infer.Predictive``;
    a plain Pyro model with its observed sites unconditioned), one chain: the
    posterior's site names and dims, and the observed sites (``obs``).
predictions
    ``f_mean``: the predictive mean (regression) or class probabilities
    (classification) at the test inputs, per draw.
warmup_sample_stats
    Per-draw statistics of warm-up, when the engine recorded them.
vi_trace
    SVI only: ``loss (chain, step)``, the objective of every optimisation step (the
    negative ELBO estimate, its KL reweighted per minibatch), and, when the engine
    records them, ``elbo``, ``nll``, ``kl``, ``lr_loc``, ``lr_scale`` ``(chain, step)``.
inclusion_prob
    Spike-and-slab SA engines (``sgld_sa``, ``sghmc_sa``): the final inclusion
    probability of every weight of a sparse layer, ``(chain, *weight dims)``.

Attributes (posterior, sample_stats and the InferenceData itself): ``engine``,
``method``, ``inference_library`` (``pyro``), ``sampling_time`` (seconds, the run's
wall time), ``num_warmup``, ``options`` (JSON) and ``option.<name>`` (strings), and the
run's notes (lists and tables as JSON). Among them: SG-MCMC runs have ``failed`` (a bool
per chain) and ``failed_at`` (per chain null or ``{phase, iteration, draw, reason}``);
SVI runs have ``converged`` (a bool per fit), ``relative_change`` (the change of the
smoothed ELBO over the last window, in standard errors, per fit), ``convergence_window``,
``convergence_tolerance``, ``num_steps_taken`` (per fit), ``spread_elbo``, ``spread_loc``
and ``convergence`` (the rule in words).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pyro
import torch
import xarray as xr
from pyro import poutine

from ..models import BNN
from ..models.bnn import OBSERVED
from . import _arviz
from .predictive import flat_values, map_draws
from .members import add_members

#: other spellings of ArviZ's sample-stat names
STAT_ALIASES = {
    "accept_prob": "acceptance_rate",
    "mean_accept_prob": "acceptance_rate",
    "divergent": "diverging",
    "num_steps": "n_steps",
    "depth": "tree_depth",
}
BOOL_STATS = ("diverging",)
INT_STATS = ("n_steps", "tree_depth")

_AXES = {1: ("out",), 2: ("out", "in"), 4: ("out", "in", "kh", "kw")}
_LAYER_PARAM = re.compile(r"^(layers\.\d+\.(?:weight|bias))(?:\..+)?$")


@dataclass
class _Source:
    """What a Run or a finished MCMC holds, in one shape."""

    samples: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray]
    warmup_stats: dict[str, np.ndarray] = field(default_factory=dict)
    model: Callable | None = None
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    has_data: bool = False
    x_test: Any = None
    attrs: dict[str, Any] = field(default_factory=dict)
    loss: np.ndarray | None = None
    inclusion_prob: dict[str, np.ndarray] = field(default_factory=dict)
    vi_trace: dict[str, np.ndarray] = field(default_factory=dict)


# ------------------------------------------------------------- the entry point
#: the most prior draws ``to_inference_data`` takes by default
MAX_PRIOR_SAMPLES = 500


def to_inference_data(run_or_mcmc, *, model=None, data=None, log_likelihood: bool = True,
                      posterior_predictive: bool = True, predictions: bool = True, prior: bool = True,
                      num_prior_samples: int | None = None, chunk_size: int = 256,
                      seed: int = 0):
    """Convert a :class:`~bnnzoo.results.Run` or a finished ``pyro.infer.MCMC`` to ArviZ data.

    Parameters
    ----------
    run_or_mcmc : Run or pyro.infer.MCMC
        A Run (duck-typed: ``samples``, ``sample_stats``, ``model``, ``data``,
        ``engine``, ``wall_time``, ``options`` and the typed results), or an MCMC run with
        bnnzoo's kernels or Pyro's own (vectorized chains are split back).
    model : BNN or Pyro model, optional
        MCMC only: the model, to compute ``log_likelihood`` and
        ``posterior_predictive``. A BNN takes the fast batched path; any other
        Pyro model is traced once per draw, conditioned on it.
    data : tuple, dict or Dataset, optional
        MCMC only: the model's positional arguments (``(x, y)`` for a BNN), its keyword
        arguments (``{"x": x, "y": y}``), or a :class:`~bnnzoo.data.Dataset` (train split; test
        split for ``predictions``). Left out with a model: the arguments, positional and keyword,
        that the MCMC ran the model with.
    log_likelihood, posterior_predictive, predictions : bool
        Build these groups (when a model and data are known).
    prior : bool
        Build ``prior`` and ``prior_predictive`` (when a model and data are known).
    num_prior_samples : int, optional
        Prior draws (one chain); None: the number of posterior draws, at most
        ``MAX_PRIOR_SAMPLES`` (500); 0: no prior groups.
    chunk_size : int
        Draws evaluated together by the BNN path.
    seed : int
        Seed of the posterior predictive draws (the global RNG state is left untouched).

    Returns
    -------
    arviz.InferenceData (ArviZ 0.2x) or xarray.DataTree (ArviZ 1.x)

    Examples
    --------
    >>> idata = to_inference_data(run)
    >>> az.loo(idata)
    """
    if _is_mcmc(run_or_mcmc):
        src = _from_mcmc(run_or_mcmc, model, data)
    elif _is_run(run_or_mcmc):
        if model is not None or data is not None:
            raise ValueError("to_inference_data: model= and data= are for a pyro MCMC; a Run carries its own")
        src = _from_run(run_or_mcmc)
    else:
        raise TypeError(f"to_inference_data: expected a bnnzoo Run or a pyro.infer.MCMC, "
                        f"got {type(run_or_mcmc).__name__}")
    if num_prior_samples is not None and (isinstance(num_prior_samples, bool) or
                                          not isinstance(num_prior_samples, (int, np.integer))
                                          or num_prior_samples < 0):
        raise ValueError(f"num_prior_samples must be an integer >= 0 or None, got {num_prior_samples!r}")
    num_prior = num_prior_samples if prior else 0
    idata = _build(src, log_likelihood, posterior_predictive, predictions, chunk_size, seed, num_prior)
    add_members(run_or_mcmc, idata)  # an ensemble warm start: the member coordinate and the members' fits
    return idata


def posterior_dataset(samples: Mapping[str, np.ndarray]) -> xr.Dataset:
    """Draws ``[chain, draw, ...]`` as an ArviZ posterior dataset (for ``az.ess`` / ``az.rhat``)."""
    idata = _arviz.from_dict({"posterior": {k: np.asarray(v) for k, v in samples.items()}})
    return _arviz.group(idata, "posterior")


# ------------------------------------------------------------------- sources
def _is_mcmc(obj) -> bool:
    return isinstance(obj, pyro.infer.MCMC) or (hasattr(obj, "get_samples") and hasattr(obj, "_diagnostics"))


def _is_run(obj) -> bool:
    return all(hasattr(obj, a) for a in ("samples", "sample_stats", "model", "data", "engine"))


def _is_svi(run) -> bool:
    return getattr(run, "kind", "mcmc") == "vi"


def _from_run(run) -> _Source:
    data = run.data
    svi = _is_svi(run)
    options = dict(getattr(run, "options", None) or {})
    attrs = {
        "engine": str(run.engine),
        "method": "vi" if svi else "mcmc",
        "sampling_time": float(run.wall_time),
        "num_warmup": int(options.get("num_steps" if svi else "warmup_steps", 0) or 0),
        "options": json.dumps(options, default=str, sort_keys=True),
        **{f"option.{k}": str(v) for k, v in options.items()},
    }
    if svi:
        attrs["guide"] = "mean-field Normal on the unconstrained parameters"
    attrs.update(run.notes)  # engine notes, e.g. SG-MCMC's minibatch lp and failed chains
    attrs.update(_convergence_attrs(run.vi))
    spec = getattr(run.model, "spec", None)
    if spec is not None and getattr(spec, "name", None):
        attrs["model"] = str(spec.name)
    vi = run.vi
    return _Source(
        samples={k: np.asarray(v) for k, v in run.samples.items()},
        sample_stats={k: np.asarray(v) for k, v in run.sample_stats.items()},
        warmup_stats={k: np.asarray(v) for k, v in run.warmup_sample_stats.items()},
        model=run.model, args=(data.x_train, data.y_train), has_data=True, x_test=data.x_test,
        attrs=attrs, loss=None if vi is None else np.asarray(vi.loss),
        vi_trace={} if vi is None else {k: np.asarray(v) for k, v in vi.terms.items()},
        inclusion_prob={k: np.asarray(v) for k, v in (run.inclusion_prob or {}).items()},
    )


#: the SVI convergence rule, in words (bnnzoo.inference.vi.convergence)
CONVERGENCE_RULE = ("a fit has converged when the mean ELBO estimate of its last convergence_window steps differs "
                    "from that of the window before by at most convergence_tolerance standard errors of the "
                    "difference (relative_change, positive: still improving)")


def _convergence_attrs(vi) -> dict[str, Any]:
    """The convergence test of an SVI run (``Run.vi``) as attributes; {} where it has none."""
    if vi is None or getattr(vi, "converged", None) is None:
        return {}
    return {
        "converged": [bool(c) for c in np.asarray(vi.converged)],
        "relative_change": [float(r) for r in np.asarray(vi.relative_change)],
        "convergence_window": int(vi.window),
        "convergence_tolerance": float(vi.tolerance),
        "num_steps_taken": [int(n) for n in np.asarray(vi.num_steps)],
        "spread_elbo": float(vi.spread_elbo),
        "spread_loc": float(vi.spread_loc),
        "convergence": CONVERGENCE_RULE,
    }


def _from_mcmc(mcmc, model, data) -> _Source:
    from ..results import split_mcmc  # the inference -> diagnostics hand-off, imports no kernel

    draws = split_mcmc(mcmc)
    args, kwargs, x_test = (), {}, None
    if data is not None and model is None:
        raise ValueError("to_inference_data: data= needs model= (the model the data are the arguments of)")
    if data is not None:
        if all(hasattr(data, a) for a in ("x_train", "y_train", "x_test")):
            args, x_test = (data.x_train, data.y_train), data.x_test
        elif isinstance(data, (tuple, list)):
            args = tuple(data)
        elif isinstance(data, Mapping):
            kwargs = dict(data)
        else:
            raise TypeError(f"data: expected a tuple of positional arguments, a dict of keyword arguments or a "
                            f"Dataset, got {type(data).__name__}")
    elif model is not None:  # the arguments the MCMC ran the model with, positional and keyword
        recorded_args, recorded_kwargs = getattr(mcmc, "_args", None), getattr(mcmc, "_kwargs", None)
        if recorded_args is None and recorded_kwargs is None:
            raise ValueError("to_inference_data: the MCMC has not been run; give data= (the model's arguments)")
        args, kwargs = tuple(recorded_args or ()), dict(recorded_kwargs or {})
    # the diagnostics compute on the host: data of a run on a GPU come over once
    host = lambda a: a.cpu() if torch.is_tensor(a) else a  # noqa: E731
    args, kwargs, x_test = tuple(host(a) for a in args), {k: host(v) for k, v in kwargs.items()}, host(x_test)
    kernel = getattr(mcmc, "kernel", None)
    attrs = {
        "engine": type(kernel).__name__ if kernel is not None else "MCMC",
        "method": "mcmc",
        "num_warmup": int(getattr(mcmc, "warmup_steps", 0) or 0),
        **draws.notes,  # failed chains
    }
    return _Source(samples=draws.samples, sample_stats=draws.sample_stats,
                   warmup_stats=draws.warmup_sample_stats, model=model, args=args, kwargs=kwargs,
                   has_data=model is not None, x_test=x_test, attrs=attrs)


# ------------------------------------------------------------------- pieces
def site_dims(name: str, shape: tuple[int, ...], model=None) -> list[str]:
    """Dimension names of one posterior site (without ``chain, draw``)."""
    match = _LAYER_PARAM.match(name)
    if isinstance(model, BNN) and match:
        layer_shape = tuple(model.param_shapes.get(match.group(1), ()))
        if tuple(shape) == layer_shape and len(shape) in _AXES:
            return [f"{name}_{axis}" for axis in _AXES[len(shape)]]
    return [f"{name}_dim_{k}" for k in range(len(shape))]


def _check_draws(src: _Source) -> tuple[int, int]:
    if not src.samples:
        raise ValueError("to_inference_data: the run has no samples")
    lead = {k: v.shape[:2] for k, v in src.samples.items()}
    if len(set(lead.values())) != 1 or any(len(v.shape) < 2 for v in src.samples.values()):
        raise ValueError(f"to_inference_data: samples must share [chain, draw] dims, got {lead}")
    chains, draws = next(iter(lead.values()))
    for k, v in src.sample_stats.items():
        if v.shape[:2] != (chains, draws):
            raise ValueError(f"to_inference_data: sample_stats[{k!r}] has shape {v.shape}, "
                             f"expected ({chains}, {draws}, ...)")
    return chains, draws


def _stats(stats: Mapping[str, np.ndarray], dims: dict) -> dict[str, np.ndarray]:
    out = {}
    for k, v in stats.items():
        name = STAT_ALIASES.get(k, k)
        v = np.asarray(v)
        if name in BOOL_STATS:
            v = v.astype(bool)
        elif name in INT_STATS and np.all(np.isfinite(v)):
            v = v.astype(np.int64)
        elif v.dtype == object:
            raise ValueError(f"sample stat {k!r} is not numeric")
        elif v.dtype.kind == "f" and v.dtype != np.float64:  # one float dtype for every engine
            v = v.astype(np.float64)
        out[name] = v
        if v.ndim > 2:
            dims[name] = [f"{name}_dim_{i}" for i in range(v.ndim - 2)]
    if "lp" not in out and "potential_energy" in out:
        out["lp"] = -out["potential_energy"]
    return out


def _bnn_groups(model: BNN, samples, x, y, chunk_size: int, seed: int, want_pp: bool):
    """Pointwise log likelihood and posterior predictive draws of a BNN in one pass."""
    y_t = torch.as_tensor(np.asarray(y))

    def fn(values, f):
        likelihood = model.likelihood.distribution(f, values)
        ll = likelihood.log_prob(model.observed(y_t)).double()
        if not want_pp:
            return ll.unsqueeze(1)
        return torch.stack([ll, likelihood.sample().double()], 1)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        both = map_draws(model, samples, x, fn, chunk_size)
    ll = both[:, :, 0]
    pp = both[:, :, 1] if want_pp else None
    if pp is not None and model.task == "classification":
        pp = pp.astype(np.asarray(y).dtype if np.issubdtype(np.asarray(y).dtype, np.integer) else np.int64)
    return ll, pp


def _is_deterministic(site) -> bool:
    return site["type"] == "sample" and bool(site["infer"].get("_deterministic"))


def _is_observed(site) -> bool:
    return site["type"] == "sample" and site["is_observed"] and not site["infer"].get("_deterministic")


def _generic_groups(model, samples, args, kwargs, seed: int, want_ll: bool = True, want_pp: bool = True):
    """Pointwise log likelihood, predictive draws and ``pyro.deterministic`` sites of any Pyro
    model: one trace per draw, conditioned on it (slow path)."""
    first = next(iter(samples.values()))
    chains, draws = first.shape[:2]
    ll: dict[str, list] = {}
    pp: dict[str, list] = {}
    det: dict[str, list] = {}
    observed: dict[str, np.ndarray] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for i in range(chains * draws):
            draw = {k: v[0] for k, v in flat_values(samples, slice(i, i + 1)).items()}
            trace = poutine.trace(poutine.condition(model, data=draw)).get_trace(*args, **kwargs)
            for name, site in trace.nodes.items():
                if _is_deterministic(site):
                    det.setdefault(name, []).append(np.asarray(site["value"].cpu().numpy()))
                if not _is_observed(site) or name in draw:
                    continue
                if want_ll:
                    ll.setdefault(name, []).append(np.atleast_1d(site["fn"].log_prob(site["value"]).cpu().numpy()))
                if want_pp:
                    pp.setdefault(name, []).append(np.atleast_1d(site["fn"].sample().cpu().numpy()))
                observed.setdefault(name, np.atleast_1d(site["value"].cpu().numpy()))
    shape = lambda rows: np.stack(rows).reshape((chains, draws) + rows[0].shape)  # noqa: E731
    return ({k: shape(v) for k, v in ll.items()}, {k: shape(v) for k, v in pp.items()}, observed,
            {k: shape(v) for k, v in det.items()})


def _model_sites(model, args, kwargs) -> tuple[dict[str, np.ndarray], list[str]]:
    """The observed values of a Pyro model's observed sites and the names of its
    ``pyro.deterministic`` sites (one trace from the prior)."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        trace = poutine.trace(model).get_trace(*args, **kwargs)
    observed = {name: np.atleast_1d(site["value"].cpu().numpy()) for name, site in trace.nodes.items()
                if _is_observed(site)}
    return observed, [name for name, site in trace.nodes.items() if _is_deterministic(site)]


def _bnn_data(args, kwargs):
    """``(x, y)`` of a BNN's call, given positionally or by keyword."""
    x = args[0] if len(args) > 0 else kwargs.get("x")
    y = args[1] if len(args) > 1 else kwargs.get("y")
    return x, y


def _prior_groups(model, samples, args, kwargs, observed: Mapping[str, np.ndarray], num: int, seed: int):
    """``num`` draws of the model's priors and of its observed sites given them (one chain):
    a BNN called without ``y``, any other model with its observed sites unconditioned.
    ``samples``: the posterior's variables (sampled and deterministic sites), for their names and shapes."""
    if isinstance(model, BNN):
        fn, call_args, call_kwargs = model, (_bnn_data(args, kwargs)[0],), {}
    else:
        fn, call_args, call_kwargs = poutine.uncondition(model), tuple(args), dict(kwargs)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed + 1)
        names = list(samples) + [k for k in observed if k not in samples]
        draws = pyro.infer.Predictive(fn, num_samples=num, return_sites=names, parallel=False)(*call_args,
                                                                                              **call_kwargs)
    prior, predictive = {}, {}
    for name, value in draws.items():
        value = value.detach().cpu().numpy()
        if name in samples:
            shape = np.asarray(samples[name]).shape[2:]
            prior[name] = value.reshape((1, num) + shape)
        elif name in observed:
            want = np.asarray(observed[name])
            value = value.reshape((1, num) + want.shape)
            if np.issubdtype(want.dtype, np.integer) or (isinstance(model, BNN) and model.task == "classification"):
                value = value.astype(want.dtype if np.issubdtype(want.dtype, np.integer) else np.int64)
            predictive[name] = value
    return prior, predictive


def _attrs(src: _Source, chains: int, draws: int) -> dict[str, Any]:
    from .. import __version__

    attrs = {"inference_library": "pyro", "inference_library_version": pyro.__version__,
             "bnnzoo_version": __version__, "num_chains": chains, "num_draws": draws, **src.attrs}
    for k, v in attrs.items():  # netCDF attributes: str, int or float only; lists and tables as JSON
        if isinstance(v, (list, tuple, dict)):
            attrs[k] = json.dumps(v, default=str)
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, float, np.integer, np.floating)):
            attrs[k] = str(v)
    return attrs


# ------------------------------------------------------------------- build
def _build(src: _Source, want_ll: bool, want_pp: bool, want_pred: bool, chunk_size: int,
           seed: int, num_prior: int | None = 0):
    chains, draws = _check_draws(src)
    model = src.model
    dims: dict[str, list[str]] = {
        k: site_dims(k, v.shape[2:], model) for k, v in src.samples.items() if v.ndim > 2
    }
    groups: dict[str, Any] = {
        "posterior": dict(src.samples),
        "sample_stats": _stats(src.sample_stats, dims),
    }
    if src.warmup_stats:
        groups["warmup_sample_stats"] = _stats(src.warmup_stats, {})
    if num_prior is None:
        num_prior = min(chains * draws, MAX_PRIOR_SAMPLES)
    # a plain Pyro model is traced even without these groups: its deterministic sites belong to the posterior
    if model is not None and src.has_data and (want_ll or want_pp or num_prior or not isinstance(model, BNN)):
        if isinstance(model, BNN):
            x, y = _bnn_data(src.args, src.kwargs)
            ll, pp = {}, {}
            if want_ll or want_pp:
                ll, pp = _bnn_groups(model, src.samples, x, y, chunk_size, seed, want_pp)
                ll, pp = {OBSERVED: ll}, ({OBSERVED: pp} if want_pp else {})
            observed = {OBSERVED: np.asarray(y)}
            groups["constant_data"] = {"x": np.asarray(x)}
            dims["x"] = ["obs_id", "feature"]
            dims[OBSERVED] = ["obs_id"]
        else:
            observed, deterministic = _model_sites(model, src.args, src.kwargs)
            ll, pp = {}, {}
            if want_ll or want_pp or deterministic:
                ll, pp, observed, det = _generic_groups(model, src.samples, src.args, src.kwargs, seed,
                                                         want_ll, want_pp)
                groups["posterior"].update({k: v for k, v in det.items() if k not in src.samples})
                dims.update({k: site_dims(k, v.shape[2:]) for k, v in det.items() if v.ndim > 2})
            for name, value in observed.items():
                dims[name] = [f"{name}_dim_{k}" for k in range(value.ndim)]
        if want_ll and ll:
            groups["log_likelihood"] = ll
        if want_pp and pp:
            groups["posterior_predictive"] = pp
        if observed:
            groups["observed_data"] = observed
        if num_prior:
            prior, prior_pp = _prior_groups(model, groups["posterior"], src.args, src.kwargs, observed,
                                            num_prior, seed)
            if prior:
                groups["prior"] = prior
            if prior_pp:
                groups["prior_predictive"] = prior_pp
    if want_pred and isinstance(model, BNN) and src.x_test is not None:
        f_mean = map_draws(model, src.samples, src.x_test, lambda v, f: model.likelihood.mean(f), chunk_size)
        groups["predictions"] = {"f_mean": f_mean}
        dims["f_mean"] = ["test_id", "class"][: f_mean.ndim - 2]
    attrs = _attrs(src, chains, draws)
    idata = _arviz.from_dict(groups, dims=dims, attrs=attrs,
                             group_attrs={"posterior": attrs, "sample_stats": attrs})
    if src.loss is not None:
        loss = np.asarray(src.loss, dtype=np.float64).reshape(chains, -1)
        more = {k: (("chain", "step"), np.asarray(v, dtype=np.float64).reshape(loss.shape))
                for k, v in src.vi_trace.items()}
        trace = xr.Dataset(
            {"loss": (("chain", "step"), loss), **more},
            coords={"chain": np.arange(chains), "step": np.arange(loss.shape[1])},
            attrs={"description": "SVI optimisation trace per step: loss (the negative-ELBO objective, "
                                  "KL reweighted per minibatch), elbo, nll, kl, learning rates"},
        )
        _arviz.add_group(idata, "vi_trace", trace)
    if src.inclusion_prob:
        _arviz.add_group(idata, "inclusion_prob", _inclusion_group(src.inclusion_prob, model))
    return idata


def _inclusion_group(inclusion: Mapping[str, np.ndarray], model) -> xr.Dataset:
    """Final inclusion probabilities of a spike-and-slab SA run (``Run.inclusion_prob``):
    one variable per sparse site, ``(chain, *site dims)``, named like the posterior's."""
    data = {name: (["chain"] + site_dims(name, v.shape[1:], model), np.asarray(v, dtype=np.float64))
            for name, v in inclusion.items()}
    chains = next(iter(inclusion.values())).shape[0]
    return xr.Dataset(data, coords={"chain": np.arange(chains)},
                      attrs={"description": "final inclusion probability P(gamma = 1 | data) per weight"})
