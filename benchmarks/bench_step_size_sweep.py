"""ChEES's step-size loop on the cosine MLP (or ``--model digits``): target x dual averaging's gamma x chains.

For each (target, gamma, chains) and seed: one ChEES run through ``bnnzoo.inference.run``
(``compile=True``, one thread, ``--warmup`` warm-up steps, ``--draws`` draws in total as in
``bench_sampling.py``), and after warm-up the acceptance statistic the step size was steered
by (``achieved``: the fraction of non-divergent chains times their harmonic-mean acceptance,
averaged over draws), the divergent draws, ESS and R-hat of lp and of f(x*) at 20 inputs (as
``bench_sampling.py`` scores them) and, from dual averaging's own trace, the spread (standard
deviation) of log(step size) and the mean statistic over the last 50 warm-up steps. Medians
over seeds per setting. The table behind ``docs/algorithms.md``, "The target and the achieved
acceptance".

    python benchmarks/bench_step_size_sweep.py                       # the documented sweep
    python benchmarks/bench_step_size_sweep.py --targets 0.8 --gammas 0.15 --chains 8 --seeds 3

Writes ``results/step_size_sweep.{json,md}`` after every run (``--name`` to change). Seeds can
be split over processes (``--first-seed 1 --seeds 1 --name part1`` beside ``--first-seed 2 ...``)
and their runs joined into one table afterwards with ``--merge part0 part1 part2 --name all``,
which runs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bnnzoo.diagnostics.predictive import function_draws  # noqa: E402
from bnnzoo.inference import adaptation, run  # noqa: E402
from bnnzoo.inference.kernels import hmc  # noqa: E402
from bench_sampling import Bench, score  # noqa: E402
from common import RESULTS, machine, markdown_table, write_results  # noqa: E402


class TracedDualAveraging(adaptation.DualAveraging):
    """Dual averaging that keeps (statistic fed, log step size after the update)."""

    traces: list[list[tuple[float, float]]] = []

    def restart(self, step_size: float) -> None:
        super().restart(step_size)
        self.trace = []
        TracedDualAveraging.traces.append(self.trace)

    def update(self, accept_prob: float) -> float:
        out = super().update(accept_prob)
        self.trace.append((accept_prob, self._log_step))
        return out


def acceptance_statistic_per_draw(accept: np.ndarray, diverging: np.ndarray) -> np.ndarray:
    """[chains, draws] -> [draws]: :func:`~bnnzoo.inference.adaptation.acceptance_statistic` of each
    draw, the non-divergent chains kept."""
    return np.asarray([adaptation.acceptance_statistic(torch.as_tensor(a), ~torch.as_tensor(d))
                       for a, d in zip(accept.T, diverging.T)])


def one_run(bench: Bench, target: float, gamma: float, chains: int, seed: int, warmup: int, draws: int) -> dict:
    TracedDualAveraging.traces.clear()
    start = time.perf_counter()
    r = run(bench.spec, bench.data, engine="chees", num_samples=draws // chains, warmup_steps=warmup,
            num_chains=chains, seed=seed, compile=True, threads=1, target_accept=target,
            dual_averaging_gamma=gamma)
    wall = time.perf_counter() - start
    stats = r.sample_stats
    row = score("chees", wall, stats["lp"], function_draws(r, bench.x_star, bench.y_star), {})
    accept, diverging = np.asarray(stats["acceptance_rate"], float), np.asarray(stats["diverging"], bool)
    last = np.asarray(TracedDualAveraging.traces[-1][-50:])
    achieved = float(acceptance_statistic_per_draw(accept, diverging).mean())
    row.update(target=target, gamma=gamma, seed=seed, achieved=achieved, gap=achieved - target,
               mean_accept=float(accept.mean()), divergent_draws=int(diverging.sum()),
               n_steps=float(np.mean(stats["n_steps"])),
               log_step_sd_last50=float(last[:, 1].std()), warmup_statistic_last50=float(last[:, 0].mean()))
    return row


def summarise(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["target"], r["gamma"], r["chains"]), []).append(r)
    rows = []
    for (target, gamma, chains), rs in groups.items():
        med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
        rows.append({"target": target, "gamma": gamma, "chains": chains, "seeds": len(rs),
                     "achieved (per seed)": " / ".join(f"{r['achieved']:.2f}" for r in rs),
                     "median achieved": med("achieved"), "median gap": med("gap"),
                     "divergent draws (per seed)": " / ".join(str(r["divergent_draws"]) for r in rs),
                     "failed the gate": sum(not r["converged"] for r in rs),
                     "median min ESS": statistics.median(min(r["ess_lp"], r["ess_f_min"]) for r in rs),
                     "median ESS(lp)": med("ess_lp"), "median ESS(f)": med("ess_f_min"),
                     "max R-hat": max(r["rhat_max"] for r in rs),
                     "sd log step, last 50": med("log_step_sd_last50"),
                     "statistic, last 50": med("warmup_statistic_last50")})
    return rows


def merge(names: list[str], name: str) -> None:
    """One table from the runs of several results files of this script (seeds run apart)."""
    parts = [json.loads((RESULTS / f"{n}.json").read_text()) for n in names]
    runs = [r for part in parts for r in part["runs"]]
    keys = [(r["target"], r["gamma"], r["chains"], r["seed"]) for r in runs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"--merge: the files {names} hold the same (target, gamma, chains, seed) more than once")
    settings = {n: part["settings"] for n, part in zip(names, parts)}
    rows = sorted(summarise(runs), key=lambda x: (x["target"], x["gamma"], x["chains"]))
    payload = {"machine": parts[-1]["machine"], "merged_from": settings, "runs": runs, "summary": rows}
    write_results(name, payload, markdown_table(rows, list(rows[0])))
    print(markdown_table(rows, list(rows[0])))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.651, 0.8])
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.05, 0.15, 0.2])
    ap.add_argument("--chains", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds")
    ap.add_argument("--first-seed", type=int, default=0, help="the seeds are first-seed, first-seed + 1, ...")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--model", default="cosine", choices=["cosine", "digits"], help="bench_sampling.py's networks")
    ap.add_argument("--name", default="step_size_sweep")
    ap.add_argument("--merge", nargs="+", metavar="NAME",
                    help="join the runs of these results files into --name's table; runs nothing")
    args = ap.parse_args(argv)
    if args.first_seed < 0 or args.seeds < 1:
        ap.error(f"--first-seed must be >= 0 and --seeds >= 1, got {args.first_seed} and {args.seeds}")
    if args.merge:
        merge(args.merge, args.name)
        return
    torch.set_num_threads(1)
    hmc.DualAveraging = TracedDualAveraging  # the warm-up kernels build their dual averaging from here
    bench, runs = Bench(args.model), []
    for seed in range(args.first_seed, args.first_seed + args.seeds):  # seeds outermost: every setting has its first seeds early
        for target in args.targets:
            for gamma in args.gammas:
                for chains in args.chains:
                    r = one_run(bench, target, gamma, chains, seed, args.warmup, args.draws)
                    print(f"target {target} gamma {gamma} chains {chains} seed {seed}: achieved {r['achieved']:.3f} "
                          f"div {r['divergent_draws']} ESS {r['ess_lp']:.0f}/{r['ess_f_min']:.0f} "
                          f"R-hat {r['rhat_max']:.3f} {r['wall_s']:.0f}s", flush=True)
                    runs.append(r)
                    rows = sorted(summarise(runs), key=lambda x: (x["target"], x["gamma"], x["chains"]))
                    payload = {"machine": machine(), "settings": vars(args), "runs": runs, "summary": rows}
                    write_results(args.name, payload, markdown_table(rows, list(rows[0])))
    print(markdown_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
