"""The export under the installed ArviZ (0.2x: InferenceData, 1.x: DataTree): the same groups, dims,
statistic names and attributes, a NetCDF round trip, ``arviz_stats.diagnose`` (1.x) on every engine's
output, and NetCDF files written by the other ArviZ version.

``tests/diagnostics/netcdf/export_arviz<major>.nc`` are written by this file run as a script
(``python -m tests.diagnostics.test_arviz_versions``) under ArviZ 0.2x and under ArviZ 1.x, from the
fixed draws of :func:`fixed_run`; each test reads both, whichever ArviZ is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
import xarray as xr
from pyro.infer import MCMC
from pyro.infer import NUTS as PyroNUTS

from bnnzoo.cli import main
from bnnzoo.data import load
from bnnzoo.diagnostics import chain_table, summary, to_inference_data
from bnnzoo.inference import run
from bnnzoo.inference.engines.registry import ENGINES
from bnnzoo.models import BNN, zoo
from bnnzoo.results import Run
from tests.support import arviz_calls as az
from tests.support import resume_child

NETCDF = Path(__file__).parent / "netcdf"
FIXTURES = sorted(NETCDF.glob("export_arviz*.nc"))
DATA_GROUPS = {"posterior", "sample_stats", "warmup_sample_stats", "log_likelihood", "posterior_predictive",
               "observed_data", "constant_data", "predictions", "prior", "prior_predictive"}
STATS = {"lp", "acceptance_rate", "diverging", "energy", "energy_error", "max_energy_error", "step_size",
         "n_steps", "tree_depth", "reached_max_tree_depth"}


def fixed_run() -> Run:
    """A NUTS-shaped run of fixed draws (2 chains x 5 draws) of a 2-unit cosine MLP, no sampler involved."""
    model = BNN(zoo.cosine_mlp(hidden=2))
    rng = np.random.default_rng(0)
    chains, draws = 2, 5
    samples = {name: rng.normal(size=(chains, draws) + tuple(shape)).astype(np.float32)
               for name, shape in model.param_shapes.items()}
    stats = {
        "lp": rng.normal(-50, 3, size=(chains, draws)),
        "acceptance_rate": rng.uniform(size=(chains, draws)),
        "diverging": np.zeros((chains, draws), bool),
        "energy": rng.normal(55, 3, size=(chains, draws)),
        "energy_error": rng.normal(0, 0.1, size=(chains, draws)),
        "max_energy_error": np.abs(rng.normal(0, 0.3, size=(chains, draws))),
        "step_size": np.full((chains, draws), 0.05),
        "n_steps": np.full((chains, draws), 7),
        "tree_depth": np.full((chains, draws), 3),
        "reached_max_tree_depth": np.zeros((chains, draws), bool),
    }
    stats["diverging"][1, 2] = True
    return Run(samples=samples, sample_stats=stats, warmup_sample_stats={"step_size": np.full((chains, 3), 0.1)},
               notes={"lp": "log joint", "failed": [False, False]}, engine="nuts", model=model,
               data=load("cosine", n_train=8, n_test=5), wall_time=1.25,
               options={"num_samples": draws, "warmup_steps": 3, "max_tree_depth": 3})


def check_export(idata, result) -> None:
    """Groups, dims, statistic names, dtypes and attributes of ``to_inference_data(result)``."""
    assert isinstance(idata, xr.DataTree if az.ARVIZ_1 else __import__("arviz").InferenceData)
    assert DATA_GROUPS <= set(az.groups(idata))
    post = idata.posterior
    assert set(post.data_vars) == set(result.samples)
    for name, value in result.samples.items():
        np.testing.assert_array_equal(post[name].values, value)
    assert post["layers.0.weight"].dims == ("chain", "draw", "layers.0.weight_out", "layers.0.weight_in")
    assert post["layers.1.bias"].dims == ("chain", "draw", "layers.1.bias_out")
    np.testing.assert_array_equal(post["chain"].values, np.arange(result.num_chains))
    stats = idata.sample_stats
    assert set(stats.data_vars) == set(result.sample_stats)
    assert stats["diverging"].dtype == bool and stats["n_steps"].dtype == np.int64
    assert stats["lp"].dtype == np.float64
    assert idata.log_likelihood["obs"].dims == ("chain", "draw", "obs_id")
    assert idata.posterior_predictive["obs"].dims == ("chain", "draw", "obs_id")
    assert idata.observed_data["obs"].dims == ("obs_id",)
    assert idata.constant_data["x"].dims == ("obs_id", "feature")
    assert idata.predictions["f_mean"].dims == ("chain", "draw", "test_id")
    assert idata.prior["layers.0.weight"].dims == post["layers.0.weight"].dims
    assert idata.prior_predictive["obs"].dims == ("chain", "draw", "obs_id")
    for attrs in (post.attrs, stats.attrs, idata.attrs):
        assert attrs["engine"] == "nuts" and attrs["inference_library"] == "pyro"
        assert float(attrs["sampling_time"]) == pytest.approx(result.wall_time)
        assert json.loads(attrs["options"])["max_tree_depth"] == 3
        assert json.loads(attrs["failed"]) == [False, False]


def test_export_of_the_installed_arviz():
    result = fixed_run()
    idata = to_inference_data(result, num_prior_samples=6)
    check_export(idata, result)
    assert idata.prior.sizes["draw"] == 6


def test_netcdf_round_trip(tmp_path):
    result = fixed_run()
    idata = to_inference_data(result, num_prior_samples=6)
    path = tmp_path / "run.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(path)
    check_export(back, result)
    assert az.groups(back) == az.groups(idata)
    for name in az.groups(idata):
        a, b = az.group(idata, name), az.group(back, name)
        assert set(a.data_vars) == set(b.data_vars), name
        for var in a.data_vars:
            assert a[var].dims == b[var].dims and a[var].dtype == b[var].dtype, (name, var)
            np.testing.assert_array_equal(a[var].values, b[var].values)
    assert summary(back).equals(summary(idata))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_netcdf_written_by_either_arviz_version_opens(path, capsys):
    assert {p.stem for p in FIXTURES} == {"export_arviz0", "export_arviz1"}
    result = fixed_run()
    idata = az.from_netcdf(path)
    check_export(idata, result)
    table = summary(idata)
    assert np.isfinite(table.loc["lp", "ess_bulk"])
    assert table["divergences"].iloc[0] == 1
    assert list(chain_table(idata)["divergences"]) == [0, 1]
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "groups posterior, " in out and "engine: nuts" in out and "divergences: 1" in out


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_exports_and_arviz_diagnoses_it(engine):
    settings = {**resume_child.settings(engine), "num_samples": 6, "warmup_steps": 6, "progress": False}
    result = run(**settings)
    idata = to_inference_data(result, num_prior_samples=4)
    assert {"posterior", "sample_stats", "log_likelihood", "posterior_predictive", "observed_data",
            "prior"} <= set(az.groups(idata))
    assert set(idata.posterior.data_vars) == set(result.samples)
    assert len(summary(idata)) > 0
    if az.ARVIZ_1:
        found = az.diagnose(idata)
        assert {"ess", "rhat"} <= set(found)
        if "diverging" in idata.sample_stats:
            assert found["divergent"]["n_divergent"] == int(result.sample_stats["diverging"].sum())
    else:
        with pytest.raises(NotImplementedError, match="ArviZ 1.x"):
            az.diagnose(idata)


# --------------------------------------------------------- plain Pyro models
def keyword_model(x, y=None, scale=1.0):
    w = pyro.sample("w", dist.Normal(0.0, scale))
    pyro.deterministic("slope_times_two", 2 * w)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(w * x, 0.5), obs=y)


@pytest.fixture(scope="module")
def keyword_mcmc():
    x = torch.linspace(-1, 1, 6)
    y = 0.7 * x + torch.tensor([0.1, -0.2, 0.05, 0.0, 0.15, -0.1])
    pyro.set_rng_seed(0)
    mcmc = MCMC(PyroNUTS(keyword_model), num_samples=15, warmup_steps=15, num_chains=2, disable_progbar=True)
    mcmc.run(x, y=y, scale=2.0)
    return mcmc, x, y


def _expected_log_likelihood(w, x, y):
    return dist.Normal(torch.as_tensor(w)[..., None] * x, 0.5).log_prob(y).numpy()


def test_a_pyro_model_called_with_keyword_arguments(keyword_mcmc):
    mcmc, x, y = keyword_mcmc
    w = mcmc.get_samples(group_by_chain=True)["w"].numpy()
    # the model's own arguments, positional and keyword, as the MCMC ran it
    idata = to_inference_data(mcmc, model=keyword_model)
    assert {"log_likelihood", "posterior_predictive", "observed_data"} <= set(az.groups(idata))
    np.testing.assert_allclose(idata.log_likelihood["obs"].values, _expected_log_likelihood(w, x, y), rtol=1e-5)
    np.testing.assert_array_equal(idata.observed_data["obs"].values, y.numpy())
    pp = idata.posterior_predictive["obs"].values
    assert pp.shape == (2, 15, 6)
    resid = pp - w[..., None] * x.numpy()
    assert 0.35 < resid.std() < 0.65  # the likelihood's noise, 0.5
    # keyword arguments given as data=
    again = to_inference_data(mcmc, model=keyword_model, data={"x": x, "y": y, "scale": 2.0})
    np.testing.assert_array_equal(again.log_likelihood["obs"].values, idata.log_likelihood["obs"].values)
    assert np.isfinite(az.elpd_loo(idata))
    with pytest.raises(ValueError, match="data= needs model="):
        to_inference_data(mcmc, data={"x": x})
    with pytest.raises(TypeError, match="keyword arguments"):
        to_inference_data(mcmc, model=keyword_model, data=x)


def test_deterministic_sites_are_exported(keyword_mcmc, tmp_path):
    mcmc, x, y = keyword_mcmc
    w = mcmc.get_samples(group_by_chain=True)["w"].numpy()
    idata = to_inference_data(mcmc, model=keyword_model, num_prior_samples=20)
    post = idata.posterior
    assert set(post.data_vars) == {"w", "slope_times_two"}
    np.testing.assert_allclose(post["slope_times_two"].values, 2 * w, rtol=1e-6)
    assert post["slope_times_two"].dims == ("chain", "draw")
    prior = idata.prior
    np.testing.assert_allclose(prior["slope_times_two"].values, 2 * prior["w"].values, rtol=1e-6)
    assert "slope_times_two" not in idata.log_likelihood and "slope_times_two" not in idata.observed_data
    assert "slope_times_two[0]" not in summary(idata).index and "slope_times_two" in summary(idata).index
    # without the per-draw groups the deterministic sites are still there
    bare = to_inference_data(mcmc, model=keyword_model, log_likelihood=False, posterior_predictive=False, prior=False)
    np.testing.assert_allclose(bare.posterior["slope_times_two"].values, 2 * w, rtol=1e-6)
    assert "log_likelihood" not in az.groups(bare)
    path = tmp_path / "det.nc"
    idata.to_netcdf(str(path))
    np.testing.assert_array_equal(az.from_netcdf(path).posterior["slope_times_two"].values,
                                  post["slope_times_two"].values)


def test_deterministic_sites_with_shape():
    def model(y):
        loc = pyro.sample("loc", dist.Normal(torch.zeros(3), 1.0).to_event(1))
        pyro.deterministic("shifted", loc + 1.0)
        pyro.sample("y", dist.Normal(loc, 1.0).to_event(1), obs=y)

    pyro.set_rng_seed(1)
    mcmc = MCMC(PyroNUTS(model), num_samples=5, warmup_steps=5, num_chains=1, disable_progbar=True)
    mcmc.run(torch.tensor([0.5, -0.5, 1.0]))
    idata = to_inference_data(mcmc, model=model, prior=False)
    shifted = idata.posterior["shifted"]
    assert shifted.dims == ("chain", "draw", "shifted_dim_0")
    np.testing.assert_allclose(shifted.values, idata.posterior["loc"].values + 1.0, rtol=1e-6)


if __name__ == "__main__":  # write this ArviZ version's fixture
    NETCDF.mkdir(exist_ok=True)
    out = NETCDF / f"export_arviz{1 if az.ARVIZ_1 else 0}.nc"
    torch.manual_seed(0)
    to_inference_data(fixed_run(), num_prior_samples=6).to_netcdf(str(out))
    print(f"wrote {out} with ArviZ {az.ARVIZ_VERSION}")
