"""Potential energy ``U(theta) = -log p(theta | data)`` on a flat unconstrained vector.

Every kernel of bnnzoo works on a flat tensor ``theta`` of shape ``[D]`` (one
chain) or ``[C, D]`` (C chains advanced as one batch). This package turns a model
into such a potential:

* :class:`BNNPotential` for :class:`~bnnzoo.models.BNN`: the log density is
  written directly in torch (the network's ``apply`` and the priors'
  distributions), with no Pyro tracing per call. It equals Pyro's potential
  (same unconstrained parametrisation ``biject_to(support)``, same Jacobian
  terms) and evaluates C chains in one batched forward/backward pass. It also
  gives the minibatch estimate ``-log p(theta) - (N/B) sum_{i in batch} log p(y_i|theta)``.
* :class:`PyroPotential` for any other Pyro model: Pyro's own ``potential_fn``
  from ``initialize_model``, one chain at a time.

Both expose the same interface (:class:`FlatPotential`), plus ``potential_fn``,
a dict-in/scalar-out function that Pyro's ``HMC``/``NUTS`` accept.

Modules: :mod:`.base` (the flat layout, :func:`initial_theta`), :mod:`.bnn`
(:class:`BNNPotential`), :mod:`.analytic` (its hand-written backward pass, eagerly
and in the formulation a ``torch.compile`` graph traces), :mod:`.pyro_model` (:class:`PyroPotential`).
The priors' L1 weights live in :mod:`bnnzoo.models.l1` (re-exported here). A potential holds
mathematics only: its graphs are compiled and run by :mod:`bnnzoo.inference.compiled_graphs`,
and how a kernel's steps run is chosen by :mod:`bnnzoo.inference.runtime`.
"""

from __future__ import annotations

import torch

from ...models.bnn import BNN
from ...models.l1 import laplace_l1_weight, prior_l1_weight
from .analytic import ACTIVATION_BACKWARD, dense_value_and_grads
from .base import FlatPotential, initial_theta, is_identity, place, placement
from .bnn import BNNPotential
from .pyro_model import PyroPotential

Tensor = torch.Tensor

__all__ = [
    "ACTIVATION_BACKWARD", "BNNPotential", "FlatPotential", "PyroPotential", "dense_value_and_grads",
    "initial_theta", "is_identity", "laplace_l1_weight", "make_potential", "place", "placement", "prior_l1_weight",
]


def make_potential(model, x: Tensor | None = None, y: Tensor | None = None, args=(), kwargs=None,
                   compile: bool = False) -> FlatPotential:
    """The fastest exact potential for ``model``: :class:`BNNPotential` for a BNN
    (``compile``: see there), else :class:`PyroPotential` with ``model(*args, **kwargs)``
    (``args`` default to ``(x, y)`` where those are given: a model without data
    arguments gets none)."""
    if isinstance(model, BNN):
        return BNNPotential(model, x, y, compile=compile)
    if compile:
        raise ValueError(f"compile=True needs a BNN model (compiled analytic potential), got {type(model).__name__}")
    return PyroPotential(model, args or tuple(a for a in (x, y) if a is not None), kwargs)
