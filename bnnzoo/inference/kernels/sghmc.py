"""SGHMC (engine ``"sghmc"``): stochastic gradient HMC in the SGD-with-momentum form."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ... import validation
from ..sgmcmc import sghmc_step, sghmc_variance_ratio
from ..options import option, positive
from .sgmcmc import AUTO, Dynamics, SGLDOptions, SGMCMCKernel, SGParts, auto_or

__all__ = ["NOISE_ESTIMATES", "NoiseEstimate", "SGHMC", "SGHMCDynamics", "SGHMCOptions"]

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


class NoiseEstimate(NamedTuple):
    """The running per-coordinate mean and variance of the gradient, ``[C, D]`` each."""

    mean: Tensor
    variance: Tensor


class SGHMCDynamics(Dynamics):
    r"""SGHMC's update in the SGD-with-momentum form (:func:`sghmc_step`), the momentum its
    auxiliary variable:

    .. math::
        v_{k+1} = (1-\alpha)v_k - \eta_k\nabla\tilde U(\theta_k) + N(0, 2(\alpha-\hat\beta)\eta_k/\tau_k),\quad
        \theta_{k+1} = \theta_k + v_{k+1},

    the momentum starting from its stationary law :math:`N(0, \eta_1/\tau_1)`. :math:`\hat\beta` is a
    constant, or with ``noise_estimate="running"`` half the step size times a running
    per-coordinate variance of the gradient (rate ``noise_decay``; a :class:`NoiseEstimate`, the
    dynamics' own state), at most the friction."""

    def __init__(self, friction: float, noise_estimate: float | str, noise_decay: float):
        self.friction = friction
        self.noise_estimate = noise_estimate
        self.noise_decay = noise_decay

    @classmethod
    def from_options(cls, options: SGHMCOptions) -> "SGHMCDynamics":
        return cls(options.friction, options.noise_estimate, options.noise_decay)

    def beta_hat(self, grad: Tensor, step_size: float,
                 estimate: NoiseEstimate | None) -> tuple[float | Tensor, NoiseEstimate | None]:
        r""":math:`\hat\beta` and the running estimate after ``grad``."""
        if self.noise_estimate != "running":
            return float(self.noise_estimate), None
        r = self.noise_decay
        if estimate is None:
            estimate = NoiseEstimate(grad.clone(), torch.zeros_like(grad))
        else:
            delta = grad - estimate.mean
            estimate = NoiseEstimate(estimate.mean + r * delta, (1 - r) * (estimate.variance + r * delta * delta))
        return (0.5 * step_size * estimate.variance).clamp(max=self.friction), estimate

    def initial_aux(self, theta, step_size, inverse_temperature):
        return math.sqrt(step_size / inverse_temperature) * torch.randn_like(theta)

    def step(self, theta, aux, own, grad, step_size, inverse_temperature, components):
        beta_hat, own = self.beta_hat(grad, step_size, own)
        theta, momentum = sghmc_step(theta, aux, grad, step_size, self.friction, beta_hat, inverse_temperature)
        return theta, momentum, own

    def variance_ratio(self, step_size, curvature, noise):
        # the injected noise as if beta-hat were 0 (a noise estimate removes what it expects the
        # minibatches to add)
        return sghmc_variance_ratio(step_size, self.friction, curvature, noise)


class SGHMC(SGMCMCKernel):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), in the
    SGD-with-momentum form: the driver with :class:`SGHMCDynamics`,

    .. math::
        v_{k+1} = (1-\alpha)v_k - \eta_k\nabla\tilde U(\theta_k) + N(0, 2(\alpha-\hat\beta)\eta_k/\tau_k),\quad
        \theta_{k+1} = \theta_k + v_{k+1}.

    The momentum starts from its stationary law :math:`N(0, \eta_1/\tau_1)` and is
    kept across draws.

    Options: :class:`SGHMCOptions` (``step_size`` is the learning rate :math:`\eta`).
    """

    Options = SGHMCOptions

    def sg_parts(self) -> SGParts:
        return SGParts(SGHMCDynamics.from_options(self.options))
