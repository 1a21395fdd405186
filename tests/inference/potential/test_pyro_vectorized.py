"""Tests of a Pyro model's potential for C chains in one trace (potential/vectorized.py through
PyroPotential): the batched value and gradient equal the per-chain loop's, and a model that
cannot be batched keeps the loop with a one-line notice."""

from __future__ import annotations

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from bnnzoo.inference import MCMC, ChEESHMC
from benchmarks.pyro_models import eight_schools, logistic_broadcasting, logistic_matmul, schools_data
from bnnzoo.inference.potential import PyroPotential, initial_theta

def constrained(y):
    """Constrained sites of several transforms: positive (HalfCauchy, LogNormal), unit interval
    (Beta) and a simplex (Dirichlet, an event-wise transform)."""
    scale = pyro.sample("scale", dist.HalfCauchy(2.0))
    shift = pyro.sample("shift", dist.LogNormal(0.0, 1.0))
    frac = pyro.sample("frac", dist.Beta(2.0, 3.0))
    weights = pyro.sample("weights", dist.Dirichlet(torch.ones(3)))
    loc = shift * frac + (weights * torch.tensor([-1.0, 0.0, 1.0])).sum(-1)
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(loc.unsqueeze(-1), scale.unsqueeze(-1)), obs=y)


def sites_of_every_kind(y):
    """A deterministic site, a factor, a masked observation and nested plates."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    pyro.deterministic("twice", 2 * mu)
    pyro.factor("penalty", -0.5 * mu**2)
    with pyro.plate("groups", y.shape[0], dim=-2):
        level = pyro.sample("level", dist.Normal(mu, 1.0))
        with pyro.plate("rows", y.shape[1], dim=-1), poutine.mask(mask=torch.tensor([True, False, True])):
            pyro.sample("obs", dist.Normal(level, 1.0), obs=y)


def branching(y):
    """Data-dependent control flow on a latent value: not batchable."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    scale = pyro.sample("scale", dist.LogNormal(0.0, 1.0))
    if mu > 0:
        scale = 2 * scale
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, scale), obs=y)


def with_discrete(y):
    """A discrete latent site that Pyro's potential enumerates."""
    p = pyro.sample("p", dist.Beta(2.0, 2.0))
    z = pyro.sample("z", dist.Bernoulli(p))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(2.0 * z, 1.0), obs=y)


def subsampled(x, y=None):
    """Pyro's minibatch idiom: the potential is the full-data one."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0], subsample_size=7) as ind:
        pyro.sample("obs", dist.Bernoulli(logits=(x[ind] * w).sum(-1)), obs=None if y is None else y[ind])


def _logistic_data(n=60, p=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, generator=g)
    y = torch.bernoulli(torch.sigmoid(x @ torch.randn(p, generator=g)), generator=g)
    return x, y


def _points(potential, chains=8, seed=1, spread=1.5):
    return (torch.rand(chains, potential.dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * spread


def _assert_batched_equals_loop(model, args, batching, rtol):
    batched, loop = PyroPotential(model, args), PyroPotential(model, args, vectorize=False)
    start = initial_theta(batched, 8, generator=torch.Generator().manual_seed(0))  # decides at the first points
    assert batched.chain_batching == batching, batched.notes()
    assert loop.chain_batching == "loop" and batched.notes()["chain_batching"].startswith("8 chains in one trace")
    for theta in (start, _points(batched), _points(batched, chains=3, seed=2)):  # other points, another C
        value, grad = batched.value_and_grad(theta)
        want_value, want_grad = loop.value_and_grad(theta)
        torch.testing.assert_close(value, want_value, rtol=rtol, atol=0.0)
        torch.testing.assert_close(grad, want_grad, rtol=rtol, atol=rtol * float(want_grad.abs().max()))
        torch.testing.assert_close(batched(theta), want_value, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("model, data, batching", [
    (eight_schools, lambda: schools_data(torch.float64), "plate"),
    (logistic_broadcasting, _logistic_data, "plate"),
    (logistic_matmul, _logistic_data, "vmap"),
    (constrained, lambda: (torch.tensor([0.3, -0.5, 1.2, 0.8]),), None),
    (sites_of_every_kind, lambda: (torch.tensor([[0.3, -0.5, 1.2], [0.8, 0.1, -0.7]]),), "plate"),
], ids=["eight_schools", "logistic_broadcasting", "logistic_matmul", "constrained", "sites_of_every_kind"])
def test_batched_value_and_gradient_equal_the_per_chain_loop(float64, model, data, batching):
    args = data()  # made in float64
    if batching is None:  # whichever batching fits first: the constrained model must batch one way
        batching = PyroPotential(model, args)
        initial_theta(batching, 4, generator=torch.Generator().manual_seed(0))
        assert batching.chain_batching in ("plate", "vmap"), batching.notes()
        batching = batching.chain_batching
    _assert_batched_equals_loop(model, args, batching, rtol=1e-12)


def test_eight_schools_is_batched_in_float32_too():
    x, y = schools_data(torch.float32)
    batched, loop = PyroPotential(eight_schools, (x, y)), PyroPotential(eight_schools, (x, y), vectorize=False)
    theta = _points(batched).float()
    value, grad = batched.value_and_grad(theta)
    assert batched.chain_batching == "plate"
    want_value, want_grad = loop.value_and_grad(theta)
    torch.testing.assert_close(value, want_value, rtol=1e-6, atol=0.0)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-5 * float(want_grad.abs().max()))


def test_a_non_finite_chain_is_nan_and_leaves_the_others_alone(float64):
    args = schools_data(torch.float64)
    pot, loop = PyroPotential(eight_schools, args), PyroPotential(eight_schools, args, vectorize=False)
    theta = _points(pot)
    pot.value_and_grad(theta)  # decide on finite points
    theta[2, 1], theta[5, 0] = float("nan"), float("inf")
    value, grad = pot.value_and_grad(theta)
    bad = torch.tensor([c in (2, 5) for c in range(8)])
    assert torch.isnan(value[bad]).all() and torch.isnan(grad[bad]).all()
    want_value, want_grad = loop.value_and_grad(theta[~bad])
    torch.testing.assert_close(value[~bad], want_value, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(grad[~bad], want_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model, why", [
    (branching, "plate: RuntimeError: Boolean value of Tensor"),
    (with_discrete, "its discrete site(s) 'z' are enumerated by Pyro"),
], ids=["control_flow", "discrete"])
def test_a_model_that_cannot_be_batched_keeps_the_loop_with_a_one_line_notice(float64, model, why):
    y = torch.tensor([0.4, -0.2, 1.1])
    pot, loop = PyroPotential(model, (y,)), PyroPotential(model, (y,), vectorize=False)
    theta = _points(pot)
    with pytest.warns(UserWarning, match="cannot be vectorized over chains") as caught:
        value, grad = pot.value_and_grad(theta)
    assert pot.chain_batching == "loop"
    message = str(caught[0].message)
    assert "\n" not in message and why in message
    assert pot.notes() == {"chain_batching": message.removeprefix("PyroPotential: ")}
    torch.testing.assert_close(value, loop.value_and_grad(theta)[0], rtol=0.0, atol=0.0)
    torch.testing.assert_close(grad, loop.value_and_grad(theta)[1], rtol=0.0, atol=0.0)
    with warnings.catch_warnings():  # decided once: no second notice
        warnings.simplefilter("error")
        pot.value_and_grad(theta)


def test_a_subsampled_model_is_batched_on_its_full_data_and_its_shared_minibatch(float64):
    x, y = _logistic_data(n=21)
    batched, loop = PyroPotential(subsampled, (x, y)), PyroPotential(subsampled, (x, y), vectorize=False)
    theta = _points(batched)
    value, grad = batched.value_and_grad(theta)
    assert batched.chain_batching == "plate"
    want_value, want_grad = loop.value_and_grad(theta)
    torch.testing.assert_close(value, want_value, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)
    rows = torch.tensor([3, 9, 0, 17, 11])  # one minibatch for every chain: one batched call, scale 21/5
    value, grad = batched.minibatch_value_and_grad(theta, rows)
    want_value, want_grad = loop.minibatch_value_and_grad(theta, rows)
    torch.testing.assert_close(value, want_value, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)


def test_one_chain_uses_pyros_own_potential(float64):
    pot = PyroPotential(eight_schools, schools_data(torch.float64))
    theta = _points(pot, chains=1)
    value, grad = pot.value_and_grad(theta)
    assert pot.chain_batching is None  # nothing to batch: not decided
    want_value, want_grad = pot.value_and_grad(theta[0])
    assert torch.equal(value[0], want_value) and torch.equal(grad[0], want_grad)


def test_an_mcmc_run_records_how_its_chains_were_batched(float64):
    from bnnzoo.diagnostics import to_inference_data

    pyro.set_rng_seed(0)
    mcmc = MCMC(ChEESHMC(eight_schools), num_samples=10, warmup_steps=10, num_chains=4,
                chain_method="vectorized", disable_progbar=True)
    mcmc.run(*schools_data(torch.float64))
    assert mcmc.kernel.potential.chain_batching == "plate"
    assert to_inference_data(mcmc).posterior.attrs["chain_batching"].startswith("4 chains in one trace")


def test_chees_on_eight_schools_draws_what_the_per_chain_loop_draws(float64):
    """The chain plate computes eight schools' potential with the loop's numbers, so a run at a
    fixed seed draws the same values bit for bit on either."""
    args = schools_data(torch.float64)
    draws = []
    for vectorize in (True, False):
        pyro.set_rng_seed(3)
        kernel = ChEESHMC(potential=PyroPotential(eight_schools, args, vectorize=vectorize))
        mcmc = MCMC(kernel, num_samples=10, warmup_steps=20, num_chains=4, chain_method="vectorized",
                    disable_progbar=True)
        mcmc.run(*args)
        assert kernel.potential.chain_batching == ("plate" if vectorize else "loop")
        draws.append(mcmc.get_samples(group_by_chain=True))
    assert all(torch.equal(draws[0][name], draws[1][name]) for name in draws[1])
