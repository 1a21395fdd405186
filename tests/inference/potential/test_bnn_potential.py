"""Tests of bnnzoo.inference.potential.bnn: the fast BNN potential against Pyro's
own potential (value and gradient, every prior and likelihood), transforms,
batching over chains, and the minibatch estimate."""

from __future__ import annotations

import pyro
import pytest
import torch

from bnnzoo.inference.potential import BNNPotential, PyroPotential
from bnnzoo.models import (
    BNN,
    BNNSpec,
    Dense,
    Gaussian,
    GaussianLikelihood,
    GroupSpikeAndSlab,
    Horseshoe,
    Laplace,
    SpikeAndSlab,
)
from tests.inference.potential.problems import assert_dicts_close, cnn_problem, make_data, mlp_problem, random_points
from tests.support.cases import LIKELIHOODS, PRIORS


# ----------------------------------------------------------------------------
# BNNPotential == PyroPotential


def _compare_with_pyro(model, x, y, seed):
    fast = BNNPotential(model, x, y)
    slow = PyroPotential(model, (x, y))
    assert sorted(fast.names) == slow.names
    assert fast.shapes == slow.shapes
    assert fast.dim == slow.dim == model.num_params
    for theta in random_points(fast, 3, seed):
        params = fast.unflatten(theta)
        theta_slow = slow.flatten(params)
        v_fast, g_fast = fast.value_and_grad(theta)
        v_slow, g_slow = slow.value_and_grad(theta_slow)
        assert v_fast.shape == v_slow.shape == ()
        assert float(v_fast) == pytest.approx(float(v_slow), rel=1e-5)
        assert_dicts_close(fast.unflatten(g_fast), slow.unflatten(g_slow))
        # constrained values agree too
        assert_dicts_close(fast.constrain(theta), slow.constrain(theta_slow))
        # and the dict-in potential_fn of each matches the other's flat call
        assert float(fast.potential_fn(params)) == pytest.approx(float(v_slow), rel=1e-5)
        assert float(slow.potential_fn(params)) == pytest.approx(float(v_fast), rel=1e-5)


@pytest.mark.parametrize("prior_name", list(PRIORS))
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_bnn_potential_equals_pyro_potential(float64, prior_name, lik_name):
    pyro.set_rng_seed(0)
    _compare_with_pyro(*mlp_problem(prior_name, lik_name), seed=1)


def test_bnn_potential_equals_pyro_potential_conv(float64):
    pyro.set_rng_seed(0)
    _compare_with_pyro(*cnn_problem(), seed=2)


def test_bnn_potential_equals_pyro_potential_mixed_priors(float64):
    """Per-site priors: runs of equal iid priors (merged into one segment of
    theta), different iid priors side by side, and horseshoe sites between."""
    spec = BNNSpec(
        layers=[Dense(4, "tanh"), Dense(3, "relu"), Dense(3, "softplus"), Dense(1)], input_dim=2,
        prior=Gaussian(0.5),
        priors={"layers.1.weight": Laplace(0.3), "layers.1.bias": Laplace(0.3), "layers.2.weight": Horseshoe(0.4),
                "layers.2.bias": Gaussian(2.0), "layers.3": SpikeAndSlab(spike="gaussian"),
                "layers.0.bias": GroupSpikeAndSlab()},
        likelihood=GaussianLikelihood("learned"),
    )
    x, y = make_data(spec.likelihood, 10, 2)
    pyro.set_rng_seed(0)
    _compare_with_pyro(BNN(spec), x, y, seed=18)


def test_bnn_potential_equals_pyro_potential_float32():
    """In the default float32 the two agree to float32 accuracy."""
    pyro.set_rng_seed(0)
    model, x, y = mlp_problem("horseshoe", "gaussian_learned")
    fast, slow = BNNPotential(model, x, y), PyroPotential(model, (x, y))
    theta = random_points(fast, 1, 3, radius=1.0)[0]
    v_fast, g_fast = fast.value_and_grad(theta)
    v_slow, g_slow = slow.value_and_grad(slow.flatten(fast.unflatten(theta)))
    assert v_fast.dtype == torch.float32
    assert float(v_fast) == pytest.approx(float(v_slow), rel=1e-5)
    assert_dicts_close(fast.unflatten(g_fast), slow.unflatten(g_slow), rtol=1e-4)


def test_transforms_map_constrained_to_unconstrained(float64):
    model, x, y = mlp_problem("horseshoe", "gaussian_learned")
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 1, 4)[0]
    constrained = fast.constrain(theta)
    values, log_det = fast.constrained_values(theta)
    assert_dicts_close(constrained, values, rtol=1e-12)
    for name in ("layers.0.weight.global_scale", "layers.0.weight.local_scale", "noise_var"):
        assert (constrained[name] > 0).all()
        torch.testing.assert_close(fast.transforms[name](constrained[name]), fast.unflatten(theta)[name])
    # the Jacobian of exp is the sum of the unconstrained values of the positive sites
    u = fast.unflatten(theta)
    expected = sum(u[n].sum() for n in fast.names if not n.endswith(("weight", "bias")))
    assert float(log_det) == pytest.approx(float(expected), rel=1e-12)


# ----------------------------------------------------------------------------
# batching over chains


@pytest.mark.parametrize("prior_name", ["laplace", "spike_and_slab", "group_spike_and_slab", "horseshoe"])
@pytest.mark.parametrize("lik_name", ["gaussian_learned", "categorical"])
def test_batched_equals_per_chain(float64, prior_name, lik_name):
    model, x, y = mlp_problem(prior_name, lik_name)
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 4, 5)
    values, grads = fast.value_and_grad(theta)
    assert values.shape == (4,) and grads.shape == (4, fast.dim)
    assert fast(theta).shape == (4,)
    for c in range(4):
        v, g = fast.value_and_grad(theta[c])
        assert float(values[c]) == pytest.approx(float(v), rel=1e-12)
        torch.testing.assert_close(grads[c], g, rtol=1e-10, atol=1e-12)
    # a [C, D] batch of size 1 and an unbatched call agree
    torch.testing.assert_close(fast(theta[:1]), fast(theta[0]).unsqueeze(0))


def test_batched_equals_per_chain_conv(float64):
    model, x, y = cnn_problem()
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 3, 6)
    values, grads = fast.value_and_grad(theta)
    for c in range(3):
        v, g = fast.value_and_grad(theta[c])
        assert float(values[c]) == pytest.approx(float(v), rel=1e-12)
        torch.testing.assert_close(grads[c], g, rtol=1e-10, atol=1e-12)


def test_value_and_grad_leaves_theta_alone(float64):
    model, x, y = mlp_problem("gaussian", "gaussian")
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 2, 7)
    before = theta.clone()
    value, grad = fast.value_and_grad(theta)
    assert not theta.requires_grad and not value.requires_grad and not grad.requires_grad
    torch.testing.assert_close(theta, before)


# ----------------------------------------------------------------------------
# minibatches


@pytest.mark.parametrize("prior_name", ["gaussian", "spike_and_slab", "horseshoe"])
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
@pytest.mark.parametrize("batch_size", [3, 4])
def test_minibatch_estimate_is_unbiased_over_a_partition(float64, prior_name, lik_name, batch_size):
    model, x, y = mlp_problem(prior_name, lik_name, n=12)
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 2, 8)  # two chains at once
    full_value, full_grad = fast.value_and_grad(theta)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(9))
    batches = perm.split(batch_size)
    assert len(batches) * batch_size == 12
    results = [fast.minibatch_value_and_grad(theta, rows) for rows in batches]
    mean_value = torch.stack([v for v, _ in results]).mean(0)
    mean_grad = torch.stack([g for _, g in results]).mean(0)
    torch.testing.assert_close(mean_value, full_value, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(mean_grad, full_grad, rtol=1e-10, atol=1e-10)
    # potential(theta, rows) is the same estimate
    for (v, _), rows in zip(results, batches):
        torch.testing.assert_close(fast(theta, rows), v)
    # one minibatch differs from the full value (so the test can fail)
    assert not torch.allclose(results[0][0], full_value)


def test_minibatch_scales_by_n_over_b(float64):
    model, x, y = mlp_problem("gaussian", "gaussian", n=12)
    fast = BNNPotential(model, x, y)
    theta = random_points(fast, 1, 10)[0]
    rows = torch.tensor([1, 5, 7])
    values, log_det = fast.constrained_values(theta)
    pointwise = model.log_likelihood(values, x, y)
    expected = -(model.log_prior(values) + 12 / 3 * pointwise[rows].sum())
    assert float(fast(theta, rows)) == pytest.approx(float(expected), rel=1e-12)
    everything = torch.arange(12)
    assert float(fast(theta, everything)) == pytest.approx(float(fast(theta)), rel=1e-12)


def test_pyro_potential_fn_gives_the_analytic_gradient_through_autograd():
    """Pyro's NUTS/HMC differentiate ``potential_fn`` with autograd; on the analytic path the
    backward is the hand-written gradient, equal to autograd's through the forward pass."""
    from pyro.infer.mcmc.util import potential_grad

    from bnnzoo.data import load
    from bnnzoo.inference.potential import BNNPotential, initial_theta
    from bnnzoo.models import BNN, zoo

    data = load("cosine", seed=0, n_train=30)
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=5)), data.x_train, data.y_train)
    assert potential.analytic
    params = potential.unflatten(initial_theta(potential, 1, 1.0)[0])
    grads, value = potential_grad(potential.potential_fn, params)
    want_grads, want_value = potential_grad(lambda p: potential(potential.flatten(p)), params)
    assert torch.allclose(value, want_value, rtol=1e-6)
    for site in want_grads:
        torch.testing.assert_close(grads[site], want_grads[site], rtol=1e-5, atol=1e-4)
