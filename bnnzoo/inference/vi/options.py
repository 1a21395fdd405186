"""Every option of a mean-field fit, checked on construction: :class:`VIOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ...validation import boolean, finite, fraction, integer, one_of, positive
from .elbo import ESTIMATORS, KL_MODES, check_kl_weighting, inverse_softplus
from .optim import optimizer_spec

SCHEDULES = ("adaptive", "exponential", "plateau", "constant")
PLATEAU_METRICS = ("split", "elbo")
INIT_LOCS = ("uniform", "kaiming")


@dataclass(frozen=True)
class VIOptions:
    """Every option of a mean-field fit, validated on construction (see :mod:`bnnzoo.inference.vi`).

    Parameters
    ----------
    num_steps : int
        Optimisation steps (an epoch is ``ceil(N / batch_size)`` steps): the most steps with
        ``schedule="adaptive"`` (which stops once the fit has settled), exactly that many otherwise.
    lr, scale_lr : float
        Learning rates of the means and of the rho's (``scale_lr=None``: ``lr``).
    optimizer, scale_optimizer : str or dict
        ``"adam"``, ``"sgd"``, ``"adabound"``... or ``{"kind": "sgd", "momentum": 0.9}``;
        ``scale_optimizer=None``: the same as ``optimizer``.
    schedule : {"adaptive", "exponential", "plateau", "constant"}
        ``adaptive`` (default): constant rates until the ELBO has settled (the window test
        of :func:`~bnnzoo.inference.vi.convergence.elbo_change`), at most until the last
        ``A = min(anneal_steps, num_steps // 2)`` steps; then a geometric decay to ``lr_decay`` times
        the start over A steps; the fit stops once the ELBO has settled and the guide is stationary
        (:mod:`~bnnzoo.inference.vi.convergence`), else searches again while steps are left.
        ``exponential``: both rates decay geometrically to ``lr_decay`` times their
        start over ``num_steps``. ``plateau``: ``ReduceLROnPlateau`` (``plateau_factor``,
        ``plateau_patience`` epochs) per group, stepped each epoch on the epoch's NLL
        (means) and KL (scales) (``plateau_metric="split"``) or on the -ELBO (``"elbo"``).
    lr_decay : float
        The factor the rates decay to at the end of an ``adaptive`` or ``exponential`` schedule.
    plateau_factor, plateau_patience, plateau_metric
        ``schedule="plateau"``: the rate factor per plateau, the epochs without improvement
        before a cut, and what is watched (``"split"``: NLL for the means and KL for the scales,
        or ``"elbo"``: the -ELBO for both).
    batch_size : int, optional
        Minibatch size; None: full batch.
    kl_weighting : {"uniform", "blundell", "none"} or float
        See :func:`kl_weights`.
    estimator : {"reparam", "stl", "score"}
        The gradient estimator: reparameterisation, sticking-the-landing, or score function.
    kl : {"auto", "analytic", "mc"}, optional
        None: ``"mc"`` for ``stl``, ``"auto"`` otherwise.
    num_particles : int
        Draws of theta per step.
    init_scale, init_rho : float
        Initial guide sd; ``init_rho`` (if given) sets ``sigma = softplus(init_rho)`` instead.
    init_radius : float
        Half-width of the uniform initial means (``init_loc="uniform"``).
    init_loc : {"uniform", "kaiming"}
        Initial means: uniform in ``(-init_radius, init_radius)``, or Kaiming-uniform
        ``U(+-sqrt(6 / fan_in))`` for layer weights, 0 for biases (BNN only).
    score_baseline : bool
        Use a baseline with the score-function estimator.
    anneal_steps : int
        ``schedule="adaptive"``: steps of the decay from ``lr`` to ``lr * lr_decay`` (at most half
        of ``num_steps``).
    window : int
        Steps per window of the convergence tests (rounded up to whole epochs): the ELBO has
        settled when the mean ELBO of the last window differs from that of the window before
        by at most ``tolerance`` standard errors; the guide is stationary when the mean of
        ``window`` fresh gradient estimates is zero within noise (:mod:`bnnzoo.inference.vi.convergence`).
    tolerance : float
        The bound of both tests: on the ELBO change in standard errors, and on the
        stationarity statistic (about N(0, 1) at a stationary point).
    """

    num_steps: int = 6000
    lr: float = 0.01
    scale_lr: float | None = None
    optimizer: Any = "adam"
    scale_optimizer: Any = None
    schedule: str = "adaptive"
    lr_decay: float = 0.001
    plateau_factor: float = 0.1
    plateau_patience: int = 1
    plateau_metric: str = "split"
    batch_size: int | None = None
    kl_weighting: Any = "uniform"
    estimator: str = "reparam"
    kl: str | None = None
    num_particles: int = 1
    init_scale: float = 0.05
    init_rho: float | None = None
    init_loc: str = "uniform"
    init_radius: float = 1.0
    score_baseline: bool = True
    anneal_steps: int = 3000
    window: int = 200
    tolerance: float = 3.0

    def __post_init__(self):
        for name in ("lr", "lr_decay", "init_scale", "init_radius", "tolerance"):
            positive(name, getattr(self, name))
        integer("anneal_steps", self.anneal_steps)
        integer("window", self.window, minimum=2)
        if self.scale_lr is not None:
            positive("scale_lr", self.scale_lr)
        integer("num_steps", self.num_steps)
        integer("num_particles", self.num_particles)
        if self.batch_size is not None:
            integer("batch_size", self.batch_size)
        integer("plateau_patience", self.plateau_patience, minimum=0)
        fraction("plateau_factor", self.plateau_factor)
        one_of("schedule", self.schedule, SCHEDULES)
        one_of("plateau_metric", self.plateau_metric, PLATEAU_METRICS)
        one_of("estimator", self.estimator, ESTIMATORS)
        one_of("init_loc", self.init_loc, INIT_LOCS)
        check_kl_weighting(self.kl_weighting)
        if self.kl is not None:
            one_of("kl", self.kl, KL_MODES)
        if self.estimator == "stl" and self.kl == "analytic":
            raise ValueError("estimator 'stl' acts on the Monte Carlo log q; with kl='analytic' it would equal "
                             "'reparam': use kl='mc' (the default for stl) or kl='auto'")
        if self.init_rho is not None:
            finite("init_rho", self.init_rho)
        boolean("score_baseline", self.score_baseline)
        optimizer_spec(self.optimizer, "optimizer")
        optimizer_spec(self.scale_optimizer if self.scale_optimizer is not None else self.optimizer,
                       "scale_optimizer")

    @property
    def kl_mode(self) -> str:
        """The KL mode in force (resolving ``kl=None``)."""
        return self.kl or ("mc" if self.estimator == "stl" else "auto")

    @property
    def initial_scale(self) -> float:
        if self.init_rho is None:
            return self.init_scale
        return F.softplus(torch.tensor(float(self.init_rho), device="cpu")).item()  # a number, on the host

    @property
    def initial_rho(self) -> float:
        return float(self.init_rho) if self.init_rho is not None else inverse_softplus(self.init_scale)

