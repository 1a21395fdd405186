import pandas as pd
import pytest
from matplotlib.figure import Figure

from bnnzoo.diagnostics import (
    plot_acceptance,
    plot_acceptance_sweep,
    plot_acceptance_vs_size,
    plot_efficiency,
    plot_energy,
    plot_predictive_band,
    plot_rank,
    plot_trace,
    to_inference_data,
)
from bnnzoo.experiments import EfficiencyCurve

pytestmark = pytest.mark.usefixtures("close_figures")


def _written(path):
    return path.exists() and path.stat().st_size > 1000


def test_trace_and_rank(nuts_run, tmp_path):
    idata = to_inference_data(nuts_run, log_likelihood=False, posterior_predictive=False)
    fig = plot_trace(idata, path=tmp_path / "trace.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "trace.png")
    # the first 3 variables (5, 5 and 1 elements), at most 4 elements each, plus lp:
    # one row of 2 panels per scalar
    assert list(nuts_run.samples)[:3] == ["layers.0.bias", "layers.0.weight", "layers.1.bias"]
    assert len(fig.axes) == 2 * (4 + 4 + 1 + 1)
    assert fig.axes[-1].get_title() == "lp"
    fig = plot_rank(idata, var_names=["layers.1.bias"], path=tmp_path / "rank.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "rank.png")
    with pytest.raises(ValueError, match="not in the posterior"):
        plot_trace(idata, var_names=["nope"])


def test_energy(nuts_run, rwmh_run, tmp_path):
    fig = plot_energy(to_inference_data(nuts_run), path=tmp_path / "energy.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "energy.png")
    with pytest.raises(ValueError, match="no 'energy'"):
        plot_energy(to_inference_data(rwmh_run))


def test_acceptance(rwmh_run, nuts_run, svi_run, tmp_path):
    fig = plot_acceptance(to_inference_data(rwmh_run), path=tmp_path / "acc.png")
    assert _written(tmp_path / "acc.png")
    assert len(fig.axes) == 2  # acceptance and step size
    assert len(fig.axes[1].lines) == 3 + 1  # one per chain and the warm-up marker
    x0 = fig.axes[1].lines[0].get_xdata()
    assert x0[0] == -60 and x0[-1] == 59  # warm-up adaptation shown at negative draws
    fig = plot_acceptance(to_inference_data(nuts_run))
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="acceptance_rate"):
        plot_acceptance(to_inference_data(svi_run))


def test_predictive_band(rwmh_run, bernoulli_run, tmp_path):
    fig = plot_predictive_band(rwmh_run, path=tmp_path / "sub" / "band.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "sub" / "band.png")
    ax = fig.axes[0]
    assert len(ax.collections) == 4  # two bands, test and train points
    fig = plot_predictive_band(rwmh_run, x_grid=[-1.0, 0.0, 1.0])
    assert len(fig.axes[0].lines[0].get_xdata()) == 3
    with pytest.raises(ValueError, match="1-D regression"):
        plot_predictive_band(bernoulli_run)


def _sweep_table():
    rows = [{"activation": act, "step_size": eps, "num_steps": n, "acceptance": acc, "acceptance_se": 0.01}
            for act, base in (("sigmoid", 0.95), ("relu", 0.6)) for eps in (0.001, 0.002) for n, acc in
            ((200, base), (400, base - eps * 50))]
    return pd.DataFrame(rows)


def test_acceptance_study_plots(tmp_path):
    # the figures of the acceptance studies of bnnzoo.experiments, drawn from finished tables
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
