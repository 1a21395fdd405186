"""A learned noise on the analytic path: the gradient and a short ChEES run, analytic vs autograd.

The network of the learned-noise report: 10-32-16-1 tanh, Laplace(1) priors, a Gaussian
likelihood whose variance is learned (``noise="learned"``, InverseGamma(1, 1)), 442 generated
rows with 10 standardized inputs (898 parameters with the variance). For 4 chains, per call of
``value_and_grad``: the analytic gradient (``BNNPotential``, the default) and autograd
(``analytic=False``), timed alternately; then ``rounds`` short ChEES runs each way (4 chains,
``--warmup`` + ``--draws``), alternating, at one thread, with the same seed (``pyro.set_rng_seed(0)``): seconds and the
largest difference of their draws (the two gradients agree to rounding, so the chains agree
until rounding sends them apart).

Usage: ``python benchmarks/bench_learned_noise.py [--quick]``; writes
``benchmarks/results/learned_noise.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402

import pyro  # noqa: E402
from bnnzoo.inference import MCMC, ChEESHMC  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, BNNSpec, Dense, GaussianLikelihood, Laplace  # noqa: E402

CHAINS = 4


def problem(rows: int = 442, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 10))
    y = np.tanh(x[:, 0] - 0.5 * x[:, 1]) + 0.3 * x[:, 2] * x[:, 3] + 0.3 * rng.standard_normal(rows)
    y = (y - y.mean()) / y.std()
    spec = BNNSpec(input_dim=10, layers=[Dense(32, "tanh"), Dense(16, "tanh"), Dense(1)], prior=Laplace(1.0),
                   likelihood=GaussianLikelihood(noise="learned"))
    return spec, torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 20 + 20 iterations")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.draws, args.rounds = 20, 20, 1
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    spec, x, y = problem()
    model = BNN(spec)
    fast = BNNPotential(model, x, y)
    slow = BNNPotential(model, x, y, analytic=False)
    assert fast.analytic and not slow.analytic
    torch.manual_seed(0)
    theta = initial_theta(fast, CHAINS, 1.0)
    times = {"analytic": [], "autograd": []}
    for i in range(3):
        for name in ("analytic", "autograd") if i % 2 == 0 else ("autograd", "analytic"):
            potential = fast if name == "analytic" else slow
            times[name].append(time_call(lambda: potential.value_and_grad(theta), min_time=0.3, repeats=3))
    gradient = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    runs = {"analytic": [], "autograd": []}
    draws = {}
    for i in range(args.rounds):
        for name in ("analytic", "autograd") if i % 2 == 0 else ("autograd", "analytic"):
            pyro.set_rng_seed(0)
            kernel = ChEESHMC(potential=fast if name == "analytic" else slow)
            mcmc = MCMC(kernel, num_samples=args.draws, warmup_steps=args.warmup, num_chains=CHAINS,
                        chain_method="vectorized", disable_progbar=True)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mcmc.run()
            runs[name].append(time.perf_counter() - start)
            draws[name] = np.concatenate([v.detach().numpy().reshape(-1) for v in mcmc.get_samples().values()])
    run_seconds = {name: statistics.median(t) for name, t in runs.items()}
    rows = [{"path": name, "D": fast.dim, "gradient_us_4_chains": gradient[name],
             "chees_run_s": run_seconds[name]} for name in ("analytic", "autograd")]
    ratio = {"gradient": gradient["autograd"] / gradient["analytic"],
             "run": run_seconds["autograd"] / run_seconds["analytic"]}
    rows.append({"path": "autograd / analytic", "gradient_us_4_chains": ratio["gradient"],
                 "chees_run_s": ratio["run"]})
    table = markdown_table(rows, ["path", "D", "gradient_us_4_chains", "chees_run_s"])
    note = (f"\n\n10-32-16-1 tanh, Laplace(1), learned noise variance, 442 rows; 4 chains; ChEES "
            f"{args.warmup} + {args.draws} iterations, median of {args.rounds} alternating round(s), seed 0, "
            f"one thread, compile=False. Largest |draw difference| between the two runs: "
            f"{float(np.abs(draws['analytic'] - draws['autograd']).max()):.3g}. Machine load (1-minute average) "
            f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after; the two paths alternate, so both see it.")
    payload = {"machine": machine(), "rows": rows, "ratio": ratio, "gradient_us": gradient, "run_seconds": run_seconds,
               "settings": vars(args)}
    write_results("learned_noise", payload, table + note)
    print(table + note)


if __name__ == "__main__":
    main()
