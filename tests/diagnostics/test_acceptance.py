"""Acceptance sweeps of fixed-step HMC (paper 003): exact on a Gaussian posterior, ReLU below
sigmoid, efficiency curves, size sweeps, their figures, and bad input refused before sampling."""

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from tests.support.targets import leapfrog_gaussian_acceptance, linear_regression

from bnnzoo.data import load
from bnnzoo.diagnostics import (
    EfficiencyCurve,
    acceptance_sweep,
    efficiency_curve,
    plot_acceptance_sweep,
    plot_acceptance_vs_size,
    plot_efficiency,
    size_sweep,
    theoretical_efficiency,
    theoretical_optimal_acceptance,
)
from bnnzoo.diagnostics.acceptance import SWEEP_COLUMNS, optimal_acceptance
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


def test_optimal_acceptance_is_the_best_grid_point():
    assert optimal_acceptance([0.99, 0.9, 0.6, 0.1], [1.0, 3.0, 2.0, 0.5]) == (0.9, False)
    assert optimal_acceptance([0.99, 0.9, 0.0], [1.0, 3.0, 0.0]) == (0.9, False)
    assert optimal_acceptance([0.99, 0.9], [5.0, 3.0]) == (0.99, True)


def test_theory():
    assert theoretical_optimal_acceptance(True) == pytest.approx(0.651, abs=1e-3)
    assert theoretical_optimal_acceptance(False) == pytest.approx(0.452, abs=1e-3)
    a = np.array([0.2, theoretical_optimal_acceptance(False), 0.9])
    eff = theoretical_efficiency(a, smooth=False)
    assert eff[1] == pytest.approx(1.0) and eff[0] < 1 and eff[2] < 1
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        theoretical_efficiency([0.5, 1.0])


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


def _sweep_table():
    rows = [{"activation": act, "step_size": eps, "num_steps": n, "acceptance": acc, "acceptance_se": 0.01}
            for act, base in (("sigmoid", 0.95), ("relu", 0.6)) for eps in (0.001, 0.002) for n, acc in
            ((200, base), (400, base - eps * 50))]
    return pd.DataFrame(rows)


@pytest.mark.usefixtures("close_figures")
def test_plots(tmp_path):
    fig = plot_acceptance_sweep(_sweep_table(), by="activation", path=tmp_path / "sweep.png")
    assert isinstance(fig, Figure) and (tmp_path / "sweep.png").stat().st_size > 1000
    assert [ax.get_title() for ax in fig.axes] == ["sigmoid", "relu"]
    with pytest.raises(ValueError, match="by='width': no such column"):
        plot_acceptance_sweep(_sweep_table(), by="width")

    table = pd.DataFrame({"acceptance": [0.99, 0.8, 0.3], "acceptance_se": [0.01] * 3,
                          "efficiency": [0.01, 0.02, 0.015], "efficiency_se": [0.001] * 3})
    curves = {"sigmoid": EfficiencyCurve(table, 0.5, 0.8, False), "relu": EfficiencyCurve(table, 0.5, 0.8, False)}
    fig = plot_efficiency(curves, path=tmp_path / "eff.png")
    assert len(fig.axes) == 2 and (tmp_path / "eff.png").exists()
    assert "0.651" in fig.axes[1].get_legend().get_texts()[0].get_text()
    assert len(plot_efficiency(curves["relu"], theory=False).axes) == 1

    size = pd.DataFrame({"architecture": ["width", "width", "depth", "depth"], "activation": ["relu"] * 4,
                         "num_params": [31, 151, 61, 481], "acceptance": [0.9, 0.7, 0.8, 0.6],
                         "acceptance_se": [0.01] * 4})
    fig = plot_acceptance_vs_size(size, by="activation", path=tmp_path / "size.png")
    assert [ax.get_title() for ax in fig.axes] == ["growing width", "growing depth"]
