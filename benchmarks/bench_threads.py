"""The thread policy (``threads="auto"``) against fixed thread counts, on a quiet and a loaded machine.

For a small MLP (1-10-1) and the cosine MLP (1-50-1) on the cosine data (100 points),
with 8 chains and (the cosine MLP) 32, and the digits MLP (64-128-128-10, 1000 points)
with 8 chains: one batched value and gradient of the potential (eager), and one
compiled leapfrog step (``compile=True``: what a long run spends its time in once
``compile="auto"`` has compiled) are timed with 1 thread, every core, and the count
``threads="auto"`` picks
(:func:`bnnzoo.inference.threads.choose_threads`), twice: with the machine as it is
("quiet") and while a second process burns one core ("loaded"; started more than
:data:`~bnnzoo.inference.threads.LOAD_TTL` seconds before; auto's count does not follow the
load, so the "loaded" rows show what that costs, and the count that the run's note would
suggest). The settings
alternate inside each round (``--rounds``), medians over rounds are reported,
with each setting's ratio to the best setting of its row ("auto picks": the count auto
chose, or the counts and how many rounds chose each where they differed). Usage:
``python benchmarks/bench_threads.py [--rounds 5] [--device cpu]`` (threads matter on the CPU; on a
GPU the rows time the device with each host thread count); writes
``benchmarks/results/threads.{json,md}``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_device_argument, machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.inference.threads import LOAD_TTL, _cores, choose_threads, work_per_gradient  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _problems():
    """``(name, model, data, chains)`` of each row."""
    cosine = load("cosine", seed=0)
    digits = load("digits", seed=0)
    return [("small MLP", BNN(zoo.cosine_mlp(hidden=10)), cosine, 8),
            ("cosine MLP", BNN(zoo.cosine_mlp()), cosine, 8),
            ("cosine MLP", BNN(zoo.cosine_mlp()), cosine, 32),
            ("digits MLP", BNN(zoo.digits_mlp()), digits, 8)]


def _picks(counts: list[int]) -> str:
    """The counts auto picked over the rounds: ``"2"`` if always 2, else e.g. ``"2 (5x), 1 (2x)"``."""
    tally = Counter(counts).most_common()
    return str(tally[0][0]) if len(tally) == 1 else ", ".join(f"{c} ({n}x)" for c, n in tally)


def measure(rounds: int, device="cpu") -> list[dict]:
    rows = []
    cores = _cores()
    for load_name in ("quiet", "loaded"):
        stop, burner = mp.Event(), None
        if load_name == "loaded":
            burner = mp.Process(target=_burn, args=(stop,), daemon=True)
            burner.start()
            time.sleep(LOAD_TTL + 1.0)  # auto's last reading of the free cores has expired
        for (name, model, data, chains), compiled in itertools.product(_problems(), (False, True)):
            potential = BNNPotential(model, data.x_train, data.y_train, device=device, compile=compiled)
            theta = initial_theta(potential, chains, 1.0)
            if compiled:
                p, inv_mass = torch.randn_like(theta), torch.ones_like(theta[0])
                _, grad = potential.value_and_grad(theta)

                def call():
                    return potential.leapfrog_step(theta, p, grad, 1e-3, inv_mass)
            else:
                def call():
                    return potential.value_and_grad(theta)
            work = work_per_gradient(model, len(data.x_train), chains)
            settings = {"1 thread": 1, f"{cores} threads": cores}
            times = {k: [] for k in list(settings) + ["auto"]}
            auto_counts = []
            for _ in range(rounds):
                auto_counts.append(choose_threads(work))
                for label, count in list(settings.items()) + [("auto", auto_counts[-1])]:
                    torch.set_num_threads(count)
                    times[label].append(time_call(call, min_time=0.3))
            med = {k: statistics.median(v) for k, v in times.items()}
            best = min(med.values())
            row = {"machine": load_name, "model": name, "chains": chains, "call": "compiled leapfrog step" if compiled else "gradient",
                   "work": work, "auto picks": _picks(auto_counts)}
            for label, t in med.items():
                row[f"{label} (ms)"] = 1e3 * t
            row["auto / best"] = med["auto"] / best
            rows.append(row)
        if burner is not None:
            stop.set()
            burner.join()
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    add_device_argument(parser)
    args = parser.parse_args(argv)
    rows = measure(args.rounds, args.device)
    columns = list(rows[0])
    table = markdown_table(rows, columns)
    print(table)
    write_results("threads", {"machine": machine(args.device), "rounds": args.rounds,
                              "rows": rows}, table)


if __name__ == "__main__":
    main()
