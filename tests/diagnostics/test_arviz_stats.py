"""Every HMC-family engine exports ArviZ-complete sample stats, and every run with a model
gets prior and prior_predictive groups that ArviZ's prior plots take."""

from tests.support import arviz_calls as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

from bnnzoo.data import load
from bnnzoo.diagnostics import to_inference_data
from bnnzoo.inference import NUTS, run
from bnnzoo.models import zoo

ENGINES = {
    "fixed_hmc": {"step_size": 1e-3, "num_steps": 5, "num_chains": 2},
    "chees": {"num_chains": 4},
    "proximal_hmc": {"num_chains": 2},
    "nuts": {"num_chains": 2, "max_tree_depth": 4},
    "hmc": {"num_chains": 2, "num_steps": 5},
}
pytestmark = pytest.mark.filterwarnings("ignore:ProximalHMC. the potential has no L1")
HMC_STATS = ("energy", "energy_error", "max_energy_error", "step_size", "diverging", "lp", "acceptance_rate")


@pytest.fixture(scope="module")
def tiny():
    return load("cosine", n_train=20, n_test=10)


@pytest.fixture(scope="module", params=list(ENGINES))
def engine_idata(request, tiny):
    engine = request.param
    result = run(zoo.cosine_mlp(hidden=3), tiny, engine=engine, num_samples=20, warmup_steps=20, seed=3,
                 **ENGINES[engine])
    return engine, result, to_inference_data(result)


def test_hmc_family_sample_stats(engine_idata, close_figures):
    engine, result, idata = engine_idata
    stats = idata.sample_stats
    assert set(HMC_STATS) <= set(stats), engine
    for name, value in stats.items():
        if name in ("diverging", "reached_max_tree_depth", "reached_max_steps"):
            assert value.dtype == bool, name
        elif name in ("n_steps", "tree_depth"):
            assert value.dtype == np.int64, name
        else:
            assert value.dtype == np.float64, (engine, name)
    energy, error, max_error = (stats[k].values for k in ("energy", "energy_error", "max_energy_error"))
    assert np.isfinite(energy).all()
    finite = np.isfinite(error)
    assert np.all(max_error[finite] >= np.abs(error[finite]) - 1e-6)
    assert np.all(np.isinf(max_error[~finite]))
    # energy = U + K at the accepted state, lp = -U there: K >= 0
    assert np.all(energy + stats["lp"].values >= -1e-4)
    if engine == "proximal_hmc":  # the jittered step of each chain around the nominal one
        nominal = stats["step_size_nom"].values
        assert np.all(np.abs(stats["step_size"].values / nominal - 1) <= 0.2 + 1e-9)
        assert not np.allclose(stats["step_size"].values, nominal)
    assert np.isfinite(az.bfmi(idata)).all()
    assert az.plot_energy(idata) is not None


def test_fixed_hmc_with_every_proposal_accepted(tiny):
    """A tiny step: every proposal is accepted, so energy is the proposal's H and the
    energy error is the change of H; energy - energy_error is H at the start, at or above -lp
    of the previous draw (its U)."""
    result = run(zoo.cosine_mlp(hidden=3), tiny, engine="fixed_hmc", num_samples=20, warmup_steps=5,
                 step_size=1e-5, num_steps=3, num_chains=2, seed=1)
    stats = result.sample_stats
    assert np.all(stats["acceptance_rate"] > 0.999)
    w = result.samples["layers.0.weight"]
    assert np.all(np.any(w[:, 1:] != w[:, :-1], axis=(2, 3)))  # moved every time
    start = stats["energy"] - stats["energy_error"]
    assert np.all(start[:, 1:] + stats["lp"][:, :-1] >= -1e-3)
    # a tiny step conserves H: the accepted state's H is the start's, up to the tiny error
    np.testing.assert_allclose(stats["energy"], start, atol=1e-3)
    assert np.all(stats["max_energy_error"] < 1e-2)


def test_prior_groups_of_a_run(engine_idata, tiny, close_figures):
    engine, result, idata = engine_idata
    if engine != "nuts":
        pytest.skip("once is enough")
    assert {"prior", "prior_predictive", "observed_data"} <= set(az.groups(idata))
    prior, post = idata.prior, idata.posterior
    assert set(prior.data_vars) == set(post.data_vars)
    for name in post.data_vars:
        assert prior[name].dims == post[name].dims
        assert prior[name].shape[2:] == post[name].shape[2:]
    assert prior.sizes["chain"] == 1 and prior.sizes["draw"] == 40  # the posterior's 2 x 20 draws
    assert idata.prior_predictive["obs"].dims == ("chain", "draw", "obs_id")
    assert idata.prior_predictive["obs"].shape == (1, 40, 20)
    # prior draws: N(0, 1) weights of the cosine MLP (not the posterior's)
    w = prior["layers.0.weight"].values
    assert abs(w.mean()) < 0.6 and 0.6 < w.std() < 1.5
    assert az.plot_ppc(idata, group="prior") is not None
    assert az.plot_prior_posterior(idata) is not None
    # skipped on request
    for kwargs in ({"prior": False}, {"num_prior_samples": 0}):
        assert "prior" not in az.groups(to_inference_data(result, **kwargs))
    assert to_inference_data(result, num_prior_samples=7).prior.sizes["draw"] == 7
    with pytest.raises(ValueError, match="num_prior_samples"):
        to_inference_data(result, num_prior_samples=-1)


def conjugate_model(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def test_prior_groups_of_an_mcmc_with_a_pyro_model(close_figures):
    y = torch.tensor([0.3, 1.2, 0.8, 1.9, 0.4, 1.1])
    pyro.set_rng_seed(0)
    mcmc = MCMC(NUTS(conjugate_model), num_samples=30, warmup_steps=30, num_chains=2, disable_progbar=True)
    mcmc.run(y)
    assert "prior" not in az.groups(to_inference_data(mcmc))  # no model: no prior
    idata = to_inference_data(mcmc, model=conjugate_model, data=(y,), num_prior_samples=400)
    assert idata.prior["mu"].shape == (1, 400)
    assert idata.prior_predictive["y"].shape == (1, 400, 6)
    assert idata.prior_predictive["y"].dims == ("chain", "draw", "y_dim_0")
    mu = idata.prior["mu"].values
    assert abs(mu.mean()) < 0.2 and abs(mu.std() - 1) < 0.15
    # y | mu ~ N(mu, 1): prior predictive sd sqrt(2)
    assert abs(idata.prior_predictive["y"].values.std() - np.sqrt(2)) < 0.15
    assert "log_likelihood" in az.groups(idata) and "posterior_predictive" in az.groups(idata)
    assert az.plot_ppc(idata, group="prior") is not None
    assert az.plot_prior_posterior(idata) is not None
    stats = idata.sample_stats
    assert {"energy", "energy_error", "max_energy_error"} <= set(stats)
    assert all(stats[k].dtype == np.float64 for k in ("energy", "energy_error", "max_energy_error"))
