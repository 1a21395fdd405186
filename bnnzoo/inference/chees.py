"""ChEES-HMC: many-chain HMC with a jittered trajectory length adapted by ChEES.

Hoffman, Radul and Sountsov (2021), "An adaptive MCMC scheme for setting
trajectory lengths in Hamiltonian Monte Carlo", AISTATS.
"""

from __future__ import annotations

import math

import torch

from ..models.spec import Conv2d
from .base import DualAveraging, FlatKernel, check_fraction_option, check_positive_option, metropolis_accept
from .integrators import kinetic_energy, leapfrog, velocity
from .tuning import resolve_target_accept

__all__ = ["ChEESHMC", "check_memory", "halton", "harmonic_mean_acceptance", "mass_windows"]

Tensor = torch.Tensor

JITTERS = ("halton", "uniform")
#: an energy error above this is a divergence (Stan's threshold)
MAX_ENERGY_ERROR = 1000.0


# ------------------------------------------------------------ small pieces
def halton(index: int, base: int = 2) -> float:
    """The ``index``-th (>= 1) element of the van der Corput/Halton sequence in ``(0, 1)``."""
    result, f = 0.0, 1.0 / base
    while index > 0:
        result += f * (index % base)
        index //= base
        f /= base
    return result


def harmonic_mean_acceptance(prob: Tensor, diverging: Tensor) -> float:
    """Harmonic mean of the acceptance probabilities of the non-divergent chains
    (0 if every chain diverged): dominated by the worst chains, so the step
    size suits all of them (Hoffman et al. 2021, Sec. 4)."""
    keep = ~diverging
    if not keep.any():
        return 0.0
    return float(1.0 / (1.0 / prob[keep].double().clamp(min=1e-10)).mean())


class ScalarAdam:
    r"""Adam on one scalar, *ascending* the objective:
    :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`,
    :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`,
    :math:`x \leftarrow x + \text{lr}\, \hat m / (\sqrt{\hat v} + 10^{-8})`
    with bias-corrected :math:`\hat m, \hat v`; the step is clipped to ``max_step``."""

    def __init__(self, lr: float = 0.025, beta1: float = 0.0, beta2: float = 0.95, max_step: float = 0.35):
        self.lr, self.beta1, self.beta2, self.max_step = lr, beta1, beta2, max_step
        self.m = self.v = 0.0
        self.t = 0

    def step(self, x: float, grad: float) -> float:
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        m_hat = self.m / (1 - self.beta1 ** self.t)
        v_hat = self.v / (1 - self.beta2 ** self.t)
        update = self.lr * m_hat / (math.sqrt(v_hat) + 1e-8)
        return x + min(max(update, -self.max_step), self.max_step)


class PooledVariance:
    """Per-coordinate variance of ``[C, D]`` batches pooled over chains and steps
    (Chan et al.'s parallel Welford update, in float64)."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, None, None

    def update(self, theta: Tensor) -> None:
        x = theta.detach().double()
        n_b, mean_b = x.shape[0], x.mean(0)
        m2_b = ((x - mean_b) ** 2).sum(0)
        if self.n == 0:
            self.n, self.mean, self.m2 = n_b, mean_b, m2_b
            return
        n = self.n + n_b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * n_b / n
        self.m2 = self.m2 + m2_b + delta ** 2 * self.n * n_b / n
        self.n = n

    def variance(self) -> Tensor:
        """Sample variance shrunk toward 1e-3 as in Stan: ``n/(n+5) var + 1e-3 * 5/(n+5)``."""
        var = self.m2 / max(self.n - 1, 1)
        return self.n / (self.n + 5.0) * var + 1e-3 * 5.0 / (self.n + 5.0)


def mass_windows(warmup_steps: int, init_buffer: int = 75, term_buffer: int = 50,
                 base_window: int = 25) -> list[tuple[int, int]]:
    """Stan's warm-up schedule: ``[start, end)`` of the slow windows (doubling in
    size) after which the mass matrix is re-estimated; none below 20 steps."""
    if warmup_steps < 20:
        return []
    if init_buffer + base_window + term_buffer > warmup_steps:
        init_buffer, term_buffer = int(0.15 * warmup_steps), int(0.1 * warmup_steps)
        base_window = warmup_steps - init_buffer - term_buffer
    end_slow = warmup_steps - term_buffer
    windows, start, size = [], init_buffer, base_window
    while start < end_slow:
        end = start + size
        if end + 2 * size > end_slow:
            end = end_slow
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


def _available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes (None where unreadable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _widest_activation(spec) -> int:
    """Largest number of activations per data row over the network's layers."""
    feature = tuple(spec.input_shape) if spec.input_shape else (int(spec.input_dim),)
    widest = math.prod(feature)
    for layer in spec.layers:
        if isinstance(layer, Conv2d):
            _, h, w = feature
            size = lambda n: (n + 2 * layer.padding - layer.kernel_size) // layer.stride + 1  # noqa: E731
            widest = max(widest, layer.channels * size(h) * size(w))
            feature = layer.output_shape(feature)
        else:
            widest = max(widest, layer.units)
            feature = (layer.units,)
    return widest


def check_memory(model, num_chains: int, num_data: int, fraction: float = 0.75) -> None:
    """Refuse, before sampling, a run whose batched chains would not fit in memory.

    Estimate: ``C * D * 8 * 16`` (positions, momenta, gradients, proposals and
    adaptation state) ``+ C * N * widest * 4 * 6`` (the batched forward pass and
    its backward) bytes; an error if above ``fraction`` of ``MemAvailable``. No
    check where ``/proc/meminfo`` is unreadable.
    """
    available = _available_memory()
    if available is None:
        return
    dim = int(model.num_params)
    widest = _widest_activation(model.spec) if hasattr(model, "spec") else 0
    estimate = num_chains * dim * 8 * 16 + num_chains * num_data * widest * 4 * 6
    if estimate > fraction * available:
        gib = 2.0 ** 30
        raise ValueError(
            f"num_chains={num_chains}: the chees engine would need about {estimate / gib:.1f} GiB "
            f"({num_chains} chains x {dim} parameters, {num_data} data rows x {widest} activations), "
            f"more than {fraction:.0%} of the {available / gib:.1f} GiB available; use fewer chains")


# ----------------------------------------------------------------- kernel
class ChEESHMC(FlatKernel):
    r"""HMC for C chains run as one batch, with a jittered trajectory length
    adapted by ChEES (Hoffman, Radul and Sountsov 2021, Algorithm 1).

    Each transition draws :math:`p \sim N(0, M)` for every chain, a jitter
    :math:`u_n \in (0, 1)` shared by all chains (Halton sequence or uniform),
    and runs :math:`L_n = \lceil u_n T / \epsilon \rceil` leapfrog steps
    (at most ``max_leapfrog_steps``), then a Metropolis test per chain on
    :math:`H = U(\theta) + \tfrac12 p^\top M^{-1} p`. A NaN/inf energy is a
    rejection and a divergence, as is an energy error above 1000.

    Warm-up adapts, from the population of chains:

    * the step size :math:`\epsilon` (shared): dual averaging toward
      ``target_accept`` of the *harmonic mean* acceptance of the chains. The
      default follows the model (:func:`~bnnzoo.inference.tuning.recommend_target_accept`):
      0.651, the optimal acceptance of HMC as D grows (Beskos et al. 2013) and
      the value of the paper, or 0.45 for a ReLU-family network, whose leapfrog
      error is first order (paper 003); the harmonic mean, dominated by the worst
      chains, already makes it conservative (0.8 on an arithmetic mean is the
      NUTS habit for a different statistic). Where the stiffest chain meets
      leapfrog's stability limit the acceptance jumps from ~1 to 0, and the
      realised acceptance sits well above the target (BNNs: ~0.95);
    * the diagonal mass :math:`M^{-1}`: the variance of the chains' positions
      pooled over chains and the second half of each of Stan's doubling
      windows. After each update the step size is found again and dual
      averaging restarts; :math:`T` restarts from the chains' median U-turn time
      under the new mass (:meth:`u_turn_time`) unless the user gave
      ``trajectory_length``, in which case the expected distance travelled
      :math:`T \sqrt{\operatorname{tr} M^{-1}}` is kept. (Adam moves
      :math:`\log T` by about its learning rate per step: from the initial
      ``10 * step_size`` it took some 350 warm-up steps to reach the length of
      the cosine MLP; the U-turn time is already near it, so 200 warm-up steps do);
    * the trajectory length :math:`T`: Adam (lr 0.025, :math:`\beta_1 = 0`,
      :math:`\beta_2 = 0.95`) ascends ChEES
      :math:`\tfrac14 E[(\|\theta' - E\theta'\|^2 - \|\theta - E\theta\|^2)^2]`
      in :math:`\log T` with the per-chain gradient estimate

      .. math::
          \hat g_m = t_n \left(\|\theta'_m - \bar\theta'\|^2 - \|\theta_m - \bar\theta\|^2\right)
                     (\theta'_m - \bar\theta')^\top M^{-1} p'_m,

      (:math:`t_n = L_n \epsilon` the integration time, :math:`\theta', p'`
      the proposal) averaged with weights the acceptance probabilities
      (divergent chains weigh 0); :math:`T \in [\bar\epsilon, \bar\epsilon L_{\max}]` with
      :math:`\bar\epsilon` dual averaging's averaged step size (its raw iterates swing too much).

    After warm-up the step size is dual averaging's averaged iterate and
    :math:`T` the running average :math:`\log \bar T_n = n^{-1/2} \log T_n +
    (1 - n^{-1/2}) \log \bar T_{n-1}` (restarted at each mass update); both are
    frozen, as is the mass.

    Parameters
    ----------
    model, potential, init_radius
        See :class:`~bnnzoo.inference.base.FlatKernel`.
    step_size : float
        Initial leapfrog step size (refined by a doubling/halving search
        before warm-up when ``adapt_step_size``).
    target_accept : float, optional
        Target harmonic-mean acceptance of dual averaging; None: recommended
        for the model (0.651 smooth, 0.45 piecewise linear).
    trajectory_length : float, optional
        Initial :math:`T` (fixed if ``adapt_trajectory=False``). Default: 10
        times the first step size (after the initial step-size search), and at
        each mass-matrix update the chains' median U-turn time
        (:meth:`u_turn_time`), from which ChEES goes on.
    adapt_step_size, adapt_mass_matrix, adapt_trajectory : bool
    max_leapfrog_steps : int
        Cap on leapfrog steps per transition.
    jitter : {"halton", "uniform"}
        Quasi-random (the paper's choice: even coverage of trajectory lengths)
        or uniform random :math:`u_n`.
    num_chains : int
        Chains advanced together (default 16); ChEES needs at least 2 (the
        criterion is a cross-chain estimate) unless ``adapt_trajectory=False``.

    Per-draw statistics: ``acceptance_rate``, ``diverging``, ``energy`` (H at
    the start, after the momentum refresh), ``energy_error`` (H at the
    proposal minus that; inf if not finite), ``step_size``, ``n_steps``,
    ``lp`` (:math:`-U` of the new state), ``trajectory_length`` (the
    un-jittered :math:`T`).

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> mcmc = MCMC(ChEESHMC(model, num_chains=32), num_samples=500, warmup_steps=500)
    >>> mcmc.run(x, y)
    >>> draws = split_mcmc(mcmc)   # 32 chains

    **References**

    Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive MCMC scheme
    for setting trajectory lengths in Hamiltonian Monte Carlo. AISTATS.
    """

    stat_names = ("acceptance_rate", "diverging", "energy", "energy_error", "step_size", "n_steps", "lp",
                  "trajectory_length")

    def __init__(self, model=None, potential=None, step_size: float = 0.1, target_accept: float | None = None,
                 trajectory_length: float | None = None, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, adapt_trajectory: bool = True, max_leapfrog_steps: int = 1000,
                 jitter: str = "halton", num_chains: int = 16, init_radius: float = 1.0):
        check_positive_option("step_size", step_size)
        if target_accept is not None:
            check_fraction_option("target_accept", target_accept)
        if trajectory_length is not None:
            check_positive_option("trajectory_length", trajectory_length)
        if isinstance(max_leapfrog_steps, bool) or not isinstance(max_leapfrog_steps, int) or max_leapfrog_steps < 1:
            raise ValueError(f"max_leapfrog_steps must be an integer >= 1, got {max_leapfrog_steps!r}")
        if jitter not in JITTERS:
            raise ValueError(f"jitter {jitter!r}: choose one of {', '.join(JITTERS)}")
        if adapt_trajectory and isinstance(num_chains, int) and not isinstance(num_chains, bool) \
                and num_chains < 2:
            raise ValueError(f"num_chains must be >= 2 for ChEES trajectory adaptation (a cross-chain "
                             f"estimate), got {num_chains!r}; or pass adapt_trajectory=False")
        self.initial_step_size = float(step_size)
        self.target_accept = float(resolve_target_accept(
            target_accept, model if model is not None else potential, "chees"))
        self.initial_trajectory_length = None if trajectory_length is None else float(trajectory_length)
        self.adapt_step_size = bool(adapt_step_size)
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        self.adapt_trajectory = bool(adapt_trajectory)
        self.max_leapfrog_steps = max_leapfrog_steps
        self.jitter = jitter
        super().__init__(model, potential, num_chains, init_radius)

    # ------------------------------------------------------------ state
    def _reset(self) -> None:
        super()._reset()
        self.step_size = self.initial_step_size
        self.trajectory_length = self.initial_trajectory_length
        self.inv_mass: Tensor | None = None
        self._step_adapter = DualAveraging(self.initial_step_size, self.target_accept)
        self._adam = ScalarAdam()
        self._log_length_avg, self._length_count = 0.0, 0
        self._jitter_index = 0
        self._windows: list[tuple[int, int]] = []
        self._variance = PooledVariance()
        self._guess_trajectory_length = False

    def prepare(self, theta: Tensor) -> None:
        self.inv_mass = torch.ones(theta.shape[-1], dtype=theta.dtype)
        if self.adapt_step_size and self._warmup_steps > 0:
            self.step_size = self._find_step_size(theta)
            self._step_adapter.restart(self.step_size)
        if self.trajectory_length is None:
            self.trajectory_length = 10 * self.step_size
            self._guess_trajectory_length = self.adapt_trajectory
        self._clip_trajectory_length()
        if self.adapt_mass_matrix:
            self._windows = mass_windows(self._warmup_steps)

    def _clip_trajectory_length(self) -> None:
        """Keep :math:`T` in ``[eps, max_leapfrog_steps * eps]``. During warm-up
        ``eps`` is dual averaging's *averaged* step size: its raw iterates swing
        by 10x, and clipping to them would cut :math:`T` down at every dip."""
        step_size = self.step_size
        if self.adapt_step_size and self.in_warmup and self._step_adapter.t:
            step_size = self._step_adapter.final_step_size
        low, high = step_size, step_size * self.max_leapfrog_steps
        self.trajectory_length = min(max(self.trajectory_length, low), high)

    # ---------------------------------------------------------- sampling
    def _momentum(self, theta: Tensor) -> Tensor:
        """:math:`p \\sim N(0, M)` with :math:`M = \\operatorname{diag}(1 / \\text{inv\\_mass})`."""
        return torch.randn_like(theta) / self.inv_mass.sqrt()

    def _next_jitter(self) -> float:
        self._jitter_index += 1
        if self.jitter == "halton":
            return halton(self._jitter_index)
        return 1.0 - float(torch.rand(()))  # in (0, 1]

    def _num_steps(self) -> int:
        steps = math.ceil(self._next_jitter() * self.trajectory_length / self.step_size)
        return min(max(steps, 1), self.max_leapfrog_steps)

    def _propose(self, theta: Tensor, num_steps: int):
        """Momentum refresh, leapfrog and energies; proposals that are not finite
        get an infinite energy error (rejected, divergent)."""
        value, grad = self.value_and_grad(theta)
        p = self._momentum(theta)
        energy = value + kinetic_energy(p, self.inv_mass)
        theta_new, p_new, value_new, grad_new = leapfrog(
            theta, p, grad, self.step_size, num_steps, self.potential.value_and_grad, self.inv_mass, value,
            step=self.potential.leapfrog_step)
        energy_new = value_new + kinetic_energy(p_new, self.inv_mass)
        finite = torch.isfinite(energy_new) & torch.isfinite(theta_new).all(-1) & torch.isfinite(grad_new).all(-1)
        error = torch.where(finite, energy_new - energy, torch.full_like(energy, math.inf))
        return (theta_new, p_new, value_new, grad_new), energy, error, finite

    def transition(self, theta):
        num_steps = self._num_steps()
        step_size, length = self.step_size, self.trajectory_length
        (proposal, p_new, value_new, grad_new), energy, error, finite = self._propose(theta, num_steps)
        log_ratio = torch.where(finite, -error, torch.full_like(error, math.nan))
        accepted, prob, _ = metropolis_accept(log_ratio)
        diverging = ~finite | (error > MAX_ENERGY_ERROR)
        value, grad = self.value_and_grad(theta)
        theta_out = torch.where(accepted.unsqueeze(-1), proposal, theta)
        value_out = torch.where(accepted, value_new, value)
        grad_out = torch.where(accepted.unsqueeze(-1), grad_new, grad)
        self.remember(theta_out, value_out, grad_out)
        full = lambda v: torch.full_like(prob, v)  # noqa: E731
        stats = {"acceptance_rate": prob, "diverging": diverging, "energy": energy, "energy_error": error,
                 "step_size": full(step_size), "n_steps": torch.full(prob.shape, num_steps, dtype=torch.long),
                 "lp": -value_out, "trajectory_length": full(length)}
        if self.in_warmup:
            self._adapt(theta, proposal, p_new, prob, diverging, num_steps * step_size, theta_out)
        return theta_out, stats

    # -------------------------------------------------------- adaptation
    def _adapt(self, theta, proposal, p_new, prob, diverging, time, theta_out) -> None:
        if self.adapt_step_size:
            self.step_size = self._step_adapter.update(harmonic_mean_acceptance(prob, diverging))
        if self.adapt_trajectory:
            self._adapt_trajectory(theta, proposal, p_new, prob, diverging, time)
        if self._windows:
            self._adapt_mass(theta_out)
        if self._t == self._warmup_steps - 1:
            self._end_warmup()
        self._clip_trajectory_length()

    def chees_gradient(self, theta, proposal, p_new, prob, diverging, time) -> float:
        """Acceptance-weighted estimate of d ChEES / d log T (NaN if no chain counts)."""
        weight = torch.where(diverging, torch.zeros_like(prob), prob).double()
        if float(weight.sum()) <= 1e-8:
            return math.nan
        x, x_new = theta.double(), torch.where(diverging.unsqueeze(-1), theta, proposal).double()
        centred = x - x.mean(0)
        centred_new = x_new - (weight.unsqueeze(-1) * x_new).sum(0) / weight.sum()
        change = (centred_new ** 2).sum(-1) - (centred ** 2).sum(-1)
        v_new = velocity(torch.where(diverging.unsqueeze(-1), torch.zeros_like(p_new), p_new).double(),
                         self.inv_mass.double())
        per_chain = time * change * (centred_new * v_new).sum(-1)
        return float((weight * per_chain).sum() / weight.sum())

    def _adapt_trajectory(self, theta, proposal, p_new, prob, diverging, time) -> None:
        grad = self.chees_gradient(theta, proposal, p_new, prob, diverging, time)
        if math.isfinite(grad):
            self.trajectory_length = math.exp(self._adam.step(math.log(self.trajectory_length), grad))
            self._clip_trajectory_length()
        self._length_count += 1
        weight = self._length_count ** -0.5
        self._log_length_avg = weight * math.log(self.trajectory_length) + (1 - weight) * self._log_length_avg

    def _adapt_mass(self, theta: Tensor) -> None:
        t = self._t
        for start, end in self._windows:
            if start + (end - start) // 2 <= t < end:
                self._variance.update(theta)
            if t == end - 1:
                self._update_mass(theta)

    def _update_mass(self, theta: Tensor) -> None:
        inv_mass = self._variance.variance().to(theta.dtype)
        self._variance = PooledVariance()
        if not (torch.isfinite(inv_mass).all() and (inv_mass > 0).all()):
            return
        if self.adapt_trajectory:  # keep the expected distance travelled, T * sqrt(tr M^-1)
            self.trajectory_length *= math.sqrt(float(self.inv_mass.sum()) / float(inv_mass.sum()))
            self._log_length_avg, self._length_count = 0.0, 0
        self.inv_mass = inv_mass
        settled = self.step_size
        if self.adapt_step_size:
            if self._step_adapter.t:
                settled = self._step_adapter.final_step_size
            self.step_size = self._find_step_size(theta)
            self._step_adapter.restart(self.step_size)
        if self.adapt_trajectory and self._guess_trajectory_length:
            # the one-step search's step size is near leapfrog's stability limit, where the
            # stiffest directions swing and fake a U-turn within a few steps: integrate at
            # the smaller of it and the step size dual averaging had settled on
            self.trajectory_length = self.u_turn_time(theta, min(settled, self.step_size))
            self._adam = ScalarAdam()

    def _end_warmup(self) -> None:
        if self.adapt_step_size:
            self.step_size = self._step_adapter.final_step_size
        if self.adapt_trajectory and self._length_count:
            self.trajectory_length = math.exp(self._log_length_avg)

    def u_turn_time(self, theta: Tensor, step_size: float | None = None) -> float:
        r"""Median over chains of the time at which a trajectory from ``theta`` (fresh
        momentum, the current mass, ``step_size`` or the current one) first turns back,
        :math:`(\theta_t - \theta_0)^\top M^{-1} p_t < 0` (the no-U-turn criterion),
        capped at ``max_leapfrog_steps`` steps.

        ChEES starts from it at each mass update when no ``trajectory_length`` was
        given: Adam moves :math:`\log T` by about its learning rate per step, so from
        ``10 * step_size`` it needs hundreds of warm-up steps to reach the lengths a
        BNN posterior wants; the U-turn time of the population is already close."""
        step_size = step_size or self.step_size
        value, grad = self.value_and_grad(theta)
        x, p = theta, self._momentum(theta)
        cap = self.max_leapfrog_steps
        turned = torch.full(theta.shape[:-1], cap, dtype=torch.long)
        for step in range(1, cap + 1):
            x, p, value, grad = leapfrog(x, p, grad, step_size, 1, self.potential.value_and_grad,
                                         self.inv_mass, value, step=self.potential.leapfrog_step)
            back = ((x - theta) * velocity(p, self.inv_mass)).sum(-1)
            now = ~(back >= 0) & (turned == cap)  # NaN counts as turned: that chain's trajectory is over
            turned = torch.where(now, torch.full_like(turned, step), turned)
            if bool((turned < cap).all()):
                break
        return float(turned.double().median()) * step_size

    def _find_step_size(self, theta: Tensor) -> float:
        """Double or halve the step size until the harmonic-mean acceptance of one
        leapfrog step crosses 0.5 (Hoffman and Gelman 2014, Algorithm 4)."""
        step_size, direction = self.step_size, 0
        for _ in range(100):
            saved, self.step_size = self.step_size, step_size
            _, _, error, finite = self._propose(theta, 1)
            self.step_size = saved
            prob = torch.where(finite, (-error).clamp(max=0.0).exp(), torch.zeros_like(error))
            accept = harmonic_mean_acceptance(prob, ~finite)
            new_direction = 1 if accept > 0.5 else -1
            if direction and new_direction != direction:
                break
            direction = new_direction
            candidate = step_size * 2.0 ** direction
            if not 1e-10 < candidate < 1e6:
                break
            step_size = candidate
        return step_size

    # ---------------------------------------------------------- reporting
    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        diag["step_size"] = self.step_size
        diag["trajectory_length"] = self.trajectory_length
        diag["inverse_mass_matrix"] = None if self.inv_mass is None else self.inv_mass.cpu().numpy()
        return diag

    def logging(self):
        log = super().logging()
        if self.trajectory_length is not None:
            log["traj. length"] = f"{self.trajectory_length:.2e}"
        return log

