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


# ------------------------------------------------- a budget counted while the chains run
BUDGETED = dict(num_samples=400, warmup_steps=200, num_chains=4, seed=0, progress=False)


def _cumulative(stats: dict, per_step: float) -> np.ndarray:
    return np.cumsum(np.asarray(stats["n_steps"]).sum(axis=0) * per_step)


@pytest.mark.parametrize("engine", ["mams", "chees"])
def test_warmup_ends_at_its_share_and_sampling_where_the_budget_runs_out(engine):
    """Adaptive trajectories: warm-up ends at the transition that spends half of the budget, and no
    draw runs after the one that passes it (that one is dropped)."""
    budget = 20000
    r = run(zoo.cosine_mlp(hidden=4), "cosine", engine=engine, budget=budget, **BUDGETED)
    note, per_step = r.notes["budget"], r.notes.get("gradients_per_step", 1)
    warm = _cumulative(r.warmup_sample_stats, per_step)
    assert len(warm) == note["warmup_ended_at"] < 200
    assert warm[-2] < budget / 2 <= warm[-1] == r.grad_evals["warmup"]
    assert r.grad_evals["total"] <= budget < r.grad_evals["total"] + note["grad_evals_dropped"]
    assert note["draws_dropped"] == 1 and note["draws_kept"] == r.num_draws
    assert note["draws_kept"] + note["draws_dropped"] + note["draws_not_run"] == 400
    assert r.options["warmup_budget"] == 0.5
    from bnnzoo.experiments.report import _verdicts

    line = next(v for v in _verdicts(r) if v.startswith("Gradient evaluations"))
    assert f"warm-up ended at its share after {note['warmup_ended_at']} iterations" in line
    assert f"{400 - note['draws_kept']} draws past it dropped or not run" in line


def test_the_draws_a_budget_keeps_are_those_of_the_run_without_it():
    """Stopping sampling in the loop keeps the draws that cutting afterwards kept."""
    settings = dict(engine="mams", num_samples=60, warmup_steps=40, num_chains=2, seed=3, progress=False)
    full = run(zoo.cosine_mlp(hidden=4), "cosine", **settings)
    per_step = full.notes["gradients_per_step"]
    spent = full.grad_evals["warmup"] + _cumulative(full.sample_stats, per_step)
    budget = int(spent[24]) + 1  # 25 draws fit, the 26th passes it
    cut = run(zoo.cosine_mlp(hidden=4), "cosine", budget=budget, warmup_budget=1.0, **settings)
    assert cut.num_draws == 25 and cut.notes["budget"]["draws_not_run"] == 60 - 26
    assert "warmup_ended_at" not in cut.notes["budget"]
    for site, draws in cut.samples.items():
        np.testing.assert_array_equal(draws, full.samples[site][:, :25], err_msg=site)


def test_a_budgeted_run_stopped_and_resumed_gives_the_same_draws(tmp_path, monkeypatch):
    """Stopped at a save after warm-up ended early, then resumed: the same draws, warm-up's end kept."""
    from bnnzoo.inference.checkpoint import Checkpoint

    settings = dict(engine="mams", budget=6000, num_samples=100, warmup_steps=100, num_chains=2, seed=1,
                    progress=False)
    want = run(zoo.cosine_mlp(hidden=3), "cosine", **settings)
    ended = want.notes["budget"]["warmup_ended_at"]
    save, saves = Checkpoint.save, []

    def stopping_save(self, state, **progress):
        save(self, state, **progress)
        saves.append(1)
        if len(saves) == ended + 3:  # three draws after warm-up ended
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", stopping_save)
    with pytest.raises(KeyboardInterrupt):
        run(zoo.cosine_mlp(hidden=3), "cosine", **settings, checkpoint=tmp_path, checkpoint_every=1)
    monkeypatch.setattr(Checkpoint, "save", save)
    got = run(zoo.cosine_mlp(hidden=3), "cosine", **settings, checkpoint=tmp_path, resume=True, checkpoint_every=1)
    assert got.notes["budget"] == want.notes["budget"]
    for site, draws in want.samples.items():
        np.testing.assert_array_equal(got.samples[site], draws, err_msg=site)


def test_a_fixed_cost_warmup_is_planned_to_its_share_of_the_budget():
    """mclmc's transitions cost steps_per_draw integrator steps: its warm-up is planned to the
    iterations its share pays for (once the members are fitted), so its last phase (L from the
    draws) runs instead of being stopped by the budget, and sampling gets the rest."""
    budget, share, chains, cost = 30000, 0.75, 4, 3 * 2  # 3 steps a draw, 2 gradients a step
    r = run(zoo.cosine_mlp(hidden=4), "cosine", engine="mclmc", warm_start="ensemble", num_members=2,
            chains_per_member=2, budget=budget, warmup_budget=share, steps_per_draw=3, num_samples=10_000,
            warmup_steps=10_000, seed=0, progress=False)
    note, members = r.notes["budget"], r.grad_evals["members"]
    planned = int(share * (budget - members) // (chains * cost))
    assert note["warmup_planned"] == planned == r.warmup_sample_stats["n_steps"].shape[1]
    assert "warmup_ended_at" not in note and r.grad_evals["warmup"] == planned * chains * cost
    assert r.grad_evals["total"] <= budget < r.grad_evals["total"] + chains * cost
    stats = r.warmup_sample_stats["L"][0]
    assert stats[-1] != stats[-2]  # L set from the last phase's draws at warm-up's last iteration
    from bnnzoo.experiments.report import _budget_words

    assert f"warm-up planned to the {planned} iterations its share pays for" in _budget_words(note)
