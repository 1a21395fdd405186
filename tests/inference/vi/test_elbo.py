"""The ELBO toolkit: KL weights, closed-form vs Monte Carlo KL, the three gradient
estimators (same expectation; STL exact at the optimum of a conjugate model)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnnzoo.inference import kl_weights
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.inference.vi import elbo_terms, gaussian_kl, inverse_softplus, num_batches, surrogate_loss
from bnnzoo.models import BNN, BNNSpec, Dense, Gaussian, GaussianLikelihood, Horseshoe
from tests.inference.vi.conjugate import ConjugateNormal, gradient

DT = torch.float64


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


# ---------------------------------------------------------------- KL weights
@pytest.mark.parametrize("m", [1, 2, 7, 64, 3000])
@pytest.mark.parametrize("scheme", ["uniform", "blundell", 2.0, 0.3, 1.0])
def test_kl_weights_sum_to_one_per_epoch(m, scheme):
    pi = kl_weights(m, scheme)
    assert pi.shape == (m,) and torch.isfinite(pi).all() and (pi >= 0).all()
    assert pi.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_kl_weight_formulas():
    m = 6
    i = torch.arange(1, m + 1, dtype=DT)
    torch.testing.assert_close(kl_weights(m, "blundell"), 2.0 ** (m - i) / (2.0 ** m - 1))
    torch.testing.assert_close(kl_weights(m, 0.5), kl_weights(m, "blundell"))
    torch.testing.assert_close(kl_weights(m, 1.0), kl_weights(m, "uniform"))
    torch.testing.assert_close(kl_weights(m, 2.0), kl_weights(m, "blundell").flip(0))
    torch.testing.assert_close(kl_weights(m, "none"), torch.ones(m, dtype=DT))
    assert kl_weights(1, "none").item() == kl_weights(1, "blundell").item() == 1.0
    assert num_batches(100, None) == num_batches(100, 100) == num_batches(100, 500) == 1
    assert num_batches(100, 30) == 4


@pytest.mark.parametrize("scheme", ["blundel", -1.0, 0.0, True, math.nan, None])
def test_kl_weights_bad_scheme(scheme):
    with pytest.raises(ValueError, match="kl_weighting .*choose one of uniform, blundell, none"):
        kl_weights(5, scheme)


# ---------------------------------------------------------------- KL
def test_gaussian_kl_matches_torch():
    loc, scale = torch.tensor([0.3, -1.2, 2.0]), torch.tensor([0.1, 1.5, 0.7])
    exact = torch.distributions.kl_divergence(torch.distributions.Normal(loc, scale),
                                              torch.distributions.Normal(0.0, 0.8))
    torch.testing.assert_close(gaussian_kl(loc, scale, 0.8), exact)


def _small_bnn(prior, priors=None, likelihood=None):
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(1)], input_dim=2, prior=prior, priors=priors or {},
                   likelihood=likelihood or GaussianLikelihood(0.5))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=g)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(30, generator=g)
    return BNNPotential(BNN(spec), x, y)


def test_analytic_and_monte_carlo_kl_agree_for_gaussian_priors():
    potential = _small_bnn(Gaussian(0.7), priors={"layers.1": Gaussian(2.0)})
    scale = potential.gaussian_prior_scale()
    assert torch.isfinite(scale).all() and set(scale.unique().tolist()) == {0.7, 2.0}
    g = torch.Generator().manual_seed(2)
    loc = torch.randn(potential.dim, generator=g)
    rho = torch.randn(potential.dim, generator=g) - 1

    def kl_only(theta, skip):
        prior, _ = potential.log_prior_and_likelihood(theta, None, skip)
        return prior, torch.zeros_like(prior)

    analytic = elbo_terms(loc, rho, torch.zeros(1, potential.dim), lambda t: kl_only(t, True), "reparam", scale)
    assert analytic.kl_mc.abs().max().item() < 1e-12  # nothing left to Monte Carlo
    batches, grads_mc = [], []
    for _ in range(10):
        l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
        mc = elbo_terms(l, r, torch.randn(4000, potential.dim, generator=g), lambda t: kl_only(t, False), "reparam")
        assert mc.kl_analytic.item() == 0.0
        mc.kl.mean().backward()
        batches.append(mc.kl.mean().item())
        grads_mc.append(torch.cat([l.grad, r.grad]))
    est, se = np.mean(batches), np.std(batches, ddof=1) / math.sqrt(len(batches))
    assert abs(est - analytic.kl.item()) < 5 * se
    # ... and so do their gradients
    l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
    gaussian_kl(l, F.softplus(r), scale).sum().backward()
    exact = torch.cat([l.grad, r.grad])
    grads_mc = torch.stack(grads_mc)
    se = grads_mc.std(0) / math.sqrt(len(grads_mc))
    assert ((grads_mc.mean(0) - exact).abs() <= 5 * se + 1e-9).all()


def test_monte_carlo_kl_includes_the_jacobian_of_constrained_sites():
    # per draw, kl + nll must equal log q(theta) + U(theta) exactly (kl="mc"), for a
    # horseshoe (positive scale sites) and a learned noise variance
    potential = _small_bnn(Gaussian(1.0), priors={"layers.0.weight": Horseshoe(0.5)},
                           likelihood=GaussianLikelihood("learned"))
    scale = potential.gaussian_prior_scale()
    assert torch.isnan(scale).any() and torch.isfinite(scale).any()
    g = torch.Generator().manual_seed(3)
    loc = 0.3 * torch.randn(potential.dim, generator=g)
    rho = torch.full((potential.dim,), inverse_softplus(0.2))
    eps = torch.randn(5, potential.dim, generator=g)
    terms = elbo_terms(loc, rho, eps, lambda t: potential.log_prior_and_likelihood(t), "reparam")
    theta = loc + F.softplus(rho) * eps
    log_q = torch.distributions.Normal(loc, F.softplus(rho)).log_prob(theta).sum(-1)
    torch.testing.assert_close(terms.kl + terms.nll, log_q + potential(theta))
    # the closed form on the Gaussian part changes the estimate, not its expectation
    auto = [elbo_terms(loc, rho, torch.randn(2000, potential.dim, generator=g),
                       lambda t: potential.log_prior_and_likelihood(t, None, True), "reparam", scale)
            for _ in range(8)]
    mc = [elbo_terms(loc, rho, torch.randn(2000, potential.dim, generator=g),
                     lambda t: potential.log_prior_and_likelihood(t), "reparam") for _ in range(8)]
    a = np.array([t.kl.mean().item() for t in auto])
    b = np.array([t.kl.mean().item() for t in mc])
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert abs(a.mean() - b.mean()) < 5 * se


# ---------------------------------------------------------------- estimators
@pytest.mark.parametrize(
    "estimator, kl, particles, baseline",
    [("reparam", "mc", 2000, 0.0), ("reparam", "auto", 2000, 0.0), ("stl", "mc", 2000, 0.0),
     ("score", "mc", 20000, "loo"), ("score", "auto", 20000, "loo")],
    ids=["reparam-mc", "reparam-analytic", "stl", "score-mc", "score-analytic"],
)
def test_estimators_are_unbiased(estimator, kl, particles, baseline):
    potential = ConjugateNormal(num_data=20)
    loc = torch.tensor([0.2, -0.5, 1.5])
    rho = torch.tensor([-1.0, 0.0, -2.0])
    l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
    potential.neg_elbo(l, r).backward()
    exact = torch.cat([l.grad, r.grad])
    g = torch.Generator().manual_seed(4)
    grads = torch.stack([gradient(potential, loc, rho, torch.randn(particles, 3, generator=g), estimator, kl,
                                   baseline) for _ in range(10)])
    se = grads.std(0) / math.sqrt(len(grads))
    assert ((grads.mean(0) - exact).abs() < 5 * se + 1e-8).all(), (grads.mean(0), exact, se)


def test_stl_has_zero_variance_at_the_optimum_of_a_conjugate_model():
    potential = ConjugateNormal()
    mean, sd = potential.posterior()
    loc, rho = mean, torch.log(torch.expm1(sd))  # q = the exact posterior
    g = torch.Generator().manual_seed(5)
    eps = [torch.randn(1, 3, generator=g) for _ in range(200)]
    grads = {(est, kl): torch.stack([gradient(potential, loc, rho, e, est, kl) for e in eps])
             for est, kl in [("stl", "mc"), ("reparam", "mc"), ("reparam", "auto")]}
    for key, gr in grads.items():  # all unbiased: zero mean at the optimum
        assert (gr.mean(0).abs() < 5 * gr.std(0) / math.sqrt(len(gr)) + 1e-9).all(), key
    assert grads["stl", "mc"].abs().max().item() < 1e-9  # exactly zero, draw by draw
    for key in [("reparam", "mc"), ("reparam", "auto")]:
        assert (grads[key].var(0)[:3] > 1.0).all(), key  # the means' gradients are noisy



def test_loo_baseline_needs_two_particles():
    with pytest.raises(ValueError, match="baseline 'loo' needs num_particles >= 2"):
        potential = ConjugateNormal()
        gradient(potential, torch.zeros(3), torch.zeros(3), torch.randn(1, 3), "score", "mc", "loo")


@pytest.mark.parametrize("m", [0, 2.0, True, "3"])
def test_kl_weights_bad_num_batches(m):
    with pytest.raises(ValueError, match=f"num_batches must be a positive integer, got {m!r}"):
        kl_weights(m)


def test_bad_estimator_is_named():
    terms = elbo_terms(torch.zeros(2), torch.zeros(2), torch.zeros(1, 2),
                       lambda t: (torch.zeros(t.shape[:-1]), torch.zeros(t.shape[:-1])))
    for build in (lambda: surrogate_loss(terms, 1.0, "reinforce"),
                  lambda: elbo_terms(torch.zeros(2), torch.zeros(2), torch.zeros(1, 2), None, "reinforce")):
        with pytest.raises(ValueError, match="estimator 'reinforce': choose one of reparam, stl, score"):
            build()
