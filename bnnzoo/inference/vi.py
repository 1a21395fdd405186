r"""Variational inference with a mean-field Normal guide on the flat unconstrained parameters.

The guide is :math:`q(\theta) = N(\mu, \operatorname{diag}(\sigma^2))`,
:math:`\sigma = \operatorname{softplus}(\rho)`, over the same unconstrained
vector the MCMC kernels sample (Pyro's ``AutoNormal`` family, written on the
flat potential so no Pyro trace runs per step). The loss is the negative ELBO,

.. math:: -\mathrm{ELBO} = E_q[U(\theta)] - H[q],\qquad H[q] = \sum_i \log\sigma_i + \tfrac{D}{2}(1 + \log 2\pi),

estimated with reparameterised draws :math:`\theta = \mu + \sigma \odot \epsilon`
(Kingma and Welling 2014), where ``U`` is the model's potential with its
Jacobian terms, so the ELBO is exact for constrained sites too.

Each "chain" is an independent fit from its own random start; its posterior
draws are iid draws from the fitted guide, exported exactly like MCMC draws (so
R-hat across chains measures how much the fits disagree).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .base import check_positive_option
from ..draws import Draws
from .engines import engine
from .potential import FlatPotential, initial_theta, make_potential


def _inverse_softplus(x: float) -> float:
    return x + math.log(-math.expm1(-x))


def fit_mean_field(potential: FlatPotential, num_steps: int, lr: float = 0.01, lr_decay: float = 0.1,
                   init_scale: float = 0.05, num_particles: int = 1, init_radius: float = 1.0,
                   ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Fit the mean-field guide by Adam on the reparameterised negative ELBO,
    the learning rate decaying geometrically to ``lr * lr_decay`` at the last
    step (so the final iterate settles instead of jittering at the optimum).

    A step whose loss or gradient is not finite (a NaN energy at a draw) is
    skipped: no update, its loss recorded as NaN.

    Returns ``(loc, scale, losses)``: the guide's parameters ``[D]`` and the
    negative ELBO estimate of every step.
    """
    loc = initial_theta(potential, 1, init_radius)[0].clone().requires_grad_(True)
    rho = torch.full_like(loc, _inverse_softplus(init_scale)).requires_grad_(True)
    optim = torch.optim.Adam([loc, rho], lr=lr)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optim, gamma=lr_decay ** (1.0 / num_steps))
    entropy_const = 0.5 * potential.dim * (1 + math.log(2 * math.pi))
    losses = np.empty(num_steps)
    for step in range(num_steps):
        scale = F.softplus(rho)
        theta = loc + scale * torch.randn(num_particles, potential.dim, dtype=loc.dtype)
        loss = potential(theta).mean() - scale.log().sum() - entropy_const
        optim.zero_grad()
        loss.backward()
        finite = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p.grad).all()) for p in (loc, rho))
        if finite:
            optim.step()
        schedule.step()
        losses[step] = float(loss.detach()) if finite else math.nan
    return loc.detach(), F.softplus(rho).detach(), losses


@engine("svi", kind="vi")
def svi(model, x, y, num_samples, warmup_steps, num_chains, progress, num_steps: int = 2000,
        lr: float = 0.01, lr_decay: float = 0.1, init_scale: float = 0.05, num_particles: int = 1,
        init_radius: float = 1.0) -> Draws:
    """Mean-field Normal variational inference; one independent fit per chain."""
    for name, value in (("lr", lr), ("lr_decay", lr_decay), ("init_scale", init_scale),
                        ("init_radius", init_radius)):
        check_positive_option(name, value)
    for name, value in (("num_steps", num_steps), ("num_particles", num_particles)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    potential = make_potential(model, x, y)
    thetas, losses = [], []
    for _ in range(num_chains):
        loc, scale, loss = fit_mean_field(potential, num_steps, lr, lr_decay, init_scale, num_particles,
                                          init_radius)
        thetas.append(loc + scale * torch.randn(num_samples, potential.dim, dtype=loc.dtype))
        losses.append(loss)
    theta = torch.stack(thetas)  # [chain, draw, D]
    with torch.no_grad():
        samples = {k: v.numpy() for k, v in potential.constrain(theta).items()}
        lp = -potential(theta.reshape(-1, potential.dim)).reshape(num_chains, num_samples).numpy()
    losses = np.stack(losses)
    return Draws(samples, {"lp": lp}, extras={"loss": losses, "skipped_steps": np.isnan(losses).sum(1)})
