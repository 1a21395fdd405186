"""Build the reference posterior predictives of the benchmark problems (``bnnzoo/data/references``).

Each problem's reference comes from one long run started from a deep ensemble: ``--members`` MAP
fits (K), ``--chains`` chains from each (M). ``--engine batched_nuts`` (the default): an exact
(Metropolis-adjusted) sampler, bnnzoo's batched NUTS, ``--warmup`` warm-up steps and ``--draws``
draws per chain. ``--engine mile``: MILE's recipe (:func:`bnnzoo.inference.recipes.mile`,
unadjusted MCLMC) at a gradient ``--budget``, tuning for ``--warmup-share`` of what the members
leave and thinned to one draw every ``--steps-per-draw`` steps: on ``digits_mlp`` (26 000
parameters) NUTS's trees reach their depth cap and no adjusted bnnzoo sampler reaches the typical set
from the members within a CPU's hours, so its reference is MILE's sampler run long (its bias is its
step size's, tuned to the recipe's energy error; the provenance names the engine). The posterior
of a network has many modes; the reference is the uniform mixture over the members' modes, and
each mode's chains must have converged in function space: the within-member split R-hat of the
predictive at every test input (:func:`bnnzoo.diagnostics.members.member_mixing`) is stored with
the reference, and a problem whose largest within-member R-hat exceeds ``--max-rhat`` is written
with ``converged_within_modes: false`` in its provenance (and the script says so).

What is stored (small ``.npz`` files, :func:`bnnzoo.diagnostics.scorecard.save_reference`): the
test inputs and targets of the data set's seed-0 split, and the predictive there: class
probabilities ``[N, K]`` (classification) or ``--predictive-draws`` draws of ``y`` ``[S, N]``
(regression, float32). Beside it, the floor of the reference scores: the first half of the
members' chains scored against the second half (two independent mixtures of the same length),
what a sampler that is as good as the reference can be expected to score at best.

Provenance: ``benchmarks/results/references.{json,md}`` (date, machine, load, threads, settings,
within-mode R-hat and ESS, modes, wall time, gradient evaluations, the halves' scores), each
problem written as soon as it finishes.

Usage: ``python benchmarks/build_references.py [--problems diabetes breast_cancer wine] [--members 6]
[--chains 2] [--warmup 300] [--draws 600] [--predictive-draws 400] [--seed 0]``; digits:
``--problems digits --engine mile --members 6 --chains 1 --budget 1200000 --warmup-share 0.3
--steps-per-draw 50``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PROBLEMS, RESULTS, machine, markdown_table  # noqa: E402

from bnnzoo.diagnostics.members import member_mixing  # noqa: E402
from bnnzoo.diagnostics.scorecard import REFERENCE_DIR, reference_from_run, reference_scores, save_reference  # noqa: E402,E501
from bnnzoo.inference import recipes, run  # noqa: E402

ENGINES = ("batched_nuts", "mile")


def chains_of(result, keep: np.ndarray):
    """The run with only the chains ``keep`` (to score half of the members against the other half)."""
    import dataclasses

    return dataclasses.replace(result, samples={k: v[keep] for k, v in result.samples.items()},
                               sample_stats={k: v[keep] for k, v in result.sample_stats.items()})


def build(problem: str, args) -> dict:
    """Run the long chains of ``problem``, store its reference, return its provenance row."""
    model = PROBLEMS[problem]
    start = time.perf_counter()
    if args.engine == "mile":
        keywords = recipes.mile(budget=args.budget, num_members=args.members, chains_per_member=args.chains,
                                steps_per_draw=args.steps_per_draw)
        keywords["warmup_budget"] = args.warmup_share
        settings = (f"budget {args.budget} gradient evaluations, warm-up {args.warmup_share} of what the members "
                    f"leave, one draw every {args.steps_per_draw} steps")
    else:
        keywords = dict(engine=args.engine, warm_start="ensemble", num_members=args.members,
                        chains_per_member=args.chains, num_samples=args.draws, warmup_steps=args.warmup)
        settings = f"{args.warmup} warm-up + {args.draws} draws per chain"
    result = run(model, problem, seed=args.seed, progress=False, threads=1, **keywords)
    wall = time.perf_counter() - start
    mixing = member_mixing(result)
    source = (f"{args.engine} on {model}, data {problem!r} seed 0: {args.members} ensemble members x {args.chains} "
              f"chains, {settings}, seed {args.seed}")
    ref = reference_from_run(result, problem, num_samples=args.predictive_draws, seed=args.seed, source=source)
    if ref.samples is not None:
        ref.samples = ref.samples.astype(np.float32)
    REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
    path = save_reference(REFERENCE_DIR / f"{problem}.npz", ref)
    # the floor: members 0..K/2-1 against members K/2..K-1
    half = args.members // 2 * args.chains
    first, second = (chains_of(result, np.arange(half)), chains_of(result, np.arange(half, result.num_chains)))
    a = reference_from_run(first, problem, num_samples=args.predictive_draws, seed=args.seed + 1)
    b = reference_from_run(second, problem, num_samples=args.predictive_draws, seed=args.seed + 2)
    floor = reference_scores(ref.task, b, probs=a.probs, samples=a.samples)
    return {
        "problem": problem, "model": model, "engine": args.engine, "task": ref.task, "members": args.members,
        "chains_per_member": args.chains, "warmup": steps(result.warmup_sample_stats, args.warmup),
        "draws_per_chain": steps(result.samples, args.draws), "settings": source, "measured": measured(),
        "seed": args.seed, "test_points": int(len(ref.x)),
        "stored": "probs" if ref.probs is not None else f"{args.predictive_draws} predictive draws",
        "file": str(path.relative_to(REFERENCE_DIR.parent.parent.parent)), "file_kb": path.stat().st_size / 1024,
        "wall_s": wall, "grad_evals": int(result.grad_evals.get("total", 0)),
        "rhat_f_within_max": mixing["rhat_f_within_max"], "ess_f_within_min": mixing["ess_f_within_min"],
        "rhat_lp_within_max": mixing["rhat_lp_within_max"], "rhat_f_across_max": mixing["rhat_f_across_max"],
        "modes": mixing["modes"], "converged_within_modes": bool(mixing["rhat_f_within_max"] <= args.max_rhat),
        "floor_agreement": floor["agreement"], "floor_tv": floor["tv"], "floor_w2": floor["w2"],
        "divergences": int(np.sum(result.sample_stats.get("diverging", 0))),
    }


def steps(arrays: dict, asked: int) -> int:
    """Steps per chain that ``arrays`` (``[chains, steps, ...]``) hold; ``asked`` where none are stored."""
    return int(next(iter(arrays.values())).shape[1]) if arrays else asked


def measured() -> str:
    """The date, processor and load a row was measured on (rows of several runs share one table)."""
    info = machine()
    return (f"{info['date']}, {info['processor']} ({info['cpus']} CPUs), torch {info['torch']}, load average "
            + " ".join(f"{v:.2f}" for v in os.getloadavg()))


COLUMNS = ["problem", "model", "engine", "task", "members", "chains_per_member", "warmup", "draws_per_chain", "stored",
           "file_kb", "wall_s", "grad_evals", "rhat_f_within_max", "ess_f_within_min", "rhat_lp_within_max",
           "rhat_f_across_max", "modes", "converged_within_modes", "divergences", "floor_agreement", "floor_tv",
           "floor_w2"]


def write(rows: list[dict], notes: list[str]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"rows": rows, "notes": notes}
    (RESULTS / "references.json").write_text(json.dumps(payload, indent=2, default=str))
    text = ("Reference posterior predictives, built by `benchmarks/build_references.py`: the row's engine "
            "started from a deep ensemble (`members` x `chains_per_member` chains; `warmup` and `draws_per_chain` "
            "per chain; each row's settings and machine below), stored in `bnnzoo/data/references/<problem>.npz` "
            "(test inputs of the seed-0 split; class probabilities, or predictive draws for regression). "
            "`rhat_f_within_max`: the largest split R-hat within a member of the predictive at a test input "
            "(convergence within each mode); `rhat_f_across_max` pools every chain (differing modes inflate it). "
            "`floor_*`: the first half of the members scored against the second half, the best score to expect "
            "of a sampler as good as the reference.\n\n" + markdown_table(rows, COLUMNS) + "\n\n"
            + "".join(f"- {r['problem']}: {r['settings']}; measured {r['measured']}, 1 thread.\n" for r in rows)
            + "".join(f"\nNote: {n}\n" for n in notes))
    (RESULTS / "references.md").write_text(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["diabetes", "breast_cancer", "wine"], choices=sorted(PROBLEMS))
    parser.add_argument("--members", type=int, default=6)
    parser.add_argument("--chains", type=int, default=2, help="chains per member")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--draws", type=int, default=600, help="draws per chain")
    parser.add_argument("--predictive-draws", type=int, default=400, help="regression: predictive draws stored")
    parser.add_argument("--max-rhat", type=float, default=1.05, help="within-member R-hat of a converged reference")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", choices=ENGINES, default="batched_nuts")
    parser.add_argument("--budget", type=int, default=1_200_000, help="mile: gradient evaluations of the run")
    parser.add_argument("--warmup-share", type=float, default=0.3, help="mile: tuning's share after the members")
    parser.add_argument("--steps-per-draw", type=int, default=50, help="mile: thinning")
    parser.add_argument("--retable", action="store_true", help="rewrite references.md from references.json")
    args = parser.parse_args(argv)
    old = RESULTS / "references.json"
    stored = json.loads(old.read_text()) if old.exists() else {"rows": [], "notes": []}
    if args.retable:
        write(stored["rows"], stored.get("notes", []))
        return
    torch.set_num_threads(1)
    rows = [r for r in stored["rows"] if r["problem"] not in args.problems]
    for problem in args.problems:
        row = build(problem, args)
        rows.append(row)
        write(rows, stored.get("notes", []))
        verdict = "converged within modes" if row["converged_within_modes"] else "NOT converged within modes"
        print(f"{problem}: {row['wall_s']:.0f} s, within-member R-hat(f) {row['rhat_f_within_max']:.3f}, "
              f"{verdict}; floor tv {row['floor_tv']:.4f}", flush=True)


if __name__ == "__main__":
    main()
