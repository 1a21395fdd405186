r"""MAMS: the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon and Seljak 2025).

Each transition draws a unit velocity uniformly on the sphere, runs a trajectory of the
isokinetic integrator (:mod:`~bnnzoo.inference.isokinetic`) whose length is jittered around
:math:`L` (uniform number of steps with mean :math:`L/\epsilon`), and accepts the end with
probability :math:`\min(1, e^{-\Delta E})`, :math:`\Delta E` the energy error (the kinetic
change of the velocity updates plus the change of :math:`U`). The isokinetic map with its
kinetic term is volume-preserving up to that term and reversible under a velocity flip, so the
chain is exact whatever the step size (Robnik et al. 2025, section 3). Warm-up
(:class:`MAMSAdaptation`) tunes the step size by dual averaging toward ``target_accept``, a
diagonal preconditioner from the chains' variances and :math:`L` from the autocorrelation of
the warm-up draws. The rules are in ``docs/algorithms.md`` ("Microcanonical samplers").

**References**

* Robnik, J., Cohn-Gordon, R. and Seljak, U. (2025). Metropolis adjusted microcanonical
  Hamiltonian Monte Carlo. arXiv:2503.01707.
* Robnik, J., De Luca, G. B., Silverstein, E. and Seljak, U. (2023). Microcanonical Hamiltonian
  Monte Carlo. JMLR 24.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from ..adaptation import (ChainVariance, DualAveraging, EnergyVarianceStepSize, acceptance_statistic,
                          decoherence_length, find_step_size, within_chain_variance)
from ..isokinetic import INTEGRATORS, Phase, integrate_amounts, substep_amounts, unit_normal
from ..options import choice, flag, fraction, integer, interval, option, optional, positive
from ..potential import placement
from .base import BaseOptions, metropolis_accept
from .hmc import MAX_ENERGY_ERROR
from .mclmc import MCLMCParams, MCLMCSampler, MCLMCState, Microcanonical, tracked_columns, warmup_phases

__all__ = ["MAMS", "MAMSAdaptation", "MAMSInfo", "MAMSOptions", "MAMSParams", "MAMSSampler", "MAMSState",
           "search_step_size", "trajectory_cap", "trajectory_steps"]

Tensor = torch.Tensor
#: mean integrator steps of a trajectory until warm-up has measured L
FIRST_STEPS = 8


class MAMSState(NamedTuple):
    """Chains ``[C, ...]``: position, :math:`U` and :math:`\\nabla U` (the velocity is drawn afresh each transition)."""

    position: Tensor
    value: Tensor
    grad: Tensor


class MAMSParams(NamedTuple):
    """What warm-up tunes: the step size and the mean trajectory length L (preconditioned units)
    and the preconditioner's scales ``[D]``."""

    step_size: float
    L: float
    scale: Tensor


class MAMSInfo(NamedTuple):
    """One transition's statistics, ArviZ's names (``energy_error``: inf where not finite)."""

    acceptance_rate: Tensor
    diverging: Tensor
    energy_error: Tensor
    step_size: float
    n_steps: int


def trajectory_steps(mean_steps: float, uniform: float, max_steps: int) -> int:
    r"""Steps of one trajectory: :math:`\lceil 2 \bar n u \rceil` for :math:`u \sim U(0, 1)` (mean
    :math:`\bar n + 1/2`), at least 1 and at most ``max_steps``. Jittering the length keeps the
    chain from resonating with periodic directions (as ChEES and BlackJAX's dynamic MAMS do)."""
    return int(min(max(math.ceil(2.0 * mean_steps * uniform), 1), max_steps))


PHASE = Phase._fields


def mams_graph_body(buffers: dict, value_and_grad, integrator: str) -> Callable[[], None]:
    """One integrator step of a MAMS trajectory on the buffers of a captured CUDA graph
    (:class:`~bnnzoo.inference.cuda_graphs.GraphedStep`): the phase's four, ``amounts`` (filled on
    the host), ``scale`` and the running ``kinetic`` change."""
    b = buffers
    amounts = [b["amounts"][i] for i in range(len(INTEGRATORS[integrator]))]

    def one_step() -> None:
        phase, change = integrate_amounts(Phase(*(b[name] for name in PHASE)), amounts, b["scale"], value_and_grad,
                                          integrator)
        for name, value in zip(PHASE, phase):
            b[name].copy_(value)
        b["kinetic"].copy_(b["kinetic"] + change)

    return one_step


class MAMSSampler:
    """The MAMS transition on a flat potential (module docstring): ``init`` and ``step``. ``graph``:
    ``position -> GraphedStep | None`` (the kernel's runtime: a CUDA graph of :func:`mams_graph_body`
    where one applies), or None."""

    def __init__(self, value_and_grad, integrator: str = "mclachlan", max_steps: int = 1024, jitter: bool = True,
                 graph: Callable | None = None):
        self.value_and_grad, self.integrator = value_and_grad, integrator
        self.max_steps, self.jitter, self.graph = max_steps, jitter, graph

    def init(self, position: Tensor, generator: torch.Generator | None = None) -> MAMSState:
        return MAMSState(position, *self.value_and_grad(position))

    def num_steps(self, params: MAMSParams, generator: torch.Generator | None = None) -> int:
        """This transition's steps, the same for every chain; the jitter is drawn on the host."""
        mean = params.L / params.step_size
        if not self.jitter:
            return int(min(max(round(mean), 1), self.max_steps))
        uniform = float(torch.rand((), generator=generator, device="cpu", dtype=torch.float64))
        return trajectory_steps(mean, uniform, self.max_steps)

    def step(self, state: MAMSState, params: MAMSParams, generator: torch.Generator | None = None,
             num_steps: int | None = None) -> tuple[MAMSState, MAMSInfo]:
        """A fresh unit velocity, ``num_steps`` integrator steps (None: :meth:`num_steps`) and the
        Metropolis test; a trajectory that is not finite is rejected and counted as a divergence."""
        steps = self.num_steps(params, generator) if num_steps is None else num_steps
        phase = Phase(state.position, unit_normal(state.position, generator), state.value, state.grad)
        kinetic = torch.zeros_like(state.value)
        amounts = substep_amounts(params.step_size, state.position.shape[-1], self.integrator)
        graph = self.graph(state.position) if self.graph is not None else None
        out = None if graph is None else graph.run(
            {**phase._asdict(), "kinetic": kinetic, "scale": params.scale,
             "amounts": torch.tensor(amounts, dtype=state.position.dtype, device=state.position.device)}, steps)
        if out is not None:
            phase, kinetic = Phase(*(out[name].clone() for name in PHASE)), out["kinetic"].clone()
        else:
            for _ in range(steps):
                phase, change = integrate_amounts(phase, amounts, params.scale, self.value_and_grad, self.integrator)
                kinetic = kinetic + change
        error = kinetic + phase.value - state.value
        finite = torch.isfinite(error) & torch.isfinite(phase.x).all(-1) & torch.isfinite(phase.grad).all(-1)
        accepted, prob, _ = metropolis_accept(torch.where(finite, -error, torch.full_like(error, math.nan)),
                                              generator)
        keep = accepted.unsqueeze(-1)
        new = MAMSState(torch.where(keep, phase.x, state.position), torch.where(accepted, phase.value, state.value),
                        torch.where(keep, phase.grad, state.grad))
        error = torch.where(finite, error, torch.full_like(error, math.inf))
        return new, MAMSInfo(prob, ~finite | (error > MAX_ENERGY_ERROR), error, params.step_size, steps)


def trajectory_cap(params: MAMSParams, max_steps: int, jitter: bool = True,
                   measured_steps: float | None = None) -> str | None:
    """In words, where the tuned L asks for trajectories longer than ``max_steps`` integrator steps
    (their share cut at the cap: a jittered trajectory draws up to twice L / step size steps); None
    where none is cut. ``measured_steps``: the length warm-up measured, in steps, before the cap."""
    mean = params.L / params.step_size
    share = (max(0.0, 1.0 - max_steps / (2.0 * mean)) if jitter else float(round(mean) > max_steps))
    if share <= 0.0:
        return None
    words = (f"L = {params.L:.3g} is {mean:.0f} integrator steps of the step size {params.step_size:.3g}, so "
             f"{share:.0%} of the trajectories are cut at max_steps={max_steps}")
    if measured_steps is not None and measured_steps > max_steps:
        words += f" (warm-up measured {measured_steps:.0f} steps and held L at the cap)"
    return (words + "; an L this long can come from a warm-up whose chains were still drifting: look at lp "
            "over the warm-up draws, raise max_steps or give L")


def search_step_size(sampler: MAMSSampler, state: MAMSState, params: MAMSParams) -> float:
    """:func:`~bnnzoo.inference.adaptation.find_step_size` on the acceptance of one integrator step
    from ``state`` under ``params``'s preconditioner, starting at ``params.step_size``."""
    def one_step(step_size: float) -> float:
        _, info = sampler.step(state, params._replace(step_size=step_size, L=step_size), num_steps=1)
        return acceptance_statistic(info.acceptance_rate, ~info.diverging)

    return find_step_size(params.step_size, one_step)


class MAMSAdaptation:
    r"""MAMS's warm-up: an optional unadjusted burn-in, then three phases of the warm-up steps left.

    0. (``burn_in``, a share of the warm-up steps; none by default) unadjusted MCLMC
       (:class:`~bnnzoo.inference.kernels.mclmc.MCLMCSampler`): each warm-up step is
       :data:`FIRST_STEPS` integrator steps with the velocity kept and partially refreshed over
       :math:`L = \sqrt d` (so a chain keeps its direction for about :math:`\sqrt d / \epsilon`
       steps instead of drawing a new one every trajectory), the step size tuned to
       ``burn_in_energy_var`` (:class:`~bnnzoo.inference.adaptation.EnergyVarianceStepSize`), no
       preconditioner. Its steps cost what the short trajectories of phase 1 cost. It carries chains
       that start far from the typical set (a deep-ensemble member's fitted point) toward it
       ballistically, where short adjusted trajectories move them diffusively (BlackJAX tunes
       adjusted MCLMC after a run of unadjusted MCLMC, in that order). Over its second half the
       chains' own variances are pooled and up to 1024 coordinates recorded; at its end they set the
       preconditioner and :math:`L = 0.4\, \ell\, \overline{\tau}` (MCLMC's rule, :math:`\ell` the
       distance a burn-in step moved in preconditioned units), the step size is searched for afresh in
       MAMS's units, and the phases below start, less phase 1's preconditioner and phase 2's L where
       the burn-in set them;
    1. (30%) dual averaging of the step size toward ``target_accept`` with short trajectories
       (:data:`FIRST_STEPS` steps on average), the chains' own variances pooled over its second half
       (:func:`~bnnzoo.inference.adaptation.within_chain_variance`); at its end they become the
       preconditioner, the step size is searched for again in its units and dual averaging starts
       over from there;
    2. (30%) dual averaging under the preconditioner, still with short trajectories, while up to
       1024 coordinates are recorded over its second half; at its end
       :math:`L = 0.4\, \bar\ell\, \overline{\tau}` with :math:`\bar\ell` the mean length of a
       trajectory and :math:`\tau` the chains' integrated autocorrelation times
       (:func:`~bnnzoo.inference.adaptation.decoherence_length`), within one step and ``max_steps``
       steps;
    3. (40%) dual averaging at that length; the step size ends at the average of its iterates here.

    Measuring L on short trajectories keeps warm-up's cost bounded before L is known (the role
    BlackJAX gives a run of unadjusted MCLMC before MAMS). A given ``L`` is kept. The statistic dual
    averaging steers is :func:`~bnnzoo.inference.adaptation.acceptance_statistic` (divergent chains
    count as rejections), as for the HMC family.
    """

    def __init__(self, dim: int, target_accept: float, max_steps: int, L: float | None = None,
                 adapt_step_size: bool = True, adapt_L: bool = True, precondition: bool = True, gamma: float = 0.05,
                 burn_in: float = 0.0, burn_in_energy_var: float = 0.1):
        self.dim, self.target_accept, self.max_steps, self.given_L = int(dim), float(target_accept), int(max_steps), L
        self.adapt_step_size, self.adapt_L, self.precondition, self.gamma = adapt_step_size, adapt_L, precondition, gamma
        self.burn_in, self.burn_in_energy_var = float(burn_in), float(burn_in_energy_var)

    @property
    def short(self) -> bool:
        """Whether trajectories are still :data:`FIRST_STEPS` long (L not yet measured)."""
        return self.adapt_L and self.given_L is None and not self.measured

    def start(self, sampler: MAMSSampler, state: MAMSState, params: MAMSParams,
              num_steps: int) -> tuple[MAMSState, MAMSParams]:
        self.burn_end = int(round(self.burn_in * num_steps))
        self.ends = warmup_phases(num_steps - self.burn_end, 0.3, 0.3, 0.4)
        self.step_size = DualAveraging(params.step_size, self.target_accept, gamma=self.gamma)
        self.burn_tuner = EnergyVarianceStepSize(params.step_size, self.dim, self.burn_in_energy_var)
        self.velocity: Tensor | None = None
        self.burnt_scale = False  # whether the burn-in set the preconditioner
        self.variance = ChainVariance()
        self.columns = tracked_columns(self.dim, state.position.device)
        self.draws: list[Tensor] = []
        self.distance = 0.0
        self.measured = False
        self.measured_steps: float | None = None
        return state, self._hold_short(params)

    def transition(self, sampler: MAMSSampler, t: int, state: MAMSState,
                   params: MAMSParams) -> tuple[MAMSState, MAMSInfo] | None:
        """Warm-up step ``t`` of the burn-in (phase 0): :data:`FIRST_STEPS` unadjusted MCLMC steps from
        ``state`` with the velocity the burn-in keeps; None after the burn-in (MAMS's own step).
        ``acceptance_rate`` is the share of the chain's steps that were finite (an unadjusted step keeps
        every finite point) and ``energy_error`` the root mean square of the steps' energy errors."""
        if t >= self.burn_end:
            return None
        burn = MCLMCSampler(sampler.value_and_grad, sampler.integrator, FIRST_STEPS)
        velocity = unit_normal(state.position) if self.velocity is None else self.velocity
        moved, info = burn.step(MCLMCState(state.position, velocity, state.value, state.grad),
                                MCLMCParams(params.step_size, math.sqrt(self.dim), params.scale))
        self.velocity = moved.velocity
        kept = (~info.diverging).to(state.value.dtype)
        return (MAMSState(moved.position, moved.value, moved.grad),
                MAMSInfo(kept, info.diverging, info.energy_error, params.step_size, info.n_steps))

    def update(self, sampler: MAMSSampler, t: int, state: MAMSState, info: MAMSInfo,
               params: MAMSParams) -> tuple[MAMSState, MAMSParams]:
        if t < self.burn_end:
            return state, self._burn_in_update(sampler, t, state, info, params)
        t = t - self.burn_end
        first, second, last = self.ends
        if self.adapt_step_size:
            step_size = self.step_size.update(acceptance_statistic(info.acceptance_rate, ~info.diverging))
            params = params._replace(step_size=step_size)
        if self.precondition and not self.burnt_scale and first // 2 <= t < first:
            self.variance.update(state.position)
        if t == first - 1 and not self.burnt_scale:
            params = self._precondition(sampler, state, params)
        if self.short and (first + second) // 2 <= t < second:
            self.draws.append(state.position[:, self.columns] / params.scale[self.columns])
            self.distance += info.n_steps * params.step_size
        if self.short and t == second - 1 and len(self.draws) >= 8:
            params = self._measure_L(params, torch.stack(self.draws), self.distance / len(self.draws))
            self.step_size.restart_average()
        if t == last - 1:
            params = self.finish(params)
        return state, self._hold_short(params)

    def _measure_L(self, params: MAMSParams, draws: Tensor, distance_per_draw: float) -> MAMSParams:
        """L from the recorded ``draws`` (preconditioned units) and the distance each moved
        (:func:`~bnnzoo.inference.adaptation.decoherence_length`), within one step and ``max_steps``."""
        length = decoherence_length(draws, distance_per_draw)
        self.measured_steps = length / params.step_size  # before the cap, for the run's note
        self.measured, self.draws, self.distance = True, [], 0.0
        return params._replace(L=min(max(length, params.step_size), self.max_steps * params.step_size))

    def _burn_in_update(self, sampler: MAMSSampler, t: int, state: MAMSState, info: MAMSInfo,
                        params: MAMSParams) -> MAMSParams:
        """The burn-in's step size toward ``burn_in_energy_var``; at its last step the velocity is
        dropped, the step size searched for in MAMS's units and dual averaging started from it."""
        if self.adapt_step_size:
            params = params._replace(step_size=self.burn_tuner.update(info.energy_error, ~info.diverging))
        if self.burn_end // 2 <= t:
            if self.precondition:
                self.variance.update(state.position)
            if self.short:
                self.draws.append(state.position[:, self.columns])
                self.distance += info.n_steps * params.step_size
        if t == self.burn_end - 1:
            self.velocity = None
            self.burnt_scale = self.precondition and self.variance.n > 1
            params = self._precondition(sampler, state, params)
            if self.short and len(self.draws) >= 8:
                params = self._measure_L(params, torch.stack(self.draws) / params.scale[self.columns],
                                         self.distance / len(self.draws) / float(params.scale.square().mean().sqrt()))
        return self._hold_short(params)

    def finish(self, params: MAMSParams, sampler=None, state=None) -> MAMSParams:
        """End warm-up after the step just made (the last of phase 3, or an earlier one where a
        gradient budget ends warm-up): the step size freezes at dual averaging's averaged iterate
        (within the burn-in: the step size the first search found, as dual averaging has not started);
        an L not yet measured stays at :data:`FIRST_STEPS` steps."""
        if self.adapt_step_size:
            params = params._replace(step_size=self.step_size.final_step_size)
        return self._hold_short(params)

    def _hold_short(self, params: MAMSParams) -> MAMSParams:
        """``params`` with L at :data:`FIRST_STEPS` steps while L is not yet measured."""
        return params._replace(L=FIRST_STEPS * params.step_size) if self.short else params

    def _precondition(self, sampler: MAMSSampler, state: MAMSState, params: MAMSParams) -> MAMSParams:
        """The preconditioner from the chains' own variances (if any); the step size, whose units it
        changes, is searched for afresh and dual averaging starts over from it."""
        if self.variance.n > 1:
            scale = within_chain_variance(self.variance).sqrt().to(params.scale.dtype)
            if bool(torch.isfinite(scale).all() and (scale > 0).all()):
                params = params._replace(scale=scale)
        self.variance = ChainVariance()
        if self.adapt_step_size:
            params = params._replace(step_size=search_step_size(sampler, state, params))
            self.step_size.restart(params.step_size)
        return params


@dataclass(frozen=True)
class MAMSOptions(BaseOptions):
    """Options of :class:`MAMS`."""

    integrator: str = option("mclachlan", "isokinetic integrator: 'mclachlan' (two-stage minimal norm, 2 "
                             "gradients a step) or 'leapfrog' (1)", choice(*INTEGRATORS))
    step_size: float | None = option(None, "first step size, preconditioned units (None: found by a "
                                     "doubling/halving search at the first point)", optional(positive))
    L: float | None = option(None, "mean trajectory length, preconditioned units (None: measured in warm-up; "
                             "sqrt(d) without warm-up)", optional(positive))
    target_accept: float = option(0.9, "target acceptance of the step size's dual averaging", fraction)
    max_steps: int = option(1024, "most integrator steps of one trajectory", integer(1))
    jitter: bool = option(True, "draw each trajectory's steps uniformly with mean L / step_size", flag)
    adapt_step_size: bool = option(True, "tune the step size by dual averaging during warm-up", flag)
    adapt_L: bool = option(True, "tune L from the warm-up draws' autocorrelation", flag)
    diagonal_preconditioning: bool = option(True, "scale each coordinate by its warm-up standard deviation", flag)
    burn_in: float = option(0.0, "share of the warm-up steps run first as unadjusted MCLMC (the velocity kept "
                            "over L = sqrt(d), 8 integrator steps a warm-up step): carries chains started far from "
                            "the typical set, such as a deep-ensemble member's, there before MAMS's tuning; 0: none",
                            interval(0.0, 1.0))
    burn_in_energy_var: float = option(0.1, "the burn-in's target variance of the energy error per dimension "
                                       "(larger: longer steps; the burn-in's draws are not kept)", positive)


class MAMS(Microcanonical):
    r"""The Metropolis-adjusted microcanonical sampler for C chains as one batch (module docstring).

    .. math::
        u \sim U(S^{d-1}),\quad (x', u') = \Phi_\epsilon^n(x, u),\quad
        x \leftarrow x' \text{ with probability } \min(1, e^{-\Delta E}),\quad
        \Delta E = \textstyle\sum \Delta K + U(x') - U(x)

    with :math:`\Phi_\epsilon` one step of the isokinetic integrator and n jittered around
    :math:`L/\epsilon`. A NaN/inf energy, or an energy error above 1000, is a rejected
    divergence. Options: :class:`MAMSOptions`.

    Per-draw statistics: ``acceptance_rate``, ``diverging``, ``energy_error``, ``step_size``,
    ``n_steps`` (integrator steps of the trajectory), ``L`` and ``lp``.

    Examples
    --------
    >>> from bnnzoo.inference import MCMC, MAMS
    >>> mcmc = MCMC(MAMS(model), num_samples=1000, warmup_steps=1000, num_chains=8, chain_method="vectorized")
    >>> mcmc.run(x, y)
    """

    Options = MAMSOptions
    stat_names = ("acceptance_rate", "diverging", "energy_error", "step_size", "n_steps", "L", "lp")

    def notes(self) -> dict:
        """Besides the base's, ``trajectory_cap`` (:func:`trajectory_cap`) where the tuned L asks for
        trajectories longer than ``max_steps``."""
        notes = super().notes()
        if self.params is not None:
            words = trajectory_cap(self.params, self.options.max_steps, self.options.jitter,
                                   getattr(self.adaptation, "measured_steps", None))
            if words is not None:
                notes["trajectory_cap"] = words
        return notes

    def build(self, theta: Tensor):
        dim = self.potential.dim
        self.check_dimension(dim)
        opts = self.options
        body = functools.partial(mams_graph_body, value_and_grad=self.potential.value_and_grad,
                                 integrator=opts.integrator)
        sampler = MAMSSampler(self.potential.value_and_grad, opts.integrator, opts.max_steps, opts.jitter,
                              functools.partial(self.step_graph, body=body, what="mams step"))
        start = MAMSParams(math.sqrt(dim) / 4 if opts.step_size is None else opts.step_size,
                           math.sqrt(dim) if opts.L is None else opts.L, torch.ones(dim, **placement(self.potential)))
        if opts.step_size is None:
            start = start._replace(step_size=search_step_size(sampler, sampler.init(theta), start))
        adaptation = MAMSAdaptation(dim, opts.target_accept, opts.max_steps, opts.L, opts.adapt_step_size,
                                    opts.adapt_L, opts.diagonal_preconditioning, burn_in=opts.burn_in,
                                    burn_in_energy_var=opts.burn_in_energy_var)
        return sampler, adaptation, start
