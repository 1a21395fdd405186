r"""Nested R-hat (Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari and Gelman, 2022), for
many short chains.

Split R-hat asks each chain to have forgotten its start, which a many-chain sampler's
short chains (ChEES: tens of draws each) cannot show. Nested R-hat groups the C chains
into K superchains of M chains (here: consecutive chains, :func:`numpy.array_split`)
and compares the superchains, whose means average M chains:

.. math::
    \tilde B = \frac{1}{K - 1}\sum_k (\bar\theta_{\cdot\cdot k} - \bar\theta_{\cdot\cdot\cdot})^2,\qquad
    \tilde W = \frac1K \sum_k \Big(\tilde B_k + \tilde W_k\Big),\qquad
    \hat R_\nu = \sqrt{1 + \tilde B / \tilde W},

with :math:`\tilde B_k` the variance of the chain means within superchain k (divisor
M - 1; 0 for M = 1) and :math:`\tilde W_k` the mean within-chain variance (divisor N - 1;
0 for N = 1). It tends to 1 as the superchains agree; Margossian et al. suggest
:math:`\hat R_\nu < 1 + 0.01` (with K = 4 superchains as a default). The paper
initialises the chains of a superchain at one point; with independent starts, as
bnnzoo's chains have, the superchains are more spread at first and the diagnostic is
conservative.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SUPERCHAINS", "nested_rhat"]

#: superchains the chains are grouped into
SUPERCHAINS = 4


def nested_rhat(draws, superchains: int = SUPERCHAINS) -> np.ndarray:
    """Nested R-hat of ``draws [chain, draw, ...]``, elementwise over the trailing dims; NaN where
    there are fewer than two chains per superchain or the draws do not vary."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim < 2:
        raise ValueError(f"nested_rhat: draws must be [chain, draw, ...], got shape {draws.shape}")
    chains, n = draws.shape[:2]
    if chains < 2 * superchains:
        return np.full(draws.shape[2:], math.nan)
    groups = np.array_split(np.arange(chains), superchains)
    chain_means = draws.mean(axis=1)  # [chain, ...]
    within = draws.var(axis=1, ddof=1) if n > 1 else np.zeros_like(chain_means)
    super_means = np.stack([chain_means[g].mean(axis=0) for g in groups])
    b = super_means.var(axis=0, ddof=1)
    w = np.mean([chain_means[g].var(axis=0, ddof=1) + within[g].mean(axis=0) for g in groups], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.sqrt(1.0 + b / w)
    return np.where(w > 0, out, math.nan)
