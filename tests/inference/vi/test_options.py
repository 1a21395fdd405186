"""VIOptions: every bad option fails before fitting, naming the option and the value."""

import math

import pytest

from bnnzoo.inference import VIOptions, run
from tests.support.targets import linear_regression


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("estimator", "stll", "estimator 'stll': choose one of reparam, stl, score"),
        ("kl_weighting", "blundel", "kl_weighting 'blundel': choose one of uniform, blundell, none"),
        ("kl_weighting", -2.0, "or a positive number lambda"),
        ("kl", "exact", "kl 'exact': choose one of auto, analytic, mc"),
        ("optimizer", "adamw", "optimizer 'adamw': unknown optimizer"),
        ("scale_optimizer", {"kind": "sgd", "momentun": 0.9}, "scale_optimizer 'sgd': unknown option"),
        ("schedule", "cosine", "schedule 'cosine': choose one of adaptive, exponential, plateau, constant"),
        ("plateau_factor", 1.5, "plateau_factor must be strictly between 0 and 1"),
        ("plateau_metric", "loss", "plateau_metric 'loss': choose one of split, elbo"),
        ("batch_size", 0, "batch_size must be an integer >= 1"),
        ("num_particles", 1.5, "num_particles must be an integer >= 1"),
        ("scale_lr", -1e-3, "scale_lr must be a positive number"),
        ("init_rho", math.inf, "init_rho must be a finite number"),
        ("init_loc", "xavier", "init_loc 'xavier': choose one of uniform, kaiming"),
        ("score_baseline", "yes", "score_baseline must be True or False"),
    ],
)
def test_bad_options_fail_before_fitting(option, value, message):
    problem = linear_regression(n=10)
    with pytest.raises(ValueError, match=message):
        run(problem.spec, (problem.x, problem.y), engine="svi", num_samples=5, num_chains=1, **{option: value})


def test_stl_with_analytic_kl_is_refused():
    with pytest.raises(ValueError, match="estimator 'stl' acts on the Monte Carlo log q"):
        VIOptions(estimator="stl", kl="analytic")


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("lr", 0.0, "lr must be a positive number, got 0.0"),
        ("lr_decay", math.nan, "lr_decay must be a positive number, got nan"),
        ("num_steps", True, "num_steps must be an integer >= 1, got True"),
        ("plateau_patience", -1, "plateau_patience must be an integer >= 0, got -1"),
        ("plateau_factor", math.nan, "plateau_factor must be strictly between 0 and 1, got nan"),
        ("init_rho", "1", "init_rho must be a finite number, got '1'"),
        ("score_baseline", 1, "score_baseline must be True or False, got 1"),
        ("schedule", ["plateau"], r"schedule \['plateau'\]: choose one of adaptive, exponential, plateau, constant"),
        ("window", 1, "window must be an integer >= 2, got 1"),
        ("tolerance", 0.0, "tolerance must be a positive number, got 0.0"),
        ("anneal_steps", 0, "anneal_steps must be an integer >= 1, got 0"),
    ],
)
def test_vi_options_refuse(option, value, message):
    with pytest.raises(ValueError, match=message):
        VIOptions(**{option: value})


def test_vi_options_accept_numpy_numbers_and_resolve_defaults():
    import numpy as np

    opts = VIOptions(num_steps=np.int64(10), lr=np.float32(0.1), kl_weighting=np.float64(0.5), init_rho=np.float64(-3))
    assert opts.kl_mode == "auto" and VIOptions(estimator="stl").kl_mode == "mc"
    assert opts.initial_rho == -3.0 and opts.initial_scale == pytest.approx(math.log1p(math.exp(-3.0)))
