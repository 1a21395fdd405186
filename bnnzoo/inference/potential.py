"""Potential energy ``U(theta) = -log p(theta | data)`` on a flat unconstrained vector.

Every kernel of bnnzoo works on a flat tensor ``theta`` of shape ``[D]`` (one
chain) or ``[C, D]`` (C chains advanced as one batch). This module turns a model
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
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import pyro
import torch
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad
from torch.distributions import biject_to
from torch.distributions.transforms import ComposeTransform, IndependentTransform, identity_transform

from ..models.bnn import BNN

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

    def _layout(self) -> None:
        self.sizes = [math.prod(self.shapes[n]) for n in self.names]
        self.dim = sum(self.sizes)

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

    def potential_fn(self, params: Mapping[str, Tensor]) -> Tensor:
        """Pyro's ``potential_fn`` contract: dict of unconstrained values -> scalar."""
        return self(self.flatten(params))

    def __call__(self, theta: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class BNNPotential(FlatPotential):
    """Fast potential of a :class:`BNN` on data ``(x, y)``.

    Parameters
    ----------
    model : BNN
    x, y : Tensor
        Training inputs and targets (validated beforehand).
    """

    def __init__(self, model: BNN, x: Tensor, y: Tensor):
        self.model = model
        self.x = model.prepare_input(x)
        self.y = model.observed(y)
        self.num_data = int(x.shape[0])
        self.names = [site.name for site in model.sites]
        self.shapes = {site.name: tuple(site.shape) for site in model.sites}
        self._supports = self._prototype_supports()
        self.transforms = {n: biject_to(s).inv for n, s in self._supports.items()}
        self._bijections = {n: biject_to(s) for n, s in self._supports.items()}
        self._layout()
        self._segments, self._other_sites = self._prior_segments()

    def _prior_segments(self):
        """Runs of adjacent unconstrained sites sharing one iid prior: their log
        density is one elementwise op on a slice of ``theta``. Other sites go
        through their distribution objects."""
        segments: list[list] = []  # [start, end, prior]
        others = []
        start = 0
        for site, size in zip(self.model.sites, self.sizes):
            identity = is_identity(self._bijections[site.name])
            if site.elementwise is None or not identity:
                others.append(site)
            elif segments and segments[-1][1] == start and segments[-1][2] == site.elementwise:
                segments[-1][1] = start + size
            else:
                segments.append([start, start + size, site.elementwise])
            start += size
        return [tuple(seg) for seg in segments], others

    def log_prior(self, theta: Tensor, values: Mapping[str, Tensor]) -> Tensor:
        """Log prior density of the constrained ``values`` (``theta`` flat)."""
        total = 0.0
        for start, end, prior in self._segments:
            total = total + prior.log_density(theta[..., start:end]).sum(-1)
        for site in self._other_sites:
            total = total + self.model.site_distribution(site, values).log_prob(values[site.name])
        return total

    def _prototype_supports(self) -> dict:
        """Each site's support, read off distributions built at a prior draw."""
        values: dict[str, Tensor] = {}
        supports = {}
        with torch.no_grad(), pyro.validation_enabled(False):
            for site in self.model.sites:
                d = site.dist(values)
                values[site.name] = d.sample()
                supports[site.name] = d.support
        return supports

    def constrained_values(self, theta: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Constrained values and the summed log|Jacobian| of the transform."""
        values, log_det = {}, torch.zeros(theta.shape[:-1], dtype=theta.dtype)
        for name, u in self.unflatten(theta).items():
            bij = self._bijections[name]
            if is_identity(bij):
                values[name] = u
                continue
            values[name] = x = bij(u)
            jac = bij.log_abs_det_jacobian(u, x)
            log_det = log_det + jac.reshape(jac.shape[: theta.dim() - 1] + (-1,)).sum(-1)
        return values, log_det

    def log_likelihood(self, values, rows: Tensor | None = None) -> Tensor:
        """Summed log likelihood of the data (or of ``rows``, scaled by N/B)."""
        if rows is None:
            return self.model.log_likelihood(values, self.x, self.y).sum(-1)
        scale = self.num_data / rows.numel()
        return scale * self.model.log_likelihood(values, self.x[rows], self.y[rows]).sum(-1)

    def __call__(self, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        with pyro.validation_enabled(False):
            values, log_det = self.constrained_values(theta)
            return -(self.log_prior(theta, values) + self.log_likelihood(values, rows) + log_det)

    def minibatch_value_and_grad(self, theta: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Unbiased minibatch estimate of ``U`` and its gradient (likelihood scaled by N/B)."""
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self(theta, rows)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad


class PyroPotential(FlatPotential):
    """Pyro's own potential of an arbitrary model, on the flat layout.

    Slow (one Pyro trace per chain and call) but exact for any model.
    """

    def __init__(self, model: Callable, args=(), kwargs=None):
        init, fn, transforms, _ = initialize_model(model, tuple(args), kwargs or {})
        self._fn = fn
        self.names = sorted(init)
        self.shapes = {n: tuple(init[n].shape) for n in self.names}
        self.transforms = {n: transforms.get(n, identity_transform) for n in self.names}
        self.initial = {n: v.detach() for n, v in init.items()}
        self._layout()

    def __call__(self, theta: Tensor) -> Tensor:
        if theta.dim() == 1:
            return self._fn(self.unflatten(theta))
        return torch.stack([self(t) for t in theta])

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        if theta.dim() > 1:
            values, grads = zip(*(self.value_and_grad(t) for t in theta))
            return torch.stack(values), torch.stack(grads)
        grads, value = potential_grad(self._fn, self.unflatten(theta.detach()))
        return value.detach(), self.flatten(grads)

    def potential_fn(self, params):
        return self._fn(params)


def make_potential(model, x: Tensor | None = None, y: Tensor | None = None, args=(), kwargs=None) -> FlatPotential:
    """The fastest exact potential for ``model``: :class:`BNNPotential` for a BNN,
    else :class:`PyroPotential` with ``model(*args, **kwargs)``."""
    if isinstance(model, BNN):
        return BNNPotential(model, x, y)
    return PyroPotential(model, args or (x, y), kwargs)


def initial_theta(potential: FlatPotential, num_chains: int = 1, radius: float = 1.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """Initial points ``[C, D]`` drawn uniformly in ``(-radius, radius)`` in
    unconstrained space (Pyro's ``init_to_uniform``), retried until finite."""
    dtype = torch.get_default_dtype()
    theta = (torch.rand(num_chains, potential.dim, generator=generator, dtype=dtype) * 2 - 1) * radius
    for _ in range(100):
        with torch.no_grad():
            bad = ~torch.isfinite(potential(theta))
        if not bad.any():
            return theta
        fresh = (torch.rand(int(bad.sum()), potential.dim, generator=generator, dtype=dtype) * 2 - 1) * radius
        theta[bad] = fresh
    raise RuntimeError(f"could not find a finite initial point in 100 tries (radius={radius})")
