"""The benchmark suite: engines side by side on several models, one gate and one ESS definition.

Models (``--models``): ``cosine`` (bench_sampling's 1-50-1 tanh MLP), ``diabetes`` (the zoo's
``diabetes_mlp``, 10-32-1 tanh, Gaussian likelihood, seed-0 split), ``breast_cancer``
(``breast_cancer_mlp``, 30-16-1 tanh, Bernoulli), ``eight_schools`` (non-centred) and
``logistic`` (Bayesian logistic regression on breast cancer) as plain Pyro models
(``pyro_models.py``), and ``learned_noise`` (bench_learned_noise's 10-32-16-1 tanh network with a
Laplace prior and a learned noise variance, 442 generated rows). The digits MLP is not in this
table: nothing converges on it from the prior; the ``posteriors`` part below runs it with
optimise-then-sample.

Engines (``--engines``): ``chees`` (bnnzoo's default engine, ``--chains`` vectorized chains),
``chees@MODE`` (the same with the options of bench_sampling's ``MODES[MODE]``, e.g. ``chees@stan``), any
other bnnzoo engine by name (``mams``, ``batched_nuts``, ...; BNN models only), ``numpyro``
(NumPyro's NUTS with its defaults, 2 chains in turn, its JIT inside the timed run) and
``blackjax_chees`` / ``blackjax_mams`` (BNN models; bench_sampling's). NumPyro and BlackJAX need
the ``bench`` extra; without JAX (or with ``--skip-jax``) their rows are skipped and the reason
written in the results. Every engine keeps ``--draws`` post-warm-up draws in total after
``--warmup`` warm-up steps per chain, and is scored the same way: ESS is the smallest bulk ESS
(ArviZ) of lp and of f (BNNs: the predictive mean, or the probability of the true label, at 20
test inputs; plain Pyro models: every latent coordinate); a run passes the gate when its largest
split R-hat is <= 1.1 and that ESS >= 100, and only passing runs count (ESS/s 0 otherwise).
Medians over ``--seeds`` seeds, the engines interleaved within each seed, the ratio to NumPyro's
NUTS measured in the same run.

Parts (``--parts``, each its own results file; every row is written as soon as it finishes, so a
run stopped midway keeps its rows, and ``--resume`` skips the rows already there):

* ``table`` -> ``NAME.{json,md}``: the table above.
* ``chains`` -> ``NAME_chains.{json,md}``: bnnzoo's default engine at ``--sweep-chains`` chains
  (8, 16, 32, 64) on ``--sweep-models``, at a fixed total of ``--draws`` draws and at a fixed
  ``--draws / 8`` draws per chain, with split R-hat and nested R-hat (4 superchains) beside ESS/s.
* ``cold`` -> ``NAME_cold.{json,md}``: bnnzoo's default engine in a fresh process with an empty
  compile record and inductor cache (``$BNNZOO_CACHE``, ``$TORCHINDUCTOR_CACHE_DIR`` and ``$TMPDIR``,
  where inductor keeps its precompiled C++ headers, in a new temporary folder: a fresh machine),
  then the same run in a second fresh process on the record and caches the first one left (warm);
  NumPyro's first run in a fresh process (its JIT included) and a second run in that process
  (warm); on ``--cold-models``.
* ``posteriors`` -> ``NAME_posteriors.{json,md}``: optimise-then-sample on ``--posterior-problems``
  (default: the digits MLP, ``digits_mlp``, 26k parameters), run by ``bench_posteriors.py``: the same
  ``--posterior-members`` ensemble members (4) for every method, ``--posterior-chains`` chains a member
  (2) for bnnzoo's, one gradient budget for every stage (``--posterior-budget``, 60 000), and the
  methods of ``--posterior-methods``: the members alone, bnnzoo's MILE recipe and ``mams``, NumPyro's
  NUTS started from the members (on ``--posterior-numpyro-budget``, 425 000, because on the digits MLP
  its warm-up trees reach NUTS's depth cap and spend more than the run's budget) and BlackJAX's MILE.
  Its gate is the same, applied within each member (a multimodal posterior's chains are judged in
  their mode): the largest within-member split R-hat of the predictions at the test inputs <= 1.1 and
  the smallest within-member ESS >= 100; ESS/s counts the members' fits in the wall time. The table
  also gives LPPD, accuracy (RMSE), the total variation to the stored reference predictive and the
  seconds per thousand gradients; bench_posteriors' own report of the same rows follows it. Seeds:
  ``--seeds``; bench_posteriors keeps finished rows under the same settings with ``--resume``.

The main process starts bnnzoo's compile record and inductor cache empty as well (a fresh folder),
so seed 0 of each model pays bnnzoo's compiling where ``compile="auto"`` compiles, as every NumPyro
and BlackJAX run pays its JIT. One torch thread (``--threads``, passed to ``run``); ``XLA_FLAGS`` for one
XLA thread, which does not hold XLA's large matrix products to one core (``common.one_core``; this
script does not pin its processes).

Usage: ``python benchmarks/bench_suite.py [--models ...] [--engines chees numpyro blackjax_chees
blackjax_mams] [--seeds 3] [--draws 1000] [--warmup 500] [--parts table chains cold posteriors] [--smoke]
[--skip-jax] [--resume] [--note TEXT] [--out DIR] [--name suite] [--retable]``.
"""

from __future__ import annotations

import os

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import XLA_ONE_THREAD  # noqa: E402

os.environ.setdefault("XLA_FLAGS", XLA_ONE_THREAD)  # one thread for JAX too, before JAX is imported
import bench_posteriors as bp  # noqa: E402
import bench_pyro_vectorized as pyro_bench  # noqa: E402
import bench_sampling as bs  # noqa: E402
from bench_learned_noise import problem as learned_noise_problem  # noqa: E402
from common import PROBLEMS, RESULTS, fresh_machine_env, machine, markdown_table, notes_text, probe_json, write_results  # noqa: E402

from bnnzoo.data.datasets import Dataset  # noqa: E402
from bnnzoo.inference import ENGINES  # noqa: E402

#: suite model -> "bnn" (a zoo network, run through ``bnnzoo.inference.run``) or "pyro" (a plain Pyro model)
MODELS = {"cosine": "bnn", "diabetes": "bnn", "breast_cancer": "bnn", "eight_schools": "pyro", "logistic": "pyro",
          "learned_noise": "bnn"}
#: the plain Pyro models' names in bench_pyro_vectorized
PYRO_NAMES = {"eight_schools": "eight schools", "logistic": "logistic regression"}
JAX_ENGINES = ("numpyro", "blackjax_chees", "blackjax_mams")
DEFAULT_ENGINES = ["chees", *JAX_ENGINES]
NOTES = ("The digits MLP is not in this table: no engine converges on it from the prior within this gate's "
         "budget; the suite's posteriors part (suite_posteriors.md) measures it with optimise-then-sample "
         "(ensemble members, then chains judged within each member).")
#: the posteriors part's methods (bench_posteriors' names): bnnzoo's pipelines, the members alone,
#: NumPyro's NUTS and BlackJAX's MILE started from the same members
POSTERIOR_METHODS = ["ensemble", "bnnzoo mile recipe", "bnnzoo mams", "numpyro nuts", "blackjax mile"]


def bench(model: str) -> bs.Bench:
    """The BNN models as bench_sampling's :class:`~bench_sampling.Bench`."""
    if model != "learned_noise":
        return bs.Bench(model)
    spec, x, y = learned_noise_problem()
    return bs.Bench.of(spec, Dataset("learned_noise", "regression", x, y, x[:20], y[:20]))


def engine_mode(engine: str) -> tuple[str, str]:
    """``engine`` split at its ``@``: the engine's name and the name of a bench_sampling ``MODES`` entry
    (``""`` without one)."""
    name, _, mode = engine.partition("@")
    return name, mode


def engine_label(engine: str, chains: int) -> str:
    name, mode = engine_mode(engine)
    if mode:
        return f"bnnzoo {name} ({mode}), {chains} chains"
    if engine == "numpyro":
        return "numpyro NUTS, 2 chains"
    if engine.startswith("blackjax_"):
        return f"blackjax {engine.split('_', 1)[1]}, {chains} chains"
    return f"bnnzoo {engine}, {chains} chains"


def skip_reason(model: str, engine: str, args) -> str | None:
    """Why ``engine`` is not run on ``model`` (None: it is)."""
    if engine in JAX_ENGINES:
        if args.skip_jax:
            return "--skip-jax"
        if not bs.npm.AVAILABLE:
            return "jax/numpyro not importable (the bench extra)"
        if engine.startswith("blackjax") and not importlib.util.find_spec("blackjax"):
            return "blackjax not importable (the bench extra)"
    if MODELS[model] == "pyro" and engine_mode(engine)[0] not in ("chees", "numpyro"):
        return "not written for plain Pyro models here (bench_pyro_vectorized runs ChEES and NumPyro's NUTS)"
    return None


def measure(model: str, engine: str, seed: int, args, chains: int | None = None, draws: int | None = None) -> dict:
    """One scored run: bench_sampling's (BNN models) or bench_pyro_vectorized's (plain Pyro models)
    measurement, in the suite's row layout (``ess``: the smaller of lp's and f's ESS)."""
    chains, draws = chains or args.chains, draws or args.draws
    name, mode = engine_mode(engine)
    options = bs.MODES[mode] if mode else {}
    if MODELS[model] == "pyro":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name == "chees":
                row = pyro_bench.bnnzoo_chees(PYRO_NAMES[model], seed, draws, args.warmup, **options)
            else:
                row = pyro_bench.numpyro_nuts(PYRO_NAMES[model], seed, draws, args.warmup)
        row.update(ess=row["ess_min"], kgrads=None)
    else:
        b = bench(model)
        if engine == "numpyro":
            row = bs.numpyro_nuts(b, 2, draws, args.warmup, seed)
        elif engine == "blackjax_chees":
            row = bs.blackjax_chees(b, chains, draws, args.warmup, seed)
        elif engine == "blackjax_mams":
            row = bs.blackjax_mams(b, chains, draws, args.warmup, seed)
        else:
            row = bs.bnnzoo_engine("", b, name, chains, draws, args.warmup, seed, progress=False,
                                   threads=args.threads, **options)
        row["ess"] = min(row["ess_lp"], row["ess_f_min"])
    row.update(model=model, engine=engine_label(engine, chains), seed=seed, load_1min=os.getloadavg()[0])
    return row


# ------------------------------------------------------------------ summaries and tables
def _median(rows: list[dict], key: str):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(statistics.median(values)) if values else None


def less_compile(row: dict) -> float | None:
    """ESS per second of the run's time outside bnnzoo's compiling calls (0 if it fails the gate; None
    where nothing was compiled or the engine is not bnnzoo's)."""
    if not row.get("compile_s") or row["compile_s"] < 0.1:
        return None
    return row["ess"] / (row["wall_s"] - row["compile_s"]) if row["converged"] else 0.0


def summarise(rows: list[dict], group=("model", "engine")) -> list[dict]:
    """One line per ``group``: seeds, seeds passing the gate, medians (ESS/s of failing runs counts 0),
    the worst split and nested R-hat, and the ratio of the median ESS/s to NumPyro's NUTS on the model."""
    rows = [{**r, "ess_per_s_less_compile": less_compile(r)} for r in rows]
    lines = []
    for key in dict.fromkeys(tuple(r[g] for g in group) for r in rows):
        mine = [r for r in rows if tuple(r[g] for g in group) == key]
        nested = [r["nrhat_max"] for r in mine if r.get("nrhat_max") is not None]
        lines.append({**dict(zip(group, key)), "chains": mine[0]["chains"], "draws": mine[0]["draws"],
                      "seeds": len(mine), "passing": sum(bool(r["converged"]) for r in mine),
                      **{k: _median(mine, k) for k in ("ess", "ess_per_s", "kgrads", "grads_per_draw", "wall_s",
                                                       "compile_s", "ess_per_s_less_compile", "load_1min")},
                      "rhat_max": max(r["rhat_max"] for r in mine), "nrhat_max": max(nested) if nested else None})
    for line in lines:
        reference = next((r["ess_per_s"] for r in lines if r["model"] == line["model"]
                          and r["engine"].startswith("numpyro")), None)
        line["vs_numpyro"] = line["ess_per_s"] / reference if reference else None
    return lines


def header(payload: dict) -> str:
    m, s = payload["machine"], payload["settings"]
    loads = [r["load_1min"] for r in payload["rows"] if r.get("load_1min") is not None]
    load = f"{min(loads):.1f} to {max(loads):.1f}" if loads else "(no run)"
    seeds = sorted({r["seed"] for r in payload["rows"]})
    return (f"Measured {m['date']} on {m['processor']} ({m['cpus']} CPUs); torch threads {m['torch_threads']} "
            f"(bnnzoo runs threads={s['threads']!r}), XLA_FLAGS for one XLA thread (not pinned to one core); "
            f"1-minute load average after each run "
            f"{load} (at the start {payload.get('load_start', float('nan')):.1f}). {s['draws']} draws in total "
            f"per run after {s['warmup']} warm-up steps per chain; seeds measured: {seeds} (asked: "
            f"{s['seeds']}).")


GATE = ("A run passes the gate when its largest split R-hat (lp and f) is <= 1.1 and its ESS >= 100; "
        "ESS is the smallest bulk ESS of lp and f (BNNs: f at 20 test inputs; plain Pyro models: every "
        "latent coordinate), and ESS/s counts 0 for a run that fails the gate.")




def table_report(payload: dict) -> str:
    lines = summarise(payload["rows"])
    text = (header(payload) + "\n\n" + markdown_table(lines, [
        "model", "engine", "chains", "draws", "seeds", "passing", "ess_per_s", "vs_numpyro", "ess", "rhat_max",
        "kgrads", "grads_per_draw", "wall_s", "compile_s", "load_1min"]))
    text += (f"\n\n{GATE} Medians over seeds; vs_numpyro: the median ESS/s over NumPyro NUTS's on the same "
             f"model in this run. kgrads: gradient evaluations of all chains, warm-up included, in thousands "
             f"(BNN models; bench_sampling's count); grads_per_draw: mean gradients per draw; compile_s: bnnzoo's "
             f"time in compiling calls (median; inside wall_s: the first run of a model in the process compiles, "
             f"later seeds reuse the graphs). Every engine warms up for --warmup steps per chain: BlackJAX's "
             f"adjusted MCLMC tunes for that many MH steps (bench_sampling's "
             f"default for it is 1000). {NOTES}")
    skipped = payload.get("skipped") or {}
    if skipped:
        text += "\n\nNot run: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()) + "."
    return text + notes_text(payload)


def chains_report(payload: dict) -> str:
    lines = summarise(payload["rows"], group=("model", "sweep", "engine"))
    text = (header(payload) + "\n\n" + markdown_table(lines, [
        "model", "sweep", "engine", "draws", "seeds", "passing", "ess_per_s", "ess", "rhat_max", "nrhat_max",
        "kgrads", "wall_s", "compile_s", "ess_per_s_less_compile"]))
    draws = payload["settings"]["draws"]
    return text + (f"\n\nbnnzoo's default engine at several chain counts: sweep 'total' keeps {draws} "
                   f"draws in total (fewer per chain as chains grow), 'per_chain' keeps "
                   f"{draws // 8} draws per chain. rhat_max: split R-hat, worst over seeds; "
                   f"nrhat_max: nested R-hat (4 superchains; Margossian et al. suggest < 1.01). compile_s: time in "
                   f"compiling calls, inside wall_s (the first run at each chain count compiles for its shapes); "
                   f"ess_per_s_less_compile: ESS per second of the rest of the run (where it compiled). {GATE}"
                   + notes_text(payload))


def cold_report(payload: dict) -> str:
    rows = payload["rows"]
    lines = []
    for model, engine in dict.fromkeys((r["model"], r["engine"]) for r in rows):
        phase = {r["phase"]: r for r in rows if (r["model"], r["engine"]) == (model, engine)}
        if {"cold", "warm"} <= set(phase):
            cold, warm = phase["cold"], phase["warm"]
            lines.append({"model": model, "engine": engine, "cold_wall_s": cold["wall_s"],
                          "warm_wall_s": warm["wall_s"], "cold_over_warm": cold["wall_s"] / warm["wall_s"],
                          "cold_compile_s": cold.get("compile_s"), "cold_ess_per_s": cold["ess_per_s"],
                          "warm_ess_per_s": warm["ess_per_s"], "passing": f"{cold['converged']}/{warm['converged']}"})
    for line in lines:
        reference = next((r["cold_ess_per_s"] for r in lines if r["model"] == line["model"]
                          and r["engine"].startswith("numpyro")), None)
        line["cold_vs_numpyro_cold"] = line["cold_ess_per_s"] / reference if reference else None
    text = header(payload) + "\n\n" + markdown_table(lines, [
        "model", "engine", "cold_wall_s", "warm_wall_s", "cold_over_warm", "cold_compile_s", "cold_ess_per_s",
        "warm_ess_per_s", "cold_vs_numpyro_cold", "passing"])
    return text + ("\n\nFirst runs. bnnzoo: a fresh process with an empty compile record and inductor cache (cold), "
                   "then a second fresh process on the record and cache the first left (warm). NumPyro: its first "
                   "run in a fresh process, JIT included (cold), then a second run in that process (warm). "
                   f"passing: the gate, cold/warm. {GATE}" + notes_text(payload))


def gated(row: dict) -> dict:
    """A bench_posteriors row with the suite's gate applied within its members: ``converged`` (the
    largest within-member R-hat of f <= 1.1 and the smallest within-member ESS >= 100; a row without
    them, the members alone, fails) and ``ess_per_s`` (that ESS over the wall time, 0 when it fails)."""
    converged = bool(row.get("rhat_f_within", math.nan) <= 1.1 and row.get("ess_f_within", 0) >= 100)
    return {**row, "converged": converged, "ess_per_s": row["ess_f_within"] / row["wall_s"] if converged else 0.0}


def posteriors_lines(rows: list[dict]) -> dict[str, list[dict]]:
    """Per problem, one line per method: bench_posteriors' medians over seeds (its ``summarise``) with the
    gate applied within each member (:func:`gated`): runs passing, median ESS/s and within-member ESS."""
    rows = [gated(r) for r in rows]
    out = bp.summarise(rows)
    for problem, lines in out.items():
        for line in lines:
            group = [r for r in rows if r["problem"] == problem and r["method"] == line["method"]]
            line.update(model=problem, passing=sum(r["converged"] for r in group))
            for key in ("ess_per_s", "ess_f_within"):
                values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
                line[key] = statistics.median(values) if values else None
            line["s_per_kgrad"] = (1000 * line["wall_s"] / line["grad_total"]
                                   if line["wall_s"] and line["grad_total"] else None)
        nuts = next((line["ess_per_s"] for line in lines if line["method"] == "numpyro nuts"), None)
        for line in lines:
            line["vs_numpyro"] = line["ess_per_s"] / nuts if nuts else None
    return out


POSTERIOR_GATE = ("A run passes the gate when, within each member, its chains mix in function space: the largest "
                  "within-member split R-hat of the predictions (over members and test inputs) is <= 1.1 and the "
                  "smallest within-member bulk ESS >= 100 (`ess_f_within`); ESS/s is that ESS over the run's wall "
                  "time, members' fits included, and counts 0 for a run that fails the gate; vs_numpyro: the "
                  "median ESS/s over NumPyro NUTS's (none where NumPyro's is 0 or was not run). Every run spends "
                  "the same gradient budget (members, warm-up and sampling) except where a note says otherwise; "
                  "s_per_kgrad: the run's seconds per thousand gradient evaluations (its cost at equal work). "
                  "lppd, accuracy or rmse, and tv (to the stored reference predictive) as bench_posteriors reports "
                  "them, medians over seeds; rhat_f_within: the largest over seeds.")


def posteriors_report(rows: list[dict], payload: dict) -> str:
    """The posteriors part's markdown: the suite's gate and ratios per problem, then bench_posteriors'
    own report of the same rows (its scores, settings, notes and machine)."""
    text = []
    for problem, lines in posteriors_lines(rows).items():
        task = payload.get("tasks", {}).get(problem, "classification")
        score = "accuracy" if task == "classification" else "rmse"
        columns = ["model", "method", "seeds", "passing", "ess_per_s", "vs_numpyro", "ess_f_within", "rhat_f_within",
                   "lppd", score, "tv", "grad_total", "wall_s", "s_per_kgrad"]
        text.append(f"**{problem}** ({PROBLEMS[problem]}), optimise-then-sample\n\n{markdown_table(lines, columns)}\n")
    return "\n".join(text) + f"\n{POSTERIOR_GATE}\n\n---\n\n{bp.report(rows, payload)}"


def posteriors_part(args) -> list[dict]:
    """bench_posteriors' run of ``--posterior-problems`` (its members, budget and methods; module docstring),
    written as ``NAME_posteriors.{json,md}`` with :func:`posteriors_report`. bench_posteriors keeps the
    finished rows of a file under the same settings: ``--resume`` keeps them, otherwise the file starts over."""
    name = args.name + REPORTS["posteriors"][0]
    if not args.resume:
        (args.out / f"{name}.json").unlink(missing_ok=True)
    argv = ["--problems", *args.posterior_problems, "--seeds", *map(str, range(args.seeds)),
            "--methods", *args.posterior_methods, "--members", str(args.posterior_members),
            "--chains", str(args.posterior_chains), "--budget", str(args.posterior_budget),
            "--out", str(args.out), "--name", name]
    if args.posterior_numpyro_budget and not args.smoke:
        argv += ["--numpyro-budget", str(args.posterior_numpyro_budget)]
    if args.skip_jax:
        argv += ["--skip-numpyro", "--skip-blackjax"]
    if args.smoke:  # bench_posteriors' tiny settings: wine, one seed
        argv.append("--smoke")
    return bp.main(argv, tables=posteriors_report)


REPORTS = {"table": ("", table_report), "chains": ("_chains", chains_report), "cold": ("_cold", cold_report),
           "posteriors": ("_posteriors", posteriors_report)}


def write(args, part: str, payload: dict) -> None:
    suffix, report = REPORTS[part]
    write_results(args.name + suffix, payload, report(payload), out=args.out)


def part_of(payload: dict) -> str:
    """The part that wrote ``payload``: its ``part`` key, or for files written before the key, what its
    rows hold (a cold row has a ``phase``, a sweep row a ``sweep``)."""
    if "part" in payload:
        return payload["part"]
    rows = payload.get("rows", [])
    if any("problem" in r for r in rows):  # bench_posteriors' rows
        return "posteriors"
    return "cold" if any("phase" in r for r in rows) else "chains" if any("sweep" in r for r in rows) else "table"


def retable(args) -> list[Path]:
    """Rewrite the markdown of each results file of ``--name`` and ``--parts`` from its JSON, with the
    report of the part that wrote it: ``--name suite_cold`` finds the cold file as ``--name suite
    --parts cold`` does. Returns the files rewritten."""
    names = {args.name + REPORTS[part][0] for part in args.parts} | {args.name}
    done = []
    for name in sorted(names):
        path = args.out / f"{name}.json"
        if path.exists():
            payload = json.loads(path.read_text())
            payload["notes"] = payload.get("notes", []) + ([args.note] if args.note else [])
            part = part_of(payload)
            if part == "posteriors":  # bench_posteriors' file: its JSON as it is, the markdown from the rows
                path.write_text(json.dumps(payload, indent=2, default=str))
                path.with_suffix(".md").write_text(posteriors_report(payload["rows"], payload))
            else:
                write_results(name, payload, REPORTS[part][1](payload), out=args.out)
            done.append(path.with_suffix(".md"))
    return done


# ------------------------------------------------------------------ the parts
def schedule(args, part: str) -> list[tuple]:
    """The runs of ``part`` in order: ``(key, thunk)`` with ``key`` naming the row for ``--resume``."""
    plan = []
    if part == "table":
        for seed in range(args.seeds):
            for model in args.models:
                engines = [e for e in args.engines if not skip_reason(model, e, args)]
                for engine in engines if seed % 2 == 0 else engines[::-1]:  # interleaved: both see the same load
                    plan.append(((model, engine_label(engine, args.chains), seed, None),
                                 lambda m=model, e=engine, s=seed: measure(m, e, s, args)))
    elif part == "chains":
        for seed in range(args.sweep_seeds):
            for model in args.sweep_models:
                for chains in args.sweep_chains:
                    for sweep, draws in (("total", args.draws), ("per_chain", (args.draws // 8) * chains)):
                        plan.append(((model, engine_label("chees", chains), seed, sweep),
                                     lambda m=model, c=chains, s=seed, d=draws, w=sweep: {
                                         **measure(m, "chees", s, args, chains=c, draws=d), "sweep": w}))
    else:
        for model in args.cold_models:
            for engine in ("chees", "numpyro"):
                if not skip_reason(model, engine, args):
                    plan.append(((model, engine_label(engine, args.chains), 0, "cold"),
                                 lambda m=model, e=engine: cold_pair(m, e, args)))
    return plan


def probe_command(args, model: str, engine: str, repeat: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--probe", model, engine, "--probe-repeat", str(repeat),
            "--draws", str(args.draws), "--warmup", str(args.warmup), "--chains", str(args.chains),
            "--threads", str(args.threads)]


def cold_pair(model: str, engine: str, args) -> list[dict]:
    """The cold and the warm run of ``engine`` on ``model`` (module docstring), seed 0."""
    env = fresh_machine_env(Path(tempfile.mkdtemp(prefix="bnnzoo-cold-")))
    if engine == "numpyro":
        cold, warm = probe_json(probe_command(args, model, engine, 2), HERE.parent, env)
    else:
        (cold,) = probe_json(probe_command(args, model, engine, 1), HERE.parent, env)
        (warm,) = probe_json(probe_command(args, model, engine, 1), HERE.parent, env)
    return [{**cold, "phase": "cold"}, {**warm, "phase": "warm"}]


def run_part(args, part: str) -> list[dict]:
    if part == "posteriors":
        return posteriors_part(args)
    suffix = REPORTS[part][0]
    path = args.out / f"{args.name}{suffix}.json"
    before = json.loads(path.read_text()) if args.resume and path.exists() else {}
    rows, kept_notes = before.get("rows", []), before.get("notes", []) + ([args.note] if args.note else [])
    skipped = {f"{e} on {m}": why for m in (args.models if part == "table" else args.cold_models)
               for e in (args.engines if part == "table" else ["chees", "numpyro"])
               if (why := skip_reason(m, e, args))} if part != "chains" else {}
    skipped = {**before.get("skipped", {}), **skipped}  # --resume with other models keeps the earlier reasons
    payload = {"machine": machine(), "settings": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items()},
               "load_start": os.getloadavg()[0], "skipped": skipped, "notes": kept_notes, "part": part, "rows": rows}
    done = {(r["model"], r["engine"], r["seed"], r.get("sweep") or (r.get("phase") and "cold")) for r in rows}
    for key, thunk in schedule(args, part):
        if key in done:
            continue
        result = thunk()
        rows.extend(result if isinstance(result, list) else [result])
        print({k: rows[-1].get(k) for k in ("model", "engine", "seed", "wall_s", "ess", "rhat_max", "ess_per_s")},
              flush=True)
        write(args, part, payload)  # every finished row on disk at once
    write(args, part, payload)
    return rows


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--engines", nargs="+", default=DEFAULT_ENGINES,
                        help=f"chees (the default engine), numpyro, blackjax_chees, blackjax_mams, or another "
                             f"bnnzoo engine ({', '.join(sorted(ENGINES))})")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=1000, help="post-warm-up draws of every run, all chains")
    parser.add_argument("--warmup", type=int, default=500, help="warm-up steps per chain of every engine")
    parser.add_argument("--chains", type=int, default=8, help="chains of bnnzoo's and BlackJAX's engines")
    parser.add_argument("--threads", default="1", help="bnnzoo's threads= (a number or 'auto')")
    parser.add_argument("--parts", nargs="+", choices=list(REPORTS), default=["table"])
    parser.add_argument("--sweep-models", nargs="+", choices=[m for m, k in MODELS.items() if k == "bnn"],
                        default=["diabetes"])
    parser.add_argument("--sweep-chains", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--sweep-seeds", type=int, default=1)
    parser.add_argument("--cold-models", nargs="+", choices=[m for m, k in MODELS.items() if k == "bnn"],
                        default=["diabetes"])
    parser.add_argument("--posterior-problems", nargs="+", choices=sorted(PROBLEMS), default=["digits"],
                        help="the posteriors part's problems (bench_posteriors')")
    parser.add_argument("--posterior-methods", nargs="+", choices=bp.METHODS, default=POSTERIOR_METHODS)
    parser.add_argument("--posterior-members", type=int, default=4, help="the posteriors part's ensemble members")
    parser.add_argument("--posterior-chains", type=int, default=2, help="... its chains per member")
    parser.add_argument("--posterior-budget", type=int, default=60_000,
                        help="... its gradient evaluations per run, every stage")
    parser.add_argument("--posterior-numpyro-budget", type=int, default=425_000,
                        help="... NumPyro's own budget (on digits its warm-up trees reach the depth cap: 100 "
                             "warm-up steps alone spend more than 60 000; 0: the run's budget)")
    parser.add_argument("--skip-jax", action="store_true", help="leave out NumPyro and BlackJAX")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny counts: 64 draws, 20 warm-up steps, one seed, eight_schools and diabetes, "
                             "the sweep at 8 and 16 chains")
    parser.add_argument("--resume", action="store_true", help="keep the rows already written and skip them")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="suite")
    parser.add_argument("--retable", action="store_true",
                        help="rewrite the markdown of --parts (and of the file named --name itself) from "
                             "their JSON, each with the report of the part that wrote it; run nothing")
    parser.add_argument("--note", help="a line for the results' notes (how this run was made), kept by --resume")
    parser.add_argument("--probe", nargs=2, metavar=("MODEL", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--probe-repeat", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads != "auto":
        args.threads = int(args.threads)
    for engine in args.engines:
        name, mode = engine_mode(engine)
        if (name not in ENGINES and engine not in JAX_ENGINES) or (mode and (name != "chees" or mode not in bs.MODES)):
            parser.error(f"--engines: unknown engine {engine!r} (a mode, chees@MODE, is one of "
                         f"{', '.join(bs.MODES)})")
    if args.smoke:
        args.draws, args.warmup, args.seeds = 64, 20, 1
        if "--models" not in (argv if argv is not None else sys.argv):
            args.models = ["eight_schools", "diabetes"]
        args.sweep_chains = [8, 16]
        args.name = args.name if args.name != "suite" else "suite_smoke"
    return args


def main(argv=None) -> dict[str, list[dict]]:
    args = parse(argv)
    if args.retable:
        for path in retable(args):
            print(f"rewrote {path}")
        return {}
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.probe:
        model, engine = args.probe
        print(json.dumps([measure(model, engine, 0, args) for _ in range(args.probe_repeat)], default=float))
        return {}
    os.environ["BNNZOO_CACHE"] = tempfile.mkdtemp(prefix="bnnzoo-suite-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.environ["BNNZOO_CACHE"], "inductor")
    return {part: run_part(args, part) for part in args.parts}


if __name__ == "__main__":
    main()
