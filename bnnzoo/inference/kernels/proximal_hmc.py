r"""Proximal HMC for posteriors with a non-differentiable L1 (Laplace) part (paper 000).

Target :math:`U(w) = f(w) + \sum_d \beta_d |w_d|`: ``f`` smooth (likelihood and
every smooth prior term), :math:`\beta` from the priors' smooth/L1 split
(:meth:`~bnnzoo.inference.potential.FlatPotential.l1_weights`: ``1/scale`` of a
Laplace prior). HMC with the family's window adaptation and one change: the leapfrog uses a
proximal force (:mod:`bnnzoo.inference.proximal`) instead of the gradient, which
does not exist at :math:`w_d = 0`. The Metropolis test uses the *true* Hamiltonian
with the exact L1 term, so the chain targets the exact posterior whatever the
force and :math:`\lambda` (they only change efficiency).

Paper 000's public code is not a valid MCMC (the force is never re-evaluated,
the kinetic energy is constant, the acceptance test has the wrong sign); this is
the corrected sampler, see ``docs/algorithms.md`` ("Proximal HMC").
"""

from __future__ import annotations

import math
import re
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import torch

from ... import validation
from ..adaptation import WarmupComponent, acceptance_statistic, finite_statistic
from ..proximal import moreau_force, ns_hmc_force, prox_gradient_force
from .hmc import FixedStepHMC, HMCParams, HMCSampler, HMCState, WarmupOptions, gamma_option, search_step_size
from ..options import choice, flag, integer, option, positive, site_names

__all__ = ["CHAIN_METHODS", "FORCES", "LambdaSearch", "ProximalForce", "ProximalHMC", "ProximalOptions",
           "acceptance_statistic", "relative_hamiltonian_error", "tune_lam"]

Tensor = torch.Tensor

FORCES = ("moreau", "ns-hmc", "prox-gradient")
CHAIN_METHODS = ("vectorized", "sequential")
_WEIGHT = re.compile(r"^layers\.\d+\.weight$")
#: lam grid of :func:`tune_lam`, in units of the step size
LAM_GRID = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0)


def _lam(name: str, value) -> None:
    if value is not None and value != "tune":
        positive(name, value)


def _step_jitter(name: str, value) -> None:
    validation.in_interval(name, value, 0, 1)


@dataclass(frozen=True)
class ProximalOptions(WarmupOptions):
    """Options of :class:`ProximalHMC`."""

    step_size: float = option(0.01, "initial step size (refined before warm-up when adapt_step_size)", positive)
    num_steps: int = option(20, "leapfrog steps per transition", integer(1))
    lam: float | str | None = option(
        None, "Moreau parameter lambda in the mass metric; None: step_size/2; 'tune': picked from a grid", _lam)
    force: str = option("moreau", "leapfrog force: 'moreau', 'ns-hmc' or 'prox-gradient'", choice(*FORCES))
    step_jitter: float = option(0.2, "relative step-size jitter j in [0, 1) per chain and transition",
                                _step_jitter)
    dual_averaging_gamma: float = gamma_option(
        0.1, "the step jitter flattens the acceptance curve that makes ChEES want 0.15")
    inner_steps: int = option(5, "proximal-gradient iterations of force='ns-hmc'", integer(1))
    spike_and_slab: bool = option(False, "also treat the kink at 0 of Laplace-spike spike-and-slab priors as L1",
                                  flag)
    sparsity_threshold: float = option(1e-2, "the sparsity stat counts weights with |w| below this", positive)
    sparsity_sites: Sequence[str] | None = option(
        None, "sites counted by the sparsity stat (None: the network weights)", site_names)
    chain_method: str = option("vectorized", "evaluate the chains' potential as one batch or one chain at a time",
                               choice(*CHAIN_METHODS))


def relative_hamiltonian_error(energy_start: Tensor, energy_end: Tensor) -> float:
    r""":math:`\sum_c |H_c' - H_c| / \sum_c |H_c|` over chains; inf if any end energy is not finite."""
    if not bool(torch.isfinite(energy_end).all()):
        return math.inf
    return float((energy_end - energy_start).abs().sum() / energy_start.abs().sum().clamp(min=1e-12))


class ProximalForce:
    r"""The proximal leapfrog force of :class:`ProximalHMC` (its docstring has the three rules) with
    :math:`\lambda_d = \lambda M^{-1}_{dd}`, :math:`\lambda` from the parameters (:meth:`lam`); the
    true :math:`U` beside it. Its key is :math:`(\lambda, M^{-1})`; it has no step of its own (the
    generic leapfrog runs it). ``chain_method="sequential"``: the potential one chain at a time."""

    def __init__(self, potential, l1_weights: Tensor, force: str, inner_steps: int, chain_method: str):
        self.potential, self.l1_weights, self.kind = potential, l1_weights, force
        self.inner_steps, self.chain_method = inner_steps, chain_method

    @staticmethod
    def lam(params: HMCParams) -> float:
        r""":math:`\lambda`: the number ``params.lam``, or ``params.lam_factor`` times the step size."""
        return params.lam if params.lam is not None else params.lam_factor * params.step_size

    def key(self, params: HMCParams):
        return (self.lam(params), params.inv_mass)

    def _rows(self, fn, theta: Tensor):
        """``fn`` on the whole batch, or row by row for ``chain_method="sequential"``."""
        if self.chain_method == "vectorized" or theta.shape[0] == 1:
            return fn(theta)
        outs = [fn(theta[c:c + 1]) for c in range(theta.shape[0])]
        return tuple(torch.cat(parts) for parts in zip(*outs))

    def _smooth_grad(self, theta: Tensor) -> Tensor:
        r""":math:`\nabla f = \nabla U - \beta \odot \operatorname{sign}(w)`."""
        return self._rows(lambda t: (self.potential.value_and_grad(t)[1] - self.l1_weights * torch.sign(t),),
                          theta)[0]

    def evaluate(self, theta: Tensor, params: HMCParams) -> tuple[Tensor, Tensor]:
        r"""True potential :math:`U` ``[C]`` and the leapfrog force :math:`F` ``[C, D]`` at ``theta``."""
        lam = self.lam(params) * params.inv_mass
        value, grad = self._rows(self.potential.value_and_grad, theta)
        beta = self.l1_weights
        grad_f = grad - beta * torch.sign(theta)
        if self.kind == "moreau":
            force = moreau_force(theta, grad_f, beta, lam)
        elif self.kind == "prox-gradient":
            force = prox_gradient_force(theta, grad_f, beta, lam)
        else:
            force = ns_hmc_force(theta, grad_f, beta, lam, self._smooth_grad, self.inner_steps)
        return value, force

    def evaluator(self, params: HMCParams):
        return partial(self.evaluate, params=params)

    def step_fn(self):
        return None  # the proximal force, not the potential's (compiled) gradient step


def sparsity(theta: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """Fraction of the counted weights (``mask``) with ``|w| < threshold``, ``[C]``."""
    small = theta[:, mask].abs() < threshold
    return small.to(theta.dtype).mean(-1)


def tune_lam(sampler: HMCSampler, state: HMCState, params: HMCParams, grid: Sequence[float] = LAM_GRID
             ) -> tuple[HMCParams, dict]:
    r"""Pick :math:`\lambda = c\,\epsilon` with the factor :math:`c` from ``grid`` by the smallest
    relative Hamiltonian error :math:`\sum_c|\Delta H_c| / \sum_c |H_c|` of one un-jittered trajectory
    of ``params.num_steps`` from ``state``, with the same momenta for every candidate (common random
    numbers); ties go to the larger :math:`c`. Returns the parameters with :math:`\lambda` that factor
    times the step size (a given number replaced) and ``{"factor": c, "lam": c * step_size,
    "grid": [...], "errors": [...]}``."""
    grid = list(grid)
    if not grid:
        raise ValueError("tune_lam: grid is empty")
    for value in grid:
        positive("tune_lam grid value", value)
    theta = state.position
    p = sampler.momentum(theta, params.inv_mass)
    step = torch.full((theta.shape[0], 1), params.step_size, dtype=theta.dtype, device=theta.device)
    errors = []
    for factor in grid:
        candidate = params._replace(lam=factor * params.step_size)
        tr = sampler.trajectory(sampler.current(state, candidate), candidate, p, step, params.num_steps)
        errors.append(relative_hamiltonian_error(tr.energy, tr.energy + tr.error))
    best = min(range(len(grid)), key=lambda i: (errors[i], -grid[i]))
    params = params._replace(lam=None, lam_factor=float(grid[best]))
    return params, {"factor": params.lam_factor, "lam": ProximalForce.lam(params), "grid": [float(g) for g in grid],
                    "errors": errors}


class ProximalHMC(FixedStepHMC):
    r"""HMC for :math:`U(w) = f(w) + \sum_d \beta_d|w_d|` with a proximal leapfrog force
    and an exact Metropolis test (Chaari et al. 2016; Pereyra 2016; paper 000).

    Each transition draws :math:`p \sim N(0, M)` per chain and a step size
    :math:`\epsilon_c = \epsilon (1 + j u_c)`, :math:`u_c \sim U(-1, 1)` (``step_jitter``
    :math:`j`: varying the trajectory length avoids periodic orbits), runs
    ``num_steps`` leapfrog steps

    .. math::
        p \leftarrow p - \tfrac{\epsilon}{2} F(w),\quad
        w \leftarrow w + \epsilon M^{-1} p,\quad
        p \leftarrow p - \tfrac{\epsilon}{2} F(w),

    with the force :math:`F` chosen by ``force`` (:mod:`bnnzoo.inference.proximal`):

    * ``"moreau"``: :math:`\nabla f(w) + \operatorname{clip}(w/\lambda, -\beta, \beta)`;
    * ``"prox-gradient"``: :math:`(w - \operatorname{prox}_{\lambda\beta|\cdot|}(w - \lambda\nabla f(w)))/\lambda`
      (paper 000's plug-and-play rule);
    * ``"ns-hmc"``: :math:`(w - \operatorname{prox}_{\lambda U}(w))/\lambda`, the prox by
      ``inner_steps`` proximal-gradient iterations (``inner_steps - 1`` extra
      gradients per leapfrog step);

    and accepts with probability :math:`\min(1, e^{-(H' - H)})` on the true
    :math:`H = U(w) + \tfrac12 p^\top M^{-1} p`. Kicks and drifts are shears, so the
    map is volume preserving and reversible for any position-dependent force:
    the chain is exact for every :math:`\lambda`. A NaN/inf energy, or an energy
    error above 1000, is a rejected divergence.

    :math:`\lambda` acts in the metric of the mass matrix, like the step size:
    coordinate ``d`` uses :math:`\lambda_d = \lambda M^{-1}_{dd}` (just :math:`\lambda`
    with the unit mass; the Moreau band :math:`|w_d| < \lambda_d\beta_d` then has
    the same width relative to the posterior scale in every coordinate). It
    defaults to :math:`\epsilon/2`, following the step size during warm-up;
    ``lam="tune"`` sets :math:`\lambda = c\,\epsilon` with the factor :math:`c`
    picked from ``LAM_GRID`` by the smallest relative Hamiltonian error
    (:func:`tune_lam`), before warm-up and after every mass-matrix update.

    Warm-up (:class:`~bnnzoo.inference.adaptation.WindowAdaptation`): the step size
    by dual averaging toward ``target_accept`` of :func:`acceptance_statistic`
    (harmonic-mean acceptance over the chains, times the fraction of finite
    proposals), and a diagonal mass matrix from the pooled variance of the
    chains over Stan's doubling windows; both frozen after warm-up. The number
    of leapfrog steps is fixed.

    Options: :class:`ProximalOptions`. The L1 part comes from ``potential.l1_weights()``:
    Laplace priors of a :class:`~bnnzoo.models.BNN`, Laplace sites of a plain Pyro
    model (detected on its trace).

    Per-draw statistics: those of :class:`~.hmc.FixedStepHMC` (``energy`` at the
    accepted state, ``energy_error``, ``max_energy_error``, ...) with ``step_size``
    the jittered step of each chain, plus ``step_size_nom`` (the un-jittered
    :math:`\epsilon`) and ``sparsity``. A continuous posterior puts no mass on exact zeros,
    so ``sparsity`` counts near-zero weights, never exact ones.

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> kernel = ProximalHMC(model, step_size=2e-3, num_steps=20, num_chains=8)
    >>> mcmc = MCMC(kernel, num_samples=500, warmup_steps=500)
    >>> mcmc.run(x, y)
    >>> draws = split_mcmc(mcmc)          # 8 chains

    **References**

    * Chaari, Tourneret, Chaux and Batatia (2016). A Hamiltonian Monte Carlo method
      for non-smooth energy sampling. IEEE Trans. Signal Processing 64(21).
    * Pereyra (2016). Proximal Markov chain Monte Carlo algorithms. Statistics and Computing 26.
    * Neal (2011). MCMC using Hamiltonian dynamics. Handbook of MCMC.
    """

    Options = ProximalOptions
    target_family = "proximal_hmc"
    stat_names = FixedStepHMC.stat_names + ("step_size_nom", "sparsity")
    multi_step_graph = False  # the generic leapfrog on the proximal force

    def build(self, theta: Tensor):
        """The HMC sampler on the proximal force with the step jitter and the sparsity statistic; the
        step-size search (with warm-up), then with ``lam="tune"`` the lambda search; the window
        adaptation on :func:`acceptance_statistic` over the finite proposals, with ``lam="tune"`` the
        lambda search after every mass update beside it (:class:`LambdaSearch`)."""
        opts = self.options
        l1_weights = self.potential.l1_weights(spike_and_slab=opts.spike_and_slab).to(theta.dtype)
        if not bool((l1_weights > 0).any()):
            warnings.warn("ProximalHMC: the potential has no L1 (Laplace) part; this is plain HMC", stacklevel=2)
        force = ProximalForce(self.potential, l1_weights, opts.force, opts.inner_steps, opts.chain_method)
        mask = self.sparsity_mask(l1_weights)
        sampler = self.hmc_sampler(force=force, step_jitter=opts.step_jitter,
                                   sparsity=partial(sparsity, mask=mask, threshold=opts.sparsity_threshold))
        lam = None if opts.lam in (None, "tune") else float(opts.lam)
        params = HMCParams(opts.step_size, theta.new_ones(theta.shape[-1]), opts.num_steps, lam=lam)
        state = sampler.init(theta)
        if self.has_warmup and opts.adapt_step_size:
            params = params._replace(step_size=search_step_size(sampler, state, params))
        self.lam_tuning = None  # kernel.tune_lam's where lam is not "tune"
        components = ()
        if opts.lam == "tune":
            search = LambdaSearch()
            params, search.tuning = tune_lam(sampler, state, params)
            components = (search,)
        return sampler, self.window_adaptation(finite_statistic, components), params

    def sparsity_mask(self, l1_weights: Tensor) -> Tensor:
        """The coordinates the ``sparsity`` statistic counts: ``sparsity_sites``, else the network
        weights, else the L1 coordinates, else all."""
        names, sites = self.potential.names, self.options.sparsity_sites
        if sites is not None:
            unknown = [s for s in sites if s not in names]
            if unknown:
                raise ValueError(f"sparsity_sites: unknown site(s) {', '.join(map(repr, unknown))}; "
                                 f"sites: {', '.join(names)}")
            chosen = set(sites)
        else:
            chosen = {n for n in names if _WEIGHT.match(n)}
        device = self.potential.device
        mask = torch.cat([torch.full((size,), name in chosen, device=device)
                          for name, size in zip(names, self.potential.sizes)])
        if not mask.any() and sites is None:
            mask = l1_weights > 0
        return mask if mask.any() else torch.ones(self.potential.dim, dtype=torch.bool, device=device)

    @property
    def lam(self) -> float:
        r"""The current :math:`\lambda`: the user's number, or a factor (1/2, or tuned) times the current
        step size."""
        return ProximalForce.lam(self.params)

    def tune_lam(self, theta: Tensor | None = None, grid: Sequence[float] | None = None) -> dict:
        """:func:`tune_lam` from ``theta`` (default: the chains' current points) on this kernel's sampler
        and parameters, which it updates (kept in :attr:`lam_tuning`). Call after ``setup`` (e.g. after
        ``MCMC.run``), or pass ``lam="tune"``."""
        if self.sampler is None:
            raise ValueError("tune_lam: the kernel is not set up yet; run it under MCMC or pass lam='tune'")
        state = self.state if theta is None else self._continue(theta)
        self.params, tuning = tune_lam(self.sampler, state, self.params, LAM_GRID if grid is None else grid)
        search = self._lambda_search()
        if search is not None:
            search.tuning = tuning
        else:
            self.lam_tuning = tuning
        return tuning

    def _lambda_search(self) -> LambdaSearch | None:
        searches = [c for c in getattr(self.adaptation, "components", ()) if isinstance(c, LambdaSearch)]
        return searches[0] if searches else None

    # ---------------------------------------------------------- reporting
    def tuned(self) -> dict:
        diag = {**super().tuned(), "lam": self.lam, "force": self.options.force,
                "num_l1_coordinates": int((self.sampler.force.l1_weights > 0).sum())}
        search = self._lambda_search()
        tuning = search.tuning if search is not None else self.lam_tuning
        if tuning is not None:
            diag["lam_tuning"] = tuning
        return diag

    def logging(self) -> OrderedDict:
        log = super().logging()
        if self.params is not None:
            log["lam"] = f"{self.lam:.2e}"
        return log


class LambdaSearch(WarmupComponent):
    """Proximal HMC's ``lam="tune"`` as a part of the window adaptation: :func:`tune_lam` again after
    every mass-matrix update (the last search's result in :attr:`tuning`)."""

    def __init__(self):
        self.tuning: dict | None = None

    def after_mass_change(self, adaptation, sampler, state, params, settled) -> HMCParams:
        params, self.tuning = tune_lam(sampler, state, params)
        return params
