"""The ``"svi"`` engine (temporary: registration moves to the engine layer)."""

from __future__ import annotations

from typing import Any

from ...results import Draws
from ..engines import engine
from ..potential import make_potential
from .fit import sample_mean_field
from .options import VIOptions


@engine("svi", kind="vi")
def svi(model, x, y, num_samples, warmup_steps, num_chains, progress, num_steps: int = 2000,
        lr: float = 0.01, lr_decay: float = 0.1, init_scale: float = 0.05, num_particles: int = 1,
        init_radius: float = 1.0, scale_lr: float | None = None, optimizer: Any = "adam",
        scale_optimizer: Any = None, schedule: str = "exponential", plateau_factor: float = 0.1,
        plateau_patience: int = 1, plateau_metric: str = "split", batch_size: int | None = None,
        kl_weighting: Any = "uniform", estimator: str = "reparam", kl: str | None = None,
        init_rho: float | None = None, init_loc: str = "uniform", score_baseline: bool = True) -> Draws:
    """Mean-field Normal variational inference; one independent fit per chain."""
    opts = VIOptions(num_steps=num_steps, lr=lr, scale_lr=scale_lr, optimizer=optimizer,
                     scale_optimizer=scale_optimizer, schedule=schedule, lr_decay=lr_decay,
                     plateau_factor=plateau_factor, plateau_patience=plateau_patience,
                     plateau_metric=plateau_metric, batch_size=batch_size, kl_weighting=kl_weighting,
                     estimator=estimator, kl=kl, num_particles=num_particles, init_scale=init_scale,
                     init_rho=init_rho, init_loc=init_loc, init_radius=init_radius, score_baseline=score_baseline)
    return sample_mean_field(make_potential(model, x, y), opts, num_samples, num_chains)
