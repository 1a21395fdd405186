"""Fitting the mean-field guide: :func:`fit_mean_field` (one fit, with its learning-rate
schedules and plateau logic) and :func:`sample_mean_field` (one independent fit per
chain, then iid draws from each guide)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ...results import Draws, VITrace
from ..potential import FlatPotential, initial_theta
from .elbo import elbo_terms, gaussian_kl, kl_weights, num_batches, surrogate_loss
from .optim import make_optimizer
from .options import VIOptions

Tensor = torch.Tensor

TRACES = ("loss", "elbo", "nll", "kl", "lr_loc", "lr_scale")

_WEIGHT = re.compile(r"^layers\.(\d+)\.(weight|bias)$")


@dataclass
class MeanFieldGuide:
    """``N(loc, diag(scale^2))`` on the flat unconstrained vector ``[D]``."""

    loc: Tensor
    scale: Tensor

    def sample(self, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """``[num_samples, D]`` iid draws."""
        eps = torch.randn(num_samples, self.loc.numel(), dtype=self.loc.dtype, generator=generator)
        return self.loc + self.scale * eps

    def kl(self, prior_scale: Tensor | float) -> Tensor:
        """Closed-form KL to an iid ``N(0, prior_scale^2)`` prior."""
        return gaussian_kl(self.loc, self.scale, prior_scale).sum()


@dataclass
class VIFit:
    """A fitted guide and its optimisation history.

    Attributes
    ----------
    guide : MeanFieldGuide
    trace : dict of ndarray ``[num_steps]``
        Per step: ``loss`` (the bracket of L_i in nats, NaN where the step was
        skipped), ``elbo`` (``-(kl + nll)``: unbiased whatever the weighting),
        ``nll``, ``kl``, ``lr_loc``, ``lr_scale`` (the rates the step used).
    epochs : dict of ndarray ``[num_epochs]``
        Means over each completed epoch of ``loss``, ``elbo``, ``nll``, ``kl``;
        ``lr_loc``, ``lr_scale`` at the epoch's end.
    num_batches : int
    kl_weights : ndarray ``[num_batches]``
        pi_i of the scheme.
    """

    guide: MeanFieldGuide
    trace: dict[str, np.ndarray]
    epochs: dict[str, np.ndarray]
    num_batches: int
    kl_weights: np.ndarray

    @property
    def skipped_steps(self) -> int:
        return int(np.isnan(self.trace["loss"]).sum())


def analytic_prior_scale(potential, kl_mode: str) -> Tensor | None:
    """Prior sd per coordinate where the KL is taken in closed form (NaN elsewhere),
    or None when nothing is; ``kl_mode="analytic"`` insists on every coordinate."""
    if kl_mode == "mc":
        return None
    scale_of = getattr(potential, "gaussian_prior_scale", None)
    scale = scale_of() if scale_of is not None else torch.full((potential.dim,), math.nan)
    if kl_mode == "analytic" and not bool(torch.isfinite(scale).all()):
        raise ValueError(f"kl='analytic' needs an iid Gaussian prior on every unconstrained coordinate; "
                         f"not so for {', '.join(_sites_without_closed_form(potential, scale))}: use kl='auto' "
                         "(closed form where possible, Monte Carlo elsewhere) or kl='mc'")
    return scale if bool(torch.isfinite(scale).any()) else None


def _sites_without_closed_form(potential, scale: Tensor) -> list[str]:
    names = getattr(potential, "names", None) or ["theta"]
    sizes = getattr(potential, "sizes", None) or [potential.dim]
    parts = torch.split(scale, sizes)
    return [n for n, p in zip(names, parts) if not bool(torch.isfinite(p).all())]


def initial_loc(potential: FlatPotential, init_loc: str = "uniform", init_radius: float = 1.0) -> Tensor:
    """Initial means ``[D]``: uniform in ``(-init_radius, init_radius)`` (retried until the
    potential is finite), or Kaiming-uniform for BNN layer weights (zero biases)."""
    if init_loc == "uniform":
        return initial_theta(potential, 1, init_radius)[0]
    model = getattr(potential, "model", None)
    if model is None or not hasattr(model, "param_shapes"):
        raise ValueError("init_loc 'kaiming' needs a BNN potential (it reads the layers' fan-in)")
    loc = initial_theta(potential, 1, init_radius)[0]
    parts = dict(zip(potential.names, torch.split(loc, potential.sizes)))
    for name, part in parts.items():
        match = _WEIGHT.match(name)
        if not match:
            continue
        if match.group(2) == "bias":
            part.zero_()
        else:
            fan_in = math.prod(potential.shapes[name][1:])
            bound = math.sqrt(6.0 / fan_in)
            part.uniform_(-bound, bound)
    with torch.no_grad():
        if not bool(torch.isfinite(potential(loc[None])).all()):
            raise RuntimeError("init_loc 'kaiming': the potential is not finite at the initial means")
    return loc


def _schedulers(opts: VIOptions, optimizers):
    if opts.schedule == "exponential":
        gamma = opts.lr_decay ** (1.0 / opts.num_steps)
        return [torch.optim.lr_scheduler.ExponentialLR(o, gamma=gamma) for o in optimizers]
    if opts.schedule == "plateau":
        return [torch.optim.lr_scheduler.ReduceLROnPlateau(o, mode="min", factor=opts.plateau_factor,
                                                           patience=opts.plateau_patience) for o in optimizers]
    return []


def fit_mean_field(potential, options: VIOptions | None = None, *,
                   callback: Callable[[int, MeanFieldGuide, dict], Any] | None = None, **kwargs) -> VIFit:
    """Fit the mean-field guide (the objective is described in :mod:`bnnzoo.inference.vi`).

    Parameters
    ----------
    potential : BNNPotential, or any object with ``dim``, ``num_data``,
        ``log_prior_and_likelihood(theta, rows, skip_gaussian)``, ``gaussian_prior_scale()``
        and ``__call__`` (the potential, used to find a finite start).
    options : VIOptions, optional
        ``**kwargs`` build one (or override fields of ``options``).
    callback : callable, optional
        ``callback(epoch, guide, summary)`` after every completed epoch, with a
        snapshot of the guide and the epoch's means (``loss, elbo, nll, kl, lr_loc, lr_scale``).

    Returns
    -------
    VIFit

    A step whose loss or gradient is not finite is skipped (no update; its
    ``loss`` recorded as NaN).
    """
    opts = replace(options, **kwargs) if options is not None else VIOptions(**kwargs)
    if not hasattr(potential, "log_prior_and_likelihood"):
        raise TypeError(f"fit_mean_field needs a potential with log_prior_and_likelihood (a BNNPotential), "
                        f"got {type(potential).__name__}")
    n = int(potential.num_data)
    m = num_batches(n, opts.batch_size)
    pi = kl_weights(m, opts.kl_weighting)
    prior_scale = analytic_prior_scale(potential, opts.kl_mode)
    skip_gaussian = prior_scale is not None
    loc = initial_loc(potential, opts.init_loc, opts.init_radius).clone().requires_grad_(True)
    rho = torch.full_like(loc, opts.initial_rho).requires_grad_(True)
    if prior_scale is not None:
        prior_scale = prior_scale.to(loc.dtype)
    opt_loc = make_optimizer(opts.optimizer, [loc], opts.lr, "optimizer")
    opt_rho = make_optimizer(opts.scale_optimizer if opts.scale_optimizer is not None else opts.optimizer,
                             [rho], opts.scale_lr or opts.lr, "scale_optimizer")
    optimizers = (opt_loc, opt_rho)
    schedulers = _schedulers(opts, optimizers)
    weights = (m * pi).tolist()  # M pi_i: the KL weight of step i in full-data units
    trace = {k: np.full(opts.num_steps, np.nan) for k in TRACES}
    epochs: dict[str, list] = {k: [] for k in TRACES}
    score = opts.estimator == "score"
    loo = score and opts.score_baseline and opts.num_particles > 1
    ema = None  # running mean of past losses: the score estimator's baseline with one particle
    batches: list = [None]
    for step in range(opts.num_steps):
        epoch, i = divmod(step, m)
        if i == 0 and m > 1:
            batches = list(torch.tensor_split(torch.randperm(n), m))
        rows = batches[i]
        eps = torch.randn(opts.num_particles, loc.numel(), dtype=loc.dtype)
        terms = elbo_terms(loc, rho, eps,
                           lambda theta: potential.log_prior_and_likelihood(theta, rows, skip_gaussian),
                           opts.estimator, prior_scale)
        w = weights[i]
        surrogate = surrogate_loss(terms, w, opts.estimator, "loo" if loo else (ema or 0.0))
        for o in optimizers:
            o.zero_grad()
        (surrogate / n).backward()
        loss = float((w * terms.kl + terms.nll).mean().detach())
        finite = math.isfinite(loss) and all(bool(torch.isfinite(p.grad).all()) for p in (loc, rho))
        trace["lr_loc"][step] = opt_loc.param_groups[0]["lr"]
        trace["lr_scale"][step] = opt_rho.param_groups[0]["lr"]
        if finite:
            for o in optimizers:
                o.step()
            trace["loss"][step] = loss
        kl, nll = float(terms.kl.mean().detach()), float(terms.nll.mean().detach())
        trace["kl"][step], trace["nll"][step], trace["elbo"][step] = kl, nll, -(kl + nll)
        if score and opts.score_baseline and not loo and finite:
            f = float((w * terms.kl_mc + terms.nll).mean().detach())
            ema = f if ema is None else 0.9 * ema + 0.1 * f
        if opts.schedule == "exponential":
            for s in schedulers:
                s.step()
        if i == m - 1:
            summary = _epoch_summary(trace, step + 1 - m, step + 1, optimizers)
            for k, v in summary.items():
                epochs[k].append(v)
            if opts.schedule == "plateau":
                _plateau_step(schedulers, summary, opts.plateau_metric)
            if callback is not None:
                callback(epoch, MeanFieldGuide(loc.detach().clone(), F.softplus(rho).detach().clone()), summary)
    guide = MeanFieldGuide(loc.detach(), F.softplus(rho).detach())
    return VIFit(guide, trace, {k: np.asarray(v, dtype=float) for k, v in epochs.items()}, m, pi.numpy())


def _epoch_summary(trace, start: int, end: int, optimizers) -> dict[str, float]:
    summary = {}
    for k in ("loss", "elbo", "nll", "kl"):
        part = trace[k][start:end]
        summary[k] = float(np.mean(part[np.isfinite(part)])) if np.isfinite(part).any() else math.nan
    summary["lr_loc"] = optimizers[0].param_groups[0]["lr"]
    summary["lr_scale"] = optimizers[1].param_groups[0]["lr"]
    return summary


def _plateau_step(schedulers, summary: dict[str, float], metric: str) -> None:
    """Means on the epoch's NLL and scales on its KL (``split``), or both on the -ELBO."""
    metrics = (summary["nll"], summary["kl"]) if metric == "split" else (-summary["elbo"],) * 2
    for scheduler, value in zip(schedulers, metrics):
        if math.isfinite(value):
            scheduler.step(value)



def sample_mean_field(potential, options: VIOptions, num_samples: int, num_chains: int) -> Draws:
    """One independent fit per chain, then ``num_samples`` iid draws from each fitted guide.

    Returns :class:`~bnnzoo.results.Draws` of the constrained sites, with ``lp``
    (the log density at each draw) and a :class:`~bnnzoo.results.VITrace` of the fits.
    """
    analytic_prior_scale(potential, options.kl_mode)  # fail before fitting on a bad kl=
    fits = [fit_mean_field(potential, options) for _ in range(num_chains)]
    theta = torch.stack([f.guide.sample(num_samples) for f in fits])  # [chain, draw, D]
    with torch.no_grad():
        samples = {k: v.numpy() for k, v in potential.constrain(theta).items()}
        lp = -potential(theta.reshape(-1, potential.dim)).reshape(num_chains, num_samples).numpy()
    trace = {k: np.stack([f.trace[k] for f in fits]) for k in TRACES}
    vi = VITrace(loss=trace["loss"], terms={k: v for k, v in trace.items() if k != "loss"},
                 guide={"loc": torch.stack([f.guide.loc for f in fits]).numpy(),
                        "scale": torch.stack([f.guide.scale for f in fits]).numpy()},
                 num_batches=fits[0].num_batches, skipped_steps=np.array([f.skipped_steps for f in fits]))
    return Draws(samples, {"lp": lp}, vi=vi)
