"""Gradient evaluations per stage and the gradient budget (inference/budget.py)."""

import numpy as np
import pytest

from bnnzoo.inference import run
from bnnzoo.inference.budget import plan_samples, stage_grad_evals, truncate
from bnnzoo.models import zoo
from bnnzoo.results import Draws

FAST = {"num_epochs": 5, "batch_size": 10}


def test_the_stages_sum_to_the_run(cosine):
    result = run(zoo.cosine_mlp(hidden=4), cosine, engine="fixed_hmc", warm_start="ensemble", num_members=2,
                 ensemble=FAST, num_samples=5, warmup_steps=4, step_size=1e-3, num_steps=3, progress=False)
    evals = result.grad_evals
    assert evals["members"] == sum(m.grad_evals for m in result.members) == 2 * 5 * 3
    assert evals["warmup"] == 2 * 4 * 3 and evals["sampling"] == 2 * 5 * 3
    assert evals["total"] == evals["members"] + evals["warmup"] + evals["sampling"]
    assert result.notes["grad_evals"] == evals


def test_a_fixed_cost_engine_gets_the_draws_its_budget_pays_for(cosine):
    members, chains, warmup, steps = 2 * 5 * 3, 2, 4, 3
    budget = members + chains * warmup * steps + chains * steps * 7 + 1
    result = run(zoo.cosine_mlp(hidden=4), cosine, engine="fixed_hmc", warm_start="ensemble", num_members=2,
                 ensemble={**FAST, "patience": None}, warmup_steps=warmup, step_size=1e-3, num_steps=steps,
                 budget=budget, progress=False)
    assert result.num_draws == 7 and result.options["num_samples"] == 7
    assert result.grad_evals["total"] <= budget and result.notes["budget"]["draws_dropped"] == 0


def test_adaptive_trajectories_are_cut_where_the_budget_runs_out():
    steps = np.array([[3, 5, 7, 9], [1, 1, 1, 1]])  # [chain, draw] leapfrog steps
    draws = Draws({"w": np.zeros((2, 4))}, {"n_steps": steps}, {"n_steps": np.full((2, 2), 10)})
    assert stage_grad_evals(draws, 6) == {"members": 6, "warmup": 40, "sampling": 28, "total": 74}
    note = truncate(draws, budget=46 + 4 + 6, spent=46)  # draws cost 4, 6, 8, 10: two fit in 10
    assert note == {"budget": 56, "draws_kept": 2, "draws_dropped": 2, "grad_evals_dropped": 18, "exceeded": False}
    assert draws.samples["w"].shape == (2, 2) and draws.sample_stats["n_steps"].shape == (2, 2)


def test_budget_plans_refuse_by_name():
    assert plan_samples(1000, 100, 10, 2, 500, (5.0, 5.0)) == (1000 - 100 - 2 * 10 * 5) // (2 * 5)
    assert plan_samples(1000, 100, 10, 2, 500, None) == 500
    with pytest.raises(ValueError, match=r"^budget=100: the ensemble members alone"):
        plan_samples(100, 100, 10, 2, 500, None)
    with pytest.raises(ValueError, match=r"^budget=200: members \(100\) and warm-up"):
        plan_samples(200, 100, 10, 2, 500, (5.0, 5.0))
    with pytest.raises(ValueError, match=r"^budget: engine 'rwmh' takes no gradients"):
        run("cosine_mlp", "cosine", engine="rwmh", budget=100)


def test_an_integration_step_of_the_microcanonical_samplers_costs_its_gradients():
    r = run("cosine_mlp", "cosine", engine="mams", num_samples=4, warmup_steps=8, num_chains=2, seed=0, progress=False)
    assert r.notes["gradients_per_step"] == 2  # the minimal-norm integrator
    steps = r.sample_stats["n_steps"].sum()
    assert r.grad_evals["sampling"] == 2 * steps
