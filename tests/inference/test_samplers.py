"""NUTS, HMC, RandomWalkMH and SVI against the exact posterior of a conjugate
Bayesian linear regression; per-draw statistics; NaN handling and bad options."""

import math

import numpy as np
import pytest
import torch
from pyro.infer import MCMC

from bnnzoo.inference import FlatPotential, RandomWalkMH, run
from tests.support.targets import assert_moments, linear_regression, regression_draws

PROBLEM = linear_regression()


@pytest.mark.parametrize(
    "engine, options, num_samples, num_chains",
    [
        ("nuts", {}, 400, 2),
        ("hmc", {"num_steps": 5}, 1000, 2),
        ("rwmh", {"scale": 0.1}, 3000, 4),
        ("batched_nuts", {}, 400, 4),
        ("batched_nuts", {"pool_chains": False}, 400, 4),
    ],
    ids=["nuts", "hmc", "rwmh", "batched_nuts", "batched_nuts-per-chain"],
)
def test_exact_posterior_linear_regression(engine, options, num_samples, num_chains):
    r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine=engine, num_samples=num_samples,
            warmup_steps=num_samples, num_chains=num_chains, seed=1, **options)
    assert_moments(regression_draws(r.samples), PROBLEM.mean, PROBLEM.sd)


def test_svi_mean_field_matches_posterior_mean():
    # Mean-field VI recovers the exact posterior mean of a Gaussian posterior
    # (its variances are underestimated when the posterior is correlated).
    # The learning rate decays to 10% so the final iterate sits at the optimum;
    # what remains is optimisation noise (~0.1 sd) plus 1000-draw Monte Carlo error.
    r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="svi", num_samples=1000, num_chains=1,
            seed=0, num_steps=1500, lr=0.03)
    draws = regression_draws(r.samples)
    precision = np.linalg.inv(PROBLEM.cov)
    mean_field_sd = 1 / np.sqrt(np.diag(precision))
    assert np.all(np.abs(draws.mean((0, 1)) - PROBLEM.mean) < 0.2 * mean_field_sd)
    assert np.allclose(draws.std((0, 1)), mean_field_sd, rtol=0.1)


def test_nuts_records_per_draw_statistics():
    r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="nuts", num_samples=30, warmup_steps=30,
            num_chains=2, seed=0, max_tree_depth=5)
    stats = r.sample_stats
    for name in ("acceptance_rate", "step_size", "n_steps", "tree_depth", "energy", "lp", "diverging"):
        assert stats[name].shape == (2, 30), name
    assert np.all((stats["acceptance_rate"] >= 0) & (stats["acceptance_rate"] <= 1))
    assert np.all(stats["n_steps"] <= 2 ** stats["tree_depth"] - 1)
    assert np.all(stats["n_steps"] >= 2 ** (stats["tree_depth"] - 1))
    assert np.all(stats["tree_depth"] <= 5)
    # the step size is frozen after warm-up
    assert np.all(stats["step_size"] == stats["step_size"][:, :1])


class HalfNaN(FlatPotential):
    """Standard normal for x < 1, NaN beyond: every proposal past 1 must be rejected."""

    names = ["x"]
    shapes = {"x": ()}

    def __init__(self):
        from torch.distributions.transforms import identity_transform

        self.transforms = {"x": identity_transform}
        self._layout()

    def __call__(self, theta):
        x = theta[..., 0]
        return torch.where(x < 1.0, 0.5 * x**2, torch.full_like(x, math.nan))


def test_nan_potential_is_a_rejected_counted_divergence():
    kernel = RandomWalkMH(potential=HalfNaN(), scale=1.0, adapt_scale=False, num_chains=8)
    kernel.initial_params = {"x": torch.zeros(8)}
    mcmc = MCMC(kernel, num_samples=200, warmup_steps=0, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples()["x"]
    assert torch.isfinite(x).all() and (x < 1.0).all()
    diag = kernel.diagnostics()
    n_div = int(diag["sample_stats"]["diverging"].sum())
    assert n_div > 0 and len(diag["divergences"]) == n_div
    assert np.all(diag["sample_stats"]["acceptance_rate"][diag["sample_stats"]["diverging"]] == 0)


@pytest.mark.parametrize(
    "engine, option, value, message",
    [
        ("rwmh", "scale", -1.0, "scale must be a positive number, got -1.0"),
        ("rwmh", "target_accept", 1.5, "target_accept must be strictly between 0 and 1"),
        ("rwmh", "chain_method", "threads", "chain_method 'threads'"),
        ("svi", "lr", 0.0, "lr must be a positive number"),
        ("nuts", "bogus", 1, "unknown option"),
    ],
)
def test_bad_options_fail_before_sampling(engine, option, value, message):
    with pytest.raises(ValueError, match=message):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine=engine, num_samples=5, warmup_steps=0,
            num_chains=1, **{option: value})


def test_bad_data_and_counts_are_refused():
    bad_x = PROBLEM.x.clone()
    bad_x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        run(PROBLEM.spec, (bad_x, PROBLEM.y), engine="rwmh", num_samples=5)
    with pytest.raises(ValueError, match="columns"):
        run(PROBLEM.spec, (PROBLEM.x[:, :2], PROBLEM.y), engine="rwmh", num_samples=5)
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1, got 0"):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="rwmh", num_samples=0)
    with pytest.raises(ValueError, match="engine 'nutz': unknown engine"):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="nutz")
