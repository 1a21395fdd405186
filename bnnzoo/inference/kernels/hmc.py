r"""Hamiltonian Monte Carlo on the flat layout: the HMC family's sampler, its kernels' base and warm-up.

:class:`HMCSampler` is the transition of the HMC family on the sampler core
(:mod:`~bnnzoo.inference.kernels.transition`): an explicit :class:`HMCState` (the chains' points,
:math:`U` and the leapfrog force there), :class:`HMCParams` (step size, diagonal inverse mass,
number of steps or trajectory length, proximal HMC's lambda) and one :class:`HMCInfo` row per
transition. Every transition draws :math:`p \sim N(0, M)`, runs L leapfrog steps through the
kernel's :class:`~bnnzoo.inference.runtime.LeapfrogRuntime` (eager, compiled graph or CUDA graph:
chosen there, never here) and accepts with probability :math:`\min(1, e^{-\Delta H})`. What
differs between the family's kernels is a part of the sampler, never a subclass: the force
(:class:`GradientForce`, or proximal HMC's), how many steps (``params.num_steps``, or ChEES's
:class:`JitteredLength`), a per-chain step jitter and an extra statistic.

:class:`FixedStepHMC` (paper 003's sampler, Neal 2011) tunes nothing, so its acceptance rate
measures the integrator on the target (what the paper-003 acceptance sweeps tabulate); it is also
the family's kernel base. :class:`AdaptiveHMC` composes the sampler with the family's one warm-up,
:class:`~bnnzoo.inference.adaptation.WindowAdaptation` (dual averaging of the step size and a
diagonal mass matrix from the chains' pooled variance over Stan's doubling windows). ChEES
(:mod:`.chees`), proximal HMC (:mod:`.proximal_hmc`) and batched NUTS (:mod:`.nuts`) are one
level below :class:`FixedStepHMC` too; each writes only its ``build`` (its sampler, its warm-up and
the components beside it, its first parameters) and its reporting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, NamedTuple

import torch

from ..adaptation import (WindowAdaptation, find_step_size, halton, harmonic_mean_acceptance, harmonic_statistic,
                          late_mass_windows, mass_windows)
from ..integrators import EnergyTracker, kinetic_energy, velocity
from ..runtime import LeapfrogRuntime
from ..tuning import resolve_target_accept
from .base import BaseOptions, metropolis_accept
from .transition import TransitionKernel
from ..options import flag, fraction, integer, option, optional, positive

__all__ = ["AdaptiveHMC", "AdaptiveHMCOptions", "FixedStepHMC", "GradientForce", "HMCInfo", "HMCOptions",
           "HMCParams", "HMCSampler", "HMCState", "JitteredLength", "MASS_SCHEDULES", "MAX_ENERGY_ERROR", "Trajectory",
           "WarmupOptions", "search_step_size"]

Tensor = torch.Tensor
#: an energy error above this is a divergence (Stan's threshold)
MAX_ENERGY_ERROR = 1000.0
#: the mass-matrix windows by name (ChEES's ``mass_schedule``): Stan's doubling ones, or two in the
#: last 30% of warm-up
MASS_SCHEDULES = {"stan": mass_windows, "late": late_mass_windows}
#: the key of a state whose force is not known yet (never equal to a force's key)
UNSET = "unset"


class HMCState(NamedTuple):
    """Chains ``[C, ...]``: ``position``, :math:`U` there (``value``), the leapfrog ``force`` there,
    ``grad`` (:math:`\\nabla U` where the force is it, else None), the force's ``key`` (what it depends
    on besides the position: None for :math:`\\nabla U`) and ``count``, the transitions made."""

    position: Tensor
    value: Tensor
    grad: Tensor | None
    force: Tensor
    key: object = None
    count: int = 0


class HMCParams(NamedTuple):
    """What warm-up tunes: ``step_size`` (a number, or ``[C]`` one per chain), ``inv_mass`` (the
    diagonal of :math:`M^{-1}`: ``[D]``, or ``[C, D]`` one per chain), ``num_steps`` (leapfrog steps of a
    fixed-length transition), ChEES's ``trajectory_length`` and proximal HMC's :math:`\\lambda` (``lam``
    a number, or None for ``lam_factor`` times the step size)."""

    step_size: float | Tensor
    inv_mass: Tensor
    num_steps: int = 1
    trajectory_length: float | None = None
    lam: float | None = None
    lam_factor: float = 0.5


class HMCInfo(NamedTuple):
    """One transition's statistics (ArviZ's names; :class:`FixedStepHMC` has their definitions) and,
    not statistics (:attr:`internal`), what warm-up reads: which proposals were ``finite``, the
    trajectory's end (``proposal``, ``momentum``) and the batched leapfrog steps computed."""

    acceptance_rate: Tensor
    diverging: Tensor
    energy: Tensor
    energy_error: Tensor
    max_energy_error: Tensor | None
    step_size: float | Tensor
    n_steps: int
    trajectory_length: float | None = None
    reached_max_steps: bool | None = None
    step_size_nom: float | None = None
    sparsity: Tensor | None = None
    finite: Tensor | None = None
    proposal: Tensor | None = None
    momentum: Tensor | None = None
    leapfrog_steps: int | None = None

    internal = ("finite", "proposal", "momentum", "leapfrog_steps")


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


def _same_key(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_key(x, y) for x, y in zip(a, b))
    return a is b if torch.is_tensor(a) or torch.is_tensor(b) else a == b


class GradientForce:
    """The leapfrog force of plain HMC: :math:`\\nabla U`, on the potential's own (possibly compiled)
    step. A force is ``evaluate(theta, params) -> (U, F)``, its ``key(params)`` (what F depends on
    besides ``theta``; None for :math:`\\nabla U`) and ``step_fn()`` (one leapfrog step on it, or None
    for the generic one)."""

    def __init__(self, potential):
        self.potential = potential

    def key(self, params: HMCParams):
        return None

    def evaluate(self, theta: Tensor, params: HMCParams) -> tuple[Tensor, Tensor]:
        return self.potential.value_and_grad(theta)

    def evaluator(self, params: HMCParams) -> Callable:
        """``theta -> (U, F)`` under ``params``."""
        return self.potential.value_and_grad

    def step_fn(self):
        return self.potential.leapfrog_step


class JitteredLength:
    r"""ChEES's number of steps: :math:`L_n = \lceil u_n T / \epsilon \rceil` within
    ``[1, max_steps]``, with :math:`u_n \in (0, 1]` shared by all chains, the ``n``-th point of the
    Halton sequence (``"halton"``) or uniform (drawn on the host)."""

    def __init__(self, jitter: str, max_steps: int):
        self.jitter, self.max_steps = jitter, int(max_steps)

    def steps(self, count: int, params: HMCParams, generator: torch.Generator | None = None) -> tuple[int, bool]:
        """Steps of transition ``count`` (from 0), and whether ``T`` is held at the cap of ``max_steps``
        steps (the adaptation wants longer)."""
        length, step_size = params.trajectory_length, params.step_size
        u = halton(count + 1) if self.jitter == "halton" else 1.0 - float(torch.rand((), device="cpu",
                                                                                      generator=generator))
        steps = math.ceil(u * length / step_size)
        capped = length >= step_size * self.max_steps * (1 - 1e-9)
        return min(max(steps, 1), self.max_steps), capped

    def expected_steps(self, params: HMCParams) -> float:
        r"""The mean of :meth:`steps` over the jitter at ``params``: :math:`(n + 1) / 2` for
        :math:`n = T / \epsilon` steps, with the draws above ``max_steps`` cut to it."""
        n, cap = max(float(params.trajectory_length / params.step_size), 1.0), self.max_steps
        if n <= cap:
            return (n + 1) / 2
        return cap / n * (cap + 1) / 2 + (1 - cap / n) * cap


def _randn_like(x: Tensor, generator: torch.Generator | None) -> Tensor:
    if generator is None:
        return torch.randn_like(x)
    return torch.randn(x.shape, dtype=x.dtype, device=x.device, generator=generator)


def _rand(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.rand(shape, dtype=like.dtype, device=like.device, generator=generator)


class HMCSampler:
    r"""The HMC transition (module docstring) on a flat potential: ``init`` and ``step``.

    Parts: ``force`` (:class:`GradientForce` by default), ``length`` (None: ``params.num_steps``
    steps; else ChEES's :class:`JitteredLength` of ``params.trajectory_length``), ``step_jitter``
    (None: the step size as it is; a number j: each chain's step :math:`\epsilon (1 + j u_c)`,
    :math:`u_c \sim U(-1, 1)`) and ``sparsity`` (a ``[C]`` statistic of the new points, or None).
    ``runtime`` gives the kernel's :class:`~bnnzoo.inference.runtime.LeapfrogRuntime`, which runs the
    leapfrog steps. The random numbers of a transition, in order: the jitter (uniform ChEES), the
    momenta, the step jitter, the Metropolis uniforms."""

    def __init__(self, potential, runtime: Callable[[], LeapfrogRuntime], force=None,
                 length: JitteredLength | None = None, step_jitter: float | None = None,
                 sparsity: Callable[[Tensor], Tensor] | None = None):
        self.potential, self.runtime = potential, runtime
        self.force = GradientForce(potential) if force is None else force
        self.length, self.step_jitter, self.sparsity = length, step_jitter, sparsity
        self._last_init: HMCState | None = None

    # ------------------------------------------------------------- the pieces
    def init(self, position: Tensor) -> HMCState:
        """The state at ``position``; the same object again for the same ``position`` tensor (a build's
        step-size search and the kernel's first state share one gradient: on a compiled potential a
        second call would compile a graph of its own)."""
        if self._last_init is not None and self._last_init.position is position:
            return self._last_init
        value, grad = self.potential.value_and_grad(position)
        if isinstance(self.force, GradientForce):
            state = HMCState(position, value, grad, grad)
        else:
            state = HMCState(position, value, None, grad, UNSET)
        self._last_init = state
        return state

    def current(self, state: HMCState, params: HMCParams) -> HMCState:
        """``state`` with its force under ``params`` (evaluated again where its key differs)."""
        key = self.force.key(params)
        if _same_key(state.key, key):
            return state
        value, force = self.force.evaluate(state.position, params)
        return state._replace(value=value, force=force, grad=force if key is None else None, key=key)

    @staticmethod
    def momentum(position: Tensor, inv_mass: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """:math:`p \\sim N(0, M)` with :math:`M = \\operatorname{diag}(1 / \\text{inv\\_mass})`."""
        return _randn_like(position, generator) / inv_mass.sqrt()

    def step_sizes(self, position: Tensor, params: HMCParams, generator: torch.Generator | None = None):
        """The transition's step size: a number, or ``[C, 1]`` per chain."""
        step_size = params.step_size
        if self.step_jitter is not None:
            u = _rand((position.shape[0], 1), position, generator) * 2 - 1
            return step_size * (1 + self.step_jitter * u)
        return step_size.unsqueeze(-1) if torch.is_tensor(step_size) else step_size

    def advance(self, theta: Tensor, p: Tensor, value: Tensor, force: Tensor, step, num_steps: int,
                params: HMCParams, tracker: EnergyTracker | None = None):
        """``num_steps`` leapfrog steps from ``(theta, p)``, run by the runtime: ``(theta', p', U', F')``."""
        return self.runtime().leapfrog(self.potential, theta, p, value, force, step, num_steps, params.inv_mass,
                                       self.force.evaluator(params), self.force.step_fn(), tracker)

    def trajectory(self, state: HMCState, params: HMCParams, p: Tensor, step, num_steps: int,
                   track_energy: bool = False) -> Trajectory:
        """Leapfrog from ``(state.position, p)`` (``state``'s force valid under ``params``); a proposal
        that is not finite gets an infinite energy error. ``track_energy``: also the largest energy
        error over the steps (``max_error``)."""
        inv_mass = params.inv_mass
        energy = state.value + kinetic_energy(p, inv_mass)
        tracker = EnergyTracker(energy, inv_mass) if track_energy else None
        theta_new, p_new, value_new, force_new = self.advance(state.position, p, state.value, state.force, step,
                                                              num_steps, params, tracker)
        energy_new = value_new + kinetic_energy(p_new, inv_mass)
        finite = torch.isfinite(energy_new) & torch.isfinite(theta_new).all(-1) & torch.isfinite(force_new).all(-1)
        inf = torch.full_like(energy, math.inf)
        error = torch.where(finite, energy_new - energy, inf)
        max_error = None
        if tracker is not None:
            max_error = torch.where(finite, torch.maximum(tracker.max_error, error.abs()), inf)
        return Trajectory(theta_new, p_new, value_new, force_new, energy, error, finite, max_error)

    def propose(self, state: HMCState, params: HMCParams, num_steps: int, track_energy: bool = False,
                generator: torch.Generator | None = None) -> tuple[Trajectory, float | Tensor, HMCState]:
        """Momentum refresh, the step size(s) and the leapfrog: the trajectory, the step it used and
        ``state`` with its force under ``params``."""
        p = self.momentum(state.position, params.inv_mass, generator)
        step = self.step_sizes(state.position, params, generator)
        state = self.current(state, params)
        return self.trajectory(state, params, p, step, num_steps, track_energy), step, state

    # ------------------------------------------------------------- the transition
    def step(self, state: HMCState, params: HMCParams,
             generator: torch.Generator | None = None) -> tuple[HMCState, HMCInfo]:
        length, capped, num_steps = None, None, params.num_steps
        if self.length is not None:
            length = params.trajectory_length
            num_steps, capped = self.length.steps(state.count, params, generator)
        tr, step, state = self.propose(state, params, num_steps, True, generator)
        log_ratio = torch.where(tr.finite, -tr.error, torch.full_like(tr.error, math.nan))
        accepted, prob, _ = metropolis_accept(log_ratio, generator)
        diverging = ~tr.finite | (tr.error > MAX_ENERGY_ERROR)
        keep = accepted.unsqueeze(-1)
        position = torch.where(keep, tr.theta, state.position)
        force = torch.where(keep, tr.force, state.force)
        new = HMCState(position, torch.where(accepted, tr.value, state.value),
                       force if state.key is None else None, force, state.key, state.count + 1)
        info = HMCInfo(prob, diverging, torch.where(accepted, tr.energy + tr.error, tr.energy), tr.error,
                       tr.max_error, step.reshape(-1) if torch.is_tensor(step) else float(step), int(num_steps),
                       trajectory_length=None if length is None else float(length),
                       reached_max_steps=None if capped is None else bool(capped),
                       step_size_nom=None if self.step_jitter is None else float(params.step_size),
                       sparsity=None if self.sparsity is None else self.sparsity(position),
                       finite=tr.finite, proposal=tr.theta, momentum=tr.p, leapfrog_steps=int(num_steps))
        return new, info

    def u_turn_time(self, state: HMCState, params: HMCParams, step_size: float, max_steps: int,
                    generator: torch.Generator | None = None) -> float:
        r"""Median over chains of the time at which a trajectory from ``state`` (fresh momentum,
        ``params``'s mass, ``step_size``) first turns back, :math:`(\theta_t - \theta_0)^\top M^{-1} p_t < 0`
        (the no-U-turn criterion), capped at ``max_steps`` steps. The criterion is checked after every
        step, or after every :data:`~bnnzoo.inference.compiled_graphs.UNROLL` where trajectories run
        the potential's compiled multi-step graph (a one-step graph compiled for this estimate alone
        would cost more than it saves)."""
        state = self.current(state, params)
        theta = state.position
        x, value, grad = theta, state.value, state.force
        p = self.momentum(theta, params.inv_mass, generator)
        stride = self.runtime().stride(self.potential, self.force.step_fn())
        turned = torch.full(theta.shape[:-1], max_steps, dtype=torch.long, device=theta.device)
        step = 0
        while step < max_steps:
            n = min(stride, max_steps - step)
            x, p, value, grad = self.advance(x, p, value, grad, step_size, n, params)
            step += n
            back = ((x - theta) * velocity(p, params.inv_mass)).sum(-1)
            now = ~(back >= 0) & (turned == max_steps)  # NaN counts as turned: that chain's trajectory is over
            turned = torch.where(now, torch.full_like(turned, step), turned)
            if step % 8 == 0 and bool((turned < max_steps).all()):  # a look on the host every 8 steps
                break
        return float(turned.double().median()) * step_size


def search_step_size(sampler: HMCSampler, state: HMCState, params: HMCParams) -> float:
    """:func:`~bnnzoo.inference.adaptation.find_step_size` from ``params.step_size`` on the
    harmonic-mean acceptance of one leapfrog step from ``state``."""
    def one_step(step_size: float) -> float:
        tr = sampler.propose(state, params._replace(step_size=step_size), 1)[0]
        prob = torch.where(tr.finite, (-tr.error).clamp(max=0.0).exp(), torch.zeros_like(tr.error))
        return harmonic_mean_acceptance(prob, ~tr.finite)

    return find_step_size(params.step_size, one_step)


@dataclass(frozen=True)
class HMCOptions(BaseOptions):
    """Options of :class:`FixedStepHMC`."""

    step_size: float = option(1e-3, "leapfrog step size", positive)
    num_steps: int = option(100, "leapfrog steps per transition", integer(1))


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



@dataclass(frozen=True)
class AdaptiveHMCOptions(WarmupOptions):
    """Options of :class:`AdaptiveHMC`."""

    step_size: float = option(0.1, "initial leapfrog step size (refined by a search before warm-up)", positive)
    num_steps: int = option(100, "leapfrog steps per transition", integer(1))


class FixedStepHMC(TransitionKernel):
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
    #: the family of ``tuning.recommend_target_accept`` (where ``target_accept`` is None)
    target_family = "fixed_hmc"
    #: whether a compiled potential's trajectories run its four-step graph (fixed-length
    #: trajectories on the potential's own step; ``compile="auto"`` assumes more speed-up then)
    multi_step_graph = True

    def _reset(self) -> None:
        super()._reset()
        # how the leapfrog runs (eager, compiled, CUDA graph) and the compile="auto" policy the driver set
        runtime = getattr(self, "runtime", None)
        self.runtime = runtime.fresh() if runtime is not None else LeapfrogRuntime()

    def build(self, theta: Tensor):
        """The plain sampler on :math:`\\nabla U`, unit mass, nothing tuned."""
        opts = self.options
        return self.hmc_sampler(), None, HMCParams(opts.step_size, theta.new_ones(theta.shape[-1]), opts.num_steps)

    # ------------------------------------------------- what the family's builds share
    def hmc_sampler(self, **parts) -> HMCSampler:
        """An :class:`HMCSampler` on this kernel's potential and runtime, with ``parts``."""
        return HMCSampler(self.potential, partial(getattr, self, "runtime"), **parts)

    @property
    def has_warmup(self) -> bool:
        """Whether this run has warm-up steps (the step-size search and the adaptation run only then)."""
        return self._warmup_steps > 0

    @property
    def target_accept(self) -> float:
        """``options.target_accept``, or the value recommended for the model's smoothness when it is None."""
        model = self.model if self.model is not None else self.potential
        return float(resolve_target_accept(self.options.target_accept, model, self.target_family))

    def window_adaptation(self, statistic=harmonic_statistic, components=(), pooled: bool = True,
                          schedule=mass_windows) -> WindowAdaptation:
        """The family's :class:`~bnnzoo.inference.adaptation.WindowAdaptation` from the
        :class:`WarmupOptions`, with what dual averaging steers and the components beside it."""
        opts = self.options
        return WindowAdaptation(self.target_accept, opts.dual_averaging_gamma, schedule, statistic,
                                adapt_step_size=opts.adapt_step_size, adapt_mass=opts.adapt_mass_matrix,
                                pooled=pooled, components=components)

    def mass_windows(self, num_steps: int) -> list[tuple[int, int]]:
        """The mass windows a warm-up of ``num_steps`` has (the driver's ``compile="auto"`` decides
        after the first)."""
        if not getattr(self.options, "adapt_mass_matrix", False):
            return []
        return MASS_SCHEDULES[getattr(self.options, "mass_schedule", "stan")](num_steps)

    # ------------------------------------------------- the parameters, read only
    @property
    def step_size(self) -> float | Tensor | None:
        """The step size now (``params.step_size``)."""
        return None if self.params is None else self.params.step_size

    @property
    def inv_mass(self) -> Tensor | None:
        """The diagonal inverse mass now (``params.inv_mass``)."""
        return None if self.params is None else self.params.inv_mass

    # ------------------------------------------------- execution and reporting
    def observe(self, state: HMCState, info) -> None:
        self.runtime.observe(info.leapfrog_steps, state.position)

    def notes(self) -> dict:
        return {**super().notes(), **self.runtime.notes()}

    def tuned(self) -> dict:
        """With warm-up options: the step size and ``inverse_mass_matrix``; nothing is tuned otherwise."""
        if not isinstance(self.options, WarmupOptions):
            return {}
        step = self.params.step_size
        return {"step_size": step.cpu().numpy() if torch.is_tensor(step) else step,
                "inverse_mass_matrix": self.params.inv_mass.cpu().numpy()}


class AdaptiveHMC(FixedStepHMC):
    r""":class:`FixedStepHMC` with the HMC family's warm-up
    (:class:`~bnnzoo.inference.adaptation.WindowAdaptation`: dual averaging of the step size
    toward ``target_accept`` of the acceptance statistic, started from a doubling/halving search
    before warm-up and kept going across mass updates, where only its average restarts; the
    diagonal :math:`M^{-1}` from the chains' variance pooled over the second half of each of
    Stan's doubling windows; both frozen after warm-up, the step size at dual averaging's
    averaged iterate). Options: :class:`AdaptiveHMCOptions`."""

    Options = AdaptiveHMCOptions

    def build(self, theta: Tensor):
        opts = self.options
        sampler = self.hmc_sampler()
        params = HMCParams(opts.step_size, theta.new_ones(theta.shape[-1]), opts.num_steps)
        if self.has_warmup and opts.adapt_step_size:
            params = params._replace(step_size=search_step_size(sampler, sampler.init(theta), params))
        return sampler, self.window_adaptation(), params
