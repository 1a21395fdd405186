"""The benchmark scripts keep up with the API they time (they run for minutes, outside the suite)."""

import importlib
from pathlib import Path

import torch

from bnnzoo.inference.potential import analytic


def test_bench_activation_steps_with_the_four_step_graphs_arguments(monkeypatch):
    """``bench_activation``'s timed call, its graph run uncompiled (as traced): it takes the arguments
    the four-step leapfrog graph takes today and returns finite states."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    monkeypatch.setattr(analytic, "_compiled", lambda name: analytic.GRAPHS[name])
    bench = importlib.import_module("bench_activation")
    theta, p, value, grad, high, low = bench.leapfrog_step("tanh")()
    chains = bench.CHAINS
    assert theta.shape == p.shape == grad.shape and theta.shape[0] == chains
    assert value.shape == high.shape == low.shape == (chains,)
    assert all(torch.isfinite(t).all() for t in (theta, p, value, grad, high, low))
    assert (high >= low).all()
