"""Magnitude pruning (paper 001, Algorithm 1): the schedule and the mask as pure
functions; inside SGLD, SGHMC and SGLD-SA the target sparsity is reached and
pruned weights stay exactly zero; bad options."""

import math
import re

import numpy as np
import pytest
import torch

from bnnzoo.inference import BNNPotential, run
from bnnzoo.inference.pruning import MagnitudePruning, prune_mask, target_sparsity
from bnnzoo.models import BNN, BNNSpec, Dense, Gaussian, GaussianLikelihood, SpikeAndSlab


def test_target_sparsity_schedule():
    assert target_sparsity(0, 0.9) == 0.0
    assert target_sparsity(50, 0.9) == pytest.approx(0.9 * 0.01)  # S (1 - D^(k/U)), D = 0.99, U = 50
    assert target_sparsity(50 * 300, 0.9) == pytest.approx(0.9 * (1 - 0.99**300))
    values = [target_sparsity(k, 0.5, decay=0.9, period=2) for k in range(200)]
    assert all(a < b for a, b in zip(values, values[1:])) and values[-1] == pytest.approx(0.5, abs=1e-4)


def test_prune_mask_removes_the_smallest_and_never_shrinks():
    w = torch.tensor([[0.5, -0.1, 2.0, 0.05, -3.0, 0.2]])
    keep = torch.ones_like(w, dtype=torch.bool)
    keep = prune_mask(w, keep, 2)
    assert keep.tolist() == [[True, False, True, False, True, True]]
    # a pruned weight stays pruned even if it would now be large
    w2 = torch.tensor([[0.5, 9.0, 2.0, 9.0, -3.0, 0.2]])
    keep = prune_mask(w2, keep, 3)
    assert keep.tolist() == [[True, False, True, False, True, False]]
    assert prune_mask(w2, keep, 0).equal(keep)
    # chains are pruned independently
    both = prune_mask(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]), torch.ones(2, 3, dtype=torch.bool), 1)
    assert both.tolist() == [[False, True, True], [True, True, False]]


def _mlp():
    return BNNSpec(layers=[Dense(10, "tanh"), Dense(1)], input_dim=8, prior=Gaussian(1.0),
                   likelihood=GaussianLikelihood(0.3))


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 8, generator=g)
    return x, torch.tanh(x[:, :2].sum(-1)) + 0.3 * torch.randn(60, generator=g)


def _assert_pruned(weights: np.ndarray, sparsity: float):
    """``weights [chain, draw, ...]``: the last draw has round(S n) zeros per chain, and a
    weight that is zero at some draw is zero at every later draw."""
    flat = weights.reshape(weights.shape[:2] + (-1,))
    n = flat.shape[-1]
    zero = flat == 0
    assert (zero[:, -1].sum(-1) == math.floor(sparsity * n + 0.5)).all()
    assert not (zero[:, :-1] & ~zero[:, 1:]).any(), "a pruned weight came back"


@pytest.mark.parametrize("engine, options", [
    ("sgld", {"step_size": 1e-4}),
    ("sghmc", {"step_size": 1e-5, "friction": 0.1}),
], ids=["sgld", "sghmc"])
def test_pruning_reaches_its_target_and_pruned_weights_stay_zero(engine, options):
    x, y = _data()
    r = run(_mlp(), (x, y), engine=engine, num_samples=60, warmup_steps=200, num_chains=2, seed=0, batch_size=20,
            prune=0.7, prune_decay=0.5, prune_period=10.0, **options)
    for site in ("layers.0.weight", "layers.1.weight"):  # default: every weight, each layer on its own
        _assert_pruned(r.samples[site], 0.7)
    assert (r.samples["layers.0.bias"] != 0).all()  # biases are not pruned
    assert r.sample_stats["sparsity"][:, -1] == pytest.approx(0.7, abs=0.05)
    assert np.all(np.diff(r.sample_stats["sparsity"], axis=1) >= 0)
    masks = r.pruning_mask
    np.testing.assert_array_equal(masks["layers.0.weight"], r.samples["layers.0.weight"][:, -1] != 0)


def test_pruning_in_sgld_sa_acts_on_the_sparse_layers():
    x, y = _data(1)
    spec = BNNSpec(layers=[Dense(10, "tanh"), Dense(1)], input_dim=8, prior=Gaussian(1.0),
                   priors={"layers.0.weight": SpikeAndSlab()}, likelihood=GaussianLikelihood("learned"))
    r = run(spec, (x, y), engine="sgld_sa", num_samples=40, warmup_steps=150, num_chains=2, seed=0,
            step_size=1e-4, batch_size=20, prune=0.5, prune_decay=0.5, prune_period=10.0)
    _assert_pruned(r.samples["layers.0.weight"], 0.5)
    assert (r.samples["layers.1.weight"] != 0).all()
    np.testing.assert_allclose(r.sample_stats["sparsity"][:, -1], 0.5)
    # a pruned weight is all spike: its inclusion probability has gone down
    rho = r.inclusion_prob["layers.0.weight"]
    pruned = r.samples["layers.0.weight"][:, -1] == 0
    assert rho[pruned].mean() < rho[~pruned].mean()


@pytest.mark.parametrize("kwargs, message", [
    ({"sparsity": 1.0}, "sparsity must be in"),
    ({"sparsity": -0.1}, "sparsity must be in"),
    ({"sparsity": 0.5, "decay": 1.0}, "decay must be in"),
    ({"sparsity": 0.5, "period": 0}, "period must be a positive number"),
])
def test_bad_pruning_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MagnitudePruning(**kwargs)


def test_unknown_pruning_site():
    x, y = _data()
    potential = BNNPotential(BNN(_mlp()), x, y)
    with pytest.raises(ValueError, match="unknown site"):
        MagnitudePruning(0.5, sites=("layers.7.weight",)).bind(potential, 1)
    with pytest.raises(ValueError, match=re.escape("engine 'sgld': prune must be in [0, 1), got 1.5")):  # the option
        run(_mlp(), (x, y), engine="sgld", num_samples=2, warmup_steps=0, prune=1.5)
