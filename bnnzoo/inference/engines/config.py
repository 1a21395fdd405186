"""The typed run configuration: everything a run is given, checked once at the edge.

:func:`run_config` makes every check a run needs on what it is given (the engine's name, the
counts, the warm start and the budget, the engine's options into its typed options object, the
threads, dtype, device and checkpoint settings) and returns a frozen :class:`RunConfig`; bad
input is a one-line ``ValueError`` naming the field and the value, before anything runs.
:func:`~bnnzoo.inference.run` builds one (or takes one as ``engine=``), studies build one per
cell when they are built, and from there the config goes down whole: the driver builds the
kernel from its typed options (``Kernel.from_options``), the VI fit and Pyro's NUTS/HMC read
theirs; nothing below checks an option again.

>>> from bnnzoo.inference import run_config
>>> config = run_config("chees", num_samples=100, num_chains=4, target_accept=0.7)
>>> config.options.target_accept, config.num_chains, config.settings.threads
(0.7, 4, 'auto')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ... import validation
from ..budget import check_budget_engine
from ..checkpoint import CHECKPOINT_SECONDS
from ..ensemble import START_KEYS, StartPlan, check_start
from ..options import Options
from ..threads import check_threads
from ..tuning import recommend_target_accept
from .registry import ENGINES, Engine

__all__ = ["COUNTS", "RunConfig", "RunSettings", "resolve_dtype", "run_config", "run_settings"]

#: run-level count -> (minimum, maximum or None); a seed seeds numpy too, whose seeds are 32-bit
COUNTS = {"num_samples": (1, None), "warmup_steps": (0, None), "num_chains": (1, None), "seed": (0, 2**32 - 1)}


def resolve_dtype(dtype) -> torch.dtype | None:
    """None, or a torch floating dtype from a dtype or its name (``"float64"``)."""
    return None if dtype is None else validation.float_dtype("dtype", dtype)


@dataclass(frozen=True)
class RunSettings:
    """How a run runs (not what it draws): progress, checkpoint folder and saves, threads, dtype,
    device. Made by :func:`run_settings`, which checks them; ``dtype`` and ``device`` are torch
    objects there (None: torch's default dtype; where the data are)."""

    progress: bool = True
    checkpoint: Any = None
    resume: bool = False
    checkpoint_every: int | None = None
    checkpoint_seconds: float | None = CHECKPOINT_SECONDS
    threads: Any = "auto"
    dtype: torch.dtype | None = None
    device: torch.device | None = None


def run_settings(progress: bool = True, checkpoint=None, resume: bool = False, checkpoint_every: int | None = None,
                 checkpoint_seconds: float | None = CHECKPOINT_SECONDS, threads="auto", dtype=None,
                 device=None) -> RunSettings:
    """The checked :class:`RunSettings` (the keywords as :func:`~bnnzoo.inference.run` takes them):
    a ``ValueError`` naming the field and the value."""
    validation.boolean("resume", resume)
    validation.boolean("progress", progress)
    check_threads(threads)
    if resume and checkpoint is None:
        raise ValueError("resume=True: give the checkpoint folder to continue from (checkpoint=DIR)")
    if checkpoint_every is not None:
        validation.integer("checkpoint_every", checkpoint_every, 1)
    if checkpoint_seconds is not None:
        validation.positive("checkpoint_seconds", checkpoint_seconds)
    dtype = resolve_dtype(dtype)
    device = None if device is None else validation.device("device", device)
    return RunSettings(progress, checkpoint, resume, checkpoint_every, checkpoint_seconds, threads, dtype, device)


@dataclass(frozen=True)
class RunConfig:
    """One run's checked configuration (:func:`run_config`); frozen, passed down whole.

    Attributes
    ----------
    engine : str
        A key of :data:`~bnnzoo.inference.ENGINES` (:attr:`spec` is the :class:`Engine`).
    num_samples, warmup_steps, num_chains, seed : int
        The counts; ``num_chains`` resolved (None given: 2, or K*M under an ensemble warm start).
    options
        The engine's typed options: its kernel's options dataclass (``num_chains`` the chains the
        kernel holds: C vectorized, else 1), :class:`~bnnzoo.inference.vi.VIOptions`, or Pyro's
        NUTS/HMC options. The kernel is built from this object; nothing checks it again.
    driver : tuple of (name, value)
        The driver's options of this engine (``chain_method``, ``compile``), defaults filled in.
    start : StartPlan
        The checked warm start and budget (:func:`~bnnzoo.inference.ensemble.check_start`).
    arguments : tuple of (name, value)
        What the config was built from, as given (the four counts, ``num_chains`` possibly None,
        the start keys and the engine's options): :meth:`given`, a study cell's options.
    settings : RunSettings
    """

    engine: str
    num_samples: int
    warmup_steps: int
    num_chains: int
    seed: int
    options: Options
    driver: tuple = ()
    start: StartPlan = StartPlan()
    arguments: tuple = ()
    settings: RunSettings = RunSettings()

    @property
    def spec(self) -> Engine:
        """The registered :class:`~bnnzoo.inference.engines.Engine`."""
        return ENGINES[self.engine]

    def given(self) -> dict[str, Any]:
        """The keywords the config was built from (``run_config(engine, **config.given())`` builds it again)."""
        return dict(self.arguments)

    @property
    def engine_options(self) -> dict[str, Any]:
        """The engine's options as given (driver options included; no counts, no start keys)."""
        return {k: v for k, v in self.arguments if k not in COUNTS and k not in START_KEYS}

    @property
    def driver_options(self) -> dict[str, Any]:
        """``chain_method`` / ``compile`` where the engine takes them."""
        return dict(self.driver)

    def record(self) -> dict[str, Any]:
        """What the run records in ``Run.options`` and its checkpoint fingerprint: the counts (warm-up
        for MCMC), every option with its default, the engine's options as given, and the warm start
        where it is not the default one."""
        counts = {"num_samples": self.num_samples, "num_chains": self.num_chains, "seed": self.seed}
        if self.spec.kind == "mcmc":
            counts["warmup_steps"] = self.warmup_steps
        options = {**counts, **self.spec.defaults(), **self.engine_options}
        if self.start.ensemble or self.start.budget is not None:
            options.update(self.start.record())
        return options

    def for_model(self, model) -> tuple["RunConfig", dict]:
        """The config with ``target_accept`` recommended for ``model`` where the engine's default is
        None ("recommended") and none was given
        (:func:`~bnnzoo.inference.tuning.recommend_target_accept`), so that the run records the
        value used; and the note ``{"target_accept_reason": ...}`` (else the config itself and ``{}``)."""
        defaults = self.spec.defaults()
        if "target_accept" not in defaults or defaults["target_accept"] is not None \
                or self.engine_options.get("target_accept") is not None:
            return self, {}
        recommended = recommend_target_accept(model, self.engine)
        arguments = {**self.given(), "target_accept": recommended.value}
        options = dataclasses.replace(self.options, target_accept=recommended.value)
        return (dataclasses.replace(self, options=options, arguments=tuple(arguments.items())),
                {"target_accept_reason": recommended.reason})

    def with_settings(self, settings: RunSettings) -> "RunConfig":
        """The same run under other (checked, :func:`run_settings`) settings: a study gives each cell its own."""
        if not isinstance(settings, RunSettings):
            raise TypeError(f"settings: expected RunSettings (from run_settings()), got {type(settings).__name__}")
        return dataclasses.replace(self, settings=settings)


def run_config(engine: str = "nuts", num_samples: int = 500, warmup_steps: int = 500, num_chains: int | None = None,
               seed: int = 0, *, progress: bool = True, checkpoint=None, resume: bool = False,
               checkpoint_every: int | None = None, checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
               threads="auto", dtype=None, device=None, **engine_options) -> RunConfig:
    """Every check of a run on what it is given, once, without running anything: the
    :class:`RunConfig`, or a one-line ``ValueError`` naming the field and the value.

    The keywords are :func:`~bnnzoo.inference.run`'s (less the model, the data and
    ``member_executor``): the engine, the counts, the run's start keys (``warm_start``,
    ``num_members``, ``chains_per_member``, ``ensemble``, ``budget``), the settings and the
    engine's own options. In this order: the engine's name, the warm start (which resolves
    ``num_chains``), the counts, the budget, the engine's options (into its typed options
    object), then the settings (:func:`run_settings`).
    """
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: unknown engine; choose one of {', '.join(sorted(ENGINES))}")
    spec = ENGINES[engine]
    arguments = {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": num_chains, "seed": seed,
                 **engine_options}
    own = dict(engine_options)
    start = {k: own.pop(k) for k in START_KEYS if k in own}
    plan = check_start(spec, num_chains, **start)
    counts = {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": plan.num_chains, "seed": seed}
    for name, value in counts.items():
        minimum, maximum = COUNTS[name]
        validation.integer(name, value, minimum, maximum=maximum)
    if plan.budget is not None:
        check_budget_engine(spec)
    options, driver = spec.configure(own, plan.num_chains)
    settings = run_settings(progress, checkpoint, resume, checkpoint_every, checkpoint_seconds, threads, dtype,
                            device)
    return RunConfig(engine, num_samples, warmup_steps, plan.num_chains, seed, options, tuple(driver.items()), plan,
                     tuple(arguments.items()), settings)
