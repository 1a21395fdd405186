"""Draws of a run, chain by chain: the hand-off from inference to diagnostics.

:func:`split_mcmc` reads a finished ``pyro.infer.MCMC`` (bnnzoo's kernels or
Pyro's own) into ``samples[name] -> [chain, draw, ...]`` (constrained) and
``sample_stats[name] -> [chain, draw]``. A bnnzoo kernel that advanced C
vectorized chains inside one Pyro chain is split back into C chains. Chains
keep their integer order (never the string order of ``"chain 10" < "chain 2"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Draws:
    """Posterior draws and per-draw statistics, chain-major."""

    samples: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    warmup_sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    extras: dict = field(default_factory=dict)

    @property
    def num_chains(self) -> int:
        return next(iter(self.samples.values())).shape[0]

    @property
    def num_draws(self) -> int:
        return next(iter(self.samples.values())).shape[1]


def _to_numpy(v) -> np.ndarray:
    return v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)


def _chain_stats(diag: dict, num_draws: int, vectorized: int) -> dict[str, np.ndarray]:
    """One Pyro chain's stats as ``[vectorized, draws, *rest]`` arrays.

    A kernel reports ``[draws, *rest]`` per stat, or ``[draws, C, *rest]`` when it
    advanced C vectorized chains.
    """
    stats = {k: np.asarray(v) for k, v in (diag.get("sample_stats") or {}).items()}
    if "diverging" not in stats:  # a stock Pyro kernel: only the divergence indices survive
        diverging = np.zeros((num_draws, vectorized) if vectorized > 1 else num_draws, dtype=bool)
        index = np.asarray(diag.get("divergences", []), dtype=int)
        if vectorized == 1:
            diverging[index] = True
        stats["diverging"] = diverging
    return {k: np.moveaxis(v, 1, 0) if vectorized > 1 else v[None] for k, v in stats.items()}


def _stack_stats(rows: list[dict], num_draws_of, vectorized: int) -> dict[str, np.ndarray]:
    per_chain = [_chain_stats(d, num_draws_of(d), vectorized) for d in rows]
    if not per_chain:
        return {}
    return {k: np.concatenate([c[k] for c in per_chain])
            for k in per_chain[0] if all(k in c for c in per_chain)}


def split_mcmc(mcmc) -> Draws:
    """:class:`Draws` of a finished ``pyro.infer.MCMC``."""
    grouped = {k: _to_numpy(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    diagnostics = [d or {} for d in mcmc._diagnostics]
    vectorized = int(diagnostics[0].get("num_chains", 1)) if diagnostics else 1
    num_draws = next(iter(grouped.values())).shape[1]
    if vectorized > 1:  # [pyro_chain, draw, C, ...] -> [pyro_chain * C, draw, ...]
        grouped = {
            k: np.moveaxis(v, 2, 1).reshape((-1, num_draws) + v.shape[3:]) for k, v in grouped.items()
        }
    stats = _stack_stats(diagnostics, lambda d: num_draws, vectorized)
    warm_rows = [{"sample_stats": d.get("warmup_sample_stats") or {}, "divergences": []} for d in diagnostics]
    warm = {}
    if warm_rows and warm_rows[0]["sample_stats"]:
        warm = _stack_stats(warm_rows, lambda d: len(next(iter(d["sample_stats"].values()))), vectorized)
    return Draws(grouped, stats, warm)
