"""bnnzoo's kernels on plain Pyro models under the unmodified ``pyro.infer.MCMC``."""

import math

from tests.support import arviz_calls as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from bnnzoo.inference import MCMC, SGHMC, SGLD, ChEESHMC, FixedStepHMC, ProximalHMC, RandomWalkMH
from tests.support.pyro_models import Net
from tests.support.targets import assert_moments


def laplace_model():
    pyro.sample("x", dist.Laplace(0.0, 1.0))


@pytest.mark.parametrize("kernel_cls, options", [
    (ProximalHMC, {"step_size": 0.3, "num_steps": 5}),
    (RandomWalkMH, {"scale": 1.0}),
], ids=["proximal_hmc", "rwmh"])
def test_a_model_without_arguments_samples_its_exact_posterior(kernel_cls, options):
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel_cls(laplace_model, **options), num_samples=1500, warmup_steps=300, num_chains=4,
                chain_method="vectorized", disable_progbar=True)
    mcmc.run()
    draws = mcmc.get_samples(group_by_chain=True)["x"].numpy()[..., None]  # [4, draws, 1]
    assert_moments(draws, np.zeros(1), np.array([math.sqrt(2.0)]), min_ess=400)  # Laplace(0, 1): var 2
    ess_abs = float(az.ess(np.abs(draws[..., 0])))
    mcse = np.abs(draws).std() / math.sqrt(ess_abs)
    assert abs(np.abs(draws).mean() - 1.0) < 5 * mcse  # E|x| = 1


@pytest.mark.parametrize("kernel_cls, options", [
    (ChEESHMC, {"step_size": 1.0, "max_leapfrog_steps": 50}),  # cheap: the NaNs are what it tests
    (ProximalHMC, {"step_size": 1.0, "num_steps": 10}),
    (FixedStepHMC, {"step_size": 2.0, "num_steps": 10}),
], ids=["chees", "proximal_hmc", "fixed_hmc"])
def test_nan_proposals_on_a_pyro_module_are_counted_divergences(kernel_cls, options):
    """Priors built before MCMC.run validate their arguments; a trajectory that leaves the
    finite numbers is a rejected, counted divergence, never an exception."""
    pyro.set_rng_seed(0)
    x = torch.linspace(-2, 2, 30).unsqueeze(-1)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(30)
    mcmc = MCMC(kernel_cls(Net(), **options), num_samples=20, warmup_steps=20, num_chains=4,
                chain_method="vectorized", disable_progbar=True)
    mcmc.run(x, y)
    samples = mcmc.get_samples()
    assert all(torch.isfinite(v).all() for v in samples.values())
    assert (samples["sigma"] > 0).all()
    divergences = mcmc.diagnostics()["divergences"]
    assert sum(len(d) for d in divergences.values()) == mcmc.sample_stats()["diverging"].sum()


def normal_model():
    pyro.sample("x", dist.Normal(1.0, 2.0))


@pytest.mark.parametrize("kernel_cls, options, draws", [
    (RandomWalkMH, {"scale": 2.0}, 1500),
    (FixedStepHMC, {"step_size": 0.5, "num_steps": 4}, 800),
    (ChEESHMC, {}, 800),
    (ProximalHMC, {"step_size": 0.5, "num_steps": 4}, 800),
    (SGLD, {"step_size": 0.4, "schedule": "constant", "thin": 4}, 1000),
    (SGHMC, {"step_size": 0.1, "schedule": "constant", "friction": 0.3, "thin": 4}, 1000),
], ids=["rwmh", "fixed_hmc", "chees", "proximal_hmc", "sgld", "sghmc"])
def test_every_kernel_samples_a_model_without_arguments_exactly(kernel_cls, options, draws):
    """x ~ N(1, 2^2) with no data: ESS first, then mean and sd within 5 MCSE (the SG-MCMC
    step sizes keep their O(step) bias near one MCSE: SGLD's stationary sd here is 2 / sqrt(1 - 0.4 / 8) = 2.05)."""
    pyro.set_rng_seed(1)
    mcmc = MCMC(kernel_cls(normal_model, **options), num_samples=draws, warmup_steps=300, num_chains=4,
                chain_method="vectorized", disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples(group_by_chain=True)["x"].double().numpy()[..., None]  # [4, draws, 1]
    assert_moments(x, np.array([1.0]), np.array([2.0]), min_ess=300)


# ------------------------------------------------------------ models that cannot start, named
def only_discrete(y):
    z = pyro.sample("z", dist.Bernoulli(0.3))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(z, 1.0), obs=y)


def regression(x, y):
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(b * x, 1.0), obs=y)


def nan_factor(y):
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    pyro.factor("penalty", torch.tensor(float("nan")) * b)


def test_a_model_whose_only_latent_is_discrete_is_refused_by_name():
    from bnnzoo.inference.kernels import RandomWalkMH

    with pytest.raises(ValueError, match=r"no continuous latent site to sample: its latent site\(s\) 'z' "
                                         r"\(Bernoulli\) are discrete"):
        RandomWalkMH(only_discrete).setup(5, torch.zeros(4))


@pytest.mark.parametrize("kernel", ["rwmh", "nuts"])
def test_nan_data_name_the_site_and_the_argument(kernel):
    from bnnzoo.inference.kernels import NUTS, RandomWalkMH

    x, y = torch.randn(10), torch.randn(10)
    y[3] = float("nan")
    k = RandomWalkMH(regression) if kernel == "rwmh" else NUTS(regression)
    with pytest.raises(ValueError, match=r"site 'obs' \(observed\) has log density nan, its value holds NaN; "
                                         r"the data hold NaN: argument 'y' \(1 of 10 values NaN\)"):
        k.setup(5, x, y=y)


def test_a_log_density_nan_everywhere_names_its_site():
    from bnnzoo.inference.kernels import RandomWalkMH

    with pytest.raises(ValueError, match=r"not finite at any initial point tried: site 'penalty' \(factor\) "
                                         r"has log density nan$"):
        RandomWalkMH(nan_factor).setup(5, torch.zeros(3))
