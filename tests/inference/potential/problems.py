"""Problems and checks shared by the potential tests: small MLP and CNN networks
with data, random points, and a close-dicts assertion."""

from __future__ import annotations

import torch

from bnnzoo.models import (
    BNN,
    Bernoulli,
    BNNSpec,
    Categorical,
    Conv2d,
    Dense,
    GaussianLikelihood,
    GroupSpikeAndSlab,
    Laplace,
)
from tests.support.cases import LIKELIHOODS, PRIORS


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
