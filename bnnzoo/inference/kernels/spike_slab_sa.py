r"""SGLD-SA and SGHMC-SA: SG-MCMC with stochastic approximation of the
spike-and-slab hyperparameters (paper 001; engines ``"sgld_sa"``, ``"sghmc_sa"``).

The update rules are pure functions in :mod:`bnnzoo.inference.stochastic_approximation`;
:class:`SpikeSlabAdaptation` is the component that applies them beside the SG-MCMC driver's loop,
held by both kernels with SGLD's or SGHMC's dynamics.

The weights of a *sparse layer* (a site whose prior is
:class:`~bnnzoo.models.SpikeAndSlab`) have the Gaussian-Laplace spike-and-slab prior

.. math::
    \beta_j \mid \gamma_j \sim (1-\gamma_j)\,\mathrm{Laplace}(0, \sigma v_0) + \gamma_j\,N(0, \sigma^2 v_1),\quad
    \gamma_j \sim \mathrm{Bernoulli}(\delta),\ \delta\sim\mathrm{Beta}(a, b),\
    \sigma^2\sim\mathrm{IG}(\nu/2, \nu\lambda/2).

Other sites keep the model's own priors. The weights are sampled by SGLD or
SGHMC; the latent variables :math:`\theta = (\rho, \kappa_0, \kappa_1, \sigma, \delta)`
are *not* sampled but adapted by stochastic approximation
(:mod:`bnnzoo.inference.stochastic_approximation`, steps 1-4 and :func:`sa_update`).

The sampler's force on a sparse weight replaces the spike-and-slab density's
gradient by :math:`\kappa_1\beta/\sigma^2 + \kappa_0\,\mathrm{sign}(\beta)/\sigma`
(:func:`spike_slab_force`), plus the :math:`N/n`-scaled minibatch gradient of the
negative log likelihood. The SA weight is
:math:`\omega_k = \min(\omega_0, A/(k + B)^{c})` (:func:`sa_weight`; the paper's
regression uses A = 10, B = 1000, c = 0.7). ``sa_offset="auto"`` and ``sa_scale="auto"`` set B and A
from the iterations per epoch and the warm-up (:func:`sa_sequence_rule`: the paper's numbers at
its sizes; ``docs/algorithms.md``, "Data-scaled defaults"); ``mode="em"`` sets
:math:`\omega_k = 1` (the paper's SGLD-EM baseline). At iteration k the kernel
first adapts :math:`\theta` to the current weights :math:`\beta^{(k)}` (with
:math:`\mathrm{RSS}` of this iteration's minibatch), then moves
:math:`\beta^{(k)} \to \beta^{(k+1)}` under :math:`\theta^{(k)}`; the first
iteration moves under the initial :math:`\theta`. This is Algorithm 1 of the
paper with the SA step placed before the next sampling step, so one gradient
pass per iteration serves both.

What sigma is
-------------
* Gaussian likelihood with ``noise="learned"`` (regression, the paper's case):
  :math:`\sigma^2` is the noise variance *and* the prior scale, one value shared
  by every sparse layer; the likelihood uses :math:`\sigma^2` from the kernel
  state, and the model's ``noise_var`` site is pinned to it (its draws are the
  trajectory of :math:`\sigma^2`, not posterior draws).
* Classification, or a Gaussian likelihood with a *fixed* noise: :math:`\sigma`
  is the prior scale only, one per sparse layer (``shared_sigma=True``: one for
  all, with :math:`p = \sum_l p_l`), with the classification update.

Initial values come from each layer's ``SpikeAndSlab`` prior: :math:`\sigma`
(``sigma``), :math:`\delta` (``inclusion_prob``), :math:`v_0, v_1`; and
:math:`\rho = \delta`. Each chain adapts its own hyperparameters.

Per-draw statistics, besides SG-MCMC's (``step_size``, ``temperature``,
``lp``, ``diverging``): ``sigma[<site>]`` and ``delta[<site>]`` per sparse
layer (the values that produced the draw), ``inclusion_prob_mean`` (mean
:math:`\rho` over all sparse weights), ``sparsity`` (fraction of sparse weights
exactly zero, i.e. pruned) and ``sa_step_size`` (:math:`\omega_k`). ``lp`` is a
minibatch estimate of the log joint density of the weights and the data under the
current hyperparameters (spike-and-slab indicator marginalised; the pinned noise
variance, a hyperparameter, adds no prior term). The final inclusion probabilities
:math:`\rho` per weight are in ``Run.inclusion_prob`` (``[chain, *shape]``
per sparse site) and in the InferenceData group ``inclusion_prob``.

References
----------
Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for
sparse deep learning", NeurIPS, Sec. 3 and Algorithm 1; ``docs/algorithms.md`` ("SGLD-SA and SGHMC-SA").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import pyro
import torch

from ... import validation
from ...models.likelihoods import GaussianLikelihood
from ...models.priors import SpikeAndSlab, spike_slab_log_density
from ..potential import BNNPotential
from ..stochastic_approximation import (SA_OFFSET_ITERATIONS, SpikeSlabState, sa_sequence_rule, sa_update, sa_weight,
                                        spike_slab_force)
from ..options import Options, choice, flag, option, optional, positive
from .sghmc import SGHMCDynamics, SGHMCOptions
from .sgld import LangevinDynamics
from .sgmcmc import AUTO, Force, SGComponent, SGLDOptions, SGMCMCKernel, SGParts, auto_or, minibatch_data

__all__ = ["SAState", "SGHMCSA", "SGHMCSAOptions", "SGLDSA", "SGLDSAOptions", "SpikeSlabAdaptation", "SpikeSlabOptions",
           "log_prior_except", "sparse_sites", "spike_slab_parts"]

Tensor = torch.Tensor
MODES = ("sa", "em")


def _sa_max(name: str, value) -> None:
    validation.in_interval(name, value, 0, 1, low_open=True, high_open=False)


def _offset(name: str, value) -> None:
    validation.at_least(name, value, 0)


@dataclass(frozen=True)
class SpikeSlabOptions(Options):
    """The stochastic-approximation options of the SA kernels (mixed into their options)."""

    #: A of paper 001's regression sequence at its B = 1000 (the ``sa_scale="auto"`` rule)
    paper_sa_scale = 10.0

    mode: str = option("sa", "'sa' (stochastic approximation with omega_k) or 'em' (omega_k = 1)", choice(*MODES))
    sa_scale: float | str = option(AUTO, "omega_k = min(omega_0, A/(k + B)^c): A; auto: 10 (B/1000)^c, the paper's "
                                   "sequence stretched in time by B/1000", auto_or(positive))
    sa_offset: float | str = option(AUTO, "omega_k: B; auto: max(10 epochs, 1000 iterations), at most half the "
                                    "warm-up", auto_or(_offset))
    sa_power: float = option(0.7, "omega_k: c", positive)
    sa_max: float = option(1.0, "omega_k: omega_0, in (0, 1]", _sa_max)
    beta_a: float = option(1.0, "Beta(a, b) prior on delta: a", positive)
    beta_b: float | None = option(None, "Beta(a, b) prior on delta: b (None: each layer's size p)",
                                  optional(positive))
    ig_nu: float = option(1.0, "InvGamma(nu/2, nu lambda/2) prior on sigma^2: nu", positive)
    ig_lambda: float = option(1.0, "InvGamma(nu/2, nu lambda/2) prior on sigma^2: lambda", positive)
    shared_sigma: bool | None = option(None, "one sigma for all sparse layers (forced for learned-noise regression)",
                                       optional(flag))


@dataclass(frozen=True)
class SGLDSAOptions(SpikeSlabOptions, SGLDOptions):
    """Options of :class:`SGLDSA`: SGLD's and the SA options."""


@dataclass(frozen=True)
class SGHMCSAOptions(SpikeSlabOptions, SGHMCOptions):
    """Options of :class:`SGHMCSA`: SGHMC's and the SA options, with the slower SA steps
    paper 001 uses for its classification networks."""

    #: A of paper 001's classification sequence at its B = 1000 (the ``sa_scale="auto"`` rule)
    paper_sa_scale = 1.0

    sa_scale: float | str = option(AUTO, "omega_k = min(omega_0, A/(k + B)^c): A; auto: 1 (B/1000)^c, the paper's "
                                   "sequence stretched in time by B/1000", auto_or(positive))
    sa_power: float = option(0.75, "omega_k: c", positive)


@dataclass(frozen=True)
class SparseSite:
    """A sparse layer: a weight site with a Gaussian-Laplace ``SpikeAndSlab`` prior."""

    name: str
    index: slice
    shape: tuple[int, ...]
    prior: SpikeAndSlab

    @property
    def size(self) -> int:
        return self.index.stop - self.index.start


def sparse_sites(potential, kernel: str = "the spike-and-slab kernel") -> list[SparseSite]:
    """The sparse layers of a BNN potential; clear errors when there are none."""
    if not isinstance(potential, BNNPotential):
        raise ValueError(f"{kernel} needs a bnnzoo BNN model (got a {type(potential).__name__})")
    slices = potential.slices
    found = [SparseSite(s.name, slices[s.name], tuple(s.shape), s.elementwise)
             for s in potential.model.sites if isinstance(s.elementwise, SpikeAndSlab)]
    if not found:
        spec = potential.model.spec
        priors = ", ".join(f"{name}: {type(spec.prior_for(name)).__name__}" for name in spec.param_shapes())
        raise ValueError(f"{kernel} needs at least one weight with a SpikeAndSlab prior (the sparse layers); "
                         f"this model has none ({priors})")
    gaussian_spike = [s.name for s in found if s.prior.spike != "laplace"]
    if gaussian_spike:
        raise ValueError(f"{kernel} implements the Gaussian-Laplace spike-and-slab of paper 001; "
                         f"{', '.join(gaussian_spike)} has spike='gaussian' (use spike='laplace')")
    return found


def log_prior_except(potential: BNNPotential, values, skip: set[str]) -> Tensor:
    """Log prior density of every site of a BNN potential except those in ``skip``
    (the sparse layers, whose prior the SA replaces), batched ``[C]``."""
    total = 0.0
    for site in potential.model.sites:
        if site.name in skip:
            continue
        value = values[site.name]
        if site.elementwise is not None:  # iid prior on an unconstrained site
            lp = site.elementwise.log_density(value)
            total = total + lp.reshape(lp.shape[: lp.dim() - len(site.shape)] + (-1,)).sum(-1)
        else:
            total = total + potential.model.site_distribution(site, values).log_prob(value)
    return total


# ------------------------------------------------------------ the component
class SAState(NamedTuple):
    """The state of :class:`SpikeSlabAdaptation`: the hyperparameters (a
    :class:`~bnnzoo.inference.stochastic_approximation.SpikeSlabState`, chains leading; kernel
    state, not sampled) and ``omega``, the SA weight of the last iteration."""

    hyper: SpikeSlabState
    omega: float = 0.0


class SpikeSlabAdaptation(SGComponent, Force):
    """The spike-and-slab stochastic approximation (module docstring) as a part of an SG-MCMC
    kernel: the force on the weights under the current hyperparameters, with the SA step of the
    hyperparameters inside its forward pass (one gradient pass per iteration serves both), the
    learned noise variance pinned to sigma^2, and the statistics. Its configuration (the sparse
    layers, the priors' constants, the SA sequence) is set by :meth:`prepare`; its state is an
    :class:`SAState` in the sampler's state.

    Options: the kernel's :class:`SpikeSlabOptions`.
    """

    def check_potential(self, kernel, potential) -> None:
        sparse_sites(potential, type(kernel).__name__)

    def prepare(self, kernel, theta: Tensor) -> None:
        options, potential = kernel.options, kernel.potential
        self.potential, self.num_data, self.rule = potential, kernel.num_data, kernel.resolved
        self.sites = sparse_sites(potential, type(kernel).__name__)
        likelihood = potential.model.likelihood
        self.regression = isinstance(likelihood, GaussianLikelihood) and likelihood.learned
        if self.regression and options.shared_sigma is False:
            raise ValueError("shared_sigma=False: with a learned Gaussian noise, sigma^2 is the noise variance "
                             "shared by every sparse layer (paper 001)")
        self.shared = self.regression or bool(options.shared_sigma)
        priors = [s.prior for s in self.sites]
        self.sigmas = [p.sigma for p in priors]
        if self.shared and len(set(self.sigmas)) > 1:
            raise ValueError(f"a shared sigma needs every SpikeAndSlab prior to start from the same sigma, "
                             f"got {dict(zip((s.name for s in self.sites), self.sigmas))}")
        self.v0 = [p.v0 for p in priors]
        self.v1 = [p.v1 for p in priors]
        self.b = [float(options.beta_b if options.beta_b is not None else s.size) for s in self.sites]
        if min(self.b[i] + options.beta_a + s.size - 2 for i, s in enumerate(self.sites)) <= 0:
            raise ValueError("beta_a + beta_b + p - 2 must be positive for every sparse layer")
        self.noise_index = potential.slices["noise_var"] if self.regression else None
        # sites whose model prior the SA kernel leaves out: the sparse layers (the SA prior
        # replaces it) and the pinned noise variance (a hyperparameter, not sampled)
        self.skip_prior = {site.name for site in self.sites} | ({"noise_var"} if self.regression else set())

    def init(self, position: Tensor) -> SAState:
        """Each prior's sigma and delta, :math:`\\rho = \\delta`, for every chain."""
        priors = [s.prior for s in self.sites]
        return SAState(SpikeSlabState.initial(position.shape[0], [s.size for s in self.sites], self.v0, self.v1,
                                              self.sigmas, [p.inclusion_prob for p in priors],
                                              device=position.device))

    def resolve_auto(self, kernel, theta: Tensor) -> dict:
        """The SA sequence's ``"auto"`` options (:func:`sa_sequence_rule`, from the iterations per
        epoch ceil(N/n) and the warm-up); none with ``mode="em"`` (omega_k = 1)."""
        auto, opts = kernel.options.auto_fields(), kernel.options
        if opts.mode == "em" or not {"sa_scale", "sa_offset"} & set(auto):
            return {}
        epoch = math.ceil(kernel.num_data / (kernel.batch_size or kernel.num_data))
        rule = sa_sequence_rule(epoch, opts.sa_power, opts.paper_sa_scale, kernel._warmup_steps)
        if "sa_offset" not in auto:  # B given: A stretches the paper's sequence to it
            rule["sa_scale"] = opts.paper_sa_scale * (opts.sa_offset / SA_OFFSET_ITERATIONS) ** opts.sa_power
        return {k: v for k, v in rule.items() if k in auto}

    def curvature_point(self, kernel, theta: Tensor, directions: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The point of ``step_size="auto"``'s curvature: a learned noise variance is pinned at the initial
        sigma^2 of the sparse layers' prior (the value the SA starts from) and left out of the directions."""
        potential = kernel.potential
        likelihood = potential.model.likelihood
        if not (isinstance(likelihood, GaussianLikelihood) and likelihood.learned):
            return theta, directions
        sigma = sparse_sites(potential, type(kernel).__name__)[0].prior.sigma
        theta = theta.clone()
        index = potential.slices["noise_var"]
        variance = torch.tensor(sigma ** 2, dtype=theta.dtype, device=theta.device)
        theta[:, index] = potential.transforms["noise_var"](variance)
        directions = torch.ones(theta.shape[-1], dtype=torch.bool, device=theta.device)
        directions[index] = False
        return theta, directions

    @staticmethod
    def noise_variance(hyper: SpikeSlabState) -> Tensor:
        return hyper.sigma[:, 0] ** 2

    # ------------------------------------------------------------- one step
    def force(self, theta: Tensor, rows: Tensor | None, iteration: int, last: bool,
              own: SAState) -> tuple[Tensor, Tensor, SAState]:
        """Forward pass on the minibatch, SA update of the hyperparameters with the
        current weights (and RSS), then one backward pass under the new ones."""
        potential, model = self.potential, self.potential.model
        x, y, scale = minibatch_data(potential, rows)
        betas = [theta[:, s.index] for s in self.sites]
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad(), pyro.validation_enabled(False):
            values, log_det = potential.constrained_values(theta)
            f = model.apply(values, x)
            if self.regression:  # (N/B) RSS / 2: the likelihood up to 1/sigma^2 and constants
                lik = 0.5 * scale * ((y - f[..., 0]) ** 2).sum(-1)
            else:
                lik = -scale * model.log_likelihood(values, x, y, f=f).sum(-1)
            prior = -(log_prior_except(potential, values, self.skip_prior) + log_det)
            ok = torch.isfinite(lik) & torch.isfinite(prior)
            own = self.adapt(own, iteration, betas, 2 * lik.detach() if self.regression else None, ok)
            hyper = own.hyper
            if self.regression:
                lik = lik / self.noise_variance(hyper)
            value = lik + prior
            (grad,) = torch.autograd.grad(value.sum(), theta)
        for i, (site, beta) in enumerate(zip(self.sites, betas)):
            grad[:, site.index] += spike_slab_force(beta, hyper.kappa0[i], hyper.kappa1[i], hyper.sigma[:, i])
        if self.noise_index is not None:
            grad[:, self.noise_index] = 0.0  # pinned to sigma^2
        value = value.detach()
        if last:
            value = self.potential_value(hyper, value, betas, theta.detach())
        return value, grad, own

    def adapt(self, own: SAState, iteration: int, betas: list[Tensor], scaled_rss: Tensor | None,
              ok: Tensor) -> SAState:
        """The SA step of iteration k > 1 (chains with a finite minibatch potential only)."""
        if iteration <= 1:  # the first iteration moves under the initial hyperparameters
            return SAState(own.hyper, 0.0)
        opts, hyper = self.rule, own.hyper
        omega = 1.0 if opts.mode == "em" else sa_weight(iteration, opts.sa_scale, opts.sa_offset, opts.sa_power,
                                                        opts.sa_max)
        new = sa_update(hyper, betas, omega, self.v0, self.v1, opts.beta_a, self.b, opts.ig_nu, opts.ig_lambda,
                        self.shared, self.num_data, scaled_rss)
        return SAState(new if bool(ok.all()) else new.where(ok, hyper), omega)

    def potential_value(self, hyper: SpikeSlabState, value: Tensor, betas: list[Tensor], theta: Tensor) -> Tensor:
        """Minibatch ``-log p(weights, y)`` under the current hyperparameters (indicator
        marginalised): ``value`` plus the likelihood's normalising term and the sparse
        layers' spike-and-slab densities; the pinned noise variance is no sampled
        parameter, so its log|Jacobian| (in ``value``) comes out."""
        if self.regression:
            value = value + 0.5 * self.num_data * torch.log(2 * math.pi * self.noise_variance(hyper))
            u = theta[:, self.noise_index][:, 0]
            bijection = self.potential.transforms["noise_var"].inv
            value = value + bijection.log_abs_det_jacobian(u, bijection(u))
        for i, (site, beta) in enumerate(zip(self.sites, betas)):
            sigma, delta = hyper.sigma[:, i:i + 1], hyper.delta[:, i:i + 1]
            density = spike_slab_log_density(beta, "laplace", sigma * site.prior.v0,
                                             sigma * math.sqrt(site.prior.v1), delta)
            value = value - density.sum(-1)
        return value

    def after_step(self, own: SAState, theta: Tensor) -> Tensor:
        if self.noise_index is not None:
            theta = theta.clone()
            pinned = self.potential.transforms["noise_var"](self.noise_variance(own.hyper))
            theta[:, self.noise_index] = pinned.unsqueeze(-1)
        return theta

    # ------------------------------------------------------------ reporting
    def draw_stats(self, own: SAState, theta: Tensor) -> dict[str, Tensor]:
        stats, hyper = {}, own.hyper
        for i, site in enumerate(self.sites):
            stats[f"sigma[{site.name}]"] = hyper.sigma[:, i].clone()
            stats[f"delta[{site.name}]"] = hyper.delta[:, i].clone()
        rho = torch.cat(hyper.rho, -1)
        weights = torch.cat([theta[:, s.index] for s in self.sites], -1)
        stats["inclusion_prob_mean"] = rho.mean(-1)
        stats["sparsity"] = (weights == 0).to(rho.dtype).mean(-1)
        stats["sa_step_size"] = float(own.omega)
        return stats

    def final_state(self, own: SAState, num_chains: int) -> dict:
        return {"inclusion_prob": {s.name: r.reshape((num_chains,) + s.shape).cpu().numpy()
                                   for s, r in zip(self.sites, own.hyper.rho)}}


# ------------------------------------------------------------ the kernels
def spike_slab_parts(dynamics) -> SGParts:
    """The parts of an SA kernel: ``dynamics`` on the weights, the SA beside the loop and as the force."""
    adaptation = SpikeSlabAdaptation()
    return SGParts(dynamics, (adaptation,), force=adaptation)


class SGLDSA(SGMCMCKernel):
    """SGLD-SA (paper 001, Algorithm 1): SGLD on the weights (:class:`LangevinDynamics`), stochastic
    approximation of the spike-and-slab hyperparameters (:class:`SpikeSlabAdaptation`);
    ``mode="em"`` is SGLD-EM.

    Options: :class:`SGLDSAOptions`.

    Examples
    --------
    >>> from bnnzoo.models import BNN, zoo
    >>> kernel = SGLDSA(BNN(zoo.get("sparse_linear")), step_size=1e-3, schedule="polynomial", batch_size=50)
    >>> MCMC(kernel, num_samples=1000, warmup_steps=1000).run(x, y)
    >>> kernel.hyper.rho   # inclusion probabilities, one [C, p] tensor per sparse layer
    """

    Options = SGLDSAOptions

    def sg_parts(self) -> SGParts:
        return spike_slab_parts(LangevinDynamics())

    @property
    def hyper(self) -> SpikeSlabState | None:
        """The current hyperparameters (kernel state, not sampled; None before setup)."""
        own = self.component_state(SpikeSlabAdaptation)
        return None if own is None else own.hyper


class SGHMCSA(SGMCMCKernel):
    """SGHMC-SA (paper 001): SGHMC on the weights (:class:`SGHMCDynamics`), stochastic approximation
    of the spike-and-slab hyperparameters (:class:`SpikeSlabAdaptation`); ``mode="em"`` is SGHMC-EM.

    Options: :class:`SGHMCSAOptions`.
    """

    Options = SGHMCSAOptions

    def sg_parts(self) -> SGParts:
        return spike_slab_parts(SGHMCDynamics.from_options(self.options))

    @property
    def hyper(self) -> SpikeSlabState | None:
        """The current hyperparameters (kernel state, not sampled; None before setup)."""
        own = self.component_state(SpikeSlabAdaptation)
        return None if own is None else own.hyper
