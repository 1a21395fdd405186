r"""The shared base of the stochastic-gradient MCMC kernels (SGLD, SGHMC, the SA and group-sparse kernels).

Both kernels follow the minibatch estimate of the potential's gradient,

.. math::
    \nabla\tilde U(\theta) = -\nabla\log p(\theta) - \frac{N}{B}\sum_{i\in S}\nabla\log p(y_i\mid x_i,\theta),

with the B rows ``S`` drawn without replacement at every iteration, inside
``sample()`` (Pyro's ``initialize_model`` refuses subsampled plates; transforms
and the initial point come from the full model). By default every chain draws
its own minibatch (``rows [C, B]``: the chains stay independent Markov
chains); ``shared_minibatch=True`` gives all chains the same rows (one cheaper
batched forward pass). ``batch_size=None`` uses the full data (and is the only
choice for a potential without data, e.g. a known target density).

Minibatches come from a :class:`~bnnzoo.models.BNN` (the fast
:meth:`BNNPotential.minibatch_value_and_grad`) or from any Pyro model written
with Pyro's own idiom, ``with pyro.plate("data", N, subsample_size=B) as ind:``
around the observations (indexed by ``ind``): :class:`PyroPotential` conditions
the plate on each iteration's rows, and Pyro scales the log likelihood by N/B.
B is ``batch_size``; the model's own ``subsample_size`` only marks the plate
(``batch_size`` wins, and ``batch_size=None`` uses all N rows). A Pyro model
without a subsample plate refuses a ``batch_size``. The spike-and-slab SA and
group-sparse kernels need BNN sites and stay BNN-only.

There is no Metropolis test (the chain is exact only as the step size goes to
zero), so no ``acceptance_rate`` is recorded. A chain whose minibatch potential
or gradient is NaN/inf, or whose step leaves the finite numbers, keeps its
point (and momentum) and counts a divergence.

**Failed chains.** A step size too large for the target makes the iterates
explode; the chain is then frozen far out (every later step rejected) and its
draws are meaningless. A chain is flagged **failed** at the first iteration where

* its step from a finite potential and gradient leaves the finite numbers (overflow), or
* :math:`\max_d|\theta_d|` exceeds :data:`BLOWUP_FACTOR` (:math:`10^6`) times its
  initial radius :math:`\max(1, \max_d|\theta_{0,d}|)`, or
* its potential or gradient has not been finite for :data:`FROZEN_ITERATIONS` (10)
  iterations in a row (the chain cannot move again).

The chain keeps running; the failure (phase, iteration, draw, reason) is in
``diagnostics()["final_state"]["failure"]``, hence in ``Run.notes["failed"]`` /
``["failed_at"]`` and the InferenceData attributes, and a ``UserWarning`` at the
end of the run names it.

The update rules are pure functions in :mod:`bnnzoo.inference.sgmcmc`. The transition is on the
sampler core (:mod:`~bnnzoo.inference.kernels.transition`): :class:`SGSampler` has ``init(position)
-> SGState`` and ``step(state, params) -> (SGState, SGInfo)``, one step a draw of one or more
iterations (minibatch force, schedules, temperature, pruning, failure monitor); the explicit
:class:`SGState` holds the position, the dynamics' auxiliary variable, the iteration counter, the
components' states and the monitor, chains leading. :class:`SGMCMCKernel` is the SG adapter (the
``"auto"`` options, the failure records, the expected sd inflation, the end of a run); a kernel one
level below it names its parts (:meth:`SGMCMCKernel.sg_parts`, an :class:`SGParts`): the update rule
(a :class:`Dynamics`: Langevin, SGHMC's momentum form, ...), the components beside the loop
(:class:`SGComponent`: the spike-and-slab stochastic approximation, the group E-step, each with its
state in the :class:`SGState`) and, where it is not the potential's, the force (:class:`Force`).

Per-draw statistics: ``step_size``, ``temperature`` (:math:`1/\tau`), ``lp``
(a *minibatch estimate* of the log density at the point the draw's last
iteration started from: no extra gradient pass is spent on it), ``diverging``,
and ``sparsity`` when pruning.

References
----------
* Welling and Teh (2011), "Bayesian learning via stochastic gradient Langevin dynamics", ICML.
* Chen, Fox and Guestrin (2014), "Stochastic gradient Hamiltonian Monte Carlo", ICML, eq. (15).
* Zhang, Li, Zhang, Chen and Wilson (2020), "Cyclical stochastic gradient MCMC for
  Bayesian deep learning", ICLR (the cyclical cosine step size).
* Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for
  sparse deep learning", NeurIPS, eq. (2)-(3) (inverse temperature, simulated annealing).
"""

from __future__ import annotations

import math
import warnings
import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import pyro
import torch

from ..potential import BNNPotential, PyroPotential
from ..pruning import MagnitudePruning
from ..sgmcmc import (AUTO, SCHEDULES, StepSizeSchedule, finite_chains, inverse_temperature_at, keep_chains,
                      largest_curvature, minibatch_rows)
from .base import BaseOptions
from .transition import TransitionKernel, drawing_from
from ..options import choice, flag, integer, interval, option, optional, positive, site_names

__all__ = ["AUTO", "BLOWUP_FACTOR", "ChainHealth", "Dynamics", "FROZEN_ITERATIONS", "Force", "SGComponent", "SGInfo",
           "SGLDOptions", "SGMCMCKernel", "SGMCMCOptions", "SGParams", "SGParts", "SGSampler", "SGState", "SGWarmup",
           "auto_or", "check_health", "fan_in_radius", "minibatch_data", "step_size_rule"]

Tensor = torch.Tensor
#: InferenceData attributes of every SG-MCMC run
LP_NOTE = ("minibatch estimate: log prior + (N/B) * log likelihood of B random rows, at the point "
           "the draw's last iteration started from; not the exact log density")
LP_FULL_DATA = "full data: the log density at the point the draw's last iteration started from"
#: a chain fails when max |theta| exceeds this times its initial radius max(1, max |theta_0|)
BLOWUP_FACTOR = 1e6
#: ... or when its potential or gradient has not been finite for this many iterations in a row
FROZEN_ITERATIONS = 10


def minibatch_data(potential, rows: Tensor | None) -> tuple[Tensor, Tensor, float]:
    """``(x, y, N/B)`` of a minibatch of a BNN potential (rows ``[B]`` or ``[C, B]``; None: the full data)."""
    if rows is None:
        return potential.x, potential.y, 1.0
    return (*potential.minibatch(rows), potential.num_data / rows.shape[-1])


#: minibatches whose gradients measure the gradient noise along the stiffest direction
NOISE_BATCHES = 16
#: an expected sd inflation above this is a warning
INFLATION_WARNING = 1.1
#: power iterations of the ``step_size="auto"`` curvature estimate (:func:`largest_curvature`)
CURVATURE_ITERATIONS = 20
#: step_size="auto": this over the curvature with the decaying polynomial schedule, 1 over it with another
DECAYING_STEP_FRACTION = 2.0
#: ``init_radius="auto"`` (weights uniform in 1/sqrt(fan_in), biases 0) and ``"fan_in"`` (PyTorch's: biases too)
FAN_IN = ("auto", "fan_in")


def auto_or(check):
    """``check``, or nothing for the sentinel ``"auto"`` (a value the kernel sets from the data)."""
    return lambda name, value: None if isinstance(value, str) and value == AUTO else check(name, value)


def _init_radius(name: str, value) -> None:
    if not (isinstance(value, str) and value in FAN_IN):
        positive(name, value)


def fan_in_radius(potential, zero_biases: bool = False) -> Tensor:
    """``[D]`` radius ``1/sqrt(fan_in)`` of each layer's weight and bias (PyTorch's default
    initialisation of ``nn.Linear`` / ``nn.Conv2d``); with ``zero_biases`` the biases start at 0
    (radius 0). 1 for other sites and for a potential without layers (a Pyro model, a known density)."""
    radius = torch.ones(potential.dim, **potential.placement)
    shapes = getattr(potential, "shapes", {})
    for name, index in getattr(potential, "slices", {}).items():
        weight = shapes.get(f"{name.rsplit('.', 1)[0]}.weight", ())
        if len(weight) > 1:
            bias = name.endswith(".bias")
            radius[index] = 0.0 if bias and zero_biases else 1.0 / math.sqrt(math.prod(weight[1:]))
    return radius


def step_size_rule(curvature: float, schedule: str = "polynomial") -> float:
    r"""``step_size="auto"`` of SGLD, SGHMC and their SA variants, from :math:`\hat\lambda`, the largest
    curvature of the likelihood at the initial point: the stability limit :math:`2/\hat\lambda` of a
    gradient step on the stiffest direction with the decaying ``"polynomial"`` schedule (its
    :math:`k^{-1/3}` is below the limit from the second iteration on: 0.79 at k = 2), half of it,
    :math:`1/\hat\lambda`, with a schedule that stays near :math:`\epsilon_0` (``docs/algorithms.md``,
    "Data-scaled defaults")."""
    if not math.isfinite(curvature) or curvature <= 0:
        raise ValueError(f"step_size='auto': the curvature of the potential at the initial point is "
                         f"{curvature!r}, no step size follows from it; give step_size a number")
    return (DECAYING_STEP_FRACTION if schedule == "polynomial" else 1.0) / curvature


def _max_inverse_temperature(name: str, value) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"{name} must be positive, got {value!r}")


@dataclass(frozen=True)
class SGMCMCOptions(BaseOptions):
    """Options every SG-MCMC kernel has: step sizes, minibatches, thinning."""

    step_size: float | str = option(AUTO, "epsilon_0 (SGLD) or the learning rate eta_0 (SGHMC); auto: 2/lambda with "
                                    "the polynomial schedule, else 1/lambda; lambda the largest Hessian eigenvalue "
                                    "of the likelihood at the initial point",
                                    auto_or(positive))
    schedule: str = option(AUTO, "step-size schedule: 'constant', 'polynomial' or 'cyclical'; auto: "
                           "'polynomial' (eps_0 k^-1/3)", choice(AUTO, *SCHEDULES))
    decay_power: float = option(1.0 / 3.0, "polynomial decay eps_0 ((k+b)/(1+b))^-gamma: gamma", positive)
    decay_offset: float = option(0.0, "polynomial decay: the offset b", interval(0))
    cycle_length: int | None = option(None, "iterations per cycle of the cyclical schedule", optional(integer(1)))
    batch_size: int | None = option(None, "minibatch size B (None: the full data every step)", optional(integer(1)))
    shared_minibatch: bool = option(False, "one minibatch for all vectorized chains (default: one per chain)", flag)
    thin: int = option(1, "iterations per kept draw after warm-up", integer(1))
    init_radius: float | str = option(AUTO, "initial points uniform in (-r, r) in unconstrained space; auto: "
                                      "r = 1/sqrt(fan_in) for layer weights, biases 0, 1 elsewhere", _init_radius)

    #: with the cyclical schedule, ``thin`` counts cycles and a draw is the point at a cycle's end
    #: (:meth:`SGMCMCKernel.iterations_per_draw`); False: ``thin`` iterations per draw with any schedule
    draws_at_cycle_ends = False
    #: ``init_radius="auto"``: each layer's biases start at ``"zero"``, or ``"nonnegative"``: uniform in [0, r)
    auto_init_biases = "zero"

    def validate(self) -> None:
        self.step_schedule()

    def step_schedule(self) -> StepSizeSchedule:
        """The schedule; an ``"auto"`` value stands in as what its rule may give, for the checks."""
        step = 1.0 if self.step_size == AUTO else self.step_size
        kind = "polynomial" if self.schedule == AUTO else self.schedule
        cycle = 1 if self.cycle_length == AUTO else self.cycle_length
        return StepSizeSchedule(step, kind, self.decay_power, self.decay_offset, cycle)

    def auto_fields(self) -> list[str]:
        """The options left at ``"auto"`` (set from the data when the kernel starts)."""
        return [f.name for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), str)
                and getattr(self, f.name) == AUTO and f.name != "init_radius"]

    def auto_step_size(self, curvature: float, schedule: str, num_data: int | None) -> float:
        """``step_size="auto"`` from the largest curvature of the likelihood at the initial point
        (:func:`step_size_rule`), ``schedule`` the resolved schedule, ``num_data`` N (None: no data)."""
        return step_size_rule(curvature, schedule)

    def temperature_schedule(self, num_data: int | None = None) -> tuple[float, float, float]:
        """``(initial, growth, maximum)`` of the inverse temperature (:func:`inverse_temperature_at`) for N =
        ``num_data`` rows: 1."""
        return 1.0, 1.0, math.inf

    def magnitude_pruning(self) -> MagnitudePruning | None:
        """The magnitude pruning schedule of the ``prune*`` options (None: no pruning)."""
        return None


@dataclass(frozen=True)
class SGLDOptions(SGMCMCOptions):
    """Options of :class:`SGLD`: :class:`SGMCMCOptions` plus tempering and magnitude pruning."""

    inverse_temperature: float = option(1.0, "tau_0; the chain targets exp(-tau U)", positive)
    annealing: float = option(1.0, "growth g of simulated annealing, tau_k = tau_0 g^(k-1) (1: none)", positive)
    max_inverse_temperature: float = option(math.inf, "cap of the annealed tau", _max_inverse_temperature)
    prune: float | None = option(None, "magnitude pruning toward this sparsity S in [0, 1) (None: no pruning)",
                                 optional(interval(0, 1)))
    prune_decay: float = option(0.99, "pruning schedule S (1 - D^(k/U)): D in (0, 1)", interval(0, 1, low_open=True))
    prune_period: float = option(50.0, "pruning schedule S (1 - D^(k/U)): U", positive)
    prune_sites: Sequence[str] | None = option(None, "sites pruned (None: every layer weight)", site_names)

    def validate(self) -> None:
        super().validate()
        self.magnitude_pruning()

    def temperature_schedule(self, num_data: int | None = None) -> tuple[float, float, float]:
        return float(self.inverse_temperature), float(self.annealing), float(self.max_inverse_temperature)

    def magnitude_pruning(self) -> MagnitudePruning | None:
        if self.prune is None:
            return None
        sites = None if self.prune_sites is None else tuple(self.prune_sites)
        return MagnitudePruning(self.prune, self.prune_decay, self.prune_period, sites)


# ------------------------------------------------------------ the explicit state
class ChainHealth(NamedTuple):
    """The failure monitor of the chains (module docstring), each ``[C]``: ``nonfinite_run`` the
    iterations in a row with a non-finite potential or gradient, ``failed``, and where a chain failed:
    ``failed_at`` its iteration (0: none), ``cause`` (:data:`CAUSES`: 0 none), ``size`` its
    :math:`\\max_d|\\theta_d|` then, ``bound`` the blow-up bound (:data:`BLOWUP_FACTOR` times its initial radius)."""

    nonfinite_run: Tensor
    failed: Tensor
    failed_at: Tensor
    cause: Tensor
    size: Tensor
    bound: Tensor


#: ChainHealth.cause: 1 overflow, 2 blown up, 3 frozen
CAUSES = ("", "overflow", "blown up", "frozen")


class SGState(NamedTuple):
    """An SG-MCMC sampler's state, chains leading: ``position`` ``[C, D]``; ``aux`` the dynamics'
    auxiliary variable (None; SGHMC's momentum ``[C, D]``; a tuple of them); ``dynamics`` the
    dynamics' own running statistics (None; SGHMC's running noise estimate); ``iteration`` k, the
    SG-MCMC iterations done (the step-size and temperature schedules read it); ``components`` each
    component's state, in the order of :attr:`SGParts.components`; ``pruning`` the magnitude-pruning
    masks ``[C, n]`` per pruned site (None: no pruning); ``health`` the failure monitor; ``value`` the
    minibatch :math:`U` ``[C]`` of the last draw (``lp = -value``; None before the first); ``grad``
    None (there is no exact gradient to keep)."""

    position: Tensor
    aux: Any
    dynamics: Any
    iteration: int
    components: tuple
    pruning: tuple | None
    health: ChainHealth
    value: Tensor | None = None
    grad: None = None


class SGParams(NamedTuple):
    """Iterations per draw: ``thin``, or with ``cycle_ends`` to the end of the ``thin``-th cycle
    from here (the cyclical schedule's draws at cycle ends). Warm-up draws are one iteration each
    (:class:`SGWarmup`)."""

    thin: int
    cycle_ends: bool = False


class SGInfo(NamedTuple):
    """One draw's statistics: ``diverging`` (an iteration of the draw kept its point), the
    ``step_size`` and ``temperature`` (:math:`1/\\tau`) of its last iteration, and ``stats``: the
    components' statistics and the pruning's ``sparsity``, named by the model's sites."""

    diverging: Tensor
    step_size: float
    temperature: float
    stats: dict


# ------------------------------------------------------------ the parts of a kernel
class Dynamics:
    """The update rule of an SG-MCMC kernel, ``(theta, aux) -> (theta', aux')`` on ``[C, D]``
    (SGLD's Langevin step; SGHMC's momentum step, its momentum the auxiliary variable). Its
    configuration comes from the kernel once per setup (:meth:`prepare`); everything that changes
    is in the :class:`SGState` (``aux``, and ``own``: its running statistics)."""

    def prepare(self, kernel) -> None:
        """Configuration from the kernel's resolved options, once per setup (the default: none)."""

    def initial_aux(self, theta: Tensor, step_size: float, inverse_temperature: float):
        """The auxiliary variable before the first iteration; None (the default) where there is none."""
        return None

    def step(self, theta: Tensor, aux, own, grad: Tensor, step_size: float, inverse_temperature: float,
             components: tuple):
        """One update from the (finite, or zeroed) force ``grad``: ``(theta', aux', own')``;
        ``components`` the components' states (read only)."""
        raise NotImplementedError

    def variance_ratio(self, step_size: float, curvature: float, noise: float) -> float | None:
        """Stationary variance over the exact one along a direction of curvature ``curvature`` with
        minibatch gradient noise ``noise`` at ``step_size`` (None, the default: no formula known)."""
        return None


class Force:
    """A force other than the potential's minibatch ``U`` and gradient (the spike-and-slab
    kernels', group-sparse SGHMC's mean-loss gradient)."""

    def prepare(self, kernel, theta: Tensor) -> None:
        """Configuration from the kernel (its potential), once per setup (the default: none)."""

    def force(self, theta: Tensor, rows: Tensor | None, iteration: int, last: bool, own):
        """``(U estimate [C], gradient [C, D], own')`` at ``theta`` on the minibatch ``rows`` (None:
        all) at ``iteration`` k; ``last``: the draw's last iteration (where ``U`` is reported); ``own``
        the state of the component that is this force (None where it is none)."""
        raise NotImplementedError


class SGComponent:
    """A part of an SG-MCMC kernel beside its loop (the spike-and-slab stochastic approximation,
    the group E-step), with its own state in :attr:`SGState.components`. Setup, with the kernel:
    :meth:`check_potential` (before sampling), :meth:`resolve_auto` (values of its ``"auto"``
    options), :meth:`curvature_point` (the point of the ``step_size="auto"`` curvature),
    :meth:`prepare` (its configuration, once per setup). The transition, on its state: :meth:`init`
    (at the initial point), :meth:`before_update` (every iteration, after the force, before the
    update), :meth:`after_step` (on the kept point). Reporting: :meth:`draw_stats`,
    :meth:`final_state` and :meth:`notes` (at the end of a run, where a component also warns about
    what its state shows). The defaults do nothing."""

    def check_potential(self, kernel, potential) -> None:
        pass

    def resolve_auto(self, kernel, theta: Tensor) -> dict:
        return {}

    def curvature_point(self, kernel, theta: Tensor, directions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return theta, directions

    def prepare(self, kernel, theta: Tensor) -> None:
        pass

    def init(self, position: Tensor):
        return None

    def before_update(self, own, theta: Tensor, iteration: int):
        return own

    def after_step(self, own, theta: Tensor) -> Tensor:
        return theta

    def draw_stats(self, own, theta: Tensor) -> dict:
        return {}

    def final_state(self, own, num_chains: int) -> dict:
        return {}

    def notes(self, kernel, own) -> dict:
        return {}


class SGParts(NamedTuple):
    """What a kernel composes on the driver: its update rule, the components beside the loop, and
    its force (None: the potential's minibatch ``U`` and gradient)."""

    dynamics: Dynamics
    components: tuple[SGComponent, ...] = ()
    force: Force | None = None


# ------------------------------------------------------------ the sampler
def check_health(health: ChainHealth, theta: Tensor, force_ok: Tensor, overflow: Tensor,
                 iteration: int) -> ChainHealth:
    """The failure monitor after an iteration (module docstring): ``theta`` the kept ``[C, D]``
    point, ``force_ok`` ``[C]`` a finite U and gradient at the old point, ``overflow`` ``[C]`` a
    step from them that left the finite numbers."""
    run = torch.where(force_ok, torch.zeros_like(health.nonfinite_run), health.nonfinite_run + 1)
    size = theta.detach().abs().amax(-1)
    blown = size > health.bound
    frozen = run >= FROZEN_ITERATIONS
    new = (overflow | blown | frozen) & ~health.failed
    if not bool(new.any()):
        return health._replace(nonfinite_run=run)
    cause = torch.where(overflow, 1, torch.where(blown, 2, 3)).to(health.cause.dtype)
    return ChainHealth(run, health.failed | new, torch.where(new, iteration, health.failed_at),
                       torch.where(new, cause, health.cause), torch.where(new, size.to(health.size.dtype), health.size),
                       health.bound)


class SGSampler:
    """The SG-MCMC transition (module docstring) on explicit states: :meth:`init` and :meth:`step`.
    One step is one draw: :meth:`iterations` SG-MCMC iterations (:meth:`iterate`), each a minibatch,
    the force, the components' updates, the dynamics, the pruning and the failure monitor. It holds
    only configuration (the potential, the parts, the schedules); a checkpoint stores the state."""

    def __init__(self, potential, parts: SGParts, schedule: StepSizeSchedule, temperature: tuple[float, float, float],
                 batch_size: int | None, shared_minibatch: bool, pruner=None):
        self.potential, self.parts, self.schedule, self.temperature = potential, parts, schedule, temperature
        self.batch_size, self.shared_minibatch, self.pruner = batch_size, shared_minibatch, pruner
        components = parts.components
        self.force_index = next((i for i, c in enumerate(components) if c is parts.force), None)

    @property
    def num_data(self) -> int | None:
        return getattr(self.potential, "num_data", None)

    def init(self, position: Tensor) -> SGState:
        chains, device = position.shape[0], position.device
        radius = position.detach().abs().amax(-1).nan_to_num(nan=1.0, posinf=1.0).clamp(min=1.0)
        zeros = torch.zeros(chains, dtype=torch.long, device=device)
        health = ChainHealth(zeros, torch.zeros(chains, dtype=torch.bool, device=device), zeros, zeros,
                             torch.zeros(chains, dtype=position.dtype, device=device), BLOWUP_FACTOR * radius)
        masks = None if self.pruner is None else self.pruner.initial_masks(chains, device)
        return SGState(position, None, None, 0, tuple(c.init(position) for c in self.parts.components), masks, health)

    def iterations(self, iteration: int, params: SGParams) -> int:
        """SG-MCMC iterations of the draw after ``iteration``: ``thin``, or to the end of the
        ``thin``-th cycle from there."""
        if params.cycle_ends:
            length = self.schedule.cycle_length
            return length - iteration % length + (params.thin - 1) * length
        return params.thin

    def step(self, state: SGState, params: SGParams,
             generator: torch.Generator | None = None) -> tuple[SGState, SGInfo]:
        """One draw. The row draws and noises come from ``generator`` (None: torch's global
        generator), in their order: the updates draw with torch's global generator, to which
        :func:`~.transition.drawing_from` lends ``generator``'s state for the step."""
        iterations = self.iterations(state.iteration, params)
        diverging = torch.zeros(state.position.shape[0], dtype=torch.bool, device=state.position.device)
        previous = state.value
        with drawing_from(generator):
            for i in range(iterations):
                state, value, bad = self.iterate(state, last=i == iterations - 1)
                diverging |= bad
        value = value.detach()
        if previous is not None:  # a non-finite minibatch estimate keeps the last draw's
            value = torch.where(torch.isfinite(value), value, previous)
        k = state.iteration
        info = SGInfo(diverging, float(self.schedule(k)), 1.0 / inverse_temperature_at(k, *self.temperature),
                      self.draw_stats(state))
        return state._replace(value=value), info

    def draw_rows(self, chains: int) -> Tensor | None:
        """An iteration's minibatch for ``chains`` chains (None: the full data)."""
        if self.batch_size is None or self.batch_size == self.num_data:
            return None
        return minibatch_rows(self.num_data, self.batch_size, chains, self.shared_minibatch, self.potential.device)

    def force(self, state: SGState, theta: Tensor, rows: Tensor | None, iteration: int,
              last: bool = True) -> tuple[Tensor, Tensor, tuple]:
        """Minibatch ``U`` ``[C]``, its gradient ``[C, D]`` at ``theta`` and the components' states
        (the force's own updated): the kernel's :class:`Force` where it has one, else the potential's."""
        components = state.components
        force = self.parts.force
        if force is None:
            if rows is None:
                return (*self.potential.value_and_grad(theta), components)
            return (*self.potential.minibatch_value_and_grad(theta, rows), components)
        own = None if self.force_index is None else components[self.force_index]
        value, grad, own = force.force(theta, rows, iteration, last, own)
        if self.force_index is not None:
            components = components[:self.force_index] + (own,) + components[self.force_index + 1:]
        return value, grad, components

    def iterate(self, state: SGState, last: bool = True) -> tuple[SGState, Tensor, Tensor]:
        """One SG-MCMC iteration: ``(state', U at the old point [C], diverging [C])``."""
        theta, k = state.position, state.iteration + 1
        step_size = self.schedule(k)
        tau = inverse_temperature_at(k, *self.temperature)
        value, grad, components = self.force(state, theta, self.draw_rows(theta.shape[0]), k, last)
        force_ok = torch.isfinite(value) & torch.isfinite(grad).all(-1)
        grad = torch.where(force_ok.unsqueeze(-1), grad, torch.zeros_like(grad))
        dynamics, masks, aux = self.parts.dynamics, state.pruning, state.aux
        if aux is None:
            aux = dynamics.initial_aux(theta, step_size, tau)
            if aux is not None and masks is not None:
                aux = self.pruner.zero(aux, masks)
        components = tuple(c.before_update(own, theta, k) for c, own in zip(self.parts.components, components))
        theta_new, aux_new, own = dynamics.step(theta, aux, state.dynamics, grad, step_size, tau, components)
        finite = finite_chains(theta_new)
        if aux_new is not None:
            finite = finite & finite_chains(aux_new)
        ok = force_ok & finite
        if aux_new is not None:
            aux = keep_chains(ok, aux_new, aux)
        theta_new = torch.where(ok.unsqueeze(-1), theta_new, theta)
        if masks is not None:  # the pruning, then the components, on the kept point
            theta_new, masks = self.pruner.grow(theta_new, masks, k)
            if aux is not None:
                aux = self.pruner.zero(aux, masks)
        for c, own_c in zip(self.parts.components, components):
            theta_new = c.after_step(own_c, theta_new)
        health = check_health(state.health, theta_new, force_ok, force_ok & ~finite, k)
        new = SGState(theta_new, aux, own, k, components, masks, health, state.value)
        return new, value, ~ok

    def draw_stats(self, state: SGState) -> dict[str, Tensor]:
        """Extra per-draw statistics (``[C]`` tensors): the components', and the pruning's
        ``sparsity`` where no component gives one."""
        stats = {}
        for c, own in zip(self.parts.components, state.components):
            stats.update(c.draw_stats(own, state.position))
        if state.pruning is not None and "sparsity" not in stats:
            stats["sparsity"] = self.pruner.sparsity(state.pruning)
        return stats


class SGWarmup:
    """The warm-up of an SG-MCMC kernel: one iteration per warm-up draw; at the last warm-up step
    the sampling parameters (``thin`` iterations, or cycles, per draw). Nothing is tuned."""

    def __init__(self, sampling: SGParams):
        self.sampling = sampling
        self.num_steps = 0

    def start(self, sampler, state, params, num_steps: int):
        self.num_steps = num_steps
        return state, SGParams(1)

    def update(self, sampler, t: int, state, info, params):
        return state, (self.finish(params) if t == self.num_steps - 1 else params)

    def finish(self, params, sampler=None, state=None):
        """End warm-up: the sampling parameters from the next iteration on."""
        return self.sampling


# ------------------------------------------------------------ the adapter
class SGMCMCKernel(TransitionKernel):
    """The one driver of the SG-MCMC kernels: the :class:`SGSampler` (minibatches, schedules,
    temperature, thinning, pruning, failure monitor) as a Pyro kernel, with its setup (the
    ``"auto"`` options) and the end of a run (failures, the expected sd inflation, the components'
    notes and final state). A kernel one level below it names its parts in :meth:`sg_parts` (its
    :class:`Dynamics`, its :class:`SGComponent` s, its :class:`Force`); none overrides the driver's
    steps (rules that differ between kernels, such as the ``"auto"`` step size or the temperature,
    are methods of their options). Options: a :class:`SGMCMCOptions`.

    ``batch_size`` needs a potential with ``num_data`` and
    ``minibatch_value_and_grad(theta, rows)``: a BNN, or a Pyro model whose
    observations sit in ``pyro.plate(name, N, subsample_size=...)`` (any
    ``subsample_size``: the plate is conditioned on ``batch_size`` rows, see
    :class:`~bnnzoo.inference.potential.PyroPotential`).
    """

    Options = SGMCMCOptions
    stat_names = ("diverging", "lp", "step_size", "temperature")
    #: rebuilt by ``setup()``, never stored in a checkpoint (the parts' configuration included: it follows
    #: the resolved options, which are stored)
    checkpoint_environment = TransitionKernel.checkpoint_environment + ("parts", "_configured_for")

    def __init__(self, model=None, potential=None, **options):
        super().__init__(model, potential, **options)

    def _init(self, model, potential, device, dtype, options) -> None:
        super()._init(model, potential, device, dtype, options)
        self.resolved = self.options  # the options with every "auto" replaced by its value, from prepare() on
        self.auto_values: dict = {}
        self.schedule = self.options.step_schedule()
        if isinstance(self.options.init_radius, str):  # "auto" / "fan_in": per layer, in initial_radius()
            self.init_radius = 1.0
        self.batch_size = self.options.batch_size
        self.shared_minibatch = self.options.shared_minibatch
        self.thin = self.options.thin

    # ---------------------------------------------------------------- state
    def _reset(self) -> None:
        super()._reset()
        # the expected sd inflation (inflation()): curvature, gradient noise, sum of variance ratios
        self._inflation: dict | None = None
        self.parts = self.sg_parts()  # fresh per setup: its configuration is the run's
        self._failures: list = []  # per chain: None, or {"phase", "iteration", "draw", "reason"}
        self._failure_warned = False
        self._configured_for = None  # the resolved options the parts and the sampler were configured from

    def sg_parts(self) -> SGParts:
        """This kernel's parts: its update rule, the components beside the loop, its force."""
        raise NotImplementedError

    def component(self, kind: type) -> SGComponent | None:
        """This kernel's component of class ``kind`` (None: it has none)."""
        return next((c for c in self.parts.components if isinstance(c, kind)), None)

    def component_state(self, kind: type):
        """The current state of this kernel's component of class ``kind`` (None: none, or before setup)."""
        if self.state is None:
            return None
        return next((own for c, own in zip(self.parts.components, self.state.components) if isinstance(c, kind)),
                    None)

    @property
    def iteration(self) -> int:
        """SG-MCMC iterations done (warm-up included)."""
        return 0 if self.state is None else self.state.iteration

    def initial_radius(self) -> float | Tensor:
        if isinstance(self.options.init_radius, str):
            zero_biases = self.options.init_radius == AUTO and self.options.auto_init_biases == "zero"
            return fan_in_radius(self.potential, zero_biases=zero_biases)
        return self.init_radius

    def initial_point(self) -> Tensor:
        """Uniform in ``(-r, r)``; with ``init_radius="auto"`` and the options' ``auto_init_biases =
        "nonnegative"``, every layer's bias folded to :math:`|b|` (PyTorch's start, no unit dead by its bias)."""
        theta = super().initial_point()
        if self.options.init_radius == AUTO and self.options.auto_init_biases == "nonnegative":
            shapes = self.potential.shapes
            for name, index in self.potential.slices.items():
                if name.endswith(".bias") and len(shapes.get(f"{name.rsplit('.', 1)[0]}.weight", ())) > 1:
                    theta[:, index] = theta[:, index].abs()
        return theta

    # ------------------------------------------------------ "auto" options
    def resolve_auto(self, theta: Tensor) -> dict:
        """The values of the options left at ``"auto"``, from the potential (its data) and the
        initial point ``[C, D]``: this kernel's rules (``docs/algorithms.md``, "Data-scaled defaults")."""
        auto = self.options.auto_fields()
        values = {}
        if "schedule" in auto:
            values["schedule"] = "polynomial"
        if "step_size" in auto:
            schedule = values.get("schedule", self.options.schedule)
            values["step_size"] = self.options.auto_step_size(self.curvature(theta), schedule, self.num_data)
        for component in self.parts.components:
            values.update(component.resolve_auto(self, theta))
        return values

    def curvature(self, theta: Tensor, directions: Tensor | None = None) -> float:
        """:func:`largest_curvature` at ``theta`` of the full-data negative log likelihood (of a BNN;
        of the whole potential otherwise), computed once per setup. The likelihood is the part that
        grows with N; a prior's kink (Laplace, spike-and-slab) has no finite curvature to measure. Where the
        likelihood shows none (every ReLU unit dead at the start), the whole potential's."""
        if getattr(self, "_curvature", None) is None:
            for component in self.parts.components:
                theta, directions = component.curvature_point(self, theta, directions)
            curvature = largest_curvature(self._likelihood_gradient, theta, CURVATURE_ITERATIONS,
                                          directions=directions)
            if not (math.isfinite(curvature) and curvature > 0):  # e.g. every ReLU unit dead at the start
                curvature = largest_curvature(self.potential.value_and_grad, theta, CURVATURE_ITERATIONS,
                                              directions=directions)
            self._curvature = curvature
        return self._curvature

    def _likelihood_gradient(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``(-log p(y | theta) [C], its gradient [C, D])`` on the full data (a BNN), else ``U``'s."""
        potential = self.potential
        if not isinstance(potential, BNNPotential):
            return potential.value_and_grad(theta)
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad(), pyro.validation_enabled(False):
            values, _ = potential.constrained_values(theta)
            value = -potential.log_likelihood(values)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    def _resolve(self, theta: Tensor) -> None:
        self._curvature = None
        self.auto_values = self.resolve_auto(theta)
        if self._curvature is not None:
            self.auto_values.setdefault("curvature", self._curvature)
        given = {k: v for k, v in self.auto_values.items() if k in self.options.names() and not isinstance(v, dict)}
        self.resolved = dataclasses.replace(self.options, **given)
        self.schedule = self.resolved.step_schedule()

    def build(self, theta: Tensor) -> tuple[SGSampler, SGWarmup, SGParams]:
        """The :class:`SGSampler` of the resolved options and the parts, the warm-up (one iteration per
        draw) and the sampling parameters."""
        self.check_potential(self.potential)
        self._resolve(theta)
        sampler = self.configure(theta)
        self._failures = [None] * self.num_chains
        params = SGParams(self.thin, self._draws_at_cycle_ends(self.schedule.kind))
        return sampler, SGWarmup(params), params

    def configure(self, theta: Tensor) -> SGSampler:
        """The parts configured from the resolved options (:attr:`resolved`, :attr:`auto_values`) and
        the sampler on them. A resumed run restores the resolved options of the run it continues (its
        ``"auto"`` values came from that run's initial point), so its first transition configures the
        parts again from them (:meth:`transition`)."""
        self._configured_for = self.resolved
        pruning = self.pruning
        pruner = None if pruning is None else pruning.bind(self.potential, self.num_chains)
        self.parts.dynamics.prepare(self)
        for component in self.parts.components:
            component.prepare(self, theta)
        if self.parts.force is not None and self.parts.force not in self.parts.components:
            self.parts.force.prepare(self, theta)
        return SGSampler(self.potential, self.parts, self.schedule, self.temperature_schedule(), self.batch_size,
                         self.shared_minibatch, pruner)

    @property
    def pruning(self) -> MagnitudePruning | None:
        """The magnitude pruning schedule of the ``prune*`` options (None: no pruning)."""
        return self.options.magnitude_pruning()

    def temperature_schedule(self) -> tuple[float, float, float]:
        """``(initial, growth, maximum)`` of the inverse temperature (:func:`inverse_temperature_at`)."""
        return self.options.temperature_schedule(self.num_data)

    def check_potential(self, potential) -> None:
        self.check_batch_size(potential)
        if self.pruning is not None:
            self.pruning.bind(potential, 1)
        for component in self.parts.components:
            component.check_potential(self, potential)

    def notes(self) -> dict:
        full_data = self.batch_size is None or self.batch_size == getattr(self.potential, "num_data", None)
        per_draw = f"{self.thin} cycle(s): draws at cycle ends" if self._draws_at_cycle_ends(self.options.schedule) \
            else self.thin
        notes = {**super().notes(), "lp_estimate": LP_FULL_DATA if full_data else LP_NOTE,
                 "iterations_per_draw": per_draw}
        if self.auto_values:  # what each "auto" option was set to (and the curvature the step came from)
            notes["auto_options"] = dict(self.auto_values)
        inflation = self.inflation()
        if inflation is not None:
            r = inflation["sd_inflation"]
            notes["expected_sd_inflation"] = (
                f"about {r:.3g}x along the stiffest direction (curvature {inflation['curvature']:.3g}, minibatch "
                f"gradient noise variance {inflation['gradient_noise']:.3g} along it, at the sampling step sizes; "
                "a Gaussian's stationary sd of this update over the exact one)")
            if r > INFLATION_WARNING:
                warnings.warn(f"{type(self).__name__}: at its step sizes the posterior sd is expected to be "
                              f"inflated about {r:.2f}x along the stiffest direction (discretisation and minibatch "
                              "noise); a smaller step_size, a larger batch_size or more iterations of a decaying "
                              "schedule lower it")
        states = self.state.components if self.state is not None else (None,) * len(self.parts.components)
        for component, own in zip(self.parts.components, states):
            if own is not None:
                notes.update(component.notes(self, own))
        return notes

    def check_batch_size(self, potential) -> None:
        """Clear errors for a minibatch the potential cannot give."""
        if self.batch_size is None:
            return
        if isinstance(potential, PyroPotential):  # a subsample plate of one size, no local latent
            potential.check_minibatch(self.batch_size)
        num_data = getattr(potential, "num_data", None)
        if num_data is None or not hasattr(potential, "minibatch_value_and_grad"):
            raise ValueError(f"batch_size={self.batch_size}: minibatches need a BNN model or a Pyro model with "
                             f"a subsample plate (a potential with data); use batch_size=None for "
                             f"{type(potential).__name__}")
        if self.batch_size > num_data:
            raise ValueError(f"batch_size={self.batch_size} is larger than the {num_data} training rows")

    @property
    def num_data(self) -> int | None:
        return getattr(self.potential, "num_data", None)

    # ------------------------------------------------------------- one draw
    def transition(self, theta: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The core's transition (one :meth:`SGSampler.step`), then the run's monitoring: the chains
        that failed in this draw, and at sampling draws the expected sd inflation."""
        if self._configured_for is not self.resolved:  # a checkpoint restored the options the run resolved
            self.sampler = self.configure(self.state.position)
        before = self._continue(theta)
        position, stats = super().transition(theta)
        self._record_failures(before.health, self.state.health)
        if not self.in_warmup:
            self._add_inflation(before.position, before.iteration, self.state.iteration)
        return position, stats

    # ------------------------------------------------- the expected sd inflation
    def variance_ratio(self, step_size: float, curvature: float, noise: float) -> float | None:
        """The dynamics' :meth:`Dynamics.variance_ratio`."""
        return self.parts.dynamics.variance_ratio(step_size, curvature, noise)

    def _add_inflation(self, theta: Tensor, start: int, end: int) -> None:
        """For the sampling iterations ``start + 1 .. end`` (a draw from ``theta``): the variance ratio of
        each one's step size, along the stiffest direction at the first sampling point (its curvature
        and the minibatch gradient noise along it, measured once there)."""
        if self._inflation is None:
            if self.variance_ratio(1.0, 1.0, 0.0) is None:
                return
            curvature, noise = self._stiffest(theta)
            self._inflation = {"curvature": curvature, "noise": noise, "sum": 0.0, "count": 0, "last": None}
        info = self._inflation
        if not (math.isfinite(info["curvature"]) and info["curvature"] > 0):
            return
        for k in range(start + 1, end + 1):
            step_size = self.schedule(k)
            last = info["last"]  # (step size, its ratio): a constant schedule computes it once
            if last is None or last[0] != step_size:
                last = info["last"] = (step_size, self.variance_ratio(step_size, info["curvature"], info["noise"]))
            info["sum"] += last[1]
            info["count"] += 1

    def _stiffest(self, theta: Tensor) -> tuple[float, float]:
        """The largest curvature of ``U`` at ``theta`` and the variance of the minibatch gradient
        along its direction (over :data:`NOISE_BATCHES` minibatches; 0 with the full data), the
        run's random stream and the sampler's state untouched."""
        sampler, state = self.sampler, self.state
        with torch.random.fork_rng(devices=[theta.device] if theta.device.type == "cuda" else []):
            curvature, direction = largest_curvature(self.potential.value_and_grad, theta, CURVATURE_ITERATIONS,
                                                     return_direction=True)
            chains = theta.shape[0]
            if sampler.draw_rows(chains) is None or direction is None:
                return curvature, 0.0
            projected = torch.stack([(sampler.force(state, theta, sampler.draw_rows(chains), state.iteration)[1]
                                      * direction).sum(-1) for _ in range(NOISE_BATCHES)])  # [M, C]
        return curvature, float(projected.var(0).mean())

    def inflation(self) -> dict | None:
        """The expected posterior sd inflation along the stiffest direction, from the sampling
        iterations' step sizes, the curvature and the minibatch gradient noise: ``{"sd_inflation",
        "curvature", "gradient_noise"}`` (sd_inflation: the root of the mean variance ratio), None
        where the update has no such formula or nothing was sampled."""
        info = self._inflation
        if info is None or not info["count"]:
            return None
        return {"sd_inflation": math.sqrt(info["sum"] / info["count"]), "curvature": info["curvature"],
                "gradient_noise": info["noise"]}

    # ------------------------------------------------------------ failures
    def _record_failures(self, before: ChainHealth, after: ChainHealth) -> None:
        """The chains that failed in this draw (:class:`ChainHealth`), with the draw and the phase."""
        if after.failed is before.failed:  # check_health keeps the tensor while no chain fails
            return
        new = after.failed & ~before.failed
        if not bool(new.any()):
            return
        phase = "warmup" if self.in_warmup else "sampling"
        draw = len(self._warmup_stats) if self.in_warmup else len(self._stats)
        for c in torch.nonzero(new).flatten().tolist():
            cause, iteration = CAUSES[int(after.cause[c])], int(after.failed_at[c])
            if cause == "overflow":
                reason = "the step left the finite numbers (overflow) from a finite potential and gradient"
            elif cause == "blown up":
                reason = (f"max |theta| = {float(after.size[c]):.3g} exceeds {float(after.bound[c]):.3g} "
                          f"({BLOWUP_FACTOR:g} x the initial radius)")
            else:
                reason = (f"the potential or its gradient has not been finite for {FROZEN_ITERATIONS} iterations "
                          f"in a row, since iteration {iteration - FROZEN_ITERATIONS + 1} (the chain is frozen)")
            self._failures[c] = {"phase": phase, "iteration": iteration, "draw": int(draw), "reason": reason}

    def failure_message(self) -> str | None:
        """One line naming the failed chains (None when every chain is fine)."""
        failed = [c for c, f in enumerate(self._failures) if f is not None]
        if not failed:
            return None
        first = self._failures[failed[0]]
        phase = "warm-up" if first["phase"] == "warmup" else "sampling"
        chain = f"chain {failed[0]}" if self.num_chains > 1 else "the chain"
        return (f"{type(self).__name__}: {len(failed)} of {self.num_chains} chain(s) failed; {chain} at {phase} "
                f"iteration {first['iteration']} (draw {first['draw']}): {first['reason']}; its draws are not "
                f"posterior draws: lower step_size (now {self.resolved.step_size:g})")

    def cleanup(self) -> None:
        """End of a run (Pyro calls it): warn once about failed chains."""
        super().cleanup()
        message = self.failure_message()
        if message is not None and not self._failure_warned:
            self._failure_warned = True
            warnings.warn(message, stacklevel=2)

    def _draws_at_cycle_ends(self, schedule: str) -> bool:
        return self.options.draws_at_cycle_ends and schedule == "cyclical"

    # ------------------------------------------------------------ reporting
    def tuned(self) -> dict:
        """Nothing is tuned (the step size is the schedule's)."""
        return {}

    def final_state(self) -> dict:
        """Final per-chain quantities (typed fields of :class:`~bnnzoo.results.Draws`):
        ``{name: {site: [C, ...] array}}``; ``"failure"`` holds ``failed`` (bool), ``warmup``
        (bool), ``iteration`` (0: none), ``draw`` (-1: none) and ``reason`` (str), each ``[C]``."""
        out = {}
        state = self.state
        if state is None:
            return out
        rows = [f or {"phase": "", "iteration": 0, "draw": -1, "reason": ""} for f in self._failures]
        out["failure"] = {"failed": state.health.failed.cpu().numpy().copy(),
                          "warmup": np.array([r["phase"] == "warmup" for r in rows]),
                          "iteration": np.array([r["iteration"] for r in rows], dtype=np.int64),
                          "draw": np.array([r["draw"] for r in rows], dtype=np.int64),
                          "reason": np.array([r["reason"] for r in rows], dtype=str)}
        if state.pruning is not None:
            shapes = self.potential.shapes
            out["pruning_mask"] = {s: m.reshape((self.num_chains,) + shapes[s]).cpu().numpy()
                                   for s, m in zip(self.sampler.pruner.sites, state.pruning)}
        for component, own in zip(self.parts.components, state.components):
            out.update(component.final_state(own, self.num_chains))
        return out

    def diagnostics(self) -> dict:
        out = super().diagnostics()
        out.pop("acceptance rate", None)  # no Metropolis test
        out["final_state"] = self.final_state()
        return out

    def logging(self):
        log = super().logging()
        if self._stats or self._warmup_stats:
            log["iteration"] = self.iteration
        return log
