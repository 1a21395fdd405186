import pytest
from matplotlib.figure import Figure

from bnnzoo.diagnostics import (
    plot_acceptance,
    plot_energy,
    plot_predictive_band,
    plot_rank,
    plot_trace,
    to_inference_data,
)

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
