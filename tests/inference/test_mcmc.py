"""``bnnzoo.inference.MCMC``: Pyro's driver with ``chain_method``; C chains are C chains."""

import warnings

from tests.support import arviz_calls as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import NUTS as PyroNUTS
from pyro.infer import Predictive

from bnnzoo.inference import MCMC, ChEESHMC, RandomWalkMH
from bnnzoo.results import split_mcmc


def regression(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, 0.5), obs=y)


X = torch.randn(20, 2, generator=torch.Generator().manual_seed(1))
Y = X @ torch.tensor([1.0, -0.5]) + 0.5 * torch.randn(20, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential", "parallel"])
def test_every_chain_method_gives_c_chains(chain_method):
    pyro.set_rng_seed(0)
    mcmc = MCMC(RandomWalkMH(regression, scale=0.2), num_samples=30, warmup_steps=30, num_chains=3,
                chain_method=chain_method, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(X, Y)
    assert mcmc.num_chains == 3
    assert mcmc.get_samples(group_by_chain=True)["w"].shape == (3, 30, 2)
    assert mcmc.get_samples()["w"].shape == (90, 2)
    assert Predictive(regression, posterior_samples=mcmc.get_samples())(X)["obs"].shape == (90, 20)
    stats = mcmc.sample_stats()
    assert stats["acceptance_rate"].shape == (3, 30) and stats["diverging"].dtype == bool
    assert set(mcmc.diagnostics()["divergences"]) == {"chain 0", "chain 1", "chain 2"}
    draws = split_mcmc(mcmc)
    assert draws.num_chains == 3 and draws.sample_stats["lp"].shape == (3, 30)


def test_vectorized_chains_are_the_kernel_batch_in_order():
    """Chain c of the driver is row c of the kernel's [C, D] batch: its lp is the log joint of its draws."""
    pyro.set_rng_seed(0)
    mcmc = MCMC(ChEESHMC(regression), num_samples=40, warmup_steps=40, num_chains=4, chain_method="vectorized",
                disable_progbar=True)
    mcmc.run(X, Y)
    w = mcmc.get_samples(group_by_chain=True)["w"]  # [4, 40, 2]
    lp = mcmc.sample_stats()["lp"]
    prior = dist.Normal(0.0, 1.0).log_prob(w).sum(-1)
    lik = dist.Normal((X @ w.unsqueeze(-1)).squeeze(-1), 0.5).log_prob(Y).sum(-1)
    np.testing.assert_allclose(lp, (prior + lik).numpy(), rtol=1e-4)
    # Pyro's summary diagnostics and ArviZ's split R-hat agree on the 4 chains
    rhat = mcmc.diagnostics()["w"]["r_hat"].double().numpy()
    np.testing.assert_allclose(rhat, az.rhat(az.convert_to_dataset(w.double().numpy()), method="split")["x"].values,
                               rtol=1e-6)
    if not az.ARVIZ_1:  # ArviZ 0.2x's own converter sees 4 chains too (ArviZ 1.x has no from_pyro)
        import arviz

        idata = arviz.from_pyro(mcmc)
        assert idata.posterior.sizes["chain"] == 4 and idata.posterior["w"].shape == (4, 40, 2)


def test_chain_method_errors_name_the_option():
    with pytest.raises(ValueError, match="chain_method 'batched': choose one of parallel, sequential, vectorized"):
        MCMC(RandomWalkMH(regression), num_samples=5, chain_method="batched")
    with pytest.raises(ValueError, match="chain_method='vectorized' needs a bnnzoo kernel"):
        MCMC(PyroNUTS(regression), num_samples=5, num_chains=2, chain_method="vectorized")
    with pytest.raises(ValueError, match="num_chains must be >= 2 for ChEES trajectory adaptation"):
        pyro.infer.MCMC(ChEESHMC(regression), num_samples=5, warmup_steps=5, disable_progbar=True).run(X, Y)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_bnnzoos_loop_gives_pyros_draws_and_hooks(chain_method):
    """bnnzoo's own loop (the [C, D] point from step to step) gives the draws, statistics and hook calls of
    Pyro's loop (``pyro.infer.MCMC``, which steps through ``kernel.sample(params)``) at the same seed:
    ChEES on 2 vectorized chains (one batch for Pyro's loop), random-walk MH on one chain."""
    from pyro.infer import MCMC as PyroMCMC

    def draws(driver, **kwargs):
        calls = []
        pyro.set_rng_seed(3)
        if chain_method == "vectorized":
            kernel = ChEESHMC(regression)
            kernel.set_num_chains(2)
        else:
            kernel = RandomWalkMH(regression, scale=0.2)
        mcmc = driver(kernel, num_samples=15, warmup_steps=15, disable_progbar=True,
                      hook_fn=lambda k, params, stage, i: calls.append((stage, i, params["w"].clone())), **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(X, Y)
        stats = [d["sample_stats"] for d in mcmc._diagnostics]  # ours: one per chain; Pyro's: [draws, C]
        stats = {k: np.stack([np.asarray(one[k]) for one in stats], -1).reshape(15, -1) for k in stats[0]}
        return mcmc.get_samples()["w"], stats, calls

    vectorized = chain_method == "vectorized"
    ours = draws(MCMC, num_chains=2 if vectorized else 1, chain_method=chain_method)
    pyros = draws(PyroMCMC, num_chains=1)
    # ours: [C * draws, 2], chain by chain; Pyro's one chain holding the batch: [draws, C, 2]
    want = pyros[0].movedim(1, 0).reshape(-1, 2) if vectorized else pyros[0]
    assert ours[0].shape == (30 if vectorized else 15, 2) and torch.equal(ours[0], want)
    assert ours[1].keys() == pyros[1].keys() and "acceptance_rate" in ours[1]
    for name in ours[1]:
        np.testing.assert_array_equal(ours[1][name], pyros[1][name])
    assert [c[:2] for c in ours[2]] == [c[:2] for c in pyros[2]] and len(ours[2]) == 30
    assert all(torch.equal(a[2], b[2]) for a, b in zip(ours[2], pyros[2]))


def test_the_progress_line_is_built_only_when_a_bar_shows_it(monkeypatch):
    """Pyro builds the kernel's progress line at every iteration; bnnzoo's loop only when a bar shows it,
    at most every LOG_EVERY seconds."""
    from bnnzoo.inference import mcmc as mcmc_module

    calls = [0]
    real = RandomWalkMH.logging

    def logging(self):
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(RandomWalkMH, "logging", logging)
    for shown in (False, True):
        calls[0] = 0
        mcmc = MCMC(RandomWalkMH(regression, scale=0.2), num_samples=200, warmup_steps=200, num_chains=2,
                    chain_method="vectorized", disable_progbar=not shown)
        assert isinstance(mcmc.sampler, mcmc_module._Sampler)
        mcmc.run(X, Y)
        if not shown:
            assert calls[0] == 0
        else:
            assert 1 <= calls[0] < 400
