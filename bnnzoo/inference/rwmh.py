"""Random-walk Metropolis: the baseline of paper 000."""

from __future__ import annotations

import torch

from .base import DualAveraging, FlatKernel, check_fraction_option, check_positive_option, metropolis_accept


def random_walk_proposal(theta: torch.Tensor, scale: float) -> torch.Tensor:
    r"""Gaussian random-walk proposal :math:`\theta' = \theta + s\,\xi,\ \xi \sim N(0, I)`."""
    return theta + scale * torch.randn_like(theta)


class RandomWalkMH(FlatKernel):
    r"""Random-walk Metropolis-Hastings on the unconstrained parameters.

    Proposal :math:`\theta' = \theta + s\,\xi`, accepted with probability
    :math:`\min(1, e^{U(\theta) - U(\theta')})`. During warm-up the scale
    :math:`s` is adapted by dual averaging toward ``target_accept``
    (0.234, the optimal rate for high-dimensional Gaussian targets; Roberts,
    Gelman and Gilks 1997), then frozen.

    Parameters
    ----------
    model, potential, num_chains, init_radius
        See :class:`~bnnzoo.inference.base.FlatKernel`.
    scale : float
        Initial proposal standard deviation.
    target_accept : float
    adapt_scale : bool

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> mcmc = MCMC(RandomWalkMH(model, scale=0.05), num_samples=2000, warmup_steps=1000)
    >>> mcmc.run(x, y)
    """

    stat_names = ("acceptance_rate", "diverging", "lp", "step_size")

    def __init__(self, model=None, potential=None, scale: float = 0.1, target_accept: float = 0.234,
                 adapt_scale: bool = True, num_chains: int = 1, init_radius: float = 1.0):
        check_positive_option("scale", scale)
        check_fraction_option("target_accept", target_accept)
        self.initial_scale = float(scale)
        self.target_accept = float(target_accept)
        self.adapt_scale = bool(adapt_scale)
        super().__init__(model, potential, num_chains, init_radius)

    def _reset(self) -> None:
        super()._reset()
        self.scale = self.initial_scale
        self._adapter = DualAveraging(self.initial_scale, self.target_accept)

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
                 "step_size": torch.full_like(prob, self.scale)}
        self._adapt(float(prob.mean()))
        return theta_new, stats

    def _adapt(self, accept_prob: float) -> None:
        if not (self.adapt_scale and self.in_warmup):
            return
        self._adapter.update(accept_prob)
        last_warmup_step = self._t == self._warmup_steps - 1
        self.scale = self._adapter.final_step_size if last_warmup_step else self._adapter.step_size
