"""The flat layout shared by every potential: a model's sites as one unconstrained
vector ``theta`` of shape ``[D]`` (one chain) or ``[C, D]`` (C chains), the generic
autograd gradient, the leapfrog hook and Pyro's dict-in ``potential_fn``
(:class:`FlatPotential`), and initial points (:func:`initial_theta`)."""

from __future__ import annotations

import itertools
import math
from typing import Mapping

import torch
from torch.distributions.transforms import ComposeTransform, IndependentTransform, identity_transform

from ..integrators import leapfrog_step

Tensor = torch.Tensor


def is_identity(transform) -> bool:
    """True for the identity bijection, also when wrapped as an ``IndependentTransform``
    (what ``biject_to`` gives for the support of a multivariate real event)."""
    while isinstance(transform, IndependentTransform):
        transform = transform.base_transform
    return transform is identity_transform or (
        isinstance(transform, ComposeTransform) and not transform.parts)


class FlatPotential:
    """Shared layout machinery: site names, shapes and transforms, and the
    mapping between a flat vector ``[*, D]`` and a dict of site tensors.

    Subclasses implement :meth:`__call__` (``theta [*, D] -> U [*]``).
    ``transforms[name]`` maps constrained to unconstrained values, as in Pyro.
    """

    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    transforms: dict[str, torch.distributions.Transform]
    #: where its tensors live (its data's device); None: torch's default device
    device: torch.device | None = None
    #: the floating dtype of ``theta`` (its data's); None: torch's default dtype
    dtype: torch.dtype | None = None

    @property
    def placement(self) -> dict:
        """``{"device": ..., "dtype": ...}`` of the tensors made for this potential: ``torch.zeros(n, **placement)``."""
        return {"device": self.device, "dtype": self.dtype or torch.get_default_dtype()}

    def _layout(self) -> None:
        self.sizes = [math.prod(self.shapes[n]) for n in self.names]
        self.dim = sum(self.sizes)

    @property
    def slices(self) -> dict[str, slice]:
        """Each site's index range in the flat vector: ``theta[..., slices[name]]``."""
        ends = itertools.accumulate(self.sizes)
        return {n: slice(end - size, end) for n, size, end in zip(self.names, self.sizes, ends)}

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """Unconstrained site values, each ``[*batch, *shape]``."""
        batch = theta.shape[:-1]
        parts = torch.split(theta, self.sizes, dim=-1)
        return {n: p.reshape(batch + self.shapes[n]) for n, p in zip(self.names, parts)}

    def flatten(self, params: Mapping[str, Tensor], batch_ndim: int = 0) -> Tensor:
        """Inverse of :meth:`unflatten`."""
        flat = [params[n].reshape(params[n].shape[:batch_ndim] + (-1,)) for n in self.names]
        return torch.cat(flat, dim=-1)

    def constrain(self, theta: Tensor) -> dict[str, Tensor]:
        """Constrained site values (what the model sees)."""
        return {n: self.transforms[n].inv(u) for n, u in self.unflatten(theta).items()}

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U(theta)`` and ``dU/dtheta``; chains in a batch are independent."""
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self(theta)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    def leapfrog_step(self, theta: Tensor, p: Tensor, grad: Tensor, step_size: float | Tensor,
                      inv_mass: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One leapfrog step on this potential (:func:`~bnnzoo.inference.integrators.leapfrog_step`)."""
        return leapfrog_step(theta, p, grad, step_size, inv_mass, self.value_and_grad)

    def potential_fn(self, params: Mapping[str, Tensor]) -> Tensor:
        """Pyro's ``potential_fn`` contract: dict of unconstrained values -> scalar."""
        return self(self.flatten(params))

    def notes(self) -> dict:
        """Facts about how this potential computed, for ``Run.notes`` (none by default)."""
        return {}

    def __call__(self, theta: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------- smooth / L1 split
    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        r"""``[D]`` weights :math:`\beta` of the exact L1 part of ``U``:
        :math:`U(\theta) = f(\theta) + \sum_d \beta_d |\theta_d|` with ``f`` smooth
        (Lipschitz gradient) near :math:`\theta_d = 0`. Zero where a coordinate has
        no L1 part. The base class knows none (all zeros); subclasses override.
        """
        return torch.zeros(self.dim, **self.placement)

    def smooth_value_and_grad(self, theta: Tensor, l1: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""The smooth part :math:`f = U - \sum_d \beta_d |\theta_d|` and its gradient
        :math:`\nabla U - \beta \odot \operatorname{sign}(\theta)` (``l1`` defaults to
        :meth:`l1_weights`). At :math:`\theta_d = 0` autograd gives
        :math:`\partial |\theta_d| = 0`, so the result is :math:`\nabla f` there too."""
        l1 = self.l1_weights() if l1 is None else l1
        value, grad = self.value_and_grad(theta)
        return value - (l1 * theta.abs()).sum(-1), grad - l1 * torch.sign(theta)


def place(value, device: torch.device | str | None = None, dtype: torch.dtype | None = None):
    """``value`` (a tensor, or a tuple, list or dict of tensors and other things) with every tensor
    on ``device`` and every floating tensor in ``dtype`` (None: as it is)."""
    if torch.is_tensor(value):
        return value.to(device=device, dtype=dtype if value.is_floating_point() else None)
    if isinstance(value, (tuple, list)):
        return type(value)(place(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: place(v, device, dtype) for k, v in value.items()}
    return value


def placement(potential) -> dict:
    """``{"device": ..., "dtype": ...}`` of the tensors made for ``potential``: its
    :attr:`FlatPotential.placement`, or torch's defaults for an object without one."""
    return getattr(potential, "placement", None) or {"device": None, "dtype": torch.get_default_dtype()}


def initial_theta(potential: FlatPotential, num_chains: int = 1, radius: float = 1.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """Initial points ``[C, D]`` drawn uniformly in ``(-radius, radius)`` in
    unconstrained space (Pyro's ``init_to_uniform``), retried until finite; on the potential's
    device and dtype (:func:`placement`)."""
    where = placement(potential)
    theta = (torch.rand(num_chains, potential.dim, generator=generator, **where) * 2 - 1) * radius
    for _ in range(100):
        with torch.no_grad():
            bad = ~torch.isfinite(potential(theta))
        if not bad.any():
            return theta
        fresh = (torch.rand(int(bad.sum()), potential.dim, generator=generator, **where) * 2 - 1) * radius
        theta[bad] = fresh
    raise RuntimeError(f"could not find a finite initial point in 100 tries (radius={radius})")
