"""Hamiltonian integrators as small pure functions on ``[C, D]`` tensors.

Written once for every kernel that simulates Hamiltonian dynamics
(:class:`~bnnzoo.inference.kernels.hmc.FixedStepHMC` and the kernels built on it, the paper-003 sweeps).
The Hamiltonian is :math:`H(\\theta, p) = U(\\theta) + \\tfrac12 p^\\top M^{-1} p`
with a diagonal mass matrix given by its inverse ``inv_mass`` (the estimated
posterior variances): ``[D]`` shared by all chains or ``[C, D]`` per chain.
"""

from __future__ import annotations

from typing import Callable

import math

import torch

Tensor = torch.Tensor
ValueAndGrad = Callable[[Tensor], tuple[Tensor, Tensor]]


def kinetic_energy(p: Tensor, inv_mass: Tensor) -> Tensor:
    r"""Kinetic energy :math:`K(p) = \tfrac12 \sum_d M^{-1}_{dd} p_d^2`, per chain: ``[C, D] -> [C]``."""
    return 0.5 * (inv_mass * p * p).sum(-1)


def velocity(p: Tensor, inv_mass: Tensor) -> Tensor:
    r""":math:`d\theta/dt = M^{-1} p`."""
    return inv_mass * p


def leapfrog_step(theta: Tensor, p: Tensor, grad: Tensor, step_size: float | Tensor, inv_mass: Tensor,
                  value_and_grad: ValueAndGrad, fused: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""One leapfrog step from ``(theta, p)`` with ``grad`` :math:`= \nabla U(\theta)`:
    returns :math:`(\theta', p', U(\theta'), \nabla U(\theta'))` (see :func:`leapfrog`).
    Each update is one fused ``addcmul`` (a small network's step is bound by the ops it
    dispatches); a step size that is a number becomes a tensor first (:func:`leapfrog` does it
    once per trajectory), so eager steps and a captured CUDA graph's (whose step size is a
    buffer) run the same ops and get the same bits. ``fused=False``: the plain formulas, which a
    ``torch.compile`` graph traces (inductor fuses them into its loops)."""
    if not fused:
        p_half = p - 0.5 * step_size * grad
        theta_new = theta + step_size * velocity(p_half, inv_mass)
        value_new, grad_new = value_and_grad(theta_new)
        return theta_new, p_half - 0.5 * step_size * grad_new, value_new, grad_new
    step = step_size if torch.is_tensor(step_size) else theta.new_tensor(float(step_size))
    half = step * -0.5
    p_half = torch.addcmul(p, grad, half)
    theta_new = torch.addcmul(theta, inv_mass * step, p_half)
    value_new, grad_new = value_and_grad(theta_new)
    return theta_new, p_half.addcmul_(grad_new, half), value_new, grad_new


class EnergyTracker:
    r"""The largest energy error along a trajectory, :math:`\max_t |H_t - H_0|` per chain.

    Pass one to :func:`leapfrog` (``track_energy=``): after every step it adds the
    step's :math:`H_t = U(\theta_t) + K(p_t)` (the potential comes with the step;
    the kinetic energy is one ``[C, D]`` reduction). A step whose energy is not
    finite makes the chain's maximum ``inf`` for good.

    Parameters
    ----------
    energy : Tensor
        :math:`H_0` ``[C]``, the energy at the start of the trajectory.
    inv_mass : Tensor
        ``[D]`` or ``[C, D]`` diagonal of :math:`M^{-1}`.
    """

    def __init__(self, energy: Tensor, inv_mass: Tensor):
        self.energy = energy
        self.inv_mass = inv_mass
        self._high = energy.clone()
        self._low = energy.clone()

    def update(self, value: Tensor, p: Tensor) -> None:
        """Add the step's energy ``value + K(p)`` (two or three tensor ops: this runs every leapfrog step).
        A chain that has stopped (per-chain step counts) repeats its last energy, which changes nothing."""
        if self.inv_mass.dim() == 1:
            energy = torch.addmv(value, p.square(), self.inv_mass, alpha=0.5)
        else:
            energy = value + kinetic_energy(p, self.inv_mass)
        torch.maximum(self._high, energy, out=self._high)  # NaN propagates: it stays NaN
        torch.minimum(self._low, energy, out=self._low)

    def bounds(self) -> tuple[Tensor, Tensor]:
        """The highest and lowest energy so far, ``[C]`` each."""
        return self._high, self._low

    def set_bounds(self, high: Tensor, low: Tensor) -> None:
        """Replace them, e.g. with what a compiled multi-step graph computed from :meth:`bounds`."""
        self._high, self._low = high, low

    def load(self, other: "EnergyTracker") -> None:
        """Take ``other``'s highest and lowest energy so far (in place: a captured graph's buffers stay)."""
        self._high.copy_(other._high)
        self._low.copy_(other._low)

    @property
    def max_error(self) -> Tensor:
        r""":math:`\max_t |H_t - H_0|` per chain so far; inf where a step was not finite."""
        error = torch.maximum(self._high - self.energy, self.energy - self._low)
        return torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))


def leapfrog(theta: Tensor, p: Tensor, grad: Tensor, step_size: float | Tensor, num_steps: int | Tensor,
             value_and_grad: ValueAndGrad, inv_mass: Tensor, value: Tensor | None = None,
             step: Callable | None = None,
             track_energy: EnergyTracker | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``num_steps`` leapfrog (velocity Verlet) steps of size :math:`\epsilon`:

    .. math::
        p_{1/2} = p - \tfrac{\epsilon}{2} \nabla U(\theta),\quad
        \theta' = \theta + \epsilon M^{-1} p_{1/2},\quad
        p' = p_{1/2} - \tfrac{\epsilon}{2} \nabla U(\theta').

    The map is volume preserving and reversible (negate ``p'`` and integrate
    again to come back), so it is a valid HMC proposal for any step count.

    Parameters
    ----------
    theta, p, grad : Tensor
        ``[C, D]`` positions, momenta and :math:`\nabla U(\theta)`.
    step_size : float or Tensor
        A scalar or ``[C, 1]`` (one step size per chain).
    num_steps : int or Tensor
        Steps for every chain, or a ``[C]`` integer tensor of per-chain step
        counts: a chain that has done its steps stops moving (masked) while the
        others go on, so the batch runs ``max(num_steps)`` gradient passes.
    value_and_grad : callable
        ``theta [C, D] -> (U [C], grad U [C, D])``, one batched pass.
    inv_mass : Tensor
        ``[D]`` or ``[C, D]`` diagonal of :math:`M^{-1}`.
    value : Tensor, optional
        ``U(theta)`` ``[C]``; returned for chains with zero steps (NaN if not given).
    step : callable, optional
        One step ``(theta, p, grad, step_size, inv_mass) -> (theta', p', U', grad U')``
        to use instead of :func:`leapfrog_step` on ``value_and_grad``: e.g. a
        potential's compiled :meth:`~bnnzoo.inference.potential.FlatPotential.leapfrog_step`.
    track_energy : EnergyTracker, optional
        Updated with every step's energy (its ``max_error`` is then the
        trajectory's largest :math:`|H_t - H_0|`); None (the default) costs nothing.

    Returns
    -------
    (theta, p, value, grad) at the end of each chain's trajectory. A chain that
    meets a NaN/inf potential carries NaN/inf to the end (the caller rejects it).
    """
    if isinstance(num_steps, Tensor):
        steps = num_steps.to(torch.long).reshape(-1)
        max_steps = int(steps.max()) if steps.numel() else 0
    else:
        steps, max_steps = None, int(num_steps)
    if value is None:
        value = theta.new_full(theta.shape[:-1], float("nan"))
    if not torch.is_tensor(step_size):
        step_size = theta.new_tensor(float(step_size))  # once, not at every step (leapfrog_step)
    if step is None:
        def step(theta, p, grad, step_size, inv_mass):
            return leapfrog_step(theta, p, grad, step_size, inv_mass, value_and_grad)
    for i in range(max_steps):
        theta_new, p_new, value_new, grad_new = step(theta, p, grad, step_size, inv_mass)
        if steps is None:
            theta, p, value, grad = theta_new, p_new, value_new, grad_new
            if track_energy is not None:
                track_energy.update(value, p)
            continue
        active = i < steps
        moving = active.unsqueeze(-1)
        theta = torch.where(moving, theta_new, theta)
        p = torch.where(moving, p_new, p)
        grad = torch.where(moving, grad_new, grad)
        value = torch.where(active, value_new, value)
        if track_energy is not None:
            track_energy.update(value, p)
    return theta, p, value, grad
