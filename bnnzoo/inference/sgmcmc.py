r"""Stochastic-gradient MCMC: SGLD and SGHMC (engines ``"sgld"``, ``"sghmc"``).

Both kernels follow the minibatch estimate of the potential's gradient,

.. math::
    \nabla\tilde U(\theta) = -\nabla\log p(\theta) - \frac{N}{B}\sum_{i\in S}\nabla\log p(y_i\mid x_i,\theta),

with the B rows ``S`` drawn without replacement at every iteration, inside
``sample()`` (Pyro's ``initialize_model`` refuses subsampled plates; transforms
and the initial point come from the full model). By default every chain draws
its own minibatch (``rows [C, B]``: the chains stay independent Markov
chains); ``shared_minibatch=True`` gives all chains the same rows (one cheaper
batched forward pass). ``batch_size=None`` uses the full data (and is the only
choice for a potential without data, e.g. a known target density).

There is no Metropolis test (the chain is exact only as the step size goes to
zero), so no ``acceptance_rate`` is recorded. A chain whose minibatch potential
or gradient is NaN/inf, or whose step leaves the finite numbers, keeps its
point (and momentum) and counts a divergence.

The math is in small pure functions on ``[C, D]`` tensors (:func:`sgld_step`,
:func:`sghmc_step`, :class:`StepSizeSchedule`, :func:`inverse_temperature_at`,
:func:`minibatch_rows`); the kernel classes only wire state, schedules and
statistics.

Per-draw statistics: ``step_size``, ``temperature`` (:math:`1/\tau`), ``lp``
(a *minibatch estimate* of the log density at the point the draw's last
iteration started from: no extra gradient pass is spent on it), ``diverging``,
and ``sparsity`` when pruning.

References
----------
* Welling and Teh (2011), "Bayesian learning via stochastic gradient Langevin dynamics", ICML.
* Chen, Fox and Guestrin (2014), "Stochastic gradient Hamiltonian Monte Carlo", ICML, eq. (15).
* Zhang, Li, Zhang, Chen and Wilson (2020), "Cyclical stochastic gradient MCMC for
  Bayesian deep learning", ICLR (the cyclical cosine step size).
* Deng, Zhang, Liang and Lin (2019), "An adaptive empirical Bayesian method for
  sparse deep learning", NeurIPS, eq. (2)-(3) (inverse temperature, simulated annealing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from pyro.infer import MCMC

from ..results import Draws, split_mcmc
from .base import FlatKernel, check_positive_option
from .engines import _chain_method, engine
from .potential import make_potential
from .pruning import MagnitudePruning

__all__ = [
    "SGHMC", "SGLD", "SGMCMCKernel", "StepSizeSchedule", "inverse_temperature_at", "minibatch_rows",
    "run_sgmcmc", "sghmc_step", "sgld_step",
]

Tensor = torch.Tensor
SCHEDULES = ("constant", "polynomial", "cyclical")
#: InferenceData attributes of every SG-MCMC run
LP_NOTE = ("minibatch estimate: log prior + (N/B) * log likelihood of B random rows, at the point "
           "the draw's last iteration started from; not the exact log density")
LP_FULL_DATA = "full data: the log density at the point the draw's last iteration started from"


# ------------------------------------------------------------ pure pieces
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
        check_positive_option("step_size", self.step_size)
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule {self.kind!r}: choose one of {', '.join(SCHEDULES)}")
        if self.kind == "polynomial":
            check_positive_option("decay_power", self.power)
            if isinstance(self.offset, bool) or not isinstance(self.offset, (int, float)) or not self.offset >= 0:
                raise ValueError(f"decay_offset must be a number >= 0, got {self.offset!r}")
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


def minibatch_rows(num_data: int, batch_size: int, num_chains: int, shared: bool = False) -> Tensor:
    """Row indices drawn without replacement: ``[B]`` shared by every chain, or ``[C, B]``."""
    if shared:
        return torch.randperm(num_data)[:batch_size]
    return torch.rand(num_chains, num_data).topk(batch_size, dim=-1).indices


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


def _check_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


# ------------------------------------------------------------ the kernels
class SGMCMCKernel(FlatKernel):
    """Shared wiring of the SG-MCMC kernels: minibatches, schedules, temperature,
    thinning, pruning and statistics. A subclass gives :meth:`step` (and may
    override :meth:`force` for another gradient, as the spike-and-slab kernels do).

    Parameters
    ----------
    model, potential, num_chains, init_radius
        See :class:`~bnnzoo.inference.base.FlatKernel`.
    step_size : float
        :math:`\\epsilon_0` (SGLD) or the learning rate :math:`\\eta_0` (SGHMC).
    schedule : str
        ``"constant"``, ``"polynomial"`` or ``"cyclical"`` (:class:`StepSizeSchedule`).
    decay_power, decay_offset : float
        Polynomial decay :math:`\\epsilon_0((k+b)/(1+b))^{-\\gamma}`.
    cycle_length : int, optional
        Iterations per cycle of the cyclical schedule.
    batch_size : int, optional
        Minibatch size B (None: the full data, every step).
    shared_minibatch : bool
        One minibatch for all vectorized chains (default: one per chain).
    inverse_temperature : float
        :math:`\\tau_0`; the chain targets :math:`e^{-\\tau U}`.
    annealing : float
        Growth g of simulated annealing, :math:`\\tau_k = \\tau_0 g^{k-1}` (1: none).
    max_inverse_temperature : float
        Cap of the annealed :math:`\\tau`.
    thin : int
        Iterations per kept draw after warm-up (warm-up steps are single iterations).
    pruning : MagnitudePruning, optional
        Magnitude pruning schedule (:mod:`bnnzoo.inference.pruning`).
    """

    stat_names = ("diverging", "lp", "step_size", "temperature")

    def __init__(self, model=None, potential=None, step_size: float = 1e-3, schedule: str = "constant",
                 decay_power: float = 1.0 / 3.0, decay_offset: float = 0.0, cycle_length: int | None = None,
                 batch_size: int | None = None, shared_minibatch: bool = False,
                 inverse_temperature: float = 1.0, annealing: float = 1.0,
                 max_inverse_temperature: float = math.inf, thin: int = 1,
                 pruning: MagnitudePruning | None = None, num_chains: int = 1, init_radius: float = 1.0):
        self.schedule = StepSizeSchedule(step_size, schedule, decay_power, decay_offset, cycle_length)
        if batch_size is not None:
            _check_int("batch_size", batch_size)
        check_positive_option("inverse_temperature", inverse_temperature)
        check_positive_option("annealing", annealing)
        if not (isinstance(max_inverse_temperature, (int, float)) and max_inverse_temperature > 0):
            raise ValueError(f"max_inverse_temperature must be positive, got {max_inverse_temperature!r}")
        _check_int("thin", thin)
        if pruning is not None and not isinstance(pruning, MagnitudePruning):
            raise ValueError(f"pruning must be a MagnitudePruning, got {type(pruning).__name__}")
        self.batch_size = batch_size
        self.shared_minibatch = bool(shared_minibatch)
        self.inverse_temperature = float(inverse_temperature)
        self.annealing = float(annealing)
        self.max_inverse_temperature = float(max_inverse_temperature)
        self.thin = int(thin)
        self.pruning = pruning
        super().__init__(model, potential, num_chains, init_radius)

    # ---------------------------------------------------------------- state
    def _reset(self) -> None:
        super()._reset()
        self._k = 0  # SG-MCMC iterations done (warm-up included)
        self._aux: Tensor | None = None  # the momentum of SGHMC
        self._pruner = None
        self._last_lp: Tensor | None = None
        self._last_iteration = True

    def prepare(self, theta: Tensor) -> None:
        self.check_potential(self.potential)
        if self.pruning is not None:
            self._pruner = self.pruning.bind(self.potential, self.num_chains)

    def check_potential(self, potential) -> None:
        """Clear errors, before any sampling, for what this kernel cannot do on ``potential``."""
        self.check_batch_size(potential)
        if self.pruning is not None:
            self.pruning.bind(potential, 1)

    def check_batch_size(self, potential) -> None:
        """Clear errors for a minibatch the potential cannot give."""
        if self.batch_size is None:
            return
        num_data = getattr(potential, "num_data", None)
        if num_data is None or not hasattr(potential, "minibatch_value_and_grad"):
            raise ValueError(f"batch_size={self.batch_size}: minibatches need a BNN model (a potential "
                             f"with data); use batch_size=None for {type(potential).__name__}")
        if self.batch_size > num_data:
            raise ValueError(f"batch_size={self.batch_size} is larger than the {num_data} training rows")

    @property
    def num_data(self) -> int | None:
        return getattr(self.potential, "num_data", None)

    # ------------------------------------------------------------- one step
    def draw_rows(self) -> Tensor | None:
        """This iteration's minibatch (None: the full data)."""
        if self.batch_size is None or self.batch_size == self.num_data:
            return None
        return minibatch_rows(self.num_data, self.batch_size, self.num_chains, self.shared_minibatch)

    def force(self, theta: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        """Minibatch ``U`` ``[C]`` and its gradient ``[C, D]`` at ``theta``."""
        if rows is None:
            return self.potential.value_and_grad(theta)
        return self.potential.minibatch_value_and_grad(theta, rows)

    def step(self, theta: Tensor, aux: Tensor | None, grad: Tensor, step_size: float,
             inverse_temperature: float) -> tuple[Tensor, Tensor | None]:
        """The update rule: ``(theta, aux) -> (theta', aux')`` (aux: e.g. a momentum; a ``[C, D]``
        tensor or a tuple of them, kept per chain when a step is not finite)."""
        raise NotImplementedError

    def initial_aux(self, theta: Tensor, step_size: float, inverse_temperature: float) -> Tensor | None:
        """The auxiliary state (a momentum) before the first iteration; None for SGLD."""
        return None

    def after_step(self, theta: Tensor) -> Tensor:
        """Hook on the new ``[C, D]`` point of every iteration (pruning, pinned coordinates)."""
        if self._pruner is not None:
            theta = self._pruner.step(theta, self._k)
            if self._aux is not None:
                self._aux = self._pruner.apply(self._aux)
        return theta

    def iterate(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One SG-MCMC iteration: ``(theta', U at theta [C], diverging [C])``."""
        self._k += 1
        step_size = self.schedule(self._k)
        tau = inverse_temperature_at(self._k, self.inverse_temperature, self.annealing,
                                     self.max_inverse_temperature)
        value, grad = self.force(theta, self.draw_rows())
        ok = torch.isfinite(value) & torch.isfinite(grad).all(-1)
        grad = torch.where(ok.unsqueeze(-1), grad, torch.zeros_like(grad))
        if self._aux is None:
            self._aux = self.initial_aux(theta, step_size, tau)
        theta_new, aux_new = self.step(theta, self._aux, grad, step_size, tau)
        ok = ok & finite_chains(theta_new)
        if aux_new is not None:
            ok = ok & finite_chains(aux_new)
            self._aux = keep_chains(ok, aux_new, self._aux)
        theta_new = torch.where(ok.unsqueeze(-1), theta_new, theta)
        self._step_size, self._tau = step_size, tau
        return self.after_step(theta_new), value, ~ok

    def iterations_per_draw(self) -> int:
        """SG-MCMC iterations of the coming draw: 1 in warm-up, ``thin`` after it."""
        return 1 if self.in_warmup else self.thin

    def transition(self, theta: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        diverging = torch.zeros(self.num_chains, dtype=torch.bool)
        iterations = self.iterations_per_draw()
        for i in range(iterations):
            self._last_iteration = i == iterations - 1  # a force may skip work for lp before that
            theta, value, bad = self.iterate(theta)
            diverging |= bad
        lp = -value.detach()
        if self._last_lp is not None:
            lp = torch.where(torch.isfinite(lp), lp, self._last_lp)
        self._last_lp = lp
        full = lambda v: torch.full((self.num_chains,), float(v))  # noqa: E731
        stats = {"diverging": diverging, "lp": lp, "step_size": full(self._step_size),
                 "temperature": full(1.0 / self._tau)}
        stats.update(self.draw_stats(theta))
        return theta, stats

    def draw_stats(self, theta: Tensor) -> dict[str, Tensor]:
        """Extra per-draw statistics (``[C]`` tensors)."""
        return {"sparsity": self._pruner.sparsity()} if self._pruner is not None else {}

    # ------------------------------------------------------------ reporting
    def final_state(self) -> dict:
        """Final per-chain quantities (typed fields of :class:`~bnnzoo.results.Draws`):
        ``{name: {site: [C, ...] array}}``."""
        if self._pruner is None:
            return {}
        shapes = self.potential.shapes
        return {"pruning_mask": {s: m.reshape((self.num_chains,) + shapes[s]).numpy()
                                 for s, m in self._pruner.masks.items()}}

    def diagnostics(self) -> dict:
        out = super().diagnostics()
        out.pop("acceptance rate", None)  # no Metropolis test
        out["final_state"] = self.final_state()
        return out

    def logging(self):
        log = super().logging()
        if self._stats or self._warmup_stats:
            log["iteration"] = self._k
        return log


class SGLD(SGMCMCKernel):
    r"""Stochastic gradient Langevin dynamics (Welling and Teh 2011):

    .. math:: \theta_{k+1} = \theta_k - \epsilon_k\nabla\tilde U(\theta_k) + \sqrt{2\epsilon_k/\tau_k}\;\xi_k.

    Parameters: see :class:`SGMCMCKernel`.

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> kernel = SGLD(model, step_size=1e-4, batch_size=32, schedule="polynomial", thin=10)
    >>> MCMC(kernel, num_samples=1000, warmup_steps=2000).run(x, y)
    """

    def step(self, theta, aux, grad, step_size, inverse_temperature):
        return sgld_step(theta, grad, step_size, inverse_temperature), None


NOISE_ESTIMATES = ("running",)


class SGHMC(SGMCMCKernel):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), in the
    SGD-with-momentum form (:func:`sghmc_step`):

    .. math::
        v_{k+1} = (1-\alpha)v_k - \eta_k\nabla\tilde U(\theta_k) + N(0, 2(\alpha-\hat\beta)\eta_k/\tau_k),\quad
        \theta_{k+1} = \theta_k + v_{k+1}.

    The momentum starts from its stationary law :math:`N(0, \eta_1/\tau_1)` and is
    kept across draws.

    Parameters
    ----------
    friction : float
        :math:`\alpha \in (0, 1]` (1 - the momentum coefficient; 1 gives SGLD
        with step :math:`\eta`).
    noise_estimate : float or "running"
        :math:`\hat\beta \in [0, \alpha)`: a constant, or ``"running"``, an
        estimate :math:`\hat\beta = \eta\hat V/2` per coordinate from a running
        (exponential, rate ``noise_decay``) variance :math:`\hat V` of the
        minibatch gradients, clipped to :math:`\alpha`. The running variance
        also sees the drift of the gradient along the trajectory, so it
        over-estimates the minibatch noise (less injected noise).
    noise_decay : float
        Rate of the running estimate.
    Others: see :class:`SGMCMCKernel` (``step_size`` is the learning rate :math:`\eta`).
    """

    def __init__(self, model=None, potential=None, friction: float = 0.1, noise_estimate: float | str = 0.0,
                 noise_decay: float = 0.01, **options):
        if isinstance(friction, bool) or not isinstance(friction, (int, float)) or not 0 < friction <= 1:
            raise ValueError(f"friction must be in (0, 1], got {friction!r}")
        if isinstance(noise_estimate, str):
            if noise_estimate not in NOISE_ESTIMATES:
                raise ValueError(f"noise_estimate {noise_estimate!r}: give a number in [0, friction) "
                                 f"or one of {', '.join(NOISE_ESTIMATES)}")
        elif (isinstance(noise_estimate, bool) or not isinstance(noise_estimate, (int, float))
              or not 0 <= noise_estimate < friction):
            raise ValueError(f"noise_estimate must be in [0, friction={friction}), got {noise_estimate!r}")
        if not 0 < noise_decay <= 1:
            raise ValueError(f"noise_decay must be in (0, 1], got {noise_decay!r}")
        self.friction = float(friction)
        self.noise_estimate = noise_estimate
        self.noise_decay = float(noise_decay)
        super().__init__(model, potential, **options)

    def _reset(self) -> None:
        super()._reset()
        self._grad_mean: Tensor | None = None
        self._grad_var: Tensor | None = None

    def _beta_hat(self, grad: Tensor, step_size: float) -> float | Tensor:
        if self.noise_estimate != "running":
            return float(self.noise_estimate)
        r = self.noise_decay
        if self._grad_mean is None:
            self._grad_mean, self._grad_var = grad.clone(), torch.zeros_like(grad)
        else:
            delta = grad - self._grad_mean
            self._grad_mean = self._grad_mean + r * delta
            self._grad_var = (1 - r) * (self._grad_var + r * delta * delta)
        return (0.5 * step_size * self._grad_var).clamp(max=self.friction)

    def initial_aux(self, theta, step_size, inverse_temperature):
        aux = math.sqrt(step_size / inverse_temperature) * torch.randn_like(theta)
        return aux if self._pruner is None else self._pruner.apply(aux)

    def step(self, theta, aux, grad, step_size, inverse_temperature):
        beta_hat = self._beta_hat(grad, step_size)
        return sghmc_step(theta, aux, grad, step_size, self.friction, beta_hat, inverse_temperature)


# ------------------------------------------------------------- the engines
def run_sgmcmc(kernel_cls, model, x, y, num_samples: int, warmup_steps: int, num_chains: int,
               progress: bool, chain_method: str = "vectorized", init_radius: float = 1.0,
               **kernel_options) -> Draws:
    """Run an SG-MCMC kernel under Pyro's ``MCMC``; the draws carry the kernel's
    ``final_state`` (e.g. the final inclusion probabilities) and InferenceData
    attributes marking ``lp`` as a minibatch estimate."""
    vectorized = _chain_method(chain_method)
    potential = make_potential(model, x, y)
    kernel = kernel_cls(potential=potential, num_chains=num_chains if vectorized else 1,
                        init_radius=init_radius, **kernel_options)
    kernel.check_potential(potential)  # before any chain starts
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps,
                num_chains=1 if vectorized else num_chains, transforms=potential.transforms,
                disable_progbar=not progress)
    mcmc.run(x, y)
    draws = split_mcmc(mcmc)
    full_data = kernel.batch_size is None or kernel.batch_size == getattr(potential, "num_data", None)
    draws.notes.update({"lp_estimate": LP_FULL_DATA if full_data else LP_NOTE,
                        "iterations_per_draw": kernel.thin})
    return draws


def pruning_option(prune: float | None, prune_decay: float, prune_period: float,
                   prune_sites) -> MagnitudePruning | None:
    """The engines' flat pruning options as a :class:`MagnitudePruning` (None: no pruning)."""
    if prune is None:
        return None
    return MagnitudePruning(prune, prune_decay, prune_period, None if prune_sites is None else tuple(prune_sites))


#: the arguments every engine function takes first; the rest are the kernel's options
RUN_ARGUMENTS = ("model", "x", "y", "num_samples", "warmup_steps", "num_chains", "progress")
PRUNE_OPTIONS = ("prune", "prune_decay", "prune_period", "prune_sites")


def run_engine(kernel_cls, arguments: dict) -> Draws:
    """Run an SG-MCMC engine from its function's ``locals()``: the run arguments go to
    :func:`run_sgmcmc`, every other option to the kernel, the flat ``prune*`` options
    (where the engine has them) as one :class:`MagnitudePruning`.

    The registry reads an engine's options from its signature, so each engine
    function still lists them; this keeps the forwarding in one place."""
    options = {k: v for k, v in arguments.items() if k not in RUN_ARGUMENTS}
    if "prune" in options:
        options["pruning"] = pruning_option(*(options.pop(k) for k in PRUNE_OPTIONS))
    return run_sgmcmc(kernel_cls, *(arguments[k] for k in RUN_ARGUMENTS), **options)


@engine("sgld")
def sgld(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-4,
         schedule: str = "constant", decay_power: float = 1.0 / 3.0, decay_offset: float = 0.0,
         cycle_length: int | None = None, batch_size: int | None = None, shared_minibatch: bool = False,
         inverse_temperature: float = 1.0, annealing: float = 1.0, max_inverse_temperature: float = math.inf,
         thin: int = 1, prune: float | None = None, prune_decay: float = 0.99, prune_period: float = 50.0,
         prune_sites: list | None = None, chain_method: str = "vectorized", init_radius: float = 1.0) -> Draws:
    """Stochastic gradient Langevin dynamics: minibatch gradients, step-size schedules, tempering, pruning."""
    return run_engine(SGLD, locals())


@engine("sghmc")
def sghmc(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-5,
          friction: float = 0.1, noise_estimate: float | str = 0.0, noise_decay: float = 0.01,
          schedule: str = "constant", decay_power: float = 1.0 / 3.0, decay_offset: float = 0.0,
          cycle_length: int | None = None, batch_size: int | None = None, shared_minibatch: bool = False,
          inverse_temperature: float = 1.0, annealing: float = 1.0, max_inverse_temperature: float = math.inf,
          thin: int = 1, prune: float | None = None, prune_decay: float = 0.99, prune_period: float = 50.0,
          prune_sites: list | None = None, chain_method: str = "vectorized", init_radius: float = 1.0) -> Draws:
    """Stochastic gradient HMC (SGD-with-momentum form): friction, noise estimate, schedules, tempering, pruning."""
    return run_engine(SGHMC, locals())
