"""How far chains started from ensemble members travel before they are stationary, and what that
does to their within-member mixing and their predictions.

An ensemble member is a MAP fit: small weights, a training loss near zero. Under the zoo's N(0, 1)
priors the posterior's typical set lies much further out (most directions of a network's weights
are constrained by the prior alone), so a chain started at a member first drifts outward, its
``lp`` falling as it gains volume, and only then mixes. Until it arrives, its within-member R-hat
measures the drift, not the mixing. This script runs ``bench_posteriors.py``'s methods (bnnzoo's
``mams``, BlackJAX's MILE; the same members, the same settings), and bnnzoo's ``mclmc`` at its
defaults and with MILE's recipe (:func:`bnnzoo.inference.recipes.mile`), on the digits data with the
``digits_mlp`` network of ``--hidden`` units at each ``--budgets`` value, and records per row:

* ``rms_member``: the root mean square of the members' weights; ``rms_first`` / ``rms_last``: of
  the first and last kept draw (median over chains); the prior's is 1;
* ``lp_first`` / ``lp_last``: the log density of the first and last kept draw (median over chains);
  a chain still drifting has ``lp_last`` well below ``lp_first``;
* the test LPPD and accuracy, the draws kept, the adapted step size, L and trajectory steps, and the
  within-member split R-hat (largest over members and test outputs, as
  :func:`~bnnzoo.diagnostics.members.member_mixing`) of the function draws and of ``lp``, and
  their smallest within-member bulk ESS.

Every finished row is written to ``benchmarks/results/<name>.json`` and ``.md`` at once.

Usage: ``python benchmarks/bench_drift.py [--hidden 32] [--budgets 60000 300000] [--methods mams mclmc mclmc-mile mile]
[--seed 0] [--burn-in 0 0.3] [--device cpu] [--smoke] [--out DIR] [--name drift_digits32] [--retable]``: at each
budget the bnnzoo methods asked for, in that order, then MILE from the first one's members.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_posteriors as posteriors  # noqa: E402  (sets JAX's threads before JAX is imported)
from common import RESULTS, add_device_argument, machine, markdown_table, one_core, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.diagnostics.members import member_mixing  # noqa: E402
from bnnzoo.diagnostics.scorecard import scorecard  # noqa: E402
from bnnzoo.inference import recipes, run  # noqa: E402
from bnnzoo.models import zoo  # noqa: E402

COLUMNS = ["method", "budget", "lppd", "accuracy", "draws", "rms_member", "rms_first", "rms_last", "lp_first",
           "lp_last", "rhat_f_within", "rhat_lp_within", "ess_f_within", "ess_lp_within", "step_size", "L", "n_steps",
           "wall_s", "compile_s"]


def weight_rms(samples: dict) -> np.ndarray:
    """``[C, N]`` the root mean square over all weights and biases of each draw."""
    arrays = [np.asarray(v, dtype=np.float64) for v in samples.values()]
    squares = sum((a ** 2).reshape(*a.shape[:2], -1).sum(-1) for a in arrays)
    return np.sqrt(squares / sum(int(np.prod(a.shape[2:])) for a in arrays))


def drift_row(method: str, budget: int, result, wall: float, step_size=None, L=None, n_steps=None) -> dict:
    rms = weight_rms(result.samples)
    lp = np.asarray(result.sample_stats["lp"], dtype=np.float64)
    card = scorecard(result)
    mixing = member_mixing(result)
    return {"method": method, "budget": budget, "lppd": card["lppd"], "accuracy": card.get("accuracy"),
            "draws": result.num_draws, "chains": result.num_chains,
            "rms_member": float(np.sqrt(np.mean([np.mean(np.square(m.theta)) for m in result.members]))),
            "rms_first": float(np.median(rms[:, 0])), "rms_last": float(np.median(rms[:, -1])),
            "lp_first": float(np.median(lp[:, 0])), "lp_last": float(np.median(lp[:, -1])),
            "rhat_f_within": mixing["rhat_f_within_max"], "rhat_lp_within": mixing["rhat_lp_within_max"],
            "ess_f_within": mixing["ess_f_within_min"], "ess_lp_within": mixing["ess_lp_within_min"],
            "step_size": step_size, "L": L, "n_steps": n_steps, "wall_s": wall,
            "compile_s": result.compile_seconds,
            "grad_total": int(result.grad_evals.get("total", 0))}


def mams_rows(spec, data, budget: int, args, burn_in: float = 0.0) -> tuple[dict, object]:
    """bnnzoo's ``mams`` from the ensemble, with MAMS's unadjusted ``burn_in`` share of warm-up (0: none)."""
    settings = types.SimpleNamespace(members=args.members, chains=args.chains, budget=budget, draws=None)
    start = time.perf_counter()
    result = run(spec, data, engine="mams", warm_start="ensemble", num_members=args.members,
                 chains_per_member=args.chains, num_samples=posteriors.draw_cap(settings), warmup_steps=args.warmup,
                 seed=args.seed, progress=False, threads=1, budget=budget, device=args.device,
                 **({"burn_in": burn_in} if burn_in else {}))
    wall = time.perf_counter() - start
    stats = result.sample_stats
    method = "bnnzoo mams" + (f", burn-in {burn_in:g}" if burn_in else "")
    row = drift_row(method, budget, result, wall, *(float(np.median(stats[k])) for k in ("step_size", "L",
                                                                                          "n_steps")))
    return row, result


def mclmc_rows(spec, data, budget: int, args, recipe: bool = False) -> tuple[dict, object]:
    """bnnzoo's ``mclmc`` from the ensemble: at its defaults (warm-up planned to half of what the members
    leave), or MILE's recipe (:func:`bnnzoo.inference.recipes.mile`: no preconditioner, energy variance
    from 0.5 to 0.15, thinning 10, tuning 5/6 of the budget); ``--chains`` chains a member either way."""
    if recipe:
        keywords = recipes.mile(budget, num_members=args.members, chains_per_member=args.chains)
    else:
        most = budget // (args.members * args.chains) + 1
        keywords = dict(engine="mclmc", warm_start="ensemble", num_members=args.members,
                        chains_per_member=args.chains, budget=budget, num_samples=most, warmup_steps=most,
                        steps_per_draw=10)
    start = time.perf_counter()
    result = run(spec, data, **keywords, seed=args.seed, progress=False, threads=1, device=args.device)
    wall = time.perf_counter() - start
    stats = result.sample_stats
    method = "bnnzoo mclmc" + (", MILE recipe" if recipe else "")
    return drift_row(method, budget, result, wall, *(float(np.median(stats[k])) for k in ("step_size", "L",
                                                                                          "n_steps"))), result


def mile_row(result, budget: int, args) -> dict:
    """MILE from ``result``'s members (:func:`bench_posteriors.mile_run`)."""
    mile, (_, step_size, L) = posteriors.mile_run("digits", args.seed, budget, result)
    return drift_row("blackjax mile", budget, mile, mile.wall_time, float(np.median(np.asarray(step_size))),
                     float(np.median(np.asarray(L))))


def report(payload: dict) -> str:
    """The markdown table of ``payload`` (a results file's JSON) with its settings, notes and load."""
    s = payload["settings"]
    chains = f"{s['chains']} chain{'s' if s['chains'] != 1 else ''}"
    header = (f"`benchmarks/bench_drift.py`: digits, `digits_mlp(hidden={s['hidden']})` (N(0, 1) priors), seed "
              f"{s['seed']}, {s['members']} members; bnnzoo's rows with {chains} a member, BlackJAX's MILE "
              f"with one (bench_posteriors.py's settings), from the same members. rms: root mean square of all "
              f"weights (members; first and last kept draw, median over chains; the prior's is 1); lp: log density "
              f"of the first and last kept draw (median over chains); rhat: within-member split R-hat, largest "
              f"over members and test outputs; ess: within-member bulk ESS, smallest (absent: not recorded "
              f"then); step_size and L: bnnzoo's in its preconditioned units (the weights' own where the row "
              f"has no preconditioner: MILE's recipe), MILE's in the weights' own (median over chains); compile_s: "
              f"bnnzoo's time in compiling (inductor), within wall_s (absent: MILE's, a run that compiled nothing, or not recorded then). One "
              f"process, one torch thread, "
              f"{payload['machine'].get('cores', 'all cores (not pinned: XLA may use them all)')}; load average "
              f"{payload['machine'].get('load', '?')} at the last row.\n\n")
    notes = "".join(f"\n- {n}" for n in payload.get("notes", []))
    return header + markdown_table(payload["rows"], COLUMNS) + ("\n" + notes if notes else "")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=32, help="units of each of digits_mlp's two hidden layers")
    parser.add_argument("--budgets", type=int, nargs="+", default=[60_000, 300_000])
    parser.add_argument("--methods", nargs="+", choices=["mams", "mclmc", "mclmc-mile", "mile"],
                        default=["mams", "mile"], help="mclmc: bnnzoo's at its defaults (thinned 10); mclmc-mile: "
                        "bnnzoo's mclmc with MILE's recipe; mile: BlackJAX's, from the first bnnzoo row's members")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--chains", type=int, default=2, help="chains per member (mams)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--burn-in", type=float, nargs="+", default=[0.0],
                        help="mams's burn_in option (its unadjusted share of warm-up); a mams row for each")
    add_device_argument(parser)
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny network and budget, mams and MILE's recipe (for tests)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default=None)
    parser.add_argument("--retable", action="store_true", help="rewrite the markdown from the JSON, run nothing")
    args = parser.parse_args(argv)
    if args.smoke:
        args.hidden, args.budgets, args.methods, args.members, args.warmup = 4, [12000], ["mams", "mclmc-mile"], 2, 20
    name = args.name or (f"drift_digits{args.hidden}" + ("_smoke" if args.smoke else ""))
    if args.retable:
        payload = json.loads((args.out / f"{name}.json").read_text())
        write_results(name, payload, report(payload), out=args.out)
        return payload["rows"]
    if "mile" in args.methods and importlib.util.find_spec("blackjax") is None:
        print("blackjax mile: skipped (blackjax not installed: the bench extra)", flush=True)
        args.methods = [m for m in args.methods if m != "mile"]
    torch.set_num_threads(1)
    with one_core(not args.smoke) as cores:
        return measure(args, name, cores)


def measure(args, name: str, cores: str) -> list[dict]:
    """The rows of :func:`main`'s run, each written as soon as it is measured."""
    spec, data = zoo.digits_mlp(hidden=args.hidden), load("digits", seed=0)
    info = machine(args.device)
    info["cores"] = cores
    payload = {"name": name, "machine": info, "settings": {k: getattr(args, k) for k in (
        "hidden", "budgets", "methods", "seed", "members", "chains", "warmup", "burn_in", "device")}, "rows": []}
    rows = payload["rows"]
    bnnzoo = [("mams", b) for b in args.burn_in if "mams" in args.methods]
    bnnzoo += [(m, None) for m in ("mclmc", "mclmc-mile") if m in args.methods]
    if not bnnzoo:
        raise SystemExit("bench_drift: --methods needs a bnnzoo method (mams, mclmc, mclmc-mile): MILE "
                         "starts from its members")
    for budget in args.budgets:
        members = None
        for method, burn_in in bnnzoo + ([("mile", None)] if "mile" in args.methods else []):
            if method == "mile":  # from the same members as the bnnzoo rows
                row = mile_row(members, budget, args)
            else:
                row, result = (mams_rows(spec, data, budget, args, burn_in) if method == "mams" else
                               mclmc_rows(spec, data, budget, args, recipe=method == "mclmc-mile"))
                members = members or result
            rows.append(row)
            payload["machine"]["load"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
            write_results(name, payload, report(payload), out=args.out)
            print(f"{row['method']} at {budget}: lppd {row['lppd']:.4f}, rms {row['rms_first']:.3f} -> "
                  f"{row['rms_last']:.3f}, lp {row['lp_first']:.1f} -> {row['lp_last']:.1f}, "
                  f"R-hat within {row['rhat_f_within']:.3f}, {row['wall_s']:.1f} s", flush=True)
    return rows


if __name__ == "__main__":
    main()
