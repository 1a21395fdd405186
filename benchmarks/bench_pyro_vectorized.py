"""Plain Pyro models: the potential of C chains in one trace against the per-chain loop.

:class:`~bnnzoo.inference.potential.PyroPotential` evaluates ``[C, D]`` chains in one trace of a
Pyro model (a chain plate outside the model's plates, else ``torch.func.vmap``) where the model
allows it, and one trace per chain otherwise. This script measures, one torch thread, float32:

* ``potential``: one value-and-gradient call for C = 8 chains: batched and replayed from its traced
  graph (the default, after :data:`~bnnzoo.inference.traced_graphs.TRACE_AFTER` calls), batched
  without the graph (``trace=False``) and the per-chain loop (``vectorize=False``), in turn within
  each of ``--rounds`` rounds (median per call of :func:`common.time_call`), on eight schools (non-centred, D = 10), and a Bayesian logistic
  regression on scikit-learn's breast-cancer data (569 rows, 30 standardised features, D = 31)
  written twice: with Pyro's broadcasting (``(x * w).sum(-1)``: the chain plate) and with
  ``x @ w`` (one chain's shapes: vmap).
* ``sampling`` (unless ``--skip-sampling``): eight schools and the logistic regression (broadcasting;
  NumPyro's twin writes ``x @ w``) end to end, ``--seeds`` seeds interleaved: bnnzoo's default engine (ChEES, 8 vectorized chains x ``--draws / 8`` after
  ``--warmup``, under ``bnnzoo.inference.MCMC``) against NumPyro's NUTS (its defaults, 2 chains x
  ``--draws / 2`` after ``--warmup``, run in turn, its JIT compile inside the timed run: the
  ``bench`` extra), and the same ChEES without the traced graph (``trace=False``, its draws the
  same). ESS is the smallest bulk ESS of lp and of every latent coordinate (ArviZ);
  ESS/s counts only runs that pass the gate (R-hat <= 1.1 and ESS >= 100). ``--with-loop`` adds
  ChEES on the per-chain loop (one seed: it is slow).

The load average before and after each part is recorded. Writes
``benchmarks/results/pyro_vectorized.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, markdown_table, time_call, write_results  # noqa: E402
import numpyro_models as npm  # noqa: E402
from pyro_models import (eight_schools, logistic_broadcasting, logistic_matmul,  # noqa: E402
                         schools_data)

from bnnzoo.inference import MCMC, ChEESHMC  # noqa: E402
from bnnzoo.inference.potential import PyroPotential, initial_theta  # noqa: E402
from bnnzoo.inference.traced_graphs import TRACE_AFTER  # noqa: E402

MAX_RHAT, MIN_ESS = 1.1, 100
def breast_cancer():
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


def load() -> dict:
    return {"load_1min": os.getloadavg()[0]}


# ------------------------------------------------------------------ the potential
def measure_potential(rounds: int, chains: int = 8) -> list[dict]:
    rows = []
    for name, model, args in (("eight schools", eight_schools, schools_data()),
                              ("logistic regression, broadcasting", logistic_broadcasting, breast_cancer()),
                              ("logistic regression, x @ w", logistic_matmul, breast_cancer())):
        pots = {"traced": PyroPotential(model, args), "batched": PyroPotential(model, args, trace=False),
                "loop": PyroPotential(model, args, vectorize=False)}
        theta = initial_theta(pots["traced"], chains, generator=torch.Generator().manual_seed(0))
        for _ in range(TRACE_AFTER):  # the traced potential replays its graph from here on
            pots["traced"].value_and_grad(theta)
        times = {which: [] for which in pots}
        before = load()
        for i in range(rounds):
            for which in list(pots) if i % 2 == 0 else list(pots)[::-1]:
                pot = pots[which]
                times[which].append(time_call(lambda: pot.value_and_grad(theta), min_time=0.5, repeats=3))
        traced_s, batched_s, loop_s = (statistics.median(times[w]) for w in ("traced", "batched", "loop"))
        rows.append({"model": name, "D": pots["traced"].dim, "chains": chains, "batching": pots["traced"].chain_batching,
                     "traced": pots["traced"].traced.traced, "loop_ms": 1e3 * loop_s, "batched_ms": 1e3 * batched_s,
                     "traced_ms": 1e3 * traced_s, "speedup": loop_s / batched_s, "traced_speedup": batched_s / traced_s,
                     **{f"{k}_before": v for k, v in before.items()}, **{f"{k}_after": v for k, v in load().items()}})
        print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------ sampling
def score(name: str, seed: int, wall: float, lp: np.ndarray, latents: list[np.ndarray], extra: dict) -> dict:
    """ESS and R-hat of lp ``[chain, draw]`` and of every latent coordinate ``[chain, draw]``."""
    series = [lp] + latents
    ess = min(float(az.ess(s)) for s in series)
    rhat = max(float(az.rhat(s)) for s in series)
    converged = rhat <= MAX_RHAT and ess >= MIN_ESS
    return {"engine": name, "seed": seed, "chains": lp.shape[0], "draws": lp.size, "wall_s": wall, "ess_min": ess,
            "rhat_max": rhat, "converged": converged, "ess_per_s": ess / wall if converged else 0.0, **extra}


def coordinates(samples: dict) -> list[np.ndarray]:
    """Every latent coordinate ``[chain, draw]`` of grouped samples ``{site: [chain, draw, ...]}``."""
    out = []
    for name in sorted(samples):
        v = np.asarray(samples[name], dtype=np.float64)
        out += list(v.reshape(v.shape[:2] + (-1,)).transpose(2, 0, 1))
    return out


#: the models run end to end: (Pyro model, its data, its NumPyro twin's name)
SAMPLED = {"eight schools": (eight_schools, schools_data, "schools"),
           "logistic regression": (logistic_broadcasting, breast_cancer, "logistic")}


def bnnzoo_chees(model_name: str, seed: int, draws: int, warmup: int, vectorize: bool = True,
                 trace: bool = True, **options) -> dict:
    model, data, _ = SAMPLED[model_name]
    args = data()
    pyro.set_rng_seed(seed)
    start = time.perf_counter()
    if vectorize and trace:
        kernel = ChEESHMC(model, **options)
    else:
        kernel = ChEESHMC(potential=PyroPotential(model, args, vectorize=vectorize, trace=trace), **options)
    mcmc = MCMC(kernel, num_samples=draws // 8, warmup_steps=warmup, num_chains=8, chain_method="vectorized",
                disable_progbar=True)
    mcmc.run(*args)
    wall = time.perf_counter() - start
    stats = mcmc.sample_stats()
    samples = {k: v.numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    label = "bnnzoo chees, 8 chains" + ("" if vectorize else " (per-chain loop)") + ("" if trace else " (untraced)")
    return {"model": model_name, **score(label, seed, wall, np.asarray(stats["lp"]), coordinates(samples),
            {"batching": mcmc.kernel.potential.chain_batching,
             "grads_per_draw": float(np.mean(stats["n_steps"])) if "n_steps" in stats else None, **load()})}


def numpyro_model(name: str):
    import numpyro
    import numpyro.distributions as ndist

    def schools(sigma, y=None):
        mu = numpyro.sample("mu", ndist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", ndist.HalfCauchy(5.0))
        with numpyro.plate("schools", sigma.shape[0]):
            theta_tilde = numpyro.sample("theta_tilde", ndist.Normal(0.0, 1.0))
            numpyro.sample("obs", ndist.Normal(mu + tau * theta_tilde, sigma), obs=y)

    def logistic(x, y=None):
        w = numpyro.sample("w", ndist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        b = numpyro.sample("b", ndist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("obs", ndist.Bernoulli(logits=x @ w + b), obs=y)

    return {"schools": schools, "logistic": logistic}[name]


def numpyro_nuts(model_name: str, seed: int, draws: int, warmup: int) -> dict:
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC as NumPyroMCMC, NUTS

    _, data, twin = SAMPLED[model_name]
    args = [jnp.asarray(a.numpy()) for a in data()]
    start = time.perf_counter()
    mcmc = NumPyroMCMC(NUTS(numpyro_model(twin)), num_warmup=warmup, num_samples=draws // 2, num_chains=2,
                       chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=("potential_energy", "num_steps"))
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    wall = time.perf_counter() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    # NumPyro's potential is the unconstrained one, as bnnzoo's lp is (both include the log |det J|)
    lp = -np.asarray(extra["potential_energy"], dtype=np.float64)
    samples = {k: np.asarray(v) for k, v in samples.items()}
    return {"model": model_name, **score("numpyro NUTS, 2 chains", seed, wall, lp, coordinates(samples),
            {"batching": None, "grads_per_draw": float(np.mean(extra["num_steps"])), **load()})}


def measure_sampling(models: list[str], seeds: int, draws: int, warmup: int, with_loop: bool) -> list[dict]:
    rows = []
    for name in models:
        plan = [lambda s: bnnzoo_chees(name, s, draws, warmup),
                lambda s: bnnzoo_chees(name, s, draws, warmup, trace=False)]
        if npm.AVAILABLE:
            plan.append(lambda s: numpyro_nuts(name, s, draws, warmup))
        for seed in range(seeds):
            for run_one in plan if seed % 2 == 0 else plan[::-1]:  # interleaved: both see the same load
                rows.append(run_one(seed))
                print({k: rows[-1][k] for k in ("model", "engine", "seed", "wall_s", "ess_min", "rhat_max",
                                                "ess_per_s")}, flush=True)
        if with_loop:
            rows.append(bnnzoo_chees(name, 0, draws, warmup, vectorize=False))
            print(rows[-1], flush=True)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        out += _summarise_model(model, [r for r in rows if r["model"] == model])
    return out


def _summarise_model(model: str, rows: list[dict]) -> list[dict]:
    out = []
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        out.append({"model": model, "engine": engine, "seeds": len(mine),
                    "converged": sum(r["converged"] for r in mine),
                    "wall_s": statistics.median(r["wall_s"] for r in mine),
                    "ess_min": statistics.median(r["ess_min"] for r in mine),
                    "rhat_max": max(r["rhat_max"] for r in mine),
                    "ess_per_s": statistics.median(r["ess_per_s"] for r in mine),
                    "grads_per_draw": statistics.median(r["grads_per_draw"] for r in mine)
                    if all(r["grads_per_draw"] is not None for r in mine) else None})
    reference = next((r["ess_per_s"] for r in out if r["engine"].startswith("numpyro")), None)
    for r in out:
        r["vs_numpyro"] = r["ess_per_s"] / reference if reference else None
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=1000, help="draws in total over the chains")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--skip-sampling", action="store_true")
    parser.add_argument("--models", nargs="+", default=list(SAMPLED), choices=list(SAMPLED),
                        help="the models run end to end")
    parser.add_argument("--with-loop", action="store_true", help="also ChEES on the per-chain loop (one seed)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    payload = {"machine": machine(), "args": vars(args), "potential": measure_potential(args.rounds)}
    table = ("Value and gradient of a plain Pyro model's potential for 8 chains, float32, one thread: one "
             "batched trace against one trace per chain (speedup), and the batched call replayed from its traced "
             "graph against the batched trace (traced_speedup; medians of interleaved rounds).\n\n"
             + markdown_table(payload["potential"], ["model", "D", "chains", "batching", "traced", "loop_ms",
                                                     "batched_ms", "traced_ms", "speedup", "traced_speedup",
                                                     "load_1min_before", "load_1min_after"]))
    write_results("pyro_vectorized", payload, table)  # the potential's part is on disk before sampling starts
    if not args.skip_sampling:
        payload["sampling"] = measure_sampling(args.models, args.seeds, args.draws, args.warmup, args.with_loop)
        payload["sampling_summary"] = summarise(payload["sampling"])
        table += (f"\n\n{', '.join(args.models).capitalize()}, end to end: bnnzoo's default engine (ChEES, 8 vectorized "
                  f"chains x {args.draws // 8}) against NumPyro's NUTS (2 chains x {args.draws // 2}, JIT "
                  f"included), {args.warmup} warm-up iterations each, and the same ChEES without the traced graph "
                  "(untraced: the same draws), seeds interleaved; medians over seeds; "
                  "ESS: the smallest bulk ESS of lp and every latent coordinate; ESS/s 0 unless R-hat <= 1.1 "
                  "and ESS >= 100.\n\n"
                  + markdown_table(payload["sampling_summary"], ["model", "engine", "seeds", "converged", "wall_s",
                                                                 "ess_min",
                                                                 "rhat_max", "ess_per_s", "vs_numpyro",
                                                                 "grads_per_draw"])
                  + "\n\nEach run (1-minute load average after it):\n\n"
                  + markdown_table(payload["sampling"], ["model", "engine", "seed", "wall_s", "ess_min", "rhat_max",
                                                         "converged", "ess_per_s", "batching", "load_1min"]))
        write_results("pyro_vectorized", payload, table)
    print(table)


if __name__ == "__main__":
    main()
