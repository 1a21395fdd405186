"""The leapfrog loop as a replayed CUDA graph (:mod:`bnnzoo.inference.cuda_graphs`).

On the CPU a stand-in capture runs the step as it is, so the buffer logic (copy in, replay
in place, copy out, one capture per shape, the fallback) is checked against
:func:`~bnnzoo.inference.integrators.leapfrog` bit for bit; tests marked ``gpu`` capture
real graphs and are skipped without CUDA.
"""

import functools

import numpy as np
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.inference import run
from bnnzoo.inference import cuda_graphs
from bnnzoo.inference.checkpoint import restore_object, snapshot_object
from bnnzoo.inference.cuda_graphs import GraphedLeapfrog, GraphedStep
from bnnzoo.inference.integrators import EnergyTracker, kinetic_energy, leapfrog
from bnnzoo.inference.kernels.mclmc import mclmc_graph_body
from bnnzoo.inference.runtime import LeapfrogRuntime
from bnnzoo.inference.potential import BNNPotential, initial_theta
from bnnzoo.models import BNN, zoo

DATA = load("cosine", n_train=20, n_test=10)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def as_is(fn):
    """A stand-in for :func:`~bnnzoo.inference.cuda_graphs.cuda_capture`: the 'replay' runs ``fn``."""
    fn()  # a capture runs the step beforehand too (its warm-up): the buffers must not care
    return fn


def _start(chains=4, seed=0):
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=5)), DATA.x_train, DATA.y_train)
    torch.manual_seed(seed)
    theta = initial_theta(potential, chains)
    p = torch.randn_like(theta)
    value, grad = potential.value_and_grad(theta)
    return potential, theta, p, value, grad


@pytest.mark.parametrize("step_size", [0.01, "per-chain"])
def test_a_graphed_trajectory_is_the_plain_one(step_size):
    potential, theta, p, value, grad = _start()
    step = torch.full((4, 1), 0.01) * torch.linspace(0.5, 1.5, 4).unsqueeze(-1) if step_size == "per-chain" \
        else step_size
    inv_mass = torch.linspace(0.5, 2.0, theta.shape[-1])
    energy = value + kinetic_energy(p, inv_mass)
    plain_tracker, graph_tracker = EnergyTracker(energy, inv_mass), EnergyTracker(energy, inv_mass)
    want = leapfrog(theta, p, grad, step, 7, potential.value_and_grad, inv_mass, value,
                    step=potential.leapfrog_step, track_energy=plain_tracker)
    graphed = GraphedLeapfrog(potential.leapfrog_step, capture=as_is)
    got = graphed.leapfrog(theta, p, grad, step, 7, inv_mass, graph_tracker)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(graph_tracker.max_error, plain_tracker.max_error, rtol=0, atol=0)
    assert graphed.captures == 1


def test_what_comes_back_is_no_buffer_and_one_capture_serves_a_shape():
    potential, theta, p, value, grad = _start()
    graphed = GraphedLeapfrog(potential.leapfrog_step, capture=as_is)
    inv_mass = torch.ones(theta.shape[-1])
    first = [t.clone() for t in graphed.leapfrog(theta, p, grad, 0.01, 3, inv_mass)]
    kept = graphed.leapfrog(theta, p, grad, 0.01, 3, inv_mass)
    graphed.leapfrog(theta + 0.1, -p, grad, 0.02, 5, 2 * inv_mass)  # new start, step size, mass: same graph
    for a, b in zip(kept, first):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # a later trajectory left them alone
    assert graphed.captures == 1
    _, theta8, p8, _, grad8 = _start(chains=8)
    graphed.leapfrog(theta8, p8, grad8, 0.01, 2, inv_mass)
    assert graphed.captures == 2  # another chain count: another graph


def test_a_capture_that_fails_warns_once_and_hands_back():
    potential, theta, p, value, grad = _start()

    def broken(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphed = GraphedLeapfrog(potential.leapfrog_step, capture=broken)
    with pytest.warns(UserWarning, match="CUDA graph capture of the leapfrog step failed .*RuntimeError"):
        assert graphed.leapfrog(theta, p, grad, 0.01, 3, torch.ones(theta.shape[-1])) is None
    assert graphed.leapfrog(theta, p, grad, 0.01, 3, torch.ones(theta.shape[-1])) is None  # no second try
    assert graphed.failed.startswith("RuntimeError")


def test_a_checkpoint_keeps_no_captured_graph():
    potential, theta, p, value, grad = _start()
    graphed = GraphedLeapfrog(potential.leapfrog_step, key=False)
    graphed._graphs["a shape"] = lambda: None  # stands for a captured graph: device state, not picklable
    graphed.captures = 1
    snapshot = snapshot_object(graphed, {"potential": potential})
    back = restore_object(snapshot, {"potential": potential})
    assert back._graphs == {} and back.captures == 1 and back.key is False
    assert back.step.__self__ is potential  # stored by name, as a checkpoint stores the run's potential


def test_the_environment_turns_graphs_off(monkeypatch):
    monkeypatch.delenv(cuda_graphs.ENV, raising=False)
    assert cuda_graphs.enabled()
    monkeypatch.setenv(cuda_graphs.ENV, "0")
    assert not cuda_graphs.enabled()


def test_only_the_analytic_potential_is_graphable():
    assert BNNPotential(BNN(zoo.cosine_mlp(hidden=3)), DATA.x_train, DATA.y_train).graphable
    assert not BNNPotential(BNN(zoo.cosine_mlp(hidden=3)), DATA.x_train, DATA.y_train, analytic=False).graphable


def _chees(**changes):
    options = dict(engine="chees", num_chains=4, num_samples=5, warmup_steps=10, seed=3, progress=False)
    return run(zoo.cosine_mlp(hidden=5), DATA, **{**options, **changes})


def _microcanonical(engine, **changes):
    options = dict(engine=engine, num_chains=4, num_samples=6, warmup_steps=12, seed=5, progress=False)
    if engine == "mclmc":
        options["steps_per_draw"] = 3
    return run(zoo.cosine_mlp(hidden=5), DATA, **{**options, **changes})


#: what each engine's graphed steps are called in ``Run.notes["cuda_graphs"]``
STEP = {"chees": "leapfrog", "mclmc": "mclmc", "mams": "mams"}


def _graphed_engine(engine, **changes):
    return _chees(**changes) if engine == "chees" else _microcanonical(engine, **changes)


def test_chees_through_graphed_trajectories_draws_what_it_drew_without(monkeypatch):
    """The kernel's path (``HMCSampler.trajectory``) with the stand-in capture forced on the CPU."""
    without = _chees()
    made = []

    def graphed_on_cpu(self, potential, theta, step_fn, num_steps):
        if step_fn is None or not isinstance(num_steps, int) or num_steps < 1:
            return None
        if self.graph is None:
            self.graph = GraphedLeapfrog(step_fn, capture=as_is)
            made.append(self.graph)
        return self.graph

    monkeypatch.setattr(LeapfrogRuntime, "cuda_graph", graphed_on_cpu)
    with_graphs = _chees()
    assert made and made[0].captures == 1
    assert with_graphs.notes["cuda_graphs"] == "leapfrog steps replayed from 1 captured CUDA graph(s)"
    assert "cuda_graphs" not in without.notes
    for name, draws in without.samples.items():
        np.testing.assert_array_equal(with_graphs.samples[name], draws)
    np.testing.assert_array_equal(with_graphs.sample_stats["max_energy_error"],
                                  without.sample_stats["max_energy_error"])


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("engine", ["chees", "mclmc", "mams"])
def test_engines_on_cuda_draw_the_same_with_and_without_graphs(monkeypatch, engine, compile):
    monkeypatch.setenv(cuda_graphs.ENV, "0")
    without = _graphed_engine(engine, device="cuda", compile=compile)
    monkeypatch.setenv(cuda_graphs.ENV, "1")
    with_graphs = _graphed_engine(engine, device="cuda", compile=compile)
    assert with_graphs.notes["cuda_graphs"].startswith(f"{STEP[engine]} steps replayed from")  # no failed capture
    assert "cuda_graphs" not in without.notes
    for name, draws in without.samples.items():
        np.testing.assert_allclose(with_graphs.samples[name], draws, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("engine", ["chees", "mclmc"])
def test_a_checkpointed_run_on_cuda_saves_past_its_graphs_and_resumes(tmp_path, engine):
    plain = _graphed_engine(engine, device="cuda")
    saved = _graphed_engine(engine, device="cuda", checkpoint=tmp_path / "run", checkpoint_every=2)
    resumed = _graphed_engine(engine, device="cuda", checkpoint=tmp_path / "run", resume=True)
    assert saved.notes["cuda_graphs"].startswith(f"{STEP[engine]} steps replayed from")
    for name, draws in plain.samples.items():
        np.testing.assert_array_equal(saved.samples[name], draws)
        np.testing.assert_array_equal(resumed.samples[name], draws)


# ---------------------------------------------------------------- the microcanonical step (GraphedStep)
def _graphs_on_cpu(monkeypatch, capture=as_is) -> list:
    """Force the runtime's step graph on the CPU with ``capture``; the graphs made are listed."""
    made = []

    def step_graph_on_cpu(self, potential, theta, body, what):
        if not isinstance(self.graph, GraphedStep) or self.graph.what != what:
            self.graph = GraphedStep(body, key=what, what=what, capture=capture)
            made.append(self.graph)
        return self.graph

    monkeypatch.setattr(LeapfrogRuntime, "step_graph", step_graph_on_cpu)
    return made


@pytest.mark.parametrize("engine, options", [("mclmc", {}), ("mclmc", {"pool_chains": False}), ("mams", {})],
                         ids=["mclmc", "mclmc-per-chain", "mams"])
def test_microcanonical_steps_through_a_graph_draw_what_they_drew_without(monkeypatch, engine, options):
    """The samplers' graphed path (buffers filled on the host, the refresh's normal draws before
    each replay; with ``pool_chains=False`` one step size and L per chain) with the stand-in capture
    on the CPU: the same bits as the eager steps."""
    without = _microcanonical(engine, **options)
    made = _graphs_on_cpu(monkeypatch)
    with_graphs = _microcanonical(engine, **options)
    assert len(made) == 1 and made[0].captures == 1
    assert with_graphs.notes["cuda_graphs"] == f"{engine} steps replayed from 1 captured CUDA graph(s)"
    assert "cuda_graphs" not in without.notes
    for name, draws in without.samples.items():
        np.testing.assert_array_equal(with_graphs.samples[name], draws)
    for stat in ("energy_error", "step_size", "L", "diverging"):
        np.testing.assert_array_equal(with_graphs.sample_stats[stat], without.sample_stats[stat])


def test_a_microcanonical_capture_that_fails_warns_once_and_the_run_goes_on_eagerly(monkeypatch):
    without = _microcanonical("mclmc")

    def broken(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    made = _graphs_on_cpu(monkeypatch, capture=broken)
    with pytest.warns(UserWarning, match="CUDA graph capture of the mclmc step failed .*RuntimeError") as caught:
        with_graphs = _microcanonical("mclmc")
    assert len([w for w in caught if "CUDA graph capture" in str(w.message)]) == 1
    assert made[0].captures == 0 and made[0].failed.startswith("RuntimeError")
    assert with_graphs.notes["cuda_graphs"].startswith("capture failed (RuntimeError")
    for name, draws in without.samples.items():
        np.testing.assert_array_equal(with_graphs.samples[name], draws)


def test_a_step_graph_in_a_checkpoint_keeps_no_capture():
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=3)), DATA.x_train, DATA.y_train)
    body = functools.partial(mclmc_graph_body, value_and_grad=potential.value_and_grad, integrator="mclachlan")
    graphed = GraphedStep(body, key=(potential, False, "mclmc step"), what="mclmc step")
    graphed._graphs["a shape"] = ({}, lambda: None)  # stands for a captured graph: device state, not picklable
    graphed.captures = 1
    back = restore_object(snapshot_object(graphed, {"potential": potential}), {"potential": potential})
    assert back._graphs == {} and back.captures == 1 and back.key == (potential, False, "mclmc step")
    assert back.body.keywords["value_and_grad"].__self__ is potential

