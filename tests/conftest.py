"""Fixtures shared by every test folder; helpers live in ``tests/support``."""

import os
import warnings

import pytest
import torch

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="num_chains=.*available_cpu")
warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory):
    """bnnzoo's cache folder in a folder of the session's. The inductor cache stays the persistent
    one, so a compiling test is no slower than a user's second compile; inductor's background set-up
    (:mod:`bnnzoo.inference.prewarm`) is off, as that cache is set up already."""
    from bnnzoo.inference import compilation

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR")
                     or str(compilation.cache_dir() / "inductor"))
        patch.setenv("BNNZOO_CACHE", str(tmp_path_factory.mktemp("bnnzoo-cache")))
        patch.setenv("BNNZOO_PREWARM", "0")  # no background set-up per session (tests/inference/test_prewarm.py)
        yield


@pytest.fixture
def float64():
    """Run a test with float64 as torch's default dtype (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


# ------------------------------------------------- tiny runs shared by diagnostics and experiments
# Session-scoped: each runs once, for tests/diagnostics (which judge them) and tests/experiments.
@pytest.fixture(scope="session")
def cosine():
    from bnnzoo.data import load

    return load("cosine", n_train=30, n_test=40)


@pytest.fixture(scope="session")
def rwmh_run(cosine):
    from bnnzoo.inference import run
    from bnnzoo.models import zoo

    return run(zoo.cosine_mlp(hidden=5), cosine, engine="rwmh", num_samples=60, warmup_steps=60, num_chains=3)


def binary_data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return x, y


@pytest.fixture(scope="session")
def bernoulli_run():
    from bnnzoo.inference import run
    from bnnzoo.models import Bernoulli, BNNSpec, Dense, Gaussian

    spec = BNNSpec(layers=[Dense(3, "tanh"), Dense(1)], input_dim=2, prior=Gaussian(1.0), likelihood=Bernoulli())
    x, y = binary_data(40)
    xt, yt = binary_data(25, seed=1)
    return run(spec, (x, y, xt, yt), engine="rwmh", num_samples=50, warmup_steps=50, num_chains=2)
