r"""ChEES-HMC: many-chain HMC with a jittered trajectory length adapted by ChEES.

The HMC family's window adaptation (step size and mass matrix) plus one more component:
the trajectory length :math:`T`, adapted by Adam on the ChEES criterion
(:func:`~bnnzoo.inference.adaptation.chees_gradient`), jittered per transition.
The rules are in ``docs/algorithms.md`` ("ChEES-HMC").

Hoffman, Radul and Sountsov (2021), "An adaptive MCMC scheme for setting
trajectory lengths in Hamiltonian Monte Carlo", AISTATS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..adaptation import (ScalarAdam, WarmupComponent, chees_gradient, halton, harmonic_statistic, late_mass_windows,
                          mass_windows)
from ..integrators import velocity
from .hmc import FixedStepHMC, WarmupOptions, WarmupParts
from ..options import choice, flag, integer, option, optional, positive

__all__ = ["ChEESHMC", "ChEESOptions", "JITTERS", "MASS_SCHEDULES", "TrajectoryLengthAdaptation"]

Tensor = torch.Tensor
JITTERS = ("halton", "uniform")
#: ``mass_schedule``'s windows: Stan's doubling ones, or two in the last 30% of warm-up
MASS_SCHEDULES = {"stan": mass_windows, "late": late_mass_windows}


@dataclass(frozen=True)
class ChEESOptions(WarmupOptions):
    """Options of :class:`ChEESHMC`."""

    step_size: float = option(0.1, "initial leapfrog step size (refined by a search before warm-up)", positive)
    trajectory_length: float | None = option(
        None, "initial T, fixed if adapt_trajectory=False (None: the chains' U-turn time at each mass update)",
        optional(positive))
    adapt_trajectory: bool = option(True, "adapt T by ChEES during warm-up", flag)
    max_leapfrog_steps: int = option(1000, "cap on leapfrog steps per transition", integer(1))
    jitter: str = option("halton", "trajectory jitter u_n in (0, 1): quasi-random 'halton' or 'uniform'",
                         choice(*JITTERS))
    mass_schedule: str = option("stan", "mass-matrix windows: Stan's doubling ones ('stan'), or two in the last "
                                "30% of warm-up ('late': the short-T iterations before them are cheap)",
                                choice(*MASS_SCHEDULES))


class ChEESHMC(FixedStepHMC):
    r"""HMC for C chains run as one batch, with a jittered trajectory length
    adapted by ChEES (Hoffman, Radul and Sountsov 2021, Algorithm 1).

    Each transition draws :math:`p \sim N(0, M)` for every chain, a jitter
    :math:`u_n \in (0, 1)` shared by all chains (Halton sequence or uniform),
    and runs :math:`L_n = \lceil u_n T / \epsilon \rceil` leapfrog steps
    (at most ``max_leapfrog_steps``), then a Metropolis test per chain.

    Warm-up: the step size and the diagonal mass as in
    :class:`~bnnzoo.inference.adaptation.WindowAdaptation` (dual averaging of the
    acceptance statistic toward ``target_accept``: 0.8 for a smooth network,
    0.45 for a ReLU-family one, :func:`~bnnzoo.inference.tuning.recommend_target_accept`);
    and :math:`T` by Adam (lr 0.025, :math:`\beta_1 = 0`, :math:`\beta_2 = 0.95`) ascending
    ChEES in :math:`\log T`, kept in :math:`[\bar\epsilon, \bar\epsilon L_{\max}]`
    with :math:`\bar\epsilon` dual averaging's averaged step size. At each mass
    update :math:`T` restarts from the chains' median U-turn time (:meth:`u_turn_time`)
    unless ``trajectory_length`` was given, in which case the expected distance
    :math:`T \sqrt{\operatorname{tr} M^{-1}}` is kept. After warm-up :math:`T` is the
    running average :math:`\log \bar T_n = n^{-1/2} \log T_n + (1 - n^{-1/2}) \log \bar T_{n-1}`
    (restarted at each mass update); all is frozen. The mass windows are Stan's, or with
    ``mass_schedule="late"`` two in the last 30% of warm-up
    (:func:`~bnnzoo.inference.adaptation.late_mass_windows`): until the first one ends
    :math:`T` is short and an iteration cheap, after it each costs a full trajectory.

    Options: :class:`ChEESOptions`. Per-draw statistics: those of
    :class:`~bnnzoo.inference.kernels.hmc.FixedStepHMC` and ``trajectory_length``
    (the un-jittered :math:`T`).

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

    Options = ChEESOptions
    target_family = "chees"

    @classmethod
    def check_chains(cls, options: ChEESOptions) -> None:
        if options.adapt_trajectory and options.num_chains < 2:
            raise ValueError(
                f"num_chains must be >= 2 for ChEES trajectory adaptation (a cross-chain estimate), got "
                f"{options.num_chains!r}: run it as bnnzoo.inference.MCMC(kernel, num_chains=C, "
                f"chain_method='vectorized'), or pass adapt_trajectory=False")
    stat_names = FixedStepHMC.stat_names + ("trajectory_length", "reached_max_steps")

    def _reset(self) -> None:
        super()._reset()
        self.trajectory_length = self.options.trajectory_length
        self._jitter_index = 0
        self._length_now = None
        self._capped = False

    def prepare(self, theta: Tensor) -> None:
        super().prepare(theta)
        if self.trajectory_length is None:
            self.trajectory_length = 10 * self.step_size
        self.clip_trajectory_length()

    def clip_trajectory_length(self, step_size: float | None = None) -> None:
        """Keep :math:`T` in ``[eps, max_leapfrog_steps * eps]``, ``eps`` the step size (or ``step_size``)."""
        step_size = self.step_size if step_size is None else step_size
        low, high = step_size, step_size * self.options.max_leapfrog_steps
        self.trajectory_length = min(max(self.trajectory_length, low), high)

    def warmup_parts(self) -> WarmupParts:
        """Stan's windows, or with ``mass_schedule="late"`` two in the last 30% of warm-up
        (:func:`~bnnzoo.inference.adaptation.late_mass_windows`); the trajectory length beside them
        (:class:`TrajectoryLengthAdaptation`)."""
        component = TrajectoryLengthAdaptation(self.options.adapt_trajectory and self.options.trajectory_length is None)
        return WarmupParts(MASS_SCHEDULES[self.options.mass_schedule], harmonic_statistic, (component,))

    # ---------------------------------------------------------- sampling
    def _next_jitter(self) -> float:
        self._jitter_index += 1
        if self.options.jitter == "halton":
            return halton(self._jitter_index)
        return 1.0 - float(torch.rand((), device="cpu"))  # in (0, 1]; a number on the host, drawn there

    def leapfrog_steps(self) -> int:
        self._length_now = self.trajectory_length  # reported with the transition
        steps = math.ceil(self._next_jitter() * self.trajectory_length / self.step_size)
        # the length is held at the cap of max_leapfrog_steps steps (the adaptation wants longer)
        self._capped = self.trajectory_length >= self.step_size * self.options.max_leapfrog_steps * (1 - 1e-9)
        return min(max(steps, 1), self.options.max_leapfrog_steps)

    def extra_stats(self, theta: Tensor) -> dict[str, float | bool]:
        return {"trajectory_length": float(self._length_now), "reached_max_steps": bool(self._capped)}

    def u_turn_time(self, theta: Tensor, step_size: float | None = None, max_steps: int | None = None) -> float:
        r"""Median over chains of the time at which a trajectory from ``theta`` (fresh
        momentum, the current mass, ``step_size`` or the current one) first turns back,
        :math:`(\theta_t - \theta_0)^\top M^{-1} p_t < 0` (the no-U-turn criterion),
        capped at ``max_steps`` steps (default ``max_leapfrog_steps``). The criterion is
        checked after every step, or after every :data:`~bnnzoo.inference.compiled_graphs.UNROLL`
        where trajectories run the potential's compiled multi-step graph (a one-step graph
        compiled for this estimate alone would cost more than it saves).

        ChEES starts from it at each mass update when no ``trajectory_length`` was
        given: Adam moves :math:`\log T` by about its learning rate per step, so from
        ``10 * step_size`` it needs hundreds of warm-up steps to reach the lengths a
        BNN posterior wants; the U-turn time of the population is already close."""
        step_size = step_size or self.step_size
        value, grad = self.current(theta)
        x, p = theta, self.momentum(theta)
        cap = max_steps or self.options.max_leapfrog_steps
        stride = self.runtime.stride(self.potential, self.leapfrog_step_fn())
        turned = torch.full(theta.shape[:-1], cap, dtype=torch.long, device=theta.device)
        step = 0
        while step < cap:
            n = min(stride, cap - step)
            x, p, value, grad = self.advance(x, p, value, grad, step_size, n)
            step += n
            back = ((x - theta) * velocity(p, self.inv_mass)).sum(-1)
            now = ~(back >= 0) & (turned == cap)  # NaN counts as turned: that chain's trajectory is over
            turned = torch.where(now, torch.full_like(turned, step), turned)
            if step % 8 == 0 and bool((turned < cap).all()):  # a look on the host every 8 steps
                break
        return float(turned.double().median()) * step_size

    # ---------------------------------------------------------- reporting
    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        diag["trajectory_length"] = self.trajectory_length
        return diag

    def logging(self):
        log = super().logging()
        if self.trajectory_length is not None:
            log["traj. length"] = f"{self.trajectory_length:.2e}"
        return log


class TrajectoryLengthAdaptation(WarmupComponent):
    r"""ChEES's trajectory length :math:`T` as a part of the window adaptation (:class:`ChEESHMC`'s
    docstring has the rules): Adam on the ChEES criterion in :math:`\log T` after each step-size
    update, its running average restarted at each mass update where :math:`T` keeps the expected
    distance :math:`T\sqrt{\operatorname{tr} M^{-1}}` or, with ``guess`` (no ``trajectory_length``
    given), restarts from the chains' U-turn time; the average at the end of warm-up; :math:`T` kept
    in ``[eps, max_leapfrog_steps * eps]`` after every step, ``eps`` dual averaging's *averaged*
    step size (its raw iterates swing by 10x, and clipping to them would cut :math:`T` down at
    every dip)."""

    def __init__(self, guess: bool):
        self.guess = guess
        self.adam = ScalarAdam()
        self.log_length_avg, self.count = 0.0, 0

    def after_step(self, kernel, adaptation, step) -> None:
        if not kernel.options.adapt_trajectory:
            return
        grad = chees_gradient(step.theta, step.proposal, step.momentum, step.prob, step.diverging, step.time,
                              kernel.inv_mass)
        if math.isfinite(grad):
            kernel.trajectory_length = math.exp(self.adam.step(math.log(kernel.trajectory_length), grad))
            self.after_update(kernel, adaptation)
        self.count += 1
        weight = self.count ** -0.5
        self.log_length_avg = weight * math.log(kernel.trajectory_length) + (1 - weight) * self.log_length_avg

    def before_mass_change(self, kernel, adaptation, inv_mass) -> None:
        if kernel.options.adapt_trajectory:  # keep the expected distance travelled, T * sqrt(tr M^-1)
            kernel.trajectory_length *= math.sqrt(float(kernel.inv_mass.sum()) / float(inv_mass.sum()))
            self.log_length_avg, self.count = 0.0, 0

    def after_mass_change(self, kernel, adaptation, theta, settled) -> None:
        if self.guess:
            # near leapfrog's stability limit the stiffest directions swing and fake a U-turn
            # within a few steps: integrate at half the smaller of dual averaging's current
            # iterate and the step size it had settled on (its average), over as long a time
            # as max_leapfrog_steps steps of that smaller size
            step_size = min(settled[0], kernel.step_size) / 2
            kernel.trajectory_length = kernel.u_turn_time(theta, step_size, 2 * kernel.options.max_leapfrog_steps)
            self.adam = ScalarAdam()

    def end(self, kernel, adaptation) -> None:
        if kernel.options.adapt_trajectory and self.count:
            kernel.trajectory_length = math.exp(self.log_length_avg)

    def after_update(self, kernel, adaptation) -> None:
        kernel.clip_trajectory_length(adaptation.averaged_step_size)
