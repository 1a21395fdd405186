"""ESS per second on the cosine MLP (or the digits MLP, ``--model digits``): NumPyro NUTS (when
installed), bnnzoo's many-chain ChEES-HMC with no flags (``compile="auto"``,
``threads="auto"``) for 8, 16 and 32 chains, bnnzoo's microcanonical samplers ``mams`` and
``mclmc`` with their defaults (8 chains; ``--micro-chains``), bnnzoo's batched NUTS with its defaults (8
chains), BlackJAX's ChEES-HMC with as many chains as bnnzoo's and its adjusted MCLMC (MAMS)
with as many as bnnzoo's ``mams`` (when installed; the same algorithms in JAX), and
optionally Pyro NUTS (stock and on bnnzoo's fast potential) and ChEES forced eager or
compiled, or with another warm-up (``--modes``: Stan's windows, or T adapted from the start).

The model is the cosine MLP of paper 003 (1-50-1 tanh, N(0, 1) priors, noise 0.1, 100
points), or with ``--model digits`` the compute-bound digits MLP (64-128-128-10 ReLU, N(0,1)
priors, Categorical likelihood, 1000 training images, 26k parameters; f is then the
probability of the true label of 20 test images). Every engine keeps the same number of
post-warm-up draws in total. Mixing is measured on identifiable quantities only (network
weights are permutation- and sign-symmetric, so their ESS means nothing): the ESS of ``lp``
and of the predictive mean f(x*) at 20 test inputs; the score is the minimum of the two,
divided by wall time. All engines run in one process, one after another, seeds interleaved,
so their ratios are measured under the same conditions.

Beside ESS/s, the machine-independent cost: ``kgrads``, the gradient evaluations of every
chain's transitions, warm-up included, in thousands (each engine's own leapfrog-step count:
bnnzoo's ``n_steps``, NumPyro's ``num_steps``, BlackJAX's ``num_integration_steps``; 2 a step
for the isokinetic McLachlan integrator of ``mams``, ``mclmc`` and BlackJAX's MAMS), and
``ess_per_kgrad``, the same minimum ESS per thousand of them. Wall-clock noise does not move
it, and it separates the sampler's efficiency from how fast each library evaluates a
gradient (batching chains makes bnnzoo's and BlackJAX's cheaper per chain). Not counted, for
any engine: the initial step-size searches (tens of steps) and ChEES's U-turn guess at each
of bnnzoo's two mass updates (at most 2 x 2000 steps of the whole batch). NumPyro's warm-up
steps come from a second, untimed run of its warm-up on the same key (its sampling-phase
step counts are checked equal to the timed run's, so it is the same warm-up).

Compile times count: a compiled run's wall time includes its compiling calls
(also reported alone, ``compile_s``), and the inductor cache starts empty (a
fresh directory) unless ``--warm-cache``, so the first compiled run pays the
full C++ build, as NumPyro's and BlackJAX's first runs pay their XLA compilation.
bnnzoo's record of compile times and speed-ups (``compile="auto"``'s estimates,
``$BNNZOO_CACHE``) starts empty with it, so the decisions do not depend on what
earlier processes on this machine left there.

Usage: ``python benchmarks/bench_sampling.py [--model cosine] [--draws 1000] [--warmup 500]
[--chees-chains 8 16 32] [--micro-chains 8] [--nuts-chains 8] [--chees-warmup 200] [--seeds 3] [--slow-seeds 1]
[--modes default eager compiled stan late_adapt]
[--micro-warmup 1000] [--mclmc-draws 20000] [--skip-numpyro] [--skip-blackjax] [--skip-blackjax-mams]
[--skip-stock] [--skip-fast-nuts] [--device cuda] [--name sampling] [--retable]``; writes
``benchmarks/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import arviz as az
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PROBLEMS, RESULTS, add_device_argument, machine, markdown_table, write_results  # noqa: E402
import numpyro_models as npm  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.diagnostics.nested_rhat import nested_rhat  # noqa: E402
from bnnzoo.diagnostics.predictive import function_draws  # noqa: E402
from bnnzoo.inference import run  # noqa: E402
from bnnzoo.inference.isokinetic import GRADIENTS_PER_STEP  # noqa: E402
from bnnzoo.models import zoo  # noqa: E402

X_STAR = torch.linspace(0.0, 4.0, 20).reshape(-1, 1)


class Bench:
    """The benchmark's network in both libraries, its data and the 20 test points where
    mixing is measured: ``cosine`` (1-50-1 tanh, Gaussian likelihood; f is the
    predictive mean at 20 inputs in [0, 4]), ``digits`` (64-128-128-10 ReLU,
    Categorical likelihood, 1000 training images; f is the probability of the true
    label of the first 20 test images, :func:`~bnnzoo.diagnostics.predictive.function_draws`),
    or one of the posterior benchmark's problems (``diabetes``, ``breast_cancer``, ``wine``:
    its zoo network on the seed-0 split, f at the first 20 test rows); :meth:`of` any other
    network and data."""

    def __init__(self, name: str):
        if name == "cosine":
            self.spec, self.likelihood = zoo.cosine_mlp(hidden=50), "gaussian"
            self.data = load("cosine", seed=0)
            self.x_star, self.y_star = X_STAR, None
        elif name == "digits":
            self.spec, self.likelihood = zoo.digits_mlp(hidden=128), "categorical"
            self.data = load("digits", seed=0, n_train=1000)
            self.x_star, self.y_star = self.data.x_test[:20], self.data.y_test[:20].long()
        else:
            self._set(getattr(zoo, PROBLEMS[name])(), load(name, seed=0))

    @classmethod
    def of(cls, spec, data) -> "Bench":
        """A bench of any MLP ``spec`` on ``data``, f at the first 20 test rows."""
        bench = cls.__new__(cls)
        bench._set(spec, data)
        return bench

    def _set(self, spec, data) -> None:
        self.spec, self.data, self.likelihood = spec, data, spec.likelihood.kind
        self.x_star = data.x_test[:20]
        self.y_star = data.y_test[:20].long() if data.task == "classification" else None

    def numpyro(self):
        """``(model, f)``: the same network in NumPyro and ``f(params) -> [20]`` at the test points."""
        import jax

        widths = [self.spec.input_dim] + [layer.units for layer in self.spec.layers]
        prior, likelihood = self.spec.prior, self.spec.likelihood
        model, forward = npm.mlp_model(widths, self.spec.layers[0].activation, self.likelihood,
                                       noise=getattr(likelihood, "noise", 0.1), prior=prior.kind,
                                       prior_scale=prior.scale, noise_prior=getattr(likelihood, "noise_prior", (1, 1)))
        x_star = npm.as_jax(self.x_star.numpy())
        if self.likelihood == "gaussian":
            return model, lambda params: np.asarray(forward(params, x_star))[:, 0]
        rows, labels = np.arange(len(self.y_star)), self.y_star.numpy()
        if self.likelihood == "bernoulli":
            def f_at(params):
                p = np.asarray(jax.nn.sigmoid(forward(params, x_star)))[:, 0]
                return np.where(labels == 1, p, 1 - p)

            return model, f_at
        return model, lambda params: np.asarray(jax.nn.softmax(forward(params, x_star)))[rows, labels]

    def jax_data(self):
        return npm.as_jax(self.data.x_train.numpy()), npm.as_jax(self.data.y_train.numpy())


#: a run whose R-hat (lp or any f) is above MAX_RHAT, or whose ESS is below MIN_ESS, scores
#: 0 ESS/s however cheap it was: its ESS estimate means nothing. 1.1 (Gelman and Rubin's
#: threshold) rather than 1.01: with 16 chains of 62 draws, about 10 effective draws per
#: chain, split R-hat is about 1 + 1/(2 * 10) = 1.05 even for chains that have converged
MAX_RHAT, MIN_ESS = 1.1, 100.0


#: the bnnzoo ChEES rows of ``--modes``: each one option away from the defaults
MODES = {"default": {}, "eager": {"compile": False}, "compiled": {"compile": True},
         "stan": {"mass_schedule": "stan", "hold_trajectory": False},  # the default warm-up until 2026-12-02
         "late_adapt": {"hold_trajectory": False}}  # the late windows with T adapted from the start


def score(name: str, wall: float, lp: np.ndarray, f: np.ndarray, extra: dict, grads: float | None = None) -> dict:
    """ESS and R-hat of lp ``[chain, draw]`` and of f ``[chain, draw, 20]`` (min ESS, max
    R-hat over the 20 inputs); ESS/s of the smaller ESS, 0 if the run has not converged;
    ``grads``: the run's gradient evaluations, all chains, warm-up included (module docstring),
    and the smaller ESS per thousand of them, 0 if the run has not converged."""
    ess_lp = float(az.ess(lp))
    ess_f = float(min(az.ess(f[..., j]) for j in range(f.shape[-1])))
    rhat = max(float(az.rhat(lp)), *(float(az.rhat(f[..., j])) for j in range(f.shape[-1])))
    converged = rhat <= MAX_RHAT and min(ess_lp, ess_f) >= MIN_ESS
    ess = min(ess_lp, ess_f)
    # nested R-hat (4 superchains), beside the gate, for the many-short-chain rows
    nrhat = float(np.nanmax([nested_rhat(lp), *nested_rhat(f)])) if lp.shape[0] >= 8 else None
    return {"engine": name, "chains": lp.shape[0], "draws": lp.size, "wall_s": wall, "ess_lp": ess_lp,
            "ess_f_min": ess_f, "rhat_max": rhat, "nrhat_max": nrhat, "converged": converged,
            "ess_per_s": ess / wall if converged else 0.0,
            "kgrads": grads / 1000 if grads is not None else None,
            "ess_per_kgrad": (1000 * ess / grads if converged else 0.0) if grads else None, **extra}


def ungated_ess_per_s(row: dict) -> float:
    """min(ESS(lp), ESS(f)) / wall time, whether or not the run passed the convergence gate."""
    return min(row["ess_lp"], row["ess_f_min"]) / row["wall_s"]


def bnnzoo_engine(label, bench, engine, num_chains, draws, warmup, seed, device="cpu", **options):
    start = time.perf_counter()
    r = run(bench.spec, bench.data, engine=engine, num_samples=draws // num_chains, warmup_steps=warmup,
            num_chains=num_chains, seed=seed, device=device, **options)
    wall = time.perf_counter() - start
    f = function_draws(r, bench.x_star, bench.y_star)
    stats = r.sample_stats
    per_step = r.notes.get("gradients_per_step", 1)  # an integration step's gradients (the kernel's note)
    extra = {"mean_accept": float(np.mean(stats["acceptance_rate"])) if "acceptance_rate" in stats else None,
             "grads_per_draw": per_step * float(np.mean(stats["n_steps"])) if "n_steps" in stats else None,
             "compile_s": r.compile_seconds}
    grads = (per_step * float(np.sum(r.warmup_sample_stats["n_steps"]) + np.sum(stats["n_steps"]))
             if "n_steps" in stats else None)
    return score(label, wall, stats["lp"], f, extra, grads)


def numpyro_mcmc(model, num_chains, draws, warmup):
    """NumPyro's NUTS with its defaults, ``draws`` in total over ``num_chains`` chains run in turn."""
    from numpyro.infer import MCMC, NUTS

    return MCMC(NUTS(model), num_warmup=warmup, num_samples=draws // num_chains, num_chains=num_chains,
                chain_method="sequential", progress_bar=False)


def numpyro_warmup_grads(model, x, y, num_chains, draws, warmup, seed, sampled_steps) -> float:
    """The gradient evaluations of NumPyro's warm-up, all chains: its warm-up run again (untimed) on the
    same key with the warm-up's step counts collected, then its sampling, whose step counts must
    equal the timed run's ``sampled_steps`` (else it was not the same warm-up and this is an error)."""
    import jax

    mcmc = numpyro_mcmc(model, num_chains, draws, warmup)
    mcmc.warmup(jax.random.PRNGKey(seed), x, y, extra_fields=("num_steps",), collect_warmup=True)
    warm = np.asarray(mcmc.get_extra_fields()["num_steps"])
    mcmc.run(mcmc.post_warmup_state.rng_key, x, y, extra_fields=("num_steps",))
    again = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    if not np.array_equal(again, sampled_steps):
        raise RuntimeError("NumPyro's untimed warm-up differs from the timed run's: its step counts cannot be used")
    return float(warm.sum())


def numpyro_nuts(bench, num_chains, draws, warmup, seed):
    import jax

    model, f_at = bench.numpyro()
    x, y = bench.jax_data()
    start = time.perf_counter()
    mcmc = numpyro_mcmc(model, num_chains, draws, warmup)
    mcmc.run(jax.random.PRNGKey(seed), x, y, extra_fields=("potential_energy", "num_steps", "accept_prob"))
    samples = mcmc.get_samples(group_by_chain=True)
    wall = time.perf_counter() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    lp = -np.asarray(extra["potential_energy"])
    flat = {k: np.asarray(v).reshape((-1,) + v.shape[2:]) for k, v in samples.items()}
    f = np.stack([f_at({k: v[i] for k, v in flat.items()}) for i in range(lp.size)]).reshape(lp.shape + (-1,))
    steps = np.asarray(extra["num_steps"])
    grads = numpyro_warmup_grads(model, x, y, num_chains, draws, warmup, seed, steps) + float(steps.sum())
    return score("numpyro NUTS", wall, lp, f, {"mean_accept": float(np.mean(extra["accept_prob"])),
                                              "grads_per_draw": float(np.mean(steps))}, grads)


def jax_target(bench, num_chains, seed):
    """What the BlackJAX rows share: the start of their timed span (after the model and data are
    built, before NumPyro's initialisation), the function draws' map ``f_at``, the flat layout
    (``flat``, ``unravel``), the log density on it, initial points uniform in (-1, 1) as bnnzoo's
    ``init_radius=1``, and the warm-up and sampling keys."""
    import jax
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model

    model, f_at = bench.numpyro()
    x, y = bench.jax_data()
    start = time.perf_counter()
    key_init, key_warmup, key_sample = jax.random.split(jax.random.PRNGKey(seed), 3)
    info = initialize_model(key_init, model, model_args=(x, y))
    flat, unravel = ravel_pytree(info.param_info.z)

    def logdensity(q):
        return -info.potential_fn(unravel(q))

    positions = jax.random.uniform(key_init, (num_chains, flat.size), minval=-1.0, maxval=1.0)
    return start, f_at, flat, unravel, logdensity, positions, (key_warmup, key_sample)


def jax_sample(label, one_draw, states, key_sample, per_chain, start, f_at, unravel, size, warm_steps, per_step):
    """The BlackJAX rows' sampling and score: ``per_chain`` draws of ``one_draw`` (vmapped chains:
    position, log density, acceptance, integration steps) scanned from ``states``, the wall time since
    ``start``, the function draws, and ``per_step`` gradients per integration step, warm-up's
    ``warm_steps`` included."""
    import jax

    _, (theta, lp, accept, steps) = jax.lax.scan(one_draw, states, jax.random.split(key_sample, per_chain))
    jax.block_until_ready(theta)
    wall = time.perf_counter() - start
    theta, lp = np.asarray(theta).transpose(1, 0, 2), np.asarray(lp).T  # [chain, draw, ...]
    f = np.stack([f_at(unravel(q)) for q in theta.reshape(-1, size)])
    grads = per_step * float(warm_steps + np.sum(steps))
    return score(label, wall, lp, f.reshape(lp.shape + (-1,)),
                 {"mean_accept": float(np.mean(accept)), "grads_per_draw": per_step * float(np.mean(steps))}, grads)


def blackjax_chees(bench, num_chains, draws, warmup, seed):
    """BlackJAX's ChEES-HMC (the same algorithm in JAX): its ChEES warm-up with a diagonal mass
    matrix, Adam(0.025, b1=0, b2=0.95) on log T as bnnzoo's, then its jittered dynamic HMC for
    ``draws // num_chains`` draws per chain, all chains vmapped; initial points uniform in
    (-1, 1) as bnnzoo's ``init_radius=1``. Wall time includes JAX's compilation."""
    import blackjax
    import jax
    import optax

    start, f_at, flat, unravel, logdensity, positions, (key_warmup, key_sample) = jax_target(bench, num_chains, seed)
    adaptation = blackjax.chees_adaptation(logdensity, num_chains, mass_matrix_estimation="diagonal")
    (states, parameters), warm = adaptation.run(key_warmup, positions, 0.1, optax.adam(0.025, b1=0.0, b2=0.95),
                                                warmup)
    step = blackjax.dynamic_hmc(logdensity, **parameters).step

    def one_draw(states, key):
        states, stats = jax.vmap(step)(jax.random.split(key, num_chains), states)
        return states, (states.position, states.logdensity, stats.acceptance_rate, stats.num_integration_steps)

    # [steps, chains]: one gradient a leapfrog step
    return jax_sample(f"blackjax chees, {num_chains} chains", one_draw, states, key_sample, draws // num_chains, start,
                      f_at, unravel, flat.size, np.sum(warm.info.num_integration_steps), 1)


def blackjax_mams(bench, num_chains, draws, warmup, seed):
    """BlackJAX's adjusted MCLMC (MAMS: ``blackjax.adjusted_mclmc_dynamic``, isokinetic McLachlan
    steps, a Metropolis-Hastings test per trajectory, a random number of steps per trajectory) with
    its own tuning, ``blackjax.adjusted_mclmc_find_L_and_step_size``, at its defaults: the fractions
    ``frac_tune1 = frac_tune2 = 0.1``, ``frac_tune3 = 0`` (no autocorrelation pass), diagonal
    preconditioning, and the target acceptance BlackJAX recommends for it, 0.9. Its ``num_steps``
    (the draws the tuning is sized for) is set so that its passes (2 x 0.1 + 0.1 of it) take
    ``warmup`` MH steps per chain (rounded down to a multiple of 3), as bnnzoo's ``mams`` row's
    ``--micro-warmup``. The tuning runs on every chain (vmapped), each from its own initial point
    uniform in (-1, 1) as bnnzoo's ``init_radius=1``, and each chain then samples with its own
    step size, L and diagonal inverse mass matrix: tuning one chain and sharing its parameters
    would leave the other chains at their initial points, with no warm-up (BlackJAX's tuning is
    single-chain; it has no multi-chain pooling to share). Then ``draws // num_chains`` draws per
    chain, all chains vmapped. Gradients: 2 per isokinetic McLachlan step (BlackJAX's
    ``num_integration_steps``), warm-up included; its first tuning pass holds L at twice the
    initial step size (0.2 sqrt(d)) while the step size falls, so its warm-up trajectories are
    much longer than its sampling ones (L / step_size = 2 on average). Wall time includes JAX's
    compilation."""
    import blackjax
    import jax
    from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

    start, f_at, flat, unravel, logdensity, positions, (key_warmup, key_sample) = jax_target(bench, num_chains, seed)
    steps_fn = make_random_trajectory_length_fn(True)  # ceil(uniform * rescale(L / step_size)), at least 1
    kernel = blackjax.adjusted_mclmc_dynamic.build_kernel(integration_steps_fn=steps_fn)
    num_steps = (10 * warmup + 5) // 3  # int(0.1 * num_steps) = warmup // 3 steps in each of the 3 passes

    def tune(key, position):
        key_arg, key_tune = jax.random.split(key)
        state = blackjax.adjusted_mclmc_dynamic.init(position, logdensity, key_arg)
        state, params, steps = blackjax.adjusted_mclmc_find_L_and_step_size(
            kernel, logdensity, num_steps, state, key_tune, target=0.9, diagonal_preconditioning=True)
        return state, params, steps

    states, params, warm_steps = jax.vmap(tune)(jax.random.split(key_warmup, num_chains), positions)

    def step(key, state, step_size, L, inverse_mass_matrix):
        sampler = blackjax.adjusted_mclmc_dynamic(logdensity, step_size, inverse_mass_matrix=inverse_mass_matrix,
                                                  integration_steps_fn=steps_fn,
                                                  integration_steps_params=(L / step_size,))
        return sampler.step(key, state)

    def one_draw(states, key):
        states, stats = jax.vmap(step)(jax.random.split(key, num_chains), states, params.step_size, params.L,
                                       params.inverse_mass_matrix)
        return states, (states.position, states.logdensity, stats.acceptance_rate, stats.num_integration_steps)

    # BlackJAX's isokinetic McLachlan: 2 gradients a step, as bnnzoo's
    return jax_sample(f"blackjax mams, {num_chains} chains", one_draw, states, key_sample, draws // num_chains, start,
                      f_at, unravel, flat.size, np.sum(warm_steps), GRADIENTS_PER_STEP["mclachlan"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cosine", "digits"], default="cosine",
                        help="cosine: the 1-50-1 tanh MLP; digits: the 64-128-128-10 ReLU MLP on 1000 digits")
    parser.add_argument("--draws", type=int, default=1000, help="post-warm-up draws per engine, all chains")
    parser.add_argument("--warmup", type=int, default=500, help="warm-up steps per chain (NUTS engines)")
    parser.add_argument("--chees-chains", type=int, nargs="+", default=[8, 16, 32],
                        help="a ChEES row (bnnzoo's and BlackJAX's) for each number of chains")
    parser.add_argument("--chees-warmup", type=int, default=200,
                        help="warm-up steps per chain of ChEES (its adaptation pools all chains)")
    parser.add_argument("--nuts-chains", type=int, nargs="*", default=[8],
                        help="a bnnzoo batched-NUTS row (engine batched_nuts, its defaults) for each number of "
                             "chains, with --warmup warm-up steps")
    parser.add_argument("--micro-chains", type=int, nargs="*", default=[8],
                        help="chains of bnnzoo's microcanonical samplers, mams and mclmc, and of BlackJAX's "
                             "adjusted MCLMC (none: skip them)")
    parser.add_argument("--micro-warmup", type=int, default=1000,
                        help="warm-up draws per chain of mams and mclmc (an mclmc draw is one integrator step) "
                             "and BlackJAX's adjusted MCLMC (its tuning's MH steps)")
    parser.add_argument("--mclmc-draws", type=int, default=20000,
                        help="post-warm-up draws of mclmc, all chains (one integrator step each)")
    parser.add_argument("--skip-stock", action="store_true", help="skip stock Pyro NUTS (slow)")
    parser.add_argument("--skip-fast-nuts", action="store_true", help="skip Pyro NUTS on the fast potential")
    parser.add_argument("--stock-draws", type=int, default=None,
                        help="fewer draws for stock Pyro NUTS (its ESS/s is still comparable)")
    parser.add_argument("--seeds", type=int, default=3, help="runs of every engine, seeds 0, 1, ...")
    parser.add_argument("--slow-seeds", type=int, default=1,
                        help="runs of the two Pyro NUTS engines (tens of minutes each), after the others")
    parser.add_argument("--modes", nargs="+", default=["default"], choices=list(MODES),
                        help="bnnzoo ChEES rows: 'default' (no flags: compile='auto', threads='auto'), "
                             "'eager' (compile=False), 'compiled' (compile=True), 'stan' (Stan's mass windows, "
                             "T adapted from the first transition: the warm-up before 2026-12-02), 'late_adapt' "
                             "(the default late windows, T adapted from the first transition)")
    parser.add_argument("--skip-numpyro", action="store_true", help="skip NumPyro's NUTS row")
    parser.add_argument("--skip-blackjax", action="store_true",
                        help="skip all BlackJAX rows (ChEES and adjusted MCLMC)")
    parser.add_argument("--skip-blackjax-mams", action="store_true",
                        help="skip BlackJAX's adjusted MCLMC rows (its ChEES rows stay)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep the inductor cache of earlier processes (default: a fresh, empty one)")
    parser.add_argument("--name", default="sampling",
                        help="results/NAME.{json,md} (another name keeps the default results untouched)")
    parser.add_argument("--retable", action="store_true",
                        help="run nothing: rewrite the table from the runs in results/sampling.json")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    if args.retable:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        args = argparse.Namespace(**{"name": args.name, **saved["settings"]})
        print(report(saved["rows"], args, saved["machine"]))
        return
    torch.set_num_threads(1)
    if not args.warm_cache:
        os.environ["BNNZOO_CACHE"] = tempfile.mkdtemp(prefix="bnnzoo-cache-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.environ["BNNZOO_CACHE"], "inductor")
    bench = Bench(args.model)
    plan, slow = [], []
    if npm.AVAILABLE and not args.skip_numpyro:
        plan.append(lambda seed: numpyro_nuts(bench, 2, args.draws, args.warmup, seed))
    for mode in args.modes:
        options = MODES[mode]
        for chains in args.chees_chains:
            label = f"bnnzoo chees, {chains} chains" + ("" if mode == "default" else f", {mode}")
            plan.append(lambda seed, chains=chains, label=label, options=options: bnnzoo_engine(
                label, bench, "chees", chains, args.draws, args.chees_warmup, seed, args.device, **options))
    for chains in args.micro_chains:
        plan.append(lambda seed, chains=chains: bnnzoo_engine(
            f"bnnzoo mams, {chains} chains", bench, "mams", chains, args.draws, args.micro_warmup, seed, args.device))
        plan.append(lambda seed, chains=chains: bnnzoo_engine(
            f"bnnzoo mclmc, {chains} chains", bench, "mclmc", chains, args.mclmc_draws, args.micro_warmup, seed,
            args.device))
    for chains in args.nuts_chains:
        plan.append(lambda seed, chains=chains: bnnzoo_engine(
            f"bnnzoo batched NUTS, {chains} chains", bench, "batched_nuts", chains, args.draws, args.warmup, seed,
            args.device))
    if npm.AVAILABLE and not args.skip_blackjax and importlib.util.find_spec("blackjax"):
        for chains in args.chees_chains:
            plan.append(lambda seed, chains=chains: blackjax_chees(bench, chains, args.draws, args.chees_warmup,
                                                                   seed))
        for chains in [] if args.skip_blackjax_mams else args.micro_chains:
            plan.append(lambda seed, chains=chains: blackjax_mams(bench, chains, args.draws, args.micro_warmup,
                                                                  seed))
    if not args.skip_fast_nuts:
        slow.append(lambda seed: bnnzoo_engine("pyro NUTS, fast potential", bench, "nuts", 2, args.draws,
                                               args.warmup, seed, args.device))
    if not args.skip_stock:
        stock = args.stock_draws or args.draws
        slow.append(lambda seed: bnnzoo_engine("pyro NUTS, stock", bench, "nuts", 2, stock,
                                               min(args.warmup, stock // 2), seed, args.device, fast=False))
    # seeds interleaved, so a drift in machine load hits every engine alike; the slow engines last;
    # results are written after every run, so a long run keeps what it measured
    schedule = [(seed, m) for seed in range(args.seeds) for m in plan]
    schedule += [(seed, m) for seed in range(args.slow_seeds) for m in slow]
    rows, table = [], ""
    for seed, measure in schedule:
        rows.append({"seed": seed, **measure(seed)})
        print(rows[-1], flush=True)
        table = report(rows, args)
    print(table)


def summarise(rows: list[dict]) -> list[dict]:
    """One line per engine: median over seeds of wall time, ESS and ESS/s (unconverged
    runs count 0), the worst R-hat, and the ratios of the median ESS/s."""
    lines = []
    for name in dict.fromkeys(r["engine"] for r in rows):
        runs = [r for r in rows if r["engine"] == name]
        line = {"engine": name, "runs": len(runs), "chains": runs[0]["chains"], "draws": runs[0]["draws"],
                "converged": sum(r["converged"] for r in runs),
                "rhat_max": max(r["rhat_max"] for r in runs)}
        nested = [r["nrhat_max"] for r in runs if r.get("nrhat_max") is not None]
        line["nrhat_max"] = max(nested) if nested else None
        for key in ("wall_s", "mean_accept", "grads_per_draw", "ess_lp", "ess_f_min", "ess_per_s", "kgrads",
                    "ess_per_kgrad"):
            values = [r[key] for r in runs if r.get(key) is not None]
            line[key] = float(np.median(values)) if values else None
        line["ess_per_s_range"] = f"{min(r['ess_per_s'] for r in runs):.2f}-{max(r['ess_per_s'] for r in runs):.2f}"
        line["first_wall_s"], line["first_compile_s"] = runs[0]["wall_s"], runs[0].get("compile_s")
        line["ungated_ess_per_s"] = float(np.median([ungated_ess_per_s(r) for r in runs]))
        lines.append(line)
    reference = next((r["ess_per_s"] for r in lines if r["engine"] == "numpyro NUTS"), None)
    # stock Pyro is credited with its ungated rate: the conservative side for the ratios to it
    stock_rate = next((r["ungated_ess_per_s"] for r in lines if r["engine"] == "pyro NUTS, stock"), None)
    ungated_reference = next((r["ungated_ess_per_s"] for r in lines if r["engine"] == "numpyro NUTS"), None)
    per_grad = next((r["ess_per_kgrad"] for r in lines if r["engine"] == "numpyro NUTS"), None)
    for r in lines:
        r["vs_numpyro"] = r["ess_per_s"] / reference if reference else None
        has_grads = per_grad and r["ess_per_kgrad"] is not None
        r["per_grad_vs_numpyro"] = r["ess_per_kgrad"] / per_grad if has_grads else None
        r["ungated_vs_numpyro"] = r["ungated_ess_per_s"] / ungated_reference if ungated_reference else None
        r["vs_stock_pyro"] = r["ess_per_s"] / stock_rate if stock_rate else None
    return lines


def report(rows: list[dict], args, machine_info: dict | None = None) -> str:
    lines = summarise(rows)
    columns = ["engine", "runs", "converged", "chains", "draws", "wall_s", "first_wall_s", "first_compile_s",
               "mean_accept", "grads_per_draw",
               "ess_lp", "ess_f_min", "rhat_max", "nrhat_max", "ess_per_s", "ess_per_s_range", "ungated_ess_per_s", "vs_numpyro",
               "ungated_vs_numpyro", "vs_stock_pyro", "kgrads", "ess_per_kgrad", "per_grad_vs_numpyro"]
    table = markdown_table(lines, columns)
    seeds = sorted({r["seed"] for r in rows})  # the seeds measured (a run cut short has fewer than asked)
    span = (f"Medians over seeds {seeds[0]}..{seeds[-1]} of each engine" if len(seeds) > 1
            else f"One run (seed {seeds[0]}) of each engine")
    table += (f"\n\n{span} (runs interleaved); a run whose "
              f"R-hat exceeds {MAX_RHAT} or whose ESS is below {MIN_ESS:.0f} scores 0 ESS/s. "
              f"first_wall_s: the seed-0 run (the one that compiled from "
              f"{'a warm' if args.warm_cache else 'an empty'} inductor cache and compile record; NumPyro's first XLA "
              f"compilation); first_compile_s: its time in compiling calls, included in its wall time "
              f"(later runs reuse the graphs). ungated_ess_per_s: min ESS / wall time without the gate "
              f"(ungated_vs_numpyro: its ratio to NumPyro's, a hint only where runs have not converged); "
              f"vs_stock_pyro divides by stock Pyro's ungated rate (the more generous one to it). nrhat_max: "
              f"nested R-hat (4 superchains) of lp and f, worst over seeds, beside the split-R-hat gate. "
              f"kgrads: gradient evaluations of all chains' transitions, warm-up included, in thousands; "
              f"ess_per_kgrad: min ESS per thousand of them (0 where the gate fails), and "
              f"per_grad_vs_numpyro its ratio to NumPyro's: the sampler's efficiency without the speed of "
              f"each library's gradient.")
    payload = {"machine": machine_info or machine(getattr(args, "device", "cpu")), "settings": vars(args),
               "summary": lines, "rows": rows}
    js, md = write_results(getattr(args, "name", "sampling"), payload, table)
    print(f"wrote {js} and {md}", flush=True)
    return table


if __name__ == "__main__":
    main()
