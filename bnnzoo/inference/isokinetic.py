r"""Isokinetic (microcanonical) dynamics as small pure functions on ``[C, D]`` tensors.

The microcanonical samplers (:mod:`~bnnzoo.inference.kernels.mclmc`,
:mod:`~bnnzoo.inference.kernels.mams`) move a position :math:`x` with a velocity :math:`u`
of unit norm (Robnik, De Luca, Silverstein and Seljak 2023; Ver Steeg and Galstyan 2021).
Everything here works in the preconditioned coordinates :math:`z = x / \sigma` for a
diagonal scale :math:`\sigma` (``scale``, ``[D]``): the position moves by :math:`\sigma \odot u`
and the velocity feels the preconditioned force :math:`g = -\sigma \odot \nabla U(x)`.

* :func:`velocity_update`: the exact solution of the isokinetic velocity equation for a
  constant force over a time :math:`\epsilon`, and the kinetic-energy change it implies;
* :data:`INTEGRATORS`: leapfrog and the two-stage minimal-norm (McLachlan) scheme, as
  lists of ``("v" | "x", coefficient)`` substeps;
* :func:`integrate`: one integrator step (a scheme's substeps) from a state;
* :func:`unit_normal`, :func:`partial_refresh`: the velocity draws.

The update rules are in ``docs/algorithms.md`` ("Microcanonical samplers").
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

__all__ = ["INTEGRATORS", "GRADIENTS_PER_STEP", "Phase", "integrate", "integrate_amounts", "partial_refresh",
           "refresh_weights", "refresh_with", "substep_amounts", "unit_normal", "velocity_update",
           "velocity_update_at_rate"]

Tensor = torch.Tensor
ValueAndGrad = Callable[[Tensor], tuple[Tensor, Tensor]]

#: b1 of the two-stage minimal-norm scheme (McLachlan 1995; Omelyan, Mryglod and Folk 2003)
MCLACHLAN_B1 = 0.1931833275037836
#: substeps of each integrator: ("v", b) moves the velocity for b * step_size, ("x", a) the position
INTEGRATORS: dict[str, tuple[tuple[str, float], ...]] = {
    "leapfrog": (("v", 0.5), ("x", 1.0), ("v", 0.5)),
    "mclachlan": (("v", MCLACHLAN_B1), ("x", 0.5), ("v", 1.0 - 2.0 * MCLACHLAN_B1), ("x", 0.5),
                  ("v", MCLACHLAN_B1)),
}
#: gradient evaluations per integrator step (the last force is reused by the next step)
GRADIENTS_PER_STEP = {name: sum(kind == "x" for kind, _ in steps) for name, steps in INTEGRATORS.items()}


class Phase(NamedTuple):
    """A point of the dynamics: position ``x [C, D]``, unit velocity ``u [C, D]`` (in the
    preconditioned coordinates), ``value`` :math:`U(x)` ``[C]`` and ``grad`` :math:`\\nabla U(x)` ``[C, D]``."""

    x: Tensor
    u: Tensor
    value: Tensor
    grad: Tensor


def unit_normal(like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """A velocity uniform on the unit sphere, per chain: a standard normal ``[C, D]`` normalised."""
    z = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    return z / z.norm(dim=-1, keepdim=True)


def velocity_update(u: Tensor, force: Tensor, time: float | Tensor) -> tuple[Tensor, Tensor]:
    r"""The isokinetic velocity after a time ``time`` under a constant preconditioned force
    ``force`` :math:`= g = -\sigma \odot \nabla U`, and the kinetic-energy change, per chain.

    With :math:`e = g / |g|`, :math:`\delta = \epsilon |g| / (d - 1)`, :math:`\zeta = e^{-\delta}`:

    .. math::
        u' \propto e (1 - \zeta)(1 + \zeta + (u \cdot e)(1 - \zeta)) + 2 \zeta u,\qquad
        \Delta K = (d - 1)\left(\delta - \log 2 + \log(1 + u \cdot e + (1 - u \cdot e)\zeta^2)\right)
            = (d - 1)\left(\delta + \operatorname{log1p}\big(\tfrac{1 - u \cdot e}{2}\,\operatorname{expm1}(-2\delta)\big)\right)

    (Robnik et al. 2023, eq. 15; :math:`\Delta K` is minus the log-Jacobian of the map, so the
    energy error of a step is :math:`\Delta K + U(x') - U(x)`). It is computed in the second form,
    whose rounding error is relative to :math:`\delta` (the first loses about one unit in the last
    place of :math:`\log 2` per substep, times :math:`d - 1`). A zero force leaves ``u`` as it is.
    """
    return velocity_update_at_rate(u, force, time / (u.shape[-1] - 1))


def velocity_update_at_rate(u: Tensor, force: Tensor, rate: float | Tensor) -> tuple[Tensor, Tensor]:
    r""":func:`velocity_update` for a time of ``rate`` :math:`\times (d - 1)`: the form a captured
    CUDA graph runs, where ``rate`` is a buffer filled on the host (:mod:`~bnnzoo.inference.cuda_graphs`)."""
    dim = u.shape[-1]
    norm = torch.linalg.vector_norm(force, dim=-1, keepdim=True).clamp_min(torch.finfo(force.dtype).tiny)
    ue = (u * force).sum(-1, keepdim=True) / norm
    delta = norm * rate
    zeta = torch.exp(-delta)
    one_minus = 1 - zeta
    # e (1 - zeta)(1 + zeta + ue (1 - zeta)) + 2 zeta u, with e = force / |force|
    new = torch.addcmul(u * (2 * zeta), force, one_minus * (1 + zeta + ue * one_minus) / norm)
    new = new / torch.linalg.vector_norm(new, dim=-1, keepdim=True)
    # delta - log 2 + log(1 + ue + (1 - ue) zeta^2) written without the cancellation of log 2 against a log
    # near it: in float32 that cancellation cost about 1e-7 a substep, times d - 1 (a few 1e-3 at d = 26 000,
    # piling up over the hundreds of substeps of a MAMS trajectory); this form's error scales with delta
    kinetic = (delta + torch.log1p(0.5 * (1 - ue) * torch.expm1(-2 * delta))) * (dim - 1)
    return new, kinetic.squeeze(-1)


def integrate(phase: Phase, step_size: float | Tensor, scale: Tensor, value_and_grad: ValueAndGrad,
              integrator: str = "mclachlan") -> tuple[Phase, Tensor]:
    r"""One step of ``integrator`` (a key of :data:`INTEGRATORS`) of size ``step_size`` from
    ``phase``: the new phase and the kinetic-energy change :math:`\Delta K` ``[C]`` summed over
    the velocity substeps. The position moves by :math:`a \epsilon\, \sigma \odot u`; the force of
    the last position is reused by the next step's first velocity substep."""
    return integrate_amounts(phase, substep_amounts(step_size, phase.x.shape[-1], integrator), scale,
                             value_and_grad, integrator)


def substep_amounts(step_size: float | Tensor, dim: int, integrator: str = "mclachlan") -> list:
    r"""What each substep of ``integrator`` moves by at ``step_size``: a position substep
    :math:`a\epsilon`, a velocity substep its rate :math:`b\epsilon / (d - 1)`
    (:func:`velocity_update_at_rate`). Numbers for a number (computed in double precision, as the
    eager step always did), tensors for a tensor."""
    return [coefficient * step_size if kind == "x" else (coefficient * step_size) / (dim - 1)
            for kind, coefficient in INTEGRATORS[integrator]]


def integrate_amounts(phase: Phase, amounts, scale: Tensor, value_and_grad: ValueAndGrad,
                      integrator: str = "mclachlan") -> tuple[Phase, Tensor]:
    """:func:`integrate` from the substeps' amounts (:func:`substep_amounts`): numbers, or the
    0-dimensional buffers of a captured CUDA graph, which hold the same numbers rounded once to
    the tensors' precision as a number is rounded where it meets a tensor (so both give the same bits)."""
    x, u, value, grad = phase
    kinetic = torch.zeros_like(value)
    for (kind, _), amount in zip(INTEGRATORS[integrator], amounts):
        if kind == "v":
            u, change = velocity_update_at_rate(u, -scale * grad, amount)
            kinetic = kinetic + change
        else:
            x = x + amount * scale * u
            value, grad = value_and_grad(x)
    return Phase(x, u, value, grad), kinetic


def partial_refresh(u: Tensor, step_size: float, length: float, generator: torch.Generator | None = None) -> Tensor:
    r"""Partial velocity refresh over the decoherence length :math:`L`:
    :math:`u \leftarrow (c_1 u + c_2 \xi / \sqrt d) / |\cdot|`, :math:`c_1 = e^{-\epsilon / L}`,
    :math:`c_2 = \sqrt{1 - c_1^2}`, :math:`\xi \sim N(0, I)` (Robnik et al. 2023, the Langevin part of MCLMC)."""
    keep, noise = refresh_weights(step_size, length, u.shape[-1])
    return refresh_with(u, keep, noise, torch.randn(u.shape, generator=generator, dtype=u.dtype, device=u.device))


def refresh_weights(step_size: float | Tensor, length: float | Tensor, dim: int) -> tuple:
    r"""The refresh's weights :math:`c_1` and :math:`c_2 / \sqrt d` (:func:`partial_refresh`), on the
    host: numbers, or ``[C]`` float64 tensors where the step size or L is one per chain."""
    if torch.is_tensor(step_size) or torch.is_tensor(length):
        c1 = torch.exp(-torch.as_tensor(step_size, dtype=torch.float64) / torch.as_tensor(length, dtype=torch.float64))
        return c1, (1.0 - c1 * c1).sqrt() / math.sqrt(dim)
    c1 = math.exp(-step_size / length)
    return c1, math.sqrt(1.0 - c1 * c1) / math.sqrt(dim)


def refresh_with(u: Tensor, keep: float | Tensor, noise: float | Tensor, xi: Tensor) -> Tensor:
    """:func:`partial_refresh` with its weights (:func:`refresh_weights`) and normal draws ``xi`` given."""
    new = keep * u + noise * xi
    return new / new.norm(dim=-1, keepdim=True)
