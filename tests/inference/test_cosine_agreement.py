"""The many-chain HMC on a real BNN posterior with no closed form: on the cosine
MLP its posterior predictive mean (and spread) agree with a long NUTS run.

Weights are not identifiable (permutations, sign flips), so the comparison is
in function space: ``E[y | x*, theta]`` at test inputs, per draw."""

import numpy as np
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.diagnostics import function_draws
from bnnzoo.inference import run
from bnnzoo.models import zoo
from tests.support.targets import assert_moments_agree

X_TEST = torch.linspace(0.0, 4.0, 9).unsqueeze(-1)


@pytest.mark.slow
def test_chees_predictive_mean_agrees_with_long_nuts_on_cosine_mlp():
    spec = zoo.get("cosine_mlp", hidden=10)
    data = load("cosine", seed=0)
    nuts = run(spec, data, engine="nuts", num_samples=800, warmup_steps=300, num_chains=2, seed=1,
               max_tree_depth=8)
    chees = run(spec, data, engine="chees", num_samples=200, warmup_steps=300, num_chains=16, seed=2)
    reference = function_draws(nuts, X_TEST)
    draws = function_draws(chees, X_TEST)
    assert np.isfinite(draws).all() and np.isfinite(reference).all()
    assert_moments_agree(draws, reference, min_ess=150)
