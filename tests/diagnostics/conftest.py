"""Shared tiny runs for the diagnostics tests (session-scoped: each runs once). ``cosine``,
``rwmh_run`` and ``bernoulli_run``, shared with tests/experiments, are in tests/conftest.py."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from bnnzoo.inference import run  # noqa: E402
from bnnzoo.models import zoo  # noqa: E402


@pytest.fixture(scope="session")
def nuts_run(cosine):
    return run(zoo.cosine_mlp(hidden=5), cosine, engine="nuts", num_samples=30, warmup_steps=30, num_chains=2,
               max_tree_depth=3)


@pytest.fixture(scope="session")
def svi_run(cosine):
    return run(zoo.cosine_mlp(hidden=5), cosine, engine="svi", num_samples=40, num_chains=2, num_steps=40)


@pytest.fixture
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")
