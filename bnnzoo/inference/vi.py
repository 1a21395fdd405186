"""Stochastic variational inference with a mean-field Normal guide.

The guide is Pyro's ``AutoNormal``: an independent Normal on every
unconstrained latent value, scale ``init_scale`` at the start. Each "chain" is
an independent SVI fit from its own seed; its posterior draws are iid draws
from the fitted guide, exported exactly like MCMC draws (so R-hat across
chains measures how much the fits disagree).
"""

from __future__ import annotations

import numpy as np
import pyro
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import ClippedAdam

from .base import check_positive_option
from .draws import Draws
from .engines import engine
from .potential import make_potential


def fit_mean_field(model, x, y, num_steps: int, lr: float, init_scale: float,
                   num_particles: int = 1, lr_decay: float = 0.1) -> tuple[AutoNormal, np.ndarray]:
    """Fit a mean-field Normal guide by SVI with Adam, the learning rate decaying
    geometrically to ``lr * lr_decay`` at the last step (so the final iterate
    settles instead of jittering at the optimum). Returns the guide and the loss
    trace (negative ELBO per step)."""
    pyro.clear_param_store()
    guide = AutoNormal(model, init_scale=init_scale)
    optim = ClippedAdam({"lr": lr, "lrd": lr_decay ** (1.0 / num_steps)})
    svi = SVI(model, guide, optim, Trace_ELBO(num_particles=num_particles))
    losses = np.empty(num_steps)
    for step in range(num_steps):
        losses[step] = svi.step(x, y)
    return guide, losses


def guide_draws(guide, x, y, num_samples: int) -> dict[str, np.ndarray]:
    """``num_samples`` draws of every latent site from a fitted guide, constrained."""
    with torch.no_grad():
        rows = [guide(x, y) for _ in range(num_samples)]
    return {k: np.stack([r[k].detach().cpu().numpy() for r in rows]) for k in rows[0]}


@engine("svi", kind="vi")
def svi(model, x, y, num_samples, warmup_steps, num_chains, progress, num_steps: int = 2000,
        lr: float = 0.01, lr_decay: float = 0.1, init_scale: float = 0.05, num_particles: int = 1) -> Draws:
    """SVI with a mean-field Normal guide; one independent fit per chain."""
    check_positive_option("lr", lr)
    check_positive_option("init_scale", init_scale)
    check_positive_option("lr_decay", lr_decay)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
    potential = make_potential(model, x, y)
    chains, losses = [], []
    for _ in range(num_chains):
        guide, loss = fit_mean_field(model, x, y, num_steps, lr, init_scale, num_particles, lr_decay)
        chains.append(guide_draws(guide, x, y, num_samples))
        losses.append(loss)
    samples = {k: np.stack([c[k] for c in chains]) for k in potential.names}
    # lp of each draw on the same scale as the MCMC engines: -U(theta), unconstrained
    flat = {k: torch.as_tensor(v.reshape((-1,) + v.shape[2:])) for k, v in samples.items()}
    theta = potential.flatten({k: potential.transforms[k](v) for k, v in flat.items()}, batch_ndim=1)
    with torch.no_grad():
        lp = -potential(theta).reshape(num_chains, num_samples).numpy()
    return Draws(samples, {"lp": lp}, extras={"loss": np.stack(losses)})
