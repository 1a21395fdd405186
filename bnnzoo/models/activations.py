"""The activations, one table: a new activation is one :class:`Activation` row here.

Each row has the function the network applies (:data:`ACTIVATION_FUNCTIONS`), and where the
analytic gradient path of :class:`~bnnzoo.inference.potential.BNNPotential` serves it, the
derivative it needs and the forms it runs fastest in. A row without ``backward`` runs on
autograd (``gelu``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["ACTIVATIONS", "ACTIVATION_FUNCTIONS", "ACTIVATION_TABLE", "Activation", "fast_tanh"]

Tensor = torch.Tensor


def fast_tanh(h: Tensor) -> Tensor:
    """``tanh(h)`` as ``2 sigmoid(2h) - 1``: the same function (absolute error ~2e-7 in
    float32), but torch's CPU ``tanh`` ran 6x slower than its ``sigmoid`` here (105 vs
    17 us on 40k float32 values, one thread), and on a small network the activation
    was a quarter of a gradient's cost."""
    return torch.sigmoid(2.0 * h).mul(2.0).sub(1.0)


def _identity(h: Tensor) -> Tensor:
    return h


class Activation(NamedTuple):
    """One activation.

    ``forward(z)``: the function. ``backward(g, h)``: ``g * act'(z)`` from the output
    ``h = act(z)`` (None: the identity, or no analytic path when ``analytic`` is False).
    ``graph_backward``: the form a ``torch.compile`` graph traces (default ``backward``).
    ``in_place(z)``: ``forward`` allowed to overwrite its input (the analytic path's fresh
    pre-activation; no autograd there), op for op the same bits; None: ``forward``.
    ``analytic``: the analytic gradient path serves it. ``in_place_backward(g, h)``: ``backward``
    allowed to overwrite ``g`` (the analytic path's fresh ``delta``), the same bits; None: ``backward``."""

    forward: Callable[[Tensor], Tensor]
    backward: Callable[[Tensor, Tensor], Tensor] | None = None
    graph_backward: Callable[[Tensor, Tensor], Tensor] | None = None
    in_place: Callable[[Tensor], Tensor] | None = None
    analytic: bool = True
    in_place_backward: Callable[[Tensor, Tensor], Tensor] | None = None


#: relu/leaky_relu's derivative uses ``h > 0`` (iff ``z > 0``, as autograd); relu's in place is
#: torch's ``threshold_backward`` writing into ``g``: one pass over two tensors, where ``g * (h > 0)``
#: makes a bool mask, converts it to floats and multiplies into a new tensor (the digits MLP's eager
#: gradient took 0.67-0.71x as long at 4 and 8 chains, ``benchmarks/results/hot_path_relu_backward.md``).
#: Both give ``g`` or a zero, bit for bit (``g * 0`` is ``-0.0`` for a negative ``g``, which no sum or
#: product after it tells apart from ``0.0``). softplus's ``sigmoid(z) = 1 - exp(-h)``; leaky_relu
#: has torch's default slope 0.01. tanh's eager
#: derivative is ``g - (g h) h``: two tensor ops instead of three (a small network's step is
#: bound by the number of ops it dispatches, not by arithmetic); its graph form ``g (1 - h^2)``
#: is the one inductor fuses into its loops. tanh in place is ``2 sigmoid(2z) - 1`` as
#: :func:`fast_tanh`, op for op.
ACTIVATION_TABLE: dict[str | None, Activation] = {
    "tanh": Activation(fast_tanh, lambda g, h: torch.addcmul(g, g * h, h, value=-1.0),
                       graph_backward=lambda g, h: g * (1 - h * h),
                       in_place=lambda z: z.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)),
    "sigmoid": Activation(torch.sigmoid, lambda g, h: g * (h * (1 - h)), in_place=torch.sigmoid_),
    "relu": Activation(F.relu, lambda g, h: g * (h > 0), in_place=torch.relu_,
                       in_place_backward=lambda g, h: torch.ops.aten.threshold_backward.grad_input(g, h, 0, grad_input=g)),
    "leaky_relu": Activation(F.leaky_relu, lambda g, h: torch.where(h > 0, g, 0.01 * g)),
    "softplus": Activation(F.softplus, lambda g, h: g * -torch.expm1(-h)),
    "gelu": Activation(F.gelu, analytic=False),
    "linear": Activation(_identity),
    None: Activation(_identity),
}

#: the activations a spec may name
ACTIVATIONS = tuple(name for name in ACTIVATION_TABLE if name is not None)
#: name -> the function the network applies
ACTIVATION_FUNCTIONS = {name: a.forward for name, a in ACTIVATION_TABLE.items()}
