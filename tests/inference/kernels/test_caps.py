"""A draw's cost is capped (NUTS tree depth, ChEES leapfrog steps) and each draw says whether it hit the cap."""

import numpy as np

from bnnzoo.inference import run
from bnnzoo.models import zoo

MODEL = zoo.cosine_mlp(hidden=3)
SMALL = dict(num_samples=6, warmup_steps=6, num_chains=2, progress=False)


def test_nuts_says_which_draws_stopped_at_the_tree_depth_cap():
    capped = run(MODEL, "cosine", engine="nuts", max_tree_depth=1, **SMALL).sample_stats
    assert capped["reached_max_tree_depth"].dtype == bool and capped["reached_max_tree_depth"].all()
    assert (capped["n_steps"] == 1).all()
    free = run(MODEL, "cosine", engine="nuts", max_tree_depth=10, **SMALL).sample_stats
    np.testing.assert_array_equal(free["reached_max_tree_depth"], free["tree_depth"] >= 10)


def test_chees_says_which_draws_were_cut_at_max_leapfrog_steps():
    capped = run(MODEL, "cosine", engine="chees", max_leapfrog_steps=1, trajectory_length=1.0, **SMALL).sample_stats
    assert capped["reached_max_steps"].all() and (capped["n_steps"] == 1).all()
    free = run(MODEL, "cosine", engine="chees", **SMALL).sample_stats
    assert not free["reached_max_steps"].any() and (free["n_steps"] < 1000).all()
