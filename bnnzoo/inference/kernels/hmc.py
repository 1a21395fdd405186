r"""Hamiltonian Monte Carlo on the flat layout: the plain fixed-step kernel and its warm-up.

:class:`FixedStepHMC` is the plain kernel (paper 003's sampler, Neal 2011): every
transition draws :math:`p \sim N(0, M)`, runs ``num_steps`` leapfrog steps of size
``step_size`` and accepts with probability :math:`\min(1, e^{-\Delta H})`. Nothing
is tuned, so its acceptance rate measures the integrator on the target (what the
paper-003 acceptance sweeps tabulate).

:class:`FixedStepHMC` is also the HMC family's kernel: with :class:`WarmupOptions` its warm-up is
a :class:`~bnnzoo.inference.adaptation.WindowAdaptation` (dual averaging of the step size and a
diagonal mass matrix from the chains' pooled variance over Stan's doubling windows) composed from
the kernel's :meth:`~FixedStepHMC.warmup_parts`; :class:`AdaptiveHMC` is that warm-up on the fixed
number of steps. ChEES (:mod:`.chees`), proximal HMC (:mod:`.proximal_hmc`) and batched NUTS
(:mod:`.nuts`) are one level below it, each naming its warm-up parts; none overrides a warm-up hook.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from ..adaptation import (WarmupComponent, WarmupStep, WindowAdaptation, find_step_size, harmonic_mean_acceptance,
                          harmonic_statistic, mass_windows)
from ..integrators import EnergyTracker, kinetic_energy
from ..runtime import LeapfrogRuntime
from ..tuning import resolve_target_accept
from .base import BaseOptions, FlatKernel, metropolis_accept
from ..options import flag, fraction, integer, option, optional, positive

__all__ = ["AdaptiveHMC", "FixedStepHMC", "HMCOptions", "MAX_ENERGY_ERROR", "Trajectory", "WarmupOptions", "WarmupParts"]

Tensor = torch.Tensor
#: an energy error above this is a divergence (Stan's threshold)
MAX_ENERGY_ERROR = 1000.0


class Trajectory(NamedTuple):
    """The end of a leapfrog trajectory and its energies: ``energy`` at the start, ``error`` the
    end's minus that (inf where not ``finite``), ``max_error`` the largest :math:`|H_t - H_0|`
    over the steps (inf if any step is not finite; None when not tracked)."""

    theta: Tensor
    p: Tensor
    value: Tensor
    force: Tensor
    energy: Tensor
    error: Tensor
    finite: Tensor
    max_error: Tensor | None = None


class WarmupParts(NamedTuple):
    """A kernel's parts of its :class:`~bnnzoo.inference.adaptation.WindowAdaptation`: the mass
    windows of a warm-up (a function of its length), what dual averaging steers, the components
    beside it, and whether the chains are pooled."""

    windows: Callable[[int], list]
    statistic: Callable
    components: tuple[WarmupComponent, ...] = ()
    pooled: bool = True


def _same_key(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_key(x, y) for x, y in zip(a, b))
    return a is b if torch.is_tensor(a) or torch.is_tensor(b) else a == b


@dataclass(frozen=True)
class HMCOptions(BaseOptions):
    """Options of :class:`FixedStepHMC`."""

    step_size: float = option(1e-3, "leapfrog step size", positive)
    num_steps: int = option(100, "leapfrog steps per transition", integer(1))


class FixedStepHMC(FlatKernel):
    r"""Leapfrog HMC with a fixed step size :math:`\epsilon`, ``num_steps`` :math:`L`
    and unit mass, for C chains advanced as one batch (module docstring).

    .. math::
        p \sim N(0, I),\quad (\theta', p') = \Phi_\epsilon^L(\theta, p),\quad
        \theta \leftarrow \theta' \text{ with probability } \min(1, e^{-(H(\theta', p') - H(\theta, p))})

    A NaN/inf energy, or an energy error above 1000, is a rejected divergence.
    Warm-up steps are plain burn-in. Options: :class:`HMCOptions`.

    Per-draw statistics (ArviZ's definitions): ``acceptance_rate``, ``diverging``,
    ``energy`` (H at the accepted state: the proposal's where accepted, else the
    start's after the momentum refresh), ``energy_error`` (H at the proposal minus H
    at the start; inf if not finite), ``max_energy_error`` (the largest
    :math:`|H_t - H_0|` over the leapfrog steps; inf if any is not finite),
    ``step_size`` (the step each chain used), ``n_steps`` and ``lp`` (:math:`-U`
    of the new state); floats as float64.

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> kernel = FixedStepHMC(model, step_size=1e-3, num_steps=200, num_chains=5)
    >>> MCMC(kernel, num_samples=2000, warmup_steps=100).run(x, y)

    **References**

    * Neal, R. M. (2011). MCMC using Hamiltonian dynamics. Handbook of MCMC.
    * Paper 003: Hamiltonian Monte Carlo on ReLU neural networks is inefficient.
    """

    Options = HMCOptions
    stat_names = ("acceptance_rate", "diverging", "energy", "energy_error", "max_energy_error", "step_size",
                  "n_steps", "lp")
    #: whether a compiled potential's trajectories run its four-step graph (fixed-length
    #: trajectories on the potential's own step; ``compile="auto"`` assumes more speed-up then)
    multi_step_graph = True
    #: one diagonal inverse mass per chain (``[C, D]``) instead of one for all (``[D]``)
    per_chain_mass = False

    def _reset(self) -> None:
        super()._reset()
        self.step_size = self.options.step_size
        self.inv_mass: Tensor | None = None
        self.warmup: WindowAdaptation | None = None
        self._force_cache: tuple | None = None  # (theta, force_key, U, force)
        self._last_step: float | Tensor = self.step_size
        # how the leapfrog runs (eager, compiled, CUDA graph) and the compile="auto" policy the driver set
        runtime = getattr(self, "runtime", None)
        self.runtime = runtime.fresh() if runtime is not None else LeapfrogRuntime()

    def prepare(self, theta: Tensor) -> None:
        self.inv_mass = torch.ones_like(theta) if self.per_chain_mass else theta.new_ones(theta.shape[-1])
        if isinstance(self.options, WarmupOptions) and self._warmup_steps > 0:
            self.warmup = self.build_warmup(theta)
            self.warmup.num_steps = self._warmup_steps

    # ------------------------------------------------------- warm-up
    @property
    def target_accept(self) -> float:
        """``options.target_accept``, or the value recommended for the model's smoothness when it is None."""
        model = self.model if self.model is not None else self.potential
        return float(resolve_target_accept(self.options.target_accept, model, self.target_family))

    def warmup_parts(self) -> WarmupParts:
        """This kernel's parts of the window adaptation: Stan's windows, the acceptance statistic
        over the non-divergent chains, no components."""
        return WarmupParts(mass_windows, harmonic_statistic)

    def build_warmup(self, theta: Tensor) -> WindowAdaptation:
        """The window adaptation of this kernel (:meth:`warmup_parts`), after the step-size search
        (:meth:`find_step_size`) where the step size is adapted."""
        options, parts = self.options, self.warmup_parts()
        if options.adapt_step_size:
            self.step_size = self.find_step_size(theta)
        windows = parts.windows(self._warmup_steps) if options.adapt_mass_matrix else []
        return WindowAdaptation([self.step_size], self.target_accept, options.dual_averaging_gamma, windows,
                                parts.statistic, adapt_step_size=options.adapt_step_size,
                                components=parts.components)

    def set_step_sizes(self, step_sizes) -> None:
        """The step size the window adaptation chose (one for all chains)."""
        self.step_size = step_sizes[0]

    def find_step_size(self, theta: Tensor) -> float:
        """:func:`~bnnzoo.inference.adaptation.find_step_size` on the harmonic-mean acceptance of
        one leapfrog step from ``theta``."""
        def one_step(step_size: float) -> float:
            saved, self.step_size = self.step_size, step_size
            tr = self.propose(theta, 1)
            self.step_size = saved
            prob = torch.where(tr.finite, (-tr.error).clamp(max=0.0).exp(), torch.zeros_like(tr.error))
            return harmonic_mean_acceptance(prob, ~tr.finite)

        return find_step_size(self.step_size, one_step)

    # ------------------------------------------------------- the pieces
    def momentum(self, theta: Tensor) -> Tensor:
        """:math:`p \\sim N(0, M)` with :math:`M = \\operatorname{diag}(1 / \\text{inv\\_mass})`."""
        return torch.randn_like(theta) / self.inv_mass.sqrt()

    def leapfrog_steps(self) -> int:
        """Leapfrog steps of the coming transition."""
        return self.options.num_steps

    def step_sizes(self, theta: Tensor) -> float | Tensor:
        """The coming transition's step size: a number, or ``[C, 1]`` per chain."""
        return self.step_size

    def evaluate(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U`` ``[C]`` and the leapfrog force ``[C, D]`` at ``theta``: here :math:`\\nabla U`."""
        return self.potential.value_and_grad(theta)

    def force_key(self):
        """What the force depends on besides ``theta`` (the cache key); None for :math:`\\nabla U`."""
        return None

    def leapfrog_step_fn(self):
        """One leapfrog step on the force, e.g. a potential's compiled step; None: the generic one."""
        return self.potential.leapfrog_step

    def advance(self, theta: Tensor, p: Tensor, value: Tensor, force: Tensor, step: float | Tensor, num_steps: int,
                tracker: EnergyTracker | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``num_steps`` leapfrog steps from ``(theta, p)`` (``value``, ``force`` at ``theta``), run by the
        kernel's :class:`~bnnzoo.inference.runtime.LeapfrogRuntime`: ``(theta', p', U', force')``."""
        return self.runtime.leapfrog(self.potential, theta, p, value, force, step, num_steps, self.inv_mass,
                                     self.evaluate, self.leapfrog_step_fn(), tracker)

    def notes(self) -> dict:
        return {**super().notes(), **self.runtime.notes()}

    def current(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`evaluate`, from the cache when ``theta`` is the chains' current point."""
        cache, key = self._force_cache, self.force_key()
        if cache is not None and cache[0] is theta and _same_key(cache[1], key):
            return cache[2], cache[3]
        value, force = self.evaluate(theta)
        self._remember_force(theta, value, force)
        return value, force

    def _remember_force(self, theta: Tensor, value: Tensor, force: Tensor) -> None:
        self._force_cache = (theta, self.force_key(), value, force)
        self.remember(theta, value, force if self.force_key() is None else None)

    def trajectory(self, theta: Tensor, p: Tensor, step: float | Tensor, num_steps: int,
                   track_energy: bool = False) -> Trajectory:
        """Leapfrog from ``(theta, p)``; a proposal that is not finite gets an infinite energy error.
        ``track_energy``: also the largest energy error over the steps (``max_error``)."""
        value, force = self.current(theta)
        energy = value + kinetic_energy(p, self.inv_mass)
        tracker = EnergyTracker(energy, self.inv_mass) if track_energy else None
        theta_new, p_new, value_new, force_new = self.advance(theta, p, value, force, step, num_steps, tracker)
        energy_new = value_new + kinetic_energy(p_new, self.inv_mass)
        finite = torch.isfinite(energy_new) & torch.isfinite(theta_new).all(-1) & torch.isfinite(force_new).all(-1)
        inf = torch.full_like(energy, math.inf)
        error = torch.where(finite, energy_new - energy, inf)
        max_error = None
        if tracker is not None:
            max_error = torch.where(finite, torch.maximum(tracker.max_error, error.abs()), inf)
        return Trajectory(theta_new, p_new, value_new, force_new, energy, error, finite, max_error)

    def propose(self, theta: Tensor, num_steps: int, track_energy: bool = False) -> Trajectory:
        """Momentum refresh, this transition's step size and the leapfrog."""
        p = self.momentum(theta)
        self._last_step = self.step_sizes(theta)
        return self.trajectory(theta, p, self._last_step, num_steps, track_energy)

    # ------------------------------------------------------- sampling
    def transition(self, theta):
        num_steps = self.leapfrog_steps()
        tr = self.propose(theta, num_steps, track_energy=True)
        step = self._last_step
        log_ratio = torch.where(tr.finite, -tr.error, torch.full_like(tr.error, math.nan))
        accepted, prob, _ = metropolis_accept(log_ratio)
        diverging = ~tr.finite | (tr.error > MAX_ENERGY_ERROR)
        value, force = self.current(theta)
        theta_out = torch.where(accepted.unsqueeze(-1), tr.theta, theta)
        value_out = torch.where(accepted, tr.value, value)
        force_out = torch.where(accepted.unsqueeze(-1), tr.force, force)
        self._remember_force(theta_out, value_out, force_out)
        step_stat = step.reshape(-1) if torch.is_tensor(step) else float(step)
        energy_out = torch.where(accepted, tr.energy + tr.error, tr.energy)  # H at the accepted state
        stats = {"acceptance_rate": prob, "diverging": diverging, "energy": energy_out, "energy_error": tr.error,
                 "max_energy_error": tr.max_error, "step_size": step_stat,
                 "n_steps": int(num_steps),
                 "lp": -value_out, **self.extra_stats(theta_out)}
        if self.in_warmup and self.warmup is not None:
            self.warmup.update(self, self._t, WarmupStep(theta, theta_out, prob, diverging, tr.finite, tr.theta, tr.p,
                                                         num_steps * float(self.step_size)))
        self.runtime.observe(num_steps, theta_out)
        return theta_out, stats

    def extra_stats(self, theta: Tensor) -> dict[str, Tensor]:
        """Per-draw statistics beyond HMC's own: ``[C]`` tensors, or numbers (the same for every chain)."""
        return {}

    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        if isinstance(self.options, WarmupOptions):
            diag["step_size"] = self.step_size
            diag["inverse_mass_matrix"] = None if self.inv_mass is None else self.inv_mass.cpu().numpy()
        return diag


def gamma_option(default: float, why: str):
    """The ``dual_averaging_gamma`` option with a kernel's default: its gain on ``log(step_size)`` is
    ``1 / (gamma sqrt(t))``; ``why`` says why this default."""
    return option(default, f"dual averaging's gamma: its gain on log(step_size) is 1 / (gamma sqrt(t)) ({why})",
                  positive)


@dataclass(frozen=True)
class WarmupOptions(BaseOptions):
    """Options of :class:`AdaptiveHMC`'s warm-up (shared by ChEES and proximal HMC)."""

    target_accept: float | None = option(
        None, "target acceptance of step-size adaptation (None: recommended for the model's smoothness)",
        optional(fraction))
    adapt_step_size: bool = option(True, "adapt the step size by dual averaging during warm-up", flag)
    adapt_mass_matrix: bool = option(True, "adapt a diagonal mass matrix over Stan's windows during warm-up",
                                     flag)
    dual_averaging_gamma: float = gamma_option(
        0.15, "Stan's 0.05 saw-tooths on the steep acceptance of long fixed-length trajectories")


class AdaptiveHMC(FixedStepHMC):
    r""":class:`FixedStepHMC` with the HMC family's warm-up: its options are a
    :class:`WarmupOptions`, so :meth:`FixedStepHMC.build_warmup` composes a
    :class:`~bnnzoo.inference.adaptation.WindowAdaptation` (dual averaging of the step size
    toward ``target_accept`` of the acceptance statistic, started from a doubling/halving search
    before warm-up and kept going across mass updates, where only its average restarts; the
    diagonal :math:`M^{-1}` from the chains' variance pooled over the second half of each of
    Stan's doubling windows; both frozen after warm-up, the step size at dual averaging's
    averaged iterate)."""

    Options = WarmupOptions
