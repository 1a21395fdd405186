"""SGLD and SGHMC: the update rules, schedules and minibatches as pure functions;
the kernels against a known Gaussian (exactly, against the stationary law of the
discretised dynamics, and approximately, against the target) and against the
exact posterior of a Bayesian linear regression with minibatches; statistics,
thinning, NaN handling, chains that blow up (flagged failed) and bad options."""

import dataclasses
from bnnzoo.diagnostics import chain_table, summary, to_inference_data
import inspect
import itertools
import json
import math
import warnings

import numpy as np
import pyro
import pytest
import scipy.linalg
import torch
from pyro.infer import MCMC

from bnnzoo.inference import SGHMC, SGLD, BNNPotential, FlatPotential, run
from bnnzoo.inference.sgmcmc import (StepSizeSchedule, inverse_temperature_at, minibatch_rows, sghmc_step,
                                     sgld_step)
from bnnzoo.data import load
from bnnzoo.models import BNN, GroupSpikeAndSlab, SpikeAndSlab, zoo
from tests.support.targets import assert_gaussian, assert_moments, gaussian_target, linear_regression, regression_draws

COV = np.array([[1.0, 0.5], [0.5, 1.0]])
MEAN = np.array([1.0, -2.0])
COSINE = load("cosine", n_train=30, n_test=10)


# ------------------------------------------------------------ pure pieces
def test_sgld_step_is_the_langevin_update():
    theta, grad, noise = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    out = sgld_step(theta, grad, 0.01, inverse_temperature=4.0, noise=noise)
    torch.testing.assert_close(out, theta - 0.01 * grad + math.sqrt(2 * 0.01 / 4.0) * noise)


def test_sghmc_step_is_chen_et_al_eq_15():
    theta, v, grad, noise = (torch.randn(3, 4) for _ in range(4))
    theta_new, v_new = sghmc_step(theta, v, grad, 0.01, friction=0.2, noise_estimate=0.05,
                                  inverse_temperature=2.0, noise=noise)
    want_v = 0.8 * v - 0.01 * grad + math.sqrt(2 * (0.2 - 0.05) * 0.01 / 2.0) * noise
    torch.testing.assert_close(v_new, want_v)
    torch.testing.assert_close(theta_new, theta + want_v)


def test_step_size_schedules():
    assert StepSizeSchedule(0.1)(1000) == 0.1
    poly = StepSizeSchedule(1e-3, "polynomial")  # paper 001: 0.001 k^(-1/3)
    assert poly(1) == pytest.approx(1e-3) and poly(8) == pytest.approx(5e-4) and poly(1000) == pytest.approx(1e-4)
    shifted = StepSizeSchedule(1.0, "polynomial", power=0.5, offset=3.0)
    assert shifted(1) == pytest.approx(1.0) and shifted(13) == pytest.approx(0.5)
    cyc = StepSizeSchedule(0.2, "cyclical", cycle_length=10)
    assert cyc(1) == pytest.approx(0.2) and cyc(6) == pytest.approx(0.1) and cyc(11) == pytest.approx(0.2)
    assert all(cyc(k) > cyc(k + 1) for k in range(1, 10))


def test_simulated_annealing_of_the_inverse_temperature():
    assert inverse_temperature_at(1, 10.0, 1.1) == pytest.approx(10.0)
    assert inverse_temperature_at(3, 10.0, 1.1) == pytest.approx(12.1)
    assert inverse_temperature_at(10**6, 10.0, 1.1, maximum=50.0) == 50.0
    assert inverse_temperature_at(10**6, 10.0, 1.1) == math.inf  # no overflow error
    assert inverse_temperature_at(7, 3.0) == 3.0


def test_minibatch_rows_are_drawn_without_replacement():
    rows = minibatch_rows(20, 7, num_chains=5)
    assert rows.shape == (5, 7)
    assert all(len(set(r.tolist())) == 7 for r in rows) and rows.max() < 20
    shared = minibatch_rows(20, 7, num_chains=5, shared=True)
    assert shared.shape == (7,) and len(set(shared.tolist())) == 7


def test_minibatch_gradient_is_unbiased():
    # averaged over every minibatch of size B, the N/B-scaled estimate is the full potential and gradient
    problem = linear_regression(n=8, p=2, seed=3)
    potential = BNNPotential(BNN(problem.spec), problem.x, problem.y)
    theta = torch.randn(1, potential.dim, dtype=torch.float64).to(torch.get_default_dtype())
    subsets = torch.tensor(list(itertools.combinations(range(8), 3)))  # [56, 3]: one minibatch per "chain"
    value, grad = potential.minibatch_value_and_grad(theta.expand(len(subsets), -1), subsets)
    full_value, full_grad = potential.value_and_grad(theta)
    torch.testing.assert_close(value.mean(0, keepdim=True), full_value, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grad.mean(0, keepdim=True), full_grad, rtol=1e-5, atol=1e-4)
    # one shared minibatch [B] gives the same numbers as that minibatch for every chain [C, B]
    shared_value, _ = potential.minibatch_value_and_grad(theta.expand(2, -1), subsets[5])
    torch.testing.assert_close(shared_value, value[5].expand(2))


# ------------------------------------------------- exact stationary laws
def langevin_stationary_cov(cov: np.ndarray, step_size: float) -> np.ndarray:
    """Stationary covariance of x' = x - h P x + sqrt(2h) xi: solves S = (I - hP) S (I - hP)' + 2h I."""
    a = np.eye(len(cov)) - step_size * np.linalg.inv(cov)
    return scipy.linalg.solve_discrete_lyapunov(a, 2 * step_size * np.eye(len(cov)))


def sghmc_stationary_cov(cov: np.ndarray, step_size: float, friction: float) -> np.ndarray:
    """x block of the stationary covariance of (x, v) under sghmc_step with the exact gradient."""
    d = len(cov)
    eye, hp = np.eye(d), step_size * np.linalg.inv(cov)
    a = np.block([[eye - hp, (1 - friction) * eye], [-hp, (1 - friction) * eye]])
    b = np.vstack([eye, eye]) * math.sqrt(2 * friction * step_size)
    return scipy.linalg.solve_discrete_lyapunov(a, b @ b.T)[:d, :d]


def _gaussian_draws(kernel_cls, num_chains=500, num_samples=300, warmup=300, seed=0, **options):
    pyro.set_rng_seed(seed)
    target = gaussian_target(MEAN, COV)
    options.setdefault("schedule", "constant")  # the stationary laws below are those of a constant step
    kernel = kernel_cls(potential=target, num_chains=num_chains, init_radius=2.0, **options)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples()["x"].numpy()  # [draw, chain, d]
    return np.swapaxes(x, 0, 1), kernel


@pytest.mark.parametrize("kernel_cls, options, exact_cov", [
    (SGLD, {"step_size": 0.05, "thin": 4}, langevin_stationary_cov(COV, 0.05)),
    (SGHMC, {"step_size": 0.01, "friction": 0.2, "thin": 3}, sghmc_stationary_cov(COV, 0.01, 0.2)),
], ids=["sgld", "sghmc"])
def test_gaussian_target(kernel_cls, options, exact_cov):
    draws, _ = _gaussian_draws(kernel_cls, **options)
    # exact: the discretised dynamics' own stationary law, within 5 MCSE
    assert_gaussian(draws, MEAN, exact_cov)
    # approximate: the target itself, up to the O(step) discretisation bias
    flat = draws.reshape(-1, 2)
    np.testing.assert_allclose(flat.mean(0), MEAN, atol=0.03)
    np.testing.assert_allclose(np.cov(flat.T), COV, atol=0.06)


def test_smaller_steps_are_closer_to_the_target():
    # the bias of the unadjusted dynamics shrinks with the step size
    big = langevin_stationary_cov(COV, 0.2)
    small = langevin_stationary_cov(COV, 0.01)
    assert np.abs(small - COV).max() < 0.05 * np.abs(big - COV).max()


def test_inverse_temperature_scales_the_covariance():
    draws, _ = _gaussian_draws(SGLD, num_chains=400, num_samples=200, warmup=200, step_size=0.02, thin=4,
                               inverse_temperature=4.0)
    assert_gaussian(draws, MEAN, langevin_stationary_cov(COV, 0.02) / 4.0)


# ------------------------------------------------ a BNN with minibatches
PROBLEM = linear_regression()


@pytest.mark.parametrize("engine, options", [
    ("sgld", {"step_size": 2e-4, "thin": 5}),
    ("sghmc", {"step_size": 2e-5, "friction": 0.05, "thin": 5}),
], ids=["sgld", "sghmc"])
def test_linear_regression_with_minibatches(engine, options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine=engine, num_samples=600, warmup_steps=500,
                num_chains=8, seed=2, batch_size=20, init_radius=0.5, schedule="constant", **options)
    # a sound run is not flagged, and says so
    assert not [w for w in caught if "failed" in str(w.message)]
    assert r.notes["failed"] == [False] * 8 and r.notes["failed_at"] == [None] * 8
    draws = regression_draws(r.samples)
    # unbiased in the mean; minibatch noise inflates the sd by O(step size), here a few percent
    assert_moments(draws, PROBLEM.mean, draws.std((0, 1), ddof=1))
    assert_moments(draws, PROBLEM.mean, PROBLEM.sd * 1.05, k=8.0)
    stats = r.sample_stats
    assert set(stats) == {"diverging", "lp", "step_size", "temperature"}  # no Metropolis test
    assert stats["lp"].shape == (8, 600) and np.isfinite(stats["lp"]).all()
    assert not stats["diverging"].any()
    idata = to_inference_data(r)
    assert "minibatch" in idata.sample_stats.attrs["lp_estimate"]
    assert "acceptance_rate" not in idata.sample_stats


def test_schedule_temperature_and_thinning_statistics():
    target = gaussian_target(MEAN, COV)
    kernel = SGLD(potential=target, step_size=0.1, schedule="cyclical", cycle_length=6, thin=3,
                  inverse_temperature=1.0, annealing=1.5, num_chains=2)
    mcmc = MCMC(kernel, num_samples=4, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    stats = kernel.diagnostics()["sample_stats"]
    # warm-up: iterations 1, 2; then draws end at iterations 5, 8, 11, 14
    iterations = np.array([5, 8, 11, 14])
    np.testing.assert_allclose(stats["step_size"][:, 0], [kernel.schedule(k) for k in iterations])
    np.testing.assert_allclose(stats["temperature"][:, 0], 1.5 ** -(iterations - 1.0), rtol=1e-6)
    assert kernel.iteration == kernel.state.iteration == 14
    assert "acceptance rate" not in kernel.diagnostics()


class NaNBeyondOne(FlatPotential):
    """Standard normal for x < 1, NaN beyond."""

    def __init__(self):
        from torch.distributions.transforms import identity_transform

        self.names, self.shapes, self.transforms = ["x"], {"x": ()}, {"x": identity_transform}
        self._layout()

    def __call__(self, theta):
        x = theta[..., 0]
        return torch.where(x < 1.0, 0.5 * x**2, torch.full_like(x, math.nan))


@pytest.mark.parametrize("kernel_cls", [SGLD, SGHMC], ids=["sgld", "sghmc"])
def test_nan_gradient_is_a_rejected_counted_divergence(kernel_cls):
    pyro.set_rng_seed(0)
    kernel = kernel_cls(potential=NaNBeyondOne(), step_size=0.3, num_chains=8)
    kernel.initial_params = {"x": torch.zeros(8)}
    mcmc = MCMC(kernel, num_samples=200, warmup_steps=0, disable_progbar=True)
    with pytest.warns(UserWarning, match=f"{kernel_cls.__name__}: .* chain\\(s\\) failed.*frozen"):
        mcmc.run()
    x = mcmc.get_samples()["x"]
    diag = kernel.diagnostics()
    assert torch.isfinite(x).all()
    assert len(diag["divergences"]) > 0
    assert np.isfinite(diag["sample_stats"]["lp"]).all()
    # a chain that stepped past 1 can never move again (every step there is rejected): after
    # 10 such iterations it is flagged failed, so every failed chain ends beyond 1
    failure = diag["final_state"]["failure"]
    final = x.reshape(200, 8)[-1].numpy()
    assert failure["failed"].any() and np.all(final[failure["failed"]] >= 1.0)
    assert all("frozen" in r for r in failure["reason"][failure["failed"]])
    assert np.all(failure["iteration"][failure["failed"]] >= 10)


# ------------------------------------------------------------ failed chains
@pytest.mark.parametrize("engine, kernel", [("sgld", "SGLD"), ("sghmc", "SGHMC")])
def test_a_blow_up_is_flagged_as_failed_with_its_iteration(engine, kernel):
    # step_size=10 on a small network: |theta| passes 1e6 (the bound: 1e6 x the initial radius
    # max(1, max |theta_0|) = 1) within the first warm-up iterations and ends near 1e21, frozen
    with pytest.warns(UserWarning, match=f"{kernel}: 3 of 3 chain\\(s\\) failed; chain 0 at warm-up iteration "
                                         r"\d+ \(draw \d+\): max \|theta\| = .* exceeds 1e\+06.*lower step_size "
                                         r"\(now 10\)"):
        r = run(zoo.cosine_mlp(hidden=5), (COSINE.x_train, COSINE.y_train), engine=engine, num_samples=10,
                warmup_steps=5, num_chains=3, seed=0, step_size=10.0)
    assert max(np.abs(v).max() for v in r.samples.values()) > 1e6
    assert r.notes["failed"] == [True, True, True]
    for at in r.notes["failed_at"]:
        assert at["phase"] == "warmup" and 1 <= at["iteration"] <= 5 and at["draw"] == at["iteration"] - 1
        assert "exceeds 1e+06" in at["reason"]
    # where it shows up: the InferenceData attributes (JSON), the summary and the chain table
    attrs = to_inference_data(r, prior=False).posterior.attrs
    assert json.loads(attrs["failed"]) == [True, True, True]
    assert json.loads(attrs["failed_at"]) == r.notes["failed_at"]
    assert summary(r).attrs["failed"] == [True, True, True]
    assert chain_table(r)["failed"].tolist() == [True, True, True]


def test_a_failure_after_warm_up_names_the_sampling_draw():
    # no warm-up, 3 iterations per draw: the iteration k that fails lies in draw (k - 1) // 3
    pyro.set_rng_seed(0)
    kernel = SGLD(potential=gaussian_target(MEAN, COV), step_size=5.0, thin=3, num_chains=2)
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=0, disable_progbar=True)
    with pytest.warns(UserWarning, match="SGLD: 2 of 2 chain\\(s\\) failed; chain 0 at sampling iteration"):
        mcmc.run()
    failure = kernel.diagnostics()["final_state"]["failure"]
    assert failure["failed"].all() and not failure["warmup"].any()
    np.testing.assert_array_equal(failure["draw"], (failure["iteration"] - 1) // 3)
    # x' = x - 5 P x + noise multiplies x by about |1 - 5 * 4 / 3| = 5.7 a step: 1e6 within a dozen steps
    assert np.all(failure["iteration"] <= 15)


# ------------------------------------------------------------ bad options
@pytest.mark.parametrize("options, message", [
    ({"step_size": 0.0}, "step_size must be a positive number"),
    ({"step_size": -1e-3}, "step_size must be a positive number"),
    ({"schedule": "linear"}, "schedule 'linear'"),
    ({"schedule": "cyclical"}, "needs cycle_length"),
    ({"thin": 0}, "thin must be an integer"),
    ({"batch_size": 0}, "batch_size must be an integer"),
    ({"inverse_temperature": 0.0}, "inverse_temperature must be a positive number"),
], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        SGLD(potential=gaussian_target(MEAN, COV), **options)


@pytest.mark.parametrize("options, message", [
    ({"friction": 0.0}, "friction must be in"),
    ({"friction": 1.5}, "friction must be in"),
    ({"friction": 0.1, "noise_estimate": 0.1}, "noise_estimate must be in"),
    ({"noise_estimate": "exact"}, "noise_estimate 'exact'"),
])
def test_bad_sghmc_options(options, message):
    with pytest.raises(ValueError, match=message):
        SGHMC(potential=gaussian_target(MEAN, COV), **options)


def test_batch_larger_than_the_data_is_refused():
    with pytest.raises(ValueError, match="batch_size=41 is larger than the 40 training rows"):
        run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="sgld", num_samples=5, warmup_steps=0, batch_size=41)


def test_minibatches_need_data():
    kernel = SGLD(potential=gaussian_target(MEAN, COV), batch_size=10)
    with pytest.raises(ValueError, match="minibatches need a BNN model"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run()


# ------------------------------------------------------------ the expected sd inflation
def test_sghmc_variance_ratio_at_friction_one_is_sglds():
    """With alpha = 1 SGHMC's recursion is SGLD's with epsilon = eta: the two formulas agree."""
    from bnnzoo.inference.sgmcmc import sghmc_variance_ratio, sgld_variance_ratio

    for step, curvature, noise in [(0.01, 50.0, 0.0), (0.001, 900.0, 7000.0), (0.3, 1.0, 2.0)]:
        assert sghmc_variance_ratio(step, 1.0, curvature, noise) == pytest.approx(
            sgld_variance_ratio(step, curvature, noise), rel=1e-9)
    assert sgld_variance_ratio(0.01, 1.0) == pytest.approx(1 / (1 - 0.005))
    assert sgld_variance_ratio(2.0, 1.0) == math.inf


def test_sgld_reports_the_sd_inflation_its_step_sizes_give():
    """A conjugate Gaussian linear regression written as a Pyro model with a subsample plate: SGLD's
    automatic step size inflates the posterior sd (1.4-1.5x here); the run says how much, and the
    measured inflation agrees with it within 5 Monte Carlo standard errors of the sd."""
    import warnings

    import arviz as az
    import pyro
    import pyro.distributions as dist

    from bnnzoo.inference import MCMC, SGLD

    torch.manual_seed(0)
    n, b = 200, 20
    x = torch.randn(n, 2)
    y = x @ torch.tensor([1.0, -0.5]) + 0.5 * torch.randn(n)

    def model(x, y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with pyro.plate("data", n, subsample_size=b) as i:
            pyro.sample("y", dist.Normal(x[i] @ w, 0.5), obs=y[i])

    exact_sd = torch.linalg.inv(torch.eye(2) + x.T @ x / 0.25).diagonal().sqrt().numpy()
    pyro.set_rng_seed(1)
    kernel = SGLD(model, batch_size=b, num_chains=4)
    mcmc = MCMC(kernel, num_samples=600, warmup_steps=300, num_chains=4, chain_method="vectorized",
                disable_progbar=True)
    mcmc.run(x, y)
    draws = mcmc.get_samples(group_by_chain=True)["w"].numpy()  # [chain, draw, 2]
    ess = az.ess(az.convert_to_dataset({"w": draws}))["w"].values
    assert ess.min() > 200  # enough for the sd's standard error below
    measured = draws.reshape(-1, 2).std(0) / exact_sd
    predicted = kernel.inflation()["sd_inflation"]
    assert measured.min() > 1.2  # the bias is real
    se = measured / np.sqrt(2 * ess)  # standard error of an sd from ESS draws
    assert np.all(np.abs(measured - predicted) < 5 * se), (measured, predicted, se)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notes = kernel.notes()
    assert notes["expected_sd_inflation"].startswith(f"about {predicted:.3g}x along the stiffest direction")
    assert any("inflated about" in str(w.message) for w in caught)


# ------------------------------------------------------------ the kernels' shape
def test_every_sg_kernel_is_one_level_below_the_driver_and_composes_its_parts():
    from bnnzoo.inference import GroupSparseSGHMC, SGHMCSA, SGLDSA
    from bnnzoo.inference.kernels.group_sparse import EMState, GroupEM, GroupSparseDynamics, MeanLossForce
    from bnnzoo.inference.kernels.sghmc import SGHMCDynamics
    from bnnzoo.inference.kernels.sgld import LangevinDynamics
    from bnnzoo.inference.kernels.sgmcmc import SGInfo, SGMCMCKernel, SGSampler, SGState
    from bnnzoo.inference.kernels.spike_slab_sa import SAState, SpikeSlabAdaptation
    from bnnzoo.inference.kernels.transition import TransitionKernel

    expected = {SGLD: (LangevinDynamics, (), type(None), ()), SGHMC: (SGHMCDynamics, (), type(None), ()),
                SGLDSA: (LangevinDynamics, (SpikeSlabAdaptation,), SpikeSlabAdaptation, (SAState,)),
                SGHMCSA: (SGHMCDynamics, (SpikeSlabAdaptation,), SpikeSlabAdaptation, (SAState,)),
                GroupSparseSGHMC: (GroupSparseDynamics, (GroupEM,), MeanLossForce, (EMState,))}
    def methods(cls):
        return {name for name, value in vars(cls).items() if inspect.isfunction(value) or isinstance(value, property)}

    assert SGMCMCKernel.__bases__ == (TransitionKernel,)  # the driver is the core's adapter, one level down
    driver = methods(SGMCMCKernel) | methods(TransitionKernel)
    x = torch.linspace(-1, 1, 12).unsqueeze(-1)
    y = torch.cos(3 * x[:, 0])
    for cls, (dynamics, components, force, states) in expected.items():
        spec = zoo.cosine_mlp(hidden=2)
        if components == (SpikeSlabAdaptation,):
            spec = dataclasses.replace(spec, priors={"layers.1.weight": SpikeAndSlab()})
        if components == (GroupEM,):
            spec = dataclasses.replace(spec, priors={"layers.1.weight": GroupSpikeAndSlab()})
        assert cls.__bases__ == (SGMCMCKernel,), cls
        overridden = driver & methods(cls)
        assert overridden == {"sg_parts"}, (cls, overridden)
        kernel = cls(BNN(spec), num_chains=3, step_size=1e-3, batch_size=4)
        parts = kernel.parts
        assert type(parts.dynamics) is dynamics
        assert tuple(type(c) for c in parts.components) == components
        assert type(parts.force) is force
        if components == (SpikeSlabAdaptation,):  # the SA is one object: the component and the force
            assert parts.force is parts.components[0]
        # the transition is explicit: a state with the chains leading, a step to the next one and its Info
        kernel.setup(2, x, y)
        state = kernel.state
        assert isinstance(kernel.sampler, SGSampler) and isinstance(state, SGState)
        assert state.position.shape == (3, kernel.potential.dim) and state.iteration == 0
        assert tuple(type(own) for own in state.components) == states
        new, info = kernel.sampler.step(state, kernel.params)
        assert isinstance(info, SGInfo) and info.diverging.shape == (3,)
        assert new.iteration == kernel.params.thin and state.iteration == 0  # the old state is untouched
        assert new.value.shape == (3,) and not torch.equal(new.position, state.position)


def test_an_sg_step_draws_from_the_generator_it_is_given():
    """``step(state, params, generator)``: the same generator state gives the same draw, another seed
    another one, and torch's global stream is left as it was (the updates draw with the global
    generator, to which the step lends the given one's state)."""
    x = torch.linspace(-1, 1, 12).unsqueeze(-1)
    y = torch.cos(3 * x[:, 0])
    kernel = SGHMC(BNN(zoo.cosine_mlp(hidden=2)), num_chains=3, step_size=1e-3, batch_size=4)
    kernel.setup(2, x, y)
    state, params = kernel.state, kernel.params
    torch.manual_seed(11)
    before = torch.get_rng_state()
    one, _ = kernel.sampler.step(state, params, torch.Generator().manual_seed(5))
    two, _ = kernel.sampler.step(state, params, torch.Generator().manual_seed(5))
    other, _ = kernel.sampler.step(state, params, torch.Generator().manual_seed(6))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(one.position, two.position) and not torch.equal(one.position, other.position)
    generator = torch.Generator().manual_seed(5)
    kernel.sampler.step(state, params, generator)
    assert not torch.equal(generator.get_state(), torch.Generator().manual_seed(5).get_state())  # it advanced
    # the global generator at the same state draws the same numbers as the given one
    torch.manual_seed(5)
    plain, _ = kernel.sampler.step(state, params)
    assert torch.equal(plain.position, one.position)
