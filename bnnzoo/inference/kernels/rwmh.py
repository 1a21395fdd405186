"""Random-walk Metropolis, the baseline of paper 000, on the sampler core
(:mod:`~bnnzoo.inference.kernels.transition`): a state, a step, and the scale's warm-up composed
around them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..adaptation import DualAveraging
from ..options import flag, fraction, option, positive
from .base import BaseOptions, metropolis_accept
from .transition import TransitionKernel

__all__ = ["RWMHInfo", "RWMHOptions", "RWMHParams", "RWMHSampler", "RWMHState", "RandomWalkMH", "ScaleAdaptation",
           "random_walk_proposal"]

Tensor = torch.Tensor


def random_walk_proposal(theta: Tensor, scale: float, generator: torch.Generator | None = None) -> Tensor:
    r"""Gaussian random-walk proposal :math:`\theta' = \theta + s\,\xi,\ \xi \sim N(0, I)`."""
    noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
    return theta + scale * noise


class RWMHState(NamedTuple):
    """Chains ``[C, ...]``: the position and its :math:`U` (no gradient: ``grad`` is None)."""

    position: Tensor
    value: Tensor
    grad: Tensor | None = None


class RWMHParams(NamedTuple):
    """The proposal scale :math:`s`."""

    scale: float


class RWMHInfo(NamedTuple):
    """One draw's statistics: the acceptance probability, ``diverging`` (a NaN energy) and the scale
    (``step_size``)."""

    acceptance_rate: Tensor
    diverging: Tensor
    step_size: float


class RWMHSampler:
    """The random-walk Metropolis transition on a flat potential ``U`` (``[C, D] -> [C]``)."""

    def __init__(self, potential):
        self.potential = potential

    def init(self, position: Tensor) -> RWMHState:
        with torch.no_grad():
            return RWMHState(position, self.potential(position))

    def step(self, state: RWMHState, params: RWMHParams,
             generator: torch.Generator | None = None) -> tuple[RWMHState, RWMHInfo]:
        proposal = random_walk_proposal(state.position, params.scale, generator)
        with torch.no_grad():
            value_new = self.potential(proposal)
        accepted, prob, nan = metropolis_accept(state.value - value_new, generator)
        position = torch.where(accepted.unsqueeze(-1), proposal, state.position)
        value = torch.where(accepted, value_new, state.value)
        return RWMHState(position, value), RWMHInfo(prob, nan, float(params.scale))


class ScaleAdaptation:
    """Dual averaging of the scale toward ``target`` of the chains' mean acceptance; at the last
    warm-up step the scale freezes at the averaged iterate."""

    def __init__(self, target: float):
        self.target = target
        self.adapter: DualAveraging | None = None
        self.num_steps = 0

    def start(self, sampler, state, params: RWMHParams, num_steps: int):
        self.adapter, self.num_steps = DualAveraging(params.scale, self.target), num_steps
        return state, params

    def update(self, sampler, t: int, state, info: RWMHInfo, params: RWMHParams):
        self.adapter.update(float(info.acceptance_rate.mean()))
        if t == self.num_steps - 1:
            return state, self.finish(params)
        return state, RWMHParams(self.adapter.step_size)

    def finish(self, params: RWMHParams, sampler=None, state=None) -> RWMHParams:
        """End warm-up: the scale freezes at the averaged iterate."""
        return RWMHParams(self.adapter.final_step_size)


@dataclass(frozen=True)
class RWMHOptions(BaseOptions):
    """Options of :class:`RandomWalkMH`."""

    scale: float = option(0.05, "initial proposal standard deviation s", positive)
    target_accept: float = option(0.234, "target acceptance of the scale's adaptation", fraction)
    adapt_scale: bool = option(True, "adapt the scale by dual averaging during warm-up", flag)


class RandomWalkMH(TransitionKernel):
    r"""Random-walk Metropolis-Hastings on the unconstrained parameters.

    Proposal :math:`\theta' = \theta + s\,\xi`, accepted with probability
    :math:`\min(1, e^{U(\theta) - U(\theta')})`. During warm-up the scale
    :math:`s` is adapted by dual averaging toward ``target_accept``
    (0.234, the optimal rate for high-dimensional Gaussian targets; Roberts,
    Gelman and Gilks 1997), then frozen. Options: :class:`RWMHOptions`.

    Per-draw statistics: ``acceptance_rate``, ``diverging`` (a NaN energy),
    ``lp`` and ``step_size`` (the proposal scale).

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> mcmc = MCMC(RandomWalkMH(model, scale=0.05), num_samples=2000, warmup_steps=1000)
    >>> mcmc.run(x, y)
    """

    Options = RWMHOptions
    stat_names = ("acceptance_rate", "diverging", "lp", "step_size")

    def build(self, theta: Tensor):
        adaptation = ScaleAdaptation(self.options.target_accept) if self.options.adapt_scale else None
        return RWMHSampler(self.potential), adaptation, RWMHParams(self.options.scale)

    @property
    def scale(self) -> float:
        """The proposal scale now (the options' before the run)."""
        return self.options.scale if self.params is None else self.params.scale

    def tuned(self) -> dict:
        return {"step_size": self.params.scale}
