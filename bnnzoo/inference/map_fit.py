r"""MAP training on the flat potential: the optimizer baselines of paper 000.

The loss is the negative log posterior per training point, :math:`U(\theta)/N`
(the potential is exactly :math:`-\log p(\theta \mid y)` up to a constant, so a
Laplace prior *is* an L1 penalty :math:`\sum_d \beta_d |\theta_d| / N`),
estimated on minibatches: :math:`\hat U = -\log p(\theta) - \tfrac{N}{B}\sum_{i \in
\text{batch}} \log p(y_i \mid \theta)`. Three optimizers:

* ``"adam"``, ``"sgd"``: torch's Adam / SGD on :math:`\hat U / N`; the L1 term
  enters through its subgradient :math:`\beta\,\operatorname{sign}(\theta)`, so
  weights oscillate around 0 and are (almost) never exactly 0;
* ``"prox-sgd"``: proximal SGD (forward-backward),
  :math:`\theta \leftarrow \operatorname{prox}_{\eta\beta/N|\cdot|}(\theta - \eta \nabla \hat f / N)`,
  a gradient step on the smooth part then soft-thresholding: exact zeros.

Each epoch visits every training point once in a random order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..validation import positive as check_positive_option
from .potential import FlatPotential, initial_theta
from .proximal import soft_threshold

__all__ = ["OPTIMIZERS", "MapFit", "map_fit"]

OPTIMIZERS = ("adam", "sgd", "prox-sgd")


@dataclass
class MapFit:
    """Result of :func:`map_fit`: the final point ``theta [D]``, the loss of every
    step (minibatch :math:`\\hat U / N`), the wall time of the fit (callbacks
    excluded) and whatever ``callback`` returned after each epoch."""

    theta: torch.Tensor
    losses: np.ndarray
    wall_time: float
    history: list = field(default_factory=list)


def map_fit(potential: FlatPotential, optimizer: str = "adam", lr: float = 1e-2, num_epochs: int = 50,
            batch_size: int = 64, momentum: float = 0.0, init: torch.Tensor | None = None, init_radius: float = 1.0,
            callback: Callable[[int, torch.Tensor], object] | None = None) -> MapFit:
    """Minimise :math:`U(\\theta)/N` by minibatch ``adam``, ``sgd`` or ``prox-sgd``.

    Parameters
    ----------
    potential : FlatPotential
        Needs ``num_data`` and ``minibatch_value_and_grad`` (a
        :class:`~bnnzoo.inference.potential.BNNPotential`); ``prox-sgd`` also uses
        its ``l1_weights()``.
    optimizer : {"adam", "sgd", "prox-sgd"}
    lr, num_epochs, batch_size, momentum
        Learning rate, passes over the data, minibatch size, SGD momentum
        (``sgd`` only).
    init : Tensor, optional
        Starting point ``[D]``; default uniform in ``(-init_radius, init_radius)``.
    callback : callable, optional
        ``callback(epoch, theta)`` after every epoch (and at epoch 0, before
        training); its return values are collected in ``history``. Not timed.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    check_positive_option("lr", lr)
    for name, value in (("num_epochs", num_epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not hasattr(potential, "minibatch_value_and_grad"):
        raise ValueError(f"map_fit needs a potential with minibatch gradients (BNNPotential), "
                         f"got {type(potential).__name__}")
    n = int(potential.num_data)
    theta = (initial_theta(potential, 1, init_radius)[0] if init is None else init.detach().clone()).reshape(1, -1)
    beta = potential.l1_weights().to(theta.dtype)
    param = theta.clone().requires_grad_(True)
    opt = torch.optim.Adam([param], lr=lr) if optimizer == "adam" else torch.optim.SGD(
        [param], lr=lr, momentum=momentum if optimizer == "sgd" else 0.0)
    history = [callback(0, param.detach()[0].clone())] if callback else []
    losses, elapsed = [], 0.0
    for epoch in range(1, num_epochs + 1):
        start = time.perf_counter()
        for rows in torch.randperm(n, device=potential.device).split(batch_size):
            value, grad = potential.minibatch_value_and_grad(param.detach(), rows)
            if not (torch.isfinite(value).all() and torch.isfinite(grad).all()):
                raise FloatingPointError(f"map_fit ({optimizer}): non-finite loss at epoch {epoch}; lower lr={lr}")
            if optimizer == "prox-sgd":
                grad = grad - beta * torch.sign(param.detach())  # the smooth part only
            param.grad = grad / n
            opt.step()
            if optimizer == "prox-sgd":
                with torch.no_grad():
                    param.copy_(soft_threshold(param, lr * beta / n))
            losses.append(float(value) / n)
        elapsed += time.perf_counter() - start
        if callback:
            history.append(callback(epoch, param.detach()[0].clone()))
    return MapFit(param.detach()[0], np.asarray(losses), elapsed, history)
