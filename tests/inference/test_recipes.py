"""Published pipelines as run() keywords (inference/recipes.py)."""

import pytest

from bnnzoo.inference import recipes, run
from bnnzoo.models import zoo


def test_mile_runs_an_ensemble_started_mclmc_to_the_end_of_its_budget():
    """MILE's keywords: one thinned, unpreconditioned MCLMC chain a member; warm-up planned to its
    5/6 share of what the members leave, sampling to the end of the budget."""
    budget = 24_000
    keywords = recipes.mile(budget, num_members=2)
    r = run(zoo.cosine_mlp(hidden=4), "cosine", **keywords, seed=0, progress=False)
    assert r.engine == "mclmc" and r.num_chains == 2 and len(r.members) == 2
    note, spent = r.notes["budget"], r.grad_evals
    per_iteration = 2 * 10 * 2  # chains x steps a draw x gradients a step
    assert note["warmup_planned"] == int(5 / 6 * (budget - spent["members"]) // per_iteration)
    assert spent["warmup"] == note["warmup_planned"] * per_iteration
    assert spent["total"] <= budget < spent["total"] + per_iteration
    assert r.options["diagonal_preconditioning"] is False and r.options["desired_energy_var"] == 0.15
    assert r.options["start_energy_var"] == 0.5
    assert float(r.sample_stats["n_steps"].min()) == 10


@pytest.mark.parametrize("field, value", [("budget", 0), ("num_members", 0), ("chains_per_member", 1.5),
                                          ("steps_per_draw", 0), ("desired_energy_var", -0.1),
                                          ("start_energy_var", 0.0)])
def test_mile_refuses_bad_input_by_name(field, value):
    kwargs = {"budget": 10_000, field: value}
    with pytest.raises(ValueError, match=f"^{field} must be"):
        recipes.mile(**kwargs)
