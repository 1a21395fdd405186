"""Nested R-hat: near 1 for chains from one distribution, above it when superchains disagree,
and the formula by hand."""

import math

import numpy as np
import pytest

from bnnzoo.diagnostics.nested_rhat import nested_rhat


def test_formula_by_hand():
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(8, 5))
    groups = [[0, 1], [2, 3], [4, 5], [6, 7]]
    means = draws.mean(1)
    b = np.var([means[g].mean() for g in groups], ddof=1)
    w = np.mean([np.var(means[g], ddof=1) + draws[g].var(1, ddof=1).mean() for g in groups])
    assert nested_rhat(draws) == pytest.approx(math.sqrt(1 + b / w))


def test_many_short_chains_of_one_distribution_pass_and_a_stuck_superchain_fails():
    rng = np.random.default_rng(1)
    good = rng.normal(size=(64, 10))  # 64 chains of 10 iid draws: split R-hat's territory is thin
    assert nested_rhat(good) < 1.01
    bad = good.copy()
    bad[:16] += 2.0  # the first superchain sits in another mode: B ~ var(2, 0, 0, 0) = 1, W ~ 1
    assert nested_rhat(bad) > 1.2


def test_elementwise_and_nan_when_too_few_chains_or_constant():
    rng = np.random.default_rng(2)
    draws = rng.normal(size=(16, 20, 3))
    assert nested_rhat(draws).shape == (3,)
    assert math.isnan(nested_rhat(rng.normal(size=(6, 20))))  # fewer than 2 chains per superchain
    assert math.isnan(nested_rhat(np.ones((8, 20))))
    with pytest.raises(ValueError, match="chain, draw"):
        nested_rhat(np.ones(5))
