"""The exact L1 part of a prior, for proximal kernels.

``-log p(w) = f(w) + beta * |w|`` with ``f`` smooth near ``w = 0``:

* :func:`prior_l1_weight`: ``beta`` of an elementwise :class:`~bnnzoo.models.Prior`
  (its :meth:`~bnnzoo.models.Prior.split`, and the kink of a Laplace-spike
  :class:`~bnnzoo.models.SpikeAndSlab` on request);
* :func:`laplace_l1_weight`: ``beta`` of a ``Laplace(0, scale)`` distribution
  found on the trace of an arbitrary Pyro model.
"""

from __future__ import annotations

import math

import pyro
import torch

from .priors import SpikeAndSlab

Tensor = torch.Tensor


def laplace_l1_weight(distribution) -> Tensor | None:
    """``1/scale`` of a ``Laplace(0, scale)`` (unwrapping ``Independent`` and
    expanded distributions) whose scale is a constant, i.e. carries no gradient
    from the latent values; None for anything else."""
    d = distribution
    while True:
        if isinstance(d, torch.distributions.Independent):
            d = d.base_dist
        elif isinstance(d, pyro.distributions.torch_distribution.ExpandedDistribution):
            d = d.base_dist
        else:
            break
    if not isinstance(d, torch.distributions.Laplace):
        return None
    if d.scale.requires_grad or d.loc.requires_grad or bool((d.loc != 0).any()):
        return None
    return 1.0 / d.scale.detach()


def prior_l1_weight(prior, spike_and_slab: bool = False) -> float:
    r"""The L1 weight of an elementwise prior: ``prior.split()[1]`` (``1/scale`` for
    :class:`~bnnzoo.models.Laplace`, 0 for smooth priors).

    With ``spike_and_slab=True``, a :class:`~bnnzoo.models.SpikeAndSlab` with a
    Laplace spike gets the slope of the kink of :math:`-\log p` at 0,

    .. math:: \beta = \frac{1}{s_0}\,\frac{(1-\delta)\,\mathrm{Lap}(0; s_0)}
              {(1-\delta)\,\mathrm{Lap}(0; s_0) + \delta\, N(0; 0, s_1^2)},

    so that :math:`-\log p(w) - \beta |w|` has equal one-sided derivatives at 0
    (it is :math:`C^1`): the exact L1 part of the mixture.
    """
    l1 = float(prior.split()[1])
    if l1 > 0 or not spike_and_slab:
        return l1
    if isinstance(prior, SpikeAndSlab) and prior.spike == "laplace":
        s0, s1, delta = prior.spike_scale, prior.slab_scale, prior.inclusion_prob
        spike = (1 - delta) / (2 * s0)
        slab = delta / (math.sqrt(2 * math.pi) * s1)
        return spike / (spike + slab) / s0
    return 0.0
