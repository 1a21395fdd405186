"""Fitting the mean-field guide: :func:`fit_mean_field` (one fit, with its learning-rate
schedules, plateau logic and convergence test) and :func:`sample_mean_field` (one
independent fit per chain, then iid draws from each guide)."""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ...results import Draws, VITrace
from ..checkpoint import Interrupted, deferred_interrupt, rng_state, set_rng_state
from ..potential import FlatPotential, initial_theta, placement
from .convergence import converged, elbo_change, fit_spread, not_converged_message, stationarity, window_steps
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
        eps = torch.randn(num_samples, self.loc.numel(), dtype=self.loc.dtype, device=self.loc.device,
                          generator=generator)
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
    relative_change : float
        The change of the smoothed ELBO over the last window, in standard errors
        (:mod:`~bnnzoo.inference.vi.convergence`; NaN: too few steps to judge).
    stationarity : float
        The standardised sum of squared t-statistics of the mean of ``gradient_draws`` fresh
        gradient estimates at the fitted guide (about N(0, 1) at a stationary point).
    final_elbo : float
        The mean ELBO estimate over the last window.
    window : int
        Steps per window of the ELBO test.
    gradient_draws : int
        Fresh gradient estimates behind ``stationarity``.
    tolerance : float
        The fit has converged when ``|relative_change|`` and ``stationarity`` are at most ``tolerance``.
    """

    guide: MeanFieldGuide
    trace: dict[str, np.ndarray]
    epochs: dict[str, np.ndarray]
    num_batches: int
    kl_weights: np.ndarray
    relative_change: float = math.nan
    stationarity: float = math.nan
    final_elbo: float = math.nan
    window: int = 0
    gradient_draws: int = 0
    tolerance: float = 3.0

    @property
    def skipped_steps(self) -> int:
        return int(np.isnan(self.trace["loss"]).sum())

    @property
    def num_steps(self) -> int:
        """Steps taken (fewer than ``num_steps`` when the adaptive schedule stopped early)."""
        return len(self.trace["loss"])

    @property
    def converged(self) -> bool:
        """The ELBO settled and the guide is stationary (:func:`~bnnzoo.inference.vi.convergence.converged`)."""
        return converged(self.relative_change, self.stationarity, self.tolerance)


def analytic_prior_scale(potential, kl_mode: str) -> Tensor | None:
    """Prior sd per coordinate where the KL is taken in closed form (NaN elsewhere),
    or None when nothing is; ``kl_mode="analytic"`` insists on every coordinate."""
    if kl_mode == "mc":
        return None
    scale_of = getattr(potential, "gaussian_prior_scale", None)
    scale = scale_of() if scale_of is not None else torch.full((potential.dim,), math.nan, **placement(potential))
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


class _AdaptiveSchedule:
    """``schedule="adaptive"`` (docs/algorithms.md, section 11), in cycles of two phases.

    *Search*: the rates stay at their start until the ELBO has settled (the window test every
    ``window`` steps, on windows of ``max(window, steps of the phase / 4)`` in whole epochs: the
    last quarter of the phase against the one before, so that a fit still improving slowly goes
    on), or until the last A steps, A = ``min(anneal_steps, num_steps // 2)``. *Anneal*: the
    optimizers' moments are reset (those of the transient no longer describe the gradients) and
    the rates decay geometrically to ``lr_decay`` times their start over A steps (or the steps
    left). From the end of the decay, every ``window`` steps: once the ELBO has settled, the fit
    stops if the guide is stationary (the fresh-gradient test); if not, a new cycle searches again
    from the start rates when two windows of steps are left, else the fit stops there.
    """

    def __init__(self, opts: VIOptions, optimizers, window: int, num_batches: int):
        self.opts, self.optimizers, self.window, self.num_batches = opts, optimizers, window, num_batches
        self.start = [o.param_groups[0]["lr"] for o in optimizers]
        self.anneal_steps = max(1, min(opts.anneal_steps, opts.num_steps // 2))  # A: half the budget at most
        self.searching, self.phase_from, self.anneal = True, 0, self.anneal_steps
        self.stationarity: tuple[int, float] | None = None  # (steps, statistic) of the last stationarity test

    def _set_rates(self, factor: float) -> None:
        for o, lr in zip(self.optimizers, self.start):
            for group in o.param_groups:
                group["lr"] = lr * factor

    def _start_anneal(self, done: int) -> None:
        self.searching, self.phase_from = False, done
        self.anneal = max(1, min(self.anneal_steps, self.opts.num_steps - done))
        for o in self.optimizers:
            o.state.clear()

    def settled(self, elbo: np.ndarray, done: int, window: int) -> bool:
        return done - self.phase_from >= 2 * window and \
            abs(elbo_change(elbo[:done], window)[0]) <= self.opts.tolerance

    def step(self, done: int, elbo: np.ndarray, stationarity: Callable[[], float]) -> bool:
        """After ``done`` steps: set the next step's rates; True when the fit should stop."""
        k = done - self.phase_from
        if self.searching:
            search = window_steps(max(self.window, k // 4), self.num_batches)
            if (k % self.window == 0 and self.settled(elbo, done, search)) \
                    or done >= self.opts.num_steps - self.anneal_steps:
                self._start_anneal(done)
            return False
        self._set_rates(self.opts.lr_decay ** (min(k, self.anneal) / self.anneal))
        if k < self.anneal or (k - self.anneal) % self.window or not self.settled(elbo, done, self.window):
            return False
        self.stationarity = (done, stationarity())
        if self.stationarity[1] <= self.opts.tolerance or self.opts.num_steps - done < 2 * self.window:
            return True
        self.searching, self.phase_from = True, done  # not stationary: search again
        self._set_rates(1.0)
        for o in self.optimizers:
            o.state.clear()
        return False


def _schedulers(opts: VIOptions, optimizers):
    if opts.schedule == "exponential":
        gamma = opts.lr_decay ** (1.0 / opts.num_steps)
        return [torch.optim.lr_scheduler.ExponentialLR(o, gamma=gamma) for o in optimizers]
    if opts.schedule == "plateau":
        return [torch.optim.lr_scheduler.ReduceLROnPlateau(o, mode="min", factor=opts.plateau_factor,
                                                           patience=opts.plateau_patience) for o in optimizers]
    return []


class _Objective:
    """The loss of one step: its minibatch (a fresh random partition every epoch), its KL weight
    and the estimator's surrogate, whose gradient is the step's gradient estimate."""

    def __init__(self, potential, opts: VIOptions, prior_scale: Tensor | None):
        self.potential, self.opts, self.prior_scale = potential, opts, prior_scale
        self.device = getattr(potential, "device", None)  # where the minibatch rows go: the data's device
        self.n = int(potential.num_data)
        self.m = num_batches(self.n, opts.batch_size)
        self.pi = kl_weights(self.m, opts.kl_weighting)
        self.weights = (self.m * self.pi).tolist()  # M pi_i: the KL weight of step i in full-data units
        self.batches: list = [None]
        score = opts.estimator == "score"
        self.loo = score and opts.score_baseline and opts.num_particles > 1
        self.ema = None  # running mean of past losses: the score estimator's baseline with one particle

    def __call__(self, loc: Tensor, rho: Tensor, step: int):
        """``(terms, KL weight, surrogate / N)`` of step ``step`` (counted from 0)."""
        i = step % self.m
        if i == 0 and self.m > 1:
            self.batches = list(torch.tensor_split(torch.randperm(self.n, device=self.device), self.m))
        rows = self.batches[i]
        eps = torch.randn(self.opts.num_particles, loc.numel(), dtype=loc.dtype, device=loc.device)
        skip_gaussian = self.prior_scale is not None
        terms = elbo_terms(loc, rho, eps,
                           lambda theta: self.potential.log_prior_and_likelihood(theta, rows, skip_gaussian),
                           self.opts.estimator, self.prior_scale)
        w = self.weights[i]
        surrogate = surrogate_loss(terms, w, self.opts.estimator, "loo" if self.loo else (self.ema or 0.0))
        return terms, w, surrogate / self.n

    def update_baseline(self, terms, w: float) -> None:
        if self.opts.estimator == "score" and self.opts.score_baseline and not self.loo:
            f = float((w * terms.kl_mc + terms.nll).mean().detach())
            self.ema = f if self.ema is None else 0.9 * self.ema + 0.1 * f

    def stationarity(self, loc: Tensor, rho: Tensor, draws: int) -> float:
        """The stationarity statistic (:func:`~bnnzoo.inference.vi.convergence.stationarity`) of the
        guide ``(loc, rho)`` from ``draws`` fresh gradient estimates (whole epochs of minibatches)."""
        loc, rho = loc.detach().clone().requires_grad_(True), rho.detach().clone().requires_grad_(True)
        batches = self.batches  # the fit's epoch goes on with its own partition afterwards
        total = torch.zeros(2 * loc.numel(), dtype=torch.float64, device=loc.device)
        squares = torch.zeros_like(total)
        count = torch.zeros((), dtype=torch.long, device=loc.device)
        for step in range(draws):
            _, _, loss = self(loc, rho, step)
            grad = torch.cat(torch.autograd.grad(loss, (loc, rho))).to(torch.float64)
            finite = torch.isfinite(grad).all()  # an estimate that is not finite is left out
            total += torch.where(finite, grad, 0.0)
            squares += torch.where(finite, grad * grad, 0.0)
            count += finite
        self.batches = batches
        return stationarity(total.cpu().numpy(), squares.cpu().numpy(), int(count))


def fit_mean_field(potential, options: VIOptions | None = None, *,
                   callback: Callable[[int, MeanFieldGuide, dict], Any] | None = None, warn: bool = True,
                   on_step: Callable[[int, Callable[[], dict]], Any] | None = None, state: dict | None = None,
                   **kwargs) -> VIFit:
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
    warn : bool
        Warn (``UserWarning``) when the fit has not converged.
    on_step : callable, optional
        ``on_step(steps_done, state)`` after every step that does not end the fit; ``state()``
        gives the loop's complete state (guide, optimizers, schedules, traces, minibatch order,
        RNG states), what a checkpoint stores.
    state : dict, optional
        Such a state: the fit continues from it as if it had never stopped.

    Returns
    -------
    VIFit
        With the convergence test of :mod:`~bnnzoo.inference.vi.convergence`
        (``relative_change``, ``stationarity``, ``converged``).

    A step whose loss or gradient is not finite is skipped (no update; its
    ``loss`` recorded as NaN).
    """
    opts = replace(options, **kwargs) if options is not None else VIOptions(**kwargs)
    if not hasattr(potential, "log_prior_and_likelihood"):
        raise TypeError(f"fit_mean_field needs a potential with log_prior_and_likelihood (a BNNPotential), "
                        f"got {type(potential).__name__}")
    prior_scale = analytic_prior_scale(potential, opts.kl_mode)
    loc = initial_loc(potential, opts.init_loc, opts.init_radius).clone().requires_grad_(True)
    rho = torch.full_like(loc, opts.initial_rho).requires_grad_(True)
    if prior_scale is not None:
        prior_scale = prior_scale.to(loc.dtype)
    objective = _Objective(potential, opts, prior_scale)
    m = objective.m
    opt_loc = make_optimizer(opts.optimizer, [loc], opts.lr, "optimizer")
    opt_rho = make_optimizer(opts.scale_optimizer if opts.scale_optimizer is not None else opts.optimizer,
                             [rho], opts.scale_lr or opts.lr, "scale_optimizer")
    optimizers = (opt_loc, opt_rho)
    schedulers = _schedulers(opts, optimizers)
    window = window_steps(opts.window, m)
    adaptive = _AdaptiveSchedule(opts, optimizers, window, m) if opts.schedule == "adaptive" else None
    trace = {k: np.full(opts.num_steps, np.nan) for k in TRACES}
    epochs: dict[str, list] = {k: [] for k in TRACES}
    done, start = opts.num_steps, 0
    if state is not None:
        loc, rho, optimizers, schedulers, adaptive, objective, trace, epochs, start = (
            state[k] for k in ("loc", "rho", "optimizers", "schedulers", "adaptive", "objective", "trace", "epochs",
                               "step"))
        opt_loc, opt_rho = optimizers
        set_rng_state(state["rng"])  # after the set-up above, which draws its own start
    for step in range(start, opts.num_steps):
        epoch, i = divmod(step, m)
        terms, w, surrogate = objective(loc, rho, step)
        for o in optimizers:
            o.zero_grad()
        surrogate.backward()
        # the step's numbers on the host in one transfer (on a GPU: one synchronisation per step)
        grads_finite = torch.isfinite(loc.grad).all() & torch.isfinite(rho.grad).all()
        loss, kl, nll, grads_finite = torch.stack([(w * terms.kl + terms.nll).mean(), terms.kl.mean(),
                                                   terms.nll.mean(), grads_finite.to(loc.dtype)]).tolist()
        finite = math.isfinite(loss) and grads_finite == 1.0
        trace["lr_loc"][step] = opt_loc.param_groups[0]["lr"]
        trace["lr_scale"][step] = opt_rho.param_groups[0]["lr"]
        if finite:
            for o in optimizers:
                o.step()
            trace["loss"][step] = loss
            objective.update_baseline(terms, w)
        trace["kl"][step], trace["nll"][step], trace["elbo"][step] = kl, nll, -(kl + nll)
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
        if adaptive is not None and adaptive.step(step + 1, trace["elbo"],
                                                  lambda: objective.stationarity(loc, rho, window)):
            done = step + 1
            break
        if on_step is not None:
            on_step(step + 1, lambda: {"loc": loc, "rho": rho, "optimizers": optimizers, "schedulers": schedulers,
                                       "adaptive": adaptive, "objective": objective, "trace": trace,
                                       "epochs": epochs, "step": step + 1, "rng": rng_state()})
    trace = {k: v[:done] for k, v in trace.items()}
    guide = MeanFieldGuide(loc.detach(), F.softplus(rho).detach())
    final_window = window_steps(opts.window, m, done)
    change, final_elbo = elbo_change(trace["elbo"], final_window)
    draws = window_steps(opts.window, m, 2 * done)  # fresh gradients: a window, at most the steps taken
    if adaptive is not None and adaptive.stationarity is not None and adaptive.stationarity[0] == done:
        draws, stationary = window, adaptive.stationarity[1]
    elif abs(change) <= opts.tolerance:  # only a settled ELBO needs the second test
        stationary = objective.stationarity(loc, rho, draws)
    else:
        draws, stationary = 0, math.nan
    fit = VIFit(guide, trace, {k: np.asarray(v, dtype=float) for k, v in epochs.items()}, m,
                objective.pi.numpy(), change, stationary, final_elbo, final_window, draws, opts.tolerance)
    if warn and not fit.converged:
        warnings.warn(not_converged_message("svi", np.array([change]), np.array([fit.stationarity]), final_window,
                                            draws, opts.tolerance, opts.num_steps), stacklevel=2)
    return fit


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



def _fits(potential, options: VIOptions, num_chains: int, checkpoint=None) -> list[VIFit]:
    """``num_chains`` independent fits, one after another; with a
    :class:`~bnnzoo.inference.checkpoint.Checkpoint`, saved as they go and continued from it."""
    if checkpoint is None:
        return [fit_mean_field(potential, options, warn=False) for _ in range(num_chains)]
    checkpoint.externals.setdefault("potential", potential)
    saved = checkpoint.load() or {"chain": 0, "finished": []}
    fits = list(saved["finished"])
    with deferred_interrupt() as interrupt:
        for chain in range(len(fits), num_chains):
            state = saved.get("fit") if saved["chain"] == chain else None
            if saved["chain"] == chain and state is None and "rng" in saved:
                set_rng_state(saved["rng"])  # where the previous fit left it

            def on_step(done, state):
                if interrupt.requested:
                    interrupt.acknowledge()
                if interrupt.requested or checkpoint.due():
                    checkpoint.save({"chain": chain, "fit": state(), "finished": fits},
                                    chain=chain, iteration=done, draws=0)
                if interrupt.requested:
                    raise checkpoint.interrupted(f"at step {done} of fit {chain}")

            try:
                fits.append(fit_mean_field(potential, options, warn=False, on_step=on_step, state=state))
            except KeyboardInterrupt as stop:  # a hard stop (deferred_interrupt): the last save stands
                if isinstance(stop, Interrupted):
                    raise
                raise checkpoint.stopped(f"fit {chain}") from None
            checkpoint.save({"chain": chain + 1, "rng": rng_state(), "finished": fits}, chain=chain + 1,
                            iteration=0, draws=0)
    return fits


def sample_mean_field(potential, options: VIOptions, num_samples: int, num_chains: int,
                      checkpoint=None) -> Draws:
    """One independent fit per chain, then ``num_samples`` iid draws from each fitted guide
    (``checkpoint``: a :class:`~bnnzoo.inference.checkpoint.Checkpoint` the fits save to and continue from).

    Returns :class:`~bnnzoo.results.Draws` of the constrained sites, with ``lp``
    (the log density at each draw) and a :class:`~bnnzoo.results.VITrace` of the fits:
    their traces (NaN after a fit that stopped early), the convergence tests of each fit
    and the spread across fits (:mod:`~bnnzoo.inference.vi.convergence`). One warning
    names the fits that have not converged.
    """
    analytic_prior_scale(potential, options.kl_mode)  # fail before fitting on a bad kl=
    fits = _fits(potential, options, num_chains, checkpoint)
    theta = torch.stack([f.guide.sample(num_samples) for f in fits])  # [chain, draw, D]
    with torch.no_grad():
        samples = {k: v.cpu().numpy() for k, v in potential.constrain(theta).items()}
        lp = -potential(theta.reshape(-1, potential.dim)).reshape(num_chains, num_samples).cpu().numpy()
    longest = max(f.num_steps for f in fits)
    trace = {k: np.stack([np.pad(f.trace[k], (0, longest - f.num_steps), constant_values=np.nan) for f in fits])
             for k in TRACES}
    loc = torch.stack([f.guide.loc for f in fits]).cpu().numpy()
    scale = torch.stack([f.guide.scale for f in fits]).cpu().numpy()
    change = np.array([f.relative_change for f in fits])
    stat = np.array([f.stationarity for f in fits])
    final_elbo = np.array([f.final_elbo for f in fits])
    spread_elbo, spread_loc = fit_spread(final_elbo, loc, scale)
    window = max(f.window for f in fits)
    vi = VITrace(loss=trace["loss"], terms={k: v for k, v in trace.items() if k != "loss"},
                 guide={"loc": loc, "scale": scale}, num_batches=fits[0].num_batches,
                 skipped_steps=np.array([f.skipped_steps for f in fits]),
                 num_steps=np.array([f.num_steps for f in fits]), converged=np.array([f.converged for f in fits]),
                 relative_change=change, stationarity=stat, final_elbo=final_elbo, window=window,
                 gradient_draws=max(f.gradient_draws for f in fits), tolerance=float(options.tolerance),
                 spread_elbo=spread_elbo, spread_loc=spread_loc)
    if not vi.converged.all():
        warnings.warn(not_converged_message("svi", change, stat, window, vi.gradient_draws, options.tolerance,
                                            options.num_steps), stacklevel=2)
    return Draws(samples, {"lp": lp}, vi=vi)
