"""Known posteriors shared by the sampler tests, and the MCSE-based check.

Every sampler test follows one pattern: require enough effective draws first,
then require |estimate - truth| < 5 Monte Carlo standard errors (from ArviZ).
"""

from __future__ import annotations

from dataclasses import dataclass

import arviz as az
import numpy as np
import torch

from bnnzoo.models import BNNSpec, Dense, Gaussian, GaussianLikelihood


@dataclass
class LinearRegression:
    """Bayesian linear regression with an exact Gaussian posterior.

    ``y = x w + b + N(0, noise^2)``, ``w, b ~ N(0, prior_scale^2)``; posterior
    mean and covariance of ``(w_1..w_p, b)`` in closed form.
    """

    spec: BNNSpec
    x: torch.Tensor
    y: torch.Tensor
    mean: np.ndarray
    cov: np.ndarray

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))


def linear_regression(n: int = 40, p: int = 3, noise: float = 0.5, prior_scale: float = 1.0,
                      seed: int = 0) -> LinearRegression:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    w = rng.normal(size=p)
    y = x @ w + 0.3 + noise * rng.normal(size=n)
    design = np.hstack([x, np.ones((n, 1))])
    precision = design.T @ design / noise**2 + np.eye(p + 1) / prior_scale**2
    cov = np.linalg.inv(precision)
    mean = cov @ design.T @ y / noise**2
    spec = BNNSpec(layers=[Dense(1)], input_dim=p, prior=Gaussian(prior_scale),
                   likelihood=GaussianLikelihood(noise))
    dtype = torch.get_default_dtype()
    return LinearRegression(spec, torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype), mean, cov)


def regression_draws(samples: dict) -> np.ndarray:
    """``[chain, draw, p + 1]``: the weights then the bias of a one-layer BNN."""
    w = samples["layers.0.weight"]
    b = samples["layers.0.bias"]
    return np.concatenate([w.reshape(w.shape[:2] + (-1,)), b.reshape(b.shape[:2] + (-1,))], axis=-1)


def assert_moments(draws: np.ndarray, mean: np.ndarray, sd: np.ndarray, min_ess: float = 100.0,
                   k: float = 5.0) -> None:
    """``draws``: ``[chain, draw, dim]``. ESS first, then mean and sd within k MCSE."""
    draws = np.asarray(draws, dtype=float)
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        ess = float(az.ess(x))
        assert ess >= min_ess, f"coordinate {j}: ESS {ess:.0f} < {min_ess}"
        mcse_mean = float(az.mcse(x, method="mean"))
        mcse_sd = float(az.mcse(x, method="sd"))
        est_mean, est_sd = x.mean(), x.std(ddof=1)
        assert abs(est_mean - mean[j]) < k * mcse_mean, (
            f"coordinate {j}: mean {est_mean:.4f} vs exact {mean[j]:.4f} (MCSE {mcse_mean:.4f}, ESS {ess:.0f})")
        assert abs(est_sd - sd[j]) < k * mcse_sd, (
            f"coordinate {j}: sd {est_sd:.4f} vs exact {sd[j]:.4f} (MCSE {mcse_sd:.4f}, ESS {ess:.0f})")
