"""Tests of bnnzoo.inference.potential.pyro_model: PyroPotential on a generic
(non-BNN) Pyro model against its closed-form potential and gradient."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy import stats

from bnnzoo.inference.potential import PyroPotential, initial_theta, make_potential


PRIOR_SD, SHAPE, RATE = 2.0, 3.0, 2.0


def normal_model(y):
    """y_i ~ N(mu, sigma^2), mu ~ N(0, 2^2), sigma ~ Gamma(3, 2): two sites, one positive."""
    mu = pyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    sigma = pyro.sample("sigma", dist.Gamma(SHAPE, RATE))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y)


def closed_form(mu, u, y):
    """U(mu, u) with sigma = exp(u) (the Jacobian adds u), and its gradient."""
    sigma = math.exp(u)
    log_p = (stats.norm.logpdf(mu, 0, PRIOR_SD) + stats.gamma.logpdf(sigma, SHAPE, scale=1 / RATE) + u
             + stats.norm.logpdf(y, mu, sigma).sum())
    r = y - mu
    d_mu = -mu / PRIOR_SD**2 + (r / sigma**2).sum()
    # d/du [(a - 1) log sigma - b sigma] + 1 + sum(-1 + r^2 / sigma^2)
    d_u = (SHAPE - 1) - RATE * sigma + 1 + (-1 + r**2 / sigma**2).sum()
    return -log_p, np.array([-d_mu, -d_u])


def test_generic_pyro_model(float64):
    pyro.set_rng_seed(16)
    y = torch.randn(10) * 0.7 + 1.5
    pot = make_potential(normal_model, args=(y,))
    assert isinstance(pot, PyroPotential)
    assert pot.names == ["mu", "sigma"] and pot.dim == 2
    assert set(pot.initial) == {"mu", "sigma"}
    theta = torch.tensor([[0.3, -0.2], [1.4, 0.5], [-1.0, 0.1]])
    values, grads = pot.value_and_grad(theta)
    assert values.shape == (3,) and grads.shape == (3, 2)
    assert pot(theta).shape == (3,)
    for c in range(3):
        mu, u = theta[c].tolist()
        expected_value, expected_grad = closed_form(mu, u, y.numpy())
        assert float(values[c]) == pytest.approx(expected_value, rel=1e-10)
        np.testing.assert_allclose(grads[c].numpy(), expected_grad, rtol=1e-8)
        v, g = pot.value_and_grad(theta[c])
        assert float(v) == pytest.approx(float(values[c]), rel=1e-12)
        torch.testing.assert_close(g, grads[c])
        assert float(pot(theta[c])) == pytest.approx(expected_value, rel=1e-10)
        assert float(pot.potential_fn(pot.unflatten(theta[c]))) == pytest.approx(expected_value, rel=1e-10)
    # sigma is positive: the transform is log, constrain is exp
    constrained = pot.constrain(theta)
    torch.testing.assert_close(constrained["sigma"], theta[:, 1].exp())
    torch.testing.assert_close(constrained["mu"], theta[:, 0])
    torch.testing.assert_close(pot.transforms["sigma"](torch.tensor(2.0)), torch.tensor(math.log(2.0)))
    # initial points work for a generic model too
    start = initial_theta(pot, num_chains=4, generator=torch.Generator().manual_seed(17))
    assert start.shape == (4, 2) and torch.isfinite(pot(start)).all()


def test_generic_model_gradient_descent_finds_the_mode(float64):
    """The gradient drives mu to the (closed-form) conditional mode given sigma."""
    y = torch.tensor([0.5, 1.0, 2.0, 2.5])
    pot = make_potential(normal_model, args=(y,))
    u = 0.0  # sigma = 1 fixed: conditional posterior of mu is Gaussian
    mode = float(y.sum()) / (len(y) + 1 / PRIOR_SD**2)
    theta = torch.tensor([[-3.0, u]])
    for _ in range(200):
        _, grad = pot.value_and_grad(theta)
        theta = theta - 0.1 * grad * torch.tensor([1.0, 0.0])
    assert float(theta[0, 0]) == pytest.approx(mode, abs=1e-8)


# ------------------------------------------------ subsample plates (Pyro's minibatch idiom)
def subsampled_regression(x, y=None, subsample_size=4):
    """Pyro's own minibatch idiom: the observations in a plate with ``subsample_size``."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    sigma = pyro.sample("sigma", dist.Gamma(SHAPE, RATE))
    with pyro.plate("data", x.shape[0], subsample_size=subsample_size) as ind:
        pyro.sample("obs", dist.Normal(x[ind] @ w, sigma), obs=None if y is None else y[ind])


def full_regression(x, y=None):
    """The same model without subsampling."""
    subsampled_regression(x, y, subsample_size=None)


def _regression_data(n=12, p=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, generator=g)
    return x, x @ torch.tensor([1.0, -0.5, 0.3]) + 0.4 * torch.randn(n, generator=g)


def test_subsample_plate_is_detected_and_the_potential_is_the_full_data_one(float64):
    from pyro.poutine.subsample_messenger import SubsampleMessenger

    from bnnzoo.inference.potential.pyro_model import _PYRO_SUBSAMPLE

    x, y = _regression_data()
    sub, full = PyroPotential(subsampled_regression, (x, y)), PyroPotential(full_regression, (x, y))
    assert sub.subsample_plates == {"data": (12, 4)} and sub.num_data == 12
    assert full.subsample_plates == {} and full.num_data is None
    assert sub.names == full.names == ["sigma", "w"] and sub.dim == 4
    theta = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    values, grads = sub.value_and_grad(theta)
    want_values, want_grads = full.value_and_grad(theta)
    torch.testing.assert_close(values, want_values, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads, want_grads, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sub(theta), full(theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sub.potential_fn(sub.unflatten(theta[0])), full(theta[0]), rtol=1e-12, atol=1e-12)
    # outside the potential, Pyro's plate subsamples as before
    assert SubsampleMessenger.__dict__["_subsample"] is _PYRO_SUBSAMPLE
    trace = pyro.poutine.trace(subsampled_regression).get_trace(x, y)
    assert trace.nodes["obs"]["value"].shape == (4,) and trace.nodes["obs"]["scale"] == 3.0


def test_minibatch_estimate_is_unbiased_over_a_partition(float64):
    # B = 3 rows, not the model's subsample_size 4: the kernel's batch size wins; N/B = 4
    x, y = _regression_data()
    sub, full = PyroPotential(subsampled_regression, (x, y)), PyroPotential(full_regression, (x, y))
    theta = torch.randn(1, 4, generator=torch.Generator().manual_seed(2))
    partition = torch.randperm(12, generator=torch.Generator().manual_seed(3)).reshape(4, 3)
    values, grads = sub.minibatch_value_and_grad(theta.expand(4, -1), partition)
    full_value, full_grad = full.value_and_grad(theta)
    torch.testing.assert_close(values.mean(0, keepdim=True), full_value, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads.mean(0, keepdim=True), full_grad, rtol=1e-12, atol=1e-12)
    # each block is log prior + (N/B) log likelihood of its rows, in closed form
    w, sigma = theta[0, 1:], theta[0, 0].exp()
    rows = partition[1]
    log_lik = dist.Normal(x[rows] @ w, sigma).log_prob(y[rows]).sum()
    log_prior = dist.Normal(0.0, 1.0).log_prob(w).sum() + dist.Gamma(SHAPE, RATE).log_prob(sigma) + theta[0, 0]
    torch.testing.assert_close(values[1], -(log_prior + 4.0 * log_lik), rtol=1e-12, atol=1e-12)
    # after a minibatch, the potential is the full-data one again
    torch.testing.assert_close(sub(theta), full_value, rtol=1e-12, atol=1e-12)


def test_minibatch_rows_per_chain_equal_each_chain_alone(float64):
    x, y = _regression_data()
    sub = PyroPotential(subsampled_regression, (x, y))
    theta = torch.randn(3, 4, generator=torch.Generator().manual_seed(4))
    rows = torch.tensor([[0, 5, 7, 11, 2], [1, 2, 3, 4, 6], [9, 8, 10, 0, 1]])
    values, grads = sub.minibatch_value_and_grad(theta, rows)
    assert values.shape == (3,) and grads.shape == (3, 4)
    for c in range(3):
        value, grad = sub.minibatch_value_and_grad(theta[c], rows[c])
        torch.testing.assert_close(values[c], value, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grads[c], grad, rtol=1e-12, atol=1e-12)
    # shared rows [B] are rows[c] for every chain
    shared_values, shared_grads = sub.minibatch_value_and_grad(theta, rows[1])
    expanded = sub.minibatch_value_and_grad(theta, rows[1].expand(3, -1))
    torch.testing.assert_close(shared_values, expanded[0])
    torch.testing.assert_close(shared_grads, expanded[1])
    with pytest.raises(ValueError, match="do not match theta"):
        sub.minibatch_value_and_grad(theta, rows[:2])


def test_subsample_plates_that_cannot_give_minibatches(float64):
    x, y = _regression_data()

    def two_sizes(x, y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        with pyro.plate("a", 12, subsample_size=4) as ind:
            pyro.sample("obs_a", dist.Normal(x[ind] @ w, 1.0), obs=y[ind])
        with pyro.plate("b", 6, subsample_size=2) as ind:
            pyro.sample("obs_b", dist.Normal(x[ind] @ w, 1.0), obs=y[ind])

    def local_latent(x, y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        with pyro.plate("data", 12, subsample_size=4) as ind:
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("obs", dist.Normal(x[ind] @ w + z, 1.0), obs=y[ind])

    pot = PyroPotential(two_sizes, (x, y))
    assert torch.isfinite(pot(torch.zeros(3)))  # the full-data potential is fine
    with pytest.raises(ValueError, match=r"different sizes, 'a' \(size 12\), 'b' \(size 6\)"):
        pot.num_data
    pot = PyroPotential(local_latent, (x, y))
    assert pot.dim == 3 + 12 and pot.num_data == 12  # full data: all 12 local latents
    with pytest.raises(ValueError, match=r"batch_size=4: .*\['z'\] in plate 'data'"):
        pot.check_minibatch(4)
    with pytest.raises(ValueError, match="no subsample plate.*subsample_size=5"):
        PyroPotential(full_regression, (x, y)).check_minibatch(5)
    with pytest.raises(ValueError, match="batch_size=13 is larger than the 12 training rows"):
        PyroPotential(subsampled_regression, (x, y)).check_minibatch(13)
