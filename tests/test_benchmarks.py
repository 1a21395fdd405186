"""The benchmark scripts keep up with the API they time (they run for minutes, outside the suite)."""

import importlib
from pathlib import Path

import pytest
import torch

from bnnzoo.inference import compiled_graphs


def test_bench_activation_steps_with_the_four_step_graphs_arguments(monkeypatch):
    """``bench_activation``'s timed call, its graph run uncompiled (as traced): it takes the arguments
    the four-step leapfrog graph takes today and returns finite states."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    monkeypatch.setattr(compiled_graphs, "compiled", lambda name: compiled_graphs.GRAPHS[name])
    bench = importlib.import_module("bench_activation")
    theta, p, value, grad, high, low = bench.leapfrog_step("tanh")()
    chains = bench.CHAINS
    assert theta.shape == p.shape == grad.shape and theta.shape[0] == chains
    assert value.shape == high.shape == low.shape == (chains,)
    assert all(torch.isfinite(t).all() for t in (theta, p, value, grad, high, low))
    assert (high >= low).all()


def test_bench_cuda_graphs_compares_two_checkouts_in_alternating_processes(monkeypatch):
    """``bench_cuda_graphs --against DIR`` (here on a CPU, which times the plain steps only, and this
    checkout against itself): one probe process per tree, a row per network and chain count with
    each tree's time and the ratio, all positive and finite."""
    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    bench = importlib.import_module("bench_cuda_graphs")
    written = {}
    monkeypatch.setattr(bench, "write_results", lambda name, payload, table: written.update(
        name=name, payload=payload, table=table) or (Path("x.json"), Path("x.md")))
    bench.main(["--device", "cpu", "--chains", "2", "--modes", "eager", "--rounds", "1", "--steps", "2",
                "--against", str(root), "--against-name", "itself", "--processes", "1"])
    rows = written["payload"]["rows"]
    assert written["name"] == "cuda_graphs_against" and "old: itself" in written["table"]
    assert [(r["model"], r["chains"]) for r in rows] == [(m, 2) for m in bench.networks()]
    for r in rows:
        assert set(r) == {"model", "chains", "old eager_us", "new eager_us", "eager new/old"}
        assert all(0 < r[k] < float("inf") for k in ("old eager_us", "new eager_us", "eager new/old"))
    assert [len(v) for v in written["payload"]["runs"].values()] == [1, 1]


def test_bench_pyro_vectorized_times_both_paths_and_scores_a_run(monkeypatch):
    """``bench_pyro_vectorized`` at its smallest (one round, one seed, NumPyro left out): a row per
    model with the batching the model allows and positive times, and a scored ChEES run on the
    chain plate."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_pyro_vectorized")
    written = {}
    monkeypatch.setattr(bench, "write_results", lambda name, payload, table: written.update(
        name=name, payload=payload, table=table) or (Path("x.json"), Path("x.md")))
    monkeypatch.setattr(bench, "time_call", lambda fn, **kw: (fn(), 1e-3)[1])
    monkeypatch.setattr(bench.npm, "AVAILABLE", False)
    bench.main(["--rounds", "1", "--seeds", "1", "--draws", "64", "--warmup", "10", "--models", "eight schools"])
    payload = written["payload"]
    assert written["name"] == "pyro_vectorized"
    assert [r["batching"] for r in payload["potential"]] == ["plate", "plate", "vmap"]
    assert all(r["loop_ms"] > 0 and r["batched_ms"] > 0 and r["traced_ms"] > 0 for r in payload["potential"])
    assert all(r["traced"] for r in payload["potential"])  # each runs on its graph when timed
    row, untraced = payload["sampling"]
    assert row["model"] == "eight schools" and row["engine"] == "bnnzoo chees, 8 chains"
    assert untraced["engine"] == "bnnzoo chees, 8 chains (untraced)"
    assert row["batching"] == "plate" and row["draws"] == 64
    assert row["wall_s"] > 0 and row["ess_min"] > 0 and row["rhat_max"] > 0
    assert (row["ess_min"], row["rhat_max"]) == (untraced["ess_min"], untraced["rhat_max"])  # the same draws


def _bench_posteriors(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    return importlib.import_module("bench_posteriors")


def _check_posterior_rows(rows, methods, budget):
    import math

    assert [r["method"] for r in rows] == methods
    members = rows[0]["grad_members"]
    for r in rows:
        assert r["problem"] == "wine" and r["seed"] == 0 and math.isfinite(r["lppd"]) and r["lppd"] < 0
        assert 0.0 <= r["agreement"] <= 1.0 and 0.0 <= r["tv"] <= 1.0 and 0.0 <= r["accuracy"] <= 1.0
        assert r["grad_members"] == members > 0  # the same members for every method
    for r in rows:
        if r["method"].startswith("bnnzoo"):  # within the budget, and judged within each member
            assert members < r["grad_total"] <= budget and math.isfinite(r["rhat_f_within"])
    ensemble = rows[methods.index("ensemble")]
    assert ensemble["grad_total"] == members and ensemble["draws"] == 2  # the 2 members, nothing sampled


def test_bench_posteriors_smoke_without_jax(monkeypatch, tmp_path):
    """``bench_posteriors --smoke``: every bnnzoo method and the ensemble alone on wine, scored
    against the stored reference, at the smoke budget; the rows and the table written to disk."""
    bench = _bench_posteriors(monkeypatch)
    rows = bench.main(["--smoke", "--skip-numpyro", "--out", str(tmp_path)])
    _check_posterior_rows(rows, ["bnnzoo mclmc", "bnnzoo mams", "bnnzoo chees", "ensemble"], 8000)
    text = (tmp_path / "posteriors_smoke.md").read_text()
    assert "**wine** (wine_mlp)" in text and "NumPyro NUTS skipped (--skip-numpyro)" in text
    import json

    assert len(json.loads((tmp_path / "posteriors_smoke.json").read_text())["rows"]) == 4


@pytest.mark.slow
def test_bench_posteriors_smoke_with_numpyro(monkeypatch, tmp_path):
    """The same with NumPyro's NUTS started from the same members (its JAX compilation takes minutes)."""
    pytest.importorskip("numpyro")
    bench = _bench_posteriors(monkeypatch)
    rows = bench.main(["--smoke", "--out", str(tmp_path)])
    _check_posterior_rows(rows, ["bnnzoo mclmc", "bnnzoo mams", "bnnzoo chees", "ensemble", "numpyro nuts"], 8000)


def test_bench_suite_smoke_without_jax(monkeypatch, tmp_path):
    """``bench_suite --smoke --skip-jax``: bnnzoo's default engine on a plain Pyro model and a BNN,
    then the chain sweep; every row scored and on disk with its gate, the skipped engines named with
    their reason, and ``--retable`` rebuilds the same table from the JSON."""
    import json

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_suite")
    out = bench.main(["--smoke", "--skip-jax", "--parts", "table", "chains", "--out", str(tmp_path)])
    payload = json.loads((tmp_path / "suite_smoke.json").read_text())
    rows = payload["rows"]
    assert rows == json.loads(json.dumps(out["table"], default=str))
    assert [(r["model"], r["engine"], r["seed"]) for r in rows] == [
        ("eight_schools", "bnnzoo chees, 8 chains", 0), ("diabetes", "bnnzoo chees, 8 chains", 0)]
    for r in rows:
        assert r["draws"] == 64 and r["chains"] == 8 and r["wall_s"] > 0 and r["ess"] > 0 and r["rhat_max"] > 0
        assert r["converged"] == (r["rhat_max"] <= 1.1 and r["ess"] >= 100)
        assert r["ess_per_s"] == (r["ess"] / r["wall_s"] if r["converged"] else 0.0)
    assert rows[1]["kgrads"] > 0  # a BNN's gradient count is known
    assert payload["skipped"]["numpyro on diabetes"] == "--skip-jax"
    sweep = json.loads((tmp_path / "suite_smoke_chains.json").read_text())["rows"]
    assert [(r["chains"], r["sweep"], r["draws"]) for r in sweep] == [
        (8, "total", 64), (8, "per_chain", 64), (16, "total", 64), (16, "per_chain", 128)]
    assert all(r["nrhat_max"] > 0 for r in sweep)
    table = (tmp_path / "suite_smoke.md").read_text()
    assert "| eight_schools | bnnzoo chees, 8 chains |" in table and "digits MLP is not in the suite" in table
    (tmp_path / "suite_smoke.md").unlink()
    bench.main(["--smoke", "--retable", "--out", str(tmp_path)])
    assert (tmp_path / "suite_smoke.md").read_text() == table
