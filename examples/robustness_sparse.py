"""Selection that holds when the data set changes: the sparse engines with their defaults.

Runs the paper-001 large-p-small-n regression (``sgld_sa``) and the paper-004 regression and
classification (``sghmc_group_ss``) with every engine option at its default (``"auto"`` rules:
``docs/algorithms.md``, "Data-scaled defaults"), across training-set sizes, noise levels and seeds.
The only settings given are the budget (warm-up iterations and draws) and, for paper 004, the
paper's minibatch of 1024 rows (a compute choice; the rules scale with it). For each cell (problem,
N, noise) and seed it records

* relevant inputs kept and irrelevant inputs kept (``sgld_sa``: inclusion probability > 0.5;
  ``sghmc_group_ss``: the input columns its hard mask keeps),
* the test error of the posterior mean / ensemble (MSE for the regressions, accuracy for the
  classification) and its noise floor (the noise variance; none for the noiseless labels),
* wall time.

    python examples/robustness_sparse.py                   # -> out/robustness_sparse/ (about 25 min, 2 cores)
    python examples/robustness_sparse.py --only paper004 --workers 2   # the paper-004 cells only
    python examples/robustness_sparse.py --full --out out/robustness_sparse_full
    python examples/robustness_sparse.py --smoke --out out/robustness_smoke   # seconds: checks the script

Default: paper 001 at n = 50 and 400 with noise variance 1 and 3 (5000 warm-up iterations, 500
draws); paper 004 at N = 1024, 2048, 5120, 6144, 10240 and 20480 (regression noise sd 0.5 and 1; 1
warm-up cycle and 2 draws, cycles of ``cycle_length="auto"``); 3 seeds each. ``--full``: n in 50, 100,
200, 400 and noise variance 1, 3, 9; the same N with noise sd 0.5, 1, 2; 2 warm-up cycles and 4 draws.
The classification labels have no noise knob (a deterministic function of x1..x4), so they vary
by N only. Writes ``table.md``, ``runs.csv`` and ``timing.json`` at the end, and each run to ``runs.jsonl``
as it finishes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

BATCH = 1024
#: (problem, sizes, noise levels) per size of the study
#: paper 004's sizes: 1024 rows (one minibatch: the full batch) to 20480, and the 6144 of a held-out check
SIZES = (1024, 2048, 5120, 6144, 10240, 20480)
DEFAULT = dict(p001=((50, 400), (1.0, 3.0)), reg=(SIZES, (0.5, 1.0)), cls=(SIZES,),
               seeds=3, p001_warmup=5000, p001_draws=500, warmup_cycles=1, draw_cycles=2)
FULL = dict(p001=((50, 100, 200, 400), (1.0, 3.0, 9.0)), reg=(SIZES, (0.5, 1.0, 2.0)), cls=(SIZES,), seeds=3,
            p001_warmup=20_000, p001_draws=1000, warmup_cycles=2,
            draw_cycles=4)
SMOKE = dict(p001=((50,), (3.0,)), reg=((256,), (1.0,)), cls=((256,),), seeds=2, p001_warmup=100,
             p001_draws=10, warmup_cycles=0, draw_cycles=1, p=50, cycle=20)


def _threads() -> None:
    torch.set_num_threads(1)


def p001_run(n: int, noise_var: float, seed: int, warmup: int, draws: int, p: int = 1000) -> dict:
    """``sgld_sa`` with its defaults on ``linear_p1000`` (n rows, p inputs, noise variance)."""
    _threads()
    from bnnzoo.data import load
    from bnnzoo.inference import run
    from bnnzoo.models import zoo

    data = load("linear_p1000", seed=seed, n_train=n, p=p, noise_var=noise_var)
    start = time.perf_counter()
    r = run(zoo.get("sparse_linear", p=p), data, engine="sgld_sa", num_samples=draws, warmup_steps=warmup,
            num_chains=1, seed=seed, progress=False)
    seconds = time.perf_counter() - start
    prediction = r.predict(data.x_test)[..., 0].mean((0, 1))
    y = data.y_test.numpy()
    kept = np.flatnonzero(r.inclusion_prob["layers.0.weight"][0, 0] > 0.5)
    return _row("paper001 regression (sgld_sa)", n, noise_var, seed, kept, data.meta["support"], p,
                float(((prediction - y) ** 2).mean()), noise_var, seconds, r,
                mae=float(np.abs(prediction - y).mean()), mae_floor=math.sqrt(2 * noise_var / math.pi))


def p004_spec(task: str, p: int, noise: float | None):
    from bnnzoo.models import Bernoulli, BNNSpec, Dense, Gaussian, GaussianLikelihood, GroupSpikeAndSlab

    hidden = [5, 3] if task == "regression" else [6, 4, 3]
    likelihood = GaussianLikelihood(noise) if task == "regression" else Bernoulli()
    return BNNSpec(layers=[Dense(h, "relu") for h in hidden] + [Dense(1)], input_dim=p, prior=Gaussian(1.0),
                   priors={"layers.0.weight": GroupSpikeAndSlab()}, likelihood=likelihood, name=f"paper004_{task}")


def cycle_iterations(n: int, batch: int) -> int:
    """The length of a cycle under ``cycle_length="auto"`` (the engine's rule), to count the budget in cycles."""
    from bnnzoo.inference.group_em import group_sparse_rules

    epoch = math.ceil(n / batch)
    return group_sparse_rules(epoch, epoch, 0.01)["cycle_length"]


def p004_run(task: str, n: int, noise: float | None, seed: int, warmup_cycles: int, draw_cycles: int,
             p: int = 1000, cycle: int | None = None) -> dict:
    """``sghmc_group_ss`` with its defaults on paper 004's problem (N rows, p inputs, noise sd)."""
    _threads()
    from bnnzoo.data import load
    from bnnzoo.inference import run

    extra = {"noise": noise} if task == "regression" else {}
    data = load(f"group_sparse_{task}", seed=seed, n_train=n, p=p, **extra)
    batch = min(BATCH, n)
    options = {} if cycle is None else {"cycle_length": cycle}  # --smoke only: a short cycle
    length = cycle or cycle_iterations(n, batch)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # what the user is told at run time
        warnings.simplefilter("always")
        r = run(p004_spec(task, p, noise), data, engine="sghmc_group_ss", batch_size=batch,
                warmup_steps=warmup_cycles * length, num_samples=draw_cycles, num_chains=1, seed=seed,
                progress=False, **options)
    seconds = time.perf_counter() - start
    told = sorted({str(w.message) for w in caught if str(w.message).startswith("GroupSparseSGHMC")})
    f = r.predict(data.x_test)[..., 0]
    y = data.y_test.numpy()
    kept = np.flatnonzero(r.pruning_mask["layers.0.weight"][0].any(0))
    if task == "regression":
        error, floor = float(((f.mean((0, 1)) - y) ** 2).mean()), noise ** 2
    else:
        error, floor = float((((1 / (1 + np.exp(-f))).mean((0, 1)) > 0.5) == y).mean()), math.nan
    stats = r.sample_stats
    spiked = int(stats["active_groups[layers.0.weight]"][0, -1] - stats["slab_groups[layers.0.weight]"][0, -1])
    return _row(f"paper004 {task} (sghmc_group_ss)", n, noise, seed, kept, data.meta["support"], p, error, floor,
                seconds, r, warning=" | ".join(told), undecided=spiked)


def _row(problem, n, noise, seed, kept, support, p, error, floor, seconds, r, **extra) -> dict:
    kept = [int(j) for j in kept]
    return {"problem": problem, "n_train": n, "noise": noise, "seed": seed,
            "relevant_kept": sum(j in kept for j in support), "relevant": len(support),
            "irrelevant_kept": sum(j not in support for j in kept),
            "irrelevant": p - len(support), "error": error, "floor": floor, "seconds": seconds,
            "kept": " ".join(map(str, kept[:20])) + (" ..." if len(kept) > 20 else ""),
            "failed": bool(np.any(r.notes.get("failed", False))),
            "auto": json.dumps({k: (round(v, 6) if isinstance(v, float) else v)
                                for k, v in r.notes.get("auto_options", {}).items()}), **extra}


def jobs(size: dict):
    p = size.get("p", 1000)
    sizes, levels = size["p001"]
    for n in sizes:
        for noise in levels:
            for seed in range(size["seeds"]):
                yield p001_run, (n, noise, seed, size["p001_warmup"], size["p001_draws"], p)
    sizes, levels = size["reg"]
    for n in sizes:
        for noise in levels:
            for seed in range(size["seeds"]):
                yield p004_run, ("regression", n, noise, seed, size["warmup_cycles"], size["draw_cycles"], p,
                                 size.get("cycle"))
    for n in size["cls"][0]:
        for seed in range(size["seeds"]):
            yield p004_run, ("classification", n, None, seed, size["warmup_cycles"], size["draw_cycles"], p,
                             size.get("cycle"))


def wanted(only: str, fn, arguments) -> bool:
    """Whether ``--only`` keeps this run."""
    if only == "all":
        return True
    if only == "paper004":
        return fn is p004_run
    return fn is p001_run if only == "paper001" else fn is p004_run and arguments[0] == only


def named_groups(text) -> str:
    """The inputs the check of the pruned groups names in a run's warnings (chain 0), or ``-``."""
    match = re.search(r"still pull away from zero at the end \(chain 0: group\(s\) ([0-9, ]+);", text or "")
    return match.group(1) if match else "-"


def check_table(rows: list[dict]) -> str:
    """Per run: whether the selection is exact, what it lost or kept, and the inputs the end-of-run check of
    the pruned groups names (its score test; the relevant inputs are the problem's first ones)."""
    lines = ["| problem | N | noise | seed | selection | inputs the check names |", "|---|---|---|---|---|---|"]
    for r in rows:
        lost = r["relevant"] - r["relevant_kept"]
        exact = lost == 0 and r["irrelevant_kept"] == 0
        selection = "exact" if exact else f"{lost} relevant lost, {r['irrelevant_kept']} irrelevant kept"
        noise = "-" if r["noise"] is None else f"{r['noise']:g}"
        lines.append(f"| {r['problem']} | {r['n_train']} | {noise} | {r['seed']} | {selection} | "
                     f"{named_groups(r.get('warning'))} |")
    return "\n".join(lines)


def warning_kinds(text) -> str:
    """The run-time warnings of one run, by kind: ``rows`` (too few rows for the layer's threshold: raised to
    the no-signal level), ``short`` (the run ended before any group could be pruned), ``open`` (groups neither
    pruned nor in the slab at the end), ``signal`` (pruned groups the data still pull away from zero), ``-`` none."""
    if not isinstance(text, str) or not text:
        return "-"
    kinds = [k for k, key in (("rows", "a group with no signal"), ("short", "before any group could be pruned"),
                              ("open", "selection is not finished"), ("signal", "data still pull away")) if key in text]
    return "+".join(kinds) or "other"


def table(rows: list[dict], out: Path) -> str:
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame.to_csv(out / "runs.csv", index=False)
    if "warning" not in frame:
        frame["warning"] = ""
    lines = ["Every engine option at its default (`auto` rules). Per cell: relevant inputs kept and irrelevant "
             "inputs kept per seed; test error (regressions: MSE, floor = noise variance; classification: "
             "accuracy) mean ± sd over seeds; wall time per run (mean); the run-time warnings per seed (`rows`: "
             "too few rows for the layer's threshold, `short`: the run ended before any group could be pruned, "
             "`open`: groups neither pruned nor in the slab at the end, `signal`: pruned groups the data still pull "
             "away from zero, `-`: none; texts below).", "",
             "| problem | N | noise | relevant kept | irrelevant kept | exact | test error | floor | s/run | warning |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = ["problem", "n_train", "noise"]
    for (problem, n, noise), cell in frame.groupby(keys, sort=False, dropna=False):
        relevant = " ".join(f"{a}/{b}" for a, b in zip(cell.relevant_kept, cell.relevant))
        irrelevant = " ".join(str(v) for v in cell.irrelevant_kept)
        exact = int(((cell.relevant_kept == cell.relevant) & (cell.irrelevant_kept == 0)).sum())
        sd = cell.error.std(ddof=1) if len(cell) > 1 else 0.0
        floor = "-" if not np.isfinite(cell.floor.iloc[0]) else f"{cell.floor.iloc[0]:g}"
        level = "-" if noise is None or (isinstance(noise, float) and math.isnan(noise)) else f"{noise:g}"
        told = " ".join(warning_kinds(w) for w in cell.warning)
        lines.append(f"| {problem} | {n} | {level} | {relevant} | {irrelevant} | {exact}/{len(cell)} "
                     f"| {cell.error.mean():.3f} ± {sd:.3f} | {floor} | {cell.seconds.mean():.0f} | {told} |")
    texts = sorted({t for w in frame.warning if isinstance(w, str) and w for t in w.split(" | ")})
    if texts:
        lines += ["", "Warnings (one example per kind, and per size for `rows`):", ""]
        seen = set()
        for t in texts:
            key = (warning_kinds(t), t.split("rows")[0] if "N=" in t else "")
            if key not in seen:
                seen.add(key)
                lines.append(f"* {t}")
    if any(r.get("problem", "").startswith("paper004") for r in rows):
        lines += ["", "The check of the pruned groups, per paper-004 run:", "",
                  check_table([r for r in rows if r["problem"].startswith("paper004")])]
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true", help="more sizes and noise levels, longer runs")
    group.add_argument("--smoke", action="store_true", help="a tiny run (seconds): checks the script")
    parser.add_argument("--out", default="out/robustness_sparse")
    parser.add_argument("--workers", type=int, default=1, help="processes for the independent runs")
    parser.add_argument("--only", choices=("all", "paper001", "paper004", "regression", "classification"),
                        default="all")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    _threads()
    size = SMOKE if args.smoke else FULL if args.full else DEFAULT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.jsonl").unlink(missing_ok=True)
    selected = [(f, a) for f, a in jobs(size) if wanted(args.only, f, a)]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(fn, *a) for fn, a in selected]
        rows = []
        for i, future in enumerate(futures):
            rows.append(future.result())
            r = rows[-1]
            with open(out / "runs.jsonl", "a") as f:  # each finished run on disk before the next is awaited
                f.write(json.dumps(r) + "\n")
            print(f"[{i + 1}/{len(futures)}] {r['problem']} N={r['n_train']} noise={r['noise']} seed={r['seed']}: "
                  f"relevant {r['relevant_kept']}/{r['relevant']}, irrelevant {r['irrelevant_kept']}, "
                  f"error {r['error']:.3f}, {r['seconds']:.0f} s", flush=True)
    print(table(rows, out))
    timing = {"workers": args.workers, "cpu_count": os.cpu_count(), "total_s": time.perf_counter() - start}
    (out / "timing.json").write_text(json.dumps(timing, indent=2))
    print(f"wrote {out}/ in {timing['total_s']:.0f} s")


if __name__ == "__main__":
    main()
