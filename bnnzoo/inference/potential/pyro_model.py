"""Pyro's own potential of an arbitrary model on the flat layout (:class:`PyroPotential`).

Named ``pyro_model`` so that it does not shadow the ``pyro`` package inside this package.
"""

from __future__ import annotations

from typing import Callable

import pyro
import torch
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad
from torch.distributions.transforms import identity_transform

from ...models.l1 import laplace_l1_weight
from .base import FlatPotential, is_identity

Tensor = torch.Tensor


#: what a distribution's argument validation says about a value outside its support
_OUT_OF_SUPPORT = ("invalid values", "within the support", "Expected parameter")


def _out_of_support(err: ValueError) -> bool:
    text = f"{err} {err.__cause__ or ''}"
    return any(marker in text for marker in _OUT_OF_SUPPORT)


class PyroPotential(FlatPotential):
    """Pyro's own potential of an arbitrary model, on the flat layout.

    Slow (one Pyro trace per chain and call) but exact for any model. At a point
    where it is not defined (a non-finite coordinate, or a value that a
    distribution built with argument validation refuses: priors made before
    ``MCMC.run`` keep the validation setting of their construction) the potential
    is NaN with a NaN gradient, never an exception: the kernel rejects the proposal
    and counts a divergence.
    """

    def __init__(self, model: Callable, args=(), kwargs=None):
        init, fn, transforms, _ = initialize_model(model, tuple(args), kwargs or {})
        self._fn = fn
        self._model, self._args, self._kwargs = model, tuple(args), dict(kwargs or {})
        self.names = sorted(init)
        self.shapes = {n: tuple(init[n].shape) for n in self.names}
        self.transforms = {n: transforms.get(n, identity_transform) for n in self.names}
        self.initial = {n: v.detach() for n, v in init.items()}
        self._layout()

    def __call__(self, theta: Tensor) -> Tensor:
        if theta.dim() == 1:
            if not bool(torch.isfinite(theta).all()):
                return torch.full((), float("nan"), dtype=theta.dtype)
            try:
                return self._fn(self.unflatten(theta))
            except ValueError as err:
                if not _out_of_support(err):
                    raise
                return torch.full((), float("nan"), dtype=theta.dtype)
        return torch.stack([self(t) for t in theta])

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        if theta.dim() > 1:
            values, grads = zip(*(self.value_and_grad(t) for t in theta))
            return torch.stack(values), torch.stack(grads)
        nan = (torch.full((), float("nan"), dtype=theta.dtype), torch.full_like(theta, float("nan")))
        if not bool(torch.isfinite(theta).all()):
            return nan
        try:
            grads, value = potential_grad(self._fn, self.unflatten(theta.detach()))
        except ValueError as err:
            if not _out_of_support(err):
                raise
            return nan
        return value.detach(), self.flatten(grads)

    def potential_fn(self, params):
        return self._fn(params)

    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        """``[D]`` L1 weights detected on the model's trace: ``1/scale`` (times the
        site's ``poutine.scale``) on latent sites whose distribution is a
        ``Laplace(0, scale)`` (possibly expanded or wrapped in ``Independent``)
        with a scale that depends on no latent value, unmasked, with an identity
        transform; 0 elsewhere. ``spike_and_slab`` is accepted for symmetry with
        :class:`BNNPotential` (plain Pyro models have no spike-and-slab site)."""
        from pyro import poutine

        values = {n: self.transforms[n].inv(u).detach().clone().requires_grad_(True)
                  for n, u in self.initial.items()}
        with torch.enable_grad(), pyro.validation_enabled(False):
            trace = poutine.trace(poutine.condition(self._model, data=values)).get_trace(
                *self._args, **self._kwargs)
        parts = []
        for name in self.names:
            site = trace.nodes[name]
            beta = None
            transform = self.transforms[name]  # constrained -> unconstrained: check it and its inverse
            if (is_identity(transform) or is_identity(transform.inv)) and site.get("mask") is None:
                beta = laplace_l1_weight(site["fn"])
            if beta is None:
                parts.append(torch.zeros(self.shapes[name]))
                continue
            scale = site.get("scale", 1.0)
            beta = torch.as_tensor(scale, dtype=beta.dtype) * beta
            parts.append(torch.broadcast_to(beta.detach(), self.shapes[name]))
        dtype = torch.get_default_dtype()
        return torch.cat([p.reshape(-1).to(dtype) for p in parts]) if parts else torch.zeros(0, dtype=dtype)
