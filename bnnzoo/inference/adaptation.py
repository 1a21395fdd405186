r"""Warm-up adaptation as small components, shared by the HMC-family kernels.

* :class:`DualAveraging`: Nesterov dual averaging of :math:`\log\epsilon` toward a
  target acceptance (the scheme of Pyro's :class:`pyro.ops.dual_averaging.DualAveraging`);
* :class:`PooledVariance`: per-coordinate variance of ``[C, D]`` batches pooled over
  chains (Chan et al.'s parallel Welford update);
* :func:`mass_windows`: Stan's doubling warm-up windows; :func:`late_mass_windows`, two
  windows late in warm-up (ChEES's ``mass_schedule="late"``);
* :func:`find_step_size`: the doubling/halving search for a first step size;
* :func:`harmonic_mean_acceptance`, :func:`acceptance_statistic` (what dual averaging
  steers), :func:`halton`;
* :class:`ScalarAdam` and :func:`chees_gradient`: the ChEES trajectory-length update;
* :class:`WindowAdaptation`: the one warm-up loop of the HMC family and batched NUTS (dual
  averaging and the mass windows, pooled over chains or per chain), with the kernels' own
  parts (ChEES's trajectory length, proximal HMC's lambda) composed beside it as
  :class:`WarmupComponent` objects.

The full rules are in ``docs/algorithms.md`` ("Adaptation components").
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import torch

from .integrators import velocity

__all__ = ["ChainEnergyVarianceStepSize", "ChainVariance", "DualAveraging", "WarmupComponent", "WarmupStep", "WindowAdaptation", "EnergyVarianceStepSize", "PooledVariance", "ScalarAdam", "acceptance_statistic",
           "chain_decoherence_lengths", "chees_gradient", "decoherence_length", "effective_sample_size",
           "find_step_size", "halton", "harmonic_mean_acceptance", "late_mass_windows", "mass_windows",
           "within_chain_variance"]

Tensor = torch.Tensor


class DualAveraging:
    r"""Dual averaging of ``log(step_size)`` toward a target acceptance
    (Hoffman and Gelman 2014, Algorithm 5):

    .. math::
        \bar H_t = (1 - \tfrac{1}{t + t_0}) \bar H_{t-1} + \tfrac{1}{t + t_0}(\delta - \alpha_t),\quad
        \log \epsilon_t = \mu - \tfrac{\sqrt t}{\gamma} \bar H_t,\quad
        \log \bar\epsilon_s = s^{-\kappa} \log \epsilon_t + (1 - s^{-\kappa}) \log \bar\epsilon_{s-1}

    with :math:`\mu = \log(10 \epsilon_0)`. Use :attr:`step_size` during warm-up
    and :attr:`final_step_size` after it. :meth:`restart` starts the scheme over from a
    new step size; :meth:`restart_average` (at a mass-matrix update) starts only the
    average :math:`\bar\epsilon` over (its own count :math:`s`), so the iterates keep their
    small late gain :math:`1/(\gamma\sqrt t)` and the final step size averages only
    iterates under the final mass. A NaN acceptance counts 0; others are clipped to [0, 1].
    All state is plain numbers.
    """

    def __init__(self, step_size: float, target: float, t0: float = 10.0,
                 gamma: float = 0.05, kappa: float = 0.75):
        self.target, self.t0, self.gamma, self.kappa = target, t0, gamma, kappa
        self.restart(step_size)

    def restart(self, step_size: float) -> None:
        r"""Start over from ``step_size``: :math:`t = 0`, :math:`\bar H = 0`, :math:`\mu = \log(10\epsilon_0)`."""
        self.mu = math.log(10 * step_size)
        self._t, self._h_bar = 0, 0.0
        self._log_step = math.log(step_size)
        self.restart_average()

    def restart_average(self) -> None:
        """Start the averaged iterate over from the next update (the iterates go on)."""
        self._avg_count, self._log_avg = 0, 0.0

    @property
    def t(self) -> int:
        """Updates since the last restart."""
        return self._t

    def update(self, accept_prob: float) -> float:
        """Feed one (mean) acceptance probability; returns the next step size."""
        accept_prob = 0.0 if not math.isfinite(accept_prob) else min(max(accept_prob, 0.0), 1.0)
        self._t += 1
        weight = 1.0 / (self._t + self.t0)
        self._h_bar = (1 - weight) * self._h_bar + weight * (self.target - accept_prob)
        self._log_step = self.mu - math.sqrt(self._t) / self.gamma * self._h_bar
        self._avg_count += 1
        eta = self._avg_count ** -self.kappa
        self._log_avg = eta * self._log_step + (1 - eta) * self._log_avg
        return self.step_size

    @property
    def step_size(self) -> float:
        return math.exp(self._log_step)

    @property
    def final_step_size(self) -> float:
        """The averaged iterate (the current step size before any update since the last restart)."""
        return math.exp(self._log_avg) if self._avg_count else self.step_size


class PooledVariance:
    """Per-coordinate variance of ``[C, D]`` batches pooled over chains and steps
    (Chan et al.'s parallel Welford update, in float64).

    Pyro's :class:`~pyro.ops.welford.WelfordCovariance` takes one sample per call:
    C Python-level updates per step for C chains; this merges the whole batch at once."""

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


def within_chain_variance(variance: "ChainVariance") -> Tensor:
    """``[D]``: the chains' own variances (:class:`ChainVariance`) averaged over chains, the spread of
    their means left out (the microcanonical samplers' preconditioner: a local scale, not the
    distance between modes)."""
    return variance.variance().mean(0)


class ChainVariance:
    """Per-coordinate variance of each chain's positions over steps (Welford, in float64):
    ``update`` takes ``[C, D]``, ``variance`` gives ``[C, D]`` with Stan's shrinkage (as
    :class:`PooledVariance`, without pooling: chains in different regions keep their own scale)."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, None, None

    def update(self, theta: Tensor) -> None:
        x = theta.detach().double()
        self.n += 1
        if self.n == 1:
            self.mean, self.m2 = x.clone(), torch.zeros_like(x)
            return
        delta = x - self.mean
        self.mean = self.mean + delta / self.n
        self.m2 = self.m2 + delta * (x - self.mean)

    def variance(self) -> Tensor:
        """Each chain's sample variance shrunk toward 1e-3 as in Stan (:meth:`PooledVariance.variance`)."""
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


def late_mass_windows(warmup_steps: int) -> list[tuple[int, int]]:
    """Two mass-matrix windows late in warm-up: with ``W`` warm-up steps a terminal buffer of
    ``round(0.1 W)`` steps, before it a slow phase of ``round(0.2 W)`` steps split into a
    window of ``round(0.075 W)`` and one of the rest, and an initial buffer of everything
    before (70%); for ``W = 200``: ``[(140, 155), (155, 180)]``. None below 20 steps.

    For kernels whose warm-up iterations are cheap until the first mass update and dear
    after it, and whose variance is pooled over many chains: ChEES keeps its trajectory
    short until its first window ends (it restarts it there from the chains' U-turn time),
    and C chains give a window C draws a step (``docs/algorithms.md``, "Warm-up windows")."""
    if warmup_steps < 20:
        return []
    term, slow = round(0.1 * warmup_steps), round(0.2 * warmup_steps)
    first = round(0.075 * warmup_steps)
    start = warmup_steps - term - slow
    return [(start, start + first), (start + first, warmup_steps - term)]


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


def acceptance_statistic(prob: Tensor, kept: Tensor) -> float:
    r"""What step-size adaptation steers to ``target_accept``: the fraction of chains
    ``kept`` times the harmonic mean of those chains' acceptance probabilities.

    The harmonic mean is dominated by the worst chains, so one shared step size stays
    stable for chains in regions of very different curvature (an energy error of 1e4
    drives it to ~0). A chain left out (a divergent transition for ChEES, a proposal
    with a non-finite energy for proximal HMC) is a rejection whatever the step size
    could do for it, so it counts arithmetically, as a zero; left out altogether (the
    harmonic mean alone, as BlackJAX's ChEES adaptation does), a divergence never
    shrinks the step size, and on a network with stiff regions the step size grows
    until a large share of transitions diverge.
    """
    if not bool(kept.any()):
        return 0.0
    return float(kept.double().mean()) * harmonic_mean_acceptance(prob, ~kept)


def find_step_size(step_size: float, one_step_acceptance: Callable[[float], float]) -> float:
    """Double or halve ``step_size`` until ``one_step_acceptance(step_size)`` (the acceptance
    statistic of one leapfrog step) crosses 0.5 (Hoffman and Gelman 2014, Algorithm 4);
    kept inside ``(1e-10, 1e6)``."""
    direction = 0
    for _ in range(100):
        new_direction = 1 if one_step_acceptance(step_size) > 0.5 else -1
        if direction and new_direction != direction:
            break
        direction = new_direction
        candidate = step_size * 2.0 ** direction
        if not 1e-10 < candidate < 1e6:
            break
        step_size = candidate
    return step_size


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


def chees_gradient(theta: Tensor, proposal: Tensor, p_new: Tensor, prob: Tensor, diverging: Tensor,
                   time: float, inv_mass: Tensor) -> float:
    r"""Acceptance-weighted estimate of :math:`d\,\mathrm{ChEES}/d\log T` (Hoffman et al. 2021):

    .. math::
        \hat g_m = t \left(\|\theta'_m - \bar\theta'\|^2 - \|\theta_m - \bar\theta\|^2\right)
                   (\theta'_m - \bar\theta')^\top M^{-1} p'_m

    averaged over chains with weights the acceptance probabilities (divergent
    chains weigh 0); NaN if no chain counts."""
    weight = torch.where(diverging, torch.zeros_like(prob), prob).double()
    if float(weight.sum()) <= 1e-8:
        return math.nan
    x, x_new = theta.double(), torch.where(diverging.unsqueeze(-1), theta, proposal).double()
    centred = x - x.mean(0)
    centred_new = x_new - (weight.unsqueeze(-1) * x_new).sum(0) / weight.sum()
    change = (centred_new ** 2).sum(-1) - (centred ** 2).sum(-1)
    v_new = velocity(torch.where(diverging.unsqueeze(-1), torch.zeros_like(p_new), p_new).double(),
                     inv_mass.double())
    per_chain = time * change * (centred_new * v_new).sum(-1)
    return float((weight * per_chain).sum() / weight.sum())


class EnergyVarianceStepSize:
    r"""The microcanonical step size from the energy error (Robnik et al. 2023, section on tuning;
    the scheme of BlackJAX's ``mclmc_find_L_and_step_size``): the energy error of an integrator
    step has variance :math:`\mathrm{Var}[\Delta E] \propto \epsilon^6`, so each step predicts the step
    size that would give :math:`\mathrm{Var}[\Delta E] / d` = ``target``:

    .. math::
        \xi = \frac{\overline{\Delta E^2}}{d\,\text{target}} + 10^{-8},\quad
        w = \exp\!\left(-\tfrac12 \left(\frac{\log \xi}{6 \cdot 1.5}\right)^2\right),\quad
        \bar x \leftarrow \gamma \bar x + w \xi / \epsilon^6,\quad
        \bar t \leftarrow \gamma \bar t + w,\quad
        \epsilon \leftarrow (\bar x / \bar t)^{-1/6}

    with :math:`\overline{\Delta E^2}` the mean over the chains whose step was finite and the decay
    :math:`\gamma = (n - 1)/(n + 1)`, n = ``num_effective_samples`` (150). The weight :math:`w`
    discounts steps far from the target. A step that was not finite in at least half of the chains
    (an unstable step size, not a few chains meeting a region where the density is not finite)
    caps the step size at 0.8 times the one that failed, for good. All state is plain numbers.
    """

    def __init__(self, step_size: float, dim: int, target: float, num_effective_samples: int = 150,
                 trust: float = 1.5):
        self.step_size, self.dim, self.target, self.trust = float(step_size), int(dim), float(target), float(trust)
        self.decay = (num_effective_samples - 1.0) / (num_effective_samples + 1.0)
        self.x_average, self.time, self.step_size_max = 0.0, 0.0, math.inf

    def update(self, energy_change: Tensor, finite: Tensor) -> float:
        """Feed one step's energy errors ``[C]`` and which chains were finite; the next step size."""
        if 2 * int(finite.sum()) <= finite.numel():
            self.step_size_max = 0.8 * self.step_size
        if bool(finite.any()):
            square = float(energy_change[finite].double().square().mean())
            xi = square / (self.dim * self.target) + 1e-8
            weight = math.exp(-0.5 * (math.log(xi) / (6.0 * self.trust)) ** 2)
            self.x_average = self.decay * self.x_average + weight * xi / self.step_size ** 6
            self.time = self.decay * self.time + weight
        if self.time > 0 and self.x_average > 0:
            self.step_size = (self.x_average / self.time) ** (-1.0 / 6.0)
        self.step_size = min(self.step_size, self.step_size_max)
        return self.step_size


class ChainEnergyVarianceStepSize(EnergyVarianceStepSize):
    """:class:`EnergyVarianceStepSize` for each chain on its own (MILE's and BlackJAX's tuning, one
    chain at a time): ``[C]`` float64 tensors on the host for the step sizes and the averages, each
    chain fed its own squared energy error; a chain whose step was not finite caps its own step
    size at 0.8 times the one that failed, for good (BlackJAX's rule per chain)."""

    def __init__(self, step_size: float | Tensor, num_chains: int, dim: int, target: float,
                 num_effective_samples: int = 150, trust: float = 1.5):
        super().__init__(1.0, dim, target, num_effective_samples, trust)
        self.step_size = torch.as_tensor(step_size, dtype=torch.float64).expand(num_chains).clone()
        self.x_average, self.time = torch.zeros(num_chains, dtype=torch.float64), torch.zeros(num_chains, dtype=torch.float64)
        self.step_size_max = torch.full((num_chains,), math.inf, dtype=torch.float64)

    def update(self, energy_change: Tensor, finite: Tensor) -> Tensor:
        """Feed one step's energy errors ``[C]`` and which chains were finite; the next step sizes ``[C]``."""
        finite = finite.detach().cpu()
        change = torch.where(finite, energy_change.detach().cpu().double(), torch.zeros((), dtype=torch.float64))
        self.step_size_max = torch.where(finite, self.step_size_max, torch.minimum(self.step_size_max,
                                                                                     0.8 * self.step_size))
        xi = change.square() / (self.dim * self.target) + 1e-8
        weight = torch.exp(-0.5 * (xi.log() / (6.0 * self.trust)) ** 2)
        self.x_average = torch.where(finite, self.decay * self.x_average + weight * xi / self.step_size ** 6,
                                     self.x_average)
        self.time = torch.where(finite, self.decay * self.time + weight, self.time)
        ready = (self.time > 0) & (self.x_average > 0)
        self.step_size = torch.where(ready, (self.x_average / self.time) ** (-1.0 / 6.0), self.step_size)
        self.step_size = torch.minimum(self.step_size, self.step_size_max)
        return self.step_size


def effective_sample_size(draws: Tensor, between_chains: bool = True) -> Tensor:
    r"""Multi-chain effective sample size of each column of ``draws [T, C, K]`` (T draws of C chains):
    Stan's estimator, :math:`\hat\rho_t = 1 - (W - \overline{\gamma_t}) / \widehat{\mathrm{var}}^+`
    from the chains' FFT autocovariances :math:`\gamma_t`, summed over Geyer's initial positive and
    monotone sequence; ``[K]``, in float64. ``between_chains=False`` leaves the spread of the
    chains' means out of :math:`\widehat{\mathrm{var}}^+` (the autocorrelation within each chain,
    whatever mode it is in). Used by warm-up (the decoherence length of MCLMC and MAMS); the
    reported diagnostics come from ArviZ."""
    x = draws.detach().double()
    n, chains = x.shape[0], x.shape[1]
    centred = x - x.mean(0)
    size = 1 << (2 * n - 1).bit_length()
    spectrum = torch.fft.rfft(centred, n=size, dim=0)
    acov = torch.fft.irfft(spectrum * spectrum.conj(), n=size, dim=0)[:n] / n  # [T, C, K]
    chain_var = acov[0] * n / max(n - 1, 1)
    within = chain_var.mean(0)
    between = x.mean(0).var(0, unbiased=True) if chains > 1 and between_chains else torch.zeros_like(within)
    var_plus = within * (n - 1) / n + between
    rho = 1.0 - (within - acov.mean(1)) / var_plus.clamp_min(1e-300)  # [T, K]
    pairs = rho[: n - n % 2].reshape(-1, 2, rho.shape[-1]).sum(1)  # P_t = rho_2t + rho_2t+1
    positive = torch.cumprod((pairs > 0).double(), 0)
    monotone = torch.cummin(pairs.clamp_min(0.0), 0).values
    tau = -1.0 + 2.0 * (monotone * positive).sum(0)
    return n * chains / tau.clamp_min(1.0 / math.log10(max(n * chains, 10)))


def decoherence_length(draws: Tensor, distance_per_draw: float, factor: float = 0.4) -> float:
    r"""The decoherence length :math:`L` from warm-up draws ``[T, C, K]``: ``factor`` times the
    distance travelled per effective sample, :math:`L = 0.4\, \ell\, \overline{T C / \mathrm{ESS}_k}`
    with :math:`\ell` the distance each draw moved (Robnik et al. 2023; BlackJAX's third tuning stage).
    The ESS is each chain's own (``between_chains=False``): chains in different modes of a network's
    posterior would otherwise read as chains that never decorrelate."""
    ess = effective_sample_size(draws, between_chains=False)
    return float(factor * distance_per_draw * (draws.shape[0] * draws.shape[1] / ess).mean())


def chain_decoherence_lengths(draws: Tensor, distance_per_draw: Tensor, factor: float = 0.4) -> Tensor:
    """:func:`decoherence_length` for each chain from its own draws ``[T, C, K]`` and distance per draw
    ``[C]``: ``[C]`` float64 on the host."""
    return torch.tensor([decoherence_length(draws[:, c:c + 1], float(distance_per_draw[c]), factor)
                         for c in range(draws.shape[1])], dtype=torch.float64)


# ------------------------------------------------------------ the window adaptation
class WarmupStep(NamedTuple):
    """What one warm-up transition tells :class:`WindowAdaptation` and its components: the chains'
    points before (``theta``) and after (``theta_out``) it, the acceptance ``prob``, ``diverging``
    and ``finite`` per chain, and, for an HMC trajectory, its end (``proposal``, ``momentum``) and
    its integration time."""

    theta: Tensor
    theta_out: Tensor
    prob: Tensor
    diverging: Tensor
    finite: Tensor | None = None
    proposal: Tensor | None = None
    momentum: Tensor | None = None
    time: float | None = None


class WarmupComponent:
    """A part of a sampler's warm-up beside :class:`WindowAdaptation` (ChEES's trajectory length,
    proximal HMC's lambda): it acts on the sampler's parameters (a ``NamedTuple``) and returns
    them. Each method is called at one point of every warm-up transition, in this order:
    :meth:`after_step` (the step size has its new value), :meth:`before_mass_change` /
    :meth:`after_mass_change` (around a new inverse mass: ``params.inv_mass`` is the old one before,
    the new one after), :meth:`end` (last warm-up step, the step size frozen), :meth:`after_update`
    (every step, last). The defaults return the parameters as they are. A component's state is
    plain attributes (a checkpoint stores it); the sampler (to try a trajectory) and the chains'
    state come with the calls that need them."""

    def after_step(self, adaptation: "WindowAdaptation", params: NamedTuple, step: WarmupStep) -> NamedTuple:
        return params

    def before_mass_change(self, adaptation: "WindowAdaptation", params: NamedTuple, inv_mass: Tensor) -> NamedTuple:
        return params

    def after_mass_change(self, adaptation: "WindowAdaptation", sampler, state: NamedTuple, params: NamedTuple,
                          settled: list[float]) -> NamedTuple:
        return params

    def end(self, adaptation: "WindowAdaptation", sampler, state: NamedTuple | None, params: NamedTuple) -> NamedTuple:
        return params

    def after_update(self, adaptation: "WindowAdaptation", params: NamedTuple) -> NamedTuple:
        return params


#: what dual averaging steers, from one warm-up transition: one number per adapter
Statistic = Callable[[WarmupStep], list]


def harmonic_statistic(step: WarmupStep) -> list[float]:
    """:func:`acceptance_statistic` over the non-divergent chains (ChEES, HMC)."""
    return [acceptance_statistic(step.prob, ~step.diverging)]


def finite_statistic(step: WarmupStep) -> list[float]:
    """:func:`acceptance_statistic` over the chains with a finite proposal (proximal HMC)."""
    return [acceptance_statistic(step.prob, step.finite)]


def mean_statistic(step: WarmupStep) -> list[float]:
    """The chains' mean acceptance (batched NUTS, pooled)."""
    return [float(step.prob.double().mean())]


def chain_statistic(step: WarmupStep) -> list[float]:
    """Each chain's acceptance (batched NUTS, per chain)."""
    return step.prob.tolist()


def with_step_sizes(params: NamedTuple, step_sizes: Sequence[float]) -> NamedTuple:
    """``params`` with the step sizes dual averaging chose: one number for all chains where
    ``params.step_size`` is a number, else a ``[C]`` tensor (one for all chains, or one each)."""
    old = params.step_size
    if not torch.is_tensor(old):
        return params._replace(step_size=step_sizes[0])
    steps = torch.tensor(step_sizes, dtype=old.dtype, device=old.device)
    return params._replace(step_size=steps.expand_as(old).clone())


class WindowAdaptation:
    r"""The one warm-up of the HMC family and batched NUTS, an adaptation of the sampler core
    (:mod:`bnnzoo.inference.kernels.transition`: ``start`` / ``update`` on a sampler's state and
    parameters): dual averaging of ``params.step_size`` toward ``target`` of ``statistic`` and a
    diagonal ``params.inv_mass`` from the chains' variance over ``schedule(num_steps)``'s windows
    (none without ``adapt_mass``); pooled over the chains (one step size, the pooled variance) or per
    chain (one :class:`DualAveraging` and one variance each). Components (:class:`WarmupComponent`)
    add the samplers' own parts around it.

    Every warm-up transition: the step size(s) from the statistic; the components'
    ``after_step``; in the second half of each window the variance takes the chains' new points,
    and at a window's end the new inverse mass replaces the old (a chain whose estimate is
    not finite and positive keeps its own; where none is, nothing changes), dual averaging goes
    on and only its average restarts (restarting the whole scheme at a new search swung the
    step size tenfold at every window), with ``before_mass_change`` / ``after_mass_change`` around
    it; at the last warm-up step the step sizes freeze at dual averaging's averaged iterates and
    the components' ``end`` runs. ``docs/algorithms.md``, "Adaptation components". All state is
    plain attributes (numbers, tensors, the components)."""

    def __init__(self, target: float, gamma: float, schedule: Callable[[int], list], statistic: Statistic, *,
                 adapt_step_size: bool = True, adapt_mass: bool = True, pooled: bool = True,
                 components: Sequence[WarmupComponent] = ()):
        self.target, self.gamma, self.schedule, self.statistic = float(target), gamma, schedule, statistic
        self.adapt_step_size, self.adapt_mass, self.pooled = adapt_step_size, adapt_mass, pooled
        self.components = list(components)
        self.adapters: list[DualAveraging] = []
        self.windows: list[tuple[int, int]] = []
        self.num_steps = 0

    def _new_variance(self):
        return PooledVariance() if self.pooled else ChainVariance()

    @property
    def averaged_step_size(self) -> float | None:
        """Dual averaging's averaged step size (the first adapter's) once it has been updated, else None."""
        adapter = self.adapters[0]
        return adapter.final_step_size if self.adapt_step_size and adapter.t else None

    def start(self, sampler, state: NamedTuple, params: NamedTuple, num_steps: int) -> tuple[NamedTuple, NamedTuple]:
        """Before warm-up transition 0 of ``num_steps``: one :class:`DualAveraging` from the first
        step size (pooled), or one per chain from each chain's."""
        step = params.step_size
        first = step.tolist()[:1 if self.pooled else None] if torch.is_tensor(step) else [step]
        self.adapters = [DualAveraging(float(s), self.target, gamma=self.gamma) for s in first]
        self.windows = list(self.schedule(num_steps)) if self.adapt_mass else []
        self.variance = self._new_variance()
        self.num_steps = num_steps
        self.previous = state.position
        return state, params

    def update(self, sampler, t: int, state: NamedTuple, info: NamedTuple,
               params: NamedTuple) -> tuple[NamedTuple, NamedTuple]:
        """After warm-up transition ``t`` (from 0) of ``self.num_steps``; ``params`` are those it ran with."""
        nominal = params.step_size
        time = None if torch.is_tensor(nominal) else info.n_steps * float(nominal)
        step = WarmupStep(self.previous, state.position, info.acceptance_rate, info.diverging,
                          getattr(info, "finite", None), getattr(info, "proposal", None),
                          getattr(info, "momentum", None), time)
        if self.adapt_step_size:
            params = with_step_sizes(params, [a.update(q) for a, q in zip(self.adapters, self.statistic(step))])
        for component in self.components:
            params = component.after_step(self, params, step)
        for start, end in self.windows:
            if start + (end - start) // 2 <= t < end:
                self.variance.update(step.theta_out)
            if t == end - 1:
                params = self._update_mass(sampler, state, params)
        if t == self.num_steps - 1:
            params = self.finish(params, sampler, state)
        for component in self.components:
            params = component.after_update(self, params)
        self.previous = state.position
        return state, params

    def finish(self, params: NamedTuple, sampler=None, state: NamedTuple | None = None) -> NamedTuple:
        """End warm-up after the step just made (the last scheduled one, or an earlier one where a
        gradient budget ends warm-up): the step sizes freeze at dual averaging's averaged iterates
        and the components' ``end`` runs (with the sampler and the chains' state, where given); a
        mass window still open is left unused."""
        if self.adapt_step_size:
            params = with_step_sizes(params, [a.final_step_size for a in self.adapters])
        for component in self.components:
            params = component.end(self, sampler, state, params)
        return params

    def _update_mass(self, sampler, state: NamedTuple, params: NamedTuple) -> NamedTuple:
        old = params.inv_mass
        new = self.variance.variance().to(old.dtype)
        self.variance = self._new_variance()
        new = new.expand_as(old)
        ok = (torch.isfinite(new) & (new > 0)).all(-1, keepdim=True)
        if not bool(ok.any()):
            return params
        new = torch.where(ok, new, old)
        for component in self.components:
            params = component.before_mass_change(self, params, new)
        params = params._replace(inv_mass=new)
        settled = [a.final_step_size if a.t else a.step_size for a in self.adapters]
        for adapter in self.adapters:
            adapter.restart_average()
        for component in self.components:
            params = component.after_mass_change(self, sampler, state, params, settled)
        return params
