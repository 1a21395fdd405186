r"""Magnitude pruning for the SG-MCMC kernels (paper 001, Algorithm 1).

After every SG-MCMC iteration k the smallest-magnitude weights of each pruned
layer are set to zero so that the layer's sparsity follows

.. math:: s_k = S\,\bigl(1 - D^{k/U}\bigr)

(``sparsity`` S, ``decay`` D = 0.99, ``period`` U = 50): fast at first, then
slower, approaching S. Pruning is permanent: a pruned weight is held at exactly
zero for the rest of the run (its coordinate, and an SGHMC kernel's momentum,
are multiplied by the mask after every step), so the mask only grows and a
layer of ``n`` weights has ``round(s_k n)`` zeros at iteration k (rounded, so
that the target ``round(S n)`` is reached: ``s_k`` only tends to S). Each chain
has its own mask.

Usable from every SG-MCMC kernel: ``SGLD(model, prune=0.9)``,
or ``run(..., engine="sgld", prune=0.9)``.

References
----------
Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for
sparse deep learning", NeurIPS, Sec. 3.4 and Algorithm 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from .. import validation
from ..models.priors import SpikeAndSlab

__all__ = ["MagnitudePruning", "Pruner", "prune_mask", "target_sparsity"]

Tensor = torch.Tensor
_WEIGHT = re.compile(r"^layers\.\d+\.weight$")


def target_sparsity(k: int, sparsity: float, decay: float = 0.99, period: float = 50.0) -> float:
    r"""The sparsity of iteration ``k`` (>= 0): :math:`s_k = S(1 - D^{k/U})`."""
    return sparsity * (1.0 - decay ** (k / period))


def prune_mask(weights: Tensor, keep: Tensor, num_pruned: int) -> Tensor:
    """Grow a pruning mask so that ``num_pruned`` weights per chain are pruned.

    Parameters
    ----------
    weights : Tensor
        ``[C, n]`` current weights of one layer.
    keep : Tensor
        ``[C, n]`` bool, False where a weight is already pruned.
    num_pruned : int
        Weights per chain to have pruned afterwards. The mask never shrinks:
        already-pruned weights stay pruned, and the smallest ``|w|`` among the
        kept ones are added.

    Returns
    -------
    Tensor
        ``[C, n]`` bool, the new mask (True = kept).
    """
    num_pruned = min(max(int(num_pruned), 0), weights.shape[-1])
    if num_pruned == 0:
        return keep
    score = torch.where(keep, weights.detach().abs(), torch.full_like(weights, -1.0))
    smallest = torch.topk(score, num_pruned, dim=-1, largest=False).indices
    return keep & ~torch.zeros_like(keep).scatter_(-1, smallest, True)


@dataclass(frozen=True)
class MagnitudePruning:
    """Configuration of the magnitude pruning schedule (see the module docstring).

    Parameters
    ----------
    sparsity : float
        Target sparsity S in ``[0, 1)``.
    decay : float
        D in ``(0, 1)``.
    period : float
        U > 0 (iterations).
    sites : tuple of str, optional
        The pruned weight sites. Default: the weights with a ``SpikeAndSlab``
        prior (the sparse layers) when the model has any, else every
        ``layers.<i>.weight``.
    """

    sparsity: float
    decay: float = 0.99
    period: float = 50.0
    sites: tuple[str, ...] | None = None

    def __post_init__(self):
        validation.in_interval("pruning sparsity", self.sparsity, 0, 1)
        validation.in_interval("pruning decay", self.decay, 0, 1, low_open=True)
        validation.positive("pruning period", self.period)
        if self.sites is not None:
            object.__setattr__(self, "sites", tuple(self.sites))

    def bind(self, potential, num_chains: int) -> "Pruner":
        """The pruning state of one run on ``potential`` with ``num_chains`` chains."""
        return Pruner(self, _resolve_sites(potential, self.sites), potential.slices, num_chains, potential.device)


def _resolve_sites(potential, sites: tuple[str, ...] | None) -> tuple[str, ...]:
    names = list(potential.names)
    if sites is not None:
        unknown = [s for s in sites if s not in names]
        if unknown or not sites:
            raise ValueError(f"pruning sites {list(sites)!r}: unknown site(s) {unknown}; "
                             f"the model's sites are {', '.join(names)}")
        return sites
    model = getattr(potential, "model", None)
    sparse = [s.name for s in getattr(model, "sites", []) if isinstance(s.elementwise, SpikeAndSlab)]
    weights = [n for n in names if _WEIGHT.match(n)]
    chosen = sparse or weights or names
    return tuple(chosen)


class Pruner:
    """The pruning of one run: the pruned sites and where they lie in the flat vector. The masks, one
    ``[C, n]`` keep-mask per pruned site (in the order of :attr:`sites`), are state the caller keeps
    (:meth:`initial_masks`; :meth:`grow` returns the new ones)."""

    def __init__(self, config: MagnitudePruning, sites: tuple[str, ...], slices: dict[str, slice],
                 num_chains: int, device: torch.device | None = None):
        self.config = config
        self.sites = sites
        self.slices = {s: slices[s] for s in sites}

    def initial_masks(self, num_chains: int, device: torch.device | None = None) -> tuple[Tensor, ...]:
        """Every weight kept: one ``[C, n]`` mask per pruned site."""
        return tuple(torch.ones(num_chains, sl.stop - sl.start, dtype=torch.bool, device=device)
                     for sl in self.slices.values())

    def grow(self, theta: Tensor, masks: tuple[Tensor, ...], k: int) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Grow the masks to the sparsity of iteration ``k`` and zero the pruned weights:
        ``(theta', masks')``."""
        s = target_sparsity(k, self.config.sparsity, self.config.decay, self.config.period)
        theta = theta.clone()
        grown = []
        for sl, mask in zip(self.slices.values(), masks):
            mask = prune_mask(theta[:, sl], mask, math.floor(s * mask.shape[-1] + 0.5))
            grown.append(mask)
            theta[:, sl] = theta[:, sl] * mask
        return theta, tuple(grown)

    def zero(self, x: Tensor, masks: tuple[Tensor, ...]) -> Tensor:
        """Zero the pruned coordinates of a ``[C, D]`` tensor (a position or a momentum)."""
        x = x.clone()
        for sl, mask in zip(self.slices.values(), masks):
            x[:, sl] = x[:, sl] * mask
        return x

    @staticmethod
    def sparsity(masks: tuple[Tensor, ...]) -> Tensor:
        """Fraction of pruned weights over all pruned sites, per chain ``[C]``."""
        pruned = sum((~m).sum(-1) for m in masks)
        total = sum(m.shape[-1] for m in masks)
        return pruned.to(torch.get_default_dtype()) / total
