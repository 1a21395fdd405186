"""Known posteriors shared by the sampler tests, and the MCSE-based check.

Every sampler test follows one pattern: require enough effective draws first,
then require |estimate - truth| < 5 Monte Carlo standard errors (from ArviZ).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support import arviz_calls as az
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

    @property
    def mean_field_sd(self) -> np.ndarray:
        """The sds of the mean-field optimum: ``1 / sqrt(diag(precision))`` (its means are ``mean``)."""
        return 1.0 / np.sqrt(np.diag(np.linalg.inv(self.cov)))


def linear_regression(n: int = 40, p: int = 3, noise: float = 0.5, prior_scale: float = 1.0,
                      seed: int = 0, coef_scale: float = 1.0) -> LinearRegression:
    """``coef_scale`` multiplies the true coefficients (drawn N(0, 1)): larger ones put the
    posterior means farther from an optimiser's start in (-1, 1)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    w = coef_scale * rng.normal(size=p)
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


def assert_moments_agree(draws: np.ndarray, reference: np.ndarray, min_ess: float = 100.0,
                         k: float = 5.0) -> None:
    """Two samplers' draws ``[chain, draw, dim]`` of the same posterior (no closed
    form): ESS of both first, then means and sds agree within k combined MCSE,
    ``k * sqrt(mcse_a^2 + mcse_b^2)``."""
    draws, reference = np.asarray(draws, dtype=float), np.asarray(reference, dtype=float)
    for j in range(draws.shape[-1]):
        x, r = draws[..., j], reference[..., j]
        for name, v in (("draws", x), ("reference", r)):
            ess = float(az.ess(v))
            assert ess >= min_ess, f"coordinate {j}: {name} ESS {ess:.0f} < {min_ess}"
        for what, est in (("mean", lambda a: a.mean()), ("sd", lambda a: a.std(ddof=1))):
            mcse = np.hypot(float(az.mcse(x, method=what)), float(az.mcse(r, method=what)))
            assert abs(est(x) - est(r)) < k * mcse, (
                f"coordinate {j}: {what} {est(x):.4f} vs reference {est(r):.4f} (combined MCSE {mcse:.4f})")


def bayesian_lasso_gibbs(x: np.ndarray, y: np.ndarray, noise: float, scale: float, bias_scale: float,
                         num_chains: int = 200, num_draws: int = 1000, warmup: int = 200,
                         seed: int = 0) -> np.ndarray:
    """Reference draws ``[chain, draw, p + 1]`` (coefficients, then the bias) of the
    Bayesian lasso ``y = x w + b + N(0, noise^2)``, ``w_j ~ Laplace(0, scale)``,
    ``b ~ N(0, bias_scale^2)``, by Park and Casella's (2008) Gibbs sampler with the
    noise fixed: an exact sampler independent of any gradient-based one.

    Laplace with rate beta = 1/scale is a scale mixture, ``w_j | t_j ~ N(0, t_j)``,
    ``t_j ~ Exp(rate beta^2 / 2)``; the conditionals are
    ``(w, b) | t, y ~ N(A^-1 Z'y / noise^2, A^-1)``, ``A = Z'Z / noise^2 + diag(1/t, 1/bias_scale^2)``,
    ``Z = [x, 1]``, and ``1/t_j | w_j ~ InverseGaussian(beta / |w_j|, beta^2)``.
    """
    rng = np.random.default_rng(seed)
    n, p = x.shape
    z = np.hstack([x, np.ones((n, 1))])
    gram, zy = z.T @ z / noise**2, z.T @ y / noise**2
    beta = 1.0 / scale
    inv_t = np.full((num_chains, p), beta**2)
    out = np.empty((num_chains, num_draws, p + 1))
    for it in range(warmup + num_draws):
        prec = np.broadcast_to(gram, (num_chains, p + 1, p + 1)).copy()
        idx = np.arange(p)
        prec[:, idx, idx] += inv_t
        prec[:, p, p] += 1.0 / bias_scale**2
        chol = np.linalg.cholesky(prec)
        mean = np.linalg.solve(prec, np.broadcast_to(zy, (num_chains, p + 1))[..., None])[..., 0]
        noise_draw = np.linalg.solve(np.swapaxes(chol, -1, -2), rng.normal(size=(num_chains, p + 1, 1)))[..., 0]
        coef = mean + noise_draw
        inv_t = rng.wald(beta / np.maximum(np.abs(coef[:, :p]), 1e-300), beta**2)
        if it >= warmup:
            out[:, it - warmup] = coef
    return out


def gaussian_target(mean, cov):
    """A known Gaussian ``N(mean, cov)`` as a :class:`~bnnzoo.inference.FlatPotential`
    with no data (one site ``"x"`` of shape ``[d]``): ``U(x) = (x - mean)' P (x - mean) / 2``,
    ``P = cov^-1``, with its exact gradient. ``.mean`` and ``.cov`` hold the truth."""
    from torch.distributions.transforms import identity_transform

    from bnnzoo.inference import FlatPotential

    dtype = torch.get_default_dtype()

    class GaussianPotential(FlatPotential):
        def __init__(self):
            self.mean, self.cov = np.asarray(mean, dtype=float), np.asarray(cov, dtype=float)
            self.names, self.shapes = ["x"], {"x": (len(self.mean),)}
            self.transforms = {"x": identity_transform}
            self._mean = torch.tensor(self.mean, dtype=dtype)
            self._precision = torch.tensor(np.linalg.inv(self.cov), dtype=dtype)
            self._layout()

        def __call__(self, theta):
            d = theta - self._mean
            return 0.5 * ((d @ self._precision) * d).sum(-1)

        def value_and_grad(self, theta):
            d = theta - self._mean
            g = d @ self._precision
            return 0.5 * (g * d).sum(-1), g

    return GaussianPotential()


def assert_gaussian(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray, min_ess: float = 100.0,
                    k: float = 5.0) -> None:
    """Draws ``[chain, draw, d]`` of ``N(mean, cov)``: whitened by ``cov`` (``z = L^-1 (x - mean)``),
    every ``z_i`` and every ``(z_i + z_j)/sqrt 2`` must have mean 0 and sd 1 within k MCSE
    (:func:`assert_moments`), which checks the means, variances and correlations."""
    draws = np.asarray(draws, dtype=float)
    chol = np.linalg.cholesky(np.asarray(cov, dtype=float))
    z = np.linalg.solve(chol, (draws - mean)[..., None])[..., 0]
    d = z.shape[-1]
    pairs = [(z[..., i] + z[..., j]) / np.sqrt(2) for i in range(d) for j in range(i + 1, d)]
    both = np.concatenate([z, np.stack(pairs, -1)], -1) if pairs else z
    assert_moments(both, np.zeros(both.shape[-1]), np.ones(both.shape[-1]), min_ess=min_ess, k=k)


def run_kernel(kernel_cls, potential, num_chains, num_samples, warmup_steps, seed=0, **options):
    """Run a flat kernel under ``pyro.infer.MCMC`` (vectorized chains); returns it and its draws."""
    import pyro
    from pyro.infer import MCMC

    from bnnzoo.results import split_mcmc

    pyro.set_rng_seed(seed)
    kernel = kernel_cls(potential=potential, num_chains=num_chains, **options)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
    mcmc.run()
    return kernel, split_mcmc(mcmc)


def leapfrog_gaussian_acceptance(cov, step_size: float, num_steps: int, draws: int = 1_000_000,
                                 seed: int = 0) -> tuple[float, float]:
    """Stationary mean acceptance ``E[min(1, exp(-dH))]`` of unit-mass leapfrog HMC on
    ``N(mean, cov)``, and its Monte Carlo standard error.

    In the eigenbasis of ``cov`` (variances ``s_i^2``, frequencies ``w_i = 1/s_i``)
    the dynamics split into harmonic oscillators, and one leapfrog step of size
    ``h`` is the linear map ``(q, p) -> M (q, p)`` with
    ``M = [[1 - h^2 w^2 / 2, h], [-h w^2 (1 - h^2 w^2 / 4), 1 - h^2 w^2 / 2]]``;
    ``dH = sum_i (w_i^2 q_i'^2 + p_i'^2 - w_i^2 q_i^2 - p_i^2) / 2`` after
    ``num_steps`` steps, exact for each of ``draws`` independent stationary
    starts ``q_i ~ N(0, s_i^2)``, ``p_i ~ N(0, 1)``.
    """
    rng = np.random.default_rng(seed)
    omega = 1.0 / np.sqrt(np.linalg.eigvalsh(np.asarray(cov, dtype=float)))
    delta = np.zeros(draws)
    for w in omega:
        hw2 = (step_size * w) ** 2
        step = np.array([[1 - hw2 / 2, step_size], [-step_size * w ** 2 * (1 - hw2 / 4), 1 - hw2 / 2]])
        start = np.stack([rng.normal(size=draws) / w, rng.normal(size=draws)])
        end = np.linalg.matrix_power(step, num_steps) @ start
        energy = lambda qp: 0.5 * (w ** 2 * qp[0] ** 2 + qp[1] ** 2)  # noqa: E731
        delta += energy(end) - energy(start)
    accept = np.minimum(1.0, np.exp(-delta))
    return float(accept.mean()), float(accept.std(ddof=1) / np.sqrt(draws))


def assert_nan_region_rejected(kernel, draws, upper: float = 1.0) -> np.ndarray:
    """Draws of a target whose potential is NaN above ``upper``: every proposal there is a
    rejected (acceptance 0), counted divergence, and no draw lands there. Returns ``diverging``."""
    x = draws.samples["x"]
    assert np.isfinite(x).all() and x.max() <= upper
    diverging = draws.sample_stats["diverging"]
    assert diverging.sum() > 0
    assert len(kernel.diagnostics()["divergences"]) == diverging.sum()
    assert np.all(draws.sample_stats["acceptance_rate"][diverging] == 0)
    return diverging
