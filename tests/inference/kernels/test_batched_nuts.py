"""BatchedNUTS: a known correlated Gaussian, the tree statistics, per-chain and pooled warm-up."""

import numpy as np
import pytest

from bnnzoo.inference import BatchedNUTS
from bnnzoo.inference.kernels import nuts
from tests.support.targets import assert_gaussian, gaussian_target, run_kernel

MEAN = np.array([1.0, -2.0, 0.5])
# correlated and badly scaled (sds 0.1 to 3): the mass matrix and the U-turn both matter
SD = np.array([0.1, 1.0, 3.0])
CORR = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, -0.4], [0.0, -0.4, 1.0]])
COV = CORR * np.outer(SD, SD)


@pytest.mark.parametrize("recursive", [False, True], ids=["two-pass", "recursive"])
@pytest.mark.parametrize("pool_chains", [False, True], ids=["per-chain", "pooled"])
def test_correlated_gaussian_moments(pool_chains, recursive, monkeypatch):
    if recursive:  # every sub-tree too large for the two-pass build: the recursive one
        monkeypatch.setattr(nuts, "BLOCK_ELEMENTS", 0)
    _, draws = run_kernel(BatchedNUTS, gaussian_target(MEAN, COV), num_chains=4, num_samples=500,
                          warmup_steps=300, seed=2, pool_chains=pool_chains)
    assert_gaussian(np.asarray(draws.samples["x"]), MEAN, COV)


@pytest.mark.parametrize("recursive", [False, True], ids=["two-pass", "recursive"])
def test_tree_statistics_are_consistent(recursive, monkeypatch):
    if recursive:
        monkeypatch.setattr(nuts, "BLOCK_ELEMENTS", 0)
    depth_cap = 3
    kernel, draws = run_kernel(BatchedNUTS, gaussian_target(MEAN, COV), num_chains=3, num_samples=200,
                               warmup_steps=100, seed=0, max_tree_depth=depth_cap)
    stats = draws.sample_stats
    depth, steps, capped = stats["tree_depth"], stats["n_steps"], stats["reached_max_tree_depth"]
    assert depth.shape == steps.shape == (3, 200)
    assert ((depth >= 1) & (depth <= depth_cap)).all()
    # a tree of depth d has at most 2^d - 1 leapfrog steps, and more than its previous doublings
    assert (steps <= 2 ** depth - 1).all() and (steps >= 2 ** (depth - 1)).all()
    # stopped at the cap (not at a U-turn or a divergence): the full tree was built
    assert (depth[capped] == depth_cap).all() and (steps[capped] == 2 ** depth_cap - 1).all()
    assert 0.0 < capped.mean() < 1.0
    accept = stats["acceptance_rate"]
    assert ((accept >= 0) & (accept <= 1)).all()
    # energy is H at the chosen state: energy_error is 0 exactly where the chain stayed
    assert np.isfinite(stats["energy"]).all()


def test_pooled_warmup_by_default_and_each_chain_its_own_on_request():
    target = gaussian_target(MEAN, COV)
    per_chain, _ = run_kernel(BatchedNUTS, target, num_chains=4, num_samples=5, warmup_steps=400, seed=1,
                              pool_chains=False)
    pooled, _ = run_kernel(BatchedNUTS, target, num_chains=4, num_samples=5, warmup_steps=400, seed=1)
    steps = per_chain.diagnostics()["step_size"]
    assert len(set(np.round(steps, 12))) == 4, steps
    assert len(set(np.round(pooled.diagnostics()["step_size"], 12))) == 1
    assert len({tuple(row) for row in np.round(pooled.diagnostics()["inverse_mass_matrix"], 12)}) == 1
    # each chain's own mass from the last window's 100 draws (effective draws about 50: a relative
    # sd of the variance estimate of about 0.2): within a factor 2 of the target's variances
    inv_mass = per_chain.diagnostics()["inverse_mass_matrix"]
    assert inv_mass.shape == (4, 3)
    assert np.all(np.abs(np.log(inv_mass / SD ** 2)) < np.log(2.0)), inv_mass / SD ** 2
