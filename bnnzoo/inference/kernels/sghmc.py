"""SGHMC (engine ``"sghmc"``): stochastic gradient HMC in the SGD-with-momentum form."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ... import validation
from ..sgmcmc import sghmc_step, sghmc_variance_ratio
from ..options import option, positive
from .sgld import SGLD
from .sgmcmc import AUTO, SGLDOptions, auto_or

__all__ = ["NOISE_ESTIMATES", "SGHMC", "SGHMCOptions"]

Tensor = torch.Tensor
NOISE_ESTIMATES = ("running",)


def _noise_estimate(name: str, value) -> None:
    if isinstance(value, str):
        if value not in NOISE_ESTIMATES:
            raise ValueError(f"noise_estimate {value!r}: give a number in [0, friction) "
                             f"or one of {', '.join(NOISE_ESTIMATES)}")


@dataclass(frozen=True)
class SGHMCOptions(SGLDOptions):
    """Options of :class:`SGHMC`: :class:`SGLDOptions` plus friction and the noise estimate."""

    step_size: float | str = option(AUTO, "the learning rate eta_0 (epsilon^2 / m); auto: 2/lambda with the "
                                    "polynomial schedule, else 1/lambda; lambda the largest Hessian eigenvalue of "
                                    "the likelihood at the initial point", auto_or(positive))
    friction: float = option(0.1, "alpha in (0, 1] (1 - the momentum coefficient)",
                             lambda n, v: validation.in_interval(n, v, 0, 1, low_open=True, high_open=False))
    noise_estimate: float | str = option(
        0.0, "beta-hat in [0, friction): a constant, or 'running' (per-coordinate gradient variance)",
        _noise_estimate)
    noise_decay: float = option(0.01, "rate of the running noise estimate, in (0, 1]",
                                lambda n, v: validation.in_interval(n, v, 0, 1, low_open=True, high_open=False))

    def validate(self) -> None:
        super().validate()
        value = self.noise_estimate
        if not isinstance(value, str) and not (validation.is_real(value) and 0 <= value < self.friction):
            raise ValueError(f"noise_estimate must be in [0, friction={self.friction}), got {value!r}")


class SGHMC(SGLD):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), in the
    SGD-with-momentum form (:func:`sghmc_step`):

    .. math::
        v_{k+1} = (1-\alpha)v_k - \eta_k\nabla\tilde U(\theta_k) + N(0, 2(\alpha-\hat\beta)\eta_k/\tau_k),\quad
        \theta_{k+1} = \theta_k + v_{k+1}.

    The momentum starts from its stationary law :math:`N(0, \eta_1/\tau_1)` and is
    kept across draws.

    Options: :class:`SGHMCOptions` (``step_size`` is the learning rate :math:`\eta`).
    """

    Options = SGHMCOptions

    def _reset(self) -> None:
        super()._reset()
        self._grad_mean: Tensor | None = None
        self._grad_var: Tensor | None = None

    def _beta_hat(self, grad: Tensor, step_size: float) -> float | Tensor:
        if self.options.noise_estimate != "running":
            return float(self.options.noise_estimate)
        r = self.options.noise_decay
        if self._grad_mean is None:
            self._grad_mean, self._grad_var = grad.clone(), torch.zeros_like(grad)
        else:
            delta = grad - self._grad_mean
            self._grad_mean = self._grad_mean + r * delta
            self._grad_var = (1 - r) * (self._grad_var + r * delta * delta)
        return (0.5 * step_size * self._grad_var).clamp(max=self.options.friction)

    def initial_aux(self, theta, step_size, inverse_temperature):
        aux = math.sqrt(step_size / inverse_temperature) * torch.randn_like(theta)
        return aux if self._pruner is None else self._pruner.apply(aux)

    def variance_ratio(self, step_size, curvature, noise):
        # the injected noise as if beta-hat were 0 (a noise estimate removes what it expects the
        # minibatches to add)
        return sghmc_variance_ratio(step_size, self.options.friction, curvature, noise)

    def step(self, theta, aux, grad, step_size, inverse_temperature):
        beta_hat = self._beta_hat(grad, step_size)
        return sghmc_step(theta, aux, grad, step_size, self.options.friction, beta_hat, inverse_temperature)


