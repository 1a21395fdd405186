"""A compiled leapfrog step on the CPU with inductor's Python wrapper and with its C++ wrapper.

Inductor wraps each compiled graph in code that allocates its buffers and calls its kernels and
matrix products one after another: Python by default, C++ with its ``cpp_wrapper`` option, which
bnnzoo's CPU graphs use (``compiled_graphs.CPU_OPTIONS``). This script compiles bnnzoo's four-step
leapfrog graph (``compiled_graphs.GRAPHS["leapfrog_steps"]``, what a kernel's trajectories run on)
both ways in one process, for each model, checks that both give the same numbers bit for bit, and
times one call of each (per leapfrog step), the two called in turn, call by call (the shared
machine's speed drifts from second to second), at one intra-op thread. Models: the cosine MLP (1-50-1 tanh), diabetes and breast cancer (the zoo's networks on
the seed-0 split) and the learned-noise network (bench_learned_noise's 10-32-16-1 tanh with a
learned noise variance), 8 chains (``--chains``). Also reported: the seconds of each first call (the compile; the
Python wrapper's comes first, on an empty cache only if the cache folders are).

Usage: ``python benchmarks/bench_cpp_wrapper.py [--rounds 15] [--pairs 200] [--models ...] [--name NAME]``;
writes ``benchmarks/results/hot_path_cpp_wrapper.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import leapfrog_steps_args, machine, markdown_table, time_call, write_results  # noqa: E402

from bnnzoo.inference.compiled_graphs import CPU_OPTIONS, GRAPHS, UNROLL, _flushing_denormals  # noqa: E402
from bnnzoo.inference.potential import BNNPotential  # noqa: E402
from bnnzoo.models import BNN  # noqa: E402

CHAINS = 8
MODELS = ("cosine", "diabetes", "breast_cancer", "learned_noise")
WRAPPERS = {"python": None, "cpp": CPU_OPTIONS}  # the library's own options for the C++ one


def network(model: str):
    """``(spec, x, y)`` of ``model`` (module docstring)."""
    if model == "learned_noise":
        from bench_learned_noise import problem

        return problem()
    import bench_sampling as bs

    bench = bs.Bench(model)
    return bench.spec, bench.data.x_train, bench.data.y_train


def calls(model: str, chains: int = CHAINS) -> tuple[dict, dict, int]:
    """For ``model`` and ``chains``: the call of the four-step graph with each wrapper, the seconds of
    its first call, and the network's dimension; raises when the two give different numbers."""
    spec, x, y = network(model)
    potential = BNNPotential(BNN(spec), x, y, compile=False)  # the graphs below are compiled here
    args = (potential, *leapfrog_steps_args(potential, chains))
    fns, first, outs = {}, {}, {}
    for name, options in WRAPPERS.items():
        graph = torch.compile(GRAPHS["leapfrog_steps"], dynamic=False, options=options)
        fns[name] = (lambda g: lambda: _flushing_denormals(g, *args))(graph)
        start = time.perf_counter()
        outs[name] = fns[name]()
        first[name] = time.perf_counter() - start
    for a, b in zip(outs["python"], outs["cpp"]):
        if not torch.equal(a, b):
            raise AssertionError(f"{model}: the two wrappers' graphs gave different numbers")
    return fns, first, potential.dim


def interleaved(fns: dict, rounds: int, pairs: int) -> dict[str, list[float]]:
    """Microseconds per leapfrog step of each of the two calls ``fns``, per round: a round calls them
    in turn ``pairs`` times (which goes first alternating from pair to pair), so that both see the
    same machine, whose speed drifts from second to second on a shared host; ``time_call`` warms
    each up first."""
    for fn in fns.values():
        time_call(fn, min_time=0.05, repeats=1)
    names = list(fns)
    out = {name: [] for name in names}
    for _ in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        for i in range(pairs):
            for name in names if i % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                fns[name]()
                spent[name] += time.perf_counter() - start
        for name in names:
            out[name].append(spent[name] / pairs / UNROLL * 1e6)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds, each timing the two wrappers in turn")
    parser.add_argument("--pairs", type=int, default=200, help="calls of each wrapper in a round, in turn")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--chains", type=int, nargs="+", default=[CHAINS], help="chain counts (default 8)")
    parser.add_argument("--name", default="hot_path_cpp_wrapper")
    args = parser.parse_args(argv)
    for name in ("rounds", "pairs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    rows, times = [], {}
    for model in args.models:
        for chains in args.chains:
            fns, first, dim = calls(model, chains)
            case = f"{model}, {chains} chains"
            times[case] = interleaved(fns, args.rounds, args.pairs)
            ratios = [p / c for p, c in zip(times[case]["python"], times[case]["cpp"])]
            rows.append({"model": model, "D": dim, "chains": chains, "python_us": statistics.median(times[case]["python"]),
                         "cpp_us": statistics.median(times[case]["cpp"]), "python_over_cpp": statistics.median(ratios),
                         "ratio_range": f"{min(ratios):.3f}-{max(ratios):.3f}",
                         "first_call_python_s": first["python"], "first_call_cpp_s": first["cpp"]})
            print(rows[-1], flush=True)
    load_end = os.getloadavg()[0]
    table = markdown_table(rows, list(rows[0]))
    table += (f"\n\nFloat32, one intra-op thread: microseconds per leapfrog step of the compiled "
              f"four-step graph ({UNROLL} steps a call, the call's Python and dispatch included), medians of "
              f"{args.rounds} rounds, each calling the two wrappers in turn {args.pairs} times; python_over_cpp: the "
              "median of the per-round ratios (above 1: the C++ wrapper is faster), ratio_range their range. Both graphs gave the same "
              "numbers bit for bit on every model. first_call: the seconds of each graph's first call (its "
              "compile; the Python wrapper's first, so it also pays what both share, such as tracing's imports). "
              f"Machine load (1-minute average): {load_start:.1f} at the start, {load_end:.1f} at the end.")
    write_results(args.name, {"machine": machine(), "settings": vars(args), "times_us": times, "rows": rows,
                              "load": [load_start, load_end]}, table)
    print(table)


if __name__ == "__main__":
    main()
