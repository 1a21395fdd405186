"""Conformance: every flat kernel on five kinds of Pyro model, under Pyro's ``MCMC`` and bnnzoo's.

Small draws: this checks behaviour (it runs, chains are chains, Pyro's and ArviZ's tools
accept the result), not accuracy; the exact-posterior tests are elsewhere.
"""

import warnings

from tests.support import arviz_calls as az
import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC as PyroMCMC
from pyro.infer import Predictive

from bnnzoo.diagnostics import to_inference_data
from bnnzoo.inference import (MAMS, MCLMC, MCMC, SGHMC, SGHMCSA, SGLD, SGLDSA, BatchedNUTS, ChEESHMC, FixedStepHMC,
                              GroupSparseSGHMC, ProximalHMC, RandomWalkMH)
from bnnzoo.models import BNN, GroupSpikeAndSlab, SpikeAndSlab, zoo
from bnnzoo.results import split_mcmc
from tests.support.pyro_models import Net

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

N = 12
X = torch.linspace(-1, 1, N).unsqueeze(-1)
Y = 0.5 * X[:, 0] + 0.1 * torch.randn(N, generator=torch.Generator().manual_seed(0))


def no_arguments():
    pyro.sample("x", dist.Laplace(0.0, 1.0))


def keyword_arguments(x, y=None, prior_scale=1.0):
    w = pyro.sample("w", dist.Normal(0.0, prior_scale))
    pyro.sample("obs", dist.Normal(w * x[:, 0], 0.5).to_event(1), obs=y)


def plate_constrained(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    noise = pyro.sample("noise", dist.InverseGamma(3.0, 1.0))
    scale = pyro.sample("scale", dist.HalfNormal(1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(w * scale * x[:, 0], noise.sqrt()), obs=y)


MODELS = {
    "no_arguments": (no_arguments, (), {}),
    "keyword_arguments": (keyword_arguments, (X,), {"y": Y, "prior_scale": 2.0}),
    "plate_constrained": (plate_constrained, (X, Y), {}),
    "pyro_module": (Net(hidden=3), (X, Y), {}),
    "bnn": (BNN(zoo.cosine_mlp(hidden=3)), (X, Y), {}),
}
KERNELS = {
    "rwmh": (RandomWalkMH, {"scale": 0.3}),
    "fixed_hmc": (FixedStepHMC, {"step_size": 0.05, "num_steps": 5}),
    "chees": (ChEESHMC, {"max_leapfrog_steps": 10}),
    "batched_nuts": (BatchedNUTS, {"max_tree_depth": 4}),
    "proximal_hmc": (ProximalHMC, {"num_steps": 5}),
    "sgld": (SGLD, {"step_size": 1e-3}),
    "sghmc": (SGHMC, {"step_size": 1e-3}),
    "mclmc": (MCLMC, {}),
    "mams": (MAMS, {"max_steps": 10}),
}
#: the microcanonical kernels move a unit velocity on a sphere of d - 1 dimensions: d >= 2
MICROCANONICAL = ("mclmc", "mams")
ONE_PARAMETER = ("no_arguments", "keyword_arguments")
HMC_FAMILY = ("fixed_hmc", "chees", "proximal_hmc", "batched_nuts")
CONFIGS = {"pyro-1": (PyroMCMC, 1, None), "pyro-2": (PyroMCMC, 2, None), "vectorized-4": (MCMC, 4, "vectorized")}
DRAWS = 12


def make_mcmc(model_name, kernel_name, config):
    model, args, kwargs = MODELS[model_name]
    cls, options = KERNELS[kernel_name]
    driver, chains, method = CONFIGS[config]
    kernel = cls(model, **options)
    extra = {"chain_method": method} if method else {}
    return driver(kernel, num_samples=DRAWS, warmup_steps=DRAWS, num_chains=chains, disable_progbar=True,
                  **extra), args, kwargs, chains


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_kernel_runs_and_chains_are_chains(model_name, kernel_name, config):
    pyro.set_rng_seed(0)
    mcmc, args, kwargs, chains = make_mcmc(model_name, kernel_name, config)
    if kernel_name == "chees" and config.startswith("pyro"):  # ChEES adapts across chains
        with pytest.raises(ValueError, match="chain_method='vectorized'"):
            mcmc.run(*args, **kwargs)
        return
    if kernel_name in MICROCANONICAL and model_name in ONE_PARAMETER:
        with pytest.raises(ValueError, match="1 unconstrained parameter.*at least 2"):
            mcmc.run(*args, **kwargs)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(*args, **kwargs)
    grouped = mcmc.get_samples(group_by_chain=True)
    flat = mcmc.get_samples()
    for name, value in grouped.items():
        assert value.shape[:2] == (chains, DRAWS), name
        assert flat[name].shape[0] == chains * DRAWS
        assert torch.isfinite(value).all(), name
    # Pyro's own tools see C chains: Predictive on the flat samples, R-hat across chains
    model, _, _ = MODELS[model_name]
    if args:
        predictive = Predictive(model, posterior_samples=flat, return_sites=["obs"])(args[0])
        assert predictive["obs"].shape == (chains * DRAWS, N)
    if chains > 1:
        rhat = mcmc.diagnostics()
        for name, value in grouped.items():
            expected = az.rhat(az.convert_to_dataset(value.double().numpy()), method="split")["x"].values
            np.testing.assert_allclose(rhat[name]["r_hat"].double().numpy(), expected, rtol=1e-6, equal_nan=True)
    # ArviZ accepts the export; the model's arguments, positional and keyword, are those the MCMC ran it with
    idata = to_inference_data(mcmc, model=model, num_prior_samples=0)
    assert idata.posterior.sizes["chain"] == chains and idata.posterior.sizes["draw"] == DRAWS
    assert ("log_likelihood" in az.groups(idata)) == bool(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        az.summary(idata)
        if "log_likelihood" in az.groups(idata):
            az.loo(idata)
        az.plot_trace(idata)
        if kernel_name in HMC_FAMILY:
            az.plot_energy(idata)
            assert np.all(np.isfinite(az.bfmi(idata))) or chains == 1
        if az.ARVIZ_1:
            assert {"ess", "rhat"} <= set(az.diagnose(idata))
    plt.close("all")


# The spike-and-slab SA kernels and group-sparse SGHMC need a BNN with those priors (their
# hyperparameters belong to its sparse layers); the same checks on such a BNN.
def sparse_bnn(prior):
    from bnnzoo.models import BNNSpec, Dense, Gaussian, GaussianLikelihood

    spec = BNNSpec(layers=[Dense(3, "tanh"), Dense(1)], input_dim=1, prior=Gaussian(1.0),
                   priors={"layers.0.weight": prior}, likelihood=GaussianLikelihood(0.3))
    return BNN(spec)


SPARSE = {
    "sgld_sa": (lambda: SGLDSA(sparse_bnn(SpikeAndSlab()), step_size=1e-3)),
    "sghmc_sa": (lambda: SGHMCSA(sparse_bnn(SpikeAndSlab()), step_size=1e-3)),
    "sghmc_group_ss": (lambda: GroupSparseSGHMC(sparse_bnn(GroupSpikeAndSlab()), step_size=1e-3,
                                                schedule="constant")),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kernel_name", sorted(SPARSE))
def test_sparse_kernels_run_and_chains_are_chains(kernel_name, config):
    pyro.set_rng_seed(0)
    kernel = SPARSE[kernel_name]()
    driver, chains, method = CONFIGS[config]
    extra = {"chain_method": method} if method else {}
    mcmc = driver(kernel, num_samples=DRAWS, warmup_steps=DRAWS, num_chains=chains, disable_progbar=True, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(X, Y)
    flat = mcmc.get_samples()
    assert all(v.shape[0] == chains * DRAWS and torch.isfinite(v).all() for v in flat.values())
    obs = Predictive(kernel.model, posterior_samples=flat, return_sites=["obs"])(X)["obs"]
    assert obs.shape == (chains * DRAWS, N)
    idata = to_inference_data(mcmc, model=kernel.model, data=(X, Y))
    assert idata.posterior.sizes["chain"] == chains
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        az.summary(idata)
        az.loo(idata)
    draws = split_mcmc(mcmc)
    final = draws.pruning_mask if kernel_name == "sghmc_group_ss" else draws.inclusion_prob
    assert final is not None and next(iter(final.values())).shape[0] == chains
