"""MCLMC and MAMS (the microcanonical samplers on the sampler core): the isokinetic pieces on their
own, MAMS against exact posteriors (a correlated Gaussian, a Laplace-prior posterior on a grid, a
logistic regression against a long NUTS run), MCLMC's bias against its energy-variance target,
divergences, bad options, and both on the zoo's networks."""

import math

import arviz as az
import numpy as np
import pytest
import torch
from torch.distributions.transforms import identity_transform

from bnnzoo.data import load
from bnnzoo.inference import MAMS, MCLMC, FlatPotential, check_run, run
from bnnzoo.inference.adaptation import ChainEnergyVarianceStepSize, EnergyVarianceStepSize
from bnnzoo.inference.isokinetic import GRADIENTS_PER_STEP, INTEGRATORS, Phase, integrate, unit_normal, velocity_update
from bnnzoo.inference.kernels.mams import MAMSAdaptation, MAMSParams, MAMSSampler, search_step_size, trajectory_steps
from bnnzoo.models import Bernoulli, BNNSpec, Dense, Gaussian, GaussianLikelihood, Laplace, zoo
from tests.support.targets import (assert_gaussian, assert_moments, assert_moments_agree, gaussian_target,
                                   regression_draws, run_kernel)

RNG = np.random.default_rng(0)
D = 5
_A = RNG.normal(size=(D, D))
COV = _A @ _A.T / D + np.diag(np.linspace(0.1, 3, D))
MEAN = RNG.normal(size=D)


# ------------------------------------------------------------ pure pieces
def test_the_velocity_stays_on_the_sphere_and_a_zero_force_leaves_it():
    u = unit_normal(torch.zeros(4, 7, dtype=torch.float64))
    force = torch.randn(4, 7, dtype=torch.float64)
    new, kinetic = velocity_update(u, force, 0.3)
    torch.testing.assert_close(new.norm(dim=-1), torch.ones(4, dtype=torch.float64))
    assert kinetic.shape == (4,)
    same, zero = velocity_update(u, torch.zeros_like(force), 0.3)
    torch.testing.assert_close(same, u)
    torch.testing.assert_close(zero, torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("force_norm", [10.0, 1000.0, 10000.0])
@pytest.mark.parametrize("time", [0.01, 1.0])
def test_the_kinetic_change_in_float32_is_as_precise_as_its_size_at_a_real_networks_dimension(force_norm, time):
    """At d = 26 122 (``digits_mlp``) float32's Delta K agrees with float64's within 16 units in the last
    place of |Delta K| + (d - 1) delta, its own size: no rounding of a number near log 2 multiplied by d - 1
    (the paper's form, as written, was off by about 2e-3 whatever the size: bench_kinetic_precision.py)."""
    generator = torch.Generator().manual_seed(1)
    dim = 26_122
    u = torch.randn(16, dim, generator=generator, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    force = torch.randn(16, dim, generator=generator, dtype=torch.float64)
    force = force / force.norm(dim=-1, keepdim=True) * force_norm + 0.3 * force_norm * u
    _, exact = velocity_update(u, force, time)
    _, single = velocity_update(u.float(), force.float(), time)
    size = exact.abs() + time * force.norm(dim=-1)  # (d - 1) delta = time |g|
    assert ((single.double() - exact).abs() <= 16 * torch.finfo(torch.float32).eps * size).all()


@pytest.mark.parametrize("integrator", sorted(INTEGRATORS))
def test_the_integrator_is_reversible_with_its_kinetic_change(integrator):
    target = gaussian_target(MEAN, COV)
    value_and_grad = lambda x: target.value_and_grad(x)  # noqa: E731
    x = torch.tensor(RNG.normal(size=(3, D)), dtype=torch.float64)
    scale = torch.linspace(0.5, 2.0, D, dtype=torch.float64)
    with torch.autocast("cpu", enabled=False):
        target._mean, target._precision = target._mean.double(), target._precision.double()
        start = Phase(x, unit_normal(x), *value_and_grad(x))
        phase, forward = start, torch.zeros(3, dtype=torch.float64)
        for _ in range(5):
            phase, change = integrate(phase, 0.2, scale, value_and_grad, integrator)
            forward = forward + change
        back, backward = Phase(phase.x, -phase.u, phase.value, phase.grad), torch.zeros(3, dtype=torch.float64)
        for _ in range(5):
            back, change = integrate(back, 0.2, scale, value_and_grad, integrator)
            backward = backward + change
    torch.testing.assert_close(back.x, start.x)
    torch.testing.assert_close(-back.u, start.u)
    torch.testing.assert_close(backward, -forward)  # the energy error of the way back undoes the way out


@pytest.mark.parametrize("integrator, order", [("leapfrog", 2), ("mclachlan", 2)])
def test_the_energy_error_shrinks_with_the_integrators_order(integrator, order):
    target = gaussian_target(np.zeros(D), np.eye(D))
    x = torch.tensor(RNG.normal(size=(64, D)), dtype=torch.float64)
    target._mean, target._precision = target._mean.double(), target._precision.double()
    u = unit_normal(x, torch.Generator().manual_seed(0))
    errors = []
    for step in (0.1, 0.05):
        phase, kinetic = Phase(x, u, *target.value_and_grad(x)), torch.zeros(64, dtype=torch.float64)
        for _ in range(int(round(1.0 / step))):  # the same time
            phase, change = integrate(phase, step, torch.ones(D, dtype=torch.float64), target.value_and_grad,
                                      integrator)
            kinetic = kinetic + change
        errors.append(float((kinetic + phase.value - target.value_and_grad(x)[0]).abs().mean()))
    assert errors[0] / errors[1] > 2 ** order * 0.8, errors
    assert GRADIENTS_PER_STEP == {"leapfrog": 1, "mclachlan": 2}


def test_trajectory_steps_average_the_mean_and_stay_in_bounds():
    uniforms = (np.arange(10_000) + 0.5) / 10_000
    steps = [trajectory_steps(7.3, u, 1024) for u in uniforms]
    assert abs(np.mean(steps) - 7.8) < 0.01  # mean n + 1/2
    assert min(steps) == 1 and trajectory_steps(7.3, 0.999, 5) == 5


# ------------------------------------------------------------ MAMS is exact
def test_mams_correlated_gaussian():
    kernel, draws = run_kernel(MAMS, gaussian_target(MEAN, COV), 8, 1000, 500, seed=1)
    assert_gaussian(draws.samples["x"], MEAN, COV)
    stats = draws.sample_stats
    assert stats["diverging"].sum() == 0
    assert 0.7 < stats["acceptance_rate"].mean() < 0.99  # dual averaging toward 0.9
    assert np.all(stats["step_size"] == stats["step_size"][:, :1])  # frozen after warm-up


def test_mams_with_an_unadjusted_burn_in_stays_exact():
    kernel, draws = run_kernel(MAMS, gaussian_target(MEAN, COV), 8, 1000, 500, seed=1, burn_in=0.4)
    assert kernel.adaptation.burn_end == 200 and kernel.adaptation.velocity is None
    assert_gaussian(draws.samples["x"], MEAN, COV)
    assert draws.sample_stats["diverging"].sum() == 0


def burn_in_distance(burn_in: float, start: float, d: int = 100, steps: int = 50) -> float:
    """E z^2 (1 in the typical set) of 8 chains started at ``start`` in every coordinate of
    N(0, diag(sd^2)), sd from 0.03 to 10, after ``steps`` of MAMS's warm-up of 2 ``steps`` (so the
    first ``burn_in * 2 steps`` are the burn-in)."""
    sd = np.logspace(-1.5, 1, d)
    potential = gaussian_target(np.zeros(d), np.diag(sd ** 2))
    torch.manual_seed(3)
    sampler = MAMSSampler(potential.value_and_grad)
    state = sampler.init(torch.full((8, d), start, dtype=torch.get_default_dtype()))
    params = MAMSParams(1.0, math.sqrt(d), torch.ones(d))
    params = params._replace(step_size=search_step_size(sampler, state, params))
    adaptation = MAMSAdaptation(d, 0.9, 1024, burn_in=burn_in)
    state, params = adaptation.start(sampler, state, params, 2 * steps)
    for t in range(steps):
        stepped = adaptation.transition(sampler, t, state, params)
        state, info = stepped if stepped is not None else sampler.step(state, params)
        assert info.n_steps >= 1
        state, params = adaptation.update(sampler, t, state, info, params)
    return float(((state.position / torch.as_tensor(sd)) ** 2).mean())


def test_the_burn_in_carries_chains_started_far_off_to_the_typical_set():
    # from 20 in every coordinate (up to 600 sds out on the narrow ones), at the same number of
    # integrator steps: short adjusted trajectories with a fresh velocity each are still far out,
    # the burn-in's kept velocity has arrived
    adjusted, burnt = burn_in_distance(0.0, 20.0), burn_in_distance(0.5, 20.0)
    assert burnt < 3.0 < 30.0 < adjusted


def test_mams_burn_in_is_counted_in_the_gradient_budget():
    r = run("cosine_mlp", "cosine", engine="mams", num_samples=400, warmup_steps=100, num_chains=2, seed=0,
            progress=False, burn_in=0.5, budget=20_000)
    # 50 burn-in steps of 8 McLachlan steps (2 gradients each) on 2 chains, then MAMS's own
    assert 50 * 8 * 2 * 2 < r.grad_evals["warmup"] and r.grad_evals["total"] <= 20_000
    assert np.isfinite(r.sample_stats["lp"]).all()


def laplace_grid_problem(n=8, scale=0.3, noise=1.0, seed=2):
    """``y = w x + b + N(0, noise^2)``, ``w ~ Laplace(0, scale)``, ``b ~ N(0, 1)``: the posterior's
    means and sds of (w, b) by quadrature on a fine grid."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = 0.4 * x + 0.3 + noise * rng.normal(size=n)
    w, b = np.meshgrid(np.linspace(-3, 3, 1201), np.linspace(-3, 3, 1201), indexing="ij")
    resid = y[None, None, :] - w[..., None] * x - b[..., None]
    log_post = -0.5 * (resid ** 2).sum(-1) / noise ** 2 - np.abs(w) / scale - 0.5 * b ** 2
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    mean = np.array([(weight * w).sum(), (weight * b).sum()])
    sd = np.sqrt(np.array([(weight * w ** 2).sum(), (weight * b ** 2).sum()]) - mean ** 2)
    spec = BNNSpec(layers=[Dense(1)], input_dim=1, prior=Gaussian(1.0), priors={"layers.0.weight": Laplace(scale)},
                   likelihood=GaussianLikelihood(noise))
    dtype = torch.get_default_dtype()
    return spec, torch.tensor(x[:, None], dtype=dtype), torch.tensor(y, dtype=dtype), mean, sd


def test_mams_laplace_prior_posterior_on_a_grid():
    spec, x, y, mean, sd = laplace_grid_problem()
    r = run(spec, (x, y), engine="mams", num_samples=1000, warmup_steps=500, num_chains=8, seed=3, progress=False)
    assert_moments(regression_draws(r.samples), mean, sd, min_ess=400)


def logistic_problem(n=60, p=3, seed=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    logits = x @ np.array([1.5, -1.0, 0.5]) - 0.3
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logits))).astype(float)
    spec = BNNSpec(layers=[Dense(1)], input_dim=p, prior=Gaussian(1.0), likelihood=Bernoulli())
    dtype = torch.get_default_dtype()
    return spec, torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)


def test_mams_logistic_regression_agrees_with_a_long_nuts_run():
    spec, x, y = logistic_problem()
    nuts = run(spec, (x, y), engine="batched_nuts", num_samples=1000, warmup_steps=500, num_chains=16, seed=5,
               progress=False)
    mams = run(spec, (x, y), engine="mams", num_samples=1000, warmup_steps=500, num_chains=8, seed=6,
               progress=False)
    assert_moments_agree(regression_draws(mams.samples), regression_draws(nuts.samples), min_ess=400)


# ------------------------------------------------------------ MCLMC's bias
def whitened_second_moment(draws: np.ndarray) -> tuple[float, float]:
    """``E|z|^2 / d`` (1 without bias) of the whitened draws and its Monte Carlo standard error."""
    z = np.linalg.solve(np.linalg.cholesky(COV), (draws - MEAN)[..., None])[..., 0]
    square = (z ** 2).sum(-1)
    return float(square.mean()) / D, float(az.mcse(square)) / D


def test_mclmc_bias_shrinks_with_its_energy_variance_target():
    results = {}
    for target in (0.5, 5e-4, 5e-6):
        kernel, draws = run_kernel(MCLMC, gaussian_target(MEAN, COV), 16, 1500, 500, seed=1,
                                   desired_energy_var=target)
        assert az.ess(((draws.samples["x"] - MEAN) ** 2).sum(-1)) > 1000
        results[target] = (whitened_second_moment(draws.samples["x"]), kernel.params.step_size)
    (coarse, coarse_se), coarse_step = results[0.5]
    (middle, middle_se), middle_step = results[5e-4]
    (fine, fine_se), fine_step = results[5e-6]
    assert coarse_step > middle_step > fine_step
    assert abs(1 - coarse) - abs(1 - middle) > 5 * math.hypot(coarse_se, middle_se)
    assert abs(1 - fine) < 5 * fine_se  # no bias left that the draws can see


def test_a_start_energy_variance_target_moves_to_the_desired_one_over_phases_one_and_two():
    """``start_energy_var`` (MILE's schedule): the tuner's target goes in a straight line from it to
    ``desired_energy_var`` over warm-up's first 60%, then stays, and the step size tuned at the end is
    the constant target's."""
    kernels = {}
    for start in (None, 0.5):
        kernel, _ = run_kernel(MCLMC, gaussian_target(MEAN, COV), 8, 50, 200, seed=1, desired_energy_var=5e-4,
                               start_energy_var=start)
        kernels[start] = kernel
    adaptation = kernels[0.5].adaptation
    assert adaptation.ends[:2] == [60, 120]
    assert adaptation.energy_var_target(0) == 0.5
    assert adaptation.energy_var_target(60) == pytest.approx((0.5 + 5e-4) / 2)
    assert adaptation.energy_var_target(120) == adaptation.energy_var_target(199) == 5e-4
    assert kernels[None].adaptation.energy_var_target(0) == 5e-4
    tuned = {start: kernel.params.step_size for start, kernel in kernels.items()}
    assert tuned[0.5] == pytest.approx(tuned[None], rel=0.25)


def test_per_chain_tuning_tunes_each_chain_as_the_shared_tuner_tunes_one_chain():
    """``ChainEnergyVarianceStepSize`` (``pool_chains=False``): each chain's step size is the one the
    shared tuner gives fed that chain's energy errors alone; a chain whose step was not finite caps its
    own step size at 0.8 times the one that failed, and no other chain's."""
    errors = torch.randn(40, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    errors = errors * torch.tensor([0.1, 1.0, 3.0], dtype=torch.float64)
    per_chain = ChainEnergyVarianceStepSize(0.5, 3, dim=10, target=0.01)
    alone = [EnergyVarianceStepSize(0.5, 10, 0.01) for _ in range(3)]
    every = torch.ones(3, dtype=torch.bool)
    for error in errors:
        got = per_chain.update(error, every)
        want = [tuner.update(error[c:c + 1], every[:1]) for c, tuner in enumerate(alone)]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert got[0] > got[1] > got[2]  # the smaller a chain's errors, the longer its step
    failed = per_chain.step_size[1].item()
    per_chain.update(torch.tensor([0.01, math.nan, 0.01], dtype=torch.float64), torch.tensor([True, False, True]))
    assert per_chain.step_size_max[1].item() == pytest.approx(0.8 * failed)
    assert per_chain.step_size[1].item() <= 0.8 * failed and torch.isinf(per_chain.step_size_max[[0, 2]]).all()


def test_mclmc_with_each_chain_tuned_on_its_own_is_unbiased_at_a_small_target():
    """``pool_chains=False``: a step size and an L per chain (``[C]`` statistics), and at a small
    energy-error target no bias the draws can see, as with the shared step size."""
    kernel, draws = run_kernel(MCLMC, gaussian_target(MEAN, COV), 16, 1500, 500, seed=1,
                               desired_energy_var=5e-6, pool_chains=False)
    assert az.ess(((draws.samples["x"] - MEAN) ** 2).sum(-1)) > 1000
    moment, se = whitened_second_moment(draws.samples["x"])
    assert abs(1 - moment) < 5 * se
    step, L = kernel.params.step_size, kernel.params.L
    assert step.shape == L.shape == (16,) and len(set(step.tolist())) == 16 and (L > 0).all()
    np.testing.assert_array_equal(draws.sample_stats["step_size"][:, -1], step.numpy())
    np.testing.assert_array_equal(draws.sample_stats["L"][:, -1], L.numpy())
    assert kernel.diagnostics()["step_size"].shape == (16,)


# ------------------------------------------------------------ faults and bad input
class HalfNaN(FlatPotential):
    """A standard normal in two dimensions, NaN where x_0 > 1."""

    names, shapes, transforms = ["x"], {"x": (2,)}, {"x": identity_transform}

    def __init__(self):
        self._layout()

    def __call__(self, theta):
        u = 0.5 * (theta ** 2).sum(-1)
        return torch.where(theta[..., 0] > 1.0, torch.full_like(u, math.nan), u)


@pytest.mark.parametrize("kernel_cls", [MCLMC, MAMS], ids=["mclmc", "mams"])
def test_a_nan_potential_is_a_counted_divergence_and_the_chain_stays_finite(kernel_cls):
    kernel, draws = run_kernel(kernel_cls, HalfNaN(), 8, 200, 100, seed=2)
    x = draws.samples["x"]
    assert np.isfinite(x).all() and (x[..., 0] <= 1.0).all()
    assert draws.sample_stats["diverging"].sum() > 0
    diverging = draws.sample_stats["diverging"]
    assert len(kernel.diagnostics()["divergences"]) == diverging.sum()
    if kernel_cls is MAMS:  # a rejection
        assert np.all(draws.sample_stats["acceptance_rate"][diverging] == 0)


@pytest.mark.parametrize("engine, options, field", [
    ("mclmc", {"integrator": "verlet"}, "integrator"),
    ("mams", {"integrator": "yoshida"}, "integrator"),
    ("mclmc", {"L": 0.0}, "L"),
    ("mams", {"L": -1.0}, "L"),
    ("mclmc", {"desired_energy_var": 0.0}, "desired_energy_var"),
    ("mclmc", {"desired_energy_var": -1e-3}, "desired_energy_var"),
    ("mclmc", {"start_energy_var": 0.0}, "start_energy_var"),
    ("mclmc", {"pool_chains": "no"}, "pool_chains"),
    ("mams", {"target_accept": 1.5}, "target_accept"),
    ("mams", {"max_steps": 0}, "max_steps"),
    ("mams", {"burn_in": 1.0}, "burn_in"),
    ("mams", {"burn_in": -0.2}, "burn_in"),
    ("mams", {"burn_in_energy_var": 0.0}, "burn_in_energy_var"),
])
def test_bad_options_are_refused_naming_the_field(engine, options, field):
    with pytest.raises(ValueError, match=rf"engine '{engine}'.*{field}") as err:
        check_run(engine, **options)
    assert "\n" not in str(err.value)


def test_one_parameter_is_refused_by_name():
    spec = BNNSpec(layers=[Dense(1, bias=False)], input_dim=1, prior=Gaussian(1.0), likelihood=GaussianLikelihood(0.5))
    x, y = torch.randn(5, 1), torch.randn(5)
    with pytest.raises(ValueError, match="MCLMC: the model has 1 unconstrained parameter.*at least 2"):
        run(spec, (x, y), engine="mclmc", num_samples=2, warmup_steps=2, progress=False)


# ------------------------------------------------------------ the zoo's networks
@pytest.mark.parametrize("engine", ["mclmc", "mams"])
def test_both_run_on_the_cosine_mlp(engine):
    r = run("cosine_mlp", "cosine", engine=engine, num_samples=60, warmup_steps=100, num_chains=4, seed=0,
            progress=False)
    lp = r.sample_stats["lp"]
    assert lp.shape == (4, 60) and np.isfinite(lp).all()
    assert r.sample_stats["diverging"][:, -30:].mean() < 0.1


@pytest.mark.parametrize("engine, options", [("mclmc", {}), ("mams", {"max_steps": 4})])
def test_both_run_on_the_digits_mlp(engine, options):
    data = load("digits", seed=0)
    r = run(zoo.digits_mlp(), data, engine=engine, num_samples=4, warmup_steps=8, num_chains=2, seed=0,
            progress=False, **options)
    assert r.samples["layers.0.weight"].shape[:2] == (2, 4)
    assert np.isfinite(r.sample_stats["lp"]).all()


def test_mclmc_steps_per_draw_thins_the_chain():
    one, thin = (run_kernel(MCLMC, gaussian_target(MEAN, COV), 4, 40, 0, seed=5, step_size=0.5, L=2.0,
                            steps_per_draw=k)[1] for k in (1, 4))
    # the same chain: every fourth point of one step per draw is a draw of four steps per draw
    np.testing.assert_allclose(thin.samples["x"][:, :10], one.samples["x"][:, 3::4], rtol=1e-5, atol=1e-6)
    assert np.all(thin.sample_stats["n_steps"] == 4)
