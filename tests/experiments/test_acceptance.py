"""Acceptance sweeps of fixed-step HMC (paper 003): exact on a Gaussian posterior, ReLU below
sigmoid, efficiency curves, size sweeps, and bad input refused before sampling."""

import math

import numpy as np
import pytest
from tests.support.targets import leapfrog_gaussian_acceptance, linear_regression

from bnnzoo.data import load
from bnnzoo.experiments import EfficiencyCurve, acceptance_sweep, efficiency_curve, size_sweep
from bnnzoo.experiments.acceptance import SWEEP_COLUMNS
from bnnzoo.models import zoo


@pytest.fixture(scope="module")
def cosine100():
    return load("cosine")


def test_sweep_matches_leapfrog_acceptance_on_a_gaussian_posterior():
    # Bayesian linear regression: the posterior is an exact 4-d Gaussian (sds 0.07 to 0.12)
    target = linear_regression()
    table = acceptance_sweep(target.spec, (target.x, target.y), step_sizes=[0.06, 0.1], num_steps=[5, 12],
                             num_samples=150, warmup_steps=20, num_chains=24, seed=1)
    assert list(table.columns) == list(SWEEP_COLUMNS) and len(table) == 4
    assert list(zip(table.step_size, table.num_steps)) == [(0.06, 5), (0.1, 5), (0.06, 12), (0.1, 12)]
    assert (table.transitions == 24 * 150).all() and (table.divergences == 0).all() and (table.num_params == 4).all()
    for row in table.itertuples():
        exact, exact_se = leapfrog_gaussian_acceptance(target.cov, row.step_size, row.num_steps)
        assert 0 < row.acceptance_se < 0.01  # a sharp test, not a loose one
        assert abs(row.acceptance - exact) < 5 * math.hypot(row.acceptance_se, exact_se), (row, exact)
    # the cells differ by much more than the tolerance: the check tells them apart
    assert table.acceptance.max() - table.acceptance.min() > 0.1


def test_relu_accepts_less_than_sigmoid_at_the_same_step(cosine100):
    # paper 003's network (50 units, N(0, 1) prior, cosine data); chains vary a lot
    # under ReLU (some cross many more kinks), hence 8 chains per network
    accept = {}
    for activation in ("sigmoid", "relu"):
        table = acceptance_sweep(zoo.cosine_mlp(hidden=50, activation=activation), cosine100, step_sizes=[0.0015],
                                 num_steps=[50], num_samples=40, warmup_steps=30, num_chains=8, seed=0)
        accept[activation] = (table.acceptance[0], table.acceptance_se[0])
    (sigmoid, se_s), (relu, se_r) = accept["sigmoid"], accept["relu"]
    assert se_s > 0 and se_r > 0
    assert relu + 3 * math.hypot(se_s, se_r) < sigmoid, accept


def test_divergent_cells_count_and_do_not_crash(cosine100):
    table = acceptance_sweep("cosine_mlp", cosine100, step_sizes=[0.05], num_steps=[20], num_samples=5,
                             warmup_steps=0, num_chains=2)
    assert table.acceptance[0] == 0 and table.divergences[0] == table.transitions[0] == 10


def test_efficiency_curve(cosine100):
    curve = efficiency_curve(zoo.cosine_mlp(hidden=10), cosine100, travel_time=0.03,
                             step_sizes=[0.004, 0.001, 0.002], num_samples=10, warmup_steps=5, num_chains=2)
    table = curve.table
    assert isinstance(curve, EfficiencyCurve) and curve.travel_time == 0.03
    assert list(table.step_size) == [0.001, 0.002, 0.004] and list(table.num_steps) == [30, 15, 8]
    np.testing.assert_allclose(table.efficiency, table.acceptance / table.num_steps)
    np.testing.assert_allclose(table.efficiency_se, table.acceptance_se / table.num_steps)
    best = table.efficiency.idxmax()
    assert curve.optimal_acceptance == table.acceptance[best]


def test_size_sweep(cosine100):
    table = size_sweep(zoo.cosine_mlp(hidden=50, activation="relu"), cosine100, step_size=1e-3, num_steps=5,
                       widths=[3, 6], depths=[1, 2], depth_width=4, num_samples=3, warmup_steps=0, num_chains=2)
    assert list(table.architecture) == ["width", "width", "depth", "depth"]
    assert list(table.width) == [3, 6, 4, 4] and list(table.depth) == [1, 1, 1, 2]
    # one input, one output: 3w + 1 parameters for one hidden layer, 16 + 4 more per extra layer of 4
    assert list(table.num_params) == [10, 19, 13, 33]
    assert table.acceptance.between(0, 1).all()


@pytest.mark.parametrize("call, match", [
    (lambda: acceptance_sweep("cosine_mlp", None, [], [10]), "step_sizes is empty"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01, 0.0], [10]), "step_sizes: .* got 0.0"),
    (lambda: acceptance_sweep("cosine_mlp", None, [-0.01], [10]), "step_sizes: .* got -0.01"),
    (lambda: acceptance_sweep("cosine_mlp", None, [math.inf], [10]), "step_sizes: .* got inf"),
    (lambda: acceptance_sweep("cosine_mlp", None, ["0.1"], [10]), "step_sizes: .* got '0.1'"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], []), "num_steps is empty"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], [10, 0]), "num_steps must be an integer >= 1, got 0"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], [2.5]), "num_steps must be an integer >= 1, got 2.5"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], [10], num_samples=0), "num_samples must be"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], [10], warmup_steps=-1), "warmup_steps must be"),
    (lambda: acceptance_sweep("cosine_mlp", None, [0.01], [10], num_chains=0), "num_chains must be"),
    (lambda: efficiency_curve("cosine_mlp", None, 0.0, [0.01]), "travel_time must be a positive number, got 0.0"),
    (lambda: efficiency_curve("cosine_mlp", None, 1.0, []), "step_sizes is empty"),
    (lambda: size_sweep("cosine_mlp", None, 0.01, 10, widths=[]), "widths is empty"),
    (lambda: size_sweep("cosine_mlp", None, 0.01, 10, depths=[0]), "depths must be an integer >= 1, got 0"),
])
def test_bad_input_is_refused_before_sampling(call, match):
    # data=None would fail inside the first run: the argument check must come first
    with pytest.raises(ValueError, match=match):
        call()
