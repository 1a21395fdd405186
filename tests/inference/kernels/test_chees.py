"""ChEESHMC and the leapfrog integrator: exact posteriors, NaN handling,
bad options, and C vectorized chains under Pyro's MCMC driver."""

from bnnzoo.diagnostics import to_inference_data
import math

import numpy as np
import pyro
import pytest
import torch
from pyro.infer import MCMC
from torch.distributions.transforms import identity_transform

from bnnzoo.inference import ChEESHMC, FlatPotential, run, split_mcmc
from bnnzoo.inference.adaptation import WarmupStep
from bnnzoo.inference.kernels.chees import TrajectoryLengthAdaptation
from bnnzoo.inference.engines.driver import _available_memory
from bnnzoo.inference.integrators import kinetic_energy, leapfrog
from bnnzoo.models import BNN
from tests.support.cases import needs_compiler
from tests.support.targets import (
    assert_moments, assert_nan_region_rejected, linear_regression, regression_draws, run_kernel,
)

PROBLEM = linear_regression()


class GaussianTarget(FlatPotential):
    """``N(mean, cov)`` on one site ``x``, in closed form."""

    def __init__(self, mean, cov, dtype=None):
        dtype = dtype or torch.get_default_dtype()
        self.mean = torch.as_tensor(mean, dtype=dtype)
        self.precision = torch.linalg.inv(torch.as_tensor(cov, dtype=dtype))
        self.names, self.shapes = ["x"], {"x": (len(mean),)}
        self.transforms = {"x": identity_transform}
        self._layout()

    def __call__(self, theta):
        d = theta - self.mean
        return 0.5 * ((d @ self.precision) * d).sum(-1)


class TruncatedNormal(FlatPotential):
    """``N(0, 1)`` restricted to ``x <= 1``: the potential is NaN above 1."""

    names, shapes, transforms = ["x"], {"x": (1,)}, {"x": identity_transform}

    def __init__(self):
        self._layout()

    def __call__(self, theta):
        u = 0.5 * (theta ** 2).sum(-1)
        return torch.where(theta[..., 0] > 1.0, torch.full_like(u, math.nan), u)


def ill_scaled_gaussian():
    sd = np.array([0.1, 0.5, 1.0, 3.0])
    corr = np.full((4, 4), 0.6)
    np.fill_diagonal(corr, 1.0)
    return np.array([1.0, -2.0, 0.5, 3.0]), corr * np.outer(sd, sd)


def sample(potential, num_chains, num_samples, warmup_steps, seed=0, **options):
    return run_kernel(ChEESHMC, potential, num_chains, num_samples, warmup_steps, seed, **options)


# ------------------------------------------------------------- integrator
def test_leapfrog_per_chain_steps_match_separate_runs():
    mean, cov = ill_scaled_gaussian()
    target = GaussianTarget(mean, cov, dtype=torch.float64)
    torch.manual_seed(0)
    theta, p = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    value, grad = target.value_and_grad(theta)
    inv_mass = torch.tensor([0.01, 0.25, 1.0, 9.0], dtype=torch.float64)
    steps = torch.tensor([0, 1, 3, 5])
    out = leapfrog(theta, p, grad, 0.05, steps, target.value_and_grad, inv_mass, value)
    for c, n in enumerate(steps.tolist()):
        one = leapfrog(theta[c:c + 1], p[c:c + 1], grad[c:c + 1], 0.05, n, target.value_and_grad, inv_mass,
                       value[c:c + 1])
        for got, want in zip(out, one):
            torch.testing.assert_close(got[c:c + 1], want)


def test_leapfrog_is_reversible_and_nearly_conserves_energy():
    mean, cov = ill_scaled_gaussian()
    target = GaussianTarget(mean, cov, dtype=torch.float64)
    torch.manual_seed(1)
    inv_mass = torch.tensor([0.01, 0.25, 1.0, 9.0], dtype=torch.float64)
    theta = torch.as_tensor(mean) + torch.randn(8, 4, dtype=torch.float64) * inv_mass.sqrt()
    p = torch.randn(8, 4, dtype=torch.float64) / inv_mass.sqrt()
    value, grad = target.value_and_grad(theta)
    step_size = torch.full((8, 1), 0.02, dtype=torch.float64)
    theta1, p1, value1, grad1 = leapfrog(theta, p, grad, step_size, 40, target.value_and_grad, inv_mass)
    energy0 = value + kinetic_energy(p, inv_mass)
    energy1 = value1 + kinetic_energy(p1, inv_mass)
    assert (energy1 - energy0).abs().max() < 0.05
    theta2, p2, _, _ = leapfrog(theta1, -p1, grad1, step_size, 40, target.value_and_grad, inv_mass)
    torch.testing.assert_close(theta2, theta)
    torch.testing.assert_close(-p2, p)


@pytest.mark.parametrize("mass_schedule, hold", [("stan", False), ("late", False), ("late", True)])
def test_correlated_ill_scaled_gaussian(mass_schedule, hold):
    mean, cov = ill_scaled_gaussian()
    kernel, draws = sample(GaussianTarget(mean, cov), num_chains=32, num_samples=250, warmup_steps=300,
                           mass_schedule=mass_schedule, hold_trajectory=hold)
    expected = {"stan": [(75, 100), (100, 150), (150, 250)], "late": [(210, 232), (232, 270)]}[mass_schedule]
    assert kernel.adaptation.windows == expected
    assert_moments(draws.samples["x"], mean, np.sqrt(np.diag(cov)), min_ess=1000)
    # the warm-up found the scales: inverse mass ~ the variances
    np.testing.assert_allclose(kernel.inv_mass.numpy(), np.diag(cov), rtol=0.3)
    assert draws.sample_stats["diverging"].sum() == 0


def test_hold_trajectory_keeps_ten_steps_until_the_first_mass_update():
    mean, cov = ill_scaled_gaussian()
    kernel, draws = sample(GaussianTarget(mean, cov), num_chains=8, num_samples=10, warmup_steps=300,
                           mass_schedule="late", hold_trajectory=True)
    first_update = kernel.adaptation.windows[0][1] - 1  # 231: the T of transition t is set after t - 1
    stats = draws.warmup_sample_stats
    length, step = stats["trajectory_length"][0], stats["step_size"][0]
    # T = 10 x dual averaging's averaged step size (kappa 0.75) over the iterates so far
    log_avg, expected = 0.0, []
    for s, eps in enumerate(step[1: first_update + 1], start=1):
        log_avg += s ** -0.75 * (math.log(eps) - log_avg)
        expected.append(10 * math.exp(log_avg))
    np.testing.assert_allclose(length[1: first_update + 1], expected, rtol=1e-9)
    after = length[first_update + 1:]
    assert len(np.unique(after)) > 10 and after.min() > length[first_update]  # U-turn restart, then ChEES
    # without it, Adam moves T on its own from the first transition on
    _, free = sample(GaussianTarget(mean, cov), num_chains=8, num_samples=10, warmup_steps=300,
                     mass_schedule="late", hold_trajectory=False)
    free_length = free.warmup_sample_stats["trajectory_length"][0][: first_update + 1]
    assert free_length[-1] > 3 * length[first_update]


def test_hold_trajectory_with_no_mass_update_adapts_t_from_the_start():
    _, draws = sample(GaussianTarget([0.0, 0.0], np.eye(2)), num_chains=4, num_samples=5, warmup_steps=60,
                      adapt_mass_matrix=False)  # hold_trajectory=True, the default
    assert len(np.unique(draws.warmup_sample_stats["trajectory_length"][0])) > 30


def test_a_budget_that_ends_warmup_while_t_is_held_samples_at_the_u_turn_time(monkeypatch):
    """A gradient budget may end warm-up before the first mass update: the draws then take T from the
    chains' U-turn time at the final step size (as a mass update restarts it), not the held ten steps."""
    from bnnzoo.inference import MCMC
    from bnnzoo.inference.budget import BudgetMeter
    from bnnzoo.inference.kernels.chees import clip_length
    from bnnzoo.inference.kernels.hmc import HMCSampler

    calls, real = [], HMCSampler.u_turn_time

    def recorded(self, state, params, step_size, max_steps, generator=None):
        calls.append((step_size, max_steps, real(self, state, params, step_size, max_steps, generator)))
        return calls[-1][-1]

    monkeypatch.setattr(HMCSampler, "u_turn_time", recorded)
    mean, cov = ill_scaled_gaussian()
    pyro.set_rng_seed(0)
    kernel = ChEESHMC(potential=GaussianTarget(mean, cov), num_chains=4)
    meter = BudgetMeter(4000)  # warm-up's half: about 90 iterations of the held ten steps
    MCMC(kernel, num_samples=30, warmup_steps=300, num_chains=4, chain_method="vectorized", budget=meter,
         disable_progbar=True).run()
    assert meter.warmup_ended_at < kernel.adaptation.windows[0][0]  # before the first mass window
    (step_size, max_steps, turn), = calls  # once: at the end of warm-up, with no mass update before it
    eps, most = kernel.step_size, kernel.options.max_leapfrog_steps
    assert step_size == eps / 2 and max_steps == 2 * most
    assert kernel.trajectory_length == clip_length(turn, eps, most) != pytest.approx(10 * eps)
    assert kernel.adaptation.components[0].hold is None


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=needs_compiler)])
def test_linear_regression_as_bnn_exact_posterior(compile):
    r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="chees", num_samples=200, warmup_steps=300,
            num_chains=16, seed=2, compile=compile)
    assert r.num_chains == 16
    assert_moments(regression_draws(r.samples), PROBLEM.mean, PROBLEM.sd, min_ess=500)
    if compile:  # the potential and the leapfrog step ran compiled; the compile time is recorded
        assert r.options["compile"] is True and r.compile_seconds > 0
        assert to_inference_data(r).attrs["compile_seconds"] == r.compile_seconds


def test_nan_potential_is_a_rejected_counted_divergence():
    kernel, draws = sample(TruncatedNormal(), num_chains=16, num_samples=400, warmup_steps=200, seed=3)
    assert_nan_region_rejected(kernel, draws)
    assert np.all(np.isfinite(draws.sample_stats["lp"]))
    x = draws.samples["x"]
    # still the right distribution: N(0, 1) truncated at 1
    ratio = math.exp(-0.5) / math.sqrt(2 * math.pi) / (0.5 * (1 + math.erf(1 / math.sqrt(2))))
    assert_moments(x, np.array([-ratio]), np.array([math.sqrt(1 - ratio - ratio ** 2)]), min_ess=100)


def test_a_divergent_chain_counts_as_a_rejection_in_the_steered_statistic():
    # all finite, one chain divergent (energy error > 1000): three quarters of the harmonic mean
    # of the others, so a divergence pulls the step size down (left out, it would not)
    kernel = ChEESHMC(potential=GaussianTarget([0.0], [[1.0]]), num_chains=4)
    kernel.setup(10)
    statistic = kernel.adaptation.statistic
    prob = torch.tensor([1.0, 0.5, 0.0, 0.25])
    diverging = torch.tensor([False, False, True, False])
    theta = torch.zeros(4, 1)
    assert statistic(WarmupStep(theta, theta, prob, diverging, torch.ones(4, dtype=torch.bool))) == [
        pytest.approx(0.75 * 3 / (1 + 2 + 4))]
    assert statistic(WarmupStep(theta, theta, prob, torch.ones(4, dtype=torch.bool), ~diverging)) == [0.0]


# ------------------------------------------------------------ bad options
@pytest.mark.parametrize(
    "options, name",
    [
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": -0.1}, "step_size"),
        ({"target_accept": 1.0}, "target_accept"),
        ({"target_accept": 0.0}, "target_accept"),
        ({"num_chains": 1}, "num_chains"),
        ({"trajectory_length": -1.0}, "trajectory_length"),
        ({"max_leapfrog_steps": 0}, "max_leapfrog_steps"),
        ({"jitter": "sobol"}, "jitter"),
        ({"mass_schedule": "early"}, "mass_schedule"),
        ({"hold_trajectory": "yes"}, "hold_trajectory"),
    ],
    ids=["step0", "step-neg", "accept1", "accept0", "one-chain", "length-neg", "max-steps0", "jitter", "schedule",
         "hold"],
)
def test_bad_options_raise_naming_the_option(options, name):
    with pytest.raises(ValueError, match=name):  # the chains' check comes when the kernel is set up
        ChEESHMC(potential=TruncatedNormal(), **{"num_chains": 4, **options}).setup(5)
    with pytest.raises(ValueError, match=name):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="chees", num_samples=5, warmup_steps=5,
            **{"num_chains": 4, **options})


def test_one_chain_is_fine_without_trajectory_adaptation():
    _, draws = sample(TruncatedNormal(), num_chains=1, num_samples=5, warmup_steps=5, adapt_trajectory=False)
    assert draws.samples["x"].shape == (1, 5, 1)


@pytest.mark.skipif(_available_memory() is None, reason="no /proc/meminfo")
def test_too_many_chains_for_memory_refused_before_sampling():
    with pytest.raises(ValueError, match=r"num_chains=10000000.*GiB"):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="chees", num_samples=5, warmup_steps=5,
            num_chains=10_000_000)


# ------------------------------------------------------------- Pyro driver
def test_pyro_mcmc_runs_c_chains_that_split_back():
    pyro.set_rng_seed(4)
    kernel = ChEESHMC(BNN(PROBLEM.spec), num_chains=6)
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=30, num_chains=1, disable_progbar=True)
    mcmc.run(PROBLEM.x, PROBLEM.y)
    draws = split_mcmc(mcmc)
    assert draws.samples["layers.0.weight"].shape == (6, 20, 1, 3)
    assert draws.samples["layers.0.bias"].shape == (6, 20, 1)
    assert set(ChEESHMC.stat_names) <= set(draws.sample_stats)
    for name in ChEESHMC.stat_names:
        assert draws.sample_stats[name].shape == (6, 20), name
        assert draws.warmup_sample_stats[name].shape == (6, 30), name
    stats = draws.sample_stats
    assert np.all(stats["step_size"] == stats["step_size"][0, 0])  # frozen after warm-up, shared
    assert np.all(stats["trajectory_length"] == stats["trajectory_length"][0, 0])
    assert np.all(stats["n_steps"] == stats["n_steps"][:1])  # one step count per transition
    assert len(np.unique(draws.samples["layers.0.bias"][:, -1])) == 6  # six distinct chains


def test_u_turn_time_is_half_a_period_of_the_gaussian_dynamics():
    """On N(0, s^2 I) in many dimensions, theta_t = theta_0 cos(wt) + ... with w = 1/s
    (unit mass) turns back, (theta_t - theta_0)' p_t < 0, at t ~ pi s; with the
    matching mass M^-1 = s^2 I, at t ~ pi. ChEES starts T there."""
    torch.manual_seed(0)
    dim, sd = 100, 2.0
    kernel = ChEESHMC(potential=GaussianTarget(np.zeros(dim), sd ** 2 * np.eye(dim)), num_chains=64,
                      step_size=0.01)
    kernel.setup(0)
    sampler = kernel.sampler
    torch.manual_seed(0)
    state = sampler.init(sd * torch.randn(64, dim))
    params = kernel.params._replace(inv_mass=torch.ones(dim))
    assert abs(sampler.u_turn_time(state, params, 0.01, 1000) - math.pi * sd) < 0.1 * math.pi * sd
    params = params._replace(inv_mass=torch.full((dim,), sd ** 2))
    assert abs(sampler.u_turn_time(state, params, 0.005, 1000) - math.pi) < 0.1 * math.pi


def test_the_u_turn_restart_is_not_fooled_by_steps_near_the_stability_limit():
    """Half the coordinates stiff (sd 0.01) and a step size just below leapfrog's limit 2 sd:
    their momenta swing with a tenfold amplitude and the criterion turns back after one step,
    though the slow half (sd 1) turns at t ~ pi. The restart integrates at half the step size."""
    torch.manual_seed(0)
    dim, step_size = 100, 0.01998
    sds = np.ones(dim)
    sds[:50] = 0.01
    kernel = ChEESHMC(potential=GaussianTarget(np.zeros(dim), np.diag(sds ** 2)), num_chains=16,
                      step_size=step_size, max_leapfrog_steps=1000)
    kernel.setup(0)
    sampler = kernel.sampler
    torch.manual_seed(0)
    state = sampler.init(torch.as_tensor(sds, dtype=torch.get_default_dtype()) * torch.randn(16, dim))
    params = kernel.params._replace(inv_mass=torch.ones(dim))
    assert params.step_size == step_size
    assert sampler.u_turn_time(state, params, step_size, 1000) < 2 * step_size  # the fake turn at the step size itself
    component = TrajectoryLengthAdaptation(adapt=True, guess=True, max_steps=1000)
    params = component.after_mass_change(None, sampler, state, params, settled=[step_size])
    assert abs(params.trajectory_length - math.pi) < 0.1 * math.pi
