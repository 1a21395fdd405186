
from tests.support import arviz_calls as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from pyro.infer import NUTS as PyroNUTS

from bnnzoo.diagnostics import site_dims, to_inference_data, summary
from bnnzoo.inference import NUTS, RandomWalkMH, run
from bnnzoo.models import BNN, zoo

DATA_GROUPS = {"posterior", "sample_stats", "log_likelihood", "posterior_predictive", "observed_data",
               "constant_data", "predictions"}


def test_groups_names_dims_and_shapes(rwmh_run, cosine):
    idata = to_inference_data(rwmh_run)
    assert DATA_GROUPS <= set(az.groups(idata))
    assert "warmup_sample_stats" in az.groups(idata)
    assert set(idata.posterior.data_vars) == set(rwmh_run.samples)
    post = idata.posterior
    assert post["layers.0.weight"].dims == ("chain", "draw", "layers.0.weight_out", "layers.0.weight_in")
    assert post["layers.0.weight"].shape == (3, 60, 5, 1)
    assert post["layers.1.weight"].dims[2:] == ("layers.1.weight_out", "layers.1.weight_in")
    assert post["layers.0.bias"].dims == ("chain", "draw", "layers.0.bias_out")
    assert set(idata.sample_stats.data_vars) == {"acceptance_rate", "diverging", "lp", "step_size"}
    assert idata.sample_stats["diverging"].dtype == bool
    assert idata.log_likelihood["obs"].shape == (3, 60, 30)
    assert idata.log_likelihood["obs"].dims == ("chain", "draw", "obs_id")
    assert idata.posterior_predictive["obs"].shape == (3, 60, 30)
    np.testing.assert_array_equal(idata.observed_data["obs"].values, cosine.y_train.numpy())
    np.testing.assert_array_equal(idata.constant_data["x"].values, cosine.x_train.numpy())
    assert idata.predictions["f_mean"].shape == (3, 60, 40)
    assert idata.warmup_sample_stats["step_size"].shape == (3, 60)
    assert idata.posterior.attrs["engine"] == "rwmh"
    assert idata.posterior.attrs["sampling_time"] == pytest.approx(rwmh_run.wall_time)
    assert idata.posterior.attrs["num_warmup"] == 60


def test_log_likelihood_matches_the_model(rwmh_run, cosine):
    idata = to_inference_data(rwmh_run, chunk_size=7)  # chunks that do not divide the draws
    model = rwmh_run.model
    c, d = 2, 41
    values = {k: torch.as_tensor(v[c, d]) for k, v in rwmh_run.samples.items()}
    expected = model.log_likelihood(values, cosine.x_train, cosine.y_train).numpy()
    np.testing.assert_allclose(idata.log_likelihood["obs"].values[c, d], expected, rtol=1e-5)
    # predictive mean at the test inputs is f(x_test) of the same draw
    f = model.apply(values, cosine.x_test)[:, 0].detach().numpy()
    np.testing.assert_allclose(idata.predictions["f_mean"].values[c, d], f, rtol=1e-5)


def test_posterior_predictive_is_noise_around_f(rwmh_run, cosine):
    idata = to_inference_data(rwmh_run)
    f = rwmh_run.predict(cosine.x_train)[..., 0]
    resid = idata.posterior_predictive["obs"].values - f
    # GaussianLikelihood(noise=0.1): 5400 residuals, sd within a few percent
    assert resid.std() == pytest.approx(0.1, rel=0.05)
    assert abs(resid.mean()) < 4 * 0.1 / np.sqrt(resid.size)


@pytest.mark.parametrize("num_chains", [1, 11], ids=["1-chain", "11-chains"])
def test_vectorized_chains_keep_order(cosine, num_chains):
    result = run(zoo.cosine_mlp(hidden=5), cosine, engine="rwmh", num_samples=20, warmup_steps=20,
                 num_chains=num_chains)
    idata = to_inference_data(result)
    assert idata.posterior.sizes["chain"] == num_chains
    np.testing.assert_array_equal(idata.posterior["chain"].values, np.arange(num_chains))
    for c in range(num_chains):
        for name, v in result.samples.items():
            np.testing.assert_array_equal(idata.posterior[name].values[c], v[c])
    # the lp stat of chain c belongs to the draws of chain c: lp = log joint (Gaussian prior, fixed noise)
    values = {k: torch.as_tensor(v) for k, v in result.samples.items()}
    log_joint = result.model.log_joint(values, cosine.x_train, cosine.y_train).numpy()
    np.testing.assert_allclose(idata.sample_stats["lp"].values, log_joint, rtol=1e-4)


def conjugate_model(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


@pytest.fixture(scope="module")
def y_obs():
    return torch.tensor([0.3, 1.2, 0.8, 1.9, 0.4, 1.1])


@pytest.mark.parametrize("kernel", [PyroNUTS, NUTS], ids=["pyro-NUTS", "bnnzoo-NUTS"])
def test_mcmc_with_11_sequential_chains(kernel, y_obs):
    pyro.set_rng_seed(1)
    mcmc = MCMC(kernel(conjugate_model), num_samples=20, warmup_steps=20, num_chains=11, disable_progbar=True)
    mcmc.run(y_obs)
    bare = to_inference_data(mcmc)
    assert set(az.groups(bare)) == {"posterior", "sample_stats"}
    mu = mcmc.get_samples(group_by_chain=True)["mu"].numpy()
    np.testing.assert_array_equal(bare.posterior["mu"].values, mu)
    np.testing.assert_array_equal(bare.posterior["chain"].values, np.arange(11))
    assert bare.sample_stats["diverging"].dtype == bool
    expected_div = np.zeros((11, 20), bool)
    for c, diag in enumerate(mcmc._diagnostics):
        expected_div[c, diag["divergences"]] = True
    np.testing.assert_array_equal(bare.sample_stats["diverging"].values, expected_div)

    idata = to_inference_data(mcmc, model=conjugate_model, data=(y_obs,))
    ll = dist.Normal(torch.as_tensor(mu)[..., None], 1.0).log_prob(y_obs).numpy()
    np.testing.assert_allclose(idata.log_likelihood["y"].values, ll, rtol=1e-5)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y_obs.numpy())
    assert idata.posterior_predictive["y"].shape == (11, 20, 6)
    if kernel is NUTS:  # recorded stats stay with their chain: lp = log joint of the draw
        lp = dist.Normal(0.0, 1.0).log_prob(torch.as_tensor(mu)).numpy() + ll.sum(-1)
        np.testing.assert_allclose(idata.sample_stats["lp"].values, lp, rtol=1e-5)
        assert {"energy", "n_steps", "tree_depth", "step_size", "acceptance_rate"} <= set(idata.sample_stats)
    assert az.loo(idata).elpd_loo < 0


def test_mcmc_with_a_bnn_and_bnnzoo_kernel(cosine):
    model = BNN(zoo.cosine_mlp(hidden=3))
    mcmc = MCMC(RandomWalkMH(model, scale=0.02, num_chains=4), num_samples=15, warmup_steps=10,
                disable_progbar=True)
    mcmc.run(cosine.x_train, cosine.y_train)
    idata = to_inference_data(mcmc, model=model, data=cosine)
    assert idata.posterior.sizes["chain"] == 4
    grouped = mcmc.get_samples(group_by_chain=True)["layers.0.weight"].numpy()  # [1, draw, 4, 3, 1]
    np.testing.assert_array_equal(idata.posterior["layers.0.weight"].values[2], grouped[0, :, 2])
    assert idata.log_likelihood["obs"].shape == (4, 15, 30)
    assert idata.predictions["f_mean"].shape == (4, 15, 40)
    assert idata.posterior.attrs["engine"] == "RandomWalkMH"
    values = {k: torch.as_tensor(v.values) for k, v in idata.posterior.items()}
    log_joint = model.log_joint(values, cosine.x_train, cosine.y_train).numpy()
    np.testing.assert_allclose(idata.sample_stats["lp"].values, log_joint, rtol=1e-4)


def test_nuts_run_summary_loo_and_energy(nuts_run):
    import matplotlib.pyplot as plt

    idata = to_inference_data(nuts_run)
    stats = idata.sample_stats
    assert {"lp", "acceptance_rate", "diverging", "energy", "step_size", "n_steps", "tree_depth"} <= set(stats)
    assert stats["tree_depth"].values.max() <= 3
    assert stats["n_steps"].dtype.kind == "i"
    table = az.summary(idata)
    assert len(table) == sum(int(np.prod(v.shape[2:])) for v in nuts_run.samples.values())
    assert np.isfinite(table["ess_bulk"]).all()
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo)
    ax = az.plot_energy(idata)
    assert ax is not None
    plt.close("all")


def test_rwmh_exports_without_energy(rwmh_run):
    idata = to_inference_data(rwmh_run)
    assert "energy" not in idata.sample_stats
    assert len(az.summary(idata)) == 16


def test_svi_loss_trace_and_netcdf(svi_run, tmp_path):
    idata = to_inference_data(svi_run)
    assert "vi_trace" in az.groups(idata)
    np.testing.assert_allclose(idata.vi_trace["loss"].values, svi_run.vi.loss)
    assert idata.vi_trace["loss"].dims == ("chain", "step")
    assert idata.posterior.attrs["method"] == "vi"
    assert idata.posterior.attrs["inference_library"] == "pyro"
    path = tmp_path / "svi.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    assert "vi_trace" in az.groups(back)
    np.testing.assert_allclose(back.vi_trace["loss"].values, svi_run.vi.loss)


def test_netcdf_round_trip(rwmh_run, tmp_path):
    idata = to_inference_data(rwmh_run)
    path = tmp_path / "rwmh.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    assert DATA_GROUPS <= set(az.groups(back))
    np.testing.assert_array_equal(back.posterior["layers.1.weight"].values, rwmh_run.samples["layers.1.weight"])
    assert back.sample_stats["diverging"].dtype == bool
    np.testing.assert_array_equal(back.log_likelihood["obs"].values, idata.log_likelihood["obs"].values)
    assert back.posterior.attrs["sampling_time"] == pytest.approx(rwmh_run.wall_time)
    assert back.posterior.attrs["engine"] == "rwmh"


def test_summary_of_a_run_builds_its_inference_data(rwmh_run):
    assert set(to_inference_data(rwmh_run).posterior.data_vars) == set(rwmh_run.samples)
    assert set(summary(rwmh_run)["mean"].index) == set(summary(to_inference_data(rwmh_run))["mean"].index)


def test_optional_groups_and_bad_arguments(rwmh_run):
    idata = to_inference_data(rwmh_run, log_likelihood=False, posterior_predictive=False, predictions=False)
    assert "log_likelihood" not in az.groups(idata)
    assert "posterior_predictive" not in az.groups(idata)
    assert "predictions" not in az.groups(idata)
    with pytest.raises(ValueError, match="model= and data="):
        to_inference_data(rwmh_run, model=rwmh_run.model)
    with pytest.raises(TypeError, match="Run or a pyro.infer.MCMC"):
        to_inference_data({"samples": 1})


def test_bernoulli_groups(bernoulli_run):
    idata = to_inference_data(bernoulli_run)
    pp = idata.posterior_predictive["obs"].values
    assert pp.dtype.kind == "i" and set(np.unique(pp)) <= {0, 1}
    assert idata.predictions["f_mean"].dims == ("chain", "draw", "test_id", "class")
    np.testing.assert_allclose(idata.predictions["f_mean"].values.sum(-1), 1.0, rtol=1e-5)


def test_site_dims():
    cnn = BNN(zoo.laplace_cnn(channels=2))
    assert site_dims("layers.0.weight", (2, 1, 3, 3), cnn) == [
        "layers.0.weight_out", "layers.0.weight_in", "layers.0.weight_kh", "layers.0.weight_kw"]
    assert site_dims("layers.0.bias", (2,), cnn) == ["layers.0.bias_out"]
    assert site_dims("layers.0.weight.local_scale", (2, 1, 3, 3), cnn)[0] == "layers.0.weight.local_scale_out"
    assert site_dims("noise_var", (), cnn) == []
    assert site_dims("theta", (4, 2)) == ["theta_dim_0", "theta_dim_1"]
