r"""Stochastic approximation of the spike-and-slab hyperparameters (paper 001), as pure functions.

For each sparse layer's weights :math:`\beta` (``[C, p]``, per chain):

1. :math:`\tilde\rho_j = a_j/(a_j + b_j)`, :math:`a_j = N(\beta_j; 0, \sigma^2 v_1)\,\delta`,
   :math:`b_j = \mathrm{Laplace}(\beta_j; 0, \sigma v_0)(1-\delta)` (:func:`inclusion_probability`);
2. :math:`\tilde\kappa_0 = (1-\rho)/v_0`, :math:`\tilde\kappa_1 = \rho/v_1`;
3. :math:`\tilde\sigma = (R_b + \sqrt{R_b^2 + 4R_aR_c})/(2R_a)` (:func:`sigma_root`) with
   :math:`R_b = \sum\kappa_0|\beta|` and, for regression,
   :math:`R_a = N + p + \nu`, :math:`R_c = \tfrac{N}{n}\mathrm{RSS}_{batch} + \sum\kappa_1\beta^2 + \nu\lambda`;
   otherwise :math:`R_a = p + \nu + 2`, :math:`R_c = \sum\kappa_1\beta^2 + \nu\lambda`;
4. :math:`\tilde\delta = (\sum_j\rho_j + a - 1)/(a + b + p - 2)` (:func:`delta_target`);

each as :math:`x \leftarrow (1-\omega_k)x + \omega_k\tilde x` (:func:`sa_update`), with
:math:`\omega_k = \min(\omega_0, A/(k + B)^{c})` (:func:`sa_weight`). The prior force on a
sparse weight is :func:`spike_slab_force`. Derivation and choices: ``docs/algorithms.md``
("SGLD-SA and SGHMC-SA"). The kernels are in :mod:`bnnzoo.inference.kernels.spike_slab_sa`.

References
----------
Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for
sparse deep learning", NeurIPS, Sec. 3 and Algorithm 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["SA_OFFSET_EPOCHS", "SA_OFFSET_ITERATIONS", "SpikeSlabState", "delta_target", "inclusion_probability",
           "sa_sequence_rule", "sa_update", "sa_weight", "sigma_root", "spike_slab_force"]

Tensor = torch.Tensor
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
#: ``sa_offset="auto"``: B = max(this many epochs, :data:`SA_OFFSET_ITERATIONS`) ...
SA_OFFSET_EPOCHS = 10
#: ... iterations: paper 001's B, the flat phase of both its SA sequences
SA_OFFSET_ITERATIONS = 1000


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


def sa_sequence_rule(epoch: int, power: float, paper_scale: float, warmup: int = 0) -> dict:
    r"""``sa_offset`` B and ``sa_scale`` A of :math:`\omega_k = \min(\omega_0, A/(k + B)^c)` from the data:
    ``epoch`` the iterations per epoch :math:`\lceil N/n\rceil`, ``power`` c, ``paper_scale`` the engine's
    A at paper 001's B = 1000 (10 for SGLD-SA, 1 for SGHMC-SA), ``warmup`` the warm-up iterations (0: not known).

    * B = max(10 epochs, 1000 iterations), at most half the warm-up when there is one: :math:`\omega_k`
      stays within :math:`2^{-c}` of its start for the first B iterations (the flat phase) and decays as
      :math:`k^{-c}` after it;
    * A = A_paper (B/1000)^c: the paper's sequence stretched in time by B/1000,
      :math:`\omega_k = A_{\text{paper}}/(1000 + 1000k/B)^c`, so the start weight stays the paper's.

    At the paper's sizes (regression N = 100, n = 50; MNIST N = 60000, n = 1000) B = 1000 and A is the
    paper's. Derivation: ``docs/algorithms.md``, "Data-scaled defaults".
    """
    offset = max(SA_OFFSET_EPOCHS * int(epoch), SA_OFFSET_ITERATIONS)
    if warmup > 0:
        offset = max(1, min(offset, int(warmup) // 2))
    return {"sa_offset": offset, "sa_scale": paper_scale * (offset / SA_OFFSET_ITERATIONS) ** power}


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
    def initial(cls, num_chains: int, sizes: list[int], v0, v1, sigma, delta,
                device: torch.device | None = None) -> "SpikeSlabState":
        """:math:`\\rho = \\delta`, :math:`\\kappa_0 = (1-\\rho)/v_0`, :math:`\\kappa_1 = \\rho/v_1`, on
        ``device`` (None: torch's default) in torch's default dtype."""
        like = {"dtype": torch.get_default_dtype(), "device": device}
        rho = [torch.full((num_chains, p), float(d), **like) for p, d in zip(sizes, delta)]
        return cls(rho, [(1 - r) / a for r, a in zip(rho, v0)], [r / b for r, b in zip(rho, v1)],
                   torch.tensor([list(map(float, sigma))] * num_chains, **like),
                   torch.tensor([list(map(float, delta))] * num_chains, **like))

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
    p = torch.tensor([beta.shape[-1] for beta in betas], dtype=r_b.dtype, device=r_b.device)
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


