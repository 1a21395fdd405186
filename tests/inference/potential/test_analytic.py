"""Tests of bnnzoo.inference.potential.analytic: the hand-written gradient against
autograd (every activation, elementwise prior and likelihood; minibatches; float32),
the fallback to autograd, and compile=True giving the eager numbers."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from bnnzoo.inference.compiled_graphs import UNROLL, unroll_step_sizes
from bnnzoo.inference.integrators import EnergyTracker, kinetic_energy, leapfrog
from bnnzoo.inference.potential import BNNPotential, PyroPotential, make_potential
from bnnzoo.models import BNN, BNNSpec, Dense
from bnnzoo.models.activations import ACTIVATION_TABLE
from tests.inference.potential.problems import cnn_problem, make_data, mlp_problem, random_points
from tests.support.cases import LIKELIHOODS, PRIORS, needs_compiler


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


@pytest.mark.parametrize("bias_first", [True, False])
@pytest.mark.parametrize("bias_last", [True, False])
@pytest.mark.parametrize("lik_name", ["gaussian", "bernoulli"])
def test_analytic_gradient_at_one_input_and_one_output(float64, bias_first, bias_last, lik_name):
    """The products the eager path writes otherwise (``analytic._layer_product``: a first layer of one
    input, a last layer of one output, with and without biases) give autograd's value and gradient."""
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(5, "tanh", bias=bias_first), Dense(out, bias=bias_last)], input_dim=1,
                   likelihood=likelihood)
    x, y = make_data(likelihood, 12, 1)
    model = BNN(spec)
    theta = random_points(BNNPotential(model, x, y), 3, seed=2)
    assert_analytic_matches_autograd(model, x, y, theta[0])
    assert_analytic_matches_autograd(model, x, y, theta)
    assert_analytic_matches_autograd(model, x, y, theta, rows=torch.tensor([0, 3, 7]))


@pytest.mark.parametrize("activation", [name for name, row in ACTIVATION_TABLE.items()
                                        if row.in_place or row.in_place_backward])
def test_in_place_forms_give_the_plain_forms_bits(activation):
    """An activation's in-place forward and backward (what the eager analytic path runs) give the
    plain forms' values bit for bit, and write into the tensor they are given."""
    row = ACTIVATION_TABLE[activation]
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 40, 7, generator=g) * 3
    z[0, 0, :3] = 0.0  # relu's kink
    delta = torch.randn(3, 40, 7, generator=g)
    h = row.forward(z)
    if row.in_place:
        fresh = z.clone()
        out = row.in_place(fresh)
        assert out.data_ptr() == fresh.data_ptr() and torch.equal(out, h)
    if row.in_place_backward:
        fresh = delta.clone()
        out = row.in_place_backward(fresh, h)
        expected = row.backward(delta, h)
        assert out.data_ptr() == fresh.data_ptr()
        assert torch.equal(out, expected)  # -0.0 and 0.0 compare equal: a zero's sign is the one difference


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


@pytest.mark.parametrize("lik_name", ANALYTIC_LIKELIHOODS + ("gaussian_learned",))
@pytest.mark.parametrize("input_dim, first_bias", [(1, True), (1, False), (3, True), (3, False)])
def test_the_graph_formulation_equals_the_eager_one(float64, input_dim, first_bias, lik_name):
    """What a compiled graph traces (feature-major activations, the one-input weight gradient as a
    sum), run eagerly here: the numbers of the eager formulation, for shared and per-chain data."""
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(5, "tanh", bias=first_bias), Dense(4, "relu"), Dense(out)],
                   input_dim=input_dim, prior=PRIORS["laplace"], likelihood=likelihood)
    x, y = make_data(likelihood, 10, input_dim)
    potential = BNNPotential(BNN(spec), x, y)
    theta = random_points(potential, 3, seed=7)
    rows = torch.tensor([[3, 0, 7, 7], [1, 2, 9, 4], [5, 5, 6, 8]])  # per-chain x [C, B, in]
    cases = [(potential._x, potential._target, 1.0),
             (potential._x[rows], potential._target[rows], 2.5)]
    for data_x, target, scale in cases:
        eager = potential._analytic_value_and_grad(theta, data_x, target, scale)
        graph = potential._analytic_value_and_grad(theta, data_x, target, scale, graph=True)
        for a, b in zip(graph, eager):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * float(b.abs().max()))


@pytest.mark.parametrize("prior_name", ("gaussian", "laplace"))
def test_a_learned_noise_has_the_analytic_gradient(float64, prior_name):
    """The InverseGamma noise variance (log transform) on the analytic path: value and gradient
    equal autograd's, for one chain, chains, shared and per-chain minibatches; it compiles too
    (:func:`test_compiled_potential_equals_eager`)."""
    model, x, y = mlp_problem(prior_name, "gaussian_learned")
    potential = BNNPotential(model, x, y)
    assert potential.analytic and potential.compilable
    theta = random_points(potential, 3, seed=5, radius=1.5)
    assert_analytic_matches_autograd(model, x, y, theta[0])
    assert_analytic_matches_autograd(model, x, y, theta)
    assert_analytic_matches_autograd(model, x, y, theta, torch.tensor([3, 0, 7, 7]))
    assert_analytic_matches_autograd(model, x, y, theta, torch.tensor([[1, 2, 9], [4, 4, 0], [5, 6, 8]]))


@pytest.mark.parametrize("name, phrase", [
    ("gelu", "layer 0's activation 'gelu' has no analytic derivative"),
    ("horseshoe", "site 'layers.0.weight.global_scale' (a hierarchical prior) is not under an iid elementwise prior"),
    ("group_spike_and_slab", "is not under an iid elementwise prior"),
    ("conv", "layer 0 is a Conv2d (the analytic gradient covers Dense layers)"),
])
def test_a_model_off_the_analytic_path_says_why(name, phrase):
    model, x, y = dict(_non_analytic_problems())[name]
    assert phrase in BNNPotential(model, x, y).slow_path


def test_a_run_on_the_slow_path_says_so_at_its_start_with_the_measured_cost():
    from bnnzoo.inference import run
    from bnnzoo.models import Horseshoe
    spec = BNNSpec(layers=[Dense(6, "tanh"), Dense(1)], input_dim=1, prior=Horseshoe())
    data = {"name": "cosine", "n_train": 20, "n_test": 5}
    with pytest.warns(UserWarning, match=r"chees: the gradient runs on autograd \(the slow path\): site "
                      r"'layers.0.weight.global_scale' .*; one gradient of 2 chain\(s\) took .* ms, about .*x the "
                      r"analytic gradient of the same layers"):
        result = run(spec, data, engine="chees", num_samples=2, warmup_steps=2, num_chains=2, progress=False)
    assert result.notes["gradient"].startswith("the gradient runs on autograd (the slow path)")
    fast = run(BNNSpec(layers=[Dense(6, "tanh"), Dense(1)], input_dim=1, likelihood=LIKELIHOODS["gaussian_learned"][0]),
               data, engine="chees", num_samples=2, warmup_steps=2, num_chains=2, progress=False)
    assert "gradient" not in fast.notes  # a learned noise is on the analytic path


def _non_analytic_problems():
    yield "gelu", analytic_problem("gelu", "gaussian", "gaussian")
    yield "horseshoe", mlp_problem("horseshoe", "gaussian")
    yield "group_spike_and_slab", mlp_problem("group_spike_and_slab", "bernoulli")
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
                                                              ("relu", "laplace", "categorical"),
                                                              ("tanh", "laplace", "gaussian_learned")])
def test_compiled_potential_equals_eager(float64, activation, prior_name, lik_name):
    model, x, y = analytic_problem(activation, prior_name, lik_name)
    eager, compiled = BNNPotential(model, x, y), BNNPotential(model, x, y, compile=True)
    assert compiled.compile and compiled.compile_seconds == 0.0
    theta = random_points(eager, 4, seed=5)
    for t in (theta, theta[0], theta, theta[0]):  # chains [C, D] and one chain [D]; value_and_grad compiles at its 2nd call
        (v1, g1), (v2, g2) = compiled.value_and_grad(t), eager.value_and_grad(t)
        assert v1.shape == v2.shape == t.shape[:-1] and g1.shape == t.shape
        torch.testing.assert_close(v1, v2, rtol=1e-10, atol=0)
        torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10 * float(g2.abs().max()))
    assert compiled.compile_seconds > 0.0 and len(compiled.graphs.keys) == 2
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
    # UNROLL steps as one graph, with the running energy bounds of EnergyTracker; fewer steps as the
    # same graph with steps of size 0 after them (they change nothing); a step size per chain
    energy = eager.value_and_grad(theta)[0] + kinetic_energy(p, inv_mass)
    per_chain = torch.linspace(0.005, 0.01, len(theta), dtype=theta.dtype).unsqueeze(-1)
    for step_size, num_steps in ((0.01, UNROLL), (0.01, 1), (0.01, UNROLL - 1), (per_chain, UNROLL - 2)):
        tracker = EnergyTracker(energy, inv_mass)
        slow = leapfrog(theta, p, grad, step_size, num_steps, eager.value_and_grad, inv_mass,
                        step=eager.leapfrog_step, track_energy=tracker)
        sizes = unroll_step_sizes(step_size, theta, num_steps)
        *fast, high, low = compiled.graphs.leapfrog_steps(theta, p, grad, sizes, inv_mass,
                                                   *EnergyTracker(energy, inv_mass).bounds())
        for a, b in zip(fast, slow):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * float(b.abs().max()))
        for a, b in zip((high, low), tracker.bounds()):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * float(b.abs().max()))
        # eagerly (a compile that failed goes on so): the same steps
        for a, b in zip(eager.graphs.leapfrog_steps(theta, p, grad, sizes, inv_mass, *EnergyTracker(energy, inv_mass).bounds()),
                        (*slow, *tracker.bounds())):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * float(b.abs().max()))
    with pytest.raises(ValueError, match="num_steps must be in 1..4, got 0"):
        unroll_step_sizes(0.01, theta, 0)
    # another data set of the same shapes reuses the graph: the data are inputs, not constants
    shifted = (x + 1.0, y.flip(0))
    other = BNNPotential(model, *shifted, compile=True)
    other.value_and_grad(theta)  # eager: the first call
    v1, g1 = other.value_and_grad(theta)
    v2, g2 = BNNPotential(model, *shifted).value_and_grad(theta)
    torch.testing.assert_close(v1, v2, rtol=1e-10, atol=0)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10 * float(g2.abs().max()))


@needs_compiler
def test_a_compiled_potential_with_a_prior_per_site_equals_eager(float64):
    """Several prior segments (a prior per site): the graph updates the gradient of each."""
    likelihood, out = LIKELIHOODS["gaussian"]
    spec = BNNSpec(layers=[Dense(5, "tanh"), Dense(out)], input_dim=3, prior=PRIORS["gaussian"],
                   priors={"layers.0.bias": PRIORS["laplace"], "layers.1.weight": PRIORS["spike_and_slab"]},
                   likelihood=likelihood)
    x, y = make_data(likelihood, 10, 3)
    eager, compiled = BNNPotential(BNN(spec), x, y), BNNPotential(BNN(spec), x, y, compile=True)
    assert len(eager._prior_terms) == 4
    theta = random_points(eager, 3, seed=2)
    for _ in range(2):  # the first call runs eagerly, the second compiles
        (v1, g1), (v2, g2) = compiled.value_and_grad(theta), eager.value_and_grad(theta)
        torch.testing.assert_close(v1, v2, rtol=1e-10, atol=0)
        torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10 * float(g2.abs().max()))
    assert any(key[0] == "value_and_grad" for key in compiled.graphs.keys)


@needs_compiler
def test_many_networks_in_one_process_all_run_compiled():
    # dynamo keeps 8 variants of a function by default and then runs it eagerly, silently;
    # the graphs are shared by every potential, so the ninth network (or a new thread count)
    # must still compile: each new network captures one new graph
    from torch._dynamo.utils import counters

    x = torch.linspace(-1, 1, 7).unsqueeze(-1)
    y = torch.sin(3 * x).squeeze(-1)
    threads = torch.get_num_threads()
    try:
        for hidden in range(31, 41):
            potential = BNNPotential(BNN(BNNSpec(layers=[Dense(hidden, "tanh"), Dense(1)], input_dim=1)), x, y, compile=True)
            before = counters["stats"]["unique_graphs"]
            for _ in range(2):  # value_and_grad: the first call runs eagerly, the second compiles
                potential.value_and_grad(torch.zeros(3, potential.dim))
            assert counters["stats"]["unique_graphs"] == before + 1, hidden
        torch.set_num_threads(threads + 1)  # a thread count is a new variant too
        before = counters["stats"]["unique_graphs"]
        for _ in range(2):
            potential.value_and_grad(torch.zeros(3, potential.dim))
        assert counters["stats"]["unique_graphs"] == before + 1
    finally:
        torch.set_num_threads(threads)


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
