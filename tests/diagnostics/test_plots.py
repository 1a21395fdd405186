from tests.support import arviz_calls as az
import numpy as np
import pandas as pd
import pytest
import xarray as xr
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
from bnnzoo.diagnostics.plots import spread_test_points
from bnnzoo.experiments import EfficiencyCurve

pytestmark = pytest.mark.usefixtures("close_figures")


def _written(path):
    return path.exists() and path.stat().st_size > 1000


def test_trace_and_rank(nuts_run, tmp_path):
    # function space by default: lp and f at three test inputs spread over the test set, never weights
    fig = plot_trace(nuts_run, path=tmp_path / "trace.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "trace.png")
    titles = [ax.get_title(loc="left") for ax in fig.axes[::2]]
    assert titles[0] == "lp" and len(titles) == 4
    assert all(t.startswith("f(x=") and ", test " in t for t in titles[1:])
    assert not any("layers." in t for t in titles)
    # the same from the InferenceData: its predictions group, named by test index
    idata = to_inference_data(nuts_run, log_likelihood=False, posterior_predictive=False)
    fig = plot_trace(idata)
    assert [ax.get_title(loc="left") for ax in fig.axes[::2]][1:] == [
        f"f_mean[test {i}]" for i in spread_test_points(np.arange(40))]
    # weights only when asked for
    fig = plot_rank(idata, var_names=["layers.1.bias"], path=tmp_path / "rank.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "rank.png")
    assert [ax.get_title().split("\n")[0] for ax in fig.axes if ax.images] == ["lp", "layers.1.bias[0]"]
    with pytest.raises(ValueError, match="not in the posterior"):
        plot_trace(idata, var_names=["nope"])


def test_test_points_are_spread_over_the_test_set():
    x = np.linspace(0, 1, 41)[::-1].reshape(-1, 1)  # descending: quantiles of x, not of the index
    picked = spread_test_points(x, 3)
    assert list(x[picked, 0]) == pytest.approx([0.1, 0.5, 0.9])
    assert list(spread_test_points(np.zeros((11, 4)), 3)) == [1, 5, 9]


def _many_chains(chains, draws=50, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(chains, draws))
    values[0] += 3.0  # one chain stuck elsewhere
    return xr.Dataset({"lp": (("chain", "draw"), values), "f(x=1, test 3)": (("chain", "draw"), values * 2)},
                      coords={"chain": np.arange(chains), "draw": np.arange(draws)})


@pytest.mark.parametrize("chains", [16, 64])
def test_rank_and_trace_stay_readable_at_many_chains(chains, tmp_path):
    data = _many_chains(chains)
    fig = plot_rank(data, path=tmp_path / "rank.png")
    assert _written(tmp_path / "rank.png")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    counts = panels[0].images[0].get_array()
    assert counts.shape[0] == chains  # one row per chain
    assert counts[0, -1] > 1.5 and counts[1:].mean() == pytest.approx(1.0, abs=0.2)  # the stuck chain shows
    assert "R-hat" in panels[0].get_title()
    fig = plot_trace(data)
    assert all(len(ax.lines) == 8 for ax in fig.axes[::2])  # at most 8 chains overlaid
    assert f"8 of {chains} chains" in fig._suptitle.get_text()


def test_energy(nuts_run, rwmh_run, tmp_path):
    fig = plot_energy(to_inference_data(nuts_run), path=tmp_path / "energy.png")
    assert isinstance(fig, Figure) and _written(tmp_path / "energy.png")
    assert plot_energy(nuts_run).axes[0].get_title() == "2 chains pooled"
    with pytest.raises(ValueError, match="no 'energy'"):
        plot_energy(to_inference_data(rwmh_run))


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("chains", [2, 64])
def test_energy_legend_is_outside_the_axes_and_chains_are_pooled(chains):
    rng = np.random.default_rng(1)
    energy = rng.normal(size=(chains, 80)).cumsum(1) * 0.3 + rng.normal(size=(chains, 80))
    idata = az.from_dict(posterior={"w": rng.normal(size=(chains, 80))}, sample_stats={"energy": energy})
    fig = plot_energy(idata)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None and len(legend.get_texts()) == 2  # not one entry per chain
        assert not _overlap(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
    assert len(fig.axes[0].patches) == 80  # two pooled histograms of 40 bins
    assert len(fig.axes[1].lines[0].get_xdata()) == chains  # E-BFMI, one point per chain
    assert fig.axes[1].lines[0].get_ydata() == pytest.approx(az.bfmi(energy))


def test_acceptance(rwmh_run, nuts_run, svi_run, tmp_path):
    fig = plot_acceptance(to_inference_data(rwmh_run), path=tmp_path / "acc.png")
    assert _written(tmp_path / "acc.png")
    assert len(fig.axes) == 2  # acceptance and step size
    assert len(fig.axes[1].lines) == 3 + 1  # one per chain and the warm-up marker
    x0 = fig.axes[1].lines[0].get_xdata()
    assert x0[0] == -60 and x0[-1] == 59  # warm-up adaptation shown at negative draws
    assert fig.axes[1].get_ylabel() == "proposal scale"  # RWMH's step_size stat is its proposal scale
    fig = plot_acceptance(to_inference_data(nuts_run))
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "step size"
    # many chains: the median and the 10-90% band, not one line per chain
    fig = plot_acceptance(rwmh_run, max_chains=2)
    assert [len(ax.lines) for ax in fig.axes] == [2, 2] and len(fig.axes[0].collections) == 1
    assert "median of 3 chains" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
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
