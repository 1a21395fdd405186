r"""Group spike-and-slab SGHMC (paper 004) as pure pieces: the update, the E-step, and a torch optimizer.

One step on weights :math:`w`, momenta :math:`m` and variational scales
:math:`\tau = \mathrm{sigmoid}(\rho)`, with :math:`g` the gradient of the *mean*
minibatch loss, :math:`C^2` the step size, :math:`T` the temperature, :math:`d` the
weight decay and :math:`\xi` the noise kept from the previous step
(:func:`group_sparse_sghmc_update`):

.. math::
    \rho &\leftarrow \rho - \eta\,\bigl[T^2C^3 d\,\tau + T C^{1.5}\,\xi g - 1/(\tau N)\bigr],\qquad
    \tau = \mathrm{sigmoid}(\rho),\\
    m &\leftarrow \beta_1 m - C^2\beta_2\,(g + d\,w) + \sqrt{2 + 2\beta_1^2}\;C^{1.5}\,T\,\xi',\\
    w &\leftarrow (w + \tau\,m)\odot\mathrm{mask}.

The E-step (:func:`e_step`) gives each group the spike decay below ``soft_threshold``
(else the slab decay) and prunes it for good below ``hard_threshold``.
:class:`GroupSparseOptions` holds the hyperparameters with the paper's defaults;
:class:`GroupSparseSGHMCOptimizer` is the same update for a ``torch.nn.Module``. The
kernel is :class:`bnnzoo.inference.kernels.group_sparse.GroupSparseSGHMC`; the rules are
in ``docs/algorithms.md`` ("Group spike-and-slab SGHMC").

References
----------
"On the optimization and pruning for Bayesian deep learning" (paper 004), Sec. 2.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import validation
from ..models.priors import group_dims
from .options import Options, integer, option, optional, positive
from .vi.optim import closure_loss

__all__ = ["GroupSparseOptions", "GroupSparseSGHMCOptimizer", "e_step", "em_due", "group_sparse_rules",
           "group_sparse_sghmc_update", "group_step_size_rule", "guarded_e_step", "no_signal_level",
           "pruned_score_test", "small_data_warning", "spike_patience", "threshold_rules"]

Tensor = torch.Tensor


def group_sparse_sghmc_update(weight: Tensor, momentum: Tensor, rho: Tensor, noise: Tensor, grad: Tensor,
                              decay: Tensor | float, step_size: float, temperature: float, num_data: int,
                              rho_lr: float = 0.1, beta1: float = 0.1, beta2: float = 1.0,
                              keep: Tensor | None = None, new_noise: Tensor | None = None):
    r"""One step of paper 004's SGHMC (module docstring), elementwise on tensors of any shape.

    Parameters
    ----------
    weight, momentum, rho : Tensor
        :math:`w`, :math:`m` and :math:`\rho` (:math:`\tau = \mathrm{sigmoid}(\rho)`).
    noise : Tensor
        :math:`\xi`, the noise drawn by the previous step.
    grad : Tensor
        :math:`g`, the gradient of the mean minibatch loss.
    decay : Tensor or float
        Weight decay :math:`d` per weight.
    step_size : float
        :math:`C^2` (the cyclical schedule's value).
    temperature, num_data : float, int
        T and N.
    rho_lr, beta1, beta2 : float
        :math:`\eta`, :math:`\beta_1`, :math:`\beta_2`.
    keep : Tensor of bool, optional
        The hard mask: where False the weight is set to 0 and ``momentum``, ``rho`` stay as they are.
    new_noise : Tensor, optional
        :math:`\xi'` (default: a fresh ``N(0, I)`` draw).

    Returns
    -------
    tuple of Tensor
        ``(weight', momentum', rho', noise')``.
    """
    scale = math.sqrt(step_size)
    tau = torch.sigmoid(rho)
    rho_new = rho - rho_lr * (temperature ** 2 * scale ** 3 * decay * tau
                              + temperature * scale ** 1.5 * noise * grad - 1.0 / (tau * num_data))
    if new_noise is None:
        new_noise = torch.randn_like(weight)
    momentum_new = (beta1 * momentum - step_size * beta2 * (grad + decay * weight)
                    + math.sqrt(2.0 + 2.0 * beta1 ** 2) * scale ** 1.5 * temperature * new_noise)
    weight_new = weight + torch.sigmoid(rho_new) * momentum_new
    if keep is not None:
        weight_new = torch.where(keep, weight_new, torch.zeros_like(weight_new))
        momentum_new = torch.where(keep, momentum_new, momentum)
        rho_new = torch.where(keep, rho_new, rho)
    return weight_new, momentum_new, rho_new, new_noise


def e_step(weight: Tensor, within: tuple[int, ...], keep: Tensor, soft_threshold: float, hard_threshold: float,
           slab_decay: float, spike_decay: float) -> tuple[Tensor, Tensor]:
    """The E-step on one weight tensor: each group's mean ``w^2`` (over the dims ``within``
    one group) picks its decay, ``spike_decay`` below ``soft_threshold`` else ``slab_decay``;
    groups below ``hard_threshold`` leave the hard mask ``keep`` for good (the unguarded rule:
    :func:`guarded_e_step` with a patience of one E-step).

    Returns ``(decay, keep)``, both shaped like ``weight``.
    """
    decay, keep, _ = guarded_e_step(weight, within, keep, torch.zeros_like(weight, dtype=torch.long),
                                    soft_threshold, hard_threshold, slab_decay, spike_decay, 1)
    return decay, keep


def guarded_e_step(weight: Tensor, within: tuple[int, ...], keep: Tensor, below: Tensor, soft_threshold: float,
                   hard_threshold: float, slab_decay: float, spike_decay: float,
                   patience: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`e_step` with the pruning guard: a group leaves the hard mask only once its mean
    ``w^2`` has been below ``hard_threshold`` at ``patience`` E-steps in a row. ``below`` counts,
    per weight (equal within a group), the E-steps in a row that found the group below it.

    Returns ``(decay, keep, below)``, each shaped like ``weight``.
    """
    power = weight.pow(2).mean(within, keepdim=True) if within else weight.pow(2)
    decay = torch.where(power < soft_threshold, spike_decay, slab_decay).to(weight.dtype).expand_as(weight)
    low = (power < hard_threshold).expand_as(weight)
    below = torch.where(low, below + 1, torch.zeros_like(below))
    return decay, keep & (below < patience), below


#: the data-scaled rules of :func:`group_sparse_rules` (``docs/algorithms.md``, "Data-scaled defaults")
CYCLE_EPOCHS, MIN_CYCLE_ITERATIONS = 50, 1000
EM_WARMUP_EPOCHS, MIN_EM_WARMUP_ITERATIONS = 50, 500
SOFT_FAN_IN, HARD_FAN_IN = 10.0, 1.0
SOFT_THRESHOLD, HARD_THRESHOLD = 1e-2, 1e-3
MIN_PATIENCE = 3
MAX_STEP = 0.1


def group_sparse_rules(epoch: int, em_every: int, step_size: float) -> dict:
    """The ``"auto"`` values of the group-sparse kernel (and optimizer) that do not depend on a layer:
    ``epoch`` the iterations per epoch ``ceil(N/B)``, ``em_every`` the iterations between E-steps,
    ``step_size`` :math:`C_0^2`.

    * ``cycle_length`` = max(50 epochs, 1000 iterations);
    * ``em_warmup`` = the E-step periods in max(50 epochs, 500 iterations), rounded up;
    * ``prune_patience`` = the E-steps in 1/C_0^2 iterations (the time a weight needs to move
      by its own size at the step size C_0^2), rounded up, at least 3.
    """
    warmup = max(EM_WARMUP_EPOCHS * epoch, MIN_EM_WARMUP_ITERATIONS)
    return {"cycle_length": int(max(CYCLE_EPOCHS * epoch, MIN_CYCLE_ITERATIONS)),
            "em_warmup": int(math.ceil(warmup / em_every)),
            "prune_patience": int(max(MIN_PATIENCE, math.ceil(1.0 / (step_size * em_every))))}


def group_step_size_rule(curvature: float) -> float:
    r""":math:`C_0^2` = min(0.1, 1/(4 :math:`\hat\lambda`)), :math:`\hat\lambda` the largest curvature of the *mean*
    minibatch loss at the initial point: the update moves a weight by about
    :math:`\tau C^2/(1-\beta_1) \approx 0.56\,C^2` times the gradient, stable below
    :math:`C^2 \approx 3.9/\hat\lambda`; a sixteenth of that, capped at paper 004's largest step (0.1, its
    classification; its regression's 0.01 is what the rule gives there)."""
    if not math.isfinite(curvature) or curvature <= 0:
        raise ValueError(f"step_size='auto': the curvature of the mean loss at the initial point is {curvature!r}, "
                         f"no step size follows from it; give step_size a number")
    return min(MAX_STEP, 1.0 / (4.0 * curvature))


def threshold_rules(fan_in: int, num_data: int | None = None, spike_decay: float | None = None) -> dict:
    r"""``soft_threshold`` and ``hard_threshold`` of a layer with ``fan_in`` inputs, ``num_data`` rows N and
    the spike decay :math:`d_0` (mean-loss units).

    * from the width: min(1e-2, 10/fan_in) and min(1e-3, 1/fan_in), paper 004's values (on standardised
      inputs, the mean w^2 of a group that moves a unit's input by a tenth / a thirtieth of its sd),
      lowered for a layer wider than 1000 inputs to 30 and 3 times the mean w^2, 1/(3 fan_in), of its
      fan-in initialisation, so that a fresh group is not below them by construction;
    * from the rows: the hard threshold is at least :math:`1/(2 N d_0)`, twice the largest mean w^2 a
      group with *no* signal keeps under the spike decay by fitting the noise of N rows (a weight whose
      mean loss has curvature h is fitted with variance 1/(N h) and shrunk by h/(h + d_0): w^2 about
      :math:`h/(N(h+d_0)^2) \le 1/(4 N d_0)`), the factor 2 leaving room for its thermal spread
      :math:`T'/(N(h+d_0))`, :math:`T' = \tau(1+\beta_1^2)C/(1-\beta_1)` the sampler's temperature relative to
      the posterior (about 0.05-0.1 at :math:`C_0^2 = 0.01`), and for the scatter of a group's mean. It matters
      below :math:`1/(2 d_0 \cdot 10^{-3})` rows (5000 at the default :math:`d_0 = 0.1`), where the paper's
      threshold lies inside the no-signal groups' range. The soft threshold is at least the hard one. The
      bound assumes more rows than inputs: with fewer, the network can fit the rows and groups with no signal
      grow past it (``docs/algorithms.md``, section 14).
    """
    soft, hard = min(SOFT_THRESHOLD, SOFT_FAN_IN / fan_in), min(HARD_THRESHOLD, HARD_FAN_IN / fan_in)
    if num_data is not None and spike_decay:
        hard = max(hard, no_signal_level(num_data, spike_decay))
    return {"soft_threshold": max(soft, hard), "hard_threshold": hard}


def spike_patience(step_size: float, spike_decay: float, em_every: int, cycle_length: int) -> int:
    r"""The E-steps in :math:`\min(1/(C_0^2 d_0),\ \text{cycle})` iterations: the time the spike decay
    :math:`d_0` needs to move a group by its own size at the step :math:`C_0^2`, so that a group judged against
    :func:`no_signal_level` has had the spike's pull before it is pruned, and at most one cycle (over which the
    step size takes all its values; ``prune_patience="auto"`` where that level sets the hard threshold)."""
    return int(math.ceil(min(1.0 / (step_size * spike_decay), cycle_length) / em_every))


def small_data_warning(kernel: str, site: str, fan_in: int, num_data: int, spike_decay: float,
                       patience_iterations: int) -> str | None:
    """The one-line warning for a grouped layer whose hard threshold :func:`threshold_rules` raises to
    :func:`no_signal_level` (too few rows for the paper's threshold), or None where it does not."""
    width = threshold_rules(fan_in)["hard_threshold"]
    level = no_signal_level(num_data, spike_decay)
    if level <= width:
        return None
    enough = math.ceil(1.0 / (2.0 * spike_decay * width))
    return (f"{kernel}: {site}: with N={num_data} rows and spike_decay={spike_decay:g} a group with no signal keeps a "
            f"mean w^2 up to {level:.2g} (1/(2 N spike_decay)) under the spike, above the layer's hard threshold "
            f"{width:g}; the threshold is raised to {level:.2g} and pruning waits {patience_iterations} iterations, "
            f"so an input whose group stays below {level:.2g} is pruned as noise (a weak effect can be lost); "
            f"from {enough} rows the layer's own threshold applies, or set hard_threshold to choose the trade-off")


def no_signal_level(num_data: int, spike_decay: float) -> float:
    """:math:`1/(2 N d_0)`: the mean w^2 below which a group under the spike decay :math:`d_0` cannot be told
    from one with no signal after N rows (:func:`threshold_rules`)."""
    return 1.0 / (2.0 * num_data * spike_decay)


#: row batches of the pruned groups' score test (:func:`pruned_score_test`), and its family-wise level
SCORE_BATCHES, SCORE_LEVEL = 64, 0.01


def pruned_score_test(batch_scores: Tensor) -> tuple[Tensor, Tensor]:
    r"""A score (Lagrange multiplier) test of pruned groups: does the data still pull a pruned group's
    weights away from zero?

    ``batch_scores`` ``[K, ..., p]``: for each of K disjoint batches of the training rows, the gradient of
    the batch's log likelihood with respect to a group's p weights, at a point where the group is pruned
    (held at zero). For an input with no effect on the response, the K batch sums are independent with mean
    zero (the input is independent of everything the rest of the network computes), so Hotelling's
    statistic :math:`T^2 = K\bar s^\top S^{+}\bar s` (:math:`\bar s` the mean, S the sample covariance of
    the batch sums, r its rank) gives :math:`\frac{K - r}{r (K - 1)} T^2 \sim F(r, K - r)`. An input with
    an effect that the pruning removed leaves residuals that move with it: every batch pulls the same way
    and the statistic is large. The covariance across the group's weights matters: a column's weights share
    one residual, so the per-weight statistics are correlated and their plain sum is not :math:`\chi^2_p`.

    Returns ``(statistic, p_value)``, each ``[...]``; a group whose batch sums are all zero (every unit it
    feeds dead) has statistic 0 and p-value 1. The rank is taken per group; a group needs K > r + 1.
    """
    from scipy.stats import f as f_distribution

    k = batch_scores.shape[0]
    s = batch_scores.to(torch.float64)
    mean = s.mean(0)
    centred = s - mean
    cov = torch.einsum("k...p,k...q->...pq", centred, centred) / (k - 1)
    inverse = torch.linalg.pinv(cov, hermitian=True)
    rank = torch.linalg.matrix_rank(cov, hermitian=True)
    t2 = k * torch.einsum("...p,...pq,...q->...", mean, inverse, mean)
    r = rank.clamp_min(1).to(torch.float64)
    ok = (rank > 0) & (rank < k - 1)
    f = torch.where(ok, (k - r) / (r * (k - 1)) * t2, torch.zeros_like(t2))
    p = f_distribution.sf(f.cpu().numpy(), r.cpu().numpy(), (k - r).clamp_min(1).cpu().numpy())
    return torch.where(ok, t2, torch.zeros_like(t2)), torch.where(ok, torch.as_tensor(p, device=t2.device), 1.0)


def em_due(iteration: int, every: int, warmup: int) -> bool:
    """True when iteration ``iteration`` (1, 2, ...) starts with an E-step: at the start
    of every ``every`` iterations, once ``warmup`` such periods have passed."""
    done = iteration - 1
    return done % every == 0 and done >= warmup * every


def _decay(name: str, value) -> None:
    if value != "prior" and not (validation.is_real(value) and value >= 0):
        raise ValueError(f"{name} must be a number >= 0 or 'prior', got {value!r}")


def _nonnegative(name: str, value) -> None:
    validation.at_least(name, value, 0)


def _interval(low_open: bool):
    return lambda name, value: validation.in_interval(name, value, 0, 1, low_open=low_open, high_open=False)


def _auto_or(check):
    return lambda name, value: None if value == "auto" else check(name, value)


def _em_every(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


@dataclass(frozen=True)
class GroupSparseOptions(Options):
    """Hyperparameters of the update and the E-step, with the paper's defaults;
    validated on construction (errors name the option and the value)."""

    momentum: float = option(0.1, "beta_1 in [0, 1]", _interval(False))
    grad_scale: float = option(1.0, "beta_2 in (0, 1]", _interval(True))
    rho_lr: float = option(0.1, "eta > 0, the step size of rho", positive)
    temperature: float | None = option(None, "T > 0 (None: N^-1/2)", optional(positive))
    decay: float | str = option(5e-4, "weight decay (>= 0, or 'prior') of the weights outside any group", _decay)
    slab_decay: float | str = option(5e-4, "weight decay (>= 0, or 'prior') of slab groups", _decay)
    spike_decay: float | str = option(0.1, "weight decay (>= 0, or 'prior') of spike groups", _decay)
    soft_threshold: float | str = option("auto", "E-step: a group with mean w^2 below this is in the spike; "
                                         "auto: min(1e-2, 10/fan_in) of the layer, at least the hard threshold",
                                         _auto_or(_nonnegative))
    hard_threshold: float | str = option("auto", "E-step: a group with mean w^2 below this (prune_patience E-steps "
                                         "in a row) is pruned for good; auto: min(1e-3, 1/fan_in) of the layer, "
                                         "at least 1/(2 N spike_decay) (the no-signal level of N rows)",
                                         _auto_or(_nonnegative))
    em_warmup: int | str = option("auto", "E-step periods (epochs by default) before the first E-step; auto: "
                                  "max(50 epochs, 500 iterations)", _auto_or(integer(0)))
    em_every: int | None = option(None, "iterations between E-steps (None: one epoch)", _em_every)
    init_momentum: float = option(1e-3, "initial momentum init_momentum * N(0, I)", _nonnegative)
    prune_patience: int | str = option("auto", "E-steps in a row below hard_threshold before a group is pruned; "
                                       "auto: those in 1/C_0^2 iterations, at least 3; where the hard threshold is "
                                       "the no-signal level, at least those in min(1/(C_0^2 spike_decay), a cycle)",
                                       _auto_or(integer(1)))

    def update(self, weight, momentum, rho, noise, grad, decay, step_size, temperature, num_data, keep=None):
        """:func:`group_sparse_sghmc_update` with these options."""
        return group_sparse_sghmc_update(weight, momentum, rho, noise, grad, decay, step_size, temperature,
                                         num_data, self.rho_lr, self.momentum, self.grad_scale, keep)

    def initial_state(self, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(momentum, rho, noise)`` before the first step: ``init_momentum * N(0, I)``,
        0 (:math:`\\tau = 1/2`) and ``N(0, I)``."""
        return self.init_momentum * torch.randn_like(weight), torch.zeros_like(weight), torch.randn_like(weight)


# ------------------------------------------------------------ the optimizer
_OPTION_NAMES = tuple(f.name for f in dataclasses.fields(GroupSparseOptions))


@functools.lru_cache(maxsize=64)
def _options(values: tuple) -> GroupSparseOptions:
    return GroupSparseOptions(**dict(zip(_OPTION_NAMES, values)))


class GroupSparseSGHMCOptimizer(torch.optim.Optimizer):
    """The same update (:func:`group_sparse_sghmc_update`, :func:`e_step`) as a
    ``torch.optim.Optimizer``, for a ``torch.nn.Module`` trained directly.

    The loss whose gradient ``step()`` uses is the *mean* minibatch loss (e.g.
    ``nn.MSELoss()``); ``lr`` is :math:`C^2`, so torch's schedulers give the cyclical
    cosine schedule (``CosineAnnealingWarmRestarts(optimizer, T_0=cycle_length)``).

    Parameters
    ----------
    params : iterable
        Parameters or parameter groups (dicts); every option below may be set per group.
    num_data : int
        N, the training set size.
    lr : float
        :math:`C^2` (paper: 0.01).
    group : str or tuple of int or None
        Groups of a weight: ``"auto"`` (input columns of a 2-D weight, kernels of a
        4-D one), ``"input"``, ``"output"``, ``"kernel"`` (as
        :class:`~bnnzoo.models.GroupSpikeAndSlab`), the dims within a group, or None
        (no groups: plain ``decay``, never pruned). 1-D parameters (biases) are never grouped.
    **options
        :class:`GroupSparseOptions` fields; ``decay``, ``slab_decay``, ``spike_decay``
        must be numbers here. With ``em_every`` (iterations, e.g. ``len(loader)``) the
        E-step runs by itself; without it call :meth:`e_step` at the start of an epoch.

    Examples
    --------
    >>> opt = GroupSparseSGHMCOptimizer([{"params": [net.fc1.weight], "group": "input"},
    ...                                  {"params": rest, "group": None}], num_data=N, em_every=len(loader))
    >>> loss = nn.functional.mse_loss(net(x), y); opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, num_data: int, lr: float = 1e-2, group: str | tuple | None = "auto", **options):
        if isinstance(num_data, bool) or not isinstance(num_data, (int, np.integer)) or num_data < 1:
            raise ValueError(f"num_data must be a positive integer, got {num_data!r}")
        defaults = dict(lr=lr, num_data=int(num_data), group=group,
                        **dataclasses.asdict(GroupSparseOptions(**options)))
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        validation.positive("lr", group["lr"])
        rule = self._rule(group)
        for name in ("decay", "slab_decay", "spike_decay"):
            if getattr(rule, name) == "prior":
                raise ValueError(f"{name}='prior': the optimizer knows no prior; give a number")
        for p in group["params"]:
            self._within(p, group["group"])  # a clear error for a grouping that does not fit

    @staticmethod
    def _rule(group: dict) -> GroupSparseOptions:
        """The group's options, built (and validated) once per distinct setting, not at every step."""
        return _options(tuple(group[name] for name in _OPTION_NAMES))

    @staticmethod
    def _within(p: Tensor, group) -> tuple[int, ...] | None:
        """The dims within one group of ``p`` (None: ungrouped)."""
        if group is None or p.dim() <= 1:
            return None
        return tuple(group) if not isinstance(group, str) else group_dims(tuple(p.shape), group)

    def _state(self, p: Tensor, rule: GroupSparseOptions, grouped: bool) -> dict:
        state = self.state[p]
        if not state:
            state["momentum"], state["rho"], state["noise"] = rule.initial_state(p)
            state["keep"] = torch.ones_like(p, dtype=torch.bool)
            state["decay"] = torch.full_like(p, float(rule.slab_decay if grouped else rule.decay))
            state["below"] = torch.zeros_like(p, dtype=torch.long)
            state["step"] = 0
        return state

    @staticmethod
    def _schedule(rule: GroupSparseOptions, lr: float, p: Tensor, num_data: int) -> tuple[int, int]:
        """``(em_warmup, prune_patience)`` of ``p``, their ``"auto"`` rules with an epoch of ``em_every`` steps
        (the patience spans :func:`spike_patience` where the hard threshold is :func:`no_signal_level`)."""
        every = rule.em_every
        auto = group_sparse_rules(every, every, lr) if every else {"em_warmup": 0, "prune_patience": MIN_PATIENCE}
        warmup = auto["em_warmup"] if rule.em_warmup == "auto" else rule.em_warmup
        patience = auto["prune_patience"] if rule.prune_patience == "auto" else rule.prune_patience
        width = math.prod(p.shape[1:])
        if (rule.prune_patience == "auto" and rule.hard_threshold == "auto" and every and rule.spike_decay
                and no_signal_level(num_data, rule.spike_decay) > threshold_rules(width)["hard_threshold"]):
            cycle = group_sparse_rules(every, every, lr)["cycle_length"]
            patience = max(patience, spike_patience(lr, rule.spike_decay, every, cycle))
        return warmup, patience

    @staticmethod
    def _thresholds(rule: GroupSparseOptions, p: Tensor, num_data: int) -> tuple[float, float]:
        """``(soft, hard)`` thresholds of ``p``; ``"auto"``: :func:`threshold_rules` of its fan-in, N and the
        spike decay."""
        auto = threshold_rules(math.prod(p.shape[1:]), num_data, rule.spike_decay)
        return tuple(auto[k] if getattr(rule, k) == "auto" else getattr(rule, k)
                     for k in ("soft_threshold", "hard_threshold"))

    def _e_step(self, p: Tensor, within, state: dict, rule: GroupSparseOptions, patience: int,
                num_data: int) -> None:
        soft, hard = self._thresholds(rule, p, num_data)
        state["decay"], state["keep"], state["below"] = guarded_e_step(
            p, within, state["keep"], state["below"], soft, hard, rule.slab_decay, rule.spike_decay, patience)

    @torch.no_grad()
    def e_step(self) -> None:
        """Re-decide every group's decay and prune the groups below ``hard_threshold``."""
        for group in self.param_groups:
            rule = self._rule(group)
            for p in group["params"]:
                within = self._within(p, group["group"])
                if within is None:
                    continue
                state = self._state(p, rule, True)
                patience = self._schedule(rule, group.get("initial_lr", group["lr"]), p, group["num_data"])[1]
                self._e_step(p, within, state, rule, patience, group["num_data"])

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient (after the E-step when it is due)."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            rule = self._rule(group)
            temperature = rule.temperature or group["num_data"] ** -0.5
            for p in group["params"]:
                if p.grad is None:
                    continue
                within = self._within(p, group["group"])
                state = self._state(p, rule, within is not None)
                state["step"] += 1
                if within is not None and rule.em_every:
                    warmup, patience = self._schedule(rule, group.get("initial_lr", group["lr"]), p,
                                                      group["num_data"])
                    if em_due(state["step"], rule.em_every, warmup):
                        self._e_step(p, within, state, rule, patience, group["num_data"])
                w, state["momentum"], state["rho"], state["noise"] = rule.update(
                    p, state["momentum"], state["rho"], state["noise"], p.grad, state["decay"], group["lr"],
                    temperature, group["num_data"], state["keep"])
                p.copy_(w)
        return loss


# ------------------------------------------------------------- the engine
_DEFAULT = GroupSparseOptions()


