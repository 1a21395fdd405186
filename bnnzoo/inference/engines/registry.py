"""Inference engines by name.

An engine is a kernel (or a VI fit) plus the driver that runs it. Its options are
read from the kernel's options dataclass, the one place where each option's default,
meaning and check live; the driver adds ``chain_method`` and ``compile`` where the
engine supports them. A new kernel is one file in ``inference/kernels/`` and one
:func:`register` line below.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from ...results import Draws
from ..kernels.chees import ChEESHMC
from ..kernels.group_sparse import GroupSparseSGHMC
from ..kernels.hmc import FixedStepHMC
from ..kernels.mams import MAMS
from ..kernels.mclmc import MCLMC
from ..kernels.nuts import BatchedNUTS
from ..kernels.proximal_hmc import ProximalHMC
from ..kernels.pyro_hmc import HMC, NUTS
from ..kernels.rwmh import RandomWalkMH
from ..kernels.sghmc import SGHMC
from ..kernels.sgld import SGLD
from ..kernels.spike_slab_sa import SGHMCSA, SGLDSA
from ..compilation import check_compile
from ..options import choice, suggest
from ..vi import VIOptions
from .driver import run_flat_kernel, run_pyro_hmc, run_vi

__all__ = ["DRIVER_OPTIONS", "ENGINES", "Engine", "RUN_ARGUMENTS", "register"]

#: options of the run itself (``run()``'s keywords), never an engine's
RUN_ARGUMENTS = ("num_samples", "warmup_steps", "num_chains", "seed", "progress")
#: option -> (default, meaning, check) of the driver, for the engines that take it
DRIVER_OPTIONS = {
    "chain_method": ("vectorized", "the chains as one [C, D] batch ('vectorized') or one after another "
                     "('sequential')", choice("vectorized", "sequential")),
    "compile": ("auto", "run the potential and the leapfrog step as torch.compile graphs (BNN with an "
                "analytic gradient; needs a C++ compiler); 'auto': when the rest of the run pays the compile "
                "back, decided after the first mass window (bnnzoo.inference.compilation)", check_compile),
}


@dataclass(frozen=True)
class Engine:
    """A registered inference engine.

    Attributes
    ----------
    name, kind : str
        ``kind`` is ``"mcmc"`` or ``"vi"``.
    options_cls : type
        The options dataclass (a kernel's, or :class:`~bnnzoo.inference.vi.VIOptions`).
    runner : callable
        ``runner(engine, model, x, y, config, **extra)`` returning :class:`~bnnzoo.results.Draws`:
        ``config`` is the run's :class:`~bnnzoo.inference.engines.config.RunConfig` (counts, the typed
        ``options``, ``driver_options``, settings), ``extra`` holds ``checkpoint`` when the run keeps one
        and ``initial`` (``[C, D]`` initial points) under an ensemble warm start (MCMC runners take it),
        and ``budget`` (a :class:`~bnnzoo.inference.budget.BudgetMeter`) under a budget an MCMC engine's
        cost per draw does not fix (bnnzoo's MCMC loop counts it for bnnzoo's kernels).
    description : str
    kernel : type, optional
        The ``MCMCKernel`` class.
    driver : tuple of str
        The :data:`DRIVER_OPTIONS` this engine takes.
    """

    name: str
    kind: str
    options_cls: type
    runner: Callable[..., Draws]
    description: str
    kernel: type | None = None
    driver: tuple[str, ...] = ()

    def defaults(self) -> dict[str, Any]:
        """Engine options with their default values (run-level ``num_chains`` excluded)."""
        own = {f.name: f.default for f in fields(self.options_cls) if f.name not in RUN_ARGUMENTS}
        return {**own, **{k: DRIVER_OPTIONS[k][0] for k in self.driver}}

    def options(self) -> list[str]:
        """Engine-specific keyword options (beyond the run's own)."""
        return list(self.defaults())

    def option_docs(self) -> dict[str, str]:
        """One line of meaning per option."""
        docs = {f.name: f.metadata.get("doc", "") for f in fields(self.options_cls)}
        docs = {k: docs.get(k, "") for k in self.defaults()}
        return {**docs, **{k: DRIVER_OPTIONS[k][1] for k in self.driver}}

    def configure(self, options: dict[str, Any], num_chains: int = 1) -> tuple[Any, dict]:
        """The engine's typed options from ``options`` (as a run is given them), checked before anything
        runs: ``(options object, driver options)``, or a ``ValueError`` naming the engine, the option and
        the value. The object is what the engine's kernel (or fit) is built from: a kernel's holds
        ``num_chains`` C when its chains are one vectorized batch, else 1, and the driver's
        ``chain_method`` where the kernel has that option too."""
        unknown = [k for k in options if k not in self.defaults()]
        if unknown:
            hint = suggest(unknown[0], self.options() + list(RUN_ARGUMENTS)) if len(unknown) == 1 else ""
            raise ValueError(f"engine {self.name!r}: unknown option(s) {', '.join(unknown)}{hint}; "
                             f"valid options: {', '.join(self.options()) or '(none)'}")
        driver = {k: options.get(k, DRIVER_OPTIONS[k][0]) for k in self.driver}
        names = {f.name for f in fields(self.options_cls)}
        own = {k: v for k, v in options.items() if k not in self.driver}
        own.update({k: v for k, v in driver.items() if k in names})  # a driver option the kernel has as well
        vectorized = driver.get("chain_method", "vectorized") == "vectorized"
        chains = {"num_chains": num_chains if vectorized else 1} if "num_chains" in names else {}
        try:
            for k, value in driver.items():
                DRIVER_OPTIONS[k][2](k, value)
            opts = self.options_cls(**own, **chains)
            if self.kernel is not None and hasattr(self.kernel, "check_chains"):
                self.kernel.check_chains(opts)
        except (TypeError, ValueError) as err:
            raise ValueError(f"engine {self.name!r}: {err}") from None
        return opts, driver

    def run(self, model, x, y, config, checkpoint=None, initial=None, budget=None) -> Draws:
        """Run on ``(x, y)`` as ``config`` (a :class:`~bnnzoo.inference.engines.config.RunConfig` of this
        engine) says; ``checkpoint``: a :class:`~bnnzoo.inference.checkpoint.Checkpoint`; ``initial``: the
        chains' ``[C, D]`` initial points in the potential's flat layout (an ensemble warm start), for the
        MCMC engines; ``budget``: a :class:`~bnnzoo.inference.budget.BudgetMeter` for a runner that counts
        one as it runs."""
        if config.engine != self.name:
            raise ValueError(f"config: a run of engine {config.engine!r}, not {self.name!r}")
        extra = {}
        if checkpoint is not None:
            extra["checkpoint"] = checkpoint
        if initial is not None:
            extra["initial"] = initial
        if budget is not None:
            extra["budget"] = budget
        return self.runner(self, model, x, y, config, **extra)


ENGINES: dict[str, Engine] = {}


def register(name: str, options_cls: type, runner: Callable[..., Draws], description: str, kind: str = "mcmc",
             kernel: type | None = None, driver: tuple[str, ...] = ()) -> Engine:
    """Add an engine to :data:`ENGINES`."""
    ENGINES[name] = Engine(name, kind, options_cls, runner, description, kernel, driver)
    return ENGINES[name]


def _kernel(name: str, kernel: type, description: str, driver: tuple[str, ...] = ("chain_method",)) -> None:
    register(name, kernel.Options, run_flat_kernel, description, kernel=kernel, driver=driver)


register("nuts", NUTS.Options, run_pyro_hmc, "Pyro's No-U-Turn sampler (on bnnzoo's fast potential unless "
         "fast=False)", kernel=NUTS)
register("hmc", HMC.Options, run_pyro_hmc, "Pyro's Hamiltonian Monte Carlo with a fixed number of leapfrog steps",
         kernel=HMC)
_kernel("rwmh", RandomWalkMH, "Random-walk Metropolis with its scale adapted toward acceptance 0.234")
_kernel("chees", ChEESHMC, "ChEES-HMC: all chains as one batch, jittered trajectory length adapted across "
        "chains", driver=("compile",))
_kernel("batched_nuts", BatchedNUTS, "NUTS for all chains as one batch: the chains' trees built in lockstep, "
        "one batched gradient per leapfrog step", driver=("compile",))
_kernel("fixed_hmc", FixedStepHMC, "HMC with a fixed step size and number of leapfrog steps, no adaptation; "
        "all chains as one batch", driver=("compile",))
_kernel("proximal_hmc", ProximalHMC, "Proximal HMC for L1 / Laplace priors: proximal leapfrog force, exact "
        "Metropolis test", driver=("chain_method", "compile"))
_kernel("mclmc", MCLMC, "Unadjusted microcanonical Langevin Monte Carlo: isokinetic steps, partial velocity "
        "refresh; step size tuned to an energy-error variance, L from the effective sample size",
        driver=("chain_method", "compile"))
_kernel("mams", MAMS, "Metropolis-adjusted microcanonical sampler: jittered isokinetic trajectories, exact "
        "accept/reject; step size by dual averaging, L from the autocorrelation", driver=("chain_method", "compile"))
_kernel("sgld", SGLD, "Stochastic gradient Langevin dynamics: minibatch gradients, step-size schedules, "
        "tempering, pruning")
_kernel("sghmc", SGHMC, "Stochastic gradient HMC (SGD-with-momentum form): friction, noise estimate, "
        "schedules, tempering, pruning")
_kernel("sgld_sa", SGLDSA, "SGLD-SA (mode=\"em\": SGLD-EM): SGLD with stochastic approximation of "
        "spike-and-slab hyperparameters")
_kernel("sghmc_sa", SGHMCSA, "SGHMC-SA (mode=\"em\": SGHMC-EM): SGHMC with stochastic approximation of "
        "spike-and-slab hyperparameters")
_kernel("sghmc_group_ss", GroupSparseSGHMC, "Group spike-and-slab SGHMC (paper 004): EM weight decay per "
        "group, one-shot group pruning, cyclical steps")
register("svi", VIOptions, run_vi, "Mean-field Normal variational inference; one independent fit per chain",
         kind="vi")
