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

__all__ = ["GroupEM", "GroupSparseDynamics", "GroupSparseSGHMC", "GroupSparseSGHMCOptions", "MeanLossForce",
           "fan_in_radius", "group_sites"]

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
    (module docstring), as a Pyro ``MCMCKernel`` on vectorized chains.

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
    """

    Options = GroupSparseSGHMCOptions

    def __init__(self, model=None, potential=None, **options):
        super().__init__(model, potential, **options)
        self.rule = self.options

    # ---------------------------------------------------------------- state
    def _reset(self) -> None:
        super()._reset()
        self._decay: Tensor | None = None  # [C, D] weight decay per coordinate
        self._keep: Tensor | None = None  # [C, D] hard mask (False: pruned)
        self._below: Tensor | None = None  # [C, D] E-steps in a row below the hard threshold (per group)
        self._last_theta: Tensor | None = None  # [C, D] the last draw

    def check_potential(self, potential) -> None:
        super().check_potential(potential)
        self._decays(potential, group_sites(potential, type(self).__name__))

    def _decays(self, potential, sites) -> tuple[Tensor, list[float], list[float]]:
        """The ``[D]`` decay outside the groups, and each grouped site's slab and spike decays."""
        n, rule = potential.num_data, self.rule
        outside = _prior_decay(potential, sites) if rule.decay == "prior" else \
            torch.full((potential.dim,), float(rule.decay), **potential.placement)
        slab = [1.0 / (n * s.prior.slab_scale ** 2) if rule.slab_decay == "prior" else float(rule.slab_decay)
                for s in sites]
        spike = [1.0 / (n * s.prior.spike_scale ** 2) if rule.spike_decay == "prior" else float(rule.spike_decay)
                 for s in sites]
        return outside, slab, spike

    def resolve_auto(self, theta: Tensor) -> dict:
        """The ``"auto"`` options from N, B, C_0^2 and each grouped layer's fan-in
        (:func:`~bnnzoo.inference.group_em.group_sparse_rules`, :func:`~bnnzoo.inference.group_em.threshold_rules`);
        the thresholds are per grouped site, ``{site: value}``."""
        auto, opts = self.options.auto_fields(), self.options
        potential = self.potential
        epoch = math.ceil(potential.num_data / (self.batch_size or potential.num_data))
        em_every = opts.em_every or epoch
        values = {}
        if "step_size" in auto:
            values["step_size"] = group_step_size_rule(self.curvature(theta) / potential.num_data)
        rules = group_sparse_rules(epoch, em_every, values.get("step_size", opts.step_size))
        values.update({k: v for k, v in rules.items() if k in auto})
        if "cycle_length" in values and opts.schedule != "cyclical":
            del values["cycle_length"]
        sites = group_sites(potential, type(self).__name__)
        spike = self._decays(potential, sites)[2]
        for name in ("soft_threshold", "hard_threshold"):
            if name in auto:
                values[name] = {s.name: threshold_rules(fan_in(s), potential.num_data, d)[name]
                                for s, d in zip(sites, spike)}
        if "prune_patience" in auto and "hard_threshold" in auto:
            step = values.get("step_size", opts.step_size)
            floors = [d for s, d in zip(sites, spike) if threshold_rules(fan_in(s), potential.num_data, d)
                      ["hard_threshold"] > threshold_rules(fan_in(s))["hard_threshold"]]
            if floors:
                cycle = opts.cycle_length if isinstance(opts.cycle_length, int) else rules["cycle_length"]
                values["prune_patience"] = max(values["prune_patience"],
                                               spike_patience(step, min(floors), em_every, cycle))
        if "hard_threshold" in auto:
            for site, d in zip(sites, spike):
                message = small_data_warning(type(self).__name__, site.name, fan_in(site), potential.num_data, d,
                                             values.get("prune_patience", opts.prune_patience) * em_every)
                if message:
                    warnings.warn(message, stacklevel=2)
        return values

    def initial_radius(self) -> float | Tensor:
        """``"auto"`` and ``"fan_in"``: 1/sqrt(fan_in) for every layer's weight and bias (the biases of
        ``"auto"`` are folded to [0, r) by :meth:`initial_point`)."""
        if isinstance(self.options.init_radius, str):
            return fan_in_radius(self.potential)
        return self.init_radius

    def initial_point(self) -> Tensor:
        """``init_radius="auto"``: PyTorch's start with every bias made nonnegative, :math:`|b|`."""
        theta = super().initial_point()
        if self.options.init_radius == AUTO:
            shapes = self.potential.shapes
            for name, index in self.potential.slices.items():
                if name.endswith(".bias") and len(shapes.get(f"{name.rsplit('.', 1)[0]}.weight", ())) > 1:
                    theta[:, index] = theta[:, index].abs()
        return theta

    def _per_site(self, name: str) -> list[float]:
        value = self.auto_values.get(name, getattr(self.options, name))
        return [value[s.name] for s in self._sites] if isinstance(value, dict) else [float(value)] * len(self._sites)

    def prepare(self, theta: Tensor) -> None:
        super().prepare(theta)
        self.rule = self.resolved
        potential = self.potential
        self._sites = group_sites(potential, type(self).__name__)
        self._soft, self._hard = self._per_site("soft_threshold"), self._per_site("hard_threshold")
        outside, self._slab, self._spike = self._decays(potential, self._sites)
        epoch = math.ceil(potential.num_data / (self.batch_size or potential.num_data))
        self._em_every = self.rule.em_every or epoch
        self._temperature = self.rule.temperature or potential.num_data ** -0.5
        for site, slab in zip(self._sites, self._slab):  # every group starts in the slab
            outside[site.index] = slab
        self._decay = outside.expand(self.num_chains, -1).clone()
        self._keep = torch.ones(self.num_chains, potential.dim, dtype=torch.bool, device=theta.device)
        self._below = torch.zeros(self.num_chains, potential.dim, dtype=torch.long, device=theta.device)

    def temperature_schedule(self) -> tuple[float, float, float]:
        """A constant inverse temperature :math:`1/T`."""
        return 1.0 / self._temperature, 1.0, math.inf

    def first_pruning(self) -> int:
        """The first iteration at which a group can be pruned: the first E-step, then ``prune_patience``
        E-steps below the hard threshold."""
        return (int(self.rule.em_warmup) + int(self.rule.prune_patience) - 1) * self._em_every + 1

    def notes(self) -> dict:
        notes = super().notes()
        if self.options.schedule == "cyclical":
            notes["iterations_per_draw"] = f"{self.thin} cycle(s): draws at cycle ends"
        if self._keep is not None and self._k:
            first = self.first_pruning()
            notes["first_pruning_iteration"] = first
            if self._k < first:
                warnings.warn(f"{type(self).__name__}: the run ended at iteration {self._k}, before any group could "
                              f"be pruned (first E-step at iteration {int(self.rule.em_warmup) * self._em_every + 1}, "
                              f"then prune_patience={self.rule.prune_patience} E-steps below hard_threshold: "
                              f"iteration {first}), so the mask keeps every input; run more iterations "
                              f"(warmup_steps of at least {first})")
            else:
                self._warn_undecided()
            if self._last_theta is not None:
                notes["pruned_with_signal"] = self._check_pruned(self._last_theta)
        return notes

    def _warn_undecided(self) -> None:
        """One line per grouped site where, at the end, some groups are neither pruned nor in the slab (their
        mean w^2 between the thresholds at the last E-step): the selection of those inputs is not finished."""
        for site, slab in zip(self._sites, self._slab):
            active, in_slab = self._group_counts(site, slab)
            undecided = int((active - in_slab).max())
            if undecided:
                warnings.warn(f"{type(self).__name__}: {site.name}: at the end {undecided} group(s) are neither "
                              f"pruned nor in the slab (mean w^2 between the hard and the soft threshold): their "
                              f"selection is not finished; run more iterations (or give more rows) before reading "
                              f"the mask")

    def _check_pruned(self, theta: Tensor) -> dict[str, list[list[int]]]:
        """The groups pruned at the end whose weights the data still pull away from zero
        (:func:`~bnnzoo.inference.group_em.pruned_score_test` on :data:`SCORE_BATCHES` batches of the training
        rows at the last draw, Bonferroni over each chain's pruned groups at level :data:`SCORE_LEVEL`), per
        grouped site and chain; one warning per site that has any."""
        x, y = self.potential.x, self.potential.y
        k = min(SCORE_BATCHES, x.shape[0])
        edges = [round(i * x.shape[0] / k) for i in range(k + 1)]
        columns = torch.cat([torch.arange(self.potential.dim, device=theta.device)[s.index] for s in self._sites])
        scores = torch.stack([log_likelihood_and_grad(self.potential, theta, x[a:b], y[a:b])[1][:, columns]
                              for a, b in zip(edges[:-1], edges[1:])])
        found, start = {}, 0
        for site in self._sites:
            size = math.prod(site.shape)
            site_scores = self._groups(scores[..., start:start + size], site)  # [K, C, G, p]
            start += size
            pruned = ~self._groups(self._keep[:, site.index], site).any(-1)  # [C, G]
            p_value = pruned_score_test(site_scores)[1]
            level = SCORE_LEVEL / pruned.sum(-1, keepdim=True).clamp_min(1)
            flagged = pruned & (p_value < level)
            found[site.name] = [torch.nonzero(row).flatten().tolist() for row in flagged]
            if flagged.any():
                chains = "; ".join(f"chain {c}: group(s) {', '.join(map(str, g))}"
                                   for c, g in enumerate(found[site.name]) if g)
                warnings.warn(f"{type(self).__name__}: {site.name}: pruned group(s) that the data still pull away "
                              f"from zero at the end ({chains}; score test at level {SCORE_LEVEL:g} over the pruned "
                              f"groups): they were likely pruned before their effect was learned, so the mask "
                              f"misses them; rerun with a larger prune_patience or em_warmup (or a lower "
                              f"hard_threshold)")
        return found

    def _groups(self, x: Tensor, site: GroupSite) -> Tensor:
        """``[..., C, site size]`` -> ``[..., C, groups, weights per group]`` (groups in the order of the
        site's dims outside a group, as ``pruning_mask`` reads them)."""
        lead, rank = x.shape[:-1], len(site.shape)
        between = [d for d in range(rank) if d - rank not in site.within]
        inside = [d for d in range(rank) if d - rank in site.within]
        x = x.reshape(lead + site.shape).permute(*range(len(lead)), *(len(lead) + d for d in between + inside))
        return x.reshape(lead + (math.prod(site.shape[d] for d in between), -1))

    # ------------------------------------------------------------- one step
    def sg_parts(self) -> SGParts:
        """Paper 004's update (:class:`GroupSparseDynamics`), the E-step beside it (:class:`GroupEM`),
        the mean-loss force (:class:`MeanLossForce`)."""
        return SGParts(GroupSparseDynamics(), (GroupEM(),), force=MeanLossForce())

    def _site_view(self, x: Tensor, site: GroupSite) -> Tensor:
        return x[:, site.index].reshape((self.num_chains,) + site.shape)

    def _e_step(self, theta: Tensor) -> None:
        for site, slab, spike, soft, hard in zip(self._sites, self._slab, self._spike, self._soft, self._hard):
            decay, keep, below = guarded_e_step(self._site_view(theta, site), site.within,
                                                self._site_view(self._keep, site), self._site_view(self._below, site),
                                                soft, hard, slab, spike, self.rule.prune_patience)
            self._decay[:, site.index] = decay.reshape(self.num_chains, -1)
            self._keep[:, site.index] = keep.reshape(self.num_chains, -1)
            self._below[:, site.index] = below.reshape(self.num_chains, -1)

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
        self._last_theta = theta  # the score test of the pruned groups at the end (notes())
        keep = torch.cat([self._keep[:, s.index] for s in self._sites], -1)
        stats = {"sparsity": (~keep).to(torch.get_default_dtype()).mean(-1)}
        for site, slab in zip(self._sites, self._slab):
            stats[f"active_groups[{site.name}]"], stats[f"slab_groups[{site.name}]"] = self._group_counts(site, slab)
        return stats

    def final_state(self) -> dict:
        extras = super().final_state()
        if self._keep is not None:
            extras["pruning_mask"] = {s.name: self._site_view(self._keep, s).cpu().numpy() for s in self._sites}
        return extras


# ------------------------------------------------------------ the kernel's parts
class MeanLossForce(Force):
    """``(U estimate [C], g [C, D])``: g is the gradient of the mean minibatch negative
    log likelihood; U adds the model's log prior on a draw's last iteration only
    (before it, the likelihood part alone, enough to spot a non-finite step)."""

    def force(self, kernel, theta: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        potential = kernel.potential
        x, y, scale = minibatch_data(potential, rows)
        batch = potential.num_data if rows is None else rows.shape[-1]
        log_lik, grad, values, log_det = log_likelihood_and_grad(potential, theta, x, y)
        value = -scale * log_lik
        if kernel._last_iteration:
            with torch.no_grad(), pyro.validation_enabled(False):
                values = {k: v.detach() for k, v in values.items()}
                value = value - potential.log_prior(theta.detach(), values) - log_det.detach()
        return value, grad / -batch


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
    """Paper 004's update (module docstring) under the kernel's current decays and hard mask; the
    auxiliary state is ``(momentum, rho, noise)``."""

    def initial_aux(self, kernel, theta, step_size, inverse_temperature):
        return kernel.rule.initial_state(theta)

    def step(self, kernel, theta, aux, grad, step_size, inverse_temperature):
        momentum, rho, noise = aux
        theta, momentum, rho, noise = kernel.rule.update(theta, momentum, rho, noise, grad, kernel._decay, step_size,
                                                         1.0 / inverse_temperature, kernel.num_data, kernel._keep)
        return theta, (momentum, rho, noise)


class GroupEM(SGComponent):
    """The group E-step beside the loop: once per ``em_every`` iterations after ``em_warmup`` of them,
    before the update, the kernel's decays, hard mask and pruning guard from the current weights."""

    def before_update(self, kernel, theta: Tensor) -> None:
        if em_due(kernel._k, kernel._em_every, kernel.rule.em_warmup):
            kernel._e_step(theta)
