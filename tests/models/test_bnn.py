"""Tests of bnnzoo.models.bnn: the network, batched weights, site names, and
``log_joint`` against Pyro's own trace log density."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from bnnzoo.models import (
    BNN,
    Bernoulli,
    BNNSpec,
    Categorical,
    Conv2d,
    Dense,
    Gaussian,
    GaussianLikelihood,
    Horseshoe,
    Laplace,
)

from tests.support.cases import LIKELIHOODS, PRIORS  # noqa: E402


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


def latent_values(trace) -> dict[str, torch.Tensor]:
    return {
        name: site["value"]
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
    }


def prior_draws(model: BNN, x: torch.Tensor, num: int) -> dict[str, torch.Tensor]:
    """``num`` prior draws of every latent site, stacked along a leading dim."""
    draws = [latent_values(poutine.trace(model).get_trace(x)) for _ in range(num)]
    return {k: torch.stack([d[k] for d in draws]) for k in draws[0]}


def reference_forward(spec: BNNSpec, values, x: torch.Tensor) -> torch.Tensor:
    """The network written out layer by layer with torch.nn.functional (unbatched)."""
    acts = {None: lambda h: h, "linear": lambda h: h, "tanh": torch.tanh, "relu": F.relu,
            "sigmoid": torch.sigmoid, "softplus": F.softplus, "gelu": F.gelu, "leaky_relu": F.leaky_relu}
    h = x.reshape(x.shape[0], *spec.input_shape) if spec.input_shape else x
    for i, layer in enumerate(spec.layers):
        w, b = values[f"layers.{i}.weight"], values.get(f"layers.{i}.bias")
        if isinstance(layer, Conv2d):
            h = acts[layer.activation](F.conv2d(h, w, b, stride=layer.stride, padding=layer.padding))
            if layer.pool:
                h = F.max_pool2d(h, layer.pool)
        else:
            h = acts[layer.activation](F.linear(h.reshape(h.shape[0], -1), w, b))
    return h


CNN = BNNSpec(
    layers=[Conv2d(3, 3, padding=1, activation="relu", pool=2), Conv2d(4, 2, stride=2, activation="tanh"),
            Dense(5, "gelu"), Dense(3)],
    input_shape=(2, 6, 6), prior=Gaussian(1.0), likelihood=Categorical(),
)
CNN_POOL = BNNSpec(
    layers=[Conv2d(2, 3, activation="softplus", pool=2, bias=False), Conv2d(3, 1, pool=2), Dense(1)],
    input_shape=(1, 10, 10), prior=Laplace(0.5), likelihood=GaussianLikelihood(0.2),
)
MLP = BNNSpec(
    layers=[Dense(6, "tanh"), Dense(4, "leaky_relu", bias=False), Dense(2, "sigmoid"), Dense(1)], input_dim=3,
    prior=Gaussian(1.0),
)
IMAGE_MLP = BNNSpec(layers=[Dense(5, "relu"), Dense(1)], input_shape=(2, 3, 3))  # Dense on an image input
SPECS = {"mlp": MLP, "cnn": CNN, "cnn_pool": CNN_POOL, "image_mlp": IMAGE_MLP}


# ----------------------------------------------------------------------------
# the network


@pytest.mark.parametrize("name", list(SPECS))
def test_output_shape_and_reference_forward(float64, name):
    spec = SPECS[name]
    pyro.set_rng_seed(0)
    model = BNN(spec)
    n = 7
    x = torch.randn(n, spec.num_inputs)
    trace = poutine.trace(model).get_trace(x)
    f = trace.nodes["_RETURN"]["value"]
    assert f.shape == (n, spec.layers[-1].units)
    values = latent_values(trace)
    torch.testing.assert_close(f, reference_forward(spec, values, x))
    torch.testing.assert_close(model.apply(values, x), f)
    if spec.input_shape:  # rows of x, or x already shaped as images
        torch.testing.assert_close(model.apply(values, x.reshape(n, *spec.input_shape)), f)


@pytest.mark.parametrize("name", list(SPECS))
def test_batched_weights_equal_a_loop(float64, name):
    spec = SPECS[name]
    pyro.set_rng_seed(1)
    model = BNN(spec)
    x = torch.randn(5, spec.num_inputs)
    num = 4
    values = prior_draws(model, x, num)
    batched = model.apply(values, x)
    assert batched.shape == (num, 5, spec.layers[-1].units)
    for b in range(num):
        single = model.apply({k: v[b] for k, v in values.items()}, x)
        torch.testing.assert_close(batched[b], single, rtol=1e-10, atol=1e-12)


def test_batched_conv_pool_takes_the_max_per_chain(float64):
    """Chains with very different weights: pooling must not mix chains."""
    spec = BNNSpec(layers=[Conv2d(1, 1, pool=2, bias=False), Dense(1, bias=False)], input_shape=(1, 2, 2))
    model = BNN(spec)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    values = {"layers.0.weight": torch.tensor([1.0, -1.0, 10.0]).reshape(3, 1, 1, 1, 1),
              "layers.1.weight": torch.ones(3, 1, 1)}
    f = model.apply(values, x)
    assert f.shape == (3, 1, 1)
    torch.testing.assert_close(f.reshape(-1), torch.tensor([4.0, -1.0, 40.0]))


def test_bias_free_layer_has_no_bias_site():
    model = BNN(BNNSpec(layers=[Dense(3, bias=False), Dense(1)], input_dim=2))
    names = [s.name for s in model.sites]
    assert names == ["layers.0.weight", "layers.1.weight", "layers.1.bias"]
    assert model.num_params == 6 + 3 + 1


def test_image_mlp_forward_regression():
    """A Dense first layer on an ``input_shape`` model flattens the image
    (fixed: it used to multiply [N, C, H, W] by a [units, C*H*W] weight)."""
    model = BNN(IMAGE_MLP)
    f = model(torch.randn(4, 18))
    assert f.shape == (4, 1)


# ----------------------------------------------------------------------------
# sites


@pytest.mark.parametrize("prior_name", list(PRIORS))
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_site_names(prior_name, lik_name):
    prior = PRIORS[prior_name]
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(out)], input_dim=2, prior=prior, likelihood=likelihood)
    model = BNN(spec)
    x, y = make_data(likelihood, 6, 2)
    pyro.set_rng_seed(2)
    trace = poutine.trace(model).get_trace(x, y)
    sample_sites = [n for n, s in trace.nodes.items() if s["type"] == "sample" and not site_is_subsample(s)]
    assert site_is_subsample(trace.nodes["data"])  # the plate
    expected = []
    for i in range(2):
        for kind in ("weight", "bias"):
            name = f"layers.{i}.{kind}"
            if isinstance(prior, Horseshoe):
                expected += [f"{name}.global_scale", f"{name}.local_scale"]
            expected.append(name)
    if likelihood.kind == "gaussian" and likelihood.learned:
        expected.append("noise_var")
    assert sample_sites == expected + ["obs"]
    assert [s.name for s in model.sites] == expected
    obs = trace.nodes["obs"]
    assert obs["is_observed"]
    assert [f.name for f in obs["cond_indep_stack"]] == ["data"]
    assert obs["fn"].batch_shape == (6,)
    for name in expected:
        assert not trace.nodes[name]["is_observed"]
        assert trace.nodes[name]["cond_indep_stack"] == ()
    assert model.num_params == sum(math.prod(trace.nodes[n]["value"].shape) for n in expected)


# ----------------------------------------------------------------------------
# log_joint against Pyro's trace


@pytest.mark.parametrize("prior_name", list(PRIORS))
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_log_joint_equals_trace_log_prob(float64, prior_name, lik_name):
    prior = PRIORS[prior_name]
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(3, "relu"), Dense(out)], input_dim=2, prior=prior,
                   likelihood=likelihood)
    model = BNN(spec)
    x, y = make_data(likelihood, 8, 2)
    pyro.set_rng_seed(3)
    for _ in range(2):
        trace = poutine.trace(model).get_trace(x, y)
        trace.compute_log_prob()
        values = latent_values(trace)
        expected = trace.log_prob_sum()
        joint = model.log_joint(values, x, y)
        assert joint.shape == ()
        assert float(joint) == pytest.approx(float(expected), rel=1e-10)
        prior_part = sum(trace.nodes[n]["log_prob_sum"] for n in values)
        assert float(model.log_prior(values)) == pytest.approx(float(prior_part), rel=1e-10)
        pointwise = model.log_likelihood(values, x, y)
        assert pointwise.shape == (8,)
        torch.testing.assert_close(pointwise, trace.nodes["obs"]["log_prob"])


@pytest.mark.parametrize("name", ["cnn", "cnn_pool"])
def test_log_joint_equals_trace_log_prob_conv(float64, name):
    spec = SPECS[name]
    model = BNN(spec)
    pyro.set_rng_seed(4)
    x = torch.randn(5, spec.num_inputs)
    y = torch.randint(0, 3, (5,)) if isinstance(spec.likelihood, Categorical) else torch.randn(5)
    trace = poutine.trace(model).get_trace(x, y)
    trace.compute_log_prob()
    assert float(model.log_joint(latent_values(trace), x, y)) == pytest.approx(float(trace.log_prob_sum()), rel=1e-10)


@pytest.mark.parametrize("prior_name", list(PRIORS))
@pytest.mark.parametrize("lik_name", ["gaussian_learned", "categorical"])
def test_batched_log_joint_equals_per_draw(float64, prior_name, lik_name):
    likelihood, out = LIKELIHOODS[lik_name]
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(out)], input_dim=2, prior=PRIORS[prior_name],
                   likelihood=likelihood)
    model = BNN(spec)
    x, y = make_data(likelihood, 6, 2)
    pyro.set_rng_seed(5)
    values = prior_draws(model, x, 3)
    joint = model.log_joint(values, x, y)
    assert joint.shape == (3,)
    assert model.log_likelihood(values, x, y).shape == (3, 6)
    for b in range(3):
        single = model.log_joint({k: v[b] for k, v in values.items()}, x, y)
        assert float(joint[b]) == pytest.approx(float(single), rel=1e-10)


def test_conditioned_model_uses_the_given_weights(float64):
    model = BNN(MLP)
    x, y = make_data(GaussianLikelihood(), 4, 3)
    pyro.set_rng_seed(6)
    values = latent_values(poutine.trace(model).get_trace(x))
    f = poutine.condition(model, data=values)(x, y)
    torch.testing.assert_close(f, model.apply(values, x))


def test_bernoulli_labels_and_likelihood_means(float64):
    model = BNN(BNNSpec(layers=[Dense(1)], input_dim=2, likelihood=Bernoulli()))
    x = torch.randn(4, 2)
    y_int = torch.tensor([0, 1, 1, 0])
    pyro.set_rng_seed(7)
    values = latent_values(poutine.trace(model).get_trace(x))
    ll_int = model.log_likelihood(values, x, y_int)
    ll_float = model.log_likelihood(values, x, y_int.double())
    torch.testing.assert_close(ll_int, ll_float)
    logit = model.apply(values, x)[:, 0]
    expected = torch.where(y_int == 1, F.logsigmoid(logit), F.logsigmoid(-logit))
    torch.testing.assert_close(ll_int, expected)
    probs = model.likelihood.mean(model.apply(values, x))
    assert probs.shape == (4, 2)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))
    cat = Categorical().mean(torch.randn(2, 4, 3))
    torch.testing.assert_close(cat.sum(-1), torch.ones(2, 4))
    assert GaussianLikelihood().mean(torch.randn(2, 4, 1)).shape == (2, 4)
