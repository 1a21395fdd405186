"""FixedStepHMC: exact on a known Gaussian, nothing adapted, divergences counted."""

import math

import numpy as np
import pytest
import torch
from tests.support.targets import assert_gaussian, gaussian_target, leapfrog_gaussian_acceptance, run_kernel

from bnnzoo.inference import ENGINES, FixedStepHMC, run
from bnnzoo.models import zoo

MEAN = [1.0, -2.0, 0.5]
COV = [[1.0, 0.6, 0.0], [0.6, 2.0, -0.4], [0.0, -0.4, 0.5]]


def test_samples_a_correlated_gaussian():
    kernel, draws = run_kernel(FixedStepHMC, gaussian_target(MEAN, COV), num_chains=4, num_samples=600,
                               warmup_steps=50, step_size=0.35, num_steps=7)
    assert_gaussian(np.asarray(draws.samples["x"]), np.asarray(MEAN), np.asarray(COV))
    stats = draws.sample_stats
    # nothing adapts: every transition used the given step size and steps
    assert np.all(stats["step_size"] == pytest.approx(0.35)) and np.all(stats["n_steps"] == 7)
    assert kernel.step_size == 0.35 and kernel.options.num_steps == 7
    assert not stats["diverging"].any()
    # and the mean acceptance is leapfrog's on this Gaussian (from the stationary start onwards)
    exact, exact_se = leapfrog_gaussian_acceptance(COV, 0.35, 7, draws=400_000)
    per_chain = stats["acceptance_rate"].mean(1)
    se = per_chain.std(ddof=1) / math.sqrt(len(per_chain))
    assert abs(per_chain.mean() - exact) < 5 * math.hypot(se, exact_se)


def test_adaptive_hmc_samples_a_correlated_gaussian_after_its_window_adaptation():
    from bnnzoo.inference.kernels import AdaptiveHMC

    kernel, draws = run_kernel(AdaptiveHMC, gaussian_target(MEAN, COV), num_chains=4, num_samples=600,
                               warmup_steps=300, num_steps=5, target_accept=0.8)
    assert_gaussian(np.asarray(draws.samples["x"]), np.asarray(MEAN), np.asarray(COV))
    stats = draws.sample_stats
    assert np.all(stats["step_size"] == kernel.step_size) and np.all(stats["n_steps"] == 5)  # frozen after warm-up
    # the mass windows found the scales: inverse mass ~ the marginal variances
    np.testing.assert_allclose(kernel.inv_mass.numpy(), np.diag(COV), rtol=0.3)
    assert kernel.diagnostics()["step_size"] == kernel.step_size
    assert abs(stats["acceptance_rate"].mean() - 0.8) < 0.1


def test_non_finite_energy_is_a_rejected_divergence():
    # far beyond leapfrog's stability limit (step * omega > 2) the trajectory overflows to inf/NaN
    potential = gaussian_target([0.0, 0.0], [[1.0, 0.0], [0.0, 1e-4]])
    kernel, draws = run_kernel(FixedStepHMC, potential, num_chains=3, num_samples=10, warmup_steps=0,
                               step_size=5.0, num_steps=200)
    stats = draws.sample_stats
    assert stats["diverging"].all() and np.all(stats["acceptance_rate"] == 0)
    assert np.isinf(stats["energy_error"]).all()
    first = draws.samples["x"][:, 0]
    assert np.isfinite(first).all() and np.all(draws.samples["x"] == first[:, None])  # never moved
    assert len(kernel.diagnostics()["divergences"]) == 30


@pytest.mark.parametrize("options, match", [
    ({"step_size": 0.0}, "step_size must be a positive number, got 0.0"),
    ({"step_size": -1e-3}, "step_size must be a positive number"),
    ({"step_size": math.nan}, "step_size must be a positive number"),
    ({"num_steps": 0}, "num_steps must be an integer >= 1, got 0"),
    ({"num_steps": 2.5}, "num_steps must be an integer >= 1, got 2.5"),
])
def test_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        FixedStepHMC(potential=gaussian_target([0.0], [[1.0]]), **options)


def test_engine():
    assert "fixed_hmc" in ENGINES and ENGINES["fixed_hmc"].defaults() == {
        "step_size": 1e-3, "num_steps": 100, "init_radius": 1.0, "compile": "auto"}
    torch.manual_seed(0)
    r = run(zoo.cosine_mlp(hidden=4), "cosine", engine="fixed_hmc", step_size=2e-3, num_steps=10,
            num_samples=5, warmup_steps=2, num_chains=3)
    assert r.num_chains == 3 and r.num_draws == 5
    assert np.all(r.sample_stats["n_steps"] == 10) and r.options["step_size"] == 2e-3
    assert "target_accept" not in r.options


# ------------------------------------------------------------- energy statistics
def test_leapfrog_tracks_the_largest_energy_error_at_no_change_to_the_trajectory():
    from bnnzoo.inference.integrators import EnergyTracker, kinetic_energy, leapfrog

    potential = gaussian_target(MEAN, COV)
    torch.manual_seed(0)
    theta, p = torch.randn(5, 3), torch.randn(5, 3)
    inv_mass = torch.ones(3)
    value, grad = potential.value_and_grad(theta)
    energy0 = value + kinetic_energy(p, inv_mass)
    steps = torch.tensor([0, 1, 4, 7, 7])
    for num_steps in (7, steps):
        plain = leapfrog(theta, p, grad, 0.4, num_steps, potential.value_and_grad, inv_mass, value)
        tracker = EnergyTracker(energy0, inv_mass)
        tracked = leapfrog(theta, p, grad, 0.4, num_steps, potential.value_and_grad, inv_mass, value,
                           track_energy=tracker)
        for a, b in zip(plain, tracked):
            assert torch.equal(a, b)
        # by hand: one step at a time, each chain up to its own step count
        x, q, g = theta, p, grad
        expected = torch.zeros(5)
        counts = steps if torch.is_tensor(num_steps) else torch.full((5,), 7)
        for i in range(7):
            x, q, v, g = leapfrog(x, q, g, 0.4, 1, potential.value_and_grad, inv_mass, value)
            error = (v + kinetic_energy(q, inv_mass) - energy0).abs()
            expected = torch.where(i < counts, torch.maximum(expected, error), expected)
        torch.testing.assert_close(tracker.max_error, expected)
        end_error = (tracked[2] + kinetic_energy(tracked[1], inv_mass) - energy0).abs()
        assert torch.all(tracker.max_error >= end_error - 1e-6)
    assert tracker.max_error[0] == 0  # no step, no error


def test_a_non_finite_step_makes_the_largest_energy_error_infinite():
    from bnnzoo.inference.integrators import EnergyTracker

    tracker = EnergyTracker(torch.zeros(3), torch.ones(2))
    tracker.update(torch.tensor([1.0, math.nan, math.inf]), torch.zeros(3, 2))
    tracker.update(torch.tensor([0.5, 0.0, 0.0]), torch.zeros(3, 2))
    assert tracker.max_error.tolist() == [1.0, math.inf, math.inf]


def test_energy_is_the_hamiltonian_of_the_accepted_state():
    """``energy`` is H of the proposal where accepted, else H at the start (after the momentum
    refresh); ``energy_error`` is H(proposal) - H(start) either way."""
    from bnnzoo.inference.integrators import kinetic_energy

    potential = gaussian_target(MEAN, COV)
    kernel = FixedStepHMC(potential=potential, num_chains=64, step_size=0.9, num_steps=3)
    kernel.setup(0)
    sampler, state, params = kernel.sampler, kernel.state, kernel.params
    seen = {True: 0, False: 0}
    for seed in range(5):
        torch.manual_seed(seed)
        p = sampler.momentum(state.position, params.inv_mass)  # the same draw the transition makes next
        start = potential(state.position) + kinetic_energy(p, params.inv_mass)
        torch.manual_seed(seed)
        new, info = sampler.step(state, params)
        accepted = ~torch.all(new.position == state.position, -1)
        expected = torch.where(accepted, start + info.energy_error, start)
        torch.testing.assert_close(info.energy, expected)
        assert torch.all(info.max_energy_error >= info.energy_error.abs() - 1e-6)
        for a in accepted.tolist():
            seen[a] += 1
        state = new
    assert seen[True] and seen[False]  # both branches were checked


def test_stats_are_float64_whatever_the_potential_dtype():
    kernel, draws = run_kernel(FixedStepHMC, gaussian_target(MEAN, COV), num_chains=2, num_samples=5,
                               warmup_steps=0, step_size=0.3, num_steps=3)
    stats = draws.sample_stats
    assert set(FixedStepHMC.stat_names) == set(stats)
    for name, value in stats.items():
        kind = {"diverging": "b", "n_steps": "i"}.get(name, "f")
        assert value.dtype.kind == kind, name
        if kind == "f":
            assert value.dtype == np.float64, name


# ------------------------------------------------------------ the family's shape
def test_every_hmc_family_kernel_is_at_most_two_levels_below_the_adapter_and_composes_its_parts():
    """The HMC family on the sampler core: FixedStepHMC one level below TransitionKernel, the other
    kernels one below it; below the base a kernel overrides nothing but ``build`` and reporting
    (and ChEES its chain check); what differs is a part of the sampler or a component of the one
    warm-up loop, WindowAdaptation."""
    import inspect
    import warnings

    from bnnzoo.inference.kernels import AdaptiveHMC, BatchedNUTS, ChEESHMC, ProximalHMC
    from bnnzoo.inference.adaptation import WindowAdaptation
    from bnnzoo.inference.kernels.base import FlatKernel
    from bnnzoo.inference.kernels.chees import TrajectoryLengthAdaptation
    from bnnzoo.inference.kernels.hmc import GradientForce, HMCSampler, JitteredLength
    from bnnzoo.inference.kernels.nuts import NUTSSampler
    from bnnzoo.inference.kernels.proximal_hmc import LambdaSearch, ProximalForce
    from bnnzoo.inference.kernels.transition import TransitionKernel

    def methods(cls):
        return {name for name, value in vars(cls).items()
                if inspect.isfunction(value) or isinstance(value, (property, classmethod, staticmethod))}

    assert FixedStepHMC.__bases__ == (TransitionKernel,)
    core = methods(FlatKernel) | methods(TransitionKernel)
    assert methods(FixedStepHMC) & core == {"build", "_reset", "observe", "notes", "tuned"}
    inherited = core | methods(FixedStepHMC)
    #: kernel -> (options, sampler, force, length, components of the window adaptation)
    expected = {
        AdaptiveHMC: ({}, HMCSampler, GradientForce, type(None), ()),
        ChEESHMC: ({"num_chains": 2}, HMCSampler, GradientForce, JitteredLength, (TrajectoryLengthAdaptation,)),
        ProximalHMC: ({"lam": "tune"}, HMCSampler, ProximalForce, type(None), (LambdaSearch,)),
        BatchedNUTS: ({}, NUTSSampler, GradientForce, type(None), ()),
    }
    allowed = {"build", "tuned", "logging", "check_chains"}
    for cls, (options, sampler, force, length, components) in expected.items():
        assert cls.__bases__ == (FixedStepHMC,), cls
        overridden = methods(cls) & inherited
        assert overridden <= allowed and "build" in overridden, (cls, overridden)
        kernel = cls(potential=gaussian_target(MEAN, COV), **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # proximal HMC on a target without an L1 part
            kernel.setup(20)
        assert type(kernel.sampler) is sampler and type(kernel.sampler.force) is force
        assert type(kernel.sampler.length) is length
        assert type(kernel.adaptation) is WindowAdaptation
        assert tuple(type(c) for c in kernel.adaptation.components) == components
    plain = FixedStepHMC(potential=gaussian_target(MEAN, COV))
    plain.setup(20)
    assert plain.adaptation is None and type(plain.sampler) is HMCSampler  # nothing tuned: plain burn-in


def test_a_transition_is_a_step_of_the_sampler_on_explicit_state():
    """The kernel's transition is ``sampler.step`` on its state and parameters: the same random
    numbers give the same new state and statistics, and the state carries the force at its point."""
    from bnnzoo.inference.kernels.transition import info_row

    kernel = FixedStepHMC(potential=gaussian_target(MEAN, COV), num_chains=4, step_size=0.3, num_steps=5)
    kernel.setup(0)
    state, params = kernel.state, kernel.params
    torch.manual_seed(1)
    new, info = kernel.sampler.step(state, params)
    torch.manual_seed(1)
    theta, stats = kernel.transition(state.position)
    assert torch.equal(theta, new.position) and kernel.state.count == 1
    row = info_row(info)
    assert set(row) == set(FixedStepHMC.stat_names) - {"lp"}  # the trajectory's end is not a statistic
    for name, value in row.items():
        assert np.array_equal(np.asarray(stats[name]), np.asarray(value)), name
    value, grad = kernel.potential.value_and_grad(new.position)
    torch.testing.assert_close(new.value, value)
    torch.testing.assert_close(new.force, grad)
