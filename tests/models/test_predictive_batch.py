"""``BNN`` under Pyro's vectorised prediction: ``Predictive(parallel=True)`` runs the
model once inside a plate of S draws at dim -2, so every latent value carries a batch
dim; the network output, the likelihood's noise and the ``obs`` site must broadcast
to ``[S, N]``, as ``Predictive(parallel=False)`` (one trace per draw) gives."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive

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
    SpikeAndSlab,
)

N, D = 9, 2
NOISE = 0.1


def _dense(likelihood, outputs=1, prior=Gaussian(1.0)) -> BNNSpec:
    return BNNSpec(layers=[Dense(6, "tanh"), Dense(outputs)], input_dim=D, prior=prior, likelihood=likelihood)


CASES = {
    "gaussian_fixed": _dense(GaussianLikelihood(NOISE)),
    "gaussian_learned": _dense(GaussianLikelihood("learned", (2.0, 0.5))),
    "bernoulli": _dense(Bernoulli()),
    "categorical": _dense(Categorical(), 3),
    "spike_and_slab": _dense(GaussianLikelihood("learned"), prior=SpikeAndSlab(v0=0.05, v1=4.0)),
    "horseshoe": _dense(Categorical(), 3, prior=Horseshoe(0.5)),
    "cnn": BNNSpec(layers=[Conv2d(2, 3, padding=1, activation="relu", pool=2), Dense(1)],
                   input_shape=(1, 4, 4), prior=Gaussian(1.0), likelihood=GaussianLikelihood("learned")),
}


def inputs(spec: BNNSpec, n: int = N, seed: int = 0) -> torch.Tensor:
    width = math.prod(spec.input_shape) if spec.input_shape else D
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed))


def draws(model: BNN, x: torch.Tensor, num: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``num`` prior draws of every latent site, laid out ``[num, *site_shape]``
    (the layout of posterior samples from an MCMC run)."""
    pyro.set_rng_seed(seed)
    out = Predictive(model, num_samples=num)(x)  # one trace per draw
    return {site.name: out[site.name].reshape((num,) + site.shape) for site in model.sites}


def network(model: BNN, values: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``model.apply`` with the weights of each draw: ``[S, N, out]``."""
    return model.apply({k: v for k, v in values.items() if k in model.param_shapes}, x)


def check_obs(model: BNN, obs: torch.Tensor, s: int) -> None:
    assert obs.shape == (s, N)
    if model.task == "classification":
        classes = 2 if isinstance(model.likelihood, Bernoulli) else 3
        assert ((obs == obs.round()) & (obs >= 0) & (obs < classes)).all()


@pytest.mark.parametrize("case", list(CASES))
def test_prior_predictive_parallel_and_sequential_shapes(case):
    model, s = BNN(CASES[case]), 5
    x = inputs(model.spec)
    shapes = {}
    for parallel in (True, False):
        pyro.set_rng_seed(1)
        out = Predictive(model, num_samples=s, parallel=parallel)(x)
        check_obs(model, out["obs"], s)
        for site in model.sites:
            assert out[site.name].shape == (s, 1) + site.shape
        shapes[parallel] = {k: v.shape for k, v in out.items()}
    assert shapes[True] == shapes[False]


@pytest.mark.parametrize("layout", ["flat", "plated"])
@pytest.mark.parametrize("case", list(CASES))
def test_posterior_predictive_parallel_and_sequential_agree(case, layout):
    """Posterior samples ``[S, *site_shape]`` (or ``[S, 1, *site_shape]``, the layout
    Predictive returns): the same shapes in both modes, and the model's return value
    (the network output) is ``model.apply`` of each draw's weights."""
    model, s = BNN(CASES[case]), 6
    x = inputs(model.spec)
    samples = draws(model, x, s)
    given = samples if layout == "flat" else {k: v.unsqueeze(1) for k, v in samples.items()}
    expected = network(model, samples, x)
    results = {}
    for parallel in (True, False):
        pyro.set_rng_seed(2)
        out = Predictive(model, posterior_samples=given, parallel=parallel,
                         return_sites=("obs", "_RETURN"))(x)
        check_obs(model, out["obs"], s)
        torch.testing.assert_close(out["_RETURN"], expected)
        results[parallel] = {k: v.shape for k, v in out.items()}
    assert results[True] == results[False]


def _noise_samples(model: BNN, x: torch.Tensor, s: int, seed: int) -> dict[str, torch.Tensor]:
    samples = draws(model, x, s, seed)
    if "noise_var" in samples:  # log-uniform on [0.01, 1]: a wide spread, unlike a permutation of itself
        g = torch.Generator().manual_seed(seed)
        samples["noise_var"] = torch.exp(torch.empty(s).uniform_(math.log(0.01), 0.0, generator=g))
    return samples


@pytest.mark.parametrize("parallel", [True, False])
def test_fixed_noise_predictive_mean_is_the_network_mean(parallel):
    model, s = BNN(CASES["gaussian_fixed"]), 400
    x = inputs(model.spec)
    samples = _noise_samples(model, x, s, seed=3)
    f = network(model, samples, x)[..., 0]  # [S, N]
    pyro.set_rng_seed(4)
    obs = Predictive(model, posterior_samples=samples, parallel=parallel)(x)["obs"]
    assert obs.shape == (s, N)
    tolerance = 5 * NOISE / math.sqrt(s)
    assert (obs.mean(0) - f.mean(0)).abs().max() < tolerance
    # and draw by draw: the residuals are N(0, NOISE^2)
    residual = obs - f
    assert abs(residual.std().item() - NOISE) < 5 * NOISE / math.sqrt(2 * s * N)


@pytest.mark.parametrize("case", ["gaussian_learned", "spike_and_slab", "cnn"])
@pytest.mark.parametrize("parallel", [True, False])
def test_learned_noise_spread_is_each_draws_noise_var(case, parallel):
    """The residual ``obs - f`` of draw s has variance ``noise_var[s]``: its mean square
    matches the mean noise variance, and scaled by each draw's own variance it has mean
    1 (a noise taken from another draw, or broadcast across draws, would not)."""
    model, s = BNN(CASES[case]), 400
    x = inputs(model.spec)
    samples = _noise_samples(model, x, s, seed=5)
    f = network(model, samples, x)[..., 0]
    pyro.set_rng_seed(6)
    obs = Predictive(model, posterior_samples=samples, parallel=parallel)(x)["obs"]
    assert obs.shape == (s, N)
    var = samples["noise_var"]
    sq = (obs - f) ** 2  # [S, N]; E = var[s], Var = 2 var[s]^2
    sd_mean = math.sqrt((2 * var ** 2).sum().item() * N) / (s * N)
    assert abs(sq.mean().item() - var.mean().item()) < 5 * sd_mean
    assert abs((sq / var.unsqueeze(-1)).mean().item() - 1.0) < 5 * math.sqrt(2.0 / (s * N))


def test_nested_outer_plates_and_observed_y():
    """Two enclosing plates (dims -3, -2): a batch ``[A, B]`` of networks, ``obs`` ``[A, B, N]``;
    an observed ``y`` broadcasts over the batch."""
    model = BNN(CASES["gaussian_learned"])
    x = inputs(model.spec)
    y = torch.randn(N)
    with pyro.plate("a", 3, dim=-3), pyro.plate("b", 4, dim=-2):
        trace = poutine.trace(model).get_trace(x, y)
    trace.compute_log_prob()
    assert trace.nodes["_RETURN"]["value"].shape == (3, 4, N, 1)
    assert trace.nodes["noise_var"]["value"].shape == (3, 4, 1)
    assert trace.nodes["obs"]["fn"].batch_shape == (3, 4, N)
    assert trace.nodes["obs"]["log_prob"].shape == (3, 4, N)
    values = {k: trace.nodes[k]["value"].reshape((12,) + site.shape)
              for k, site in ((site.name, site) for site in model.sites)}
    expected = model.log_likelihood(values, x, y).reshape(3, 4, N)
    torch.testing.assert_close(trace.nodes["obs"]["log_prob"], expected)


def test_a_value_that_does_not_fit_the_plates_is_refused():
    model = BNN(CASES["gaussian_fixed"])
    x = inputs(model.spec)
    bad = {"layers.0.weight": torch.zeros(5, 2, 6, D)}  # a second batch dim where the data slot is
    with pytest.raises(ValueError, match="layers.0.weight"), pyro.plate("draws", 5, dim=-2):
        poutine.condition(model, bad)(x)


def test_unplated_calls_are_unchanged():
    """Without enclosing plates the model runs as before: one draw gives ``[N, out]``,
    and conditioning on C chains of weights ``[C, *site_shape]`` gives ``[C, N, out]``."""
    model = BNN(CASES["categorical"])
    x = inputs(model.spec)
    assert model(x).shape == (N, 3)
    values = draws(model, x, 4)
    trace = poutine.trace(poutine.condition(model, values)).get_trace(x)
    torch.testing.assert_close(trace.nodes["_RETURN"]["value"], network(model, values, x))
    assert trace.nodes["obs"]["value"].shape == (4, N)
