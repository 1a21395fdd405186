r"""Group spike-and-slab SGHMC with MCMC-within-EM and one-shot pruning (paper 004;
engine ``"sghmc_group_ss"``).

Every weight :math:`w` has a momentum :math:`m` and a variational scale
:math:`\tau = \mathrm{sigmoid}(\rho)` (Gaussian variational inference read as
SGHMC). With :math:`g` the gradient of the *mean* minibatch loss (the negative
log likelihood averaged over the B rows), :math:`C^2` the step size of a cyclical
cosine schedule, temperature :math:`T = N^{-1/2}`, weight decay :math:`d` and the
noise :math:`\xi \sim N(0, I)` kept from the previous step, one step is
(:func:`group_sparse_sghmc_update`)

.. math::
    \rho &\leftarrow \rho - \eta\,\bigl[T^2C^3 d\,\tau + T C^{1.5}\,\xi g - 1/(\tau N)\bigr],\qquad
    \tau = \mathrm{sigmoid}(\rho),\\
    m &\leftarrow \beta_1 m - C^2\beta_2\,(g + d\,w) + \sqrt{2 + 2\beta_1^2}\;C^{1.5}\,T\,\xi',\\
    w &\leftarrow (w + \tau\,m)\odot\mathrm{mask}.

The weights of a layer with a :class:`~bnnzoo.models.GroupSpikeAndSlab` prior fall
into groups (input columns of a Dense weight; kernels, input channels or output
filters of a Conv2d weight: the prior's ``group``). Once per epoch after
``em_warmup`` epochs, the E-step (:func:`e_step`) looks at each group's mean
:math:`w^2`: below ``soft_threshold`` the group gets the large decay
``spike_decay`` (spike), otherwise the small ``slab_decay`` (slab), re-decided
every time (a soft, reversible mask); below ``hard_threshold`` the group is pruned
for good (a hard mask: its weights are held at exactly zero and its momentum and
:math:`\rho` are frozen). The result is a sparse network in one run, with no
retraining.

Weight decay and the prior
--------------------------
With :math:`g` the mean-loss gradient, a :math:`N(0, s^2)` prior on a weight is the
decay :math:`d = 1/(N s^2)` (the potential :math:`U = N\,\overline{\mathrm{loss}} +
w^2/(2s^2)`, divided by N). The defaults are the paper's numbers (``slab_decay``
5e-4, ``spike_decay`` 0.1, ``decay`` 5e-4 for the weights outside any group);
``"prior"`` instead derives each from the model: ``slab_decay = 1/(N s_1^2)`` and
``spike_decay = 1/(N s_0^2)`` from each layer's ``GroupSpikeAndSlab``
(``slab_scale``, ``spike_scale``), ``decay = 1/(N s^2)`` from the iid Gaussian
prior of every other site.

Draws and statistics
--------------------
With the cyclical schedule a draw is the weights at the end of a cycle (``thin``
cycles per draw), where the step size is smallest; otherwise every ``thin``
iterations. Warm-up steps are single iterations. Per-draw statistics:
``step_size`` (:math:`C^2`), ``temperature`` (T), ``lp`` (a minibatch estimate of
the log density under the *model's* priors, as for SGLD/SGHMC), ``diverging``,
``sparsity`` (fraction of the grouped weights pruned), and per grouped site
``active_groups[<site>]`` (groups not pruned) and ``slab_groups[<site>]`` (groups
in the slab). A chain whose step is not finite keeps its point and state and
counts a divergence. The final masks are in ``Run.pruning_mask``.

The same update for a plain ``torch.nn.Module``: :class:`GroupSparseSGHMCOptimizer`.

References
----------
"On the optimization and pruning for Bayesian deep learning" (paper 004), Sec. 2;
``ALGORITHMS.md`` section 5. Zhang, Li, Zhang, Chen and Wilson (2020), "Cyclical
stochastic gradient MCMC for Bayesian deep learning", ICLR (the cyclical schedule).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np
import pyro
import torch

from ..results import Draws
from ..models.priors import GroupSpikeAndSlab, group_dims
from .adaptive import minibatch_data
from .base import check_positive_option
from .engines import engine
from .optim import closure_loss
from .potential import BNNPotential
from .sgmcmc import SGMCMCKernel, run_engine

__all__ = ["GroupSparseOptions", "GroupSparseSGHMC", "GroupSparseSGHMCOptimizer", "e_step", "em_due",
           "fan_in_radius", "group_sites", "group_sparse_sghmc_update"]

Tensor = torch.Tensor
#: cycles of the default cyclical schedule are this many epochs long
DEFAULT_CYCLE_EPOCHS = 50


# ------------------------------------------------------------ pure pieces
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
    groups below ``hard_threshold`` leave the hard mask ``keep`` for good.

    Returns ``(decay, keep)``, both shaped like ``weight``.
    """
    power = weight.pow(2).mean(within, keepdim=True) if within else weight.pow(2)
    decay = torch.where(power < soft_threshold, spike_decay, slab_decay).to(weight.dtype).expand_as(weight)
    return decay, keep & (power >= hard_threshold).expand_as(weight)


def em_due(iteration: int, every: int, warmup: int) -> bool:
    """True when iteration ``iteration`` (1, 2, ...) starts with an E-step: at the start
    of every ``every`` iterations, once ``warmup`` such periods have passed."""
    done = iteration - 1
    return done % every == 0 and done >= warmup * every


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class GroupSparseOptions:
    """Hyperparameters of the update and the E-step, with the paper's defaults;
    validated on construction (errors name the option and the value).

    Parameters
    ----------
    momentum : float
        :math:`\\beta_1 \\in [0, 1]`.
    grad_scale : float
        :math:`\\beta_2 \\in (0, 1]`.
    rho_lr : float
        :math:`\\eta > 0`, the step size of :math:`\\rho`.
    temperature : float, optional
        T > 0 (None: :math:`N^{-1/2}`).
    decay, slab_decay, spike_decay : float or "prior"
        Weight decay (>= 0) outside the groups, of slab groups and of spike groups.
    soft_threshold, hard_threshold : float
        E-step thresholds (>= 0) on a group's mean :math:`w^2`.
    em_warmup : int
        E-step periods (epochs by default) before the first E-step.
    em_every : int, optional
        Iterations between E-steps (None: one epoch, ``ceil(N / batch_size)``).
    init_momentum : float
        Initial momentum ``init_momentum * N(0, I)``.
    """

    momentum: float = 0.1
    grad_scale: float = 1.0
    rho_lr: float = 0.1
    temperature: float | None = None
    decay: float | str = 5e-4
    slab_decay: float | str = 5e-4
    spike_decay: float | str = 0.1
    soft_threshold: float = 1e-2
    hard_threshold: float = 1e-3
    em_warmup: int = 50
    em_every: int | None = None
    init_momentum: float = 1e-3

    def __post_init__(self):
        if not (_is_number(self.momentum) and 0 <= self.momentum <= 1):
            raise ValueError(f"momentum must be in [0, 1], got {self.momentum!r}")
        if not (_is_number(self.grad_scale) and 0 < self.grad_scale <= 1):
            raise ValueError(f"grad_scale must be in (0, 1], got {self.grad_scale!r}")
        check_positive_option("rho_lr", self.rho_lr)
        if self.temperature is not None:
            check_positive_option("temperature", self.temperature)
        for name in ("decay", "slab_decay", "spike_decay"):
            value = getattr(self, name)
            if value != "prior" and not (_is_number(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0 or 'prior', got {value!r}")
        for name in ("soft_threshold", "hard_threshold", "init_momentum"):
            value = getattr(self, name)
            if not (_is_number(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if isinstance(self.em_warmup, bool) or not isinstance(self.em_warmup, (int, np.integer)) or self.em_warmup < 0:
            raise ValueError(f"em_warmup must be an integer >= 0, got {self.em_warmup!r}")
        if self.em_every is not None and (isinstance(self.em_every, bool) or not isinstance(
                self.em_every, (int, np.integer)) or self.em_every < 1):
            raise ValueError(f"em_every must be a positive integer or None, got {self.em_every!r}")

    @classmethod
    def split(cls, options: dict) -> tuple["GroupSparseOptions", dict]:
        """``(GroupSparseOptions(**own), rest)`` from one keyword dict."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in names}), \
            {k: v for k, v in options.items() if k not in names}

    def update(self, weight, momentum, rho, noise, grad, decay, step_size, temperature, num_data, keep=None):
        """:func:`group_sparse_sghmc_update` with these options."""
        return group_sparse_sghmc_update(weight, momentum, rho, noise, grad, decay, step_size, temperature,
                                         num_data, self.rho_lr, self.momentum, self.grad_scale, keep)

    def initial_state(self, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(momentum, rho, noise)`` before the first step: ``init_momentum * N(0, I)``,
        0 (:math:`\\tau = 1/2`) and ``N(0, I)``."""
        return self.init_momentum * torch.randn_like(weight), torch.zeros_like(weight), torch.randn_like(weight)


# ------------------------------------------------------------ groups of a model
@dataclass(frozen=True)
class GroupSite:
    """A weight site with a :class:`GroupSpikeAndSlab` prior: where it lies in the flat
    vector, its shape, and the dims within one group."""

    name: str
    index: slice
    shape: tuple[int, ...]
    within: tuple[int, ...]
    prior: GroupSpikeAndSlab

    @property
    def group_shape(self) -> tuple[int, ...]:
        rank = len(self.shape)
        return tuple(n for d, n in enumerate(self.shape) if d - rank not in self.within)


def group_sites(potential, kernel: str = "GroupSparseSGHMC") -> list[GroupSite]:
    """The grouped weight sites of a BNN potential; clear errors when there are none.

    A model without a ``GroupSpikeAndSlab`` prior is refused rather than grouped by
    a guess: the prior is where the model says which weights form groups.
    """
    if not isinstance(potential, BNNPotential):
        raise ValueError(f"{kernel} needs a bnnzoo BNN model (got a {type(potential).__name__})")
    spec, slices = potential.model.spec, potential.slices
    found = []
    for site in potential.model.sites:
        prior = spec.prior_for(site.name) if site.name in spec.param_shapes() else None
        if isinstance(prior, GroupSpikeAndSlab) and len(site.shape) > 1:
            found.append(GroupSite(site.name, slices[site.name], tuple(site.shape),
                                   group_dims(tuple(site.shape), prior.group), prior))
    if not found:
        priors = ", ".join(f"{name}: {type(spec.prior_for(name)).__name__}" for name in spec.param_shapes())
        raise ValueError(f"{kernel} needs at least one weight with a GroupSpikeAndSlab prior (spec.priors, e.g. "
                         f"priors={{'layers.0.weight': GroupSpikeAndSlab()}}); this model has none ({priors})")
    return found


def _prior_decay(potential: BNNPotential, sites: list[GroupSite]) -> Tensor:
    """``[D]`` decay 1/(N s^2) of the iid Gaussian prior of every coordinate outside the groups."""
    decay = 1.0 / (potential.num_data * potential.gaussian_prior_scale() ** 2)
    for site in sites:
        decay[site.index] = 0.0
    bad = [name for name, sl in potential.slices.items() if torch.isnan(decay[sl]).any()]
    if bad:
        raise ValueError(f"decay='prior' needs an iid Gaussian prior on every site outside the groups; "
                         f"{', '.join(bad)} has another prior (give decay a number)")
    return decay


def fan_in_radius(potential) -> Tensor:
    """``[D]`` radius ``1/sqrt(fan_in)`` of each layer's weight and bias (PyTorch's default
    initialisation of ``nn.Linear`` / ``nn.Conv2d``, the paper's); 1 for other sites."""
    radius = torch.ones(potential.dim, dtype=torch.get_default_dtype())
    for name, index in potential.slices.items():
        weight = potential.shapes.get(f"{name.rsplit('.', 1)[0]}.weight", ())
        if len(weight) > 1:
            radius[index] = 1.0 / math.sqrt(math.prod(weight[1:]))
    return radius


# ------------------------------------------------------------ the kernel
class GroupSparseSGHMC(SGMCMCKernel):
    """Paper 004's SGHMC with group spike-and-slab EM and one-shot group pruning
    (module docstring), as a Pyro ``MCMCKernel`` on vectorized chains.

    Parameters
    ----------
    model, potential
        A :class:`~bnnzoo.models.BNN` with at least one ``GroupSpikeAndSlab`` weight.
    step_size : float
        :math:`C_0^2`, the largest step size of the cyclical schedule (paper: 0.01).
    schedule : str
        ``"cyclical"`` (default), ``"constant"`` or ``"polynomial"``.
    cycle_length : int, optional
        Iterations per cycle (None: 50 epochs).
    thin : int
        Cycles per draw with the cyclical schedule, else iterations per draw.
    init_radius : float or "fan_in"
        Initial points uniform in ``(-r, r)``; ``"fan_in"`` (default): ``r = 1/sqrt(fan_in)``
        per layer (:func:`fan_in_radius`), as the paper's PyTorch networks start.
    **options
        :class:`GroupSparseOptions` fields (``momentum``, ``rho_lr``, ``slab_decay``,
        ``soft_threshold``, ``em_warmup``...) and the other options of
        :class:`~bnnzoo.inference.sgmcmc.SGMCMCKernel` (``batch_size``,
        ``shared_minibatch``, ``num_chains``, ``init_radius``).

    Examples
    --------
    >>> from bnnzoo.models import BNN, zoo
    >>> kernel = GroupSparseSGHMC(BNN(zoo.get("group_sparse_mlp")), batch_size=1024, cycle_length=5000)
    >>> MCMC(kernel, num_samples=4, warmup_steps=10000).run(x, y)
    """

    def __init__(self, model=None, potential=None, step_size: float = 1e-2, schedule: str = "cyclical",
                 cycle_length: int | None = None, init_radius: float | str = "fan_in", **options):
        self.rule, options = GroupSparseOptions.split(options)
        self._default_cycle = schedule == "cyclical" and cycle_length is None
        self._fan_in = init_radius == "fan_in"
        super().__init__(model, potential, step_size=step_size, schedule=schedule,
                         cycle_length=1 if self._default_cycle else cycle_length,
                         init_radius=1.0 if self._fan_in else init_radius, **options)

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        super().setup(warmup_steps, *args, **kwargs)
        if self._fan_in and not self._user_initial_params:
            theta = (torch.rand(self.num_chains, self.potential.dim) * 2 - 1) * fan_in_radius(self.potential)
            self._initial_params = self.unflatten(theta)

    # ---------------------------------------------------------------- state
    def _reset(self) -> None:
        super()._reset()
        self._decay: Tensor | None = None  # [C, D] weight decay per coordinate
        self._keep: Tensor | None = None  # [C, D] hard mask (False: pruned)

    def check_potential(self, potential) -> None:
        super().check_potential(potential)
        self._decays(potential, group_sites(potential, type(self).__name__))

    def _decays(self, potential, sites) -> tuple[Tensor, list[float], list[float]]:
        """The ``[D]`` decay outside the groups, and each grouped site's slab and spike decays."""
        n, rule = potential.num_data, self.rule
        outside = _prior_decay(potential, sites) if rule.decay == "prior" else \
            torch.full((potential.dim,), float(rule.decay), dtype=torch.get_default_dtype())
        slab = [1.0 / (n * s.prior.slab_scale ** 2) if rule.slab_decay == "prior" else float(rule.slab_decay)
                for s in sites]
        spike = [1.0 / (n * s.prior.spike_scale ** 2) if rule.spike_decay == "prior" else float(rule.spike_decay)
                 for s in sites]
        return outside, slab, spike

    def prepare(self, theta: Tensor) -> None:
        super().prepare(theta)
        potential = self.potential
        self._sites = group_sites(potential, type(self).__name__)
        outside, self._slab, self._spike = self._decays(potential, self._sites)
        epoch = math.ceil(potential.num_data / (self.batch_size or potential.num_data))
        self._em_every = self.rule.em_every or epoch
        if self._default_cycle:
            self.schedule = dataclasses.replace(self.schedule, cycle_length=DEFAULT_CYCLE_EPOCHS * epoch)
        self.inverse_temperature = 1.0 / (self.rule.temperature or potential.num_data ** -0.5)
        for site, slab in zip(self._sites, self._slab):  # every group starts in the slab
            outside[site.index] = slab
        self._decay = outside.expand(self.num_chains, -1).clone()
        self._keep = torch.ones(self.num_chains, potential.dim, dtype=torch.bool)

    # ------------------------------------------------------------- one step
    def force(self, theta: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        """``(U estimate [C], g [C, D])``: g is the gradient of the mean minibatch negative
        log likelihood; U adds the model's log prior on a draw's last iteration only
        (before it, the likelihood part alone, enough to spot a non-finite step)."""
        potential = self.potential
        x, y, scale = minibatch_data(potential, rows)
        batch = potential.num_data if rows is None else rows.shape[-1]
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad(), pyro.validation_enabled(False):
            values, log_det = potential.constrained_values(theta)
            log_lik = potential.model.log_likelihood(values, x, y).sum(-1)
            (grad,) = torch.autograd.grad(log_lik.sum(), theta)
        value = -scale * log_lik.detach()
        if self._last_iteration:
            with torch.no_grad(), pyro.validation_enabled(False):
                values = {k: v.detach() for k, v in values.items()}
                value = value - potential.log_prior(theta.detach(), values) - log_det.detach()
        return value, grad / -batch

    def initial_aux(self, theta, step_size, inverse_temperature):
        return self.rule.initial_state(theta)

    def step(self, theta, aux, grad, step_size, inverse_temperature):
        if em_due(self._k, self._em_every, self.rule.em_warmup):
            self._e_step(theta)
        momentum, rho, noise = aux
        theta, momentum, rho, noise = self.rule.update(theta, momentum, rho, noise, grad, self._decay, step_size,
                                                       1.0 / inverse_temperature, self.num_data, self._keep)
        return theta, (momentum, rho, noise)

    def _site_view(self, x: Tensor, site: GroupSite) -> Tensor:
        return x[:, site.index].reshape((self.num_chains,) + site.shape)

    def _e_step(self, theta: Tensor) -> None:
        rule = self.rule
        for site, slab, spike in zip(self._sites, self._slab, self._spike):
            decay, keep = e_step(self._site_view(theta, site), site.within, self._site_view(self._keep, site),
                                 rule.soft_threshold, rule.hard_threshold, slab, spike)
            self._decay[:, site.index] = decay.reshape(self.num_chains, -1)
            self._keep[:, site.index] = keep.reshape(self.num_chains, -1)

    def iterations_per_draw(self) -> int:
        """After warm-up with the cyclical schedule: to the end of the ``thin``-th cycle from here."""
        if self.in_warmup or self.schedule.kind != "cyclical":
            return super().iterations_per_draw()
        length = self.schedule.cycle_length
        return length - self._k % length + (self.thin - 1) * length

    # ------------------------------------------------------------ reporting
    def _group_counts(self, site: GroupSite, slab_decay: float) -> tuple[Tensor, Tensor]:
        """Per chain: groups not pruned, and those of them in the slab."""
        keep, decay = self._site_view(self._keep, site), self._site_view(self._decay, site)
        first = tuple(slice(0, 1) if d - len(site.shape) in site.within else slice(None)
                      for d in range(len(site.shape)))
        keep, decay = keep[(slice(None),) + first], decay[(slice(None),) + first]
        dtype = torch.get_default_dtype()
        active = keep.reshape(self.num_chains, -1).sum(-1).to(dtype)
        slab = (keep & (decay == slab_decay)).reshape(self.num_chains, -1).sum(-1).to(dtype)
        return active, slab

    def draw_stats(self, theta: Tensor) -> dict[str, Tensor]:
        keep = torch.cat([self._keep[:, s.index] for s in self._sites], -1)
        stats = {"sparsity": (~keep).to(torch.get_default_dtype()).mean(-1)}
        for site, slab in zip(self._sites, self._slab):
            stats[f"active_groups[{site.name}]"], stats[f"slab_groups[{site.name}]"] = self._group_counts(site, slab)
        return stats

    def final_state(self) -> dict:
        extras = super().final_state()
        if self._keep is not None:
            extras["pruning_mask"] = {s.name: self._site_view(self._keep, s).numpy() for s in self._sites}
        return extras


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
        check_positive_option("lr", group["lr"])
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
            state["step"] = 0
        return state

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
                state["decay"], state["keep"] = e_step(p, within, state["keep"], rule.soft_threshold,
                                                       rule.hard_threshold, rule.slab_decay, rule.spike_decay)

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
                if within is not None and rule.em_every and em_due(state["step"], rule.em_every, rule.em_warmup):
                    state["decay"], state["keep"] = e_step(p, within, state["keep"], rule.soft_threshold,
                                                           rule.hard_threshold, rule.slab_decay, rule.spike_decay)
                w, state["momentum"], state["rho"], state["noise"] = rule.update(
                    p, state["momentum"], state["rho"], state["noise"], p.grad, state["decay"], group["lr"],
                    temperature, group["num_data"], state["keep"])
                p.copy_(w)
        return loss


# ------------------------------------------------------------- the engine
_DEFAULT = GroupSparseOptions()


@engine("sghmc_group_ss")
def sghmc_group_ss(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-2,
                   schedule: str = "cyclical", cycle_length: int | None = None, batch_size: int | None = None,
                   shared_minibatch: bool = False, thin: int = 1, momentum: float = _DEFAULT.momentum,
                   grad_scale: float = _DEFAULT.grad_scale, rho_lr: float = _DEFAULT.rho_lr,
                   temperature: float | None = _DEFAULT.temperature, decay: float | str = _DEFAULT.decay,
                   slab_decay: float | str = _DEFAULT.slab_decay, spike_decay: float | str = _DEFAULT.spike_decay,
                   soft_threshold: float = _DEFAULT.soft_threshold, hard_threshold: float = _DEFAULT.hard_threshold,
                   em_warmup: int = _DEFAULT.em_warmup, em_every: int | None = _DEFAULT.em_every,
                   init_momentum: float = _DEFAULT.init_momentum, chain_method: str = "vectorized",
                   init_radius: float | str = "fan_in") -> Draws:
    """Group spike-and-slab SGHMC (paper 004): EM weight decay per group, one-shot group pruning, cyclical steps."""
    draws = run_engine(GroupSparseSGHMC, locals())
    if schedule == "cyclical":
        draws.notes["iterations_per_draw"] = f"{thin} cycle(s): draws at cycle ends"
    return draws
