r"""Gradient evaluations per stage of a run, and the gradient budget (``run(..., budget=G)``).

A *gradient evaluation* is one call of the potential's gradient on one chain's point, on the
full data or on a minibatch alike (so a member's epoch of b minibatches is b evaluations, and
an SG-MCMC iteration one). The stages:

* ``members``: the ensemble warm start's fits, epochs x batches per member, summed;
* ``warmup`` and ``sampling``: per chain and transition the ``n_steps`` statistic (leapfrog
  steps: one gradient each; Pyro's NUTS and HMC, bnnzoo's HMC family and batched NUTS record
  it; the microcanonical samplers' integration steps cost ``notes["gradients_per_step"]`` each; Pyro's kernels count their warm-up steps into ``notes["warmup_grad_evals"]``), summed over
  chains and transitions; an SG-MCMC kernel (no ``n_steps``) one per iteration
  (``thin`` per kept draw; one per draw, a lower bound, where the kernel states no number of
  iterations per draw, as the cyclical group-sparse kernel); a kernel without gradients (random-walk Metropolis) none. The
  kernels' one-off searches during warm-up (the initial step-size search, ChEES's U-turn time,
  proximal HMC's lambda grid) are not in ``n_steps`` and are not counted.

With ``budget=G`` the whole run (members, warm-up and sampling, every chain) spends at most
G evaluations. Before anything runs, the members' most (``members_cost``) plus the warm-up are
compared with G: a budget they exhaust is refused, naming ``budget``. Where a transition's
cost is fixed (``fixed_hmc``, ``proximal_hmc``, Pyro's ``hmc``: ``num_steps``; SG-MCMC: 1 per
iteration), ``num_samples`` is derived from what is left; elsewhere (adaptive trajectories:
``chees``, ``batched_nuts``, ``nuts`` and engines added later) ``num_samples`` is the most draws,
and the draws after the one at which the cumulative count passes G are dropped
(:func:`truncate`; ``Run.notes["budget"]`` says how many and what they cost).

Where the chains advance as one batch (``chain_method="vectorized"``, the default) the budget is
also counted while the kernel runs (:class:`BudgetMeter`, inside bnnzoo's MCMC loop), so an
adaptive engine's run never goes far past it:

* warm-up ends early once it has spent its share of what the members leave (``warmup_budget``,
  half by default): the adaptation's ``finish`` freezes the parameters there, as its last
  scheduled step would (:meth:`~bnnzoo.inference.kernels.transition.TransitionKernel.end_warmup`),
  so a warm-up whose trajectories grow long (MAMS and ChEES on a large network) cannot spend the
  whole budget;
* sampling stops at the first draw whose cumulative count passes G, instead of running every
  ``num_samples`` draw and dropping those past G afterwards; the draws kept are the same.

Where the transitions' cost is fixed although they are counted as they run (``mclmc``: its
``steps_per_draw`` integrator steps), warm-up is planned, once the members are fitted, to the
iterations its share pays for (:func:`plan_warmup`; ``warmup_planned`` in the note where that is
fewer than ``warmup_steps``), so its adaptation runs every phase instead of being stopped in one.

``Run.notes["budget"]`` then says where warm-up ended (``warmup_ended_at``) and how many draws
were not run (``draws_not_run``). Chains run one after another (``"sequential"``, ``"parallel"``)
keep the after-the-fact cut alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BudgetMeter", "check_budget_engine", "draw_costs", "fixed_cost", "iteration_cost", "plan_samples",
           "plan_warmup", "stage_grad_evals", "truncate"]


def fixed_cost(engine, options: dict[str, Any]) -> tuple[float, float] | None:
    """``(gradients per warm-up transition, per kept draw)`` of one chain where the engine's cost is
    fixed by its options, else None."""
    defaults = {**engine.defaults(), **options}
    kernel = getattr(engine, "kernel", None)
    names = [c.__name__ for c in getattr(kernel, "__mro__", ())]
    if "SGMCMCKernel" in names:
        return 1.0, float(defaults.get("thin", 1))
    if engine.name in ("fixed_hmc", "proximal_hmc") or (engine.name == "hmc" and not defaults.get("trajectory_length")):
        steps = float(defaults["num_steps"])
        return steps, steps
    return None


def iteration_cost(engine, options: dict[str, Any]) -> float | None:
    """Gradients of one chain's transition where the options fix it although the run is counted as
    it runs (``mclmc``: ``steps_per_draw`` integrator steps of the integrator's gradients each), else
    None."""
    if engine.name != "mclmc":
        return None
    from .isokinetic import GRADIENTS_PER_STEP

    defaults = {**engine.defaults(), **options}
    return float(defaults["steps_per_draw"] * GRADIENTS_PER_STEP[defaults["integrator"]])


def plan_warmup(budget: int, spent: int, warmup_steps: int, num_chains: int, share: float, cost: float) -> int:
    """Warm-up iterations of a run whose transitions cost ``cost`` gradients a chain: ``warmup_steps``
    at most, and at most what warm-up's ``share`` of the budget left after ``spent`` (the members')
    pays for, so that the adaptation plans its phases on the iterations that will run instead of
    being stopped within them by the budget; at least one where ``warmup_steps`` asks for any."""
    pays = int(share * max(budget - spent, 0) // (num_chains * cost))
    return min(int(warmup_steps), max(pays, 1 if warmup_steps else 0))


def plan_samples(budget: int, members: int, warmup_steps: int, num_chains: int, num_samples: int,
                 cost: tuple[float, float] | None) -> int:
    """``num_samples`` under ``budget``: refused (a ``ValueError`` naming ``budget``) when the members'
    most and the warm-up leave nothing for one draw; with a fixed ``cost``, the draws that the rest
    pays for; else ``num_samples`` (the most, cut by :func:`truncate`)."""
    left = budget - members
    if left <= 0:
        raise ValueError(f"budget={budget}: the ensemble members alone may take {members} gradient evaluations; "
                         f"raise budget or lower ensemble.num_epochs / num_members")
    if cost is None:
        if left < num_chains * (warmup_steps + 1):
            raise ValueError(f"budget={budget}: after the members' {members}, {left} gradient evaluations do not "
                             f"pay for {warmup_steps} warm-up steps and a draw on {num_chains} chains")
        return num_samples
    warm, draw = cost
    after_warmup = left - num_chains * warmup_steps * warm
    samples = int(after_warmup // (num_chains * draw)) if draw > 0 else num_samples
    if samples < 1:
        raise ValueError(f"budget={budget}: members ({members}) and warm-up ({num_chains} chains x {warmup_steps} "
                         f"steps x {warm:g}) leave {max(after_warmup, 0):g} gradient evaluations, fewer than one "
                         f"draw costs ({num_chains} x {draw:g})")
    return samples


def _per_transition(stats: dict[str, np.ndarray], notes: dict, warmup: bool, kind: str) -> np.ndarray | None:
    """``[chain, draw]`` gradient evaluations of each transition (None: no draws)."""
    if not stats:
        return None
    shape = np.asarray(next(iter(stats.values()))).shape[:2]
    if "n_steps" in stats:  # integration steps, each gradients_per_step gradients (2 for the minimal-norm scheme)
        return np.asarray(stats["n_steps"], dtype=np.float64).reshape(shape) * notes.get("gradients_per_step", 1)
    if kind == "sgmcmc":
        per = notes.get("iterations_per_draw", 1)
        per = 1.0 if warmup or not isinstance(per, (int, float)) else float(per)
        return np.full(shape, per)
    return np.zeros(shape)


def _kind(draws) -> str:
    stats = draws.sample_stats or draws.warmup_sample_stats or {}
    if "n_steps" in stats:
        return "hmc"
    if "acceptance_rate" not in stats and "temperature" in stats or "iterations_per_draw" in (draws.notes or {}):
        return "sgmcmc"
    return "none"


def draw_costs(draws) -> np.ndarray:
    """``[draw]`` gradient evaluations of each kept draw, summed over chains."""
    per = _per_transition(draws.sample_stats, draws.notes or {}, False, _kind(draws))
    return np.zeros(draws.num_draws) if per is None else per.sum(axis=0)


def stage_grad_evals(draws, members: int = 0) -> dict[str, int]:
    """``{"members", "warmup", "sampling", "total"}`` gradient evaluations of a finished run."""
    kind = _kind(draws)
    out = {"members": int(members)}
    for stage, stats, warm in (("warmup", draws.warmup_sample_stats, True), ("sampling", draws.sample_stats, False)):
        per = _per_transition(stats, draws.notes or {}, warm, kind)
        out[stage] = 0 if per is None else int(round(float(per.sum())))
        if per is None and warm:  # Pyro's NUTS/HMC: the warm-up's leapfrog steps, counted by the kernel
            out[stage] = int((draws.notes or {}).get("warmup_grad_evals", 0))
    out["total"] = out["members"] + out["warmup"] + out["sampling"]
    return out


def truncate(draws, budget: int, spent: int) -> dict[str, Any]:
    """Keep the draws whose cumulative gradient evaluations, after ``spent`` (members and warm-up),
    stay within ``budget``; at least one draw is kept. Cuts ``draws.samples`` and
    ``draws.sample_stats`` in place; returns the note for ``Run.notes["budget"]``."""
    costs = draw_costs(draws)
    total = spent + np.cumsum(costs)
    keep = max(1, int(np.searchsorted(total, budget, side="right")))
    keep = min(keep, draws.num_draws)
    note = {"budget": int(budget), "draws_kept": keep, "draws_dropped": int(draws.num_draws - keep),
            "grad_evals_dropped": int(round(float(costs[keep:].sum())))}
    if keep < draws.num_draws:
        draws.samples = {k: v[:, :keep] for k, v in draws.samples.items()}
        draws.sample_stats = {k: v[:, :keep] for k, v in draws.sample_stats.items()}
    note["exceeded"] = bool(spent + costs[:keep].sum() > budget)
    return note


def check_budget_engine(engine) -> None:
    """A budget needs an engine that takes gradients."""
    if engine.name == "rwmh":
        raise ValueError("budget: engine 'rwmh' takes no gradients; give num_samples instead")
    if getattr(engine, "kind", "mcmc") != "mcmc":
        raise ValueError(f"budget: engine {engine.name!r} is not an MCMC engine; give its num_steps instead")



class BudgetMeter:
    """A gradient budget counted inside bnnzoo's MCMC loop (module docstring): after each transition
    of a kernel that records ``n_steps``, :meth:`after` says whether warm-up has spent its share
    (``"end_warmup"``), whether the run has spent the budget (``"stop"``), or neither (None).

    Parameters
    ----------
    budget : int
        Gradient evaluations for the whole run.
    spent : int
        Those spent before the sampler started (the ensemble members').
    warmup_share : float
        The share of ``budget - spent`` that warm-up may spend, in (0, 1].
    """

    def __init__(self, budget: int, spent: int = 0, warmup_share: float = 0.5):
        self.budget, self.spent, self.warmup_share = int(budget), int(spent), float(warmup_share)
        self.warmup_cap = self.spent + self.warmup_share * max(self.budget - self.spent, 0)
        self.per_step, self.warmup, self.sampling = 1.0, 0.0, 0.0
        self.warmup_ended_at: int | None = None  # the warm-up iterations run, where the meter ended warm-up
        self.draws_not_run = 0  # draws asked for but not run, where the meter stopped sampling

    def start(self, kernel, warmup_steps: int) -> None:
        """Before the loop (and on resume): the kernel's gradients per ``n_steps`` unit, what its
        recorded transitions have spent so far, and where a resumed run's warm-up ended (its kernel's
        count, against the ``warmup_steps`` asked for)."""
        self.per_step = float(kernel.notes().get("gradients_per_step", 1))
        if kernel._warmup_steps < warmup_steps:
            self.warmup_ended_at = int(kernel._warmup_steps)
        self.warmup = sum(self._cost(row) for row in kernel._warmup_stats)
        self.sampling = sum(self._cost(row) for row in kernel._stats)

    def _cost(self, row: dict) -> float:
        steps = row.get("n_steps")
        return 0.0 if steps is None else float(np.sum(steps)) * self.per_step

    @property
    def total(self) -> float:
        return self.spent + self.warmup + self.sampling

    def after(self, kernel, warmup: bool) -> str | None:
        """After one transition (``warmup``: a warm-up one): ``"end_warmup"``, ``"stop"`` or None."""
        rows = kernel._warmup_stats if warmup else kernel._stats
        if not rows:
            return None
        if warmup:
            self.warmup += self._cost(rows[-1])
            return "end_warmup" if self.total >= min(self.warmup_cap, self.budget) else None
        self.sampling += self._cost(rows[-1])
        return "stop" if self.total >= self.budget else None

    def note(self) -> dict[str, Any]:
        """What the meter changed, for ``Run.notes["budget"]``."""
        out: dict[str, Any] = {}
        if self.warmup_ended_at is not None:
            out["warmup_ended_at"] = int(self.warmup_ended_at)
        if self.draws_not_run:
            out["draws_not_run"] = int(self.draws_not_run)
        return out
