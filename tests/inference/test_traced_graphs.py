"""Traced graphs (``inference/traced_graphs.py``): a function replayed from the operations it ran,
after a fixed number of calls, bit for bit as it runs, and never where its Python looks at values;
a plain Pyro model's batched potential runs on one."""

from __future__ import annotations

import pickle
import warnings

import pyro
import pyro.distributions as dist
import torch

from benchmarks.pyro_models import eight_schools, logistic_matmul, schools_data
from bnnzoo.inference import MCMC, ChEESHMC, traced_graphs
from bnnzoo.inference.potential import PyroPotential, initial_theta
from bnnzoo.inference.traced_graphs import TracedGraphs


def smooth(theta):
    return (theta.sin() * theta).sum(-1), theta.cos()


def test_a_function_runs_on_its_graph_after_the_set_number_of_calls_and_gives_the_same_bits():
    calls = []

    def fn(theta):
        calls.append(1)
        return smooth(theta)

    traced = TracedGraphs(fn, after=3)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        traced(x)
    assert traced.traced and len(calls) == 3 + 1  # the third call traced it (one more run of fn)
    y = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    y[2, 1] = float("nan")
    got, want = traced(y), smooth(y)
    assert len(calls) == 4  # the graph ran, not fn
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # bit for bit, NaN where NaN
    assert torch.isnan(got[0][2])
    # another shape is another key: counted and traced on its own
    z = torch.randn(2, 5)
    traced(z)
    assert len(calls) == 5 and "traced into one graph" in traced.note()
    assert "replayed as TorchScript" in traced.note()  # the fx graph's operations called from C++


def test_without_torchscript_the_fx_graph_runs(monkeypatch):
    """``torch.jit`` is deprecated: where its trace fails, the fx graph is replayed, with the same bits."""
    def refuse(*args, **kwargs):
        raise RuntimeError("no torch.jit here")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    traced = TracedGraphs(smooth, after=1)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    traced(x)
    assert traced.traced and "replayed as an fx graph" in traced.note()
    y = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(traced(y), smooth(y), rtol=0, atol=0)


def test_a_function_whose_python_looks_at_values_is_not_traced_and_keeps_running():
    def branchy(theta):
        if theta.sum() > 0:  # Python control flow on a value: a graph would freeze one branch
            return (theta * 2,)
        return (theta * 3,)

    traced = TracedGraphs(branchy, after=1)
    x = torch.ones(2, 3)
    traced(x)
    assert not traced.traced and traced.graphs[(x.shape, x.dtype, x.device)] is None
    assert torch.equal(traced(-x)[0], -3 * x)  # the other branch, as the function gives it
    assert traced.note().startswith("not traced (") and traced.refused


def test_a_function_that_draws_random_numbers_is_not_traced_and_the_stream_is_as_without_it():
    """The check at the tracing call sees other numbers from the graph (drawn from a forked
    generator), so the function keeps running as it is, and the run's stream is untouched."""
    def noisy(theta):
        return (theta + torch.randn_like(theta),)

    x = torch.zeros(3, 2)
    torch.manual_seed(5)
    plain = [noisy(x)[0] for _ in range(6)]
    torch.manual_seed(5)
    traced = TracedGraphs(noisy, after=2)
    got = [traced(x)[0] for _ in range(6)]
    assert not traced.traced and "differs" in traced.refused
    assert all(torch.equal(a, b) for a, b in zip(plain, got))


def test_a_pickled_potential_traces_again():
    sigma, y = schools_data()
    potential = PyroPotential(eight_schools, (sigma, y))
    theta = initial_theta(potential, 4, 2.0)
    for _ in range(traced_graphs.TRACE_AFTER):
        potential.value_and_grad(theta)
    assert potential.traced.traced
    copy = pickle.loads(pickle.dumps(potential))
    assert not copy.traced.graphs and copy.traced.after == traced_graphs.TRACE_AFTER
    assert all(torch.equal(a, b) for a, b in zip(copy.value_and_grad(theta), potential.value_and_grad(theta)))


def test_a_pyro_models_batched_potential_on_its_graph_is_the_untraced_ones_bit_for_bit():
    """Eight schools (a chain plate) and a logistic regression written with ``x @ w`` (vmap): after
    TRACE_AFTER calls the value and gradient come from the graph, equal to ``trace=False``'s at
    new points, a non-finite row included; the run's note says so."""
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    y = (torch.rand(40, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    for model, args, batching in [(eight_schools, schools_data(), "plate"), (logistic_matmul, (x, y), "vmap")]:
        traced, plain = PyroPotential(model, args), PyroPotential(model, args, trace=False)
        theta = initial_theta(traced, 6, 2.0)
        for _ in range(traced_graphs.TRACE_AFTER):
            traced.value_and_grad(theta)
            plain.value_and_grad(theta)
        assert traced.chain_batching == batching and traced.traced.traced and not plain.traced.graphs
        new = initial_theta(traced, 6, 3.0)
        new[4, 0] = float("inf")
        (v, g), (w, h) = traced.value_and_grad(new), plain.value_and_grad(new)
        assert torch.equal(v[:4], w[:4]) and torch.equal(g[:4], h[:4]) and torch.equal(v[5], w[5])
        assert torch.isnan(v[4]) and torch.isnan(w[4]) and torch.isnan(g[4]).all() and torch.isnan(h[4]).all()
        assert "traced into one graph of operations" in traced.notes()["chain_batching"]
        assert "traced" not in plain.notes()["chain_batching"]


def branching(y):
    """A model whose Python branches on a latent value (a chain plate fits it, a graph would not)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    scale = 1.0 if bool((mu > 10.0).all()) else 2.0
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, scale), obs=y)


def test_a_model_that_branches_on_a_value_is_not_traced_and_its_note_says_why():
    y = torch.randn(10, generator=torch.Generator().manual_seed(2))
    potential = PyroPotential(branching, (y,))
    theta = initial_theta(potential, 4, 2.0)
    for _ in range(traced_graphs.TRACE_AFTER + 3):
        value, _ = potential.value_and_grad(theta)
    assert potential.chain_batching == "plate" and not potential.traced.traced
    assert "not traced (" in potential.notes()["chain_batching"]
    want = torch.stack([PyroPotential(branching, (y,), vectorize=False).value_and_grad(t)[0] for t in theta])
    torch.testing.assert_close(value, want)


def test_chees_on_eight_schools_draws_the_same_with_and_without_the_graph(monkeypatch):
    def draws(after):
        monkeypatch.setattr(traced_graphs, "TRACE_AFTER", after)
        pyro.set_rng_seed(1)
        kernel = ChEESHMC(eight_schools)
        mcmc = MCMC(kernel, num_samples=30, warmup_steps=40, num_chains=4, chain_method="vectorized",
                    disable_progbar=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(*schools_data())
        assert kernel.potential.traced.traced == (after > 0)
        return mcmc.get_samples()

    traced, plain = draws(5), draws(0)
    assert traced.keys() == plain.keys()
    assert all(torch.equal(traced[k], plain[k]) for k in traced)


def test_a_bnn_off_the_analytic_path_replays_its_autograd_gradient_bit_for_bit():
    """A horseshoe prior sends a BNN's gradient to autograd (the slow path): after TRACE_AFTER calls
    it comes from the traced graph, equal to autograd's at new points; the potential's notes say so."""
    import dataclasses

    from bnnzoo.data import load
    from bnnzoo.models import BNN, zoo
    from bnnzoo.models.priors import Horseshoe
    from bnnzoo.inference.potential import BNNPotential

    data = load("diabetes", seed=0)
    spec = dataclasses.replace(zoo.diabetes_mlp(hidden=4), priors={"layers.0.weight": Horseshoe()})
    traced, plain = (BNNPotential(BNN(spec), data.x_train[:50], data.y_train[:50]) for _ in range(2))
    plain.traced.after = 0
    assert traced.slow_path and not traced.analytic
    theta = initial_theta(traced, 3, 0.5)
    for _ in range(traced_graphs.TRACE_AFTER):
        traced.value_and_grad(theta)
    assert traced.traced.traced and "replayed as TorchScript" in traced.notes()["gradient_graph"]
    new = initial_theta(traced, 3, 0.8)
    (v, g), (w, h) = traced.value_and_grad(new), plain.value_and_grad(new)
    assert torch.equal(v, w) and torch.equal(g, h)
    assert "gradient_graph" not in plain.notes()
