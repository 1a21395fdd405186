"""Optimise, then sample, judged by what the posterior predicts: posteriors of small real networks at
an equal gradient budget.

Problems (data sets that scikit-learn ships, each with its zoo network and its stored reference
predictive, ``benchmarks/build_references.py``): ``diabetes`` (``diabetes_mlp``, 10-32-1 tanh,
Gaussian likelihood), ``breast_cancer`` (``breast_cancer_mlp``, 30-16-1 tanh, Bernoulli) and
``wine`` (``wine_mlp``, 13-16-3 tanh, categorical); N(0, 1) priors; the seed-0 split of each data
set. ``digits`` (``digits_mlp``, 26k parameters) is left out by default: too slow on a 2-core CPU.

Methods, per problem and seed (the seed of the members, the chains and NumPyro's key):

* ``ensemble``: the deep ensemble alone, the K members (MAP fits: AdamW on minibatches, validation
  split, early stopping; bnnzoo's defaults) as a uniform mixture; it costs the members' gradients only.
* ``bnnzoo mclmc``, ``bnnzoo mams``, ``bnnzoo chees``: ``run(..., warm_start="ensemble",
  num_members=K, chains_per_member=M, budget=G)``: the same members (the members depend on the seed
  only), M chains from each, every stage (members, warm-up, sampling) within G gradient evaluations.
  ``budget`` keeps the draws that G pays for; the number of draws to run is set per problem and
  engine from a pilot run (seed 0, ``--pilot-draws`` draws; or ``--draws``) with a 20% margin, so that
  G is spent and little is computed and dropped (``dropped`` in the rows: the gradients of draws run
  past G; the wall time includes them).
* ``numpyro nuts``: NumPyro's NUTS (defaults: target 0.8, diagonal mass) on the same network, its
  C = K M chains (vectorized) started from the same members' points (chains 2..M of a member at its
  point plus N(0, 1e-3^2) noise, as bnnzoo's ``jitter``), ``--numpyro-warmup`` warm-up steps (100: its
  early trees are deep, and 300 steps alone spent 2.4 times a 60000 budget on wine), then draws in
  chunks until the members', warm-up's and draws' gradients reach G (the draws past G dropped, as
  bnnzoo's ``budget`` does). Its wall time is the members' fits plus NumPyro's warm-up and sampling,
  JAX's compilation included. Skipped (with a note) where NumPyro is not installed.
* BlackJAX's MILE (ensemble + MCLMC) is not run here (not implemented in this script).

Reported per row: test LPPD (per point), RMSE (regression, standardised units) or accuracy, ECE,
coverage of the 90% interval (regression); against the reference: ``agreement`` and ``tv``
(classification) or ``w2`` and ``tv`` (regression); the within-member function-space split R-hat
(largest over members and test inputs; ``rhat_f_within``) and ESS, the modes visited, the gradient
evaluations (members and all) and the wall time. Every finished row is written to
``benchmarks/results/<name>.json`` at once (a run stopped midway keeps them; started again it skips
them), with the medians over seeds in ``<name>.md``.

Usage: ``python benchmarks/bench_posteriors.py [--problems diabetes breast_cancer wine] [--seeds 0 1 2]
[--members 4] [--chains 2] [--warmup 300] [--budget 60000] [--skip-numpyro] [--smoke] [--out DIR]
[--name posteriors] [--retable]``.
"""

from __future__ import annotations

import os

# one thread for JAX too (set before JAX is imported), as for torch
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PROBLEMS, RESULTS, machine, markdown_table  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.diagnostics.members import ensemble_run, member_mixing  # noqa: E402
from bnnzoo.diagnostics.scorecard import load_reference, scorecard, stored_references  # noqa: E402
from bnnzoo.inference import run  # noqa: E402
from bnnzoo.models import zoo  # noqa: E402

BNNZOO_ENGINES = ("mclmc", "mams", "chees")
#: draws planned beyond the pilot's estimate (another seed's warm-up and trajectories differ; budget= drops the rest)
PLAN_MARGIN = 1.2
#: the order of the methods in the tables
METHODS = ["ensemble", *(f"bnnzoo {e}" for e in BNNZOO_ENGINES), "numpyro nuts"]
LIKELIHOOD = {"GaussianLikelihood": "gaussian", "Bernoulli": "bernoulli", "Categorical": "categorical"}


def settings(args) -> dict:
    """The settings a row depends on (a finished row is reused only under the same ones)."""
    return {k: getattr(args, k) for k in ("members", "chains", "warmup", "budget", "pilot_draws", "draws",
                                          "mclmc_thin", "numpyro_chunk", "numpyro_warmup")}


def score_row(result, reference, problem: str, method: str, seed: int, wall: float, grads: dict,
              per_member: int | None, note: str = "") -> dict:
    """A row: the scorecard (and reference scores) of ``result``, its within-member mixing."""
    card = scorecard(result, reference=reference)
    row = {"problem": problem, "method": method, "seed": seed, "chains": result.num_chains,
           "draws": result.num_draws, "grad_members": int(grads.get("members", 0)),
           "grad_total": int(grads.get("total", 0)), "wall_s": wall, **card, "note": note}
    if per_member and result.num_draws >= 4:  # fewer draws: no split R-hat, no modes to tell apart
        mixing = member_mixing(result)
        row.update(rhat_f_within=mixing["rhat_f_within_max"], ess_f_within=mixing["ess_f_within_min"],
                   modes=mixing["modes"], within_modes=mixing["converged_within_modes"])
    else:
        row.update(rhat_f_within=math.nan, ess_f_within=math.nan, modes=math.nan, within_modes=None)
    return row


def bnnzoo_run(problem, engine, seed, args, num_samples, budget=None, warmup=None):
    """An ensemble-started bnnzoo run on the seed-0 split of ``problem`` (the reference's); ``mclmc``
    thinned by ``mclmc_thin`` integration steps a draw, its warm-up as many integration steps as the
    others' warm-up transitions (``warmup // mclmc_thin`` iterations)."""
    options, steps = {}, args.warmup
    if engine == "mclmc":
        options, steps = {"steps_per_draw": args.mclmc_thin}, max(1, args.warmup // args.mclmc_thin)
    warmup = steps if warmup is None else warmup
    return run(PROBLEMS[problem], load(problem, seed=0), engine=engine, warm_start="ensemble",
               num_members=args.members, chains_per_member=args.chains, num_samples=num_samples,
               warmup_steps=warmup, seed=seed, progress=False, threads=1, budget=budget, **options)


def plan_draws(problem, engine, args) -> tuple[int | None, str | None]:
    """Draws per chain to run so that the budget is about spent: from a pilot run's gradients per draw
    and warm-up (seed 0, ``pilot_draws`` draws); None and a note where the members and warm-up alone
    spend the budget."""
    pilot = bnnzoo_run(problem, engine, 0, args, args.pilot_draws)
    chains = pilot.num_chains
    per_draw = pilot.grad_evals["sampling"] / (chains * pilot.num_draws)
    left = args.budget - pilot.grad_evals["members"] - pilot.grad_evals["warmup"]
    if left <= per_draw * chains:
        return None, (f"bnnzoo {engine} on {problem}: not run, its members and warm-up alone took "
                      f"{args.budget - left:.0f} gradient evaluations in the pilot (budget {args.budget}).")
    return max(1, math.ceil(PLAN_MARGIN * left / (per_draw * chains))), None


def bnnzoo_rows(problem, engine, seed, args, reference, num_samples):
    result = bnnzoo_run(problem, engine, seed, args, num_samples, budget=args.budget)
    dropped = result.notes.get("budget", {}).get("grad_evals_dropped", 0)
    row = score_row(result, reference, problem, f"bnnzoo {engine}", seed, result.wall_time, result.grad_evals,
                    args.chains, note=f"dropped {dropped}")
    return row, result


def ensemble_row(result, problem, seed, reference):
    alone = ensemble_run(result)
    return score_row(alone, reference, problem, "ensemble", seed, alone.wall_time, alone.grad_evals, None)


# ---------------------------------------------------------------- NumPyro


def numpyro_row(problem, seed, args, reference, members_run):
    """NumPyro's NUTS from the members of ``members_run`` (a bnnzoo run of the same seed), within the budget."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    import numpyro_models as npm

    spec = members_run.model.spec
    widths = [spec.input_dim] + [layer.units for layer in spec.layers]
    kind = LIKELIHOOD[type(spec.likelihood).__name__]
    noise = float(spec.likelihood.noise) if kind == "gaussian" else 0.1
    model, _ = npm.mlp_model(widths, spec.layers[0].activation, kind, noise=noise)
    data = members_run.data
    x = jnp.asarray(data.x_train.numpy())
    y = jnp.asarray(data.y_train.numpy().astype(np.int32 if kind != "gaussian" else np.float32))
    rng = np.random.default_rng(seed)
    names = {f"layers.{i}.{part}": f"{'w' if part == 'weight' else 'b'}{i}"
             for i in range(len(spec.layers)) for part in ("weight", "bias")}
    init = {}
    for site, name in names.items():
        points = np.stack([np.asarray(m.values[site]) for m in members_run.members])  # [K, ...]
        chains = np.repeat(points, args.chains, axis=0)
        noise_ = 1e-3 * rng.standard_normal(chains.shape)
        noise_[::args.chains] = 0.0  # the first chain of a member starts at its point
        init[name] = jnp.asarray((chains + noise_).astype(np.float32))
    num_chains = len(members_run.members) * args.chains
    member_grads = int(members_run.grad_evals["members"])
    member_wall = float(sum(m.wall_time for m in members_run.members))
    start = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_warmup=args.numpyro_warmup, num_samples=args.numpyro_chunk, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(seed), x, y, init_params=init, extra_fields=("num_steps",), collect_warmup=True)
    warm = float(np.sum(np.asarray(mcmc.get_extra_fields()["num_steps"])))
    left = args.budget - member_grads - warm
    chunks, steps, lps, spent = [], [], [], 0.0
    while not chunks or spent < left:  # at least one chunk, even where warm-up spent the budget
        mcmc.run(mcmc.post_warmup_state.rng_key, x, y, extra_fields=("num_steps", "potential_energy"))
        mcmc.post_warmup_state = mcmc.last_state
        extra = mcmc.get_extra_fields(group_by_chain=True)
        chunks.append({k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()})
        steps.append(np.asarray(extra["num_steps"], dtype=np.float64))
        lps.append(-np.asarray(extra["potential_energy"], dtype=np.float64))
        spent += float(steps[-1].sum())
    wall = member_wall + time.perf_counter() - start
    steps_all = np.concatenate(steps, 1)
    per_draw = steps_all.sum(0)  # every chain's gradients at each draw index
    keep = max(1, int(np.searchsorted(np.cumsum(per_draw), left, side="right")))
    dropped = float(per_draw[keep:].sum())
    samples = {site: np.concatenate([c[name] for c in chunks], 1)[:, :keep] for site, name in names.items()}
    lp = np.concatenate(lps, 1)[:, :keep]
    result = dataclasses.replace(members_run, samples=samples, sample_stats={"lp": lp}, warmup_sample_stats={},
                                 engine="numpyro_nuts", wall_time=wall)
    grads = {"members": member_grads, "total": int(member_grads + warm + per_draw[:keep].sum())}
    return score_row(result, reference, problem, "numpyro nuts", seed, wall, grads, args.chains,
                     note=f"dropped {dropped:.0f}")


# ---------------------------------------------------------------- tables

COLUMNS = {"regression": ["method", "lppd", "rmse", "ece", "coverage", "w2", "tv", "rhat_f_within", "modes",
                          "draws", "grad_total", "wall_s", "seeds"],
           "classification": ["method", "lppd", "accuracy", "ece", "agreement", "tv", "rhat_f_within", "modes",
                              "draws", "grad_total", "wall_s", "seeds"]}
MEDIAN = ("lppd", "rmse", "accuracy", "ece", "coverage", "w2", "tv", "agreement", "draws", "grad_total", "wall_s")


def summarise(rows: list[dict]) -> dict[str, list[dict]]:
    """Per problem, one line per method: medians over seeds (``rhat_f_within``: the largest)."""
    out: dict[str, list[dict]] = {}
    for problem in dict.fromkeys(r["problem"] for r in rows):
        lines = []
        methods = dict.fromkeys(r["method"] for r in rows if r["problem"] == problem)
        for method in sorted(methods, key=lambda m: METHODS.index(m) if m in METHODS else len(METHODS)):
            group = [r for r in rows if r["problem"] == problem and r["method"] == method]
            line = {"method": method, "seeds": len(group)}
            for key in MEDIAN:
                values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
                line[key] = statistics.median(values) if values else None
            within = [r["rhat_f_within"] for r in group if not math.isnan(r["rhat_f_within"])]
            line["rhat_f_within"] = max(within) if within else None
            modes = [r["modes"] for r in group if not math.isnan(r["modes"])]
            line["modes"] = statistics.median(modes) if modes else None
            lines.append(line)
        out[problem] = lines
    return out


def report(rows: list[dict], payload: dict) -> str:
    info, s = payload["machine"], payload["settings"]
    text = [f"`benchmarks/bench_posteriors.py`: per problem, "
            f"{s['members']} ensemble members x {s['chains']} chains, warm-up {s['warmup']}, budget {s['budget']} "
            f"gradient evaluations per run (members, warm-up and sampling, all chains); medians over the seeds "
            f"(`rhat_f_within`: the largest over seeds of the largest within-member function-space split R-hat; "
            f"`draws`: per chain, kept within the budget). "
            f"Scores against the stored reference predictive (`benchmarks/results/references.md`): `agreement`, "
            f"`tv` (classification), `w2`, `tv` (regression). LPPD per test point; RMSE in standardised units.\n"]
    tasks = payload.get("tasks", {})
    for problem, lines in summarise(rows).items():
        task = tasks.get(problem, "classification" if any("accuracy" in r for r in rows
                                                          if r["problem"] == problem) else "regression")
        text.append(f"\n**{problem}** ({PROBLEMS[problem]})\n\n" + markdown_table(lines, COLUMNS[task]) + "\n")
    notes = list(payload.get("notes") or [])
    over = [r for r in rows if r["grad_total"] > s["budget"]]
    for problem, method in dict.fromkeys((r["problem"], r["method"]) for r in over):
        seeds = [str(r["seed"]) for r in over if (r["problem"], r["method"]) == (problem, method)]
        notes.append(f"{method} on {problem}, seed {', '.join(seeds)}: over the budget ({', '.join(str(r['grad_total']) for r in over if (r['problem'], r['method']) == (problem, method))} gradients): its warm-up alone spent more; one draw per chain kept.")
    if notes:
        text.append("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    text.append(f"\nMeasured {info['date']} on {info['processor']} ({info['cpus']} CPUs, shared with other work; "
                f"load average {info['load']} at the last row), torch {info['torch']}, 1 torch thread and 1 XLA "
                f"thread per run, nice 10. Per-seed rows: `{payload['name']}.json`.\n")
    return "".join(text)


def write(out: Path, name: str, rows: list[dict], payload: dict) -> None:
    payload["machine"]["load"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    payload["rows"] = rows
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    (out / f"{name}.md").write_text(report(rows, payload))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["diabetes", "breast_cancer", "wine"],
                        choices=sorted(PROBLEMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--chains", type=int, default=2, help="chains per member")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up steps per chain")
    parser.add_argument("--budget", type=int, default=60_000, help="gradient evaluations per run, all stages")
    parser.add_argument("--pilot-draws", type=int, default=20)
    parser.add_argument("--draws", type=int, default=None,
                        help="draws per chain to run for every bnnzoo engine (default: from a pilot run)")
    parser.add_argument("--mclmc-thin", type=int, default=10, help="mclmc's steps_per_draw")
    parser.add_argument("--numpyro-chunk", type=int, default=25, help="NumPyro draws per chunk")
    parser.add_argument("--numpyro-warmup", type=int, default=100,
                        help="NumPyro's warm-up steps (its trees are deep early on: 300 took 2.4x the budget on wine)")
    parser.add_argument("--skip-numpyro", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny settings on wine, one seed (for tests)")
    parser.add_argument("--retable", action="store_true", help="rewrite the markdown from the JSON, run nothing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default=None, help="results file name (default: posteriors, or posteriors_smoke)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.problems, args.seeds, args.members, args.chains = ["wine"], [0], 2, 2
        args.warmup, args.budget, args.draws, args.mclmc_thin, args.numpyro_chunk = 30, 8000, 40, 2, 10
        args.numpyro_warmup = 10
    name = args.name or ("posteriors_smoke" if args.smoke else "posteriors")
    if args.retable:
        payload = json.loads((args.out / f"{name}.json").read_text())
        (args.out / f"{name}.md").write_text(report(payload["rows"], payload))
        return payload["rows"]
    torch.set_num_threads(1)
    notes = ["BlackJAX's MILE (ensemble + MCLMC) is not run by this script.",
             "NumPyro's wall time includes the members' fits and JAX's compilation of its warm-up and sampling "
             "(a fresh MCMC per seed); bnnzoo's includes the members' fits."]
    have_numpyro = importlib.util.find_spec("numpyro") is not None and not args.skip_numpyro
    if not have_numpyro:
        notes.append("NumPyro NUTS skipped (" + ("--skip-numpyro" if args.skip_numpyro else "not installed") + ").")
    if "digits" in args.problems:
        notes.append("digits (digits_mlp, 26k parameters) is included on request; it is slow on a 2-core CPU.")
    missing = [p for p in args.problems if p not in stored_references()]
    if missing:
        raise SystemExit(f"no stored reference for {', '.join(missing)}: run benchmarks/build_references.py first")
    info = machine()
    info["threads"] = 1
    payload = {"name": name, "machine": info, "settings": settings(args), "notes": notes,
               "tasks": {p: load_reference(p).task for p in args.problems}}
    old = args.out / f"{name}.json"
    rows = []
    if old.exists():
        previous = json.loads(old.read_text())
        if previous.get("settings") == settings(args):
            rows = previous["rows"]
    done = {(r["problem"], r["method"], r["seed"]) for r in rows}
    for problem in args.problems:
        reference = load_reference(problem)
        load(problem, seed=0)  # the data set's checks before anything runs
        plans = {}
        for seed in args.seeds:
            members_run = None
            for engine in BNNZOO_ENGINES:
                others = ("ensemble", "numpyro nuts") if have_numpyro else ("ensemble",)
                need_members = members_run is None and any((problem, m, seed) not in done for m in others)
                if (problem, f"bnnzoo {engine}", seed) in done:
                    if need_members:  # the members alone (they depend on the seed only), for the other rows
                        members_run = bnnzoo_run(problem, engine, seed, args, 1, warmup=1)
                    continue
                if engine not in plans:
                    plans[engine], note = (args.draws, None) if args.draws else plan_draws(problem, engine, args)
                    if note:
                        print(note, flush=True)
                        payload["notes"].append(note)
                if plans[engine] is None:
                    continue
                row, result = bnnzoo_rows(problem, engine, seed, args, reference, plans[engine])
                members_run = members_run or result
                if (problem, row["method"], seed) not in done:
                    rows.append(row)
                    done.add((problem, row["method"], seed))
                    write(args.out, name, rows, payload)
                    print(f"{problem} seed {seed} {row['method']}: lppd {row['lppd']:.4f}, tv {row['tv']:.4f}, "
                          f"R-hat within {row['rhat_f_within']:.3f}, {row['grad_total']} grads, "
                          f"{row['wall_s']:.1f} s", flush=True)
            if members_run is None:
                continue
            extra = [("ensemble", lambda: ensemble_row(members_run, problem, seed, reference))]
            if have_numpyro:
                extra.append(("numpyro nuts", lambda: numpyro_row(problem, seed, args, reference, members_run)))
            for method, make in extra:
                if (problem, method, seed) in done:
                    continue
                row = make()
                rows.append(row)
                done.add((problem, method, seed))
                write(args.out, name, rows, payload)
                print(f"{problem} seed {seed} {method}: lppd {row['lppd']:.4f}, tv {row['tv']:.4f}, "
                      f"{row['grad_total']} grads, {row['wall_s']:.1f} s", flush=True)
    write(args.out, name, rows, payload)
    return rows


if __name__ == "__main__":
    main()
