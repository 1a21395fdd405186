"""The benchmark scripts keep up with the API they time (they run for minutes, outside the suite)."""

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
import torch

from bnnzoo.inference import compiled_graphs


def test_bench_activation_steps_with_the_four_step_graphs_arguments(monkeypatch):
    """``bench_activation``'s timed call, its graph run uncompiled (as traced): it takes the arguments
    the four-step leapfrog graph takes today and returns finite states."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    monkeypatch.setattr(compiled_graphs, "compiled", lambda name, device_type="cpu": compiled_graphs.GRAPHS[name])
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


def _timed_bench(monkeypatch, name: str):
    """The benchmark module ``name`` with its results kept in memory (``written``) and every timed call
    run once and counted as 1 ms."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module(name)
    written = {}
    monkeypatch.setattr(bench, "write_results", lambda name, payload, table: written.update(
        name=name, payload=payload, table=table) or (Path("x.json"), Path("x.md")))
    monkeypatch.setattr(bench, "time_call", lambda fn, **kw: (fn(), 1e-3)[1])
    return bench, written


def test_bench_pyro_vectorized_times_both_paths_and_scores_a_run(monkeypatch):
    """``bench_pyro_vectorized`` at its smallest (one round, one seed, NumPyro left out): a row per
    model with the batching the model allows and positive times, and a scored ChEES run on the
    chain plate."""
    bench, written = _timed_bench(monkeypatch, "bench_pyro_vectorized")
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


def test_bench_traced_gradient_times_the_three_gradients_and_checks_the_bits(monkeypatch):
    """``bench_traced_gradient`` at one round: a row per prior, on the slow path, traced, with the
    traced graph's bits autograd's and positive times."""
    bench, written = _timed_bench(monkeypatch, "bench_traced_gradient")
    rows = bench.main(["--rounds", "1", "--chains", "2"])
    assert written["name"] == "traced_gradient" and [r["prior"] for r in rows] == list(bench.PRIORS)
    for r in rows:
        assert r["slow_path"] and r["traced"] and r["same_bits"]
        assert r["autograd_ms"] > 0 and r["traced_ms"] > 0 and r["analytic_ms"] > 0


def test_bench_cpp_wrapper_times_both_wrappers_of_the_four_step_graph(monkeypatch):
    """``bench_cpp_wrapper`` at one round on one model, its graphs run uncompiled (as traced): both
    wrappers' calls take the four-step graph's arguments, agree, and give a row with both times."""
    bench, written = _timed_bench(monkeypatch, "bench_cpp_wrapper")
    monkeypatch.setattr(bench.torch, "compile", lambda fn, **kwargs: fn)
    bench.main(["--rounds", "1", "--pairs", "2", "--models", "cosine"])
    (row,) = written["payload"]["rows"]
    assert written["name"] == "hot_path_cpp_wrapper" and row["model"] == "cosine" and row["D"] == 151 and row["chains"] == 8
    assert row["python_us"] > 0 and row["cpp_us"] > 0 and row["python_over_cpp"] > 0


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
    rows = bench.main(["--smoke", "--skip-numpyro", "--skip-blackjax", "--out", str(tmp_path)])
    _check_posterior_rows(rows, ["bnnzoo mclmc", "bnnzoo mams", "bnnzoo chees", "bnnzoo mile recipe", "ensemble"], 8000)
    text = (tmp_path / "posteriors_smoke.md").read_text()
    assert "**wine** (wine_mlp)" in text and "NumPyro NUTS skipped (--skip-numpyro)" in text
    import json

    assert len(json.loads((tmp_path / "posteriors_smoke.json").read_text())["rows"]) == 5


@pytest.mark.slow
def test_bench_posteriors_smoke_with_numpyro(monkeypatch, tmp_path):
    """The same with NumPyro's NUTS started from the same members (its JAX compilation takes minutes)."""
    pytest.importorskip("numpyro")
    bench = _bench_posteriors(monkeypatch)
    rows = bench.main(["--smoke", "--skip-blackjax", "--out", str(tmp_path)])
    _check_posterior_rows(rows, ["bnnzoo mclmc", "bnnzoo mams", "bnnzoo chees", "bnnzoo mile recipe", "ensemble",
                                 "numpyro nuts"], 8000)


def test_bench_posteriors_methods_adds_rows_and_keeps_the_others(monkeypatch, tmp_path):
    """``--methods``: only the methods named run; the rows and hand-written notes of a results file
    with the same settings are kept as they were, and the problems' tasks of the file too. Without
    BlackJAX installed the MILE row is skipped with a note saying so."""
    bench = _bench_posteriors(monkeypatch)
    find_spec = bench.importlib.util.find_spec
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None if name == "blackjax" else find_spec(name))
    argv = ["--smoke", "--skip-numpyro", "--out", str(tmp_path)]
    kept = {"problem": "diabetes", "method": "bnnzoo mclmc", "seed": 0, "chains": 4, "draws": 10, "grad_members": 1,
            "grad_total": 2, "wall_s": 1.0, "lppd": -1.0, "rmse": 0.7, "ece": 0.1, "coverage": 0.9, "w2": 0.1,
            "tv": 0.1, "rhat_f_within": 1.0, "modes": 1, "note": ""}
    args = bench.argparse.Namespace(members=2, chains=2, warmup=30, budget=8000, pilot_draws=20, draws=40,
                                    mclmc_thin=2, numpyro_chunk=10, numpyro_warmup=10)
    previous = {"name": "posteriors_smoke", "settings": bench.settings(args), "rows": [kept],
                "notes": ["a note on the diabetes row",
                          "BlackJAX's MILE (ensemble + MCLMC) is not run by this script."],
                "tasks": {"diabetes": "regression"}}
    (tmp_path / "posteriors_smoke.json").write_text(json.dumps(previous))
    rows = bench.main([*argv, "--methods", "ensemble"])
    assert [r["method"] for r in rows] == ["bnnzoo mclmc", "ensemble"] and rows[0] == kept
    written = json.loads((tmp_path / "posteriors_smoke.json").read_text())
    assert "a note on the diabetes row" in written["notes"]
    assert not any(n.startswith("BlackJAX's MILE (ensemble") for n in written["notes"])  # a stale note dropped
    assert "BlackJAX MILE skipped (blackjax or numpyro not installed: the bench extra)." in written["notes"]
    assert written["tasks"] == {"diabetes": "regression", "wine": "classification"}
    assert "| bnnzoo mclmc | -1 | 0.7 |" in (tmp_path / "posteriors_smoke.md").read_text()


def test_bench_posteriors_scores_a_problem_without_a_reference_on_its_own(monkeypatch, tmp_path):
    """A problem with no stored reference (digits) runs: its rows hold their own scores (LPPD,
    accuracy, ECE, the within-member mixing) and no reference scores, and the notes say so."""
    import math

    bench = _bench_posteriors(monkeypatch)
    monkeypatch.setattr(bench, "stored_references", lambda: ())  # wine as if it had no reference
    rows = bench.main(["--smoke", "--skip-numpyro", "--skip-blackjax", "--methods", "bnnzoo mclmc", "ensemble",
                       "--out", str(tmp_path)])
    assert [r["method"] for r in rows] == ["bnnzoo mclmc", "ensemble"]
    for r in rows:
        assert math.isfinite(r["lppd"]) and 0.0 <= r["accuracy"] <= 1.0
        assert all(math.isnan(r[k]) for k in ("agreement", "tv", "w2"))
    assert math.isfinite(rows[0]["rhat_f_within"])
    written = json.loads((tmp_path / "posteriors_smoke.json").read_text())
    assert any(n.startswith("no stored reference for wine") for n in written["notes"])
    assert written["tasks"] == {"wine": "classification"}


def test_bench_posteriors_numpyro_budget_is_a_setting_only_where_given(monkeypatch):
    """``--numpyro-budget`` enters the settings a results file is reused under only where given, so that
    the rows written before the option existed stay reusable."""
    bench = _bench_posteriors(monkeypatch)
    args = bench.argparse.Namespace(members=2, chains=2, warmup=30, budget=8000, pilot_draws=20, draws=40,
                                    mclmc_thin=2, numpyro_chunk=10, numpyro_warmup=10, numpyro_budget=None)
    assert "numpyro_budget" not in bench.settings(args)
    args.numpyro_budget = 9000
    assert bench.settings(args)["numpyro_budget"] == 9000


def test_bench_posteriors_runs_again_the_bnnzoo_rows_of_a_file_from_before_the_budget_was_counted_in_the_loop(
        monkeypatch):
    """A results file written when a pilot set the draws (and warm-up was never cut) keeps its other
    methods' rows under otherwise equal settings; its bnnzoo rows are run again."""
    bench = _bench_posteriors(monkeypatch)
    args = bench.argparse.Namespace(members=2, chains=2, warmup=30, budget=8000, draws=None, mclmc_thin=2,
                                    numpyro_chunk=10, numpyro_warmup=10, numpyro_budget=None)
    rows = [{"method": "bnnzoo mams"}, {"method": "numpyro nuts"}, {"method": "ensemble"}]
    legacy = {**{k: v for k, v in bench.settings(args).items() if k != "budget_counting"}, "pilot_draws": 20}
    kept = bench.reusable_rows({"settings": legacy, "rows": rows}, args)
    assert [r["method"] for r in kept] == ["numpyro nuts", "ensemble"]
    assert bench.reusable_rows({"settings": bench.settings(args), "rows": rows}, args) == rows
    assert bench.reusable_rows({"settings": {**legacy, "budget": 9000}, "rows": rows}, args) is None
    assert bench.draw_cap(args) == 8000 // 4 + 1


def _gaussian_counting_density():
    """N(0, I_3) x N(0, 4 I_2) as a JAX log density of ``{"a", "b"}``, and the count of its evaluations."""
    import jax
    import jax.numpy as jnp

    count = [0]

    def bump(_):
        count[0] += 1

    def logdensity(p):
        jax.debug.callback(bump, p["a"][0])
        return -0.5 * jnp.sum(p["a"] ** 2) - 0.5 * jnp.sum((p["b"] / 2.0) ** 2)

    positions = {"a": jnp.zeros((2, 3)), "b": jnp.ones((2, 2))}  # two members
    return logdensity, positions, count


def test_bench_posteriors_mile_traces_the_recorded_settings(monkeypatch):
    """The MILE chains on a small Gaussian (traced, not run): every call of BlackJAX's tuner gets
    MILE's settings as ``MileSettings`` records them (the energy-variance staircase decreasing from
    near 0.5 to near 0.1, the initial L and step size, the phase lengths of the plan)."""
    pytest.importorskip("blackjax")
    pytest.importorskip("numpyro")
    import blackjax
    import jax

    bench = _bench_posteriors(monkeypatch)
    mile = bench.MILE
    assert (mile.tune_steps, mile.sample_steps, mile.thinning, mile.phase_fractions) == (50_000, 10_000, 10,
                                                                                         (0.8, 0.1, 0.1))
    assert (mile.desired_energy_var_start, mile.desired_energy_var_end) == (0.5, 0.1)
    plan = bench.mile_plan(None, 0, 12)  # MILE's own counts
    assert (plan["phase1"], plan["phase2"], plan["phase3"], plan["sample"], plan["draws"]) == (40_000, 5_000, 5_000,
                                                                                             10_000, 1_000)
    calls = []
    tuner = blackjax.mclmc_find_L_and_step_size

    def spy(**kwargs):
        calls.append({k: v for k, v in kwargs.items() if k not in ("state", "rng_key", "params", "mclmc_kernel",
                                                                   "logdensity_fn")})
        calls[-1]["L0"], calls[-1]["step0"] = kwargs["params"].L, kwargs["params"].step_size
        return tuner(**kwargs)

    monkeypatch.setattr(blackjax, "mclmc_find_L_and_step_size", spy)
    logdensity, positions, count = _gaussian_counting_density()
    plan = bench.mile_plan(600, 10, 2)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    jax.eval_shape(jax.vmap(bench.mile_chain(logdensity, plan, "regression")), positions, keys)
    assert len(calls) == mile.schedule_stages + 1
    energy = [c["desired_energy_var"] for c in calls]
    assert all(a > b for a, b in zip(energy, energy[1:]))
    assert 0.45 < energy[0] < 0.5 and 0.1 < energy[-1] < 0.15
    for c in calls:
        assert (c["trust_in_estimate"], c["num_effective_samples"], c["diagonal_preconditioning"], c["l_factor"]) == (
            mile.trust_in_estimate, mile.num_effective_samples, mile.diagonal_preconditioning, mile.l_factor)
    assert [c["frac_tune1"] for c in calls[:-1]] == plan["stages"] and calls[-1]["frac_tune1"] == 0
    assert (calls[-1]["frac_tune2"], calls[-1]["frac_tune3"]) == (plan["phase2"], plan["phase3"])
    assert float(calls[0]["L0"]) == max(5 ** 0.5, mile.L_init_floor)
    assert float(calls[0]["step0"]) == pytest.approx(mile.step_size_init_regression)
    assert count[0] == 0  # traced only


@pytest.mark.slow
def test_bench_posteriors_mile_spends_the_gradients_it_claims(monkeypatch):
    """Run on the small Gaussian (a 2-stage staircase, to compile less; about 25 s), the log density
    is evaluated exactly as often as the plan claims (counted by a callback in the log density), within
    the budget, and the chains are finite."""
    pytest.importorskip("blackjax")
    pytest.importorskip("numpyro")
    import jax
    import numpy as np

    bench = _bench_posteriors(monkeypatch)
    logdensity, positions, count = _gaussian_counting_density()
    short = dataclasses.replace(bench.MILE, schedule_stages=2)
    plan = bench.mile_plan(600, 10, 2, short)
    draws, lp, step_size, L, ran = bench.mile_chains(logdensity, positions, jax.random.PRNGKey(0), plan,
                                                     "regression", short)
    assert count[0] == plan["grads"] <= 600 - 10  # the gradients the row claims are the ones spent
    assert np.all(np.asarray(ran) == plan["phase1"] + plan["phase2"] + plan["phase3"])
    assert draws["a"].shape == (2, plan["draws"], 3) and np.all(np.isfinite(np.asarray(lp)))
    assert np.all(np.asarray(step_size) > 0) and np.all(np.isfinite(np.asarray(L)))


@pytest.mark.slow
def test_bench_posteriors_smoke_mile_row(monkeypatch, tmp_path):
    """``--smoke --methods "blackjax mile"``: the MILE row alone on wine from the smoke members, scored
    against the reference, within the budget, its gradient count the plan's."""
    pytest.importorskip("blackjax")
    pytest.importorskip("numpyro")
    import math

    bench = _bench_posteriors(monkeypatch)
    (row,) = bench.main(["--smoke", "--methods", "blackjax mile", "--out", str(tmp_path)])
    assert row["method"] == "blackjax mile" and row["chains"] == 2 and math.isfinite(row["lppd"])
    assert 0.0 <= row["agreement"] <= 1.0 and 0.0 <= row["tv"] <= 1.0 and math.isfinite(row["rhat_f_within"])
    plan = bench.mile_plan(8000, row["grad_members"], 2)
    assert row["grad_total"] == row["grad_members"] + plan["grads"] <= 8000 and row["draws"] == plan["draws"]
    recorded = json.loads((tmp_path / "posteriors_smoke.json").read_text())["mile"]
    assert recorded == json.loads(json.dumps(dataclasses.asdict(bench.MILE)))


def test_bench_suite_smoke_without_jax(monkeypatch, tmp_path):
    """``bench_suite --smoke --skip-jax``: bnnzoo's default engine on a plain Pyro model and a BNN,
    then the chain sweep; every row scored and on disk with its gate, the skipped engines named with
    their reason, and ``--retable`` rebuilds the same tables from the JSON, the sweep's also when named
    by its own file."""
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
    assert "| eight_schools | bnnzoo chees, 8 chains |" in table and "digits MLP is not in this table" in table
    sweep_table = (tmp_path / "suite_smoke_chains.md").read_text()
    assert "| diabetes |" in sweep_table and "nrhat" in sweep_table
    for name in ("suite_smoke.md", "suite_smoke_chains.md"):
        (tmp_path / name).unlink()
    bench.main(["--smoke", "--retable", "--out", str(tmp_path)])
    assert (tmp_path / "suite_smoke.md").read_text() == table
    bench.main(["--smoke", "--retable", "--name", "suite_smoke_chains", "--out", str(tmp_path)])  # its own report
    assert (tmp_path / "suite_smoke_chains.md").read_text() == sweep_table


def test_bench_suite_posteriors_part_gates_within_members_and_retables(monkeypatch, tmp_path):
    """``bench_suite --parts posteriors``: bench_posteriors' optimise-then-sample rows (here its smoke
    settings on wine), each judged by the suite's gate within its members (R-hat of f <= 1.1 and
    ESS >= 100 within each member; ESS/s 0 otherwise), the suite's table above bench_posteriors' own
    report, and ``--retable`` rebuilds the same markdown from the JSON."""
    import json
    import math

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_suite")
    out = bench.main(["--smoke", "--skip-jax", "--parts", "posteriors", "--out", str(tmp_path)])
    rows = out["posteriors"]
    assert [r["method"] for r in rows] == ["bnnzoo mams", "bnnzoo mile recipe", "ensemble"]
    payload = json.loads((tmp_path / "suite_smoke_posteriors.json").read_text())
    assert [r["method"] for r in payload["rows"]] == [r["method"] for r in rows]
    lines = bench.posteriors_lines(payload["rows"])["wine"]
    for r in map(bench.gated, payload["rows"]):
        assert r["problem"] == "wine" and r["seed"] == 0
        passed = r["rhat_f_within"] <= 1.1 and r["ess_f_within"] >= 100  # NaN (the ensemble): fails
        assert r["converged"] == passed and r["ess_per_s"] == (r["ess_f_within"] / r["wall_s"] if passed else 0.0)
        line = next(x for x in lines if x["method"] == r["method"])
        assert line["passing"] == int(passed) and line["wall_s"] == r["wall_s"] and line["vs_numpyro"] is None
        assert math.isclose(line["s_per_kgrad"], 1000 * r["wall_s"] / r["grad_total"])
    table = (tmp_path / "suite_smoke_posteriors.md").read_text()
    assert "**wine** (wine_mlp), optimise-then-sample" in table and "| wine | bnnzoo mile recipe | 1 |" in table
    assert "`benchmarks/bench_posteriors.py`: per problem" in table  # bench_posteriors' report below
    assert "NumPyro NUTS skipped (--skip-numpyro)" in table and "budget of its own" not in table
    (tmp_path / "suite_smoke_posteriors.md").unlink()
    bench.main(["--smoke", "--retable", "--parts", "posteriors", "--out", str(tmp_path)])
    assert (tmp_path / "suite_smoke_posteriors.md").read_text() == table


def test_bench_posteriors_on_a_gpu_names_it_and_keeps_the_cpu_files_reusable(monkeypatch):
    """``--device cuda``: the settings say so (a CPU file's settings, which lack the key, stay
    reusable by CPU runs), and the table's footer names the GPU and where bnnzoo and JAX ran."""
    bench = _bench_posteriors(monkeypatch)
    args = bench.argparse.Namespace(members=2, chains=2, warmup=30, budget=8000, draws=40, mclmc_thin=2,
                                    numpyro_chunk=10, numpyro_warmup=10, device="cpu")
    assert "device" not in bench.settings(args)
    args.device = "cuda"
    assert bench.settings(args)["device"] == "cuda"
    row = {"problem": "diabetes", "method": "bnnzoo mams", "seed": 0, "chains": 4, "draws": 10, "grad_members": 1,
           "grad_total": 2, "wall_s": 1.0, "lppd": -1.0, "rmse": 0.7, "ece": 0.1, "coverage": 0.9, "w2": 0.1,
           "tv": 0.1, "rhat_f_within": 1.0, "modes": 1, "note": ""}
    payload = {"name": "posteriors_gpu", "settings": bench.settings(args), "notes": [],
               "machine": {**bench.machine(), "gpu": "NVIDIA H200", "device": "cuda", "load": "1.00 1.00 1.00"},
               "mile_versions": {"jax_device": "cuda:0"}}
    text = bench.report([row], payload)
    assert "Measured" in text and "on NVIDIA H200 (" in text and "bnnzoo on cuda, JAX on cuda:0" in text
    assert "shared with other work" not in text and "| bnnzoo mams | -1 | 0.7 |" in text


def test_bench_drift_smoke(monkeypatch, tmp_path):
    """``bench_drift --smoke``: a tiny digits network, mams and MILE's recipe from its members at one
    budget; a row holds the weights' scale at the members and at the first and last draw, lp at both,
    the within-member R-hat, and is written to disk."""
    import math

    import numpy as np

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_drift")
    row, recipe = bench.main(["--smoke", "--out", str(tmp_path)])
    assert recipe["method"] == "bnnzoo mclmc, MILE recipe" and recipe["grad_total"] <= 12000
    assert recipe["n_steps"] == 10 and recipe["draws"] > 0
    assert recipe["compile_s"] is None or 0 <= recipe["compile_s"] < recipe["wall_s"]  # None: nothing compiled
    assert row["method"] == "bnnzoo mams" and row["budget"] == 12000 and row["grad_total"] <= 12000
    assert row["draws"] > 0 and row["rms_member"] > 0 and row["rms_first"] > 0 and row["rms_last"] > 0
    assert all(math.isfinite(row[k]) for k in ("lppd", "lp_first", "lp_last", "rhat_f_within", "rhat_lp_within"))
    assert "| bnnzoo mams | 12000 |" in (tmp_path / "drift_digits4_smoke.md").read_text()
    draws = np.random.default_rng(0).normal(size=(2, 3, 4, 5))
    assert np.allclose(bench.weight_rms({"a": draws[..., :2], "b": draws[..., 2:]}),
                       np.sqrt((draws ** 2).reshape(2, 3, -1).mean(-1)))


def test_bench_first_compile_names_each_compiler_call_on_a_fresh_machine(monkeypatch, tmp_path):
    """``bench_first_compile``: each measuring process starts on its own empty caches and temporary
    folder with the header setting asked for, the compiler reached through the timing wrapper; the
    wrapper's log is read back by kind, and the rows and table are written."""
    import os
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++ on the PATH")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_first_compile")
    assert bench.kind("-E -P -o /t/header.i /t/header.hpp") == "header"
    assert bench.kind("-x c++-header /c/x.h -o /c/x.h.gch") == "header"
    assert bench.kind("/c/ab/cab.main.cpp -shared -o /c/ab/cab.main.so") == "kernel"
    assert bench.kind("/c/ab/cab.cpp -shared -o /c/ab/cab.so -mavx512f") == "isa_check"
    assert bench.kind("-v") == "other"
    seen = []

    def probe(command, tree, env):  # one compiler call through the wrapper, as inductor would make it
        seen.append({k: env.get(k) for k in ("BNNZOO_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR",
                                              "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "BNNZOO_PREWARM")})
        assert command[-4:] == ["cosine", "chees", "--threads", "1"] and os.path.isdir(env["TMPDIR"])
        subprocess.run(["g++", "--version"], env=env, capture_output=True, check=True)
        return [{"wall_s": 2.0, "compile_s": 1.0}]

    monkeypatch.setattr(bench, "probe_json", probe)
    payload = bench.main(["--rounds", "1", "--header", "off", "default", "--prewarm", "off", "--out", str(tmp_path),
                          "--name", "fc"])
    assert [(r["header"], r["phase"]) for r in payload["rows"]] == [
        ("off", "cold"), ("off", "warm"), ("default", "cold"), ("default", "warm")]
    assert {s["BNNZOO_PREWARM"] for s in seen} == {"0"}
    assert all(r["compiler_calls"] == 1 and r["other_calls"] == 1 and r["compiler_s"] > 0 for r in payload["rows"])
    assert [s["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] for s in seen] == ["0", "0", None, None]
    assert seen[0] == seen[1] and seen[0]["BNNZOO_CACHE"] != seen[2]["BNNZOO_CACHE"]  # warm reuses, a setting not
    assert seen[0]["TMPDIR"].startswith(str(Path(seen[0]["BNNZOO_CACHE"]).parent))
    table = (tmp_path / "fc.md").read_text()
    assert "| off | off | cold | 1 | 2 | 1 |" in table and "| default | off | warm | 1 |" in table


def test_bench_first_compile_against_a_commit_runs_each_tree_on_its_own_checkout(monkeypatch, tmp_path):
    """``--against REV``: each setting measured on this checkout and on REV's worktree, alternating; each
    measuring process runs that tree's bench_suite with that tree first on ``$PYTHONPATH``, and the
    rows and table name the tree, with the cold over warm ratio."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if shutil.which("g++") is None or shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("needs g++ and this checkout's git history")
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    bench = importlib.import_module("bench_first_compile")
    seen = []

    def probe(command, tree, env):
        seen.append((Path(command[1]).parents[1], Path(tree), env["PYTHONPATH"].split(":")[0]))
        return [{"wall_s": 3.0 if len(seen) % 2 else 2.0, "compile_s": 1.0}]

    monkeypatch.setattr(bench, "probe_json", probe)
    payload = bench.main(["--rounds", "2", "--header", "default", "--prewarm", "on", "--against", "HEAD",
                          "--out", str(tmp_path), "--name", "fc"])
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert payload["against"] == rev
    assert [(r["tree"], r["phase"]) for r in payload["rows"]] == [
        (rev, "cold"), (rev, "warm"), ("this", "cold"), ("this", "warm"),
        ("this", "cold"), ("this", "warm"), (rev, "cold"), (rev, "warm")]
    for script_tree, cwd, first_on_path in seen:
        assert script_tree == cwd and str(cwd) == first_on_path
    assert {cwd for _, cwd, _ in seen} == {root, seen[0][1]} and seen[0][1] != root  # the worktree, then removed
    assert not seen[0][1].exists()
    table = (tmp_path / "fc.md").read_text()
    assert f"| {rev} | default | on | cold | 2 | 3 |" in table and "| this | default | on | warm | 2 | 2 |" in table
    assert table.count("| 1.5 |") == 2  # 3 s cold over 2 s warm, each tree


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no sched_setaffinity here")
def test_one_core_pins_the_process_for_the_block_and_restores_its_cores(monkeypatch):
    """``common.one_core``: one core inside the block (what the results then say), the process's cores
    again after it, even when the block raises; disabled (a smoke run), nothing changes."""
    import os

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    common = importlib.import_module("common")
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError):
        with common.one_core() as cores:
            assert os.sched_getaffinity(0) == {min(before)}
            assert cores.startswith("one core") and f"core {min(before)}" in cores
            raise RuntimeError("the block fails")
    assert os.sched_getaffinity(0) == before
    with common.one_core(False) as cores:
        assert os.sched_getaffinity(0) == before and cores == "all cores (not pinned)"


def test_bench_kinetic_precision_measures_both_forms_of_the_kinetic_change(monkeypatch, tmp_path):
    """``bench_kinetic_precision`` without ``--runs``: a row per force norm and step size, each form's
    float32 error against float64, the stable one the smaller in every row; both files written."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("bench_kinetic_precision")
    payload = bench.main(["--out", str(tmp_path)])
    assert len(payload["substeps"]) == 12 and payload["runs"] == []
    assert all(row["error_stable"] < row["error_former"] for row in payload["substeps"])
    assert "| force_norm | step_size |" in (tmp_path / "kinetic_precision.md").read_text()
    assert json.loads((tmp_path / "kinetic_precision.json").read_text())["substeps"] == payload["substeps"]


def test_build_references_mile_engine_writes_a_reference_and_a_row_naming_its_settings(monkeypatch, tmp_path):
    """``build_references --engine mile`` (the digits reference's engine) on wine at a tiny budget: the
    reference file is written, the row names its engine, settings and machine, keeps the rows of other
    problems, and ``--retable`` rewrites the table from the JSON alone."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    bench = importlib.import_module("build_references")
    refs, results = tmp_path / "pkg" / "data" / "references", tmp_path / "results"
    results.mkdir()
    (results / "references.json").write_text(json.dumps({"rows": [{"problem": "diabetes", "settings": "s",
                                                                    "measured": "m"}], "notes": ["kept"]}))
    monkeypatch.setattr(bench, "REFERENCE_DIR", refs)
    monkeypatch.setattr(bench, "RESULTS", results)
    bench.main(["--problems", "wine", "--engine", "mile", "--members", "2", "--chains", "1", "--budget", "6000",
                "--steps-per-draw", "2"])
    assert (refs / "wine.npz").exists()
    rows = json.loads((results / "references.json").read_text())["rows"]
    assert [r["problem"] for r in rows] == ["diabetes", "wine"]
    row = rows[1]
    assert row["engine"] == "mile" and row["members"] == 2 and row["draws_per_chain"] > 0 and row["warmup"] > 0
    assert "budget 6000 gradient evaluations" in row["settings"] and "CPUs" in row["measured"]
    assert 0 < row["grad_evals"] <= 6000
    (results / "references.md").unlink()
    bench.main(["--retable"])
    text = (results / "references.md").read_text()
    assert "| wine | wine_mlp | mile |" in text and "Note: kept" in text and "- wine: mile on wine_mlp" in text
