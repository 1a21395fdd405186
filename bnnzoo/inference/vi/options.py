"""Every option of a mean-field fit, checked on construction: :class:`VIOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ...validation import finite
from ..options import Options, choice, flag, fraction, integer, option, optional, positive
from .elbo import ESTIMATORS, KL_MODES, check_kl_weighting, inverse_softplus
from .optim import optimizer_spec

SCHEDULES = ("adaptive", "exponential", "plateau", "constant")
PLATEAU_METRICS = ("split", "elbo")
INIT_LOCS = ("uniform", "kaiming")


def _optimizer(name: str, value) -> None:
    if value is not None:
        optimizer_spec(value, name)


@dataclass(frozen=True)
class VIOptions(Options):
    """Every option of a mean-field fit, validated on construction (see :mod:`bnnzoo.inference.vi`): one
    :func:`~bnnzoo.inference.options.option` per field, as the kernels' options are, so ``bnnzoo list``,
    the CLI, TOML tables and the errors read the same declaration.

    The schedules: ``adaptive`` (default) keeps the rates constant until the ELBO has settled (the window
    test of :func:`~bnnzoo.inference.vi.convergence.elbo_change`), at most until the last
    ``A = min(anneal_steps, num_steps // 2)`` steps; then a geometric decay to ``lr_decay`` times the start
    over A steps; the fit stops once the ELBO has settled and the guide is stationary
    (:mod:`~bnnzoo.inference.vi.convergence`), else searches again while steps are left. ``exponential``:
    both rates decay geometrically to ``lr_decay`` times their start over ``num_steps``. ``plateau``:
    ``ReduceLROnPlateau`` (``plateau_factor``, ``plateau_patience`` epochs) per group, stepped each epoch on
    the epoch's NLL (means) and KL (scales) (``plateau_metric="split"``) or on the -ELBO (``"elbo"``).

    The convergence tests (:mod:`bnnzoo.inference.vi.convergence`): the ELBO has settled when the mean ELBO
    of the last ``window`` steps (rounded up to whole epochs) differs from that of the window before by at
    most ``tolerance`` standard errors; the guide is stationary when the mean of ``window`` fresh gradient
    estimates is zero within noise (the statistic is about N(0, 1) at a stationary point).
    """

    num_steps: int = option(6000, "optimisation steps (an epoch is ceil(N / batch_size) steps): the most with "
                            "schedule='adaptive', which stops once the fit has settled; exactly that many "
                            "otherwise", integer(1))
    lr: float = option(0.01, "learning rate of the means", positive)
    scale_lr: float | None = option(None, "learning rate of the rho's (None: lr)", optional(positive))
    optimizer: Any = option("adam", "'adam', 'sgd', 'adabound', ... or {'kind': 'sgd', 'momentum': 0.9}",
                            _optimizer)
    scale_optimizer: Any = option(None, "the rho's optimizer, as optimizer (None: the same as optimizer)",
                                  _optimizer)
    schedule: str = option("adaptive", "learning-rate schedule: 'adaptive', 'exponential', 'plateau' or "
                           "'constant' (VIOptions' docstring)", choice(*SCHEDULES))
    lr_decay: float = option(0.001, "the factor the rates decay to at the end of an adaptive or exponential "
                             "schedule", positive)
    plateau_factor: float = option(0.1, "schedule='plateau': the rate factor per plateau", fraction)
    plateau_patience: int = option(1, "schedule='plateau': epochs without improvement before a cut", integer(0))
    plateau_metric: str = option("split", "schedule='plateau': what is watched: 'split' (NLL for the means, KL "
                                 "for the scales) or 'elbo'", choice(*PLATEAU_METRICS))
    batch_size: int | None = option(None, "minibatch size; None: full batch", optional(integer(1)))
    kl_weighting: Any = option("uniform", "KL weight per minibatch: 'uniform', 'blundell', 'none' or a number "
                               "(kl_weights)", lambda name, value: check_kl_weighting(value))
    estimator: str = option("reparam", "gradient estimator: 'reparam' (reparameterisation), 'stl' "
                            "(sticking-the-landing) or 'score' (score function)", choice(*ESTIMATORS))
    kl: str | None = option(None, "'auto', 'analytic' or 'mc'; None: 'mc' for stl, 'auto' otherwise",
                            optional(choice(*KL_MODES)))
    num_particles: int = option(1, "draws of theta per step", integer(1))
    init_scale: float = option(0.05, "initial guide sd", positive)
    init_rho: float | None = option(None, "if given, the initial guide sd is softplus(init_rho) instead of "
                                    "init_scale", optional(finite))
    init_loc: str = option("uniform", "initial means: 'uniform' in (-init_radius, init_radius), or 'kaiming' "
                           "(U(+-sqrt(6 / fan_in)) for layer weights, 0 for biases; BNN only)", choice(*INIT_LOCS))
    init_radius: float = option(1.0, "half-width of the uniform initial means (init_loc='uniform')", positive)
    score_baseline: bool = option(True, "use a baseline with the score-function estimator", flag)
    anneal_steps: int = option(3000, "schedule='adaptive': steps of the decay from lr to lr * lr_decay (at most "
                               "half of num_steps)", integer(1))
    window: int = option(200, "steps per window of the convergence tests (rounded up to whole epochs)",
                         integer(2))
    tolerance: float = option(3.0, "the bound of both convergence tests: the ELBO change in standard errors, "
                              "and the stationarity statistic", positive)

    def validate(self) -> None:
        if self.estimator == "stl" and self.kl == "analytic":
            raise ValueError("estimator 'stl' acts on the Monte Carlo log q; with kl='analytic' it would equal "
                             "'reparam': use kl='mc' (the default for stl) or kl='auto'")

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

