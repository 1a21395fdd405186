r"""Proximal HMC for posteriors with a non-differentiable L1 (Laplace) part (paper 000).

Target :math:`U(w) = f(w) + \sum_d \beta_d |w_d|`: ``f`` smooth (likelihood and
every smooth prior term), :math:`\beta` from the priors' smooth/L1 split
(:meth:`~bnnzoo.inference.potential.FlatPotential.l1_weights`: ``1/scale`` of a
Laplace prior). The leapfrog uses a proximal force (:mod:`.proximal`) instead of
the gradient, which does not exist at :math:`w_d = 0`; the Metropolis test uses
the *true* Hamiltonian with the exact L1 term, so the chain targets the exact
posterior whatever the force and :math:`\lambda` (they only change efficiency).

Paper 000's public code is not a valid MCMC (the force is never re-evaluated,
the kinetic energy is constant, the acceptance test has the wrong sign); this is
the corrected sampler, see ``ALGORITHMS.md`` section 1.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import OrderedDict
from typing import Sequence

import torch

from ..results import Draws
from .base import check_fraction_option, check_positive_int, check_positive_option, metropolis_accept
from .chees import MAX_ENERGY_ERROR, ChEESHMC, harmonic_mean_acceptance
from .engines import CHAIN_METHODS, _chain_method, engine, run_mcmc, with_compile_time
from .integrators import kinetic_energy, leapfrog
from .potential import make_potential
from .proximal import moreau_force, ns_hmc_force, prox_gradient_force

__all__ = ["FORCES", "ProximalHMC", "acceptance_statistic", "relative_hamiltonian_error"]

Tensor = torch.Tensor

FORCES = ("moreau", "ns-hmc", "prox-gradient")
_WEIGHT = re.compile(r"^layers\.\d+\.weight$")
#: lam grid of :meth:`ProximalHMC.tune_lam`, in units of the step size
LAM_GRID = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0)


def relative_hamiltonian_error(energy_start: Tensor, energy_end: Tensor) -> float:
    r""":math:`\sum_c |H_c' - H_c| / \sum_c |H_c|` over chains; inf if any end energy is not finite."""
    if not bool(torch.isfinite(energy_end).all()):
        return math.inf
    return float((energy_end - energy_start).abs().sum() / energy_start.abs().sum().clamp(min=1e-12))


def acceptance_statistic(prob: Tensor, finite: Tensor) -> float:
    r"""What step-size adaptation steers to ``target_accept``: the fraction of chains
    whose proposal has a finite energy times the harmonic mean of those chains'
    acceptance probabilities.

    The harmonic mean (as in ChEES) is dominated by the worst chains, so one shared
    step size stays stable for chains in regions of very different curvature (an
    energy error of 1e4 drives it to ~0). A proposal in a NaN region is a
    rejection whatever the step size (the exact trajectory goes there), so it
    counts arithmetically; left out (as ChEES does), the step size would grow
    until most proposals land there.
    """
    if not bool(finite.any()):
        return 0.0
    return float(finite.double().mean()) * harmonic_mean_acceptance(prob, ~finite)


class ProximalHMC(ChEESHMC):
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
    (:meth:`tune_lam`), before warm-up and after every mass-matrix update.

    Warm-up (reused from :class:`~bnnzoo.inference.chees.ChEESHMC`): the step size
    by dual averaging toward ``target_accept`` of :func:`acceptance_statistic`
    (harmonic-mean acceptance over the chains, times the fraction of finite
    proposals), and a diagonal mass matrix from the pooled variance of the
    chains over Stan's doubling windows; both frozen after warm-up. The number
    of leapfrog steps is fixed.

    Parameters
    ----------
    model, potential, num_chains, init_radius
        See :class:`~bnnzoo.inference.base.FlatKernel`. The L1 part comes from
        ``potential.l1_weights()``: Laplace priors of a :class:`~bnnzoo.models.BNN`,
        Laplace sites of a plain Pyro model (detected on its trace).
    step_size : float
        Initial step size (refined before warm-up when ``adapt_step_size``).
    num_steps : int
        Leapfrog steps per transition.
    lam : float, None or "tune"
        Moreau parameter :math:`\lambda` (in the mass-matrix metric, see above);
        None: half the step size; "tune": :meth:`tune_lam`.
    force : {"moreau", "ns-hmc", "prox-gradient"}
    target_accept : float, optional
        Target of dual averaging, on :func:`acceptance_statistic` (the arithmetic
        mean acceptance comes out higher). None: recommended for the model
        (:func:`~bnnzoo.inference.tuning.recommend_target_accept`): 0.651, the
        optimal HMC acceptance for smooth targets (Beskos et al. 2013), or 0.45
        for a ReLU-family network (paper 003).
    adapt_step_size, adapt_mass_matrix : bool
    step_jitter : float
        Relative step-size jitter :math:`j \in [0, 1)` per chain and transition.
    inner_steps : int
        Proximal-gradient iterations of ``force="ns-hmc"``
        (:func:`~bnnzoo.inference.proximal.prox_of_potential`).
    spike_and_slab : bool
        Also treat the kink at 0 of Laplace-spike spike-and-slab priors as an L1
        part (:func:`~bnnzoo.inference.potential.prior_l1_weight`).
    sparsity_threshold : float
        The per-draw ``sparsity`` stat is the fraction of weights with
        :math:`|w| <` this threshold.
    sparsity_sites : list of str, optional
        Sites counted by ``sparsity``; default the network weights
        (``layers.<i>.weight``, not biases), else every L1 coordinate, else all.
    chain_method : {"vectorized", "sequential"}
        Evaluate the C chains' potential as one batch, or one chain at a time
        (less memory; same statistics).

    Per-draw statistics: ``acceptance_rate``, ``diverging``, ``energy`` (H at the
    start, after the momentum refresh), ``energy_error``, ``step_size`` (the
    jittered step of each chain), ``n_steps``, ``lp`` (:math:`-U` of the new
    state) and ``sparsity``. A continuous posterior puts no mass on exact zeros,
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

    stat_names = ("acceptance_rate", "diverging", "energy", "energy_error", "step_size", "n_steps", "lp",
                  "sparsity")

    def __init__(self, model=None, potential=None, step_size: float = 0.01, num_steps: int = 20,
                 lam: float | str | None = None, force: str = "moreau", target_accept: float | None = None,
                 adapt_step_size: bool = True, adapt_mass_matrix: bool = True, step_jitter: float = 0.2,
                 inner_steps: int = 5, spike_and_slab: bool = False, sparsity_threshold: float = 1e-2,
                 sparsity_sites: Sequence[str] | None = None, chain_method: str = "vectorized",
                 num_chains: int = 1, init_radius: float = 1.0):
        check_positive_option("step_size", step_size)
        check_positive_int("num_steps", num_steps)
        if lam is not None and lam != "tune":
            check_positive_option("lam", lam)
        if force not in FORCES:
            raise ValueError(f"force {force!r}: choose one of {', '.join(FORCES)}")
        if target_accept is not None:
            check_fraction_option("target_accept", target_accept)
        if isinstance(step_jitter, bool) or not isinstance(step_jitter, (int, float)) or not 0 <= step_jitter < 1:
            raise ValueError(f"step_jitter must be in [0, 1), got {step_jitter!r}")
        check_positive_int("inner_steps", inner_steps)
        check_positive_option("sparsity_threshold", sparsity_threshold)
        if chain_method not in CHAIN_METHODS:
            raise ValueError(f"chain_method {chain_method!r}: choose one of {', '.join(CHAIN_METHODS)}")
        if sparsity_sites is not None and (isinstance(sparsity_sites, str) or not all(
                isinstance(s, str) for s in sparsity_sites)):
            raise ValueError(f"sparsity_sites must be a list of site names, got {sparsity_sites!r}")
        self.num_steps = num_steps
        self.initial_lam = lam
        self.force = force
        self.step_jitter = float(step_jitter)
        self.inner_steps = inner_steps
        self.spike_and_slab = bool(spike_and_slab)
        self.sparsity_threshold = float(sparsity_threshold)
        self.sparsity_sites = None if sparsity_sites is None else list(sparsity_sites)
        self.chain_method = chain_method
        super().__init__(model, potential, step_size=step_size, target_accept=target_accept,
                         adapt_step_size=adapt_step_size, adapt_mass_matrix=adapt_mass_matrix,
                         adapt_trajectory=False, max_leapfrog_steps=num_steps, num_chains=num_chains,
                         init_radius=init_radius)

    # ------------------------------------------------------------ state
    def _reset(self) -> None:
        super()._reset()
        self._lam = None if self.initial_lam in (None, "tune") else float(self.initial_lam)
        self._lam_factor = 0.5  # lam = factor * step_size unless lam is a number
        self.l1_weights: Tensor | None = None
        self._sparsity_mask: Tensor | None = None
        self._force_cache: tuple | None = None  # (theta, (lam, inv_mass), U, force)
        self.lam_tuning: dict | None = None

    @property
    def lam(self) -> float:
        r"""The current :math:`\lambda`: the user's number, or a factor (1/2, or tuned)
        times the current step size."""
        return self._lam if self._lam is not None else self._lam_factor * self.step_size

    def lam_per_coordinate(self, lam: float | None = None) -> Tensor:
        r""":math:`\lambda_d = \lambda M^{-1}_{dd}`, ``[D]``."""
        return (self.lam if lam is None else lam) * self.inv_mass

    def prepare(self, theta: Tensor) -> None:
        self.l1_weights = self.potential.l1_weights(spike_and_slab=self.spike_and_slab).to(theta.dtype)
        if not bool((self.l1_weights > 0).any()):
            warnings.warn("ProximalHMC: the potential has no L1 (Laplace) part; this is plain HMC", stacklevel=2)
        self._sparsity_mask = self._make_sparsity_mask()
        super().prepare(theta)
        if self.initial_lam == "tune":
            self.tune_lam(theta)

    def _make_sparsity_mask(self) -> Tensor:
        names = self.potential.names
        if self.sparsity_sites is not None:
            unknown = [s for s in self.sparsity_sites if s not in names]
            if unknown:
                raise ValueError(f"sparsity_sites: unknown site(s) {', '.join(map(repr, unknown))}; "
                                 f"sites: {', '.join(names)}")
            chosen = set(self.sparsity_sites)
        else:
            chosen = {n for n in names if _WEIGHT.match(n)}
        mask = torch.cat([torch.full((size,), name in chosen) for name, size in zip(names, self.potential.sizes)])
        if not mask.any() and self.sparsity_sites is None:
            mask = self.l1_weights > 0
        return mask if mask.any() else torch.ones(self.potential.dim, dtype=torch.bool)

    def _clip_trajectory_length(self) -> None:
        # no trajectory adaptation: the reported T is num_steps * step_size
        self.trajectory_length = self.num_steps * self.step_size

    # ------------------------------------------------------------ force
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

    def evaluate(self, theta: Tensor, lam: float | None = None) -> tuple[Tensor, Tensor]:
        r"""True potential :math:`U` ``[C]`` and the leapfrog force :math:`F` ``[C, D]`` at ``theta``
        (with :math:`\lambda_d` = :meth:`lam_per_coordinate`)."""
        lam = self.lam_per_coordinate(lam)
        value, grad = self._rows(self.potential.value_and_grad, theta)
        beta = self.l1_weights
        grad_f = grad - beta * torch.sign(theta)
        if self.force == "moreau":
            force = moreau_force(theta, grad_f, beta, lam)
        elif self.force == "prox-gradient":
            force = prox_gradient_force(theta, grad_f, beta, lam)
        else:
            force = ns_hmc_force(theta, grad_f, beta, lam, self._smooth_grad, self.inner_steps)
        return value, force

    def _value_and_force(self, theta: Tensor, lam: float) -> tuple[Tensor, Tensor]:
        """:meth:`evaluate`, from the cache when ``theta`` is the chains' current point."""
        cache, key = self._force_cache, (lam, self.inv_mass)
        if cache is not None and cache[0] is theta and cache[1][0] == lam and cache[1][1] is self.inv_mass:
            return cache[2], cache[3]
        value, force = self.evaluate(theta, lam)
        self._force_cache = (theta, key, value, force)
        self.remember(theta, value)
        return value, force

    # ---------------------------------------------------------- sampling
    def _step_sizes(self, theta: Tensor) -> Tensor:
        """Per-chain step sizes ``[C, 1]``: :math:`\\epsilon (1 + j u_c)`, :math:`u_c \\sim U(-1, 1)`."""
        u = torch.rand(theta.shape[0], 1, dtype=theta.dtype) * 2 - 1
        return self.step_size * (1 + self.step_jitter * u)

    def _trajectory(self, theta: Tensor, p: Tensor, step: Tensor, num_steps: int, lam: float):
        """Leapfrog from ``(theta, p)``; returns the end point, energies and a finiteness mask."""
        value, force = self._value_and_force(theta, lam)
        energy = value + kinetic_energy(p, self.inv_mass)
        theta_new, p_new, value_new, force_new = leapfrog(
            theta, p, force, step, num_steps, lambda t: self.evaluate(t, lam), self.inv_mass, value)
        energy_new = value_new + kinetic_energy(p_new, self.inv_mass)
        finite = torch.isfinite(energy_new) & torch.isfinite(theta_new).all(-1) & torch.isfinite(force_new).all(-1)
        error = torch.where(finite, energy_new - energy, torch.full_like(energy, math.inf))
        return (theta_new, p_new, value_new, force_new), energy, error, finite

    def _propose(self, theta: Tensor, num_steps: int):
        """Momentum refresh, jittered step sizes and the proximal leapfrog (the
        contract of :meth:`ChEESHMC._propose`, also used by its step-size search)."""
        p = self._momentum(theta)
        self._last_step = self._step_sizes(theta)
        return self._trajectory(theta, p, self._last_step, num_steps, self.lam)

    def sparsity(self, theta: Tensor) -> Tensor:
        """Fraction of the counted weights (``sparsity_sites``) with ``|w| < sparsity_threshold``, ``[C]``."""
        small = theta[:, self._sparsity_mask].abs() < self.sparsity_threshold
        return small.to(theta.dtype).mean(-1)

    def transition(self, theta):
        num_steps, lam = self.num_steps, self.lam
        (proposal, p_new, value_new, force_new), energy, error, finite = self._propose(theta, num_steps)
        step = self._last_step
        log_ratio = torch.where(finite, -error, torch.full_like(error, math.nan))
        accepted, prob, _ = metropolis_accept(log_ratio)
        diverging = ~finite | (error > MAX_ENERGY_ERROR)
        value, force = self._value_and_force(theta, lam)
        theta_out = torch.where(accepted.unsqueeze(-1), proposal, theta)
        value_out = torch.where(accepted, value_new, value)
        force_out = torch.where(accepted.unsqueeze(-1), force_new, force)
        self.remember(theta_out, value_out)
        self._force_cache = (theta_out, (lam, self.inv_mass), value_out, force_out)
        stats = {"acceptance_rate": prob, "diverging": diverging, "energy": energy, "energy_error": error,
                 "step_size": step.reshape(-1), "n_steps": torch.full(prob.shape, num_steps, dtype=torch.long),
                 "lp": -value_out, "sparsity": self.sparsity(theta_out)}
        if self.in_warmup:
            self._adapt(prob, finite, theta_out)
        return theta_out, stats

    def _adapt(self, prob: Tensor, finite: Tensor, theta_out: Tensor) -> None:
        """Warm-up: dual averaging on :func:`acceptance_statistic`, then ChEES's
        mass-matrix windows."""
        if self.adapt_step_size:
            self.step_size = self._step_adapter.update(acceptance_statistic(prob, finite))
        if self._windows:
            self._adapt_mass(theta_out)
        if self._t == self._warmup_steps - 1:
            self._end_warmup()
        self._clip_trajectory_length()

    def _update_mass(self, theta: Tensor) -> None:
        super()._update_mass(theta)
        if self.initial_lam == "tune":
            self.tune_lam(theta)

    # ------------------------------------------------------------ lam
    def tune_lam(self, theta: Tensor | None = None, grid: Sequence[float] | None = None) -> dict:
        r"""Pick :math:`\lambda = c\,\epsilon` with the factor :math:`c` from ``grid``
        (default ``LAM_GRID``) by the smallest relative Hamiltonian error
        :math:`\sum_c|\Delta H_c| / \sum_c |H_c|` of one un-jittered trajectory of
        ``num_steps`` from ``theta`` (default: the chains' current points), with the
        same momenta for every candidate (common random numbers); ties go to the
        larger :math:`c`. From then on :attr:`lam` is :math:`c` times the step size
        (unless ``lam`` was given as a number, which this replaces by the tuned
        value). Returns ``{"factor": c, "lam": c * step_size, "grid": [...],
        "errors": [...]}`` (also kept in :attr:`lam_tuning`). Call after ``setup``
        (e.g. after ``MCMC.run``), or pass ``lam="tune"``.
        """
        if self.potential is None or self.l1_weights is None:
            raise ValueError("tune_lam: the kernel is not set up yet; run it under MCMC or pass lam='tune'")
        if theta is None:
            theta = self._force_cache[0] if self._force_cache is not None else self.flatten(self._initial_params)
        grid = list(LAM_GRID) if grid is None else list(grid)
        if not grid:
            raise ValueError("tune_lam: grid is empty")
        for value in grid:
            check_positive_option("tune_lam grid value", value)
        p = self._momentum(theta)
        step = torch.full((theta.shape[0], 1), self.step_size, dtype=theta.dtype)
        errors = []
        for factor in grid:
            _, energy, error, finite = self._trajectory(theta, p, step, self.num_steps, factor * self.step_size)
            errors.append(relative_hamiltonian_error(energy, energy + error))
        best = min(range(len(grid)), key=lambda i: (errors[i], -grid[i]))
        self._lam, self._lam_factor = None, float(grid[best])
        self.lam_tuning = {"factor": self._lam_factor, "lam": self.lam, "grid": [float(g) for g in grid],
                           "errors": errors}
        return self.lam_tuning

    # ---------------------------------------------------------- reporting
    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        diag["lam"] = self.lam
        diag["force"] = self.force
        diag["num_l1_coordinates"] = None if self.l1_weights is None else int((self.l1_weights > 0).sum())
        if self.lam_tuning is not None:
            diag["lam_tuning"] = self.lam_tuning
        return diag

    def logging(self) -> OrderedDict:
        log = super().logging()
        log.pop("traj. length", None)
        log["lam"] = f"{self.lam:.2e}"
        return log


@engine("proximal_hmc")
def proximal_hmc(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 0.01,
                 num_steps: int = 20, lam: float | str | None = None, force: str = "moreau",
                 target_accept: float | None = None, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, step_jitter: float = 0.2, inner_steps: int = 5,
                 spike_and_slab: bool = False, sparsity_threshold: float = 1e-2, sparsity_sites: list | None = None,
                 chain_method: str = "vectorized", init_radius: float = 1.0, compile: bool = False) -> Draws:
    """Proximal HMC for L1 / Laplace priors: proximal leapfrog force, exact Metropolis test
    (``compile``: the potential's gradient as a ``torch.compile`` graph, as for ``chees``)."""
    vectorized = _chain_method(chain_method)
    potential = make_potential(model, x, y, compile=compile)
    kernel = ProximalHMC(potential=potential, step_size=step_size, num_steps=num_steps, lam=lam, force=force,
                         target_accept=target_accept, adapt_step_size=adapt_step_size,
                         adapt_mass_matrix=adapt_mass_matrix, step_jitter=step_jitter, inner_steps=inner_steps,
                         spike_and_slab=spike_and_slab, sparsity_threshold=sparsity_threshold,
                         sparsity_sites=sparsity_sites, num_chains=num_chains if vectorized else 1,
                         init_radius=init_radius)
    return with_compile_time(
        run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress, vectorized), potential)
