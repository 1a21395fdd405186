r"""Group spike-and-slab SGHMC with MCMC-within-EM and one-shot pruning (paper 004;
engine ``"sghmc_group_ss"``).

Every weight :math:`w` has a momentum :math:`m` and a variational scale
:math:`\tau = \mathrm{sigmoid}(\rho)` (Gaussian variational inference read as
SGHMC). With :math:`g` the gradient of the *mean* minibatch loss (the negative
log likelihood averaged over the B rows), :math:`C^2` the step size of a cyclical
cosine schedule, temperature :math:`T = N^{-1/2}`, weight decay :math:`d` and the
noise :math:`\xi \sim N(0, I)` kept from the previous step, one step is
(:func:`~bnnzoo.inference.group_em.group_sparse_sghmc_update`)

.. math::
    \rho &\leftarrow \rho - \eta\,\bigl[T^2C^3 d\,\tau + T C^{1.5}\,\xi g - 1/(\tau N)\bigr],\qquad
    \tau = \mathrm{sigmoid}(\rho),\\
    m &\leftarrow \beta_1 m - C^2\beta_2\,(g + d\,w) + \sqrt{2 + 2\beta_1^2}\;C^{1.5}\,T\,\xi',\\
    w &\leftarrow (w + \tau\,m)\odot\mathrm{mask}.

The weights of a layer with a :class:`~bnnzoo.models.GroupSpikeAndSlab` prior fall
into groups (input columns of a Dense weight; kernels, input channels or output
filters of a Conv2d weight: the prior's ``group``). Once per epoch after
``em_warmup`` epochs (``"auto"``: max(50 epochs, 500 iterations)), the E-step
(:func:`~bnnzoo.inference.group_em.guarded_e_step`) looks at each group's mean
:math:`w^2`: below ``soft_threshold`` the group gets the large decay
``spike_decay`` (spike), otherwise the small ``slab_decay`` (slab), re-decided
every time (a soft, reversible mask); a group found below ``hard_threshold`` at
``prune_patience`` E-steps in a row (the pruning guard; ``"auto"``: the E-steps in
1/C_0^2 iterations, at least 3) is pruned for good (a hard mask: its weights are held
at exactly zero and its momentum and :math:`\rho` are frozen). The result is a sparse
network in one run, with no retraining. The ``"auto"`` rules are in ``docs/algorithms.md``,
"Data-scaled defaults".

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
counts a divergence. The final masks are in ``Run.pruning_mask``. At the end, a score test asks the
training data whether any pruned group still carries signal (an input pruned before its effect was
learned); such groups are named in a warning and in ``Run.notes["pruned_with_signal"]``
(:func:`~bnnzoo.inference.group_em.pruned_score_test`).

The same update for a plain ``torch.nn.Module``: :class:`~bnnzoo.inference.group_em.GroupSparseSGHMCOptimizer`.

References
----------
"On the optimization and pruning for Bayesian deep learning" (paper 004), Sec. 2;
``docs/algorithms.md`` ("Group spike-and-slab SGHMC"). Zhang, Li, Zhang, Chen and Wilson (2020), "Cyclical
stochastic gradient MCMC for Bayesian deep learning", ICLR (the cyclical schedule).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import pyro
import torch

from ...models.priors import GroupSpikeAndSlab, group_dims
from ..group_em import (SCORE_BATCHES, SCORE_LEVEL, GroupSparseOptions, em_due, group_sparse_rules,
                        group_step_size_rule, guarded_e_step, pruned_score_test, small_data_warning, spike_patience,
                        threshold_rules)
from ..options import choice, integer, option, positive
from ..potential import BNNPotential
from ..sgmcmc import AUTO, SCHEDULES
from .sgmcmc import (Dynamics, Force, SGComponent, SGMCMCKernel, SGMCMCOptions, SGParts, auto_or, fan_in_radius,
                     minibatch_data)

__all__ = ["EMState", "GroupEM", "GroupSparseDynamics", "GroupSparseSGHMC", "GroupSparseSGHMCOptions", "MeanLossForce",
           "fan_in_radius", "group_sites", "site_decays"]

Tensor = torch.Tensor


def _init_radius(name: str, value) -> None:
    if value not in ("fan_in", AUTO):
        positive(name, value)


@dataclass(frozen=True)
class GroupSparseSGHMCOptions(GroupSparseOptions, SGMCMCOptions):
    """Options of :class:`GroupSparseSGHMC`: the update's and E-step's, and the SG-MCMC ones
    with paper 004's defaults (cyclical steps, fan-in initialisation with nonnegative biases)."""

    step_size: float | str = option(AUTO, "C_0^2, the largest step size of the cyclical schedule; auto: "
                                    "min(0.1, 1/(4 lambda)), lambda the largest Hessian eigenvalue of the mean "
                                    "loss at the initial point", auto_or(positive))
    schedule: str = option("cyclical", "step-size schedule: 'cyclical', 'constant' or 'polynomial'",
                           choice(*SCHEDULES))
    cycle_length: int | str = option(AUTO, "iterations per cycle; auto: max(50 epochs, 1000 iterations)",
                                     auto_or(integer(1)))
    thin: int = option(1, "cycles per draw with the cyclical schedule, else iterations per draw", integer(1))
    init_radius: float | str = option(AUTO, "initial points uniform in (-r, r); 'fan_in': r = 1/sqrt(fan_in) "
                                      "(PyTorch's, the paper's); auto: the same for weights, biases uniform in "
                                      "[0, r) (no unit starts dead by its bias)", _init_radius)

    #: with the cyclical schedule, ``thin`` counts cycles and a draw is the point at a cycle's end
    draws_at_cycle_ends = True
    #: ``init_radius="auto"``: the biases start uniform in [0, r) (no unit starts dead by its bias)
    auto_init_biases = "nonnegative"

    def auto_step_size(self, curvature: float, schedule: str, num_data: int | None) -> float:
        """``step_size="auto"``: :func:`~bnnzoo.inference.group_em.group_step_size_rule` of the curvature of
        the *mean* loss (the likelihood's over N)."""
        return group_step_size_rule(curvature / num_data)

    def temperature_schedule(self, num_data: int | None = None) -> tuple[float, float, float]:
        """A constant inverse temperature :math:`1/T`, T = ``temperature`` (None: :math:`N^{-1/2}`)."""
        return 1.0 / (self.temperature or num_data ** -0.5), 1.0, math.inf


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


def fan_in(site: GroupSite) -> int:
    """The fan-in of a grouped weight: the product of its dims after the first (outputs)."""
    return math.prod(site.shape[1:])


# ------------------------------------------------------------ the kernel
class GroupSparseSGHMC(SGMCMCKernel):
    r"""Paper 004's SGHMC with group spike-and-slab EM and one-shot group pruning
    (module docstring), as a Pyro ``MCMCKernel`` on vectorized chains: the driver with
    :class:`GroupSparseDynamics`, the E-step :class:`GroupEM` beside the loop (its state, the
    pruning guard, the statistics, the final mask and the end-of-run checks) and the mean-loss
    force :class:`MeanLossForce`.

    Options: :class:`GroupSparseSGHMCOptions` (the update's and the E-step's
    :class:`~bnnzoo.inference.group_em.GroupSparseOptions`, and the SG-MCMC ones:
    ``step_size`` is :math:`C_0^2`, the largest step size of the cyclical schedule;
    ``cycle_length="auto"`` is max(50 epochs, 1000 iterations); ``thin`` counts cycles with the
    cyclical schedule; ``init_radius="auto"`` starts each layer's weights uniform in
    :math:`\pm 1/\sqrt{\text{fan\_in}}` and its biases in :math:`[0, 1/\sqrt{\text{fan\_in}})`;
    ``"fan_in"`` draws the biases in :math:`\pm 1/\sqrt{\text{fan\_in}}`, as the paper's PyTorch
    networks do). The ``"auto"`` rules are in
    ``docs/algorithms.md``, "Data-scaled defaults".

    Examples
    --------
    >>> from bnnzoo.models import BNN, zoo
    >>> kernel = GroupSparseSGHMC(BNN(zoo.get("group_sparse_mlp")), batch_size=1024, cycle_length=5000)
    >>> MCMC(kernel, num_samples=4, warmup_steps=10000).run(x, y)
    >>> kernel.em_state.keep   # the hard mask, [C, D] (False: pruned)
    """

    Options = GroupSparseSGHMCOptions

    def sg_parts(self) -> SGParts:
        """Paper 004's update (:class:`GroupSparseDynamics`), the E-step beside it (:class:`GroupEM`),
        the mean-loss force (:class:`MeanLossForce`)."""
        return SGParts(GroupSparseDynamics(), (GroupEM(),), force=MeanLossForce())

    @property
    def em(self) -> GroupEM:
        """The group E-step: its configuration (sites, decays, thresholds, schedule) in the current run."""
        return self.component(GroupEM)

    @property
    def em_state(self) -> EMState | None:
        """The E-step's state now: decays, hard mask and pruning guard (None before setup)."""
        return self.component_state(GroupEM)


# ------------------------------------------------------------ the kernel's parts
class MeanLossForce(Force):
    """``(U estimate [C], g [C, D])``: g is the gradient of the mean minibatch negative
    log likelihood; U adds the model's log prior on a draw's last iteration only
    (before it, the likelihood part alone, enough to spot a non-finite step)."""

    def prepare(self, kernel, theta: Tensor) -> None:
        self.potential = kernel.potential

    def force(self, theta: Tensor, rows: Tensor | None, iteration: int, last: bool, own=None):
        potential = self.potential
        x, y, scale = minibatch_data(potential, rows)
        batch = potential.num_data if rows is None else rows.shape[-1]
        log_lik, grad, values, log_det = log_likelihood_and_grad(potential, theta, x, y)
        value = -scale * log_lik
        if last:
            with torch.no_grad(), pyro.validation_enabled(False):
                values = {k: v.detach() for k, v in values.items()}
                value = value - potential.log_prior(theta.detach(), values) - log_det.detach()
        return value, grad / -batch, own


def _input_bias(potential, site: GroupSite, x: Tensor) -> str | None:
    """The bias site of a grouped site whose groups are the network's input columns (the first Dense
    layer's weight, one group per input), else None."""
    bias = site.name[:-len("weight")] + "bias" if site.name.endswith(".weight") else None
    if (site.name != "layers.0.weight" or len(site.shape) != 2 or site.within != (-2,) or x.dim() != 2
            or x.shape[1] != site.shape[1] or bias not in potential.slices):
        return None
    return bias


def _residual_scores(scores: Tensor, bias_scores: Tensor, x: Tensor, pruned: Tensor) -> Tensor:
    r"""The score of each pruned input's weights for the part of that input that the kept inputs (and a
    constant) do not explain: :math:`\tilde s_j = s_j - \sum_k \beta_{kj} s_k - \beta_{0j} s_b`, with
    :math:`\beta_j` the least-squares fit of column j of ``x`` on the kept columns and a constant over the
    training rows, and :math:`s_b` the bias's score (a column's score is linear in the column). Inputs that
    share a component with the kept ones (correlated inputs) otherwise score wherever the rest of the network
    fits that component imperfectly. ``scores`` ``[K, C, inputs, p]``, ``bias_scores`` ``[K, C, p]``,
    ``pruned`` ``[C, inputs]``; returns ``scores`` with the pruned inputs' rows replaced."""
    out = scores.clone()
    ones = x.new_ones(x.shape[0], 1)
    for c in range(pruned.shape[0]):
        drop, kept = torch.nonzero(pruned[c]).flatten(), torch.nonzero(~pruned[c]).flatten()
        if drop.numel() == 0:
            continue
        design = torch.cat([ones, x[:, kept]], 1).to(torch.float64)
        beta = torch.linalg.lstsq(design, x[:, drop].to(torch.float64)).solution.to(scores.dtype)  # [1 + k, m]
        basis = torch.cat([bias_scores[:, c].unsqueeze(1), scores[:, c, kept]], 1)  # [K, 1 + k, p]
        out[:, c, drop] = scores[:, c, drop] - torch.einsum("kap,am->kmp", basis, beta)
    return out


def log_likelihood_and_grad(potential, theta: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, dict, Tensor]:
    """The log likelihood of the rows ``x, y`` per chain ``[C]``, its gradient ``[C, D]``, and the
    constrained values and log-Jacobian at ``theta``."""
    theta = theta.detach().requires_grad_(True)
    with torch.enable_grad(), pyro.validation_enabled(False):
        values, log_det = potential.constrained_values(theta)
        log_lik = potential.model.log_likelihood(values, x, y).sum(-1)
        (grad,) = torch.autograd.grad(log_lik.sum(), theta)
    return log_lik.detach(), grad, values, log_det


class GroupSparseDynamics(Dynamics):
    """Paper 004's update (module docstring) under the current decays and hard mask of the E-step
    (the state of :class:`GroupEM`, the kernel's first component); the auxiliary variable is
    ``(momentum, rho, noise)``."""

    def prepare(self, kernel) -> None:
        self.rule, self.num_data = kernel.resolved, kernel.num_data

    def initial_aux(self, theta, step_size, inverse_temperature):
        return self.rule.initial_state(theta)

    def step(self, theta, aux, own, grad, step_size, inverse_temperature, components):
        momentum, rho, noise = aux
        em = components[0]
        theta, momentum, rho, noise = self.rule.update(theta, momentum, rho, noise, grad, em.decay, step_size,
                                                       1.0 / inverse_temperature, self.num_data, em.keep)
        return theta, (momentum, rho, noise), None


def site_decays(potential, sites: list[GroupSite], rule) -> tuple[Tensor, list[float], list[float]]:
    """The ``[D]`` decay outside the groups, and each grouped site's slab and spike decays, from the
    options ``rule`` (numbers, or ``"prior"``: 1/(N s^2) from the model's priors)."""
    n = potential.num_data
    outside = _prior_decay(potential, sites) if rule.decay == "prior" else \
        torch.full((potential.dim,), float(rule.decay), **potential.placement)
    slab = [1.0 / (n * s.prior.slab_scale ** 2) if rule.slab_decay == "prior" else float(rule.slab_decay)
            for s in sites]
    spike = [1.0 / (n * s.prior.spike_scale ** 2) if rule.spike_decay == "prior" else float(rule.spike_decay)
             for s in sites]
    return outside, slab, spike


class EMState(NamedTuple):
    """The state of :class:`GroupEM`, each ``[C, D]``: ``decay`` the weight decay per coordinate,
    ``keep`` the hard mask (False: pruned), ``below`` the E-steps in a row below the hard threshold
    (per group)."""

    decay: Tensor
    keep: Tensor
    below: Tensor


class GroupEM(SGComponent):
    """The group E-step beside the loop, with its reporting: once per ``em_every``
    iterations after ``em_warmup`` of them, before the update, the decays, hard mask and pruning
    guard from the current weights (:func:`~bnnzoo.inference.group_em.guarded_e_step`); the
    E-step's ``"auto"`` rules; per draw the sparsity and each site's active and slab groups; the
    final mask (``pruning_mask``); at the end of a run the notes and warnings on the pruning (too
    short to prune, undecided groups, pruned groups that still carry signal).

    Its state is an :class:`EMState` in the sampler's state. Its configuration (set up by
    :meth:`prepare`): per grouped site (``sites``) its ``slab``, ``spike`` decays and ``soft``,
    ``hard`` thresholds, the ``outside`` decay of the other coordinates; ``em_every``, ``em_warmup``,
    ``prune_patience``.
    """

    # ---------------------------------------------------------------- setup
    def check_potential(self, kernel, potential) -> None:
        site_decays(potential, group_sites(potential, type(kernel).__name__), kernel.resolved)

    def resolve_auto(self, kernel, theta: Tensor) -> dict:
        """The ``"auto"`` options from N, B, C_0^2 and each grouped layer's fan-in
        (:func:`~bnnzoo.inference.group_em.group_sparse_rules`, :func:`~bnnzoo.inference.group_em.threshold_rules`);
        the thresholds are per grouped site, ``{site: value}``. C_0^2 is the driver's ``"auto"`` step
        (:meth:`GroupSparseSGHMCOptions.auto_step_size`, from the curvature the driver measured)."""
        auto, opts = kernel.options.auto_fields(), kernel.options
        potential = kernel.potential
        epoch = math.ceil(potential.num_data / (kernel.batch_size or potential.num_data))
        em_every = opts.em_every or epoch
        step = opts.step_size
        if "step_size" in auto:
            step = opts.auto_step_size(kernel.curvature(theta), opts.schedule, potential.num_data)
        rules = group_sparse_rules(epoch, em_every, step)
        values = {k: v for k, v in rules.items() if k in auto}
        if "cycle_length" in values and opts.schedule != "cyclical":
            del values["cycle_length"]
        sites = group_sites(potential, type(kernel).__name__)
        spike = site_decays(potential, sites, kernel.resolved)[2]
        for name in ("soft_threshold", "hard_threshold"):
            if name in auto:
                values[name] = {s.name: threshold_rules(fan_in(s), potential.num_data, d)[name]
                                for s, d in zip(sites, spike)}
        if "prune_patience" in auto and "hard_threshold" in auto:
            floors = [d for s, d in zip(sites, spike) if threshold_rules(fan_in(s), potential.num_data, d)
                      ["hard_threshold"] > threshold_rules(fan_in(s))["hard_threshold"]]
            if floors:
                cycle = opts.cycle_length if isinstance(opts.cycle_length, int) else rules["cycle_length"]
                values["prune_patience"] = max(values["prune_patience"],
                                               spike_patience(step, min(floors), em_every, cycle))
        if "hard_threshold" in auto:
            for site, d in zip(sites, spike):
                message = small_data_warning(type(kernel).__name__, site.name, fan_in(site), potential.num_data, d,
                                             values.get("prune_patience", opts.prune_patience) * em_every)
                if message:
                    warnings.warn(message, stacklevel=2)
        return values

    def _per_site(self, kernel, name: str) -> list[float]:
        value = kernel.auto_values.get(name, getattr(kernel.options, name))
        return [value[s.name] for s in self.sites] if isinstance(value, dict) else [float(value)] * len(self.sites)

    def prepare(self, kernel, theta: Tensor) -> None:
        potential, rule = kernel.potential, kernel.resolved
        self.sites = group_sites(potential, type(kernel).__name__)
        self.soft, self.hard = self._per_site(kernel, "soft_threshold"), self._per_site(kernel, "hard_threshold")
        outside, self.slab, self.spike = site_decays(potential, self.sites, rule)
        epoch = math.ceil(potential.num_data / (kernel.batch_size or potential.num_data))
        self.em_every = rule.em_every or epoch
        self.em_warmup, self.prune_patience = rule.em_warmup, rule.prune_patience
        for site, slab in zip(self.sites, self.slab):  # every group starts in the slab
            outside[site.index] = slab
        self.outside = outside

    def init(self, position: Tensor) -> EMState:
        """Every group in the slab, nothing pruned."""
        chains, dim = position.shape
        return EMState(self.outside.expand(chains, -1).clone(),
                       torch.ones(chains, dim, dtype=torch.bool, device=position.device),
                       torch.zeros(chains, dim, dtype=torch.long, device=position.device))

    def first_pruning(self) -> int:
        """The first iteration at which a group can be pruned: the first E-step, then ``prune_patience``
        E-steps below the hard threshold."""
        return (int(self.em_warmup) + int(self.prune_patience) - 1) * self.em_every + 1

    # ------------------------------------------------------------- one step
    def before_update(self, own: EMState, theta: Tensor, iteration: int) -> EMState:
        if em_due(iteration, self.em_every, self.em_warmup):
            return self.e_step(own, theta)
        return own

    def _site_view(self, x: Tensor, site: GroupSite) -> Tensor:
        return x[:, site.index].reshape((x.shape[0],) + site.shape)

    def e_step(self, own: EMState, theta: Tensor) -> EMState:
        """The E-step at ``theta`` ``[C, D]``: new decays, hard mask and pruning guard, per grouped site."""
        chains = theta.shape[0]
        new = EMState(own.decay.clone(), own.keep.clone(), own.below.clone())
        for site, slab, spike, soft, hard in zip(self.sites, self.slab, self.spike, self.soft, self.hard):
            decay, keep, below = guarded_e_step(self._site_view(theta, site), site.within,
                                                self._site_view(own.keep, site), self._site_view(own.below, site),
                                                soft, hard, slab, spike, self.prune_patience)
            new.decay[:, site.index] = decay.reshape(chains, -1)
            new.keep[:, site.index] = keep.reshape(chains, -1)
            new.below[:, site.index] = below.reshape(chains, -1)
        return new

    # ------------------------------------------------------------ reporting
    def group_counts(self, own: EMState, site: GroupSite, slab_decay: float) -> tuple[Tensor, Tensor]:
        """Per chain: groups not pruned, and those of them in the slab."""
        keep, decay = self._site_view(own.keep, site), self._site_view(own.decay, site)
        chains = keep.shape[0]
        first = tuple(slice(0, 1) if d - len(site.shape) in site.within else slice(None)
                      for d in range(len(site.shape)))
        keep, decay = keep[(slice(None),) + first], decay[(slice(None),) + first]
        dtype = torch.get_default_dtype()
        active = keep.reshape(chains, -1).sum(-1).to(dtype)
        slab = (keep & (decay == slab_decay)).reshape(chains, -1).sum(-1).to(dtype)
        return active, slab

    def draw_stats(self, own: EMState, theta: Tensor) -> dict[str, Tensor]:
        keep = torch.cat([own.keep[:, s.index] for s in self.sites], -1)
        stats = {"sparsity": (~keep).to(torch.get_default_dtype()).mean(-1)}
        for site, slab in zip(self.sites, self.slab):
            stats[f"active_groups[{site.name}]"], stats[f"slab_groups[{site.name}]"] = \
                self.group_counts(own, site, slab)
        return stats

    def final_state(self, own: EMState, num_chains: int) -> dict:
        return {"pruning_mask": {s.name: self._site_view(own.keep, s).cpu().numpy() for s in self.sites}}

    def notes(self, kernel, own: EMState) -> dict:
        """``first_pruning_iteration`` and ``pruned_with_signal`` (the score test at the last draw, the
        kernel's position), with the end-of-run warnings: a run too short to prune, groups left
        undecided, pruned groups the data still pull away from zero."""
        notes = {}
        iteration = kernel.iteration
        if not iteration:
            return notes
        name, first = type(kernel).__name__, self.first_pruning()
        notes["first_pruning_iteration"] = first
        if iteration < first:
            warnings.warn(f"{name}: the run ended at iteration {iteration}, before any group could "
                          f"be pruned (first E-step at iteration {int(self.em_warmup) * self.em_every + 1}, "
                          f"then prune_patience={self.prune_patience} E-steps below hard_threshold: "
                          f"iteration {first}), so the mask keeps every input; run more iterations "
                          f"(warmup_steps of at least {first})")
        else:
            self.warn_undecided(own, name)
        notes["pruned_with_signal"] = self.check_pruned(kernel, own, kernel.state.position)  # at the last point
        return notes

    def warn_undecided(self, own: EMState, name: str) -> None:
        """One line per grouped site where, at the end, some groups are neither pruned nor in the slab (their
        mean w^2 between the thresholds at the last E-step): the selection of those inputs is not finished."""
        for site, slab in zip(self.sites, self.slab):
            active, in_slab = self.group_counts(own, site, slab)
            undecided = int((active - in_slab).max())
            if undecided:
                warnings.warn(f"{name}: {site.name}: at the end {undecided} group(s) are neither "
                              f"pruned nor in the slab (mean w^2 between the hard and the soft threshold): their "
                              f"selection is not finished; run more iterations (or give more rows) before reading "
                              f"the mask")

    def check_pruned(self, kernel, own: EMState, theta: Tensor) -> dict[str, list[list[int]]]:
        """The groups pruned at the end whose weights the data still pull away from zero
        (:func:`~bnnzoo.inference.group_em.pruned_score_test` on :data:`SCORE_BATCHES` batches of the training
        rows at the last draw, Bonferroni over each chain's pruned groups at level :data:`SCORE_LEVEL`), per
        grouped site and chain; one warning per site that has any."""
        potential = kernel.potential
        x, y = potential.x, potential.y
        k = min(SCORE_BATCHES, x.shape[0])
        edges = [round(i * x.shape[0] / k) for i in range(k + 1)]
        biases = [_input_bias(potential, site, x) for site in self.sites]
        index = torch.arange(potential.dim, device=theta.device)
        columns = [torch.cat([index[site.index]] + ([index[potential.slices[bias]]] if bias else []))
                   for site, bias in zip(self.sites, biases)]
        every = torch.cat(columns)  # one pass over the batches for every site: [K, C, sites (+ biases)]
        scores_all = torch.stack([log_likelihood_and_grad(potential, theta, x[a:b], y[a:b])[1][:, every]
                                  for a, b in zip(edges[:-1], edges[1:])])
        found = {}
        for site, bias, scores in zip(self.sites, biases, scores_all.split([len(c) for c in columns], -1)):
            size = math.prod(site.shape)
            site_scores = self._groups(scores[..., :size], site)  # [K, C, G, p]
            pruned = ~self._groups(own.keep[:, site.index], site).any(-1)  # [C, G]
            if bias:  # groups are the network's inputs: the part of each not explained by the kept ones
                site_scores = _residual_scores(site_scores, scores[..., size:], x, pruned)
            p_value = pruned_score_test(site_scores)[1]
            level = SCORE_LEVEL / pruned.sum(-1, keepdim=True).clamp_min(1)
            flagged = pruned & (p_value < level)
            found[site.name] = [torch.nonzero(row).flatten().tolist() for row in flagged]
            if flagged.any():
                chains = "; ".join(f"chain {c}: group(s) {', '.join(map(str, g))}"
                                   for c, g in enumerate(found[site.name]) if g)
                warnings.warn(f"{type(kernel).__name__}: {site.name}: pruned group(s) that the data still pull away "
                              f"from zero at the end ({chains}; score test at level {SCORE_LEVEL:g} over the pruned "
                              f"groups): they were likely pruned before their effect was learned, so the mask "
                              f"misses them; rerun with a larger prune_patience or em_warmup (or a lower "
                              f"hard_threshold)")
        return found

    @staticmethod
    def _groups(x: Tensor, site: GroupSite) -> Tensor:
        """``[..., C, site size]`` -> ``[..., C, groups, weights per group]`` (groups in the order of the
        site's dims outside a group, as ``pruning_mask`` reads them)."""
        lead, rank = x.shape[:-1], len(site.shape)
        between = [d for d in range(rank) if d - rank not in site.within]
        inside = [d for d in range(rank) if d - rank in site.within]
        x = x.reshape(lead + site.shape).permute(*range(len(lead)), *(len(lead) + d for d in between + inside))
        return x.reshape(lead + (math.prod(site.shape[d] for d in between), -1))
