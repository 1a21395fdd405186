"""Shared tiny runs for the diagnostics tests (session-scoped: each runs once)."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference import run  # noqa: E402
from bnnzoo.models import Bernoulli, BNNSpec, Dense, Gaussian, zoo  # noqa: E402


@pytest.fixture(scope="session")
def cosine():
    return load("cosine", n_train=30, n_test=40)


@pytest.fixture(scope="session")
def rwmh_run(cosine):
    return run(zoo.cosine_mlp(hidden=5), cosine, engine="rwmh", num_samples=60, warmup_steps=60, num_chains=3)


@pytest.fixture(scope="session")
def nuts_run(cosine):
    return run(zoo.cosine_mlp(hidden=5), cosine, engine="nuts", num_samples=30, warmup_steps=30, num_chains=2,
               max_tree_depth=3)


@pytest.fixture(scope="session")
def svi_run(cosine):
    return run(zoo.cosine_mlp(hidden=5), cosine, engine="svi", num_samples=40, num_chains=2, num_steps=40)


def binary_data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return x, y


@pytest.fixture(scope="session")
def bernoulli_run():
    spec = BNNSpec(layers=[Dense(3, "tanh"), Dense(1)], input_dim=2, prior=Gaussian(1.0), likelihood=Bernoulli())
    x, y = binary_data(40)
    xt, yt = binary_data(25, seed=1)
    return run(spec, (x, y, xt, yt), engine="rwmh", num_samples=50, warmup_steps=50, num_chains=2)


@pytest.fixture
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")
