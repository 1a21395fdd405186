"""SGLD (engine ``"sgld"``): stochastic gradient Langevin dynamics on the SG-MCMC driver."""

from __future__ import annotations

from ..sgmcmc import sgld_step, sgld_variance_ratio
from .sgmcmc import Dynamics, SGLDOptions, SGMCMCKernel, SGParts

__all__ = ["LangevinDynamics", "SGLD"]


class LangevinDynamics(Dynamics):
    r"""The Langevin update (:func:`sgld_step`), no auxiliary state:

    .. math:: \theta_{k+1} = \theta_k - \epsilon_k\nabla\tilde U(\theta_k) + \sqrt{2\epsilon_k/\tau_k}\;\xi_k.
    """

    def step(self, theta, aux, own, grad, step_size, inverse_temperature, components):
        return sgld_step(theta, grad, step_size, inverse_temperature), None, None

    def variance_ratio(self, step_size, curvature, noise):
        return sgld_variance_ratio(step_size, curvature, noise)


class SGLD(SGMCMCKernel):
    r"""Stochastic gradient Langevin dynamics (Welling and Teh 2011): the driver with
    :class:`LangevinDynamics`,

    .. math:: \theta_{k+1} = \theta_k - \epsilon_k\nabla\tilde U(\theta_k) + \sqrt{2\epsilon_k/\tau_k}\;\xi_k.

    Options: :class:`SGLDOptions`.

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> kernel = SGLD(model, step_size=1e-4, batch_size=32, schedule="polynomial", thin=10)
    >>> MCMC(kernel, num_samples=1000, warmup_steps=2000).run(x, y)
    """

    Options = SGLDOptions

    def sg_parts(self) -> SGParts:
        return SGParts(LangevinDynamics())
