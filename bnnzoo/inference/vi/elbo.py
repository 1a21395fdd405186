r"""The negative ELBO of the mean-field guide and its gradient estimators.

KL weights of the minibatches of an epoch, the closed-form Gaussian KL, and the
per-particle ELBO terms wired for the reparameterisation, sticking-the-landing
and score-function (REINFORCE, with leave-one-out or running-mean baselines)
estimators. The objective and the estimators are described in :mod:`bnnzoo.inference.vi`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ...validation import count, is_real, one_of

Tensor = torch.Tensor

KL_WEIGHTINGS = ("uniform", "blundell", "none")
ESTIMATORS = ("reparam", "stl", "score")
KL_MODES = ("auto", "analytic", "mc")

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def inverse_softplus(x: float) -> float:
    """``rho`` with ``softplus(rho) = x`` (``x > 0``)."""
    return x + math.log(-math.expm1(-x))


def num_batches(num_data: int, batch_size: int | None) -> int:
    """Minibatches per epoch, ``M = ceil(N / B)`` (1 for full-batch training)."""
    return 1 if batch_size is None or batch_size >= num_data else -(-num_data // batch_size)


def kl_weights(num_batches: int, scheme: str | float = "uniform") -> Tensor:
    r"""KL weights :math:`\pi_1..\pi_M` of the minibatches of one epoch (float64, on the host: numbers
    for the optimisation loop).

    ``"uniform"``: :math:`1/M`; ``"blundell"``: :math:`2^{M-i}/(2^M-1)`;
    a number :math:`\lambda > 0`: :math:`\lambda^i/\sum_{k=1}^M\lambda^k`;
    ``"none"``: 1 each. All but ``"none"`` sum to 1.
    """
    count("num_batches", num_batches)
    check_kl_weighting(scheme)
    host = {"dtype": torch.float64, "device": "cpu"}
    i = torch.arange(1, num_batches + 1, **host)
    if scheme == "none":
        return torch.ones(num_batches, **host)
    if scheme == "uniform":
        return torch.full((num_batches,), 1.0 / num_batches, **host)
    lam = 0.5 if scheme == "blundell" else float(scheme)
    return torch.softmax(i * math.log(lam), 0)  # lambda^i / sum_k lambda^k, without overflow


def check_kl_weighting(scheme) -> None:
    """Raise a clear ValueError unless ``scheme`` is a known name or a positive number."""
    if not (is_real(scheme) and scheme > 0):
        one_of("kl_weighting", scheme, KL_WEIGHTINGS, error=_or_a_number)


def _or_a_number(field: str, detail: str) -> ValueError:
    return ValueError(f"{field} {detail}, or a positive number lambda (pi_i proportional to lambda^i)")


def gaussian_kl(loc: Tensor, scale: Tensor, prior_scale: Tensor | float) -> Tensor:
    r"""Elementwise closed-form KL of a Gaussian guide to a centred Gaussian prior:

    .. math:: \mathrm{KL}(N(\mu, \sigma^2) \,\|\, N(0, s^2)) = \log(s/\sigma) + (\sigma^2 + \mu^2)/(2s^2) - 1/2
    """
    prior_scale = torch.as_tensor(prior_scale, dtype=loc.dtype, device=loc.device)
    return torch.log(prior_scale / scale) + (scale ** 2 + loc ** 2) / (2 * prior_scale ** 2) - 0.5


def normal_log_prob(theta: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """Elementwise ``log N(theta; loc, scale^2)``."""
    return -0.5 * ((theta - loc) / scale) ** 2 - torch.log(scale) - _HALF_LOG_2PI


@dataclass
class ELBOTerms:
    """Per-particle pieces of the negative ELBO at draws ``theta = loc + scale * eps``.

    Attributes
    ----------
    kl_analytic : Tensor
        Scalar: closed-form KL of the Gaussian-prior coordinates (0 if none).
    kl_mc : Tensor
        ``[P]``: ``log q - log p`` of the other coordinates at each draw.
    nll : Tensor
        ``[P]``: negative log likelihood (of a minibatch scaled by N/B).
    log_q : Tensor or None
        ``[P]``: ``log q_phi(theta)`` of every coordinate with ``theta`` held
        fixed (score-function estimator only).
    """

    kl_analytic: Tensor
    kl_mc: Tensor
    nll: Tensor
    log_q: Tensor | None = None

    @property
    def kl(self) -> Tensor:
        """``[P]``: the KL estimate at each draw."""
        return self.kl_analytic + self.kl_mc


def elbo_terms(loc: Tensor, rho: Tensor, eps: Tensor, log_density: Callable[[Tensor], tuple[Tensor, Tensor]],
               estimator: str = "reparam", prior_scale: Tensor | None = None) -> ELBOTerms:
    r"""The KL and NLL estimates, wired so that autograd gives ``estimator``'s gradient.

    Parameters
    ----------
    loc, rho : Tensor ``[D]``
        Guide parameters, :math:`\sigma = \operatorname{softplus}(\rho)`.
    eps : Tensor ``[P, D]``
        Standard normal noise; :math:`\theta = \mu + \sigma\epsilon`.
    log_density : callable
        ``theta [P, D] -> (log_prior, log_lik)``, each ``[P]``; ``log_prior``
        covers only the coordinates where ``prior_scale`` is NaN.
    estimator : {"reparam", "stl", "score"}
        ``"stl"`` detaches ``loc`` and ``rho`` inside :math:`\log q`; ``"score"``
        detaches :math:`\theta` and returns :math:`\log q_\phi(\theta)` for REINFORCE.
    prior_scale : Tensor ``[D]``, optional
        Prior sd of the coordinates with a closed-form KL, NaN elsewhere; None: no closed form.
    """
    one_of("estimator", estimator, ESTIMATORS)
    scale = F.softplus(rho)
    theta = loc + scale * eps
    if estimator == "score":
        theta = theta.detach()
    q_loc, q_scale = (loc.detach(), scale.detach()) if estimator == "stl" else (loc, scale)
    analytic = None if prior_scale is None else torch.isfinite(prior_scale)
    if analytic is not None and bool(analytic.all()) and estimator != "score":
        kl_analytic = gaussian_kl(loc, scale, prior_scale).sum()  # nothing left to Monte Carlo
        log_q, log_q_mc = None, theta.new_zeros(theta.shape[:-1])
    else:
        log_q = normal_log_prob(theta, q_loc, q_scale)
        if analytic is not None and bool(analytic.any()):
            kl_analytic = gaussian_kl(loc[analytic], scale[analytic], prior_scale[analytic]).sum()
            log_q_mc = log_q[..., ~analytic].sum(-1)
        else:
            kl_analytic = loc.new_zeros(())
            log_q_mc = log_q.sum(-1)
    log_prior, log_lik = log_density(theta)
    return ELBOTerms(kl_analytic, log_q_mc - log_prior, -log_lik,
                     log_q.sum(-1) if estimator == "score" else None)


def surrogate_loss(terms: ELBOTerms, kl_weight: float = 1.0, estimator: str = "reparam",
                   baseline: float | Tensor | str = 0.0) -> Tensor:
    r"""A scalar whose gradient is the estimator's estimate of :math:`\nabla_\phi E_q[w\,\mathrm{KL} + \mathrm{NLL}]`.

    ``"reparam"`` / ``"stl"``: the particle mean of ``w * kl + nll`` (built by
    :func:`elbo_terms`). ``"score"``: :math:`w\,\mathrm{KL}_\text{analytic} +
    \operatorname{mean}_p[(f_p - b_p)\log q_\phi(\theta_p)]` with
    :math:`f = w\,\mathrm{KL}_\text{mc} + \mathrm{NLL}` held constant; ``baseline``
    is a number, or ``"loo"`` (each particle's baseline is the mean of the others).
    """
    one_of("estimator", estimator, ESTIMATORS)
    if estimator != "score":
        return (kl_weight * terms.kl + terms.nll).mean()
    if terms.log_q is None:
        raise ValueError("surrogate_loss: the score estimator needs terms built with estimator='score'")
    f = (kl_weight * terms.kl_mc + terms.nll).detach()
    if isinstance(baseline, str):
        if baseline != "loo":
            raise ValueError(f"baseline {baseline!r}: give a number or 'loo'")
        if f.numel() < 2:
            raise ValueError("baseline 'loo' needs num_particles >= 2")
        baseline = (f.sum() - f) / (f.numel() - 1)
    return kl_weight * terms.kl_analytic + ((f - baseline) * terms.log_q).mean()
