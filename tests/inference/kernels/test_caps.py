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


def test_mams_says_when_its_L_asks_for_trajectories_past_max_steps(tmp_path):
    """A tuned L longer than max_steps integrator steps is said in ``Run.notes["trajectory_cap"]``
    (the share of jittered trajectories cut at the cap) and in the report; a run within the cap says nothing."""
    import torch

    from bnnzoo.experiments.report import _verdicts
    from bnnzoo.inference.kernels.mams import MAMSParams, trajectory_cap

    scale = torch.ones(3)
    assert trajectory_cap(MAMSParams(0.5, 200.0, scale), 1024) is None  # 400 steps: up to 800, none cut
    words = trajectory_cap(MAMSParams(0.5, 300.0, scale), 1024)  # 600 steps: up to 1200, 1 - 1024/1200 cut
    assert words.startswith("L = 300 is 600 integrator steps of the step size 0.5, so 15% of the trajectories "
                            "are cut at max_steps=1024") and "warm-up measured" not in words
    assert "(warm-up measured 5000 steps and held L at the cap)" in trajectory_cap(MAMSParams(0.5, 512.0, scale),
                                                                                   1024, measured_steps=5000.0)
    assert trajectory_cap(MAMSParams(0.5, 300.0, scale), 1024, jitter=False) is None  # 600 steps, none cut
    capped = run(MODEL, "cosine", engine="mams", max_steps=2, L=5.0, adapt_L=False, **SMALL)
    assert "of the trajectories are cut at max_steps=2" in capped.notes["trajectory_cap"]
    assert (capped.sample_stats["n_steps"] <= 2).all()
    assert any(line.startswith("**Cap hits**: mams: L = 5 is ") for line in _verdicts(capped))
    free = run(MODEL, "cosine", engine="mams", **SMALL)
    assert "trajectory_cap" not in free.notes and not any("Cap hits" in line for line in _verdicts(free))
