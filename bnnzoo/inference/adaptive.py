r"""SGLD-SA and SGHMC-SA: SG-MCMC with stochastic approximation of the
spike-and-slab hyperparameters (paper 001; engines ``"sgld_sa"``, ``"sghmc_sa"``).

The weights of a *sparse layer* (a site whose prior is
:class:`~bnnzoo.models.SpikeAndSlab`) have the Gaussian-Laplace spike-and-slab prior

.. math::
    \beta_j \mid \gamma_j \sim (1-\gamma_j)\,\mathrm{Laplace}(0, \sigma v_0) + \gamma_j\,N(0, \sigma^2 v_1),\quad
    \gamma_j \sim \mathrm{Bernoulli}(\delta),\ \delta\sim\mathrm{Beta}(a, b),\
    \sigma^2\sim\mathrm{IG}(\nu/2, \nu\lambda/2).

Other sites keep the model's own priors. The weights are sampled by SGLD or
SGHMC; the latent variables :math:`\theta = (\rho, \kappa_0, \kappa_1, \sigma, \delta)`
are *not* sampled but adapted by stochastic approximation, each as
:math:`x \leftarrow (1-\omega_k)x + \omega_k\tilde x` (:func:`sa_update`):

1. :math:`\tilde\rho_j = a_j/(a_j + b_j)`, :math:`a_j = N(\beta_j; 0, \sigma^2 v_1)\,\delta`,
   :math:`b_j = \mathrm{Laplace}(\beta_j; 0, \sigma v_0)(1-\delta)` (:func:`inclusion_probability`);
2. :math:`\tilde\kappa_0 = (1-\rho)/v_0`, :math:`\tilde\kappa_1 = \rho/v_1`;
3. :math:`\tilde\sigma = (R_b + \sqrt{R_b^2 + 4R_aR_c})/(2R_a)` (:func:`sigma_root`) with
   :math:`R_b = \sum\kappa_0|\beta|` and, for regression,
   :math:`R_a = N + p + \nu`, :math:`R_c = \tfrac{N}{n}\mathrm{RSS}_{batch} + \sum\kappa_1\beta^2 + \nu\lambda`;
   otherwise :math:`R_a = p + \nu + 2`, :math:`R_c = \sum\kappa_1\beta^2 + \nu\lambda`;
4. :math:`\tilde\delta = (\sum_j\rho_j + a - 1)/(a + b + p - 2)` (:func:`delta_target`).

The sampler's force on a sparse weight replaces the spike-and-slab density's
gradient by :math:`\kappa_1\beta/\sigma^2 + \kappa_0\,\mathrm{sign}(\beta)/\sigma`
(:func:`spike_slab_force`), plus the :math:`N/n`-scaled minibatch gradient of the
negative log likelihood. The SA weight is
:math:`\omega_k = \min(\omega_0, A/(k + B)^{c})` (:func:`sa_weight`; the paper's
regression uses A = 10, B = 1000, c = 0.7); ``mode="em"`` sets
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
sparse deep learning", NeurIPS, Sec. 3 and Algorithm 1; ``ALGORITHMS.md`` section 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyro
import torch

from ..results import Draws
from ..models.likelihoods import GaussianLikelihood
from ..models.priors import SpikeAndSlab, spike_slab_log_density
from .base import check_positive_option
from .engines import engine
from .potential import BNNPotential
from .sgmcmc import SGHMC, SGLD, run_engine

__all__ = [
    "SGHMCSA", "SGLDSA", "SpikeSlabState", "delta_target", "inclusion_probability", "log_prior_except",
    "sa_update", "sa_weight", "sigma_root", "sparse_sites", "spike_slab_force",
]

Tensor = torch.Tensor
MODES = ("sa", "em")
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# ------------------------------------------------------------ pure pieces
def inclusion_probability(beta: Tensor, sigma: Tensor, delta: Tensor, v0: float, v1: float) -> Tensor:
    r""":math:`\tilde\rho = a/(a+b)`, :math:`a = \delta N(\beta; 0, \sigma^2 v_1)`,
    :math:`b = (1-\delta)\mathrm{Laplace}(\beta; 0, \sigma v_0)` (paper 001, eq. 12).

    ``beta`` ``[C, p]``; ``sigma``, ``delta`` ``[C]`` (per chain).
    """
    sigma, delta = sigma.unsqueeze(-1), delta.unsqueeze(-1)
    slab_sd, spike_scale = sigma * math.sqrt(v1), sigma * v0
    log_a = torch.log(delta) - 0.5 * (beta / slab_sd) ** 2 - torch.log(slab_sd) - _HALF_LOG_2PI
    log_b = torch.log1p(-delta) - beta.abs() / spike_scale - torch.log(2 * spike_scale)
    return torch.sigmoid(log_a - log_b)


def sigma_root(r_a: Tensor, r_b: Tensor, r_c: Tensor) -> Tensor:
    r"""The positive root of :math:`R_a\sigma^2 - R_b\sigma - R_c = 0`:
    :math:`(R_b + \sqrt{R_b^2 + 4R_aR_c})/(2R_a)` (paper 001, eq. 14)."""
    return (r_b + torch.sqrt(r_b * r_b + 4 * r_a * r_c)) / (2 * r_a)


def delta_target(rho: Tensor, a: float, b: float) -> Tensor:
    r""":math:`\tilde\delta = (\sum_j\rho_j + a - 1)/(a + b + p - 2)` per chain (paper 001, eq. 15),
    kept inside (0, 1)."""
    p = rho.shape[-1]
    delta = (rho.sum(-1) + a - 1) / (a + b + p - 2)
    info = torch.finfo(rho.dtype)
    return delta.clamp(info.tiny, 1 - info.eps)


def spike_slab_force(beta: Tensor, kappa0: Tensor, kappa1: Tensor, sigma: Tensor) -> Tensor:
    r"""The SA prior force :math:`\kappa_1\beta/\sigma^2 + \kappa_0\,\mathrm{sign}(\beta)/\sigma`
    on a sparse layer's weights ``[C, p]`` (``sigma`` ``[C]``): the gradient of
    :math:`\kappa_0|\beta|/\sigma + \kappa_1\beta^2/(2\sigma^2)`."""
    sigma = sigma.unsqueeze(-1)
    return kappa1 * beta / (sigma * sigma) + kappa0 * torch.sign(beta) / sigma


def sa_weight(k: int, scale: float = 10.0, offset: float = 1000.0, power: float = 0.7,
              maximum: float = 1.0) -> float:
    r"""SA step size :math:`\omega_k = \min(\omega_0, A/(k + B)^{c})`."""
    return min(maximum, scale / (k + offset) ** power)


@dataclass
class SpikeSlabState:
    """The SA latent variables of every sparse layer, per chain.

    ``rho``, ``kappa0``, ``kappa1``: one ``[C, p_l]`` tensor per layer;
    ``sigma``, ``delta``: ``[C, L]``.
    """

    rho: list[Tensor]
    kappa0: list[Tensor]
    kappa1: list[Tensor]
    sigma: Tensor
    delta: Tensor

    @classmethod
    def initial(cls, num_chains: int, sizes: list[int], v0, v1, sigma, delta) -> "SpikeSlabState":
        """:math:`\\rho = \\delta`, :math:`\\kappa_0 = (1-\\rho)/v_0`, :math:`\\kappa_1 = \\rho/v_1`."""
        dtype = torch.get_default_dtype()
        rho = [torch.full((num_chains, p), float(d), dtype=dtype) for p, d in zip(sizes, delta)]
        return cls(rho, [(1 - r) / a for r, a in zip(rho, v0)], [r / b for r, b in zip(rho, v1)],
                   torch.tensor([list(map(float, sigma))] * num_chains, dtype=dtype),
                   torch.tensor([list(map(float, delta))] * num_chains, dtype=dtype))

    def where(self, keep_new: Tensor, old: "SpikeSlabState") -> "SpikeSlabState":
        """Per chain: this state where ``keep_new`` ``[C]``, else ``old``."""
        col = keep_new.unsqueeze(-1)
        pick = lambda new, prev: torch.where(col, new, prev)  # noqa: E731
        return SpikeSlabState([pick(n, o) for n, o in zip(self.rho, old.rho)],
                              [pick(n, o) for n, o in zip(self.kappa0, old.kappa0)],
                              [pick(n, o) for n, o in zip(self.kappa1, old.kappa1)],
                              pick(self.sigma, old.sigma), pick(self.delta, old.delta))


def sa_update(state: SpikeSlabState, betas: list[Tensor], omega: float, v0: list[float], v1: list[float],
              a: float, b: list[float], nu: float, lam: float, shared_sigma: bool,
              num_data: int | None = None, scaled_rss: Tensor | None = None) -> SpikeSlabState:
    r"""One stochastic-approximation step of every latent variable (module docstring, 1-4).

    Parameters
    ----------
    state : SpikeSlabState
        :math:`\theta^{(k-1)}`.
    betas : list of Tensor
        The sparse layers' current weights, ``[C, p_l]`` each.
    omega : float
        :math:`\omega_k` (1: the EM update).
    v0, v1, b : list of float
        Per layer.
    a, nu, lam : float
        Beta(a, b) prior on delta; IG(nu/2, nu*lam/2) prior on sigma^2.
    shared_sigma : bool
        One sigma for every layer (columns of ``state.sigma`` kept equal).
    num_data, scaled_rss : optional
        Regression with the noise variance sigma^2: N and :math:`\tfrac{N}{n}\mathrm{RSS}_{batch}` ``[C]``.

    Returns
    -------
    SpikeSlabState
        :math:`\theta^{(k)}`.
    """
    mix = lambda old, target: (1 - omega) * old + omega * target  # noqa: E731
    rho = [mix(r, inclusion_probability(beta, state.sigma[:, i], state.delta[:, i], v0[i], v1[i]))
           for i, (r, beta) in enumerate(zip(state.rho, betas))]
    kappa0 = [mix(k, (1 - r) / v0[i]) for i, (k, r) in enumerate(zip(state.kappa0, rho))]
    kappa1 = [mix(k, r / v1[i]) for i, (k, r) in enumerate(zip(state.kappa1, rho))]
    r_b = torch.stack([(k * beta.abs()).sum(-1) for k, beta in zip(kappa0, betas)], -1)  # [C, L]
    r_c = torch.stack([(k * beta * beta).sum(-1) for k, beta in zip(kappa1, betas)], -1)
    p = torch.tensor([beta.shape[-1] for beta in betas], dtype=r_b.dtype)
    if scaled_rss is not None:  # regression: sigma^2 is also the noise variance
        r_a = num_data + p.sum() + nu
        sigma_new = sigma_root(r_a, r_b.sum(-1), scaled_rss + r_c.sum(-1) + nu * lam)
        sigma_new = sigma_new.unsqueeze(-1).expand_as(state.sigma)
    elif shared_sigma:
        sigma_new = sigma_root(p.sum() + nu + 2, r_b.sum(-1), r_c.sum(-1) + nu * lam)
        sigma_new = sigma_new.unsqueeze(-1).expand_as(state.sigma)
    else:
        sigma_new = sigma_root(p + nu + 2, r_b, r_c + nu * lam)
    delta_new = torch.stack([delta_target(r, a, b[i]) for i, r in enumerate(rho)], -1)
    return SpikeSlabState(rho, kappa0, kappa1, mix(state.sigma, sigma_new), mix(state.delta, delta_new))


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


def minibatch_data(potential: BNNPotential, rows: Tensor | None) -> tuple[Tensor, Tensor, float]:
    """``(x, y, N/B)`` of a minibatch (rows ``[B]`` or ``[C, B]``; None: the full data)."""
    if rows is None:
        return potential.x, potential.y, 1.0
    return (*potential.minibatch(rows), potential.num_data / rows.shape[-1])


# ------------------------------------------------------------ the kernels
class AdaptiveSpikeSlab:
    """Mixin that turns an SG-MCMC kernel into its ``-SA`` variant (module docstring).

    Parameters
    ----------
    mode : str
        ``"sa"`` (stochastic approximation with :math:`\\omega_k`) or ``"em"`` (:math:`\\omega_k = 1`).
    sa_scale, sa_offset, sa_power, sa_max : float
        :math:`\\omega_k = \\min(\\omega_0, A/(k + B)^c)`: A, B, c and :math:`\\omega_0`.
    beta_a, beta_b : float
        Beta(a, b) prior on delta (``beta_b=None``: b = p, each layer's size, as in the paper).
    ig_nu, ig_lambda : float
        InvGamma(nu/2, nu*lambda/2) prior on sigma^2.
    shared_sigma : bool, optional
        One sigma for all sparse layers (forced for regression with a learned noise).
    """

    def __init__(self, model=None, potential=None, mode: str = "sa", sa_scale: float = 10.0,
                 sa_offset: float = 1000.0, sa_power: float = 0.7, sa_max: float = 1.0, beta_a: float = 1.0,
                 beta_b: float | None = None, ig_nu: float = 1.0, ig_lambda: float = 1.0,
                 shared_sigma: bool | None = None, **options):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: choose one of {', '.join(MODES)}")
        for name, value in (("sa_scale", sa_scale), ("sa_power", sa_power), ("sa_max", sa_max),
                            ("beta_a", beta_a), ("ig_nu", ig_nu), ("ig_lambda", ig_lambda)):
            check_positive_option(name, value)
        if beta_b is not None:
            check_positive_option("beta_b", beta_b)
        if isinstance(sa_offset, bool) or not isinstance(sa_offset, (int, float)) or sa_offset < 0:
            raise ValueError(f"sa_offset must be a number >= 0, got {sa_offset!r}")
        if sa_max > 1:
            raise ValueError(f"sa_max must be in (0, 1], got {sa_max!r}")
        self.mode = mode
        self.sa_scale, self.sa_offset, self.sa_power, self.sa_max = sa_scale, sa_offset, sa_power, sa_max
        self.beta_a, self.beta_b, self.ig_nu, self.ig_lambda = beta_a, beta_b, ig_nu, ig_lambda
        self.shared_sigma = shared_sigma
        super().__init__(model, potential, **options)

    # ---------------------------------------------------------------- state
    def _reset(self) -> None:
        super()._reset()
        self._sa: SpikeSlabState | None = None
        self._omega = 0.0

    def prepare(self, theta: Tensor) -> None:
        super().prepare(theta)
        self._sites = sparse_sites(self.potential, type(self).__name__)
        likelihood = self.potential.model.likelihood
        self._regression = isinstance(likelihood, GaussianLikelihood) and likelihood.learned
        if self._regression and self.shared_sigma is False:
            raise ValueError("shared_sigma=False: with a learned Gaussian noise, sigma^2 is the noise variance "
                             "shared by every sparse layer (paper 001)")
        self._shared = self._regression or bool(self.shared_sigma)
        priors = [s.prior for s in self._sites]
        sigmas = [p.sigma for p in priors]
        if self._shared and len(set(sigmas)) > 1:
            raise ValueError(f"a shared sigma needs every SpikeAndSlab prior to start from the same sigma, "
                             f"got {dict(zip((s.name for s in self._sites), sigmas))}")
        self._v0 = [p.v0 for p in priors]
        self._v1 = [p.v1 for p in priors]
        self._b = [float(self.beta_b if self.beta_b is not None else s.size) for s in self._sites]
        if min(self._b[i] + self.beta_a + s.size - 2 for i, s in enumerate(self._sites)) <= 0:
            raise ValueError("beta_a + beta_b + p - 2 must be positive for every sparse layer")
        self._sa = SpikeSlabState.initial(self.num_chains, [s.size for s in self._sites], self._v0, self._v1,
                                          sigmas, [p.inclusion_prob for p in priors])
        self._noise_index = self.potential.slices["noise_var"] if self._regression else None
        # sites whose model prior the SA kernel leaves out: the sparse layers (the SA prior
        # replaces it) and the pinned noise variance (a hyperparameter, not sampled)
        self._skip_prior = {site.name for site in self._sites} | ({"noise_var"} if self._regression else set())

    def check_potential(self, potential) -> None:
        super().check_potential(potential)
        sparse_sites(potential, type(self).__name__)

    @property
    def state(self) -> SpikeSlabState:
        """The current hyperparameters (kernel state, not sampled)."""
        return self._sa

    def _noise_variance(self) -> Tensor:
        return self._sa.sigma[:, 0] ** 2

    # ------------------------------------------------------------- one step
    def force(self, theta: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        """Forward pass on the minibatch, SA update of the hyperparameters with the
        current weights (and RSS), then one backward pass under the new ones."""
        potential, model = self.potential, self.potential.model
        x, y, scale = minibatch_data(potential, rows)
        betas = [theta[:, s.index] for s in self._sites]
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad(), pyro.validation_enabled(False):
            values, log_det = potential.constrained_values(theta)
            f = model.apply(values, x)
            if self._regression:  # (N/B) RSS / 2: the likelihood up to 1/sigma^2 and constants
                lik = 0.5 * scale * ((y - f[..., 0]) ** 2).sum(-1)
            else:
                lik = -scale * model.log_likelihood(values, x, y, f=f).sum(-1)
            prior = -(log_prior_except(potential, values, self._skip_prior) + log_det)
            ok = torch.isfinite(lik) & torch.isfinite(prior)
            self._adapt(betas, 2 * lik.detach() if self._regression else None, ok)
            if self._regression:
                lik = lik / self._noise_variance()
            value = lik + prior
            (grad,) = torch.autograd.grad(value.sum(), theta)
        for i, (site, beta) in enumerate(zip(self._sites, betas)):
            grad[:, site.index] += spike_slab_force(beta, self._sa.kappa0[i], self._sa.kappa1[i], self._sa.sigma[:, i])
        if self._noise_index is not None:
            grad[:, self._noise_index] = 0.0  # pinned to sigma^2
        value = value.detach()
        if self._last_iteration:
            value = self._potential_value(value, betas, theta.detach())
        return value, grad

    def _adapt(self, betas: list[Tensor], scaled_rss: Tensor | None, ok: Tensor) -> None:
        """The SA step of iteration k > 1 (chains with a finite minibatch potential only)."""
        self._omega = 0.0
        if self._k <= 1:  # the first iteration moves under the initial hyperparameters
            return
        self._omega = 1.0 if self.mode == "em" else sa_weight(self._k, self.sa_scale, self.sa_offset,
                                                               self.sa_power, self.sa_max)
        new = sa_update(self._sa, betas, self._omega, self._v0, self._v1, self.beta_a, self._b, self.ig_nu,
                        self.ig_lambda, self._shared, self.num_data, scaled_rss)
        self._sa = new if bool(ok.all()) else new.where(ok, self._sa)

    def _potential_value(self, value: Tensor, betas: list[Tensor], theta: Tensor) -> Tensor:
        """Minibatch ``-log p(weights, y)`` under the current hyperparameters (indicator
        marginalised): ``value`` plus the likelihood's normalising term and the sparse
        layers' spike-and-slab densities; the pinned noise variance is no sampled
        parameter, so its log|Jacobian| (in ``value``) comes out."""
        if self._regression:
            value = value + 0.5 * self.num_data * torch.log(2 * math.pi * self._noise_variance())
            u = theta[:, self._noise_index][:, 0]
            bijection = self.potential.transforms["noise_var"].inv
            value = value + bijection.log_abs_det_jacobian(u, bijection(u))
        for i, (site, beta) in enumerate(zip(self._sites, betas)):
            sigma, delta = self._sa.sigma[:, i:i + 1], self._sa.delta[:, i:i + 1]
            density = spike_slab_log_density(beta, "laplace", sigma * site.prior.v0,
                                             sigma * math.sqrt(site.prior.v1), delta)
            value = value - density.sum(-1)
        return value

    def after_step(self, theta: Tensor) -> Tensor:
        theta = super().after_step(theta)
        if self._noise_index is not None:
            theta = theta.clone()
            pinned = self.potential.transforms["noise_var"](self._noise_variance())
            theta[:, self._noise_index] = pinned.unsqueeze(-1)
        return theta

    # ------------------------------------------------------------ reporting
    def draw_stats(self, theta: Tensor) -> dict[str, Tensor]:
        stats = {}
        for i, site in enumerate(self._sites):
            stats[f"sigma[{site.name}]"] = self._sa.sigma[:, i].clone()
            stats[f"delta[{site.name}]"] = self._sa.delta[:, i].clone()
        rho = torch.cat(self._sa.rho, -1)
        weights = torch.cat([theta[:, s.index] for s in self._sites], -1)
        stats["inclusion_prob_mean"] = rho.mean(-1)
        stats["sparsity"] = (weights == 0).to(rho.dtype).mean(-1)
        stats["sa_step_size"] = torch.full((self.num_chains,), float(self._omega))
        return stats

    def final_state(self) -> dict:
        extras = super().final_state()
        if self._sa is not None:
            extras["inclusion_prob"] = {s.name: r.reshape((self.num_chains,) + s.shape).numpy()
                                        for s, r in zip(self._sites, self._sa.rho)}
        return extras


class SGLDSA(AdaptiveSpikeSlab, SGLD):
    """SGLD-SA (paper 001, Algorithm 1): SGLD on the weights, stochastic approximation
    of the spike-and-slab hyperparameters; ``mode="em"`` is SGLD-EM.

    Options: :class:`AdaptiveSpikeSlab` and :class:`~bnnzoo.inference.sgmcmc.SGMCMCKernel`.

    Examples
    --------
    >>> from bnnzoo.models import BNN, zoo
    >>> kernel = SGLDSA(BNN(zoo.get("sparse_linear")), step_size=1e-3, schedule="polynomial", batch_size=50)
    >>> MCMC(kernel, num_samples=1000, warmup_steps=1000).run(x, y)
    >>> kernel.state.rho   # inclusion probabilities, one [C, p] tensor per sparse layer
    """


class SGHMCSA(AdaptiveSpikeSlab, SGHMC):
    """SGHMC-SA (paper 001): SGHMC on the weights, stochastic approximation of the
    spike-and-slab hyperparameters; ``mode="em"`` is SGHMC-EM.

    Options: :class:`AdaptiveSpikeSlab`, :class:`~bnnzoo.inference.sgmcmc.SGHMC`
    (``friction``, ``noise_estimate``) and :class:`~bnnzoo.inference.sgmcmc.SGMCMCKernel`.
    """


# ------------------------------------------------------------- the engines
@engine("sgld_sa")
def sgld_sa(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-4,
            mode: str = "sa", sa_scale: float = 10.0, sa_offset: float = 1000.0, sa_power: float = 0.7,
            sa_max: float = 1.0, beta_a: float = 1.0, beta_b: float | None = None, ig_nu: float = 1.0,
            ig_lambda: float = 1.0, shared_sigma: bool | None = None,
            schedule: str = "constant", decay_power: float = 1.0 / 3.0, decay_offset: float = 0.0,
            cycle_length: int | None = None, batch_size: int | None = None, shared_minibatch: bool = False,
            inverse_temperature: float = 1.0, annealing: float = 1.0, max_inverse_temperature: float = math.inf,
            thin: int = 1, prune: float | None = None, prune_decay: float = 0.99, prune_period: float = 50.0,
            prune_sites: list | None = None, chain_method: str = "vectorized", init_radius: float = 1.0) -> Draws:
    """SGLD-SA (mode="em": SGLD-EM): SGLD with stochastic approximation of spike-and-slab hyperparameters."""
    return run_engine(SGLDSA, locals())


@engine("sghmc_sa")
def sghmc_sa(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-5,
             friction: float = 0.1, noise_estimate: float | str = 0.0, noise_decay: float = 0.01,
             mode: str = "sa", sa_scale: float = 1.0, sa_offset: float = 1000.0, sa_power: float = 0.75,
             sa_max: float = 1.0, beta_a: float = 1.0, beta_b: float | None = None, ig_nu: float = 1.0,
             ig_lambda: float = 1.0, shared_sigma: bool | None = None,
             schedule: str = "constant", decay_power: float = 1.0 / 3.0, decay_offset: float = 0.0,
             cycle_length: int | None = None, batch_size: int | None = None, shared_minibatch: bool = False,
             inverse_temperature: float = 1.0, annealing: float = 1.0, max_inverse_temperature: float = math.inf,
             thin: int = 1, prune: float | None = None, prune_decay: float = 0.99, prune_period: float = 50.0,
             prune_sites: list | None = None, chain_method: str = "vectorized", init_radius: float = 1.0) -> Draws:
    """SGHMC-SA (mode="em": SGHMC-EM): SGHMC with stochastic approximation of spike-and-slab hyperparameters."""
    return run_engine(SGHMCSA, locals())
