"""A Pyro model's log density for C chains in one trace.

:class:`~bnnzoo.inference.potential.PyroPotential` evaluates ``[C, D]`` chains either one
Pyro trace per chain (exact for every model, slow) or in one trace for all chains, by one of
two batchings:

* ``"plate"``: the model runs once inside a chain plate of size C placed outside the model's
  own plates, at ``dim = -K - 1`` (``K`` the model's plate nesting), the way Pyro's
  ``vectorize_particles`` runs an ELBO's particles. Each latent site is conditioned on its
  ``[C, 1, ..., *shape]`` values and each site's log density ``[C, ...]`` is summed per chain.
  Needs a model written with Pyro's broadcasting conventions (``(x * w).sum(-1)``, not ``x @ w``).
* ``"vmap"``: ``torch.func.vmap`` over the chains of the one-chain log density (the model sees
  one chain's shapes, so ``x @ w`` works), with Pyro's argument validation off inside
  (a validation check is data-dependent control flow, which ``vmap`` refuses).

Neither batching knows whether a model broadcasts over chains, so the potential checks once,
at its first ``[C, D]`` call (the initial points), that a batching gives the per-chain loop's
value and gradient; a batching that raises or disagrees is not used (:func:`disagreement`).
"""

from __future__ import annotations

from typing import Callable, Mapping

import pyro
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.poutine.subsample_messenger import _Subsample

Tensor = torch.Tensor

#: the batchings tried, in order, before the per-chain loop
BATCHINGS = ("plate", "vmap")
#: the chain plate's name (no model site may use it)
CHAIN_PLATE = "_bnnzoo_chains"


class NotVectorizable(ValueError):
    """The model's shapes do not give one log density per chain under a batching."""


def _sample_sites(trace) -> list[tuple[str, dict]]:
    """``(name, site)`` of every sample site except a subsample plate's indices (log density 0)."""
    return [(name, site) for name, site in trace.nodes.items()
            if site["type"] == "sample" and not isinstance(site["fn"], _Subsample)]


def plate_layout(model: Callable, args, kwargs, values: Mapping[str, Tensor]) -> tuple[int, dict[str, int]]:
    """``(K, {site: batch dims})`` from one trace of ``model`` conditioned on one chain's constrained
    ``values``: the chain plate goes at ``dim = -K - 1``, outside every plate of the model and every
    batch dimension of a log density (an observation ``[N]`` outside a plate counts); a latent site
    of shape ``batch + event`` is conditioned on ``[C] + [1] * (K - len(batch)) + shape``."""
    trace = poutine.trace(poutine.condition(model, data=dict(values))).get_trace(*args, **kwargs)
    nesting, batch_dims = 0, {}
    for name, site in _sample_sites(trace):
        dims = [-frame.dim for frame in site["cond_indep_stack"] if frame.vectorized]
        log_prob = site["fn"].log_prob(site["value"])
        nesting = max(nesting, *dims, log_prob.dim() if torch.is_tensor(log_prob) else 0)
        if name in values:
            batch_dims[name] = len(site["fn"].batch_shape)
    return nesting, batch_dims


def plate_log_joint(model: Callable, args, kwargs, values: Mapping[str, Tensor],
                    layout: tuple[int, dict[str, int]], shapes: Mapping[str, tuple]) -> Tensor:
    """``[C]`` log joint density of ``model`` run once inside a chain plate, each latent site
    conditioned on its constrained ``values[name]`` ``[C, *shape]`` (:func:`plate_layout`)."""
    nesting, batch_dims = layout
    chains = next(iter(values.values())).shape[0]
    data = {n: v.reshape((chains,) + (1,) * (nesting - batch_dims[n]) + tuple(shapes[n])) for n, v in values.items()}
    with pyro.plate(CHAIN_PLATE, chains, dim=-nesting - 1):
        trace = poutine.trace(poutine.condition(model, data=data)).get_trace(*args, **kwargs)
    total = 0.0
    for name, site in _sample_sites(trace):
        log_prob = scale_and_mask(site["fn"].log_prob(site["value"], *site["args"], **site["kwargs"]),
                                  site["scale"], site["mask"])
        if log_prob.dim() != nesting + 1 or log_prob.shape[0] != chains:
            raise NotVectorizable(f"site {name!r} has a log density of shape {tuple(log_prob.shape)} in a chain "
                                  f"plate of {chains} at dim {-nesting - 1}; its shapes do not broadcast over chains")
        total = total + log_prob.reshape(chains, -1).sum(-1)
    return total


def vmap_log_joint(model: Callable, args, kwargs, values: Mapping[str, Tensor]) -> Tensor:
    """``[C]`` log joint density of ``model`` at constrained ``values[name]`` ``[C, *shape]`` by
    ``torch.func.vmap`` over the chains of one trace's ``log_prob_sum`` (validation off)."""
    names = list(values)

    def one_chain(*parts):
        trace = poutine.trace(poutine.condition(model, data=dict(zip(names, parts)))).get_trace(*args, **kwargs)
        return torch.as_tensor(trace.log_prob_sum(), dtype=parts[0].dtype, device=parts[0].device)

    with pyro.validation_enabled(False):
        return torch.func.vmap(one_chain)(*(values[n] for n in names))


def disagreement(value: Tensor, grad: Tensor, want_value: Tensor, want_grad: Tensor) -> str | None:
    """None where a batched ``[C]`` value and ``[C, D]`` gradient equal the per-chain loop's within
    ``sqrt(eps)`` of their dtype, relative to each chain's largest magnitude (non-finite where the
    loop's are); else what differs, in words."""
    tol = torch.finfo(want_value.dtype).eps ** 0.5
    for what, got, want in (("value", value.reshape(len(value), -1), want_value.reshape(len(want_value), -1)),
                            ("gradient", grad, want_grad)):
        if got.shape != want.shape:
            return f"the {what} has shape {tuple(got.shape)}, the per-chain loop's {tuple(want.shape)}"
        finite = torch.isfinite(want)
        if not torch.equal(finite, torch.isfinite(got)):
            return f"the {what} is non-finite at other chains than the per-chain loop's"
        scale = torch.where(finite, want, 0).abs().amax(-1, keepdim=True).clamp_min(1.0)
        error = (torch.where(finite, got - want, 0).abs() / scale).max()
        if error > tol:
            return f"the {what} differs from the per-chain loop's by {float(error):.2g} (relative)"
    return None
