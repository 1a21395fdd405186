r"""The theory of HMC acceptance and efficiency (paper 003), and the empirical optimum of
a finished sweep: functions of numbers only, no sampler is run here.

* :func:`theoretical_efficiency`: the efficiency the theory predicts for i.i.d.
  smooth (Beskos et al. 2013) or piecewise-affine (paper 003, Prop. 3.5) targets;
* :func:`theoretical_optimal_acceptance`: its maximiser (0.651 smooth, 0.452
  piecewise affine);
* :func:`optimal_acceptance`: the acceptance of the most efficient grid point of a
  measured efficiency curve.

The sweeps that measure acceptance and efficiency by running the ``fixed_hmc``
engine are experiments: :mod:`bnnzoo.experiments.acceptance`. Figures:
:func:`~bnnzoo.diagnostics.plots.plot_efficiency`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

__all__ = ["optimal_acceptance", "theoretical_efficiency", "theoretical_optimal_acceptance"]


def optimal_acceptance(acceptance: Sequence[float], efficiency: Sequence[float]) -> tuple[float, bool]:
    """The acceptance of the grid point with the highest efficiency, and whether that
    point is the first or last by acceptance (then the optimum may lie beyond the
    grid). No interpolation: near leapfrog's stability limit the acceptance falls
    from ~1 to 0 between two step sizes, and a fitted curve would invent values
    inside the gap."""
    a, e = np.asarray(acceptance, dtype=float), np.asarray(efficiency, dtype=float)
    best = int(np.nanargmax(e))
    return float(a[best]), bool(a[best] in (np.nanmin(a), np.nanmax(a)))


def _raw_efficiency(acceptance: np.ndarray, smooth: bool) -> np.ndarray:
    r""":math:`a\sqrt{z}` (smooth) or :math:`a z` (piecewise affine), :math:`z = \Phi^{-1}(1 - a/2)`."""
    z = torch.special.ndtri(torch.as_tensor(1 - acceptance / 2, dtype=torch.float64)).numpy()
    return acceptance * (np.sqrt(z) if smooth else z)


_ACCEPTANCE_GRID = np.linspace(1e-5, 1 - 1e-5, 99_999)


def theoretical_efficiency(acceptance, smooth: bool = True) -> np.ndarray:
    r"""Efficiency of HMC at acceptance :math:`a` for i.i.d. targets in high dimension,
    up to a constant (scaled to a maximum of 1):

    * smooth (Beskos et al. 2013): :math:`a(l) = 2\Phi(-c\,l^2)` with
      :math:`\epsilon = l d^{-1/4}`, so :math:`\mathrm{eff} \propto a\,l \propto a\sqrt{\Phi^{-1}(1 - a/2)}`;
    * piecewise affine (paper 003, Prop. 3.5): :math:`a(l) = 2\Phi(-c\,l)` with
      :math:`\epsilon = l d^{-1/2}`, so :math:`\mathrm{eff} \propto a\,\Phi^{-1}(1 - a/2)`.
    """
    a = np.asarray(acceptance, dtype=float)
    if np.any((a <= 0) | (a >= 1)):
        raise ValueError("acceptance: every value must be strictly between 0 and 1")
    return _raw_efficiency(a, smooth) / _raw_efficiency(_ACCEPTANCE_GRID, smooth).max()


def theoretical_optimal_acceptance(smooth: bool = True) -> float:
    """The maximiser of :func:`theoretical_efficiency` (0.651 smooth, 0.452 piecewise
    affine), on a grid of step 1e-5."""
    return float(_ACCEPTANCE_GRID[np.argmax(_raw_efficiency(_ACCEPTANCE_GRID, smooth))])
