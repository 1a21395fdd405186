"""compile="auto": the rule, the record of compile times, the fallbacks, and a run that compiles."""

import math
import os

import pytest
import torch

from bnnzoo.data import load
from bnnzoo.inference import compilation, run
from bnnzoo.inference.compilation import AutoCompile, CompileRecord, check_compile, pays_back
from bnnzoo.inference.kernels import ChEESHMC, hmc
from bnnzoo.inference.potential import BNNPotential, analytic
from bnnzoo.models import BNN, zoo
from tests.support.cases import needs_compiler


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test keeps its compile record (not the inductor cache) in its own folder."""
    monkeypatch.setenv("BNNZOO_CACHE", str(tmp_path / "cache"))


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


def test_record_round_trip(tmp_path):
    record = CompileRecord(tmp_path / "r.json")
    assert record.get("net") is None
    record.put("net", 3.25)
    record.put("other", 20.0)
    assert CompileRecord(tmp_path / "r.json").get("net") == 3.25
    record.put("fast", 4.0, speedup=4.567)
    again = CompileRecord(tmp_path / "r.json")
    assert again.speedup("net") is None and again.speedup("fast") == 4.57 and again.get("fast") == 4.0
    (tmp_path / "r.json").write_text('{"old": 7.5}')  # the earlier format: seconds alone
    assert record.get("old") == 7.5 and record.speedup("old") is None
    (tmp_path / "r.json").write_text("not json")
    assert record.get("net") is None  # an unreadable record is no record


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def cosine_potential():
    data = load("cosine", seed=0)
    return BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train)


@pytest.fixture
def clocked(monkeypatch):
    """A compiler that is there, a clock the test moves, and the small cosine potential with the
    signature of its 4-chain batch: ``(clock, potential, key)``."""
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    clock = Clock()
    monkeypatch.setattr(compilation.time, "perf_counter", clock)
    potential = cosine_potential()
    return clock, potential, compilation.signature(potential, torch.zeros(4, potential.dim))


def drive(policy, clock, iterations, seconds_per_step, steps):
    theta = torch.zeros(4, policy.potential.dim)
    for _ in range(iterations):
        clock.now += seconds_per_step * steps
        policy.observe(steps, theta)


@pytest.mark.parametrize("seconds_per_step, compiles", [(1e-3, True), (1e-5, False)])
def test_decides_from_the_measured_rest_of_the_run(monkeypatch, seconds_per_step, compiles):
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    clock = Clock()
    monkeypatch.setattr(compilation.time, "perf_counter", clock)
    potential = cosine_potential()
    policy = AutoCompile(potential, total_iterations=1000, decide_at=50)
    drive(policy, clock, 49, seconds_per_step, steps=100)
    assert policy.decision is None and not potential.compile
    drive(policy, clock, 1, seconds_per_step, steps=100)
    # 950 iterations x 100 steps left: 95 s eagerly at 1 ms a step (saves 71 s > COLD_SECONDS), 0.95 s at 10 us
    assert potential.compile is compiles and policy.compiled is compiles
    assert policy.note().startswith("auto: compiled" if compiles else "auto: eager")
    assert "at iteration 50" in policy.note() and f"compile expected {compilation.COLD_SECONDS:.1f} s" in policy.note()


def test_a_recorded_compile_time_is_the_estimate(monkeypatch):
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    clock = Clock()
    monkeypatch.setattr(compilation.time, "perf_counter", clock)
    potential = cosine_potential()
    theta = torch.zeros(4, potential.dim)
    CompileRecord().put(compilation.signature(potential, theta), 0.5)
    policy = AutoCompile(potential, total_iterations=100, decide_at=20)
    drive(policy, clock, 20, 1e-3, steps=100)  # 8 s left eagerly: pays a 0.5 s compile, not a cold one
    assert potential.compile and "compile expected 0.5 s" in policy.note()


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
def test_a_run_that_pays_compiles_midway_and_records_it(monkeypatch):
    monkeypatch.setattr(compilation, "COLD_SECONDS", 0.0)  # any saving pays
    monkeypatch.setattr(compilation, "_COMPILED_HERE", set())  # as if no other test had compiled it
    r = run("cosine_mlp", "cosine", engine="fixed_hmc", num_samples=30, warmup_steps=0, num_chains=2,
            num_steps=5, step_size=1e-3, progress=False)
    assert r.notes["compile"].startswith(f"auto: compiled at iteration {compilation.PROBE + 1}:")
    assert r.compile_seconds > 0 and math.isfinite(float(r.sample_stats["lp"].mean()))
    records = CompileRecord()._read()
    assert len(records) == 1
    (key,) = records
    assert CompileRecord().get(key) == pytest.approx(r.compile_seconds, abs=1e-3)
    assert CompileRecord().speedup(key) > 0  # measured over the iterations after the compiling one


@needs_compiler
def test_batched_nuts_compiles_midway_too(monkeypatch):
    monkeypatch.setattr(compilation, "COLD_SECONDS", 0.0)
    monkeypatch.setattr(compilation, "_COMPILED_HERE", set())
    r = run("cosine_mlp", "cosine", engine="batched_nuts", num_samples=20, warmup_steps=0, num_chains=2,
            max_tree_depth=3, step_size=1e-3, progress=False)
    assert r.notes["compile"].startswith(f"auto: compiled at iteration {compilation.PROBE + 1}:")
    assert r.compile_seconds > 0 and bool(torch.isfinite(torch.as_tensor(r.sample_stats["lp"])).all())


@needs_compiler
def test_a_failed_compile_goes_on_eagerly(monkeypatch):
    monkeypatch.setattr(compilation, "COLD_SECONDS", 0.0)

    def broken(name):
        raise RuntimeError("no inductor today")

    monkeypatch.setattr("bnnzoo.inference.potential.analytic._compiled", broken)
    with pytest.warns(UserWarning, match="compile='auto': torch.compile of the potential's .* failed"):
        r = run("cosine_mlp", "cosine", engine="fixed_hmc", num_samples=20, warmup_steps=0, num_chains=2,
                num_steps=3, progress=False)
    assert r.sample_stats["lp"].shape == (2, 20)


@pytest.mark.parametrize("chosen", [None, "mine"])
def test_every_compile_uses_the_persistent_inductor_cache_unless_one_is_chosen(tmp_path, monkeypatch, chosen):
    """compile=True as well as "auto": torch writes its own default into the environment at
    its first compile, so the cache must be chosen before then."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / str(chosen)))  # restored afterwards
    if chosen is None:
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr("bnnzoo.inference.potential.analytic._compiled",
                        lambda name: lambda potential, *args: getattr(potential, name)(*args))
    data = load("cosine", seed=0)
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=4)), data.x_train, data.y_train, compile=True)
    potential.compile = False  # the graph stand-in above runs the eager method
    for _ in range(2):  # value_and_grad's first call runs eagerly, the second compiles
        potential._run_compiled("value_and_grad", torch.zeros(2, potential.dim))
    want = tmp_path / "cache" / "inductor" if chosen is None else tmp_path / chosen
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(want)


def test_a_graph_compiled_in_this_process_is_free_and_not_recorded(monkeypatch, clocked):
    clock, potential, key = clocked
    CompileRecord().put(key, 20.0)
    monkeypatch.setattr(compilation, "_COMPILED_HERE", {key})
    policy = AutoCompile(potential, total_iterations=100, decide_at=20)
    drive(policy, clock, 1, 1e-4, steps=100)  # compiled at once: the graphs cost nothing
    assert potential.compile and policy.note() == ("auto: compiled at iteration 1 (this process has "
                                                   "compiled this network and batch already)")
    drive(policy, clock, 99, 1e-4, steps=100)
    potential.compile_seconds = 0.001  # the reused graph's "compile"
    policy.finish()
    assert CompileRecord().get(key) == 20.0  # the first compile's time stays the estimate


def test_the_projection_uses_the_mean_steps_of_the_probe(monkeypatch):
    """ChEES jitters its step count: the rest of the run is projected at the probe's mean, not
    at whatever the last iteration drew."""
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    clock = Clock()
    monkeypatch.setattr(compilation.time, "perf_counter", clock)
    potential = cosine_potential()
    policy = AutoCompile(potential, total_iterations=1010, decide_at=11)
    for steps in [100] * 10 + [1]:  # the probe (the last 10 iterations): mean 90.1 steps; the last drew 1
        drive(policy, clock, 1, 1e-3, steps=steps)
    # 999 iterations x 90.1 steps x 1 ms: about 90 s left; at the last iteration's 1 step, 1 s
    assert potential.compile and "about 90 s left eagerly" in policy.note()


@needs_compiler
def test_a_compile_true_run_makes_the_next_auto_run_compile_at_once(monkeypatch):
    monkeypatch.setattr(compilation, "_COMPILED_HERE", set())
    options = dict(engine="fixed_hmc", num_samples=15, warmup_steps=0, num_chains=2, num_steps=3,
                   step_size=1e-3, progress=False)
    run("cosine_mlp", "cosine", compile=True, **options)
    r = run("cosine_mlp", "cosine", **options)
    assert r.notes["compile"].startswith("auto: compiled at iteration 1 (this process has compiled")


@needs_compiler
def test_compiled_trajectories_run_unrolled_and_draw_what_single_steps_draw(monkeypatch):
    """A compiled run's trajectories go through ``leapfrog_steps`` alone (UNROLL steps a call, the
    last call padded with steps of size 0; no one-step graph is compiled) and give the draws of the
    single-step compiled graph."""
    options = dict(engine="fixed_hmc", num_chains=4, num_samples=6, warmup_steps=2, seed=1, progress=False,
                   compile=True, step_size=2e-3, num_steps=10)  # 10 = 2 calls of 4 + a call of 2 and 2 padding
    calls = []
    original = BNNPotential.leapfrog_steps

    def counted(self, *args):
        calls.append(1)
        return original(self, *args)

    graphs = set()
    run_compiled = BNNPotential._run_compiled

    def named(self, name, *args):
        out = run_compiled(self, name, *args)
        graphs.update(key[0] for key in self._compiled_keys)  # the graphs compiled so far
        return out

    monkeypatch.setattr(BNNPotential, "leapfrog_steps", counted)
    monkeypatch.setattr(BNNPotential, "_run_compiled", named)
    data = load("cosine", n_train=20, n_test=10)
    unrolled = run(zoo.cosine_mlp(hidden=5), data, **options)
    assert len(calls) == 3 * 8  # three per transition, 8 transitions
    assert graphs == {"leapfrog_steps"}
    monkeypatch.setattr(hmc.FixedStepHMC, "_unrolled", lambda self, step_fn, num_steps: False)
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
    run_compiled, u_turn_time = BNNPotential._run_compiled, ChEESHMC.u_turn_time

    def named(self, name, *args):
        out = run_compiled(self, name, *args)
        graphs.update(key[0] for key in self._compiled_keys)
        return out

    def counted(self, *args, **kwargs):
        uturns.append(u_turn_time(self, *args, **kwargs))
        return uturns[-1]

    monkeypatch.setattr(BNNPotential, "_run_compiled", named)
    monkeypatch.setattr(ChEESHMC, "u_turn_time", counted)
    data = load("cosine", n_train=20, n_test=10)
    r = run(zoo.cosine_mlp(hidden=5), data, engine="chees", num_chains=4, num_samples=5, warmup_steps=40, seed=0,
            progress=False, compile=True)
    assert graphs == {"leapfrog_steps"}
    assert uturns and all(math.isfinite(t) and t > 0 for t in uturns)
    assert r.sample_stats["lp"].shape == (4, 5)


@pytest.mark.parametrize("recorded_speedup, compiles", [(None, True), (1.5, False)])
def test_a_speedup_measured_here_before_is_the_estimate(recorded_speedup, compiles, clocked):
    clock, potential, key = clocked
    CompileRecord().put(key, 20.0, speedup=recorded_speedup)
    policy = AutoCompile(potential, total_iterations=411, decide_at=11)
    drive(policy, clock, 11, 1e-3, steps=100)
    # 400 iterations x 100 steps x 1 ms = 40 s left: saves 30 s > 20 s at the 4x assumed for this
    # small network, 13 s at the 1.5x measured
    assert potential.compile is compiles
    expected = "speed-up 4x assumed" if recorded_speedup is None else "speed-up 1.5x measured here before"
    assert expected in policy.note()


def test_the_assumed_speedup_follows_the_work_per_gradient():
    small = cosine_potential()  # 4 chains x 100 rows x 13 parameters
    assert compilation.assumed_speedup(small, torch.zeros(4, small.dim)) == compilation.ASSUMED_SPEEDUP_SMALL
    data = load("digits", seed=0, n_train=200)
    large = BNNPotential(BNN(zoo.digits_mlp(hidden=32)), data.x_train, data.y_train)  # 200 x 3.5k x 8 > 1M
    assert compilation.assumed_speedup(large, torch.zeros(8, large.dim)) == compilation.ASSUMED_SPEEDUP


def test_a_compiled_run_measures_its_speedup_and_records_it(monkeypatch):
    monkeypatch.setattr(compilation, "compiler_available", lambda: True)
    monkeypatch.setattr(compilation, "COLD_SECONDS", 0.0)
    clock = Clock()
    monkeypatch.setattr(compilation.time, "perf_counter", clock)
    potential = cosine_potential()
    policy = AutoCompile(potential, total_iterations=100, decide_at=11)
    drive(policy, clock, 11, 1e-3, steps=100)  # eager: 1 ms a step
    assert potential.compile
    drive(policy, clock, 1, 0.3, steps=100)  # the iteration that compiles: 30 s, not counted
    drive(policy, clock, compilation.PROBE - 1, 2.5e-4, steps=100)  # compiled: 0.25 ms a step
    potential.compile_seconds = 5.0  # a graph first needed in the last of them: its 5 s are not counted
    clock.now += 5.0
    drive(policy, clock, 1, 2.5e-4, steps=100)
    assert policy.speedup == pytest.approx(4.0)
    drive(policy, clock, 5, 1.0, steps=100)  # later iterations change nothing
    potential.compile_seconds = 35.0
    policy.finish()
    key = compilation.signature(potential, torch.zeros(4, potential.dim))
    assert CompileRecord().get(key) == 35.0 and CompileRecord().speedup(key) == 4.0


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
    stan = ChEESHMC(potential=small, num_chains=4)
    late = ChEESHMC(potential=small, num_chains=4, mass_schedule="late")
    assert _auto_compile(stan, small, 200, 100, 1).decide_at == 100 + compilation.PROBE  # Stan's (75, 100)
    assert _auto_compile(late, small, 200, 100, 1).decide_at == 155 + compilation.PROBE  # (140, 155)


def test_eager_runs_owe_their_seconds_until_together_they_would_have_paid_the_compile(clocked, monkeypatch):
    """Rent or buy: runs none of which pays a cold compile alone compile once the eager seconds the
    earlier ones spent, with the rest of this one, would have paid it; the compile clears the debt."""
    monkeypatch.setattr(compilation, "COLD_SECONDS", 20.0)  # the numbers below
    clock, potential, key = clocked
    owed = []
    for _ in range(3):
        potential.compile = False
        policy = AutoCompile(potential, total_iterations=100, decide_at=20)
        drive(policy, clock, 100, 1e-3, steps=100)  # 0.1 s an iteration: 8 s left at the decision
        policy.finish()
        owed.append(CompileRecord().eager_seconds(key))
        if policy.compiled:
            break
    # 8 s x 3/4 saves 6 s < 20; with 9.9 s owed, 13.4 s < 20; with 19.8 s owed, 20.85 s > 20
    assert owed[:2] == [pytest.approx(9.9), pytest.approx(19.8)]
    assert policy.compiled and "at iteration 20" in policy.note() and "20 s eager on it before" in policy.note()
    potential.compile_seconds = 12.0
    policy.finish()
    assert CompileRecord().get(key) == 12.0 and CompileRecord().eager_seconds(key) == 0.0


def test_eager_seconds_that_pay_alone_compile_at_the_first_iteration(clocked, monkeypatch):
    monkeypatch.setattr(compilation, "COLD_SECONDS", 20.0)  # the numbers below
    clock, potential, key = clocked
    CompileRecord().add_eager(key, 30.0)  # saves 22.5 s at the 4x assumed: more than a cold compile
    policy = AutoCompile(potential, total_iterations=100, decide_at=20)
    drive(policy, clock, 1, 1e-3, steps=100)
    assert potential.compile and policy.note() == ("auto: compiled at iteration 1: 30 s eager on it before, "
                                                   "compile expected 20.0 s, speed-up 4x assumed")


def test_a_run_that_could_not_compile_owes_nothing(monkeypatch):
    monkeypatch.setattr(compilation.shutil, "which", lambda name: None)
    potential = cosine_potential()
    with pytest.warns(UserWarning, match="no C.. compiler found"):
        policy = AutoCompile(potential, total_iterations=10, decide_at=1)
    drive(policy, Clock(), 10, 1e-3, steps=100)
    policy.finish()
    assert CompileRecord()._read() == {}


@pytest.mark.parametrize("other", [None, "recorded", "compiled here"])
def test_a_new_network_expects_less_once_another_has_paid_inductors_set_up(monkeypatch, clocked, other):
    """Inductor's one-time set-up is most of a first compile; after another network's compile (in
    this process, or recorded with this torch) a new one is expected to cost WARM_SECONDS."""
    clock, potential, key = clocked
    other_key = key.replace("batch=(4,", "batch=(16,")
    if other == "recorded":
        CompileRecord().put(other_key, 15.0)
        CompileRecord().put("torch 0.0 | an older torch's", 1.0)
    elif other == "compiled here":
        monkeypatch.setattr(compilation, "_COMPILED_HERE", {other_key})
    monkeypatch.setattr(compilation, "WARM_SECONDS", 5.0)
    policy = AutoCompile(potential, total_iterations=100, decide_at=20)
    drive(policy, clock, 20, 1e-3, steps=100)  # 8 s left: 6 s saved at 4x, more than 5 s, less than 20 s
    expected = compilation.COLD_SECONDS if other is None else 5.0
    assert f"compile expected {expected:.1f} s" in policy.note()
    assert policy.compiled is (other is not None)


def test_the_gradient_graph_called_once_is_not_compiled(monkeypatch):
    """value_and_grad's first call runs eagerly (ChEES calls it once a run); the second compiles
    (here a stand-in runs the traced function as it is). A leapfrog graph compiles at its first call."""
    compiled = []

    def fake_compiled(name):
        def graph(potential, *args):
            compiled.append(name)
            return analytic.GRAPHS[name](potential, *args)
        return graph

    monkeypatch.setattr(analytic, "_compiled", fake_compiled)
    potential = cosine_potential()
    potential.compile = True
    theta = torch.randn(3, potential.dim, generator=torch.Generator().manual_seed(0))
    first = potential.value_and_grad(theta)
    assert compiled == [] and potential._compiled_keys == set()
    second = potential.value_and_grad(theta)
    assert compiled == ["value_and_grad"] and len(potential._compiled_keys) == 1
    eager = potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0)
    graph = potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0, graph=True)
    for a, b, c, d in zip(first, second, eager, graph):
        torch.testing.assert_close(a, c, rtol=0, atol=0)  # the eager formulation
        torch.testing.assert_close(b, d, rtol=0, atol=0)  # the one graphs trace
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-5 * float(c.abs().max()))  # float32 rounding apart
    potential.leapfrog_step(theta, torch.zeros_like(theta), first[1], 1e-3, torch.ones(potential.dim))
    assert compiled == ["value_and_grad", "leapfrog_step"]
