r"""Published pipelines as :func:`~bnnzoo.inference.run` keywords.

:func:`mile`: Microcanonical Langevin Ensembles (Sommer, Robnik, Nozadze, Seljak and Rügamer, ICLR
2025): a deep ensemble, one unadjusted MCLMC chain from each member, tuned for most of a gradient
budget at a large energy error and thinned. On bnnzoo's kernels and any prior::

    from bnnzoo.inference import recipes, run
    r = run("digits_mlp", "digits", **recipes.mile(budget=300_000, num_members=4))

How its draws compare with BlackJAX running MILE's settings from the same members, and with
``mams``, is in ``benchmarks/results/drift_digits32_recipe.md`` (``benchmarks/bench_drift.py``).
"""

from __future__ import annotations

from typing import Any

from .. import validation
from .isokinetic import GRADIENTS_PER_STEP

__all__ = ["MILE_TUNING_SHARE", "mile"]

#: MILE's tuning share of the sampler's steps: 50 000 tuning to 10 000 sampling integration steps
MILE_TUNING_SHARE = 50_000 / 60_000


def mile(budget: int, num_members: int = 12, chains_per_member: int = 1, desired_energy_var: float = 0.15,
         steps_per_draw: int = 10, start_energy_var: float | None = 0.5) -> dict[str, Any]:
    r"""``run()`` keywords for MILE's pipeline at a gradient ``budget`` (members, tuning and sampling).

    What MILE's public code runs, as bnnzoo's options (``docs/guide/posteriors.md``, "MILE's recipe"):

    * ``num_members`` deep-ensemble members (MILE: 12), ``chains_per_member`` MCLMC chains started
      at each (MILE: 1); the members are bnnzoo's (``ensemble`` options: AdamW on minibatches, a
      validation split, early stopping), not MILE's learning rates;
    * ``engine="mclmc"`` with the minimal-norm integrator, no diagonal preconditioner, the step
      size tuned to an energy-error variance per dimension that moves from ``start_energy_var``
      (0.5) to ``desired_energy_var`` over the first 60% of tuning (``start_energy_var=None``:
      ``desired_energy_var`` throughout), and L from the effective sample size of the last tuning
      draws (from :math:`\sqrt d` until then; MILE sets it from the chain's variances first);
    * tuning takes :data:`MILE_TUNING_SHARE` (5/6) of what the members leave of the budget
      (``warmup_budget``); sampling the rest, one draw every ``steps_per_draw`` integration steps.

    **Why 0.15, where MILE's paper says 0.1.** MILE's tuning comes down to 0.1 in eight stairs over
    its first 80% and tunes its last step-size phase at about 0.12. At 0.1 the step came out shorter
    than MILE's median and the test LPPD lower on ``digits_mlp``, whether the chains shared one step
    size or each tuned its own as MILE's code does (``pool_chains=False``: the same median step); at
    0.15 it matched MILE's step and LPPD (``benchmarks/results/drift_digits128_recipe*.md``; the
    performance page, "Optimise, then sample on digits").

    ``num_samples`` and ``warmup_steps`` are the most that the budget could pay for; the run plans
    its warm-up to its share once the members are fitted, and samples to the end of the budget.
    """
    validation.integer("budget", budget, 1)
    validation.integer("num_members", num_members, 1)
    validation.integer("chains_per_member", chains_per_member, 1)
    validation.integer("steps_per_draw", steps_per_draw, 1)
    validation.positive("desired_energy_var", desired_energy_var)
    if start_energy_var is not None:
        validation.positive("start_energy_var", start_energy_var)
    per_draw = num_members * chains_per_member * steps_per_draw * GRADIENTS_PER_STEP["mclachlan"]
    most = budget // per_draw + 1
    return {"engine": "mclmc", "warm_start": "ensemble", "num_members": num_members,
            "chains_per_member": chains_per_member, "budget": budget, "warmup_budget": MILE_TUNING_SHARE,
            "num_samples": most, "warmup_steps": most, "integrator": "mclachlan",
            "desired_energy_var": desired_energy_var, "start_energy_var": start_energy_var,
            "diagonal_preconditioning": False,
            "steps_per_draw": steps_per_draw}
