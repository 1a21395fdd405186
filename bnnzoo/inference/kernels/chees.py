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

from ..adaptation import ScalarAdam, WarmupComponent, chees_gradient
from .hmc import MASS_SCHEDULES, FixedStepHMC, HMCParams, JitteredLength, WarmupOptions, search_step_size
from ..options import choice, flag, integer, option, optional, positive

__all__ = ["ChEESHMC", "ChEESOptions", "JITTERS", "MASS_SCHEDULES", "TrajectoryLengthAdaptation", "clip_length"]

Tensor = torch.Tensor
JITTERS = ("halton", "uniform")


@dataclass(frozen=True)
class ChEESOptions(WarmupOptions):
    """Options of :class:`ChEESHMC`."""

    step_size: float = option(0.1, "initial leapfrog step size (refined by a search before warm-up)", positive)
    trajectory_length: float | None = option(
        None, "initial T, fixed if adapt_trajectory=False (None: the chains' U-turn time at each mass update)",
        optional(positive))
    adapt_trajectory: bool = option(True, "adapt T by ChEES during warm-up", flag)
    hold_trajectory: bool = option(True, "until the first mass update keep the leapfrog steps per transition where "
                                   "they start (T follows the step size), and adapt T by ChEES from there on: a "
                                   "cheap first phase of warm-up", flag)
    max_leapfrog_steps: int = option(1000, "cap on leapfrog steps per transition", integer(1))
    jitter: str = option("halton", "trajectory jitter u_n in (0, 1): quasi-random 'halton' or 'uniform'",
                         choice(*JITTERS))
    mass_schedule: str = option("late", "mass-matrix windows: two in the last 30% of warm-up ('late': the iterations "
                                "before them are cheap, ten steps each with hold_trajectory), or Stan's doubling "
                                "ones ('stan')", choice(*MASS_SCHEDULES))


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
    update :math:`T` restarts from the chains' median U-turn time
    (:meth:`~bnnzoo.inference.kernels.hmc.HMCSampler.u_turn_time`) unless ``trajectory_length`` was given, in which case the expected distance
    :math:`T \sqrt{\operatorname{tr} M^{-1}}` is kept. After warm-up :math:`T` is the
    running average :math:`\log \bar T_n = n^{-1/2} \log T_n + (1 - n^{-1/2}) \log \bar T_{n-1}`
    (restarted at each mass update); all is frozen.

    The warm-up has a cheap phase and a dear one. By default (``mass_schedule="late"``) the two mass
    windows lie in the last 30% of warm-up
    (:func:`~bnnzoo.inference.adaptation.late_mass_windows`), and until the first one ends
    (``hold_trajectory=True``) :math:`T` is held at ten steps of the averaged step size, no Adam
    step: 70% of warm-up at about five gradients a transition, which brings the chains to the
    typical set and sets the step size; from the first mass update on every transition costs a full
    trajectory. Where a gradient budget ends warm-up before the first mass update, the draws take
    :math:`T` from the chains' U-turn time at the final step size, not the held ten steps.
    ``mass_schedule="stan"`` and ``hold_trajectory=False`` give Stan's doubling windows
    and :math:`T` adapted from the first transition (the former default; the benchmark that
    moved it: ``docs/performance.md``, "ChEES warm-up").

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
    stat_names = FixedStepHMC.stat_names + ("trajectory_length", "reached_max_steps")

    @classmethod
    def check_chains(cls, options: ChEESOptions) -> None:
        if options.adapt_trajectory and options.num_chains < 2:
            raise ValueError(
                f"num_chains must be >= 2 for ChEES trajectory adaptation (a cross-chain estimate), got "
                f"{options.num_chains!r}: run it as bnnzoo.inference.MCMC(kernel, num_chains=C, "
                f"chain_method='vectorized'), or pass adapt_trajectory=False")

    def build(self, theta: Tensor):
        """The HMC sampler with the jittered length; the step-size search (with warm-up); :math:`T` from
        ``trajectory_length`` or ten steps, within ``[eps, max_leapfrog_steps * eps]``; the window
        adaptation on ``mass_schedule``'s windows with :class:`TrajectoryLengthAdaptation` beside it."""
        opts = self.options
        sampler = self.hmc_sampler(length=JitteredLength(opts.jitter, opts.max_leapfrog_steps))
        params = HMCParams(opts.step_size, theta.new_ones(theta.shape[-1]))
        if self.has_warmup and opts.adapt_step_size:
            params = params._replace(step_size=search_step_size(sampler, sampler.init(theta), params))
        length = opts.trajectory_length if opts.trajectory_length is not None else 10 * params.step_size
        params = params._replace(trajectory_length=clip_length(length, params.step_size, opts.max_leapfrog_steps))
        component = TrajectoryLengthAdaptation(opts.adapt_trajectory,
                                               opts.adapt_trajectory and opts.trajectory_length is None,
                                               opts.max_leapfrog_steps,
                                               hold=params.trajectory_length / params.step_size
                                               if opts.hold_trajectory else None)
        return sampler, self.window_adaptation(components=(component,), schedule=MASS_SCHEDULES[opts.mass_schedule]), \
            params

    @property
    def trajectory_length(self) -> float | None:
        """:math:`T` now (``params.trajectory_length``)."""
        return None if self.params is None else self.params.trajectory_length

    def expected_steps(self) -> float | None:
        """The leapfrog steps a transition is expected to take at :math:`T` and the step size now (the
        mean over the jitter): ``compile="auto"`` projects the rest of the run with it, since :math:`T`
        is still growing when its probe ends (None before the first transition)."""
        return None if self.params is None else self.sampler.length.expected_steps(self.params)

    # ---------------------------------------------------------- reporting
    def tuned(self) -> dict:
        return {**super().tuned(), "trajectory_length": self.params.trajectory_length}

    def logging(self):
        log = super().logging()
        if self.params is not None:
            log["traj. length"] = f"{self.params.trajectory_length:.2e}"
        return log


def clip_length(length: float, step_size: float, max_steps: int) -> float:
    """:math:`T` kept in ``[eps, max_steps * eps]``, ``eps`` the step size."""
    return min(max(length, step_size), step_size * max_steps)


class TrajectoryLengthAdaptation(WarmupComponent):
    r"""ChEES's trajectory length :math:`T` (``params.trajectory_length``) as a part of the window
    adaptation (:class:`ChEESHMC`'s docstring has the rules): with ``adapt``, Adam on the ChEES
    criterion in :math:`\log T` after each step-size update, its running average restarted at each mass
    update where :math:`T` keeps the expected distance :math:`T\sqrt{\operatorname{tr} M^{-1}}` or, with
    ``guess`` (no ``trajectory_length`` given), restarts from the chains' U-turn time; with ``hold``,
    a number of steps (:class:`ChEESHMC` passes :math:`T / \epsilon` as warm-up starts: ten, or the
    given ``trajectory_length``'s), no Adam step (and no average) before the first mass update and
    :math:`T = \text{hold}\cdot\bar\epsilon`, so those iterations stay cheap however the step size
    moves (a warm-up that ends while held, cut short by a gradient budget, ends with the U-turn time
    where ``guess``); the average at the end of warm-up; :math:`T` kept in ``[eps, max_steps * eps]`` after every
    step, ``eps`` dual averaging's *averaged* step size (its raw iterates swing by 10x, and clipping to
    them would cut :math:`T` down at every dip)."""

    #: the steps held until the first mass update, None once released or never held (the class's value:
    #: a checkpoint written before ``hold`` existed has none of its own)
    hold: float | None = None

    def __init__(self, adapt: bool, guess: bool, max_steps: int, hold: float | None = None):
        self.adapt, self.guess, self.max_steps, self.hold = adapt, guess, int(max_steps), hold
        self.adam = ScalarAdam()
        self.log_length_avg, self.count = 0.0, 0

    def after_step(self, adaptation, params: HMCParams, step) -> HMCParams:
        if not adaptation.windows:  # no mass update to wait for
            self.hold = None
        if not self.adapt or self.hold is not None:
            return params
        grad = chees_gradient(step.theta, step.proposal, step.momentum, step.prob, step.diverging, step.time,
                              params.inv_mass)
        if math.isfinite(grad):
            length = math.exp(self.adam.step(math.log(params.trajectory_length), grad))
            params = self.after_update(adaptation, params._replace(trajectory_length=length))
        self.count += 1
        weight = self.count ** -0.5
        self.log_length_avg = weight * math.log(params.trajectory_length) + (1 - weight) * self.log_length_avg
        return params

    def before_mass_change(self, adaptation, params: HMCParams, inv_mass: Tensor) -> HMCParams:
        if not self.adapt:
            return params
        # keep the expected distance travelled, T * sqrt(tr M^-1)
        length = params.trajectory_length * math.sqrt(float(params.inv_mass.sum()) / float(inv_mass.sum()))
        self.log_length_avg, self.count = 0.0, 0
        return params._replace(trajectory_length=length)

    def after_mass_change(self, adaptation, sampler, state, params: HMCParams, settled) -> HMCParams:
        self.hold = None
        if not self.guess:
            return params
        # the smaller of dual averaging's current iterate and the step size it had settled on (its average)
        self.adam = ScalarAdam()
        return params._replace(trajectory_length=self._u_turn(sampler, state, params,
                                                              min(settled[0], params.step_size)))

    def _u_turn(self, sampler, state, params: HMCParams, step_size: float) -> float:
        """The chains' U-turn time. Near leapfrog's stability limit the stiffest directions swing and
        fake a U-turn within a few steps: integrate at half ``step_size``, over as long a time as
        ``max_steps`` steps of ``step_size``."""
        return sampler.u_turn_time(state, params, step_size / 2, 2 * self.max_steps)

    def end(self, adaptation, sampler, state, params: HMCParams) -> HMCParams:
        if self.adapt and self.count:
            return params._replace(trajectory_length=math.exp(self.log_length_avg))
        if self.adapt and self.guess and self.hold is not None and sampler is not None:
            # warm-up ended while T was held (a gradient budget cut it before the first mass update):
            # the draws get the chains' U-turn time at the final step size, not the held steps
            self.hold = None
            step_size = float(params.step_size)
            length = self._u_turn(sampler, state, params, step_size)
            return params._replace(trajectory_length=clip_length(length, step_size, self.max_steps))
        return params

    def after_update(self, adaptation, params: HMCParams) -> HMCParams:
        step_size = adaptation.averaged_step_size
        step_size = params.step_size if step_size is None else step_size
        if self.hold is not None and self.adapt:
            params = params._replace(trajectory_length=self.hold * step_size)
        return params._replace(trajectory_length=clip_length(params.trajectory_length, step_size, self.max_steps))
