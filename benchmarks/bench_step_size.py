"""Step-size adaptation: target vs achieved acceptance after warm-up (issue #16).

For ChEES-HMC and proximal HMC on small networks, 8 vectorized chains, several seeds: the
target acceptance, the statistic the step size is steered by, after warm-up (the kernel's
warm-up statistic (``kernel.adaptation.statistic``) of each draw's acceptance probabilities, averaged over draws:
``achieved``; the acceptance statistic of ``bnnzoo.inference.adaptation``: the fraction of
chains kept times their harmonic-mean acceptance), the plain mean
acceptance probability (over chains and draws: ``mean``) and its Monte Carlo standard error
(batch means of the chain-averaged acceptance), the final step size, leapfrog steps per
transition and divergences; medians over seeds per model and kernel.

    python benchmarks/bench_step_size.py                 # cosine MLP + demo network, 3 seeds
    python benchmarks/bench_step_size.py --digits        # also the digits MLP (short runs)
    python benchmarks/bench_step_size.py --quick         # a smoke run
    python benchmarks/bench_step_size.py --models cosine_mlp --kernels proximal_hmc --gamma 0.05 --name x

Writes ``results/step_size.json`` and ``results/step_size.md`` (``--name`` to change).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyro
import torch
from pyro.infer import MCMC

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference import ChEESHMC, ProximalHMC  # noqa: E402
from bnnzoo.inference.adaptation import WarmupStep  # noqa: E402
from bnnzoo.models import BNN, Laplace, zoo  # noqa: E402
from common import add_device_argument, machine, markdown_table, write_results  # noqa: E402

KERNELS = {"chees": ChEESHMC, "proximal_hmc": ProximalHMC}


def models(digits: bool) -> dict:
    """name -> (spec, data set name): the cosine MLP of the zoo, the demo network
    (``bnnzoo demo``: 1-20-1 tanh, Laplace(1) prior, noise 0.1) and optionally the digits MLP."""
    out = {"cosine_mlp": (zoo.cosine_mlp(), "cosine"),
           "demo": (zoo.cosine_mlp(hidden=20, prior=Laplace(1.0), noise=0.1), "cosine")}
    if digits:
        out["digits_mlp"] = (zoo.digits_mlp(), "digits")
    return out


def batch_means_se(per_draw: np.ndarray, batches: int = 10) -> float:
    """Standard error of the mean of a per-draw series by batch means."""
    n = len(per_draw) // batches * batches
    if n < batches * 2:
        return float("nan")
    means = per_draw[:n].reshape(batches, -1).mean(1)
    return float(means.std(ddof=1) / np.sqrt(batches))


def run_one(spec, data: str, kernel: str, seed: int, warmup: int, samples: int, chains: int,
            device="cpu", **options) -> dict:
    ds = load(data, seed=0)
    pyro.set_rng_seed(seed)
    k = KERNELS[kernel](BNN(spec), num_chains=chains, device=device, **options)
    start = time.perf_counter()
    MCMC(k, num_samples=samples, warmup_steps=warmup, disable_progbar=True).run(ds.x_train, ds.y_train)
    seconds = time.perf_counter() - start
    stats = k.diagnostics()["sample_stats"]
    accept = np.asarray(stats["acceptance_rate"], dtype=float)  # [draws, chains]
    diverging = np.asarray(stats["diverging"], dtype=bool)
    per_draw = accept.mean(1)
    finite = np.isfinite(np.asarray(stats["energy_error"], dtype=float))
    statistic = k.adaptation.statistic
    harmonic = float(np.mean([statistic(WarmupStep(None, None, torch.as_tensor(a), torch.as_tensor(d),
                                                   torch.as_tensor(f)))[0]
                              for a, d, f in zip(accept, diverging, finite)]))
    return {"target": float(k.target_accept), "gamma": k.options.dual_averaging_gamma, "achieved": harmonic,
            "mean": float(accept.mean()),
            "se": batch_means_se(per_draw), "gap": float(harmonic - k.target_accept),
            "step_size": float(k.step_size), "n_steps": float(np.mean(stats["n_steps"])),
            "divergences": int(np.asarray(stats["diverging"]).sum()), "seconds": seconds}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--digits", action="store_true", help="also the digits MLP (--digits-steps warm-up and draws)")
    ap.add_argument("--digits-steps", type=int, default=150)
    ap.add_argument("--kernels", default="chees,proximal_hmc")
    ap.add_argument("--models", default=None, help="comma-separated subset of cosine_mlp,demo,digits_mlp")
    ap.add_argument("--target-accept", type=float, default=None, help="the kernels' target_accept (default: theirs)")
    ap.add_argument("--gamma", type=float, default=None, help="their dual_averaging_gamma (default: theirs)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--name", default="step_size")
    add_device_argument(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        args.seeds, args.warmup, args.samples = 1, 60, 40

    options = {k: v for k, v in (("target_accept", args.target_accept), ("dual_averaging_gamma", args.gamma))
               if v is not None}
    runs, rows = [], []
    chosen = models(args.digits or (args.models is not None and "digits_mlp" in args.models))
    if args.models is not None:
        chosen = {k: v for k, v in chosen.items() if k in args.models.split(",")}
    for model, (spec, data) in chosen.items():
        steps = (args.digits_steps, args.digits_steps) if model == "digits_mlp" else (args.warmup, args.samples)
        for kernel in args.kernels.split(","):
            per_seed = []
            for seed in range(args.seeds):
                r = {"model": model, "kernel": kernel, "seed": seed, "warmup": steps[0], "samples": steps[1],
                     "chains": args.chains,
                     **run_one(spec, data, kernel, seed, *steps, args.chains, args.device, **options)}
                print(f"{model:10s} {kernel:12s} seed {seed}: target {r['target']:.3f} achieved "
                      f"{r['achieved']:.3f}, mean {r['mean']:.3f} (se {r['se']:.3f}) step {r['step_size']:.3g} "
                      f"steps {r['n_steps']:.0f} div {r['divergences']} {r['seconds']:.0f}s", flush=True)
                runs.append(r)
                per_seed.append(r)
            med = {k: statistics.median(r[k] for r in per_seed)
                   for k in ("achieved", "mean", "gap", "se", "step_size", "n_steps", "seconds")}
            rows.append({"model": model, "kernel": kernel, "warm-up + draws": f"{steps[0]} + {steps[1]}",
                         "target": per_seed[0]["target"], "gamma": per_seed[0]["gamma"],
                         "achieved (per seed)": " / ".join(f"{r['achieved']:.3f}" for r in per_seed),
                         "median achieved": med["achieved"], "median gap": med["gap"],
                         "median mean acceptance": med["mean"], "its se": med["se"],
                         "median step size": med["step_size"], "median leapfrog steps": med["n_steps"],
                         "divergences": sum(r["divergences"] for r in per_seed),
                         "median seconds": med["seconds"]})
    columns = list(rows[0])
    table = markdown_table(rows, columns)
    print(table)
    payload = {"machine": machine(args.device), "chains": args.chains, "seeds": args.seeds, "runs": runs, "summary": rows}
    js, md = write_results(args.name, payload, table)
    print(f"wrote {js} and {md}")


if __name__ == "__main__":
    main()
