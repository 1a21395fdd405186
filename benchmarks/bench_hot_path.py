"""The leapfrog hot path of this checkout against another commit, measured in one run.

A change that moves code around must not slow the sampler down. This script
checks out ``--against REV`` (default ``HEAD~1``) into a temporary git worktree
and times, in alternating subprocesses (one tree, then the other, ``--rounds``
times, so both see the same machine load), on the cosine MLP with 8 chains and
one intra-op thread:

* ``value_and_grad``: one batched potential value and gradient;
* ``leapfrog_step``: one leapfrog step of the potential;
* ``fixed_hmc transition``: one transition of the fixed-step HMC kernel
  (20 leapfrog steps, the Metropolis test, statistics), per leapfrog step;
* ``chees run``: ``run(engine="chees")`` with 8 chains, 100 + 100 iterations,
  wall time per leapfrog step (the kernel's overhead included);
* ``mclmc run``, ``mams run``: the same for the microcanonical kernels, per integrator step (left out
  where a tree has no such engine);
* ``diabetes value_and_grad``, ``breast_cancer value_and_grad``: one eager value and gradient of the
  suite's regression and classification networks (``zoo.diabetes_mlp``, 10-32-1 tanh, and
  ``zoo.breast_cancer_mlp``, on ``load(name, seed=0)``'s training rows), 8 chains at a prior draw;
* ``digits value_and_grad, C chains``: one eager value and gradient of the digits MLP (64-128-128-10,
  relu, the 1437 training rows of ``load("digits", seed=0)``) for 4 and 8 chains, at a prior draw
  scaled by 0.1 (logits of the size a fitted network's have; at the prior draw itself the softmax's
  exponentials underflow into subnormal floats, which measures the processor's slow path instead).

``--compiled`` times the compiled path instead: one call of the ``torch.compile`` graph of one
leapfrog step (``BNNPotential(compile=True).leapfrog_step``, which every version since the compile
commit has), with 8, 16 and 32 chains, on one and on two intra-op threads, after the graph's compile
(not timed); and ``run(engine="chees", compile=True)`` as above (8 chains, one thread), wall time per
leapfrog step of a second run in the process (the first compiles; the second's compile seconds, if
any, are left out).

Reports the median over rounds of each tree and their ratio. ``--device cuda``: the data, and so
every tree's computation, on the GPU. Usage:
``python benchmarks/bench_hot_path.py [--against REV] [--rounds 5] [--device cpu] [--compiled] [--name NAME]``;
writes ``benchmarks/results/hot_path.{json,md}`` (``--compiled``: ``hot_path_compiled.{json,md}``; ``--name``:
``NAME.{json,md}``, for a measurement that other pages' numbers must not replace).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_device_argument, against_report, alternate_against, machine,  # noqa: E402
                    probe_json, write_results)

ROOT = Path(__file__).resolve().parents[1]

# Runs inside one tree: only API that every version since the compile commit has (the device
# reaches the code through the data's tensors, never a keyword).
PROBE = r"""
import dataclasses, json, sys, time
import numpy as np, pyro, torch
torch.set_num_threads(1)
from bnnzoo.data import load
from bnnzoo.inference import FixedStepHMC, run
from bnnzoo.inference.potential import BNNPotential, initial_theta
from bnnzoo.models import BNN, zoo

DEVICE = torch.device(sys.argv[1])

def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()

def per_call(fn, n):
    fn(); fn()
    best = []
    for _ in range(5):
        sync()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best.append((time.perf_counter() - start) / n)
    return float(np.median(best))

data = load("cosine", seed=0)
data = dataclasses.replace(data, **{f: getattr(data, f).to(DEVICE) for f in ("x_train", "y_train", "x_test", "y_test")})
model = BNN(zoo.cosine_mlp())
potential = BNNPotential(model, data.x_train, data.y_train)
pyro.set_rng_seed(0)
theta = initial_theta(potential, 8)
value, grad = potential.value_and_grad(theta)
p, inv_mass = torch.randn_like(theta), torch.ones(theta.shape[-1], device=theta.device)
out = {"value_and_grad": per_call(lambda: potential.value_and_grad(theta), 200),
       "leapfrog_step": per_call(lambda: potential.leapfrog_step(theta, p, grad, 1e-3, inv_mass), 200)}
kernel = FixedStepHMC(potential=potential, step_size=1e-3, num_steps=20, num_chains=8)
kernel.setup(0)
params = kernel.unflatten(theta)
out["fixed_hmc transition"] = per_call(lambda: kernel.sample(params), 10) / 20
start = time.perf_counter()
r = run(model, data, engine="chees", num_samples=100, warmup_steps=100, num_chains=8, seed=0)
wall = time.perf_counter() - start
warm = getattr(r, "warmup_sample_stats", None) or r.extras["warmup_sample_stats"]  # older Runs: extras
steps = float(r.sample_stats["n_steps"][0].sum()) + float(warm["n_steps"][0].sum())
out["chees run"] = wall / steps
out["chees leapfrog steps"] = steps
for engine in ("mclmc", "mams"):  # the microcanonical kernels, where a version has them
    try:
        start = time.perf_counter()
        r = run(model, data, engine=engine, num_samples=100, warmup_steps=100, num_chains=8, seed=0)
    except (KeyError, ValueError):
        continue
    wall = time.perf_counter() - start
    warm = getattr(r, "warmup_sample_stats", None) or r.extras["warmup_sample_stats"]
    steps = float(r.sample_stats["n_steps"][0].sum()) + float(warm["n_steps"][0].sum())
    out[f"{engine} run"] = wall / steps
for name in ("diabetes", "breast_cancer"):  # the suite's regression and classification networks
    tabular = load(name, seed=0)
    tabular_potential = BNNPotential(BNN(getattr(zoo, name + "_mlp")()), tabular.x_train.to(DEVICE),
                                     tabular.y_train.to(DEVICE))
    pyro.set_rng_seed(0)
    tabular_theta = initial_theta(tabular_potential, 8)
    out[f"{name} value_and_grad"] = per_call(lambda: tabular_potential.value_and_grad(tabular_theta), 200)
digits = load("digits", seed=0)
digits_potential = BNNPotential(BNN(zoo.digits_mlp()), digits.x_train.to(DEVICE), digits.y_train.to(DEVICE))
for chains in (4, 8):
    pyro.set_rng_seed(0)
    digits_theta = initial_theta(digits_potential, chains) * 0.1
    out[f"digits value_and_grad, {chains} chains"] = per_call(lambda: digits_potential.value_and_grad(digits_theta), 10)
print(json.dumps(out))
"""

METRICS = ("value_and_grad", "leapfrog_step", "fixed_hmc transition", "chees run", "mclmc run", "mams run",
           "diabetes value_and_grad", "breast_cancer value_and_grad",
           "digits value_and_grad, 4 chains", "digits value_and_grad, 8 chains")

# The compiled step: each tree's own inductor cache (a graph of the other tree's code is not reused).
PROBE_COMPILED = r"""
import dataclasses, json, sys, time
import numpy as np, pyro, torch
from bnnzoo.data import load
from bnnzoo.inference import run
from bnnzoo.inference.potential import BNNPotential, initial_theta
from bnnzoo.models import BNN, zoo

DEVICE = torch.device(sys.argv[1])
data = load("cosine", seed=0)
potential = BNNPotential(BNN(zoo.cosine_mlp()), data.x_train.to(DEVICE), data.y_train.to(DEVICE), compile=True)
out = {}
for threads in (1, 2):
    torch.set_num_threads(threads)
    for chains in (8, 16, 32):
        pyro.set_rng_seed(0)
        theta = initial_theta(potential, chains)
        _, grad = potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0)
        p, inv_mass = torch.randn_like(theta), torch.ones(theta.shape[-1], device=theta.device)
        step = lambda: potential.leapfrog_step(theta, p, grad, 1e-3, inv_mass)
        step()  # compiles
        best = []
        for _ in range(5):
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(200):
                step()
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
            best.append((time.perf_counter() - start) / 200)
        out[f"compiled step, {chains} chains, {threads} thread{'s' if threads > 1 else ''}"] = float(np.median(best))
torch.set_num_threads(1)
data = dataclasses.replace(data, **{f: getattr(data, f).to(DEVICE) for f in ("x_train", "y_train", "x_test", "y_test")})
model = BNN(zoo.cosine_mlp())
for _ in range(2):  # the first run compiles its graphs, the second is timed
    start = time.perf_counter()
    r = run(model, data, engine="chees", num_samples=100, warmup_steps=100, num_chains=8, seed=0, compile=True)
    wall = time.perf_counter() - start - (r.compile_seconds or 0.0)
warm = getattr(r, "warmup_sample_stats", None) or r.extras["warmup_sample_stats"]  # older Runs: extras
steps = float(r.sample_stats["n_steps"][0].sum()) + float(warm["n_steps"][0].sum())
out["chees run, compile=True"] = wall / steps
out["chees run, compile=True, compile seconds of the timed run"] = float(r.compile_seconds or 0.0)
print(json.dumps(out))
"""

COMPILED_METRICS = tuple(f"compiled step, {c} chains, {t} thread{'s' if t > 1 else ''}"
                         for t in (1, 2) for c in (8, 16, 32)) + ("chees run, compile=True",)


def probe(tree: Path, device: torch.device, compiled: bool = False) -> dict:
    env = {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    if compiled:
        cache = Path(tempfile.gettempdir()) / f"bnnzoo-hot-path-{tree.name}"
        env.update(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), BNNZOO_CACHE=str(cache))
    return probe_json([sys.executable, "-c", PROBE_COMPILED if compiled else PROBE, str(device)], tree, env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating measurements of each tree")
    parser.add_argument("--compiled", action="store_true",
                        help="time the compiled leapfrog step (8/16/32 chains, 1 and 2 threads) and a compiled "
                             "ChEES run instead")
    parser.add_argument("--name", default=None,
                        help="the results' file name in benchmarks/results (default hot_path or hot_path_compiled)")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # what the probes use; machine() reports it
    load_start = os.getloadavg()
    rev, runs = alternate_against(ROOT, args.against, args.rounds,
                                  lambda tree: probe(tree, args.device, args.compiled))
    metrics = [m for m in (COMPILED_METRICS if args.compiled else METRICS)  # those both trees measured
               if all(m in r for tree in runs.values() for r in tree)]
    rows, table, load = against_report(runs, metrics, rev, "us", args.rounds, load_start)
    payload = {"machine": machine(args.device), "against": rev, "rounds": args.rounds, "runs": runs, "rows": rows,
               "load_average": load,
               "settings": {"threads": "1 and 2" if args.compiled else 1,
                            "chains": [8, 16, 32] if args.compiled else 8,
                            "model": "cosine_mlp" if args.compiled else ("cosine_mlp; diabetes_mlp and breast_cancer_mlp "
                                                                     "(value_and_grad); digits_mlp (4 and 8 chains)")}}
    write_results(args.name or ("hot_path_compiled" if args.compiled else "hot_path"), payload, table)
    print(table)


if __name__ == "__main__":
    main()
