"""Optimise, then sample, judged by what the posterior predicts: posteriors of small real networks at
an equal gradient budget.

Problems (data sets that scikit-learn ships, each with its zoo network and its stored reference
predictive, ``benchmarks/build_references.py``): ``diabetes`` (``diabetes_mlp``, 10-32-1 tanh,
Gaussian likelihood), ``breast_cancer`` (``breast_cancer_mlp``, 30-16-1 tanh, Bernoulli) and
``wine`` (``wine_mlp``, 13-16-3 tanh, categorical); N(0, 1) priors; the seed-0 split of each data
set. ``digits`` (``digits_mlp``, 64-128-128-10 ReLU, 26k parameters) is left out by default (slow on
a 2-core CPU) and has no stored reference: a problem without one is scored on its own (LPPD,
accuracy or RMSE, ECE, the within-member mixing), its ``agreement``, ``tv`` and ``w2`` left empty.

Methods, per problem and seed (the seed of the members, the chains and NumPyro's key):

* ``ensemble``: the deep ensemble alone, the K members (MAP fits: AdamW on minibatches, validation
  split, early stopping; bnnzoo's defaults) as a uniform mixture; it costs the members' gradients only.
* ``bnnzoo mclmc``, ``bnnzoo mams``, ``bnnzoo chees``: ``run(..., warm_start="ensemble",
  num_members=K, chains_per_member=M, budget=G)``: the same members (the members depend on the seed
  only), M chains from each, every stage (members, warm-up, sampling) within G gradient evaluations.
  bnnzoo counts the budget while the chains run (``bnnzoo.inference.budget``): warm-up ends once it
  has spent half of what the members leave (``warmup_budget``'s default), and sampling stops after the
  draw that passes G, which is dropped (``dropped`` in the rows: that draw's gradients, inside the
  wall time). ``num_samples`` is only a cap, G // C + 1 draws a chain (a draw costs at least one
  gradient a chain), or ``--draws``.
* ``bnnzoo mile recipe``: bnnzoo's ``mclmc`` with MILE's settings, ``run(...,
  **recipes.mile(G, K, M))``: no preconditioner, an energy-error variance per dimension from 0.5
  down to 0.15, one draw every 10 integration steps, tuning planned to 5/6 of what the members
  leave; M chains a member like bnnzoo's other rows (MILE: one).
* ``numpyro nuts``: NumPyro's NUTS (defaults: target 0.8, diagonal mass) on the same network, its
  C = K M chains (vectorized) started from the same members' points (chains 2..M of a member at its
  point plus N(0, 1e-3^2) noise, as bnnzoo's ``jitter``), ``--numpyro-warmup`` warm-up steps (100: its
  early trees are deep, and 300 steps alone spent 2.4 times a 60000 budget on wine), then draws in
  chunks until the members', warm-up's and draws' gradients reach G (the draws past G dropped, as
  bnnzoo's ``budget`` does; ``--numpyro-budget``: a budget of its own, for digits, where every
  tree of its warm-up reaches the depth cap and its warm-up alone spends more than the run's). Its wall time is the members' fits plus NumPyro's warm-up and sampling,
  JAX's compilation included. Skipped (with a note) where NumPyro is not installed.
* ``blackjax mile``: MILE (Microcanonical Langevin Ensembles, Sommer et al., ICLR 2025): BlackJAX's
  unadjusted MCLMC from each of the same K members (one chain a member, as MILE), tuned and sampled
  with MILE's settings (:class:`MileSettings`, with the sources in its public code) on the NumPyro
  row's log density: its 50000 tuning and 10000 sampling integration steps scaled to what G leaves
  after the members (the same ratio, phases 0.8 / 0.1 / 0.1, every 10th step kept; two gradients a
  step, one at each chain's start). What differs from MILE (bnnzoo's K members instead of its 12,
  the staircase of its energy-variance decay) is in the class's docstring and the report's notes.
  Its wall time is the members' fits plus the chains, JAX's compilation included. Skipped (with a
  note) where BlackJAX or NumPyro is not installed, or with ``--skip-blackjax``.

Reported per row: test LPPD (per point), RMSE (regression, standardised units) or accuracy, ECE,
coverage of the 90% interval (regression); against the reference: ``agreement`` and ``tv``
(classification) or ``w2`` and ``tv`` (regression); the within-member function-space split R-hat
(largest over members and test inputs; ``rhat_f_within``) and ESS, the modes visited, the gradient
evaluations (members and all) and the wall time. Every finished row is written to
``benchmarks/results/<name>.json`` at once (a run stopped midway keeps them; started again it skips
them), with the medians over seeds in ``<name>.md``.

A results file is reused (its finished rows skipped) only under the same settings. Files written
before bnnzoo counted the budget in its loop (their settings have ``pilot_draws``: a pilot run then
set how many draws to run, and warm-up was never cut) keep their other methods' rows, and their
bnnzoo rows are run again.

Usage: ``python benchmarks/bench_posteriors.py [--problems diabetes breast_cancer wine] [--seeds 0 1 2]
[--members 4] [--chains 2] [--warmup 300] [--budget 60000] [--skip-numpyro] [--skip-blackjax]
[--methods "blackjax mile" ...] [--device cuda] [--dtype float64] [--smoke] [--out DIR] [--name posteriors] [--retable]``; ``--methods``
runs only the methods named and keeps the rows of the others already in the results file.
"""

from __future__ import annotations

import os

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import XLA_ONE_THREAD, PROBLEMS, RESULTS, add_device_argument, machine, markdown_table, one_core  # noqa: E402,E501

# one thread for JAX too (set before JAX is imported, in the functions that use it), as for torch; XLA's
# CPU client still runs large products on every core, so main() also pins the process to one core
os.environ.setdefault("XLA_FLAGS", XLA_ONE_THREAD)

from bnnzoo.data import load  # noqa: E402
from bnnzoo.diagnostics.members import ensemble_run, member_mixing  # noqa: E402
from bnnzoo.diagnostics.scorecard import load_reference, scorecard, stored_references  # noqa: E402
from bnnzoo.inference import recipes, run  # noqa: E402
from bnnzoo.models import zoo  # noqa: E402

BNNZOO_ENGINES = ("mclmc", "mams", "chees", "mile recipe")
#: how bnnzoo's rows spend the budget: counted in the loop (warm-up ends at its share, sampling at the budget)
BUDGET_COUNTING = "loop"
#: the order of the methods in the tables
METHODS = ["ensemble", *(f"bnnzoo {e}" for e in BNNZOO_ENGINES), "numpyro nuts", "blackjax mile"]
LIKELIHOOD = {"GaussianLikelihood": "gaussian", "Bernoulli": "bernoulli", "Categorical": "categorical"}


def settings(args) -> dict:
    """The settings a row depends on (a finished row is reused only under the same ones)."""
    out = {k: getattr(args, k) for k in ("members", "chains", "warmup", "budget", "draws",
                                         "mclmc_thin", "numpyro_chunk", "numpyro_warmup")}
    if getattr(args, "numpyro_budget", None) is not None:  # only where set, so that the rows written before it stay reusable
        out["numpyro_budget"] = args.numpyro_budget
    out["budget_counting"] = BUDGET_COUNTING
    if str(getattr(args, "device", "cpu")) != "cpu":  # only where set, so that the CPU files stay reusable
        out["device"] = str(args.device)
    if getattr(args, "dtype", "float32") != "float32":  # likewise
        out["dtype"] = args.dtype
    return out


def reusable_rows(previous: dict, args) -> list[dict] | None:
    """The rows of a results file that this run may keep: all of them under the same settings; under
    the same settings but for a file written before bnnzoo counted the budget in its loop (module
    docstring), the rows of the other methods; None where the settings differ."""
    now = settings(args)
    old = dict(previous.get("settings") or {})
    if old == now:
        return list(previous["rows"])
    old.pop("pilot_draws", None)
    if "budget_counting" not in old and old == {k: v for k, v in now.items() if k != "budget_counting"}:
        return [r for r in previous["rows"] if not r["method"].startswith("bnnzoo ")]
    return None


def score_row(result, reference, problem: str, method: str, seed: int, wall: float, grads: dict,
              per_member: int | None, note: str = "") -> dict:
    """A row: the scorecard (and reference scores) of ``result``, its within-member mixing."""
    card = scorecard(result, reference=reference)
    if reference is None:  # a problem with no stored reference: its own scores only
        card.update(agreement=math.nan, tv=math.nan, w2=math.nan)
    row = {"problem": problem, "method": method, "seed": seed, "chains": result.num_chains,
           "draws": result.num_draws, "grad_members": int(grads.get("members", 0)),
           "grad_total": int(grads.get("total", 0)), "wall_s": wall, **card, "note": note}
    if per_member and result.num_draws >= 4:  # fewer draws: no split R-hat, no modes to tell apart
        mixing = member_mixing(result)
        row.update(rhat_f_within=mixing["rhat_f_within_max"], ess_f_within=mixing["ess_f_within_min"],
                   modes=mixing["modes"], within_modes=mixing["converged_within_modes"])
    else:
        row.update(rhat_f_within=math.nan, ess_f_within=math.nan, modes=math.nan, within_modes=None)
    return row


def bnnzoo_run(problem, engine, seed, args, num_samples, budget=None, warmup=None):
    """An ensemble-started bnnzoo run on the seed-0 split of ``problem`` (the reference's); ``mclmc``
    thinned by ``mclmc_thin`` integration steps a draw, its warm-up as many integration steps as the
    others' warm-up transitions (``warmup // mclmc_thin`` iterations); ``mile recipe``: the keywords of
    :func:`bnnzoo.inference.recipes.mile` at ``budget`` with M chains a member (without a budget, for
    the members alone: ``mclmc``)."""
    if engine == "mile recipe" and budget is not None:  # every count from the budget: recipes.mile
        keywords = recipes.mile(budget, num_members=args.members, chains_per_member=args.chains)
        return run(PROBLEMS[problem], load(problem, seed=0), **keywords, seed=seed, progress=False, threads=1,
                   device=args.device, dtype=getattr(args, "dtype", None))
    options, steps = {}, args.warmup
    if engine in ("mclmc", "mile recipe"):
        engine = "mclmc"
        options, steps = {"steps_per_draw": args.mclmc_thin}, max(1, args.warmup // args.mclmc_thin)
    warmup = steps if warmup is None else warmup
    return run(PROBLEMS[problem], load(problem, seed=0), engine=engine, warm_start="ensemble",
               num_members=args.members, chains_per_member=args.chains, num_samples=num_samples,
               warmup_steps=warmup, seed=seed, progress=False, threads=1, budget=budget, device=args.device,
               dtype=getattr(args, "dtype", None), **options)


def draw_cap(args) -> int:
    """Draws per chain to run at most: ``--draws``, else more than the budget can pay for (a draw costs at
    least one gradient a chain; bnnzoo stops sampling where the budget runs out)."""
    return args.draws or args.budget // (args.members * args.chains) + 1


def bnnzoo_rows(problem, engine, seed, args, reference, num_samples):
    result = bnnzoo_run(problem, engine, seed, args, num_samples, budget=args.budget)
    dropped = result.notes.get("budget", {}).get("grad_evals_dropped", 0)
    row = score_row(result, reference, problem, f"bnnzoo {engine}", seed, result.wall_time, result.grad_evals,
                    args.chains, note=f"dropped {dropped}")
    stats = result.sample_stats  # how the adapted kernel ran: its step size, trajectory length and steps
    row.update({f"{k}_median": float(np.median(stats[k])) for k in ("step_size", "L", "n_steps") if k in stats})
    return row, result


def ensemble_row(result, problem, seed, reference):
    alone = ensemble_run(result)
    return score_row(alone, reference, problem, "ensemble", seed, alone.wall_time, alone.grad_evals, None)


# ---------------------------------------------------------------- NumPyro


def numpyro_problem(members_run):
    """The NumPyro twin of ``members_run``'s network (the model of :mod:`numpyro_models`) and its
    training data as JAX arrays: ``(model, x, y)``."""
    import jax.numpy as jnp

    import numpyro_models as npm

    spec = members_run.model.spec
    widths = [spec.input_dim] + [layer.units for layer in spec.layers]
    kind = LIKELIHOOD[type(spec.likelihood).__name__]
    noise = float(spec.likelihood.noise) if kind == "gaussian" else 0.1
    model, _ = npm.mlp_model(widths, spec.layers[0].activation, kind, noise=noise)
    data = members_run.data
    x = jnp.asarray(data.x_train.numpy())
    y = jnp.asarray(data.y_train.numpy().astype(np.int32 if kind != "gaussian" else np.float32))
    return model, x, y


def numpyro_row(problem, seed, args, reference, members_run):
    """NumPyro's NUTS from the members of ``members_run`` (a bnnzoo run of the same seed), within the budget."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    model, x, y = numpyro_problem(members_run)
    spec = members_run.model.spec
    rng = np.random.default_rng(seed)
    names = {f"layers.{i}.{part}": f"{'w' if part == 'weight' else 'b'}{i}"
             for i in range(len(spec.layers)) for part in ("weight", "bias")}
    init = {}
    for site, name in names.items():
        points = np.stack([np.asarray(m.values[site]) for m in members_run.members])  # [K, ...]
        chains = np.repeat(points, args.chains, axis=0)
        noise_ = 1e-3 * rng.standard_normal(chains.shape)
        noise_[::args.chains] = 0.0  # the first chain of a member starts at its point
        init[name] = jnp.asarray((chains + noise_).astype(np.float32))
    num_chains = len(members_run.members) * args.chains
    member_grads = int(members_run.grad_evals["members"])
    member_wall = float(sum(m.wall_time for m in members_run.members))
    start = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_warmup=args.numpyro_warmup, num_samples=args.numpyro_chunk, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(seed), x, y, init_params=init, extra_fields=("num_steps",), collect_warmup=True)
    warm = float(np.sum(np.asarray(mcmc.get_extra_fields()["num_steps"])))
    budget = args.budget if args.numpyro_budget is None else args.numpyro_budget
    left = budget - member_grads - warm
    chunks, steps, lps, spent = [], [], [], 0.0
    while not chunks or spent < left:  # at least one chunk, even where warm-up spent the budget
        mcmc.run(mcmc.post_warmup_state.rng_key, x, y, extra_fields=("num_steps", "potential_energy"))
        mcmc.post_warmup_state = mcmc.last_state
        extra = mcmc.get_extra_fields(group_by_chain=True)
        chunks.append({k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()})
        steps.append(np.asarray(extra["num_steps"], dtype=np.float64))
        lps.append(-np.asarray(extra["potential_energy"], dtype=np.float64))
        spent += float(steps[-1].sum())
    wall = member_wall + time.perf_counter() - start
    steps_all = np.concatenate(steps, 1)
    per_draw = steps_all.sum(0)  # every chain's gradients at each draw index
    keep = max(1, int(np.searchsorted(np.cumsum(per_draw), left, side="right")))
    dropped = float(per_draw[keep:].sum())
    samples = {site: np.concatenate([c[name] for c in chunks], 1)[:, :keep] for site, name in names.items()}
    lp = np.concatenate(lps, 1)[:, :keep]
    result = dataclasses.replace(members_run, samples=samples, sample_stats={"lp": lp}, warmup_sample_stats={},
                                 engine="numpyro_nuts", wall_time=wall)
    grads = {"members": member_grads, "total": int(member_grads + warm + per_draw[:keep].sum())}
    return score_row(result, reference, problem, "numpyro nuts", seed, wall, grads, args.chains,
                     note=f"dropped {dropped:.0f}")


# ---------------------------------------------------------------- BlackJAX MILE


@dataclasses.dataclass(frozen=True)
class MileSettings:
    """MILE's settings (Sommer, Robnik, Nozadze, Seljak, Rügamer, "Microcanonical Langevin Ensembles",
    ICLR 2025), as its public code runs them (repository ``EmanuelSommer/MILE``, commit 2c6dd8d):

    * per member, one chain, started at the member's fitted point, on the full-batch log posterior of
      the training data (``src/training/trainer.py`` lines 549-577); unadjusted MCLMC with BlackJAX's
      ``isokinetic_mclachlan`` integrator and an identity preconditioner (``src/training/warmup.py``,
      ``custom_mclmc_warmup``, lines 522-531; ``diagonal_preconditioning: false`` in every config, e.g.
      ``experiments/replicate_uci/mclmc.yaml`` line 37); sampling goes on from the tuned state
      (``use_warmup_as_init: true``, line 36);
    * tuning: ``warmup_steps: 50000`` integration steps (line 33), split 0.8 / 0.1 / 0.1 into the three
      phases of BlackJAX's ``mclmc_find_L_and_step_size`` (``warmup.py`` line 543: step size, then L from
      the phase-2 variances, then L from the phase-3 ESS with ``Lfactor=0.4``, line 225); MILE's copy of
      the tuner starts from ``L = max(sqrt(d), 15)`` and ``step_size_init`` (lines 205-208: 0.001 in the
      regression configs, ``mclmc.yaml`` line 42; 0.01 in the classification ones,
      ``experiments/tabluar_classif/wine_red.yaml`` line 42, ``additional_tasks/ionosphere_classif.yaml``
      line 42) and decays the desired energy variance linearly over phases 1-2 from 0.5 to 0.1
      (``desired_energy_var_start/_end``, ``mclmc.yaml`` lines 39-40; schedule ``warmup.py`` lines
      249-256); ``trust_in_estimate: 1.5``, ``num_effective_samples: 100`` (lines 41, 38);
    * sampling: ``n_samples: 10000`` integration steps, every ``n_thinning: 10``-th kept (lines 35, 43;
      ``src/training/sampling.py`` lines 140-176): 1000 draws per member;
    * members: 12 (``n_chains: 12``, line 34), each fitted with AdamW (``weight_decay`` 1e-3, learning
      rate 1e-3 in the UCI regression configs and 1e-2 in the classification ones), batch 32, at most 500
      epochs, early stopping on a 10% validation split with patience 10 (regression) or 20
      (classification) (``mclmc.yaml`` lines 13-15, 22-30; ``wine_red.yaml`` lines 22-30); N(0, 1)
      priors (lines 45-47).

    What this benchmark keeps and changes (said in the row's note and the report): the members are
    bnnzoo's K members of the same seed (AdamW on minibatches, validation split, early stopping at
    bnnzoo's defaults: the same members as every other row, not MILE's 12 with its learning rates);
    the tuning and sampling steps are scaled to the run's gradient budget in MILE's ratio
    (50000 : 10000 integration steps, phases 0.8 : 0.1 : 0.1, thinning 10); and the tuner is the
    BlackJAX release's own ``mclmc_find_L_and_step_size`` (not MILE's copy of an older one): it takes
    one desired energy variance per call, so MILE's linear decay is run as ``schedule_stages`` calls of
    equal length over phase 1 plus one for phases 2-3, each at the schedule's value at its midpoint
    (the step-size average and the cap set by a divergence restart at each call; the state, step
    size and L carry over). MILE pins ``blackjax`` 1.2.2 and ``jax`` 0.4.28 (``pyproject.toml`` lines
    11-12); the row runs the installed releases, whose versions the results file records.
    """

    tune_steps: int = 50_000
    sample_steps: int = 10_000
    thinning: int = 10
    phase_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    desired_energy_var_start: float = 0.5
    desired_energy_var_end: float = 0.1
    trust_in_estimate: float = 1.5
    num_effective_samples: int = 100
    diagonal_preconditioning: bool = False
    l_factor: float = 0.4
    L_init_floor: float = 15.0
    step_size_init_regression: float = 1e-3
    step_size_init_classification: float = 1e-2
    integrator: str = "isokinetic_mclachlan"
    chains_per_member: int = 1
    members: int = 12
    schedule_stages: int = 8
    #: gradient evaluations: one at each chain's start, two per McLachlan step (the last is reused)
    grads_per_step: int = 2

    def step_size_init(self, task: str) -> float:
        return self.step_size_init_regression if task == "regression" else self.step_size_init_classification

    def desired_energy_var(self, step: float, phase12_steps: int) -> float:
        """MILE's linear schedule at tuning step ``step`` of phases 1-2 (``phase12_steps`` long)."""
        progress = min(step / (phase12_steps + 1), 1.0)
        return self.desired_energy_var_start - (self.desired_energy_var_start - self.desired_energy_var_end) * progress


MILE = MileSettings()


def mile_plan(budget: int | None, member_grads: int, members: int, settings: MileSettings = MILE) -> dict | None:
    """Integration steps per chain for each tuning phase and for sampling, and the draws kept: MILE's own
    counts where ``budget`` is None, else the steps the budget leaves after the members (one chain per
    member, MILE's ratio of tuning to sampling steps, sampling a whole number of thinning blocks).
    None where fewer than one draw's steps are left."""
    if budget is None:
        tune, sample = settings.tune_steps, settings.sample_steps
    else:
        per_chain = (budget - member_grads) // members - 1  # one gradient at each chain's start
        steps = per_chain // settings.grads_per_step
        tune = round(steps * settings.tune_steps / (settings.tune_steps + settings.sample_steps))
        sample = (steps - tune) // settings.thinning * settings.thinning
    f1, f2, _ = settings.phase_fractions
    phase1, phase2 = round(tune * f1), round(tune * f2)
    phase3 = tune - phase1 - phase2
    if sample < settings.thinning or phase1 < settings.schedule_stages or phase2 < 2 or phase3 < 2:
        return None
    stages = [phase1 // settings.schedule_stages + (i < phase1 % settings.schedule_stages)
              for i in range(settings.schedule_stages)]
    grads = members * (1 + settings.grads_per_step * (tune + sample))
    return {"phase1": phase1, "phase2": phase2, "phase3": phase3, "stages": stages, "sample": sample,
            "draws": sample // settings.thinning, "grads": grads}


def mile_chains(logdensity, positions, key, plan: dict, task: str, settings: MileSettings = MILE):
    """MILE's tuning and sampling (``plan``) of one unadjusted MCLMC chain from each of the ``positions``
    (a pytree with the members on the leading axis), the chains vectorized. Returns the draws (the
    pytree, ``[K, draws, ...]``), their log densities ``[K, draws]``, the tuned step sizes and Ls
    ``[K]``, and the integration steps the tuner reports having run (per chain)."""
    import jax

    members = jax.tree_util.tree_leaves(positions)[0].shape[0]
    chain = mile_chain(logdensity, plan, task, settings)
    return jax.block_until_ready(jax.jit(jax.vmap(chain))(positions, jax.random.split(key, members)))


def mile_chain(logdensity, plan: dict, task: str, settings: MileSettings = MILE):
    """``chain(position, key)``: one member's chain of :func:`mile_chains` (to trace, vectorize, compile)."""
    import blackjax
    import jax
    import jax.numpy as jnp
    from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState
    from blackjax.util import pytree_size

    integrator = getattr(blackjax.mcmc.integrators, settings.integrator)
    kernel = blackjax.mcmc.mclmc.build_kernel(integrator=integrator)
    phase12 = plan["phase1"] + plan["phase2"]

    def tune(position, chain_key):
        init_key, *keys = jax.random.split(chain_key, len(plan["stages"]) + 2)
        state = blackjax.mcmc.mclmc.init(position=position, logdensity_fn=logdensity, rng_key=init_key)
        dim = pytree_size(position)
        params = MCLMCAdaptationState(L=max(math.sqrt(dim), settings.L_init_floor),
                                      step_size=settings.step_size_init(task), inverse_mass_matrix=jnp.ones((dim,)))
        common = dict(mclmc_kernel=kernel, logdensity_fn=logdensity, num_steps=1,
                      trust_in_estimate=settings.trust_in_estimate,
                      num_effective_samples=settings.num_effective_samples,
                      diagonal_preconditioning=settings.diagonal_preconditioning, l_factor=settings.l_factor)
        done, ran = 0, 0
        for stage, steps in enumerate(plan["stages"]):  # phase 1: the decaying energy variance, staircase
            state, params, n = blackjax.mclmc_find_L_and_step_size(
                state=state, rng_key=keys[stage], params=params, frac_tune1=steps, frac_tune2=0, frac_tune3=0,
                desired_energy_var=settings.desired_energy_var(done + steps / 2, phase12), **common)
            done, ran = done + steps, ran + n
        last = settings.desired_energy_var(done + plan["phase2"] / 2, phase12)
        state, params, n = blackjax.mclmc_find_L_and_step_size(  # phase 2 (L from variances), phase 3 (ESS)
            state=state, rng_key=keys[-1], params=params, frac_tune1=0, frac_tune2=plan["phase2"],
            frac_tune3=plan["phase3"], desired_energy_var=last, **common)
        return state, params, ran + n

    def sample(state, params, chain_key):
        def block(state, block_key):  # ``thinning`` steps, the last kept
            def one(state, step_key):
                state, _ = kernel(step_key, state, logdensity, params.inverse_mass_matrix, params.L, params.step_size)
                return state, None

            state, _ = jax.lax.scan(one, state, jax.random.split(block_key, settings.thinning))
            return state, (state.position, state.logdensity)

        _, (draws, lp) = jax.lax.scan(block, state, jax.random.split(chain_key, plan["draws"]))
        return draws, lp

    def chain(position, chain_key):
        tune_key, sample_key = jax.random.split(chain_key)
        state, params, ran = tune(position, tune_key)
        draws, lp = sample(state, params, sample_key)
        return draws, lp, params.step_size, params.L, ran

    return chain


def mile_logdensity(members_run):
    """The log density (JAX) of the NumPyro row's model of ``members_run``'s network on its training data,
    the members' points as a pytree (NumPyro's site names, members on the leading axis), and the
    NumPyro-to-bnnzoo site names."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import initialize_model

    model, x, y = numpyro_problem(members_run)
    spec = members_run.model.spec
    potential = initialize_model(jax.random.PRNGKey(0), model, model_args=(x, y)).potential_fn
    names = {f"{'w' if part == 'weight' else 'b'}{i}": f"layers.{i}.{part}"
             for i in range(len(spec.layers)) for part in ("weight", "bias")}
    positions = {name: jnp.asarray(np.stack([np.asarray(m.values[site]) for m in members_run.members]), jnp.float32)
                 for name, site in names.items()}
    return (lambda params: -potential(params)), positions, names


def mile_run(problem, seed, budget: int, members_run, settings: MileSettings = MILE):
    """BlackJAX's MCLMC with MILE's tuning and sampling (:class:`MileSettings`) from the members of
    ``members_run`` (a bnnzoo run of the same seed), one chain a member, within ``budget``: a Run of
    its draws (its wall time the members' fits plus the chains) and ``(plan, step_size, L)``."""
    import jax

    task = members_run.model.task
    member_grads = int(members_run.grad_evals["members"])
    member_wall = float(sum(m.wall_time for m in members_run.members))
    members = len(members_run.members)
    plan = mile_plan(budget, member_grads, members, settings)
    if plan is None:
        raise ValueError(f"blackjax mile on {problem}: the budget {budget} leaves too few steps "
                         f"after the members' {member_grads} gradients")
    start = time.perf_counter()
    logdensity, positions, names = mile_logdensity(members_run)
    draws, lp, step_size, L, ran = mile_chains(logdensity, positions, jax.random.PRNGKey(seed), plan, task, settings)
    wall = member_wall + time.perf_counter() - start
    tuned = plan["phase1"] + plan["phase2"] + plan["phase3"]
    if not np.all(np.asarray(ran) == tuned):
        raise RuntimeError(f"blackjax mile: the tuner ran {np.asarray(ran)} steps, planned {tuned}")
    samples = {site: np.asarray(draws[name], dtype=np.float64) for name, site in names.items()}
    result = dataclasses.replace(members_run, samples=samples, sample_stats={"lp": np.asarray(lp, dtype=np.float64)},
                                 warmup_sample_stats={}, engine="blackjax_mile", wall_time=wall, chains_per_member=1,
                                 compile_seconds=None,  # the members' run's compile time is not MILE's
                                 grad_evals={"members": member_grads, "warmup": members * (1 + 2 * tuned),
                                             "sampling": members * 2 * plan["sample"],
                                             "total": member_grads + plan["grads"]})
    return result, (plan, step_size, L)


def mile_row(problem, seed, args, reference, members_run, settings: MileSettings = MILE):
    """:func:`mile_run` at ``args.budget``, scored as a row."""
    result, (plan, step_size, L) = mile_run(problem, seed, args.budget, members_run, settings)
    members = len(members_run.members)
    grads = {"members": result.grad_evals["members"], "total": result.grad_evals["total"]}
    note = (f"{members} bnnzoo members (MILE: 12, its own fits), 1 chain each; tuning {plan['phase1']}/"
            f"{plan['phase2']}/{plan['phase3']} steps, sampling {plan['sample']} thinned by {settings.thinning} "
            f"(MILE: 40000/5000/5000 and 10000, scaled to the budget); step size "
            f"{', '.join(f'{s:.3g}' for s in np.asarray(step_size))}; L {', '.join(f'{v:.3g}' for v in np.asarray(L))}")
    row = score_row(result, reference, problem, "blackjax mile", seed, result.wall_time, grads, 1, note=note)
    row.update(mile_step_size=[float(s) for s in np.asarray(step_size)], mile_L=[float(v) for v in np.asarray(L)],
               mile_plan={k: v for k, v in plan.items() if k != "grads"})
    return row


#: the report's note on the MILE row
MILE_NOTE = ("blackjax mile: BlackJAX's unadjusted MCLMC with MILE's tuning and sampling (Sommer et al., ICLR 2025; "
             "settings as its public code runs them: `MileSettings` in bench_posteriors.py) from the same bnnzoo "
             "members as the other rows, one chain a member (MILE's 12 members and its own member fits are not "
             "used), its 50000 tuning : 10000 sampling steps scaled to the budget (thinning 10), and MILE's "
             "linear decay of the desired energy variance (0.5 to 0.1) run as a staircase of 8 + 1 calls of "
             "BlackJAX's tuner. Its wall time includes the members' fits and JAX's compilation.")
#: notes of an earlier version of this script, dropped when its rows are resumed
STALE_NOTES = ("BlackJAX's MILE (ensemble + MCLMC) is not run", "blackjax mile: ", "BlackJAX MILE skipped")

# ---------------------------------------------------------------- tables

COLUMNS = {"regression": ["method", "lppd", "rmse", "ece", "coverage", "w2", "tv", "rhat_f_within", "modes",
                          "draws", "grad_total", "wall_s", "seeds"],
           "classification": ["method", "lppd", "accuracy", "ece", "agreement", "tv", "rhat_f_within", "modes",
                              "draws", "grad_total", "wall_s", "seeds"]}
MEDIAN = ("lppd", "rmse", "accuracy", "ece", "coverage", "w2", "tv", "agreement", "draws", "grad_total", "wall_s")


def summarise(rows: list[dict]) -> dict[str, list[dict]]:
    """Per problem, one line per method: medians over seeds (``rhat_f_within``: the largest)."""
    out: dict[str, list[dict]] = {}
    for problem in dict.fromkeys(r["problem"] for r in rows):
        lines = []
        methods = dict.fromkeys(r["method"] for r in rows if r["problem"] == problem)
        for method in sorted(methods, key=lambda m: METHODS.index(m) if m in METHODS else len(METHODS)):
            group = [r for r in rows if r["problem"] == problem and r["method"] == method]
            line = {"method": method, "seeds": len(group)}
            for key in MEDIAN:
                values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
                line[key] = statistics.median(values) if values else None
            within = [r["rhat_f_within"] for r in group if not math.isnan(r["rhat_f_within"])]
            line["rhat_f_within"] = max(within) if within else None
            modes = [r["modes"] for r in group if not math.isnan(r["modes"])]
            line["modes"] = statistics.median(modes) if modes else None
            lines.append(line)
        out[problem] = lines
    return out


def report(rows: list[dict], payload: dict) -> str:
    info, s = payload["machine"], payload["settings"]
    text = [f"`benchmarks/bench_posteriors.py`: per problem, "
            f"{s['members']} ensemble members x {s['chains']} chains, warm-up {s['warmup']}, budget {s['budget']} "
            f"gradient evaluations per run (members, warm-up and sampling, all chains); medians over the seeds "
            f"(`rhat_f_within`: the largest over seeds of the largest within-member function-space split R-hat; "
            f"`draws`: per chain, kept within the budget). "
            + ("Scores against the stored reference predictive (`benchmarks/results/references.md`): `agreement`, "
               "`tv` (classification), `w2`, `tv` (regression). "
               if not set(r["problem"] for r in rows).isdisjoint(stored_references()) else "")
            + "LPPD per test point; RMSE in standardised units.\n"]
    tasks = payload.get("tasks", {})
    for problem, lines in summarise(rows).items():
        task = tasks.get(problem, "classification" if any("accuracy" in r for r in rows
                                                          if r["problem"] == problem) else "regression")
        text.append(f"\n**{problem}** ({PROBLEMS[problem]})\n\n" + markdown_table(lines, COLUMNS[task]) + "\n")
    notes = list(payload.get("notes") or [])
    own = s.get("numpyro_budget")  # NumPyro on a budget of its own: its rows are over the run's budget by design
    over = [r for r in rows if r["grad_total"] > s["budget"] and not (own and r["method"] == "numpyro nuts")]
    if own:
        notes.append(f"numpyro nuts runs on a budget of its own, {own} gradient evaluations (`--numpyro-budget`; "
                     f"its trees reach NUTS's depth cap of 10, 1023 steps, so that its warm-up alone spends more "
                     f"than {s['budget']}); its `grad_total` and `wall_s` are of that run.")
    for problem, method in dict.fromkeys((r["problem"], r["method"]) for r in over):
        seeds = [str(r["seed"]) for r in over if (r["problem"], r["method"]) == (problem, method)]
        notes.append(f"{method} on {problem}, seed {', '.join(seeds)}: over the budget ({', '.join(str(r['grad_total']) for r in over if (r['problem'], r['method']) == (problem, method))} gradients): its warm-up alone spent more; one draw per chain kept.")
    if notes:
        text.append("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    if info.get("gpu"):  # bnnzoo on the GPU; JAX where its own default put it
        where = f"{info['cpus']} CPUs; load average {info['load']} at the last row"
        jax_device = (payload.get("mile_versions") or {}).get("jax_device", "JAX's default device")
        text.append(f"\nMeasured {info['date']} on {info['gpu']} ({where}): bnnzoo on {info['device']}, JAX on "
                    f"{jax_device}; the members' fits on the same device as bnnzoo; torch {info['torch']}, "
                    f"Python {info['python']}, 1 torch thread. Per-seed rows: `{payload['name']}.json`.\n")
        return "".join(text)
    where = f"{info['cpus']} CPUs, shared with other work; load average {info['load']} at the last row"
    cores = info.get("cores", "all cores: XLA's products may use every core whatever XLA_FLAGS says (not pinned)")
    text.append(f"\nMeasured {info['date']} on {info['processor']} ({where}), torch {info['torch']}, 1 torch "
                f"thread and XLA_FLAGS for 1 XLA thread per run, nice {info.get('nice', 10)}; {cores}. Per-seed rows: "
                f"`{payload['name']}.json`.\n")
    return "".join(text)


def write(out: Path, name: str, rows: list[dict], payload: dict, tables=None) -> None:
    """The rows on disk: ``<name>.json`` and its markdown, ``tables(rows, payload)`` (default :func:`report`)."""
    payload["machine"]["load"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    payload["rows"] = rows
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    (out / f"{name}.md").write_text((tables or report)(rows, payload))


def main(argv=None, tables=None) -> list[dict]:
    """The benchmark (module docstring); ``tables``: what writes the markdown from the rows and the
    payload (default :func:`report`; bench_suite's optimise-then-sample part passes its own)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["diabetes", "breast_cancer", "wine"],
                        choices=sorted(PROBLEMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--chains", type=int, default=2, help="chains per member")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up steps per chain")
    parser.add_argument("--budget", type=int, default=60_000, help="gradient evaluations per run, all stages")
    parser.add_argument("--draws", type=int, default=None,
                        help="draws per chain to run at most for every bnnzoo engine (default: more than the budget pays for)")
    parser.add_argument("--mclmc-thin", type=int, default=10, help="mclmc's steps_per_draw")
    parser.add_argument("--numpyro-chunk", type=int, default=25, help="NumPyro draws per chunk")
    parser.add_argument("--numpyro-warmup", type=int, default=100,
                        help="NumPyro's warm-up steps (its trees are deep early on: 300 took 2.4x the budget on wine)")
    parser.add_argument("--numpyro-budget", type=int, default=None,
                        help="NumPyro's own gradient budget (default: --budget), where its warm-up alone spends more "
                             "than the budget (digits: every tree reaches depth 10)")
    parser.add_argument("--skip-numpyro", action="store_true")
    parser.add_argument("--skip-blackjax", action="store_true", help="leave out the BlackJAX MILE row")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=None,
                        help="run only these methods (the rows of the others already written are kept)")
    parser.add_argument("--smoke", action="store_true", help="tiny settings on wine, one seed (for tests)")
    parser.add_argument("--retable", action="store_true", help="rewrite the markdown from the JSON, run nothing")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="bnnzoo's members and chains (NumPyro and BlackJAX run in float32)")
    add_device_argument(parser)  # bnnzoo's members and chains; JAX's rows run on JAX's default device
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default=None, help="results file name (default: posteriors, or posteriors_smoke)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.problems, args.seeds, args.members, args.chains = ["wine"], [0], 2, 2
        args.warmup, args.budget, args.draws, args.mclmc_thin, args.numpyro_chunk = 30, 8000, 40, 2, 10
        args.numpyro_warmup = 10
    name = args.name or ("posteriors_smoke" if args.smoke else "posteriors")
    if args.retable:
        payload = json.loads((args.out / f"{name}.json").read_text())
        (args.out / f"{name}.md").write_text((tables or report)(payload["rows"], payload))
        return payload["rows"]
    torch.set_num_threads(1)
    with one_core(not args.smoke) as cores:
        return measure(args, name, cores, tables)


def measure(args, name: str, cores: str, tables=None) -> list[dict]:
    """The rows of :func:`main`'s run, each written as soon as it is measured (markdown: ``tables``)."""
    selected = set(args.methods or METHODS)
    notes = ["NumPyro's wall time includes the members' fits and JAX's compilation of its warm-up and sampling "
             "(a fresh MCMC per seed); bnnzoo's includes the members' fits."]
    have_numpyro = importlib.util.find_spec("numpyro") is not None and not args.skip_numpyro
    if not have_numpyro:
        notes.append("NumPyro NUTS skipped (" + ("--skip-numpyro" if args.skip_numpyro else "not installed") + ").")
    have_blackjax = (not args.skip_blackjax and importlib.util.find_spec("blackjax") is not None
                     and importlib.util.find_spec("numpyro") is not None)
    if not have_blackjax:
        why = "--skip-blackjax" if args.skip_blackjax else "blackjax or numpyro not installed: the bench extra"
        notes.append(f"BlackJAX MILE skipped ({why}).")
        print(f"blackjax mile: skipped ({why})", flush=True)
    else:
        notes.append(MILE_NOTE)
    if "digits" in args.problems:
        notes.append("digits (digits_mlp, 26k parameters) is included on request; it is slow on a 2-core CPU.")
    missing = [p for p in args.problems if p not in stored_references()]
    if missing:  # scored on their own (LPPD, accuracy or RMSE, ECE, mixing), not against a reference
        notes.append(f"no stored reference for {', '.join(missing)} (benchmarks/build_references.py): "
                     "`agreement`, `tv` and `w2` are not scored there.")
    info = machine(args.device)
    info["threads"] = 1
    info["cores"] = cores
    info["nice"] = os.nice(0) if hasattr(os, "nice") else 0
    payload = {"name": name, "machine": info, "settings": settings(args), "notes": notes,
               "tasks": {p: zoo.get(PROBLEMS[p]).likelihood.task for p in args.problems}}
    old = args.out / f"{name}.json"
    rows = []
    if old.exists():
        previous = json.loads(old.read_text())
        reused = reusable_rows(previous, args)
        if reused is not None:
            rows = reused
            kept = [n for n in previous.get("notes") or [] if n not in notes and not n.startswith(STALE_NOTES)]
            payload["notes"] = notes + kept  # the notes written by hand on the rows kept stay with them
            payload["tasks"] = {**previous.get("tasks", {}), **payload["tasks"]}  # the problems not run now too
            for key in ("mile", "mile_versions"):
                if key in previous:
                    payload[key] = previous[key]
    if have_blackjax and "blackjax mile" in selected:
        import blackjax
        import jax

        payload["mile"] = dataclasses.asdict(MILE)
        payload["mile_versions"] = {"blackjax": blackjax.__version__, "jax": jax.__version__,
                                    "jax_device": str(jax.devices()[0])}
    done = {(r["problem"], r["method"], r["seed"]) for r in rows}
    for problem in args.problems:
        reference = load_reference(problem) if problem not in missing else None
        load(problem, seed=0)  # the data set's checks before anything runs
        for seed in args.seeds:
            members_run = None
            others = [m for m, have in (("ensemble", True), ("numpyro nuts", have_numpyro),
                                        ("blackjax mile", have_blackjax)) if have and m in selected]
            # the engines run first, so that the other rows take their members rather than fitting them again
            for engine in sorted(BNNZOO_ENGINES, key=lambda e: f"bnnzoo {e}" not in selected):
                need_members = members_run is None and any((problem, m, seed) not in done for m in others)
                if (problem, f"bnnzoo {engine}", seed) in done or f"bnnzoo {engine}" not in selected:
                    if need_members:  # the members alone (they depend on the seed only), for the other rows
                        members_run = bnnzoo_run(problem, engine, seed, args, 1, warmup=1)
                    continue
                row, result = bnnzoo_rows(problem, engine, seed, args, reference, draw_cap(args))
                members_run = members_run or result
                if (problem, row["method"], seed) not in done:
                    rows.append(row)
                    done.add((problem, row["method"], seed))
                    write(args.out, name, rows, payload, tables)
                    print(f"{problem} seed {seed} {row['method']}: lppd {row['lppd']:.4f}, tv {row['tv']:.4f}, "
                          f"R-hat within {row['rhat_f_within']:.3f}, {row['grad_total']} grads, "
                          f"{row['wall_s']:.1f} s", flush=True)
            if members_run is None:
                continue
            extra = [("ensemble", lambda: ensemble_row(members_run, problem, seed, reference)),
                     ("numpyro nuts", lambda: numpyro_row(problem, seed, args, reference, members_run)),
                     ("blackjax mile", lambda: mile_row(problem, seed, args, reference, members_run))]
            for method, make in extra:
                if method not in others or (problem, method, seed) in done:
                    continue
                row = make()
                rows.append(row)
                done.add((problem, method, seed))
                write(args.out, name, rows, payload, tables)
                print(f"{problem} seed {seed} {method}: lppd {row['lppd']:.4f}, tv {row['tv']:.4f}, "
                      f"{row['grad_total']} grads, {row['wall_s']:.1f} s", flush=True)
    write(args.out, name, rows, payload, tables)
    return rows


if __name__ == "__main__":
    main()
