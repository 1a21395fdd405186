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
