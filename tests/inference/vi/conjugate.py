"""Test helpers of the VI tests: a conjugate Gaussian model whose mean-field optimum is
the exact posterior, and the gradient of one estimator's surrogate loss."""

import math

import torch
import torch.nn.functional as F

from bnnzoo.inference.vi import elbo_terms, gaussian_kl, surrogate_loss

DT = torch.float64


def _normal_log_prob(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


class ConjugateNormal:
    """``theta ~ N(0, s0^2 I_D)``, ``y_n ~ N(theta, noise^2 I_D)``: the posterior is
    a diagonal Gaussian, so the mean-field optimum is the exact posterior."""

    def __init__(self, num_data=50, dim=3, noise=1.0, prior_scale=1.0, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = 1.0 + noise * torch.randn(num_data, dim, generator=g, dtype=DT)
        self.noise, self.prior_scale = noise, prior_scale
        self.num_data, self.dim = num_data, dim

    def gaussian_prior_scale(self):
        return torch.full((self.dim,), self.prior_scale, dtype=DT)

    def log_prior_and_likelihood(self, theta, rows=None, skip_gaussian=False):
        prior = torch.zeros(theta.shape[:-1], dtype=DT) if skip_gaussian else \
            _normal_log_prob(theta, 0.0, self.prior_scale).sum(-1)
        y = self.y if rows is None else self.y[rows]
        lik = _normal_log_prob(y, theta.unsqueeze(-2), self.noise).sum((-1, -2))
        return prior, lik * self.num_data / y.shape[0]

    def __call__(self, theta):
        prior, lik = self.log_prior_and_likelihood(theta)
        return -(prior + lik)

    def posterior(self, kl_weight=1.0):
        """Mean and sd of the optimum of ``w KL + NLL`` (the posterior when w = 1): the
        tempered ``q ~ (p^w L)^(1/w)``, mean of the prior^w posterior, variance x w."""
        precision = kl_weight / self.prior_scale ** 2 + self.num_data / self.noise ** 2
        return self.y.sum(0) / self.noise ** 2 / precision, torch.full((self.dim,), (kl_weight / precision) ** 0.5)

    def neg_elbo(self, loc, rho):
        """Closed-form KL + E_q[NLL]."""
        scale = F.softplus(rho)
        nll = (((self.y - loc) ** 2).sum(0) + self.num_data * scale ** 2) / (2 * self.noise ** 2)
        const = self.num_data * (math.log(self.noise) + 0.5 * math.log(2 * math.pi))
        return gaussian_kl(loc, scale, self.prior_scale).sum() + nll.sum() + self.dim * const


def gradient(potential, loc, rho, eps, estimator, kl, baseline=0.0):
    loc = loc.clone().requires_grad_(True)
    rho = rho.clone().requires_grad_(True)
    prior_scale = None if kl == "mc" else potential.gaussian_prior_scale()
    terms = elbo_terms(loc, rho, eps, lambda t: potential.log_prior_and_likelihood(t, None, prior_scale is not None),
                       estimator, prior_scale)
    surrogate_loss(terms, 1.0, estimator, baseline).backward()
    return torch.cat([loc.grad, rho.grad])
