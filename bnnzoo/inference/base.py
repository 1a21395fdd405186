"""The shared base of bnnzoo's MCMC kernels.

A kernel subclass writes only its update rule, :meth:`FlatKernel.transition`,
on a ``[C, D]`` tensor of C chains. The base owns everything else that the
Pyro ``MCMC`` driver needs:

* ``setup()`` builds the flat potential from the model and its arguments and
  resets all per-chain state (chains may run one after another on the same
  kernel object), keeping user-supplied ``initial_params``;
* ``sample(params)`` flattens, calls ``transition``, records the step's
  statistics and counts steps to know when warm-up ends (Pyro never calls
  ``end_warmup``);
* ``diagnostics()`` returns ``"divergences"`` and ``"sample_stats"`` (per-draw
  arrays, ``[draws]`` or ``[draws, C]``): the only channel that survives chains
  run in worker processes;
* ``logging()`` feeds the progress bar.

With ``num_chains=C > 1`` the kernel advances C chains as one batch inside one
Pyro chain: every site gets a leading dim of size C, and
:func:`bnnzoo.diagnostics.to_inference_data` splits them back into C chains.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable, Mapping

import numpy as np
import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from .potential import FlatPotential, initial_theta, make_potential

Tensor = torch.Tensor


class DualAveraging:
    r"""Nesterov dual averaging of ``log(step_size)`` toward a target acceptance
    (Hoffman and Gelman 2014, Algorithm 5):

    .. math::
        \bar H_t = (1 - \tfrac{1}{t + t_0}) \bar H_{t-1} + \tfrac{1}{t + t_0}(\delta - \alpha_t),\quad
        \log \epsilon_t = \mu - \tfrac{\sqrt t}{\gamma} \bar H_t,\quad
        \log \bar\epsilon_t = t^{-\kappa} \log \epsilon_t + (1 - t^{-\kappa}) \log \bar\epsilon_{t-1}

    with :math:`\mu = \log(10 \epsilon_0)`. Use :attr:`step_size` during warm-up
    and :attr:`final_step_size` after it.
    """

    def __init__(self, step_size: float, target: float, t0: float = 10.0,
                 gamma: float = 0.05, kappa: float = 0.75):
        self.target, self.t0, self.gamma, self.kappa = target, t0, gamma, kappa
        self.restart(step_size)

    def restart(self, step_size: float) -> None:
        self.mu = math.log(10 * step_size)
        self.t = 0
        self.h_bar = 0.0
        self.log_step = math.log(step_size)
        self.log_step_bar = 0.0

    def update(self, accept_prob: float) -> float:
        """Feed one (mean) acceptance probability; returns the next step size."""
        accept_prob = 0.0 if not math.isfinite(accept_prob) else min(max(accept_prob, 0.0), 1.0)
        self.t += 1
        eta = 1.0 / (self.t + self.t0)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept_prob)
        self.log_step = self.mu - math.sqrt(self.t) / self.gamma * self.h_bar
        weight = self.t ** (-self.kappa)
        self.log_step_bar = weight * self.log_step + (1 - weight) * self.log_step_bar
        return self.step_size

    @property
    def step_size(self) -> float:
        return math.exp(self.log_step)

    @property
    def final_step_size(self) -> float:
        return math.exp(self.log_step_bar) if self.t else self.step_size


def check_positive_option(name: str, value) -> None:
    """Clear error for a non-positive numeric option, before sampling starts."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def check_positive_int(name: str, value) -> None:
    """Clear error for an option that must be an integer >= 1, before sampling starts."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_fraction_option(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")


class FlatKernel(MCMCKernel):
    """Base of bnnzoo kernels on a flat unconstrained vector (see module docstring).

    Parameters
    ----------
    model : callable, optional
        A :class:`~bnnzoo.models.BNN` (fast potential) or any Pyro model; its
        arguments come from ``MCMC.run(*args)``.
    potential : FlatPotential, optional
        Use this potential instead of building one from ``model``.
    num_chains : int
        Chains advanced together as one batch (``chain_method="vectorized"``).
    init_radius : float
        Initial points are uniform in ``(-init_radius, init_radius)`` in
        unconstrained space, unless ``initial_params`` are set.
    """

    #: names of the per-step statistics this kernel records (ArviZ names).
    stat_names: tuple[str, ...] = ("acceptance_rate", "diverging", "lp")

    def __init__(self, model: Callable | None = None, potential: FlatPotential | None = None,
                 num_chains: int = 1, init_radius: float = 1.0):
        if model is None and potential is None:
            raise ValueError("give a model or a potential")
        if isinstance(num_chains, bool) or not isinstance(num_chains, int) or num_chains < 1:
            raise ValueError(f"num_chains must be a positive integer, got {num_chains!r}")
        check_positive_option("init_radius", init_radius)
        self.model = model
        self.potential = potential
        self._given_potential = potential is not None
        self.num_chains = num_chains
        self.init_radius = init_radius
        self._initial_params: dict[str, Tensor] | None = None
        self._user_initial_params = False
        self.transforms: dict | None = potential.transforms if potential is not None else None
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        """Reset all per-chain state; subclasses extend and call super."""
        self._t = 0
        self._warmup_steps = 0
        self._stats: list[dict[str, np.ndarray]] = []
        self._warmup_stats: list[dict[str, np.ndarray]] = []
        self._divergences: list[int] = []
        self._accept_sum = 0.0
        self._cache: tuple[Tensor, Tensor, Tensor] | None = None  # theta, U, grad U

    @property
    def initial_params(self) -> dict[str, Tensor]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Mapping[str, Tensor]) -> None:
        self._initial_params = dict(params) if params is not None else None
        self._user_initial_params = params is not None

    @property
    def in_warmup(self) -> bool:
        return self._t < self._warmup_steps

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        self._reset()
        self._warmup_steps = int(warmup_steps)
        if not self._given_potential:
            self.potential = make_potential(self.model, *args[:2], args=args, kwargs=kwargs)
        self.transforms = self.potential.transforms
        if not self._user_initial_params:
            theta = initial_theta(self.potential, self.num_chains, self.init_radius)
            self._initial_params = self.unflatten(theta)
        self._check_initial_shapes()
        self.prepare(self.flatten(self._initial_params))

    def _check_initial_shapes(self) -> None:
        for name in self.potential.names:
            if name not in self._initial_params:
                raise ValueError(f"initial_params is missing the site {name!r}")
            want = self.potential.shapes[name]
            got = tuple(self._initial_params[name].shape)
            ok = got == want if self.num_chains == 1 else got == (self.num_chains,) + want
            if not ok:
                raise ValueError(f"initial_params[{name!r}] has shape {got}, expected "
                                 f"{want if self.num_chains == 1 else (self.num_chains,) + want}")

    def prepare(self, theta: Tensor) -> None:
        """Hook after setup, with the initial ``[C, D]`` point (e.g. find a step size)."""

    # ---------------------------------------------------------------- layout
    def flatten(self, params: Mapping[str, Tensor]) -> Tensor:
        """Site dict -> ``[C, D]``."""
        theta = self.potential.flatten(params, batch_ndim=0 if self.num_chains == 1 else 1)
        return theta.reshape(self.num_chains, self.potential.dim)

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """``[C, D]`` -> site dict (no chain dim when C == 1)."""
        return self.potential.unflatten(theta[0] if self.num_chains == 1 else theta)

    def value(self, theta: Tensor) -> Tensor:
        """``U(theta)`` per chain, from the cache when ``theta`` is the current point."""
        if self._cache is not None and self._cache[0] is theta:
            return self._cache[1]
        with torch.no_grad():
            value = self.potential(theta)
        self.remember(theta, value)
        return value

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U`` and ``grad U`` at ``theta``, from the cache when possible."""
        if self._cache is not None and self._cache[0] is theta and self._cache[2] is not None:
            return self._cache[1], self._cache[2]
        value, grad = self.potential.value_and_grad(theta)
        self.remember(theta, value, grad)
        return value, grad

    def remember(self, theta: Tensor, value: Tensor, grad: Tensor | None = None) -> None:
        """Cache ``U`` (and its gradient) at the chain's current point."""
        self._cache = (theta, value, grad)

    # -------------------------------------------------------------- sampling
    def transition(self, theta: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """One MCMC step on ``[C, D]``; returns the new point and per-chain
        statistics (tensors of shape ``[C]``), including ``acceptance_rate``,
        ``diverging`` and ``lp``."""
        raise NotImplementedError

    def sample(self, params: Mapping[str, Tensor]) -> dict[str, Tensor]:
        theta = self.flatten(params)
        if self._cache is not None and torch.equal(self._cache[0], theta):
            theta = self._cache[0]
        theta_new, stats = self.transition(theta)
        self._record(stats)
        self._t += 1
        return self.unflatten(theta_new)

    def _record(self, stats: Mapping[str, Tensor]) -> None:
        row = {k: self._per_chain(v) for k, v in stats.items()}
        if self.in_warmup:
            self._warmup_stats.append(row)
            return
        draw = len(self._stats)
        self._stats.append(row)
        if "acceptance_rate" in row:  # SG-MCMC kernels have no accept step and record none
            self._accept_sum += float(row["acceptance_rate"].mean())
        if "diverging" in row:
            self._divergences.extend([draw] * int(row["diverging"].sum()))

    def _per_chain(self, value) -> np.ndarray:
        """A statistic as ``[C]`` (scalar per chain) or ``[C, k]`` (a vector per chain)."""
        v = torch.as_tensor(value).detach().reshape(self.num_chains, -1).cpu().numpy()
        return v[:, 0] if v.shape[1] == 1 else v

    # ----------------------------------------------------------- reporting
    @staticmethod
    def _stack(rows: list[dict[str, np.ndarray]], squeeze: bool) -> dict[str, np.ndarray]:
        if not rows:
            return {}
        out = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        return {k: v[:, 0] for k, v in out.items()} if squeeze else out

    def diagnostics(self) -> dict:
        """``divergences`` (one draw index per divergent transition),
        ``acceptance rate``, and ``sample_stats``: per-draw arrays of shape
        ``[draws]`` (or ``[draws, C]`` for vectorized chains)."""
        n = max(len(self._stats), 1)
        return {
            "divergences": list(self._divergences),
            "acceptance rate": self._accept_sum / n,
            "sample_stats": self._stack(self._stats, self.num_chains == 1),
            "warmup_sample_stats": self._stack(self._warmup_stats, self.num_chains == 1),
            "num_chains": self.num_chains,
        }

    def logging(self) -> OrderedDict:
        rows = self._stats or self._warmup_stats
        recent = rows[-50:]
        log = OrderedDict()
        if recent and "step_size" in recent[-1]:
            log["step size"] = f"{float(recent[-1]['step_size'].mean()):.2e}"
        if not recent or "acceptance_rate" in recent[-1]:
            acc = float(np.mean([r["acceptance_rate"].mean() for r in recent])) if recent else float("nan")
            log["acc. prob"] = f"{acc:.3f}"
        return log


def metropolis_accept(log_ratio: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Metropolis test per chain. A NaN log ratio (a NaN energy) is a rejection
    and a divergence. Returns ``(accepted, acceptance_prob, nan_mask)``."""
    nan = torch.isnan(log_ratio)
    log_ratio = torch.where(nan, torch.full_like(log_ratio, -math.inf), log_ratio)
    prob = log_ratio.clamp(max=0.0).exp()
    u = torch.rand(log_ratio.shape, generator=generator, dtype=log_ratio.dtype)
    return u < prob, prob, nan
