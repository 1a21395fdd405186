r"""Stochastic-gradient MCMC update rules as pure functions on ``[C, D]`` tensors.

* :func:`sgld_step` (Welling and Teh 2011) and :func:`sghmc_step` (Chen, Fox and
  Guestrin 2014, the SGD-with-momentum form, eq. 15);
* :class:`StepSizeSchedule`: constant, polynomial decay and the cyclical cosine
  schedule (Zhang et al. 2020);
* :func:`inverse_temperature_at`: simulated annealing (paper 001, eq. 2-3);
* :func:`minibatch_rows`, :func:`finite_chains`, :func:`keep_chains`;
* :func:`largest_curvature`: the scale the ``step_size="auto"`` rule divides by.

The kernels that wire them (:mod:`bnnzoo.inference.kernels.sgmcmc`) only hold
state, schedules and statistics. The rules are in ``docs/algorithms.md``
("SGLD and SGHMC").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import validation

__all__ = ["AUTO", "SCHEDULES", "StepSizeSchedule", "finite_chains", "inverse_temperature_at", "keep_chains",
           "largest_curvature", "minibatch_rows", "sghmc_step", "sgld_step"]

Tensor = torch.Tensor
SCHEDULES = ("constant", "polynomial", "cyclical")
#: the sentinel of an option whose value a kernel sets from the data when it starts (``docs/algorithms.md``)
AUTO = "auto"


def sgld_step(theta: Tensor, grad: Tensor, step_size: float, inverse_temperature: float = 1.0,
              noise: Tensor | None = None) -> Tensor:
    r"""One SGLD step (Welling and Teh 2011; paper 001 eq. 2):

    .. math:: \theta' = \theta - \epsilon\,\nabla\tilde U(\theta) + \sqrt{2\epsilon/\tau}\;\xi,\quad \xi\sim N(0, I).

    The stationary law is :math:`\propto e^{-\tau U}` as :math:`\epsilon \to 0`.
    ``grad`` is :math:`\nabla\tilde U` (``[C, D]``).
    """
    if noise is None:
        noise = torch.randn_like(theta)
    return theta - step_size * grad + math.sqrt(2.0 * step_size / inverse_temperature) * noise


def sghmc_step(theta: Tensor, momentum: Tensor, grad: Tensor, step_size: float, friction: float,
               noise_estimate: float | Tensor = 0.0, inverse_temperature: float = 1.0,
               noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""One SGHMC step in the SGD-with-momentum form of Chen et al. (2014, eq. 15):

    .. math::
        v' = (1-\alpha)\,v - \eta\,\nabla\tilde U(\theta) + N\bigl(0,\ 2(\alpha-\hat\beta)\,\eta/\tau\bigr),\qquad
        \theta' = \theta + v'.

    ``step_size`` is the learning rate :math:`\eta` (:math:`\epsilon^2 M^{-1}`),
    ``friction`` :math:`\alpha = \epsilon M^{-1}C` (1 - momentum), and
    ``noise_estimate`` :math:`\hat\beta = \eta\hat V/2` the part of the friction
    already supplied by the minibatch noise (a scalar or ``[C, D]``, at most
    :math:`\alpha`). Returns ``(theta', v')``.
    """
    if noise is None:
        noise = torch.randn_like(theta)
    variance = 2.0 * (friction - noise_estimate) * step_size / inverse_temperature
    scale = variance.clamp(min=0.0).sqrt() if torch.is_tensor(variance) else math.sqrt(max(variance, 0.0))
    momentum = (1.0 - friction) * momentum - step_size * grad + scale * noise
    return theta + momentum, momentum


@dataclass(frozen=True)
class StepSizeSchedule:
    r"""Step size :math:`\epsilon_k` of iteration ``k = 1, 2, ...``.

    * ``"constant"``: :math:`\epsilon_k = \epsilon_0`;
    * ``"polynomial"``: :math:`\epsilon_k = \epsilon_0\,\bigl((k + b)/(1 + b)\bigr)^{-\gamma}`
      (``power`` :math:`\gamma`, ``offset`` b; paper 001 uses :math:`\epsilon_0 k^{-1/3}`);
    * ``"cyclical"``: :math:`\epsilon_k = \tfrac{\epsilon_0}{2}\bigl(\cos(\pi\,((k-1) \bmod L)/L) + 1\bigr)`,
      cycles of ``cycle_length`` L iterations (Zhang et al. 2020).
    """

    step_size: float
    kind: str = "constant"
    power: float = 1.0 / 3.0
    offset: float = 0.0
    cycle_length: int | None = None

    def __post_init__(self):
        validation.positive("step_size", self.step_size)
        validation.one_of("schedule", self.kind, SCHEDULES)
        if self.kind == "polynomial":
            validation.positive("decay_power", self.power)
            validation.in_interval("decay_offset", self.offset, 0, math.inf)
        if self.kind == "cyclical":
            length = self.cycle_length
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise ValueError(f"schedule 'cyclical' needs cycle_length, a positive integer; got {length!r}")

    def __call__(self, k: int) -> float:
        if self.kind == "polynomial":
            return self.step_size * ((k + self.offset) / (1.0 + self.offset)) ** (-self.power)
        if self.kind == "cyclical":
            phase = ((k - 1) % self.cycle_length) / self.cycle_length
            return 0.5 * self.step_size * (math.cos(math.pi * phase) + 1.0)
        return self.step_size


def inverse_temperature_at(k: int, initial: float = 1.0, growth: float = 1.0, maximum: float = math.inf) -> float:
    r"""Simulated annealing of the inverse temperature: :math:`\tau_k = \min(\tau_{max}, \tau_0 g^{k-1})`
    for iterations ``k = 1, 2, ...`` (``growth`` g = 1: a fixed temperature)."""
    if growth == 1.0:
        return min(initial, maximum)
    log_tau = math.log(initial) + (k - 1) * math.log(growth)
    return min(maximum, math.exp(log_tau)) if log_tau < 700.0 else maximum  # exp(700) ~ 1e304


def minibatch_rows(num_data: int, batch_size: int, num_chains: int, shared: bool = False,
                   device: torch.device | None = None) -> Tensor:
    """Row indices drawn without replacement on ``device`` (the data's): ``[B]`` shared by every
    chain, or ``[C, B]``."""
    if shared:
        return torch.randperm(num_data, device=device)[:batch_size]
    return torch.rand(num_chains, num_data, device=device).topk(batch_size, dim=-1).indices


def finite_chains(state: Tensor | tuple[Tensor, ...]) -> Tensor:
    """``[C]``: True where a chain's ``[C, D]`` state (or every tensor of a tuple of them) is finite."""
    if isinstance(state, tuple):
        return torch.stack([finite_chains(s) for s in state]).all(0)
    return torch.isfinite(state).all(-1)


def keep_chains(ok: Tensor, new: Tensor | tuple[Tensor, ...], old: Tensor | tuple[Tensor, ...]):
    """Per chain: ``new`` where ``ok`` ``[C]``, else ``old`` (a ``[C, D]`` tensor or a tuple of them)."""
    if isinstance(new, tuple):
        return tuple(keep_chains(ok, n, o) for n, o in zip(new, old))
    return torch.where(ok.unsqueeze(-1), new, old)




def largest_curvature(value_and_grad, theta: Tensor, iterations: int = 20, relative_step: float = 0.1,
                      seed: int = 0, directions: Tensor | None = None, return_direction: bool = False):
    r"""The largest eigenvalue :math:`\hat\lambda` of the Hessian of ``U`` around ``theta`` (``[C, D]``),
    by power iteration on central finite differences of the gradient; the largest over chains.

    .. math:: Hv \approx \frac{\nabla U(\theta + hv) - \nabla U(\theta - hv)}{2h},\qquad
              h = \text{relative\_step}\cdot\max(\lVert\theta\rVert, 10^{-2}),\ \lVert v\rVert = 1.

    The difference is taken over a macroscopic ``h`` (a tenth of the point's norm), so a kink
    of the potential (an L1 prior term at 0) adds at most its jump over ``h``, not a spike, and
    ``\hat\lambda`` is the curvature at the scale of the initial point. ``value_and_grad`` maps
    ``[C, D]`` to ``(U [C], grad [C, D])``; chains whose differences are not finite are left out
    (NaN when none is). The directions come from a private generator (``seed``), so the run's
    random stream is untouched. ``directions`` (``[D]`` bool) restricts v to those coordinates
    (e.g. leaving out a pinned one). ``return_direction``: ``(lambda, v [C, D])``, each chain's
    unit direction (None where no chain's difference was finite).
    """
    theta = theta.detach()
    generator = torch.Generator(device=theta.device).manual_seed(seed)
    mask = torch.ones(theta.shape[-1], dtype=theta.dtype, device=theta.device) if directions is None \
        else directions.to(theta.dtype)
    v = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device) * mask
    v = v / v.norm(dim=-1, keepdim=True)
    h = relative_step * theta.norm(dim=-1, keepdim=True).clamp(min=1e-2)
    estimate = torch.full(theta.shape[:1], math.nan, dtype=theta.dtype, device=theta.device)
    for _ in range(iterations):
        hv = mask * (value_and_grad(theta + h * v)[1] - value_and_grad(theta - h * v)[1]) / (2 * h)
        norm = hv.norm(dim=-1, keepdim=True)
        ok = torch.isfinite(norm) & (norm > 0)
        estimate = torch.where(ok[:, 0], (v * hv).sum(-1).abs(), estimate)
        v = torch.where(ok, hv / norm.clamp(min=torch.finfo(theta.dtype).tiny), v)
    finite = estimate[torch.isfinite(estimate)]
    value = float(finite.max()) if finite.numel() else math.nan
    if return_direction:
        return value, (v if finite.numel() else None)
    return value


def sgld_variance_ratio(step_size: float, curvature: float, noise: float = 0.0) -> float:
    r"""Stationary variance of SGLD over the exact one, :math:`1/\lambda`, on a Gaussian of curvature
    :math:`\lambda` whose gradient carries minibatch noise of variance :math:`V` (``noise``):
    :math:`x' = (1-\epsilon\lambda)x - \epsilon e + \sqrt{2\epsilon}\,\xi` gives

    .. math:: \frac{\mathrm{Var}\,x}{1/\lambda} = \frac{1 + \epsilon V/2}{1 - \epsilon\lambda/2}

    (inf where :math:`\epsilon\lambda \ge 2`: the step is unstable)."""
    h = step_size * curvature
    if not h < 2.0:
        return math.inf
    return (1.0 + step_size * noise / 2.0) / (1.0 - h / 2.0)


def sghmc_variance_ratio(step_size: float, friction: float, curvature: float, noise: float = 0.0) -> float:
    r"""Stationary variance of SGHMC (:func:`sghmc_step`, :math:`\hat\beta = 0`) over the exact one on a
    Gaussian of curvature :math:`\lambda` with minibatch gradient noise of variance :math:`V`: the
    linear recursion :math:`(x, v)' = A(x, v) + (1, 1)\,n`, :math:`A = [[1-\eta\lambda, 1-\alpha],
    [-\eta\lambda, 1-\alpha]]`, :math:`\mathrm{Var}\,n = 2\alpha\eta + \eta^2 V`, solved for its
    stationary covariance :math:`\Sigma = A\Sigma A^\top + Q` (inf where it has none)."""
    import numpy as np

    eta, lam = step_size, curvature
    a = np.array([[1.0 - eta * lam, 1.0 - friction], [-eta * lam, 1.0 - friction]])
    if not np.all(np.abs(np.linalg.eigvals(a)) < 1.0):
        return math.inf
    q = (2.0 * friction * eta + eta * eta * noise) * np.ones((2, 2))
    sigma = np.linalg.solve(np.eye(4) - np.kron(a, a), q.reshape(-1)).reshape(2, 2)
    return float(sigma[0, 0] * lam)
