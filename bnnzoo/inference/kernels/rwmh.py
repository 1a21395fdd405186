"""Random-walk Metropolis: the baseline of paper 000."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..adaptation import DualAveraging
from .base import BaseOptions, FlatKernel, metropolis_accept
from ..options import flag, fraction, option, positive

__all__ = ["RWMHOptions", "RandomWalkMH", "random_walk_proposal"]


def random_walk_proposal(theta: torch.Tensor, scale: float) -> torch.Tensor:
    r"""Gaussian random-walk proposal :math:`\theta' = \theta + s\,\xi,\ \xi \sim N(0, I)`."""
    return theta + scale * torch.randn_like(theta)


@dataclass(frozen=True)
class RWMHOptions(BaseOptions):
    """Options of :class:`RandomWalkMH`."""

    scale: float = option(0.05, "initial proposal standard deviation s", positive)
    target_accept: float = option(0.234, "target acceptance of the scale's adaptation", fraction)
    adapt_scale: bool = option(True, "adapt the scale by dual averaging during warm-up", flag)


class RandomWalkMH(FlatKernel):
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

    def _reset(self) -> None:
        super()._reset()
        self.scale = self.options.scale
        self._adapter = DualAveraging(self.options.scale, self.options.target_accept)

    def transition(self, theta):
        value = self.value(theta)
        proposal = random_walk_proposal(theta, self.scale)
        with torch.no_grad():
            value_new = self.potential(proposal)
        accepted, prob, nan = metropolis_accept(value - value_new)
        theta_new = torch.where(accepted.unsqueeze(-1), proposal, theta)
        value_out = torch.where(accepted, value_new, value)
        self.remember(theta_new, value_out)
        stats = {"acceptance_rate": prob, "diverging": nan, "lp": -value_out,
                 "step_size": float(self.scale)}
        self._adapt(float(prob.mean()))
        return theta_new, stats

    def _adapt(self, accept_prob: float) -> None:
        if not (self.options.adapt_scale and self.in_warmup):
            return
        self._adapter.update(accept_prob)
        last_warmup_step = self._t == self._warmup_steps - 1
        self.scale = self._adapter.final_step_size if last_warmup_step else self._adapter.step_size
