r"""MCLMC: unadjusted microcanonical Langevin Monte Carlo (Robnik, De Luca, Silverstein and Seljak 2023).

Each draw is one step of isokinetic dynamics (:mod:`~bnnzoo.inference.isokinetic`) followed by
a partial refresh of the unit velocity over the decoherence length :math:`L`. There is no
accept/reject: the stationary distribution is the target up to an integration bias that the
step size controls, through the energy error's variance per dimension (``desired_energy_var``).
Warm-up (:class:`MCLMCAdaptation`) tunes the step size to that variance, a diagonal
preconditioner from the chains' variances, and :math:`L` from the effective sample size of the
warm-up draws (the scheme of BlackJAX's ``mclmc_find_L_and_step_size``). The rules are in
``docs/algorithms.md`` ("Microcanonical samplers").

**References**

* Robnik, J., De Luca, G. B., Silverstein, E. and Seljak, U. (2023). Microcanonical Hamiltonian
  Monte Carlo. JMLR 24.
* Robnik, J. and Seljak, U. (2024). Fluctuation without dissipation: microcanonical Langevin Monte
  Carlo. Proceedings of the 6th Symposium on Advances in Approximate Bayesian Inference.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from ..adaptation import (ChainEnergyVarianceStepSize, ChainVariance, EnergyVarianceStepSize,
                          chain_decoherence_lengths, decoherence_length, within_chain_variance)
from ..isokinetic import (INTEGRATORS, GRADIENTS_PER_STEP, Phase, integrate_amounts, refresh_weights, refresh_with,
                          substep_amounts, unit_normal)
from ..options import choice, flag, integer, option, optional, positive
from ..potential import placement
from ..runtime import LeapfrogRuntime
from .base import BaseOptions
from .transition import TransitionKernel

__all__ = ["MCLMC", "MCLMCAdaptation", "MCLMCInfo", "MCLMCOptions", "MCLMCParams", "MCLMCSampler", "MCLMCState",
           "Microcanonical", "tracked_columns", "warmup_phases"]

Tensor = torch.Tensor
#: at most this many coordinates (evenly spaced) enter the effective sample size that sets L
ESS_COLUMNS = 1024


class MCLMCState(NamedTuple):
    """Chains ``[C, ...]``: position, unit velocity (preconditioned coordinates), :math:`U` and :math:`\\nabla U`."""

    position: Tensor
    velocity: Tensor
    value: Tensor
    grad: Tensor


class MCLMCParams(NamedTuple):
    """What warm-up tunes: the step size, the decoherence length L (both in preconditioned units;
    numbers, or ``[C]`` float64 tensors on the host with ``pool_chains=False``) and the
    preconditioner's scales ``[D]`` (the posterior standard deviations)."""

    step_size: float | Tensor
    L: float | Tensor
    scale: Tensor


class MCLMCInfo(NamedTuple):
    """One draw's statistics: ``diverging`` (a step that was not finite: the chain stayed), the
    ``energy_error`` (root mean square over the draw's steps; inf where one was not finite),
    ``step_size`` and ``n_steps`` (integrator steps)."""

    diverging: Tensor
    energy_error: Tensor
    step_size: float | Tensor
    n_steps: int


def on_chains(value, like: Tensor):
    """A number as it is; a ``[C]`` tensor of the host's numbers (one per chain) as ``[C, 1]`` on
    ``like``'s device and precision, rounded once there as a number is where it meets a tensor."""
    return value.to(device=like.device, dtype=like.dtype).reshape(-1, 1) if torch.is_tensor(value) else value


def as_buffer(values: list, like: Tensor) -> Tensor:
    """Numbers (or :func:`on_chains` tensors) as one tensor on ``like``'s device, for a graph's buffer."""
    if any(torch.is_tensor(v) for v in values):
        return torch.stack(values)
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def mclmc_update(state: MCLMCState, amounts, scale: Tensor, keep, noise, xi: Tensor, value_and_grad,
                 integrator: str) -> tuple[MCLMCState, Tensor, Tensor]:
    """One integrator step from ``state`` (its substeps' ``amounts``: :func:`~bnnzoo.inference.isokinetic.substep_amounts`)
    and the partial refresh with weights ``keep``, ``noise`` and normal draws ``xi``: the new state,
    the energy error and whether the step was finite (a chain whose step is not finite keeps its
    position and refreshes its old velocity reversed). Numbers or 0-dimensional tensors alike
    (the eager step and the captured graph run this same function)."""
    phase, kinetic = integrate_amounts(Phase(state.position, state.velocity, state.value, state.grad), amounts,
                                       scale, value_and_grad, integrator)
    error = kinetic + phase.value - state.value
    finite = torch.isfinite(error) & torch.isfinite(phase.x).all(-1) & torch.isfinite(phase.grad).all(-1)
    kept = finite.unsqueeze(-1)
    velocity = refresh_with(torch.where(kept, phase.u, -state.velocity), keep, noise, xi)
    return (MCLMCState(torch.where(kept, phase.x, state.position), velocity,
                       torch.where(finite, phase.value, state.value), torch.where(kept, phase.grad, state.grad)),
            error, finite)


def squared_error(error: Tensor, finite: Tensor) -> Tensor:
    """A step's squared energy error, inf where the step was not finite."""
    return torch.where(finite, error * error, torch.full_like(error, math.inf))


STATE = MCLMCState._fields


def mclmc_graph_body(buffers: dict, value_and_grad, integrator: str) -> Callable[[], None]:
    """One :func:`mclmc_update` on the buffers of a captured CUDA graph
    (:class:`~bnnzoo.inference.cuda_graphs.GraphedStep`): the state's four, ``amounts`` and ``refresh``
    (the step's numbers, filled on the host), ``xi`` (filled before each replay) and the running
    ``square`` and ``diverging``."""
    b = buffers
    amounts = [b["amounts"][i] for i in range(len(INTEGRATORS[integrator]))]

    def one_step() -> None:
        new, error, finite = mclmc_update(MCLMCState(*(b[name] for name in STATE)), amounts, b["scale"],
                                          b["refresh"][0], b["refresh"][1], b["xi"], value_and_grad, integrator)
        for name, value in zip(STATE, new):
            b[name].copy_(value)
        b["square"].copy_(b["square"] + squared_error(error, finite))
        b["diverging"].copy_(b["diverging"] | ~finite)

    return one_step


class MCLMCSampler:
    """The MCLMC transition on a flat potential (module docstring): ``init`` and ``step``; one step
    is ``steps`` integrator steps, each followed by the partial refresh (the draws kept are every
    ``steps``-th point of the chain). ``graph``: ``position -> GraphedStep | None`` (the kernel's
    runtime: a CUDA graph of :func:`mclmc_graph_body` where one applies), or None."""

    def __init__(self, value_and_grad, integrator: str = "mclachlan", steps: int = 1,
                 graph: Callable | None = None):
        self.value_and_grad, self.integrator, self.steps, self.graph = value_and_grad, integrator, steps, graph

    def init(self, position: Tensor, generator: torch.Generator | None = None) -> MCLMCState:
        value, grad = self.value_and_grad(position)
        return MCLMCState(position, unit_normal(position, generator), value, grad)

    def step(self, state: MCLMCState, params: MCLMCParams,
             generator: torch.Generator | None = None) -> tuple[MCLMCState, MCLMCInfo]:
        """``steps`` times: one integrator step, then the partial refresh; a chain whose step is not
        finite keeps its position (a counted divergence) and turns back: it refreshes its old
        velocity reversed. The energy error reported is the root mean square over the steps."""
        x = state.position
        amounts = [on_chains(a, x) for a in substep_amounts(params.step_size, x.shape[-1], self.integrator)]
        keep, noise = (on_chains(w, x) for w in refresh_weights(params.step_size, params.L, x.shape[-1]))
        square = torch.zeros_like(state.value)
        diverging = torch.zeros_like(state.value, dtype=torch.bool)
        graph = self.graph(x) if self.graph is not None else None
        if graph is not None:
            out = graph.run({**state._asdict(), "amounts": as_buffer(amounts, x), "refresh": as_buffer([keep, noise], x),
                             "scale": params.scale, "xi": torch.empty_like(state.position), "square": square,
                             "diverging": diverging}, self.steps,
                            before=lambda b: b["xi"].normal_(generator=generator))
            if out is not None:
                return (MCLMCState(*(out[name].clone() for name in STATE)),
                        MCLMCInfo(out["diverging"].clone(), (out["square"] / self.steps).sqrt(), params.step_size,
                                  self.steps))
        for _ in range(self.steps):
            xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
            state, error, finite = mclmc_update(state, amounts, params.scale, keep, noise, xi, self.value_and_grad,
                                                self.integrator)
            square = square + squared_error(error, finite)
            diverging = diverging | ~finite
        return state, MCLMCInfo(diverging, (square / self.steps).sqrt(), params.step_size, self.steps)


def warmup_phases(num_steps: int, *fractions: float) -> list[int]:
    """The ends of warm-up's phases: the cumulative ``fractions`` of ``num_steps``, as step counts."""
    ends, total = [], 0.0
    for fraction in fractions:
        total += fraction
        ends.append(int(round(total * num_steps)))
    return ends


def tracked_columns(dim: int, device: torch.device) -> Tensor:
    """At most :data:`ESS_COLUMNS` coordinates, evenly spaced, whose draws set L."""
    return torch.linspace(0, dim - 1, min(dim, ESS_COLUMNS), device=device).round().long().unique()


class MCLMCAdaptation:
    r"""MCLMC's warm-up, in four phases of the warm-up steps (each a share of them):

    1. (30%) the step size toward ``desired_energy_var``
       (:class:`~bnnzoo.inference.adaptation.EnergyVarianceStepSize`); with ``start_energy_var``
       the target moves linearly from it to ``desired_energy_var`` over phases 1 and 2 (MILE's
       schedule: a coarse step first, while the chains travel from their start);
    2. (30%) the same, while the chains' own variances are pooled
       (:func:`~bnnzoo.inference.adaptation.within_chain_variance`: the spread between chains in
       different modes left out); at its end their roots become the preconditioner's scales and
       :math:`L = \sqrt{d}` (the preconditioned target has unit variances);
    3. (15%) the step size again, under the new preconditioner;
    4. (25%) the parameters fixed while up to 1024 coordinates are recorded; at the end
       :math:`L = 0.4\,k\epsilon\,\overline{\tau}` from their integrated autocorrelation times (k the
       integrator steps per draw)
       (:func:`~bnnzoo.inference.adaptation.decoherence_length`).

    What is switched off by the options keeps its value. With ``pool_chains=False`` each chain tunes
    its own step size (:class:`~bnnzoo.inference.adaptation.ChainEnergyVarianceStepSize`) and L (from
    its own draws, :func:`~bnnzoo.inference.adaptation.chain_decoherence_lengths`), as MILE's code
    tunes each chain; the preconditioner stays one for all. All state is plain numbers and tensors.
    """

    def __init__(self, dim: int, desired_energy_var: float, adapt_step_size: bool = True, adapt_L: bool = True,
                 precondition: bool = True, start_energy_var: float | None = None, pool_chains: bool = True):
        self.dim, self.desired_energy_var = int(dim), float(desired_energy_var)
        self.adapt_step_size, self.adapt_L, self.precondition = adapt_step_size, adapt_L, precondition
        self.start_energy_var = None if start_energy_var is None else float(start_energy_var)
        self.pool_chains = pool_chains

    def step_size_tuner(self, step_size, num_chains: int, target: float):
        """The step-size tuner: one for all chains, or one per chain (``pool_chains=False``)."""
        if self.pool_chains:
            return EnergyVarianceStepSize(step_size, self.dim, target)
        return ChainEnergyVarianceStepSize(step_size, num_chains, self.dim, target)

    def energy_var_target(self, t: int) -> float:
        """The step-size tuner's target at warm-up step ``t``: ``desired_energy_var``, or with
        ``start_energy_var`` the straight line from it to ``desired_energy_var`` over phases 1 and 2."""
        second = self.ends[1]
        if self.start_energy_var is None or t >= second:
            return self.desired_energy_var
        return self.start_energy_var + (self.desired_energy_var - self.start_energy_var) * t / second

    def start(self, sampler: MCLMCSampler, state: MCLMCState, params: MCLMCParams,
              num_steps: int) -> tuple[MCLMCState, MCLMCParams]:
        self.ends = warmup_phases(num_steps, 0.3, 0.3, 0.15, 0.25)
        self.num_chains = state.position.shape[0]
        self.tuner = self.step_size_tuner(params.step_size, self.num_chains, self.energy_var_target(0))
        if not self.pool_chains:  # one step size per chain from the first step on
            params = params._replace(step_size=self.tuner.step_size)
        self.variance = ChainVariance()
        self.columns = tracked_columns(self.dim, state.position.device)
        self.draws: list[Tensor] = []
        return state, params

    def update(self, sampler: MCLMCSampler, t: int, state: MCLMCState, info: MCLMCInfo,
               params: MCLMCParams) -> tuple[MCLMCState, MCLMCParams]:
        first, second, third, _ = self.ends
        if self.adapt_step_size and t < third:
            self.tuner.target = self.energy_var_target(t)
            params = params._replace(step_size=self.tuner.update(info.energy_error, ~info.diverging))
        if self.precondition and first <= t < second:
            self.variance.update(state.position)
        if t == second - 1 and self.variance.n > 1:
            params = self._precondition(params)
        if self.adapt_L and t >= third:
            self.draws.append(state.position[:, self.columns] / params.scale[self.columns])
            self.distance = info.n_steps * params.step_size
            if t == self.ends[-1] - 1:
                params = self.finish(params)
        return state, params

    def finish(self, params: MCLMCParams, sampler=None, state=None) -> MCLMCParams:
        """End warm-up after the step just made: L from the coordinates recorded in phase 4, where
        there are at least 8 draws of them; everything else keeps its value (a gradient budget may end
        warm-up before phase 4, or within it)."""
        if self.adapt_L and len(self.draws) >= 8:
            draws = torch.stack(self.draws)
            params = params._replace(L=decoherence_length(draws, self.distance) if not torch.is_tensor(self.distance)
                                     else chain_decoherence_lengths(draws, self.distance))
        self.draws = []
        return params

    def _precondition(self, params: MCLMCParams) -> MCLMCParams:
        """The preconditioner from the chains' own variances; L the root of the summed variances in its units."""
        scale = within_chain_variance(self.variance).sqrt().to(params.scale.dtype)
        self.variance = ChainVariance()
        if not bool(torch.isfinite(scale).all() and (scale > 0).all()):
            return params
        params = params._replace(scale=scale)
        if self.adapt_L:
            params = params._replace(L=math.sqrt(self.dim))
        self.tuner = self.step_size_tuner(params.step_size, self.num_chains, self.desired_energy_var)
        return params


@dataclass(frozen=True)
class MCLMCOptions(BaseOptions):
    """Options of :class:`MCLMC`."""

    integrator: str = option("mclachlan", "isokinetic integrator: 'mclachlan' (two-stage minimal norm, 2 "
                             "gradients a step) or 'leapfrog' (1)", choice(*INTEGRATORS))
    step_size: float | None = option(None, "first step size, preconditioned units (None: sqrt(d) / 4)",
                                     optional(positive))
    L: float | None = option(None, "momentum decoherence length, preconditioned units (None: sqrt(d))",
                             optional(positive))
    desired_energy_var: float = option(5e-4, "target variance of the energy error per dimension; the step "
                                       "size is tuned to it (smaller: less bias, more steps)", positive)
    start_energy_var: float | None = option(None, "warm-up's first target of the energy error's variance; the "
                                            "target moves from it to desired_energy_var over the first 60% of "
                                            "warm-up (None: desired_energy_var throughout)", optional(positive))
    adapt_step_size: bool = option(True, "tune the step size to desired_energy_var during warm-up", flag)
    adapt_L: bool = option(True, "tune L from the warm-up draws' effective sample size", flag)
    diagonal_preconditioning: bool = option(True, "scale each coordinate by its warm-up standard deviation", flag)
    steps_per_draw: int = option(1, "integrator steps per draw (thinning: the draws kept are every k-th point; "
                                 "warm-up counts draws too)", integer(1))
    pool_chains: bool = option(True, "warm-up pooled over chains: one step size (on the chains' mean energy "
                               "error) and one L; False: each chain tunes its own, as MILE's code does", flag)


class Microcanonical(TransitionKernel):
    """What the microcanonical kernels share on the core: the dimension check, the ``L`` statistic,
    the tuned parameters (``params``: a step size, L and the preconditioner's ``scale``) and the
    execution layer (``runtime``: a :class:`~bnnzoo.inference.runtime.LeapfrogRuntime` holding the
    run's ``compile="auto"`` policy, which counts each transition's gradients and switches the
    potential's ``value_and_grad`` to its compiled graph once the rest of the run pays it back)."""

    #: what the ``compile="auto"`` policy counts (its note's word)
    gradient_unit = "gradients"

    def _reset(self) -> None:
        super()._reset()
        runtime = getattr(self, "runtime", None)
        self.runtime = runtime.fresh() if runtime is not None else LeapfrogRuntime()

    def observe(self, state, info) -> None:
        """The transition's gradients (integrator steps x gradients a step) for ``compile="auto"``."""
        self.runtime.observe(int(info.n_steps) * GRADIENTS_PER_STEP[self.options.integrator], state.position)

    @classmethod
    def check_dimension(cls, dim: int) -> None:
        """The isokinetic velocity lives on a sphere of d - 1 dimensions: refuse d < 2."""
        if dim < 2:
            raise ValueError(f"{cls.__name__}: the model has {dim} unconstrained parameter(s); the "
                             "microcanonical samplers need at least 2")

    def check_potential(self, potential) -> None:
        self.check_dimension(potential.dim)

    def extra_stats(self) -> dict:
        L = self.params.L
        return {"L": L if torch.is_tensor(L) else float(L)}

    def notes(self) -> dict:
        """``gradients_per_step``: what an integrator step (an ``n_steps`` unit) costs in gradients."""
        return {**super().notes(), **self.runtime.notes(),
                "gradients_per_step": GRADIENTS_PER_STEP[self.options.integrator]}

    def step_graph(self, theta: Tensor, body: Callable, what: str):
        """The runtime's CUDA graph of ``body`` for chains at ``theta`` (None where none applies)."""
        return self.runtime.step_graph(self.potential, theta, body, what)

    def tuned(self) -> dict:
        """Step size, L and ``inverse_mass_matrix``: the preconditioner's variances ``scale**2``."""
        def host(v):
            return v.numpy() if torch.is_tensor(v) else v

        return {"step_size": host(self.params.step_size), "L": host(self.params.L),
                "inverse_mass_matrix": (self.params.scale ** 2).cpu().numpy()}


class MCLMC(Microcanonical):
    r"""Unadjusted microcanonical Langevin Monte Carlo for C chains as one batch (module docstring).

    .. math::
        (x, u) \leftarrow \Phi_\epsilon(x, u),\qquad
        u \leftarrow \frac{c_1 u + c_2 \xi / \sqrt d}{|\cdot|},\ c_1 = e^{-\epsilon/L},\ c_2 = \sqrt{1 - c_1^2}

    with :math:`\Phi_\epsilon` one step of the isokinetic integrator. Every warm-up step tunes
    (:class:`MCLMCAdaptation`); afterwards the parameters are fixed. A step that is not finite
    is a counted divergence and the chain stays where it was. Options: :class:`MCLMCOptions`.

    Per-draw statistics: ``diverging``, ``energy_error``, ``step_size``, ``n_steps`` (integrator
    steps per draw: ``steps_per_draw``), ``L`` and ``lp``. The parameters after warm-up are in
    ``kernel.params`` and in ``diagnostics()`` (``step_size``, ``L``, ``inverse_mass_matrix``).

    Examples
    --------
    >>> from bnnzoo.inference import MCMC, MCLMC
    >>> mcmc = MCMC(MCLMC(model), num_samples=2000, warmup_steps=1000, num_chains=8, chain_method="vectorized")
    >>> mcmc.run(x, y)
    """

    Options = MCLMCOptions
    stat_names = ("diverging", "energy_error", "step_size", "n_steps", "L", "lp")

    def build(self, theta: Tensor):
        dim = self.potential.dim
        self.check_dimension(dim)
        opts = self.options
        body = functools.partial(mclmc_graph_body, value_and_grad=self.potential.value_and_grad,
                                 integrator=opts.integrator)
        sampler = MCLMCSampler(self.potential.value_and_grad, opts.integrator, opts.steps_per_draw,
                               functools.partial(self.step_graph, body=body, what="mclmc step"))
        start = MCLMCParams(opts.step_size if opts.step_size is not None else math.sqrt(dim) / 4,
                            opts.L if opts.L is not None else math.sqrt(dim),
                            torch.ones(dim, **placement(self.potential)))
        adaptation = MCLMCAdaptation(dim, opts.desired_energy_var, opts.adapt_step_size, opts.adapt_L,
                                     opts.diagonal_preconditioning, opts.start_energy_var, opts.pool_chains)
        return sampler, adaptation, start
