"""FixedStepHMC: exact on a known Gaussian, nothing adapted, divergences counted."""

import math

import numpy as np
import pytest
import torch
from tests.support.targets import assert_gaussian, gaussian_target, leapfrog_gaussian_acceptance, run_kernel

from bnnzoo.inference import ENGINES, FixedStepHMC, run
from bnnzoo.models import zoo

MEAN = [1.0, -2.0, 0.5]
COV = [[1.0, 0.6, 0.0], [0.6, 2.0, -0.4], [0.0, -0.4, 0.5]]


def test_samples_a_correlated_gaussian():
    kernel, draws = run_kernel(FixedStepHMC, gaussian_target(MEAN, COV), num_chains=4, num_samples=600,
                               warmup_steps=50, step_size=0.35, num_steps=7)
    assert_gaussian(np.asarray(draws.samples["x"]), np.asarray(MEAN), np.asarray(COV))
    stats = draws.sample_stats
    # nothing adapts: every transition used the given step size and steps
    assert np.all(stats["step_size"] == pytest.approx(0.35)) and np.all(stats["n_steps"] == 7)
    assert kernel.step_size == 0.35 and kernel.options.num_steps == 7
    assert not stats["diverging"].any()
    # and the mean acceptance is leapfrog's on this Gaussian (from the stationary start onwards)
    exact, exact_se = leapfrog_gaussian_acceptance(COV, 0.35, 7, draws=400_000)
    per_chain = stats["acceptance_rate"].mean(1)
    se = per_chain.std(ddof=1) / math.sqrt(len(per_chain))
    assert abs(per_chain.mean() - exact) < 5 * math.hypot(se, exact_se)


def test_non_finite_energy_is_a_rejected_divergence():
    # far beyond leapfrog's stability limit (step * omega > 2) the trajectory overflows to inf/NaN
    potential = gaussian_target([0.0, 0.0], [[1.0, 0.0], [0.0, 1e-4]])
    kernel, draws = run_kernel(FixedStepHMC, potential, num_chains=3, num_samples=10, warmup_steps=0,
                               step_size=5.0, num_steps=200)
    stats = draws.sample_stats
    assert stats["diverging"].all() and np.all(stats["acceptance_rate"] == 0)
    assert np.isinf(stats["energy_error"]).all()
    first = draws.samples["x"][:, 0]
    assert np.isfinite(first).all() and np.all(draws.samples["x"] == first[:, None])  # never moved
    assert len(kernel.diagnostics()["divergences"]) == 30


@pytest.mark.parametrize("options, match", [
    ({"step_size": 0.0}, "step_size must be a positive number, got 0.0"),
    ({"step_size": -1e-3}, "step_size must be a positive number"),
    ({"step_size": math.nan}, "step_size must be a positive number"),
    ({"num_steps": 0}, "num_steps must be an integer >= 1, got 0"),
    ({"num_steps": 2.5}, "num_steps must be an integer >= 1, got 2.5"),
])
def test_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        FixedStepHMC(potential=gaussian_target([0.0], [[1.0]]), **options)


def test_engine():
    assert "fixed_hmc" in ENGINES and ENGINES["fixed_hmc"].defaults() == {
        "step_size": 1e-3, "num_steps": 100, "init_radius": 1.0, "compile": False}
    torch.manual_seed(0)
    r = run(zoo.cosine_mlp(hidden=4), "cosine", engine="fixed_hmc", step_size=2e-3, num_steps=10,
            num_samples=5, warmup_steps=2, num_chains=3)
    assert r.num_chains == 3 and r.num_draws == 5
    assert np.all(r.sample_stats["n_steps"] == 10) and r.options["step_size"] == 2e-3
    assert "target_accept" not in r.options
