"""Tests of bnnzoo.inference.potential.base and make_potential: initial points,
the dict interface and flatten/unflatten, and the choice of the fast path."""

from __future__ import annotations

import pytest
import torch

from bnnzoo.inference.potential import BNNPotential, PyroPotential, initial_theta, make_potential
from tests.inference.potential.problems import mlp_problem, random_points
from tests.support.cases import PRIORS


# ----------------------------------------------------------------------------
# initial points and the dict interface


@pytest.mark.parametrize("prior_name", list(PRIORS))
def test_initial_theta(prior_name):
    model, x, y = mlp_problem(prior_name, "gaussian_learned")
    fast = BNNPotential(model, x, y)
    theta = initial_theta(fast, num_chains=5, radius=2.0, generator=torch.Generator().manual_seed(11))
    assert theta.shape == (5, fast.dim)
    assert theta.dtype == torch.get_default_dtype()
    assert (theta.abs() < 2.0).all()
    assert torch.isfinite(fast(theta)).all()
    assert len({tuple(t.tolist()) for t in theta}) == 5  # distinct chains
    again = initial_theta(fast, num_chains=5, radius=2.0, generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(theta, again)
    one = initial_theta(fast)
    assert one.shape == (1, fast.dim)


def test_initial_theta_retries_non_finite_points():
    class Picky:
        dim = 3
        calls = 0

        def __call__(self, theta):
            self.calls += 1
            return torch.where(theta[:, 0] > 0, torch.tensor(float("nan")), theta.sum(-1))

    picky = Picky()
    theta = initial_theta(picky, num_chains=20, generator=torch.Generator().manual_seed(12))
    assert (theta[:, 0] <= 0).all()
    assert picky.calls > 1


def test_potential_fn_on_a_dict_matches_the_flat_call(float64):
    model, x, y = mlp_problem("horseshoe", "bernoulli")
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 1, 13)[0]
    params = fast.unflatten(theta)
    assert list(params) == fast.names
    assert float(fast.potential_fn(params)) == pytest.approx(float(fast(theta)), rel=1e-12)
    torch.testing.assert_close(fast.flatten(params), theta)
    batch = random_points(fast, 3, 14)
    torch.testing.assert_close(fast.flatten(fast.unflatten(batch), batch_ndim=1), batch)


def test_make_potential_picks_the_fast_path(float64):
    model, x, y = mlp_problem("laplace", "categorical")
    assert isinstance(make_potential(model, x, y), BNNPotential)
    slow = make_potential(lambda x, y: model(x, y), x, y)
    assert isinstance(slow, PyroPotential)
    fast = make_potential(model, x, y)
    theta = random_points(fast, 1, 15)[0]
    assert float(slow(slow.flatten(fast.unflatten(theta)))) == pytest.approx(float(fast(theta)), rel=1e-10)
