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
    """One Pyro chain's stats as ``[vectorized, draws]`` arrays."""
    stats = {k: np.asarray(v) for k, v in (diag.get("sample_stats") or {}).items()}
    if "diverging" not in stats:  # a stock Pyro kernel: only the divergence indices survive
        diverging = np.zeros(num_draws, dtype=bool)
        diverging[np.asarray(diag.get("divergences", []), dtype=int)] = True
        stats["diverging"] = diverging
    out = {}
    for k, v in stats.items():
        v = v.reshape(num_draws, -1) if vectorized > 1 else v.reshape(num_draws, 1)
        out[k] = v.T
    return out


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
    per_chain = [_chain_stats(d, num_draws, vectorized) for d in diagnostics]
    stats = {
        k: np.concatenate([c[k] for c in per_chain]) for k in per_chain[0] if all(k in c for c in per_chain)
    }
    warm = {}
    warm_rows = [d.get("warmup_sample_stats") or {} for d in diagnostics]
    if warm_rows and warm_rows[0]:
        for k in warm_rows[0]:
            arrays = [np.asarray(w[k]).reshape(len(w[k]), -1).T for w in warm_rows]
            warm[k] = np.concatenate(arrays)
    return Draws(grouped, stats, warm)
