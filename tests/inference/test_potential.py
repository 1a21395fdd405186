"""Tests of bnnzoo.inference.potential: the fast BNN potential against Pyro's
own potential (value and gradient, every prior and likelihood), batching over
chains, the minibatch estimate, initial points, and a generic Pyro model."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy import stats

from bnnzoo.inference.potential import (
    BNNPotential,
    PyroPotential,
    initial_theta,
    make_potential,
)
from bnnzoo.models import (
    BNN,
    Bernoulli,
    BNNSpec,
    Categorical,
    Conv2d,
    Dense,
    Gaussian,
    GaussianLikelihood,
    GroupSpikeAndSlab,
    Horseshoe,
    Laplace,
    SpikeAndSlab,
)

from tests.support.cases import LIKELIHOODS, PRIORS, needs_compiler  # noqa: E402


def make_data(likelihood, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    if isinstance(likelihood, GaussianLikelihood):
        y = torch.randn(n, generator=g)
    elif isinstance(likelihood, Bernoulli):
        y = torch.randint(0, 2, (n,), generator=g)
    else:
        y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def mlp_problem(prior_name, lik_name, n=12):
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(3, "relu"), Dense(out)], input_dim=2,
                   prior=PRIORS[prior_name], likelihood=likelihood)
    x, y = make_data(likelihood, n, 2)
    return BNN(spec), x, y


def cnn_problem(n=6):
    spec = BNNSpec(
        layers=[Conv2d(2, 3, padding=1, activation="tanh", pool=2), Dense(3)],
        input_shape=(1, 4, 4), prior=Laplace(0.7), priors={"layers.0.weight": GroupSpikeAndSlab()},
        likelihood=Categorical(),
    )
    x, y = make_data(Categorical(), n, 16)
    return BNN(spec), x, y


def assert_dicts_close(a: dict, b: dict, rtol=1e-5):
    assert set(a) == set(b)
    scale = max(float(v.abs().max()) for v in a.values())
    for k in a:
        assert a[k].shape == b[k].shape, k
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=rtol * scale, msg=k)


def random_points(potential, num, seed, radius=1.5):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(num, potential.dim, generator=g) * 2 - 1) * radius


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


# ----------------------------------------------------------------------------
# a generic (non-BNN) Pyro model

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


# ----------------------------------------------------------------------------
# analytic value-and-gradient == autograd

ANALYTIC_ACTIVATIONS = ("tanh", "sigmoid", "relu", "leaky_relu", "softplus", "linear", None)
ANALYTIC_PRIORS = ("gaussian", "laplace", "spike_and_slab", "spike_and_slab_gaussian")
ANALYTIC_LIKELIHOODS = ("gaussian", "bernoulli", "categorical")


def analytic_problem(activation, prior_name, lik_name, n=10, bias_last=True):
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(5, activation), Dense(4, activation), Dense(out, bias=bias_last)],
                   input_dim=3, prior=PRIORS[prior_name], likelihood=likelihood)
    x, y = make_data(likelihood, n, 3)
    return BNN(spec), x, y


def assert_analytic_matches_autograd(model, x, y, theta, rows=None):
    fast = BNNPotential(model, x, y)
    slow = BNNPotential(model, x, y, analytic=False)
    assert fast.analytic and not slow.analytic
    if rows is None:
        (v1, g1), (v2, g2) = fast.value_and_grad(theta), slow.value_and_grad(theta)
    else:
        (v1, g1), (v2, g2) = fast.minibatch_value_and_grad(theta, rows), slow.minibatch_value_and_grad(theta, rows)
    assert v1.shape == v2.shape == theta.shape[:-1] and g1.shape == g2.shape == theta.shape
    torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-5 * float(g2.abs().max()))
    torch.testing.assert_close(v1, fast(theta, rows), rtol=1e-10, atol=0)


@pytest.mark.parametrize("lik_name", ANALYTIC_LIKELIHOODS)
@pytest.mark.parametrize("prior_name", ANALYTIC_PRIORS)
@pytest.mark.parametrize("activation", ANALYTIC_ACTIVATIONS)
def test_analytic_gradient_equals_autograd(float64, activation, prior_name, lik_name):
    model, x, y = analytic_problem(activation, prior_name, lik_name)
    theta = random_points(BNNPotential(model, x, y), 3, seed=1)
    theta[0, :4] = 0.0  # the Laplace kink: both give sign(0) = 0
    assert_analytic_matches_autograd(model, x, y, theta[0])  # one chain [D]
    assert_analytic_matches_autograd(model, x, y, theta)  # chains [C, D]


@pytest.mark.parametrize("lik_name", ANALYTIC_LIKELIHOODS)
def test_analytic_minibatch_equals_autograd(float64, lik_name):
    model, x, y = analytic_problem("tanh", "laplace", lik_name, bias_last=False)
    theta = random_points(BNNPotential(model, x, y), 2, seed=2)
    rows = torch.tensor([3, 0, 7, 7])
    assert_analytic_matches_autograd(model, x, y, theta[0], rows)
    assert_analytic_matches_autograd(model, x, y, theta, rows)
    assert_analytic_matches_autograd(model, x, y, theta, torch.tensor([[1, 2, 9], [4, 4, 0]]))


def test_analytic_gradient_float32():
    model, x, y = analytic_problem("tanh", "spike_and_slab", "categorical")
    fast, slow = BNNPotential(model, x, y), BNNPotential(model, x, y, analytic=False)
    theta = random_points(fast, 4, seed=3)
    (v1, g1), (v2, g2) = fast.value_and_grad(theta), slow.value_and_grad(theta)
    assert g1.dtype == torch.float32
    torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-4 * float(g2.abs().max()))


def _non_analytic_problems():
    yield "gelu", analytic_problem("gelu", "gaussian", "gaussian")
    yield "horseshoe", mlp_problem("horseshoe", "gaussian")
    yield "group_spike_and_slab", mlp_problem("group_spike_and_slab", "bernoulli")
    yield "learned_noise", mlp_problem("gaussian", "gaussian_learned")
    yield "conv", cnn_problem()


def test_non_qualifying_models_fall_back_to_autograd(float64):
    for name, (model, x, y) in _non_analytic_problems():
        potential = BNNPotential(model, x, y)
        assert not potential.analytic, name
        theta = random_points(potential, 2, seed=4, radius=0.5)
        value, grad = potential.value_and_grad(theta)
        t = theta.clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(potential(t).sum(), t)
        torch.testing.assert_close(value, potential(theta), msg=name)
        torch.testing.assert_close(grad, expected, msg=name)
        # and equal to Pyro's own potential
        pyro_pot = PyroPotential(model, (x, y))
        v0, g0 = pyro_pot.value_and_grad(pyro_pot.flatten(potential.unflatten(theta[0])))
        torch.testing.assert_close(value[0], v0, rtol=1e-6, atol=1e-8, msg=name)
        torch.testing.assert_close(potential.unflatten(grad[0]), pyro_pot.unflatten(g0), rtol=1e-5, atol=1e-6,
                                   msg=name)


# ----------------------------------------------------------------------------
# compile=True: the same numbers from torch.compile graphs

@needs_compiler
@pytest.mark.parametrize("activation, prior_name, lik_name", [("tanh", "gaussian", "gaussian"),
                                                              ("relu", "laplace", "categorical")])
def test_compiled_potential_equals_eager(float64, activation, prior_name, lik_name):
    model, x, y = analytic_problem(activation, prior_name, lik_name)
    eager, compiled = BNNPotential(model, x, y), BNNPotential(model, x, y, compile=True)
    assert compiled.compile and compiled.compile_seconds == 0.0
    theta = random_points(eager, 4, seed=5)
    for t in (theta, theta[0]):  # chains [C, D] and one chain [D]
        (v1, g1), (v2, g2) = compiled.value_and_grad(t), eager.value_and_grad(t)
        assert v1.shape == v2.shape == t.shape[:-1] and g1.shape == t.shape
        torch.testing.assert_close(v1, v2, rtol=1e-10, atol=0)
        torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10 * float(g2.abs().max()))
    assert compiled.compile_seconds > 0.0
    # a leapfrog step for two step sizes: the step size is an input of the graph, not a constant
    p = torch.randn(theta.shape, generator=torch.Generator().manual_seed(6), dtype=theta.dtype)
    inv_mass = torch.linspace(0.5, 2.0, eager.dim, dtype=theta.dtype)
    _, grad = eager.value_and_grad(theta)
    for step_size in (0.01, 0.003):
        fast = compiled.leapfrog_step(theta, p, grad, step_size, inv_mass)
        slow = eager.leapfrog_step(theta, p, grad, step_size, inv_mass)
        for a, b in zip(fast, slow):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * float(b.abs().max()))
    spent = compiled.compile_seconds
    compiled.leapfrog_step(theta, p, grad, 0.02, inv_mass)
    assert compiled.compile_seconds == spent  # same shapes: no compiling call
    # another data set of the same shapes reuses the graph: the data are inputs, not constants
    shifted = (x + 1.0, y.flip(0))
    v1, g1 = BNNPotential(model, *shifted, compile=True).value_and_grad(theta)
    v2, g2 = BNNPotential(model, *shifted).value_and_grad(theta)
    torch.testing.assert_close(v1, v2, rtol=1e-10, atol=0)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10 * float(g2.abs().max()))


def test_compile_refused_where_there_is_no_analytic_path(float64):
    for name, (model, x, y) in _non_analytic_problems():
        with pytest.raises(ValueError, match="compile=True needs the analytic gradient"):
            BNNPotential(model, x, y, compile=True)
    model, x, y = analytic_problem("tanh", "gaussian", "gaussian")
    with pytest.raises(ValueError, match=r"analytic=False"):
        BNNPotential(model, x, y, analytic=False, compile=True)

    def plain(x, y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(w * x, 1.0).to_event(1), obs=y)

    with pytest.raises(ValueError, match="compile=True needs a BNN model"):
        make_potential(plain, x[:, 0], y, compile=True)
