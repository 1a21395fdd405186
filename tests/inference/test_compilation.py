"""compile="auto": the rule (a function of the run's inputs, never of a clock), the fallbacks, and a run that compiles."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.inference import compilation, compiled_graphs, run
from bnnzoo.inference.compilation import AutoCompile, check_compile, pays_back
from bnnzoo.inference.compiled_graphs import CompiledGraphs
from bnnzoo.inference.kernels import ChEESHMC
from bnnzoo.inference.kernels.hmc import HMCSampler
from bnnzoo.inference.runtime import LeapfrogRuntime
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.models import BNN, zoo
from tests.support.cases import needs_compiler


@pytest.mark.parametrize("value", [True, False, "auto"])
def test_compile_choices(value):
    assert check_compile("compile", value) is value


@pytest.mark.parametrize("value", ["yes", None, 1, "Auto"])
def test_bad_compile_is_named(value):
    with pytest.raises(ValueError, match=rf"compile must be True, False or 'auto', got {value!r}"):
        check_compile("compile", value)


def test_bad_compile_fails_before_the_run():
    with pytest.raises(ValueError, match="compile must be True, False or 'auto', got 'yes'"):
        run("cosine_mlp", "cosine", engine="chees", num_samples=2, warmup_steps=2, compile="yes", progress=False)


def test_pays_back_when_the_saving_exceeds_the_compile():
    # at speed-up 2 half the eager time is saved
    assert pays_back(rest_seconds=21.0, compile_seconds=10.0)
    assert not pays_back(rest_seconds=19.0, compile_seconds=10.0)
    assert pays_back(rest_seconds=12.0, compile_seconds=10.0, speedup=10.0)


def cosine_potential():
    data = load("cosine", seed=0)
    return BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train)


class NoClock:
    """A clock that must not be read: the decision is a function of the run's inputs."""

    def __call__(self):
        raise AssertionError("compile='auto' read the clock")


@pytest.fixture
def unclocked(monkeypatch):
    """A compiler that is there, no clock to read (``time.perf_counter`` fails), and the small
    cosine potential."""
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    import time

    monkeypatch.setattr(time, "perf_counter", NoClock())
    return cosine_potential()


def drive(policy, iterations, steps, chains=4):
    theta = torch.zeros(chains, policy.potential.dim)
    for _ in range(iterations):
        policy.observe(steps, theta)


@pytest.mark.parametrize("total, compiles", [(1_000_000, True), (1000, False)])
def test_decides_from_the_modeled_rest_of_the_run(unclocked, total, compiles):
    potential = unclocked
    per_step = compilation.modeled_step_seconds(potential, torch.zeros(4, potential.dim), update=True)
    policy = AutoCompile(potential, total_iterations=total, decide_at=50)
    drive(policy, 49, steps=100)
    assert policy.decision is None and not potential.compile
    drive(policy, 1, steps=100)
    rest = (total - 50) * 100 * per_step
    assert compiles is (rest * (1 - 1 / 4) > compilation.COMPILE_SECONDS)  # the cases are on either side
    assert potential.compile is compiles and policy.compiled is compiles
    assert policy.note().startswith("auto: compiled" if compiles else "auto: eager")
    assert "at iteration 50" in policy.note() and f"about {rest:.0f} s left eagerly" in policy.note()


def test_a_gradient_budget_bounds_the_rest_of_the_run(unclocked):
    """A run whose iterations would pay a compile back, but whose budget ends it first, stays eager."""
    potential = unclocked
    per_step = compilation.modeled_step_seconds(potential, torch.zeros(4, potential.dim), update=True)
    limit = 50 * 100 + 1000
    policy = AutoCompile(potential, total_iterations=1_000_000, decide_at=50, gradient_limit=limit)
    drive(policy, 50, steps=100)
    assert not potential.compile and policy.note().startswith("auto: eager")
    assert f"about {1000 * per_step:.0f} s left eagerly" in policy.note()


def test_the_decision_is_the_same_whatever_ran_before(unclocked):
    """Two runs of one network in one process decide alike: nothing of the first is kept."""
    notes = []
    for _ in range(2):
        potential = cosine_potential()
        policy = AutoCompile(potential, total_iterations=200_000, decide_at=11)
        drive(policy, 20, steps=50)
        potential.graphs.compile_seconds = 3.0  # a compile happened: it changes nothing for the next run
        policy.finish()
        notes.append(policy.note())
    assert notes[0] == notes[1] and notes[0].startswith("auto: compiled at iteration 11")


def test_the_step_model_follows_the_benchmarks():
    """The modeled eager step is within a factor of 2.5 of the eager gradients of
    ``benchmarks/results/gradient.md`` (cosine MLP 1-50-1, N=100; digits MLP, N=1000)."""
    cosine = BNNPotential(BNN(zoo.cosine_mlp(hidden=50)), torch.zeros(100, 1), torch.zeros(100))
    for chains, measured in [(1, 69.1e-6), (8, 8 * 19.4e-6), (32, 32 * 13.8e-6)]:
        modeled = compilation.modeled_step_seconds(cosine, torch.zeros(chains, cosine.dim))
        assert measured / 2.5 < modeled < measured * 2.5, (chains, modeled)
    digits = BNN(zoo.digits_mlp())
    if digits.num_params == 26122:
        x, y = torch.zeros(1000, 64), torch.zeros(1000, dtype=torch.long)
        large = BNNPotential(digits, x, y)
        for chains, measured in [(1, 2052e-6), (8, 8 * 3614e-6)]:
            modeled = compilation.modeled_step_seconds(large, torch.zeros(chains, large.dim))
            assert measured / 2.5 < modeled < measured * 2.5, (chains, modeled)


def test_a_kernel_that_compiles_the_whole_step_counts_its_update():
    """The four-step graph compiles the position and momentum updates with the gradient, so its
    kernels price an eager step with them (CPU_UPDATE); a kernel that compiles the gradient alone
    does not."""
    potential = cosine_potential()
    theta = torch.zeros(4, potential.dim)
    gradient = compilation.modeled_step_seconds(potential, theta)
    whole = compilation.modeled_step_seconds(potential, theta, update=True)
    fixed, per_coordinate = compilation.CPU_UPDATE
    assert whole - gradient == pytest.approx(fixed + theta.numel() * per_coordinate)
    for multi_step, per_step in [(True, whole), (False, gradient)]:
        policy = AutoCompile(potential, total_iterations=100, decide_at=11, multi_step=multi_step)
        drive(policy, 11, steps=10)
        assert f"modeled {per_step * 1e3:.2g} ms per eager step" in policy.note()


def test_the_update_model_follows_the_benchmark():
    """The modeled update is within a factor of 2 of what whole eager ChEES runs of the cosine MLP spent
    per leapfrog step beside the gradient (``benchmarks/results/step_model_update.md``)."""
    import json
    from pathlib import Path

    rows = json.loads((Path(__file__).parents[2] / "benchmarks/results/step_model_update.json").read_text())["rows"]
    measured = {row["chains"]: row["update_us"] for row in rows if row["model"] == "cosine_mlp" and row["update_us"]}
    assert set(measured) == {8, 32}
    cosine = BNNPotential(BNN(zoo.cosine_mlp(hidden=50)), torch.zeros(100, 1), torch.zeros(100))
    for chains, update_us in measured.items():
        theta = torch.zeros(chains, cosine.dim)
        modeled = (compilation.modeled_step_seconds(cosine, theta, update=True)
                   - compilation.modeled_step_seconds(cosine, theta)) * 1e6
        assert update_us / 2 < modeled < update_us * 2, (chains, modeled, update_us)


def test_the_step_model_prices_wider_inputs_by_their_units():
    """A network with 10 inputs costs, per eager step at 8 chains, what ``benchmarks/results/step_model.md``
    measured over the cosine MLP's in the same run (diabetes MLP 10-32-1 on 353 rows: 2.35x; breast cancer
    30-16-1 on 455 rows: 1.93x), within 1.5x: its element-wise work grows with its units, not with its
    multiply-adds (the model that priced it by multiply-adds said 5.5x and 6.3x)."""
    cosine = BNNPotential(BNN(zoo.cosine_mlp(hidden=50)), torch.zeros(100, 1), torch.zeros(100))
    theta = torch.zeros(8, cosine.dim)
    base = compilation.modeled_step_seconds(cosine, theta)
    for name, inputs, rows, measured in [("diabetes_mlp", 10, 353, 2.35), ("breast_cancer_mlp", 30, 455, 1.93)]:
        model = BNN(zoo.get(name))
        y = torch.zeros(rows) if name == "diabetes_mlp" else torch.zeros(rows, dtype=torch.long)
        potential = BNNPotential(model, torch.zeros(rows, inputs), y)
        ratio = compilation.modeled_step_seconds(potential, torch.zeros(8, potential.dim)) / base
        assert measured / 1.5 < ratio < measured * 1.5, (name, ratio)


def test_no_compiler_runs_eagerly_with_a_notice(monkeypatch):
    monkeypatch.setattr(compilation.shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="no C.. compiler found"):
        policy = AutoCompile(cosine_potential(), total_iterations=10_000, decide_at=1)
    assert policy.note() == "auto: eager (no C++ compiler found)"


def test_a_model_without_the_analytic_gradient_runs_eagerly():
    data = load("cosine", seed=0)
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train, analytic=False)
    assert AutoCompile(potential, 100, 1).note().startswith("auto: eager (the model has no analytic gradient")


def test_a_resumed_run_compiles_its_fresh_potential():
    policy = AutoCompile(cosine_potential(), 100, 1)
    policy.compiled, policy.decision = True, "auto: compiled ..."
    policy.potential = fresh = cosine_potential()  # what a resume puts back
    policy.observe(3, torch.zeros(2, fresh.dim))
    assert fresh.compile


def test_short_runs_stay_eager():
    r = run("cosine_mlp", "cosine", engine="fixed_hmc", num_samples=15, warmup_steps=5, num_chains=2,
            num_steps=3, progress=False)
    assert r.options["compile"] == "auto" and r.notes["compile"].startswith("auto: eager")
    assert r.compile_seconds in (None, 0.0)


@needs_compiler
def test_a_run_that_pays_compiles_midway(monkeypatch):
    monkeypatch.setattr(compilation, "COMPILE_SECONDS", 0.0)  # any saving pays
    r = run("cosine_mlp", "cosine", engine="fixed_hmc", num_samples=30, warmup_steps=0, num_chains=2,
            num_steps=5, step_size=1e-3, progress=False)
    assert r.notes["compile"].startswith(f"auto: compiled at iteration {compilation.PROBE + 1}:")
    assert r.compile_seconds > 0 and math.isfinite(float(r.sample_stats["lp"].mean()))


@needs_compiler
def test_batched_nuts_compiles_midway_too(monkeypatch):
    monkeypatch.setattr(compilation, "COMPILE_SECONDS", 0.0)
    r = run("cosine_mlp", "cosine", engine="batched_nuts", num_samples=20, warmup_steps=0, num_chains=2,
            max_tree_depth=3, step_size=1e-3, progress=False)
    assert r.notes["compile"].startswith(f"auto: compiled at iteration {compilation.PROBE + 1}:")
    assert r.compile_seconds > 0 and bool(torch.isfinite(torch.as_tensor(r.sample_stats["lp"])).all())


@needs_compiler
@pytest.mark.parametrize("engine", ["mclmc", "mams"])
def test_the_microcanonical_kernels_compile_midway_too(monkeypatch, engine):
    """``mclmc`` and ``mams`` take ``compile``: the policy counts each transition's gradients (integrator
    steps x 2 for the McLachlan integrator) and switches the potential's gradient to its graph."""
    monkeypatch.setattr(compilation, "COMPILE_SECONDS", 0.0)
    options = {"steps_per_draw": 3} if engine == "mclmc" else {}
    r = run("cosine_mlp", "cosine", engine=engine, num_samples=20, warmup_steps=0, num_chains=2, progress=False,
            **options)
    assert r.options["compile"] == "auto"
    assert r.notes["compile"].startswith(f"auto: compiled at iteration {compilation.PROBE + 1}:")
    if engine == "mclmc":
        assert " 6 gradients per iteration" in r.notes["compile"]
    assert r.compile_seconds > 0 and bool(torch.isfinite(torch.as_tensor(r.sample_stats["lp"])).all())
    eager = run("cosine_mlp", "cosine", engine=engine, num_samples=20, warmup_steps=0, num_chains=2,
                progress=False, compile=False, **options)
    assert eager.notes.get("compile") is None and eager.compile_seconds in (None, 0.0)


@needs_compiler
def test_a_failed_compile_goes_on_eagerly(monkeypatch):
    monkeypatch.setattr(compilation, "COMPILE_SECONDS", 0.0)

    def broken(name, device_type):
        raise RuntimeError("no inductor today")

    monkeypatch.setattr(compiled_graphs, "compiled", broken)
    with pytest.warns(UserWarning, match="compile='auto': torch.compile of the potential's .* failed"):
        r = run("cosine_mlp", "cosine", engine="fixed_hmc", num_samples=20, warmup_steps=0, num_chains=2,
                num_steps=3, progress=False)
    assert r.sample_stats["lp"].shape == (2, 20)


@pytest.mark.parametrize("chosen", [None, "mine"])
def test_every_compile_uses_the_persistent_inductor_cache_unless_one_is_chosen(tmp_path, monkeypatch, chosen):
    """compile=True as well as "auto": torch writes its own default into the environment at
    its first compile, so the cache must be chosen before then."""
    monkeypatch.setenv("BNNZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / str(chosen)))  # restored afterwards
    if chosen is None:
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(compiled_graphs, "compiled",
                        lambda name, device_type: lambda potential, *args: getattr(potential, name)(*args))
    data = load("cosine", seed=0)
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train, compile=True)
    potential.compile = False  # the graph stand-in above runs the eager method
    for _ in range(2):  # value_and_grad's first call runs eagerly, the second compiles
        potential.graphs.run("value_and_grad", torch.zeros(2, potential.dim))
    want = tmp_path / "cache" / "inductor" if chosen is None else tmp_path / chosen
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(want)


def test_a_compiled_graph_runs_with_subnormals_flushed_and_leaves_flushing_off(tmp_path, monkeypatch):
    """Subnormals slow a compiled graph's loops (benchmarks/results/denormals.md): the graph runs
    with them flushed to zero, and torch's default (kept) is back after each call."""
    def flushing() -> bool:
        return float(torch.tensor(1e-38) * torch.tensor(0.5)) == 0.0  # 5e-39 is subnormal in float32

    seen = []

    def stand_in(name, device_type):
        def graph(potential, *args):
            seen.append(flushing())
            return potential.analytic_value_and_grad(*args)
        return graph

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiled_graphs, "compiled", stand_in)
    data = load("cosine", seed=0)
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train, compile=True)
    for _ in range(3):  # eager, then the compiling call, then the compiled one
        potential.graphs.run("value_and_grad", torch.zeros(2, potential.dim))
    assert seen == [True, True] and not flushing()


def test_the_projection_uses_the_mean_steps_of_the_probe(unclocked):
    """ChEES jitters its step count: the rest of the run is projected at the probe's mean, not
    at whatever the last iteration drew."""
    potential = unclocked
    per_step = compilation.modeled_step_seconds(potential, torch.zeros(4, potential.dim), update=True)
    policy = AutoCompile(potential, total_iterations=1_000_011, decide_at=11)
    drive(policy, 1, steps=100)
    for steps in [100] * 9 + [1]:  # the probe (the last 10 iterations): mean 90.1 steps; the last drew 1
        drive(policy, 1, steps=steps)
    assert f"about {1_000_000 * 90.1 * per_step:.0f} s left eagerly" in policy.note()
    assert "90.1 leapfrog steps per iteration" in policy.note()


def test_a_kernel_projection_replaces_the_probe_mean(unclocked):
    """Where the kernel expects a number of steps from its parameters now (ChEES, whose T is still
    growing when the probe ends), the rest of the run is projected at it."""
    potential = unclocked
    per_step = compilation.modeled_step_seconds(potential, torch.zeros(4, potential.dim), update=True)
    policy = AutoCompile(potential, total_iterations=1_000_011, decide_at=11, projection=lambda: 120.5)
    drive(policy, 11, steps=100)
    assert "120 leapfrog steps per iteration expected from the kernel's parameters" in policy.note()
    assert f"about {1_000_000 * 120.5 * per_step:.0f} s left eagerly" in policy.note()
    fallback = AutoCompile(cosine_potential(), total_iterations=1_000_011, decide_at=11, projection=lambda: None)
    drive(fallback, 11, steps=100)
    assert "100 leapfrog steps per iteration, modeled" in fallback.note()


@pytest.mark.parametrize("n", [1.0, 7.3, 40.0, 99.0, 250.0, 1e4])
def test_chees_expected_steps_is_the_mean_over_the_jitter(n):
    """JitteredLength.expected_steps is the mean of its step counts over the Halton jitter, the draws
    above max_steps cut to it."""
    from bnnzoo.inference.kernels.hmc import HMCParams, JitteredLength

    length = JitteredLength("halton", max_steps=100)
    params = HMCParams(0.01, torch.ones(3), trajectory_length=0.01 * n)
    mean = np.mean([length.steps(count, params)[0] for count in range(4096)])
    assert length.expected_steps(params) == pytest.approx(mean, rel=0.01, abs=0.01)


def test_the_driver_gives_chees_its_projection():
    from bnnzoo.inference.engines.driver import _auto_compile
    from bnnzoo.inference.kernels import BatchedNUTS

    small = cosine_potential()
    chees = ChEESHMC(potential=small, num_chains=4)
    assert _auto_compile(chees, small, 200, 100, 1).projection == chees.expected_steps
    assert chees.expected_steps() is None  # nothing to expect before the first transition
    assert _auto_compile(BatchedNUTS(potential=small), small, 200, 100, 1).projection is None


@needs_compiler
def test_compiled_trajectories_run_unrolled_and_draw_what_single_steps_draw(monkeypatch):
    """A compiled run's trajectories go through the ``leapfrog_steps`` graph alone (UNROLL steps a call, the
    last call padded with steps of size 0; no one-step graph is compiled) and give the draws of the
    single-step compiled graph."""
    options = dict(engine="fixed_hmc", num_chains=4, num_samples=6, warmup_steps=2, seed=1, progress=False,
                   compile=True, step_size=2e-3, num_steps=10)  # 10 = 2 calls of 4 + a call of 2 and 2 padding
    calls = []
    original = CompiledGraphs.leapfrog_steps

    def counted(self, *args):
        calls.append(1)
        return original(self, *args)

    graphs = set()
    run_compiled = CompiledGraphs.run

    def named(self, name, *args):
        out = run_compiled(self, name, *args)
        graphs.update(key[0] for key in self.keys)  # the graphs compiled so far
        return out

    monkeypatch.setattr(CompiledGraphs, "leapfrog_steps", counted)
    monkeypatch.setattr(CompiledGraphs, "run", named)
    data = load("cosine", n_train=20, n_test=10)
    unrolled = run(zoo.cosine_mlp(hidden=5), data, **options)
    assert len(calls) == 3 * 8  # three per transition, 8 transitions
    assert graphs == {"leapfrog_steps"}
    monkeypatch.setattr(LeapfrogRuntime, "compiled", lambda self, potential, step_fn, num_steps: False)
    single = run(zoo.cosine_mlp(hidden=5), data, **options)
    for name, draws in single.samples.items():
        torch.testing.assert_close(torch.as_tensor(unrolled.samples[name]), torch.as_tensor(draws),
                                   rtol=1e-5, atol=1e-6)
    # an energy error is a difference of energies: the two graphs sum in different orders, so it
    # may differ by the float32 rounding of the energy itself (a few units in its last place)
    energy_ulp = torch.finfo(torch.float32).eps * torch.as_tensor(single.sample_stats["energy"]).abs().max()
    torch.testing.assert_close(torch.as_tensor(unrolled.sample_stats["max_energy_error"]),
                               torch.as_tensor(single.sample_stats["max_energy_error"]), rtol=1e-4,
                               atol=float(4 * energy_ulp))


@needs_compiler
def test_a_compiled_chees_run_compiles_the_four_step_graph_alone(monkeypatch):
    """The step-size search (one step), the trajectories and the U-turn time at each mass update
    (four steps at a time) all run on ``leapfrog_steps``."""
    graphs, uturns = set(), []
    run_compiled, u_turn_time = CompiledGraphs.run, HMCSampler.u_turn_time

    def named(self, name, *args):
        out = run_compiled(self, name, *args)
        graphs.update(key[0] for key in self.keys)
        return out

    def counted(self, *args, **kwargs):
        uturns.append(u_turn_time(self, *args, **kwargs))
        return uturns[-1]

    monkeypatch.setattr(CompiledGraphs, "run", named)
    monkeypatch.setattr(HMCSampler, "u_turn_time", counted)
    data = load("cosine", n_train=20, n_test=10)
    r = run(zoo.cosine_mlp(hidden=5), data, engine="chees", num_chains=4, num_samples=5, warmup_steps=40, seed=0,
            progress=False, compile=True)
    assert graphs == {"leapfrog_steps"}
    assert uturns and all(math.isfinite(t) and t > 0 for t in uturns)
    assert r.sample_stats["lp"].shape == (4, 5)


def test_the_assumed_speedup_follows_the_work_per_gradient():
    small = cosine_potential()  # 4 chains x 100 rows x 13 parameters
    assert compilation.assumed_speedup(small, torch.zeros(4, small.dim)) == compilation.ASSUMED_SPEEDUP_SMALL
    data = load("digits", seed=0, n_train=200)
    large = BNNPotential(BNN(zoo.digits_mlp(hidden=32)), data.x_train, data.y_train)  # 200 x 3.5k x 8 > 1M
    assert compilation.assumed_speedup(large, torch.zeros(8, large.dim)) == compilation.ASSUMED_SPEEDUP


def test_only_four_step_kernels_assume_the_small_network_speedup():
    small = cosine_potential()
    theta = torch.zeros(4, small.dim)
    assert compilation.assumed_speedup(small, theta, multi_step=False) == compilation.ASSUMED_SPEEDUP
    from bnnzoo.inference.engines.driver import _auto_compile
    from bnnzoo.inference.kernels import BatchedNUTS, ChEESHMC, ProximalHMC

    for kernel_cls, multi_step in [(ChEESHMC, True), (BatchedNUTS, False), (ProximalHMC, False)]:
        kernel = kernel_cls(potential=small)
        assert _auto_compile(kernel, small, 100, 100, 1).multi_step is multi_step, kernel_cls.__name__


def test_auto_compile_decides_after_the_kernels_own_first_mass_window():
    from bnnzoo.inference.engines.driver import _auto_compile
    from bnnzoo.inference.kernels import ChEESHMC

    small = cosine_potential()
    stan = ChEESHMC(potential=small, num_chains=4, mass_schedule="stan")
    late = ChEESHMC(potential=small, num_chains=4)  # the default schedule
    assert _auto_compile(stan, small, 200, 100, 1).decide_at == 100 + compilation.PROBE  # Stan's (75, 100)
    assert _auto_compile(late, small, 200, 100, 1).decide_at == 155 + compilation.PROBE  # (140, 155)


def test_the_gradient_graph_called_once_is_not_compiled(monkeypatch):
    """value_and_grad's first call runs eagerly (ChEES calls it once a run); the second compiles
    (here a stand-in runs the traced function as it is). A leapfrog graph compiles at its first call."""
    compiled = []

    def fake_compiled(name, device_type):
        def graph(potential, *args):
            compiled.append(name)
            return compiled_graphs.GRAPHS[name](potential, *args)
        return graph

    monkeypatch.setattr(compiled_graphs, "compiled", fake_compiled)
    potential = cosine_potential()
    potential.compile = True
    theta = torch.randn(3, potential.dim, generator=torch.Generator().manual_seed(0))
    first = potential.value_and_grad(theta)
    assert compiled == [] and potential.graphs.keys == set()
    second = potential.value_and_grad(theta)
    assert compiled == ["value_and_grad"] and len(potential.graphs.keys) == 1
    eager = potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0)
    graph = potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0, graph=True)
    for a, b, c, d in zip(first, second, eager, graph):
        torch.testing.assert_close(a, c, rtol=0, atol=0)  # the eager formulation
        torch.testing.assert_close(b, d, rtol=0, atol=0)  # the one graphs trace
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-5 * float(c.abs().max()))  # float32 rounding apart
    potential.leapfrog_step(theta, torch.zeros_like(theta), first[1], 1e-3, torch.ones(potential.dim))
    assert compiled == ["value_and_grad", "leapfrog_step"]


# ------------------------------------------------- one instruction-set check (one_isa_check)
@needs_compiler
def test_one_isa_check_picks_what_every_check_would(monkeypatch):
    """Inside the context inductor takes the instruction sets the processor reports as built (one
    dry compile, the widest's): it finds the same ones, and picks the same one, as after a dry
    compile of each; outside, its setting is as before."""
    from torch._inductor import config
    from torch._inductor import cpu_vec_isa

    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
    every = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
    with compilation.one_isa_check("cpu"):
        if compilation._best_x86_isa() is not None:
            assert config.cpp.vec_isa_ok is True
        one = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
    assert one == every
    assert config.cpp.vec_isa_ok is None


@needs_compiler
def test_one_isa_check_leaves_out_no_set_inductor_could_pick(monkeypatch):
    """Inside the context inductor's list has no AVX-512 set after the first valid one (their extension
    checks are not made), and every pick inductor makes from it (by default, for each
    ``ATEN_CPU_CAPABILITY`` and each ``cpp.simdlen``) is the one it makes from the full list."""
    from torch._inductor import config
    from torch._inductor import cpu_vec_isa

    monkeypatch.delenv("TORCHINDUCTOR_VEC_ISA_OK", raising=False)
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    compilation._skip_narrower_avx512.cache_clear()
    try:
        with compilation.one_isa_check("cpu"):
            pruned = list(cpu_vec_isa.valid_vec_isa_list())
            full = list(cpu_vec_isa.valid_vec_isa_list.__wrapped__())
        if compilation._best_x86_isa() is None or not compilation._widest_isa_builds():
            assert [str(isa) for isa in pruned] == [str(isa) for isa in full]  # nothing vouched, nothing left out
            return
        wide = [str(isa) for isa in full if "avx512" in str(isa)]
        assert [str(isa) for isa in pruned] == [str(isa) for isa in full if "avx512" not in str(isa) or str(isa) == wide[0]]
        for capability in (None, "avx512", "avx2", "default"):
            for simdlen in (None, 512, 256):
                picks = []
                for listed in (pruned, full):
                    with monkeypatch.context() as m, config.patch({"cpp.simdlen": simdlen}):
                        m.setattr(cpu_vec_isa, "valid_vec_isa_list", lambda listed=listed: listed)
                        if capability is None:
                            m.delenv("ATEN_CPU_CAPABILITY", raising=False)
                        else:
                            m.setenv("ATEN_CPU_CAPABILITY", capability)
                        picks.append(str(cpu_vec_isa.pick_vec_isa()))
                assert picks[0] == picks[1], (capability, simdlen, picks)
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        compilation._skip_narrower_avx512.cache_clear()


def test_one_isa_check_leaves_inductor_alone_where_it_cannot_vouch(monkeypatch):
    from torch._inductor import config

    for device in ("cuda", "meta"):
        with compilation.one_isa_check(device):
            assert config.cpp.vec_isa_ok is None
    best = compilation._best_x86_isa()
    if best is not None:  # the widest set does not build: every set is checked, as inductor does
        monkeypatch.setattr(type(best), "check_build", lambda self, code: False)
        compilation._widest_isa_builds.cache_clear()
        with compilation.one_isa_check("cpu"):
            assert config.cpp.vec_isa_ok is None
        monkeypatch.undo()
        compilation._widest_isa_builds.cache_clear()
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")  # the user's choice stands
    with compilation.one_isa_check("cpu"):
        assert config.cpp.vec_isa_ok is None


def test_cpu_graphs_use_the_cpp_wrapper_unless_turned_off(monkeypatch):
    assert compiled_graphs.cpu_options() == {"cpp_wrapper": True}
    monkeypatch.setenv(compiled_graphs.CPP_WRAPPER_ENV, "0")
    assert compiled_graphs.cpu_options() is None


@needs_compiler
@pytest.mark.slow
def test_the_cpp_wrapper_draws_what_the_python_wrapper_draws(tmp_path):
    """The wrapper only calls the graph's kernels and matrix products: a compiled run draws the same
    with either, bit for bit (each in its own process: ``compiled`` is made once per process)."""
    script = ("import sys, numpy as np; from bnnzoo.inference import run; "
              "r = run('cosine_mlp', {'name': 'cosine', 'n_train': 40, 'n_test': 10}, engine='chees', num_samples=30, "
              "warmup_steps=30, num_chains=4, seed=0, progress=False, threads=1, compile=True); "
              "assert r.compile_seconds > 0; np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in r.samples.items()})")
    draws = {}
    for flag in ("1", "0"):
        path = tmp_path / f"wrapper{flag}.npz"
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=600,
                       env=dict(os.environ, **{compiled_graphs.CPP_WRAPPER_ENV: flag}))
        draws[flag] = dict(np.load(path))
    assert draws["1"].keys() == draws["0"].keys()
    for name in draws["1"]:
        assert (draws["1"][name] == draws["0"][name]).all(), name
