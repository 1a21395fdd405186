"""SG-MCMC minibatches of any Pyro model written with Pyro's own idiom,
``with pyro.plate("data", N, subsample_size=B) as ind``: SGLD against the exact
stationary law of its minibatch dynamics on a conjugate linear regression (and,
up to the discretisation bias, the exact posterior); the HMC family on the same
model uses the exact full-data potential; the clear error for ``batch_size`` on a
model without a subsample plate."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.linalg
import torch
from pyro.infer import MCMC

from bnnzoo.inference import SGHMC, SGLD, FixedStepHMC, PyroPotential
from tests.support.targets import assert_moments, linear_regression

NOISE, PRIOR_SCALE = 0.5, 1.0
PROBLEM = linear_regression(noise=NOISE, prior_scale=PRIOR_SCALE)  # N = 40, p = 3, a bias


def regression(x, y, subsample_size=10):
    """``y = x w + b + N(0, NOISE^2)``, ``w, b ~ N(0, PRIOR_SCALE^2)``, the data subsampled the Pyro way."""
    w = pyro.sample("w", dist.Normal(0.0, PRIOR_SCALE).expand([x.shape[1]]).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, PRIOR_SCALE))
    with pyro.plate("data", x.shape[0], subsample_size=subsample_size) as ind:
        pyro.sample("y", dist.Normal(x[ind] @ w + b, NOISE), obs=y[ind])


def full_regression(x, y):
    regression(x, y, subsample_size=None)


def sgld_minibatch_stationary_cov(x: np.ndarray, y: np.ndarray, step_size: float, batch_size: int,
                                  iterations: int = 200) -> np.ndarray:
    """Exact stationary covariance of SGLD with B rows drawn without replacement on
    this conjugate model, parameters ``(w, b)``.

    The minibatch gradient is ``P theta - c + e`` with ``E[e | theta] = 0`` and
    ``Cov[e | theta] = (N^2 / B)(1 - B/N) s^2(theta)``, ``s^2`` the sample covariance
    (divisor N - 1) of the per-row gradients ``g_i = (d_i d_i' theta - y_i d_i) / NOISE^2``.
    The stationary mean is the posterior mean; the covariance solves
    ``S = A S A' + 2h I + h^2 E[Cov[e | theta]]`` with ``A = I - h P``, where the last
    term is quadratic in theta, so it needs only the mean and ``S``: a fixed point."""
    n = len(y)
    design = np.hstack([x, np.ones((n, 1))])
    precision = design.T @ design / NOISE**2 + np.eye(design.shape[1]) / PRIOR_SCALE**2
    mean = np.linalg.solve(precision, design.T @ y / NOISE**2)
    k = np.einsum("ni,nj->nij", design, design) / NOISE**2  # [N, D, D]: g_i = K_i theta - u_i
    u = design * y[:, None] / NOISE**2
    k, u = k - k.mean(0), u - u.mean(0)  # centred over rows: h_i = g_i - mean_j g_j
    a = np.eye(len(mean)) - step_size * precision
    factor = n**2 / batch_size * (1 - batch_size / n) / (n - 1)
    cov = np.linalg.inv(precision)
    for _ in range(iterations):
        h_mean = k @ mean - u  # [N, D]: h_i at the mean
        noise = factor * (np.einsum("nij,jk,nlk->il", k, cov, k) + h_mean.T @ h_mean)
        cov = scipy.linalg.solve_discrete_lyapunov(a, 2 * step_size * np.eye(len(mean)) + step_size**2 * noise)
    return cov


def _draws(mcmc: MCMC) -> np.ndarray:
    """``[chain, draw, p + 1]``: w then b (the order of ``PROBLEM.mean``)."""
    s = mcmc.get_samples(group_by_chain=True)
    # vectorized chains: [1, draw, chain, ...] from one Pyro chain
    w, b = s["w"][0].numpy(), s["b"][0].numpy()
    return np.swapaxes(np.concatenate([w, b[..., None]], -1), 0, 1)


def test_sgld_minibatches_a_subsampled_pyro_model():
    # the model's subsample_size (10) is not the kernel's batch_size (20): batch_size wins
    step_size, batch_size = 5e-4, 20
    pyro.set_rng_seed(0)
    kernel = SGLD(regression, step_size=step_size, schedule="constant", batch_size=batch_size, thin=5, num_chains=6,
                  init_radius=0.5)
    mcmc = MCMC(kernel, num_samples=400, warmup_steps=200, disable_progbar=True)
    mcmc.run(PROBLEM.x, PROBLEM.y)
    assert isinstance(kernel.potential, PyroPotential) and kernel.potential.num_data == 40
    draws = _draws(mcmc)
    exact = sgld_minibatch_stationary_cov(PROBLEM.x.double().numpy(), PROBLEM.y.double().numpy(), step_size,
                                          batch_size)
    # exact: the posterior mean, and the sd of the minibatch dynamics' own stationary law, within 5 MCSE
    assert_moments(draws, PROBLEM.mean, np.sqrt(np.diag(exact)))
    # that law is the posterior up to the O(step size) bias of the discretisation and the minibatch
    # noise: here sds 3-5% too large (with all 40 rows 1-2.5%)
    np.testing.assert_allclose(np.sqrt(np.diag(exact)), PROBLEM.sd, rtol=0.06)
    stats = kernel.diagnostics()["sample_stats"]
    assert np.isfinite(stats["lp"]).all() and not stats["diverging"].any()
    assert "minibatch" in kernel.notes()["lp_estimate"]


def test_sghmc_minibatches_a_subsampled_pyro_model():
    # a smoke run: the minibatch force reaches SGHMC too (per-chain rows and shared rows)
    for shared in (False, True):
        pyro.set_rng_seed(1)
        kernel = SGHMC(regression, step_size=1e-4, friction=0.1, batch_size=10, shared_minibatch=shared,
                       num_chains=3)
        mcmc = MCMC(kernel, num_samples=20, warmup_steps=5, disable_progbar=True)
        mcmc.run(PROBLEM.x, PROBLEM.y)
        assert torch.isfinite(mcmc.get_samples()["w"]).all()
        assert not kernel.diagnostics()["sample_stats"]["diverging"].any()


def test_hmc_on_a_subsampled_model_uses_the_full_data_potential(float64):
    x, y = PROBLEM.x.double(), PROBLEM.y.double()
    runs = []
    for model in (regression, full_regression):
        pyro.set_rng_seed(2)
        kernel = FixedStepHMC(model, num_chains=2, step_size=0.05, num_steps=5)
        mcmc = MCMC(kernel, num_samples=10, warmup_steps=0, disable_progbar=True)
        mcmc.run(x, y)
        runs.append((kernel, mcmc.get_samples()))
    (sub_kernel, sub_draws), (full_kernel, full_draws) = runs
    theta = torch.randn(4, sub_kernel.potential.dim, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(sub_kernel.potential(theta), full_kernel.potential(theta), rtol=1e-12, atol=1e-12)
    # same seed, same potential: the same chains
    for name in ("w", "b"):
        torch.testing.assert_close(sub_draws[name], full_draws[name], rtol=1e-9, atol=1e-9)


def test_batch_size_needs_a_subsample_plate():
    kernel = SGLD(full_regression, batch_size=10)
    with pytest.raises(ValueError, match=r"batch_size=10: the Pyro model has no subsample plate .*"
                                         r"pyro\.plate\(name, N, subsample_size=10\)"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(PROBLEM.x, PROBLEM.y)
    # batch_size=None on either model: the full data
    for model in (regression, full_regression):
        kernel = SGLD(model, step_size=1e-4, num_chains=2)
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(PROBLEM.x, PROBLEM.y)
        assert "full data" in kernel.notes()["lp_estimate"]


def test_batch_larger_than_the_plate_is_refused():
    kernel = SGLD(regression, batch_size=41)
    with pytest.raises(ValueError, match="batch_size=41 is larger than the 40 training rows"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(PROBLEM.x, PROBLEM.y)
