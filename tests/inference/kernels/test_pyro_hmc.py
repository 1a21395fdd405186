"""bnnzoo's Pyro HMC/NUTS: the Pyro internals they read exist, and the recorded statistics
are right on a conjugate Gaussian (mu ~ N(0, 1), y_i ~ N(mu, 1))."""


import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

from bnnzoo.inference.kernels.pyro_hmc import HMC, NUTS, PyroInternals

Y = torch.tensor([0.3, 1.2, 0.8, 1.9, 0.4, 1.1])


def conjugate(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def stats_of(kernel, num_samples=300, warmup_steps=100, seed=0):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
    mcmc.run(Y)
    return mcmc._diagnostics[0]["sample_stats"], mcmc.get_samples()["mu"].numpy()


@pytest.mark.parametrize("kernel_cls", [HMC, NUTS])
def test_the_pyro_internals_relied_on_exist(kernel_cls):
    """Fails loudly, naming what is gone, when a Pyro upgrade drops an internal these kernels read."""
    kernel = kernel_cls(conjugate)
    kernel.setup(10, Y)
    missing = PyroInternals.missing(kernel)
    assert not missing, (f"Pyro {pyro.__version__} lacks internals bnnzoo's {kernel_cls.__name__} reads: "
                         f"{', '.join(missing)} (update bnnzoo/inference/kernels/pyro_hmc.py:PyroInternals)")


def test_a_missing_internal_is_named_at_setup(monkeypatch):
    from pyro.infer.mcmc import nuts

    monkeypatch.delattr(nuts, "_TreeInfo")
    assert PyroInternals.missing(NUTS(conjugate)) == ["pyro.infer.mcmc.nuts._TreeInfo"]
    with pytest.raises(RuntimeError, match=rf"Pyro {pyro.__version__} lacks: pyro.infer.mcmc.nuts._TreeInfo"):
        NUTS(conjugate).setup(10, Y)


def _common_checks(stats, mu):
    assert stats["acceptance_rate"].dtype == np.float64
    assert np.all((stats["acceptance_rate"] >= 0) & (stats["acceptance_rate"] <= 1))
    for name in ("energy", "energy_error", "max_energy_error", "step_size", "lp"):
        assert stats[name].dtype == np.float64, name
        assert np.isfinite(stats[name]).all(), name
    assert stats["diverging"].dtype == bool and not stats["diverging"].any()
    assert np.all(stats["max_energy_error"] >= np.abs(stats["energy_error"]) - 1e-6)
    # lp = log joint of the draw; energy = U + K at the accepted state, so energy + lp = K >= 0
    n = len(Y)
    lp = dist.Normal(0.0, 1.0).log_prob(torch.as_tensor(mu)).numpy() + \
        dist.Normal(torch.as_tensor(mu)[:, None], 1.0).log_prob(Y).sum(-1).numpy()
    np.testing.assert_allclose(stats["lp"], lp, rtol=1e-5)
    assert np.all(stats["energy"] + stats["lp"] >= -1e-5)
    # E-BFMI of a conjugate Gaussian run: of order one
    de = np.diff(stats["energy"])
    assert 0.3 < (de ** 2).mean() / stats["energy"].var() < 3.0, n


def test_hmc_stats():
    stats, mu = stats_of(HMC(conjugate, step_size=0.4, num_steps=4, adapt_step_size=False))
    _common_checks(stats, mu)
    assert stats["n_steps"].dtype == np.int64 and np.all(stats["n_steps"] == 4)
    assert np.all(stats["step_size"] == pytest.approx(0.4))
    # the Metropolis acceptance is that of the proposal's energy error
    np.testing.assert_allclose(stats["acceptance_rate"], np.minimum(1.0, np.exp(-stats["energy_error"])),
                               rtol=1e-5, atol=1e-6)
    # stayed (the draw repeats the previous one) -> energy is H at the start; moved -> H at the proposal
    moved = np.r_[True, mu[1:] != mu[:-1]]
    assert 0 < (~moved).sum() and moved.sum() > 0.5 * len(mu)
    start = np.where(moved, stats["energy"] - stats["energy_error"], stats["energy"])
    # H at the start >= U at the start = -lp of the previous draw (K >= 0)
    assert np.all(start[1:] + stats["lp"][:-1] >= -1e-4)


def test_nuts_stats():
    stats, mu = stats_of(NUTS(conjugate, max_tree_depth=5))
    _common_checks(stats, mu)
    depth, steps = stats["tree_depth"], stats["n_steps"]
    assert depth.dtype == np.int64 and steps.dtype == np.int64
    assert np.all((depth >= 1) & (depth <= 5))
    assert np.all((steps >= 2 ** (depth - 1)) & (steps <= 2 ** depth - 1))
    # a draw that repeats the previous one stayed at the start: no energy error there
    stayed = np.r_[False, mu[1:] == mu[:-1]]
    assert np.all(stats["energy_error"][stayed] == 0)


def test_an_exploding_hmc_trajectory_is_an_infinite_energy_error():
    kernel = HMC(conjugate, step_size=3.0, num_steps=40, adapt_step_size=False)
    stats, mu = stats_of(kernel, num_samples=5, warmup_steps=0)
    assert np.all(stats["acceptance_rate"] == 0) and stats["diverging"].all()
    assert np.all(np.isinf(stats["energy_error"])) and np.all(np.isinf(stats["max_energy_error"]))
    assert np.isfinite(stats["energy"]).all() and np.all(mu == mu[0])


def logistic(x, y):
    b = pyro.sample("b", dist.Normal(0.0, 3.0).expand([2]).to_event(1))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Bernoulli(logits=x @ b), obs=y)


def test_num_steps_is_the_leapfrog_count_of_every_transition_whatever_warm_up_adapts():
    """Pyro fixes the trajectory length at the initial step size x num_steps, so a step size that
    grows in warm-up (here from 0.01 to about 0.5) left one leapfrog step per draw."""
    torch.manual_seed(0)
    x = torch.randn(100, 2)
    y = torch.bernoulli(torch.sigmoid(x @ torch.tensor([1.5, -2.0])))
    pyro.set_rng_seed(0)
    kernel = HMC(logistic, num_steps=7)  # the default step size, 0.01, adapted
    mcmc = MCMC(kernel, num_samples=40, warmup_steps=60, disable_progbar=True)
    mcmc.run(x, y)
    stats = mcmc._diagnostics[0]["sample_stats"]
    assert float(kernel.step_size) > 0.02  # Pyro's rule would take fewer than 7 steps
    assert np.all(stats["n_steps"] == 7)
    # a trajectory length given: Pyro's rule, int(length / step size) steps
    fixed = HMC(logistic, trajectory_length=1.0, step_size=0.25, adapt_step_size=False)
    assert fixed.num_steps == 4
