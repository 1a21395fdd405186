"""Inference engines by name, and ``run()``: one model, one engine, one :class:`Run`.

Every engine takes the same core arguments (model, training data, number of
draws, warm-up steps, chains, seed) plus its own options, and returns
:class:`~bnnzoo.results.Draws`. A new engine is one function and one
``@engine(...)`` line.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyro
import torch
from pyro.infer import MCMC

from ..data import Dataset, check_data, load
from ..models import BNN, zoo
from ..models.spec import spec_from
from ..results import Draws, Run, split_mcmc
from .hmc import HMC, NUTS
from .potential import BNNPotential, FlatPotential, initial_theta, make_potential
from .rwmh import RandomWalkMH
from .tuning import recommend_target_accept, resolve_target_accept


@dataclass(frozen=True)
class Engine:
    """A registered inference engine."""

    name: str
    fn: Callable[..., Draws]
    kind: str  # "mcmc" or "vi"
    description: str

    def options(self) -> list[str]:
        """Engine-specific keyword options (beyond the common ones)."""
        return list(self.defaults())

    def defaults(self) -> dict[str, Any]:
        """Engine-specific options with their default values."""
        common = {"model", "x", "y", "num_samples", "warmup_steps", "num_chains", "progress"}
        params = inspect.signature(self.fn).parameters.values()
        return {p.name: p.default for p in params if p.name not in common}


ENGINES: dict[str, Engine] = {}


def engine(name: str, kind: str = "mcmc"):
    """Register an engine function under ``name``."""

    def register(fn):
        ENGINES[name] = Engine(name, fn, kind, (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return register


# ------------------------------------------------------------- helpers
def _resolve_model(model_or_spec) -> BNN:
    if isinstance(model_or_spec, BNN):
        return model_or_spec
    if isinstance(model_or_spec, str) and model_or_spec in zoo.ZOO:
        return BNN(zoo.get(model_or_spec))
    return BNN(spec_from(model_or_spec))


def _resolve_data(data, model: BNN, seed: int) -> Dataset:
    if isinstance(data, str):
        data = load(data, seed=seed)
    elif isinstance(data, dict):
        data = load(seed=seed, **data) if "name" in data else Dataset(**data)
    elif isinstance(data, (tuple, list)):
        if len(data) not in (2, 4):
            raise ValueError(f"data: expected (x, y) or (x_train, y_train, x_test, y_test), got {len(data)} items")
        x, y = data[:2]
        xt, yt = data[2:] if len(data) == 4 else (x, y)
        data = Dataset("user", model.task, x, y, xt, yt, num_classes=model.spec.num_classes)
    if not isinstance(data, Dataset):
        raise TypeError(f"data: expected a Dataset, a dataset name or (x, y), got {type(data).__name__}")
    spec = model.spec
    for split, (x, y) in {"train": (data.x_train, data.y_train), "test": (data.x_test, data.y_test)}.items():
        check_data(x, y, task=model.task, input_dim=spec.num_inputs, num_classes=spec.num_classes,
                   name=f"{data.name}/{split}")
    if data.task != model.task:
        raise ValueError(f"data: {data.name} is a {data.task} data set but the model's "
                         f"{spec.likelihood.kind} likelihood is for {model.task}")
    return data


def _recommended_options(spec: Engine, model: BNN, options: dict) -> tuple[dict, dict]:
    """Fill a ``target_accept`` whose default is None ("recommended for this model")
    with :func:`~bnnzoo.inference.tuning.recommend_target_accept`, so that the run
    records the value used; the reason goes to ``Run.notes["target_accept_reason"]``
    (an attribute of the run's InferenceData)."""
    if "target_accept" not in spec.defaults() or spec.defaults()["target_accept"] is not None \
            or options.get("target_accept") is not None:
        return options, {}
    recommended = recommend_target_accept(model, spec.name)
    return {**options, "target_accept": recommended.value}, {"target_accept_reason": recommended.reason}


def _check_counts(num_samples, warmup_steps, num_chains) -> None:
    for name, value, minimum in (("num_samples", num_samples, 1), ("warmup_steps", warmup_steps, 0),
                                 ("num_chains", num_chains, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def run(model_or_spec, data, engine: str = "nuts", num_samples: int = 500, warmup_steps: int = 500,
        num_chains: int = 2, seed: int = 0, progress: bool = False, **engine_options) -> Run:
    """Run one engine on one model and data set.

    Parameters
    ----------
    model_or_spec : BNN, BNNSpec, dict, zoo name or TOML path
    data : Dataset, dataset name, or ``(x, y)`` / ``(x, y, x_test, y_test)``
    engine : str
        A key of :data:`ENGINES`.
    num_samples, warmup_steps, num_chains : int
        Draws kept per chain, warm-up steps per chain, chains.
    seed : int
    progress : bool
        Show Pyro's progress bar.
    **engine_options
        Options of the engine (``ENGINES[engine].options()`` lists them).

    Returns
    -------
    Run
    """
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: unknown engine; choose one of {', '.join(sorted(ENGINES))}")
    spec = ENGINES[engine]
    unknown = sorted(set(engine_options) - set(spec.options()))
    if unknown:
        raise ValueError(f"engine {engine!r}: unknown option(s) {', '.join(unknown)}; "
                         f"valid options: {', '.join(spec.options()) or '(none)'}")
    _check_counts(num_samples, warmup_steps, num_chains)
    model = _resolve_model(model_or_spec)
    data = _resolve_data(data, model, seed)
    engine_options, tuning = _recommended_options(spec, model, engine_options)
    pyro.set_rng_seed(seed)
    start = time.perf_counter()
    draws = spec.fn(model=model, x=data.x_train, y=data.y_train, num_samples=num_samples,
                    warmup_steps=warmup_steps, num_chains=num_chains, progress=progress, **engine_options)
    wall = time.perf_counter() - start
    draws.notes.update(tuning)  # into the InferenceData's attrs too
    counts = {"num_samples": num_samples, "num_chains": num_chains, "seed": seed}
    if spec.kind == "mcmc":
        counts["warmup_steps"] = warmup_steps
    return Run.from_draws(draws, engine=engine, kind=spec.kind, model=model, data=data, wall_time=wall,
                          options={**counts, **spec.defaults(), **engine_options})


# ------------------------------------------------------------- MCMC engines
def run_mcmc(kernel, potential: FlatPotential, x, y, num_samples: int, warmup_steps: int,
             num_chains: int, progress: bool, vectorized: bool = False, init_radius: float = 1.0) -> Draws:
    """Drive ``kernel`` with Pyro's ``MCMC`` and split the result into chains.

    Pyro's own kernels given a ``potential_fn`` need initial points; they are
    drawn like bnnzoo's (uniform in ``(-init_radius, init_radius)`` unconstrained).
    """
    pyro_chains = 1 if vectorized else num_chains
    initial = None
    if getattr(kernel, "model", None) is None and not hasattr(kernel, "transition"):
        theta = initial_theta(potential, pyro_chains, init_radius)
        initial = potential.unflatten(theta if pyro_chains > 1 else theta[0])
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, num_chains=pyro_chains,
                initial_params=initial, transforms=potential.transforms, disable_progbar=not progress)
    mcmc.run(x, y)
    return split_mcmc(mcmc)


def _pyro_hmc_kernel(cls, model: BNN, x, y, fast: bool, **options):
    if fast:
        potential = BNNPotential(model, x, y)
        return cls(potential_fn=potential.potential_fn, **options), potential
    return cls(model, **options), make_potential(model, x, y)


@engine("nuts")
def nuts(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 0.1,
         target_accept: float | None = None, max_tree_depth: int = 10, adapt_mass_matrix: bool = True,
         full_mass: bool = False, fast: bool = True, init_radius: float = 1.0) -> Draws:
    """Pyro's No-U-Turn sampler (on bnnzoo's fast potential unless fast=False).

    ``target_accept`` None: 0.8 (Pyro's default) for a smooth network, 0.715 for a
    ReLU-family one (:func:`~bnnzoo.inference.tuning.recommend_target_accept`)."""
    kernel, potential = _pyro_hmc_kernel(
        NUTS, model, x, y, fast, step_size=step_size,
        target_accept_prob=resolve_target_accept(target_accept, model, "nuts"),
        max_tree_depth=max_tree_depth, adapt_mass_matrix=adapt_mass_matrix, full_mass=full_mass)
    return run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress,
                    init_radius=init_radius)


@engine("hmc")
def hmc(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 0.01,
        num_steps: int = 20, trajectory_length: float | None = None, target_accept: float | None = None,
        adapt_step_size: bool = True, adapt_mass_matrix: bool = True, fast: bool = True,
        init_radius: float = 1.0) -> Draws:
    """Pyro's Hamiltonian Monte Carlo with a fixed number of leapfrog steps.

    ``target_accept`` None: as for ``nuts`` (0.8 smooth, 0.715 ReLU-family)."""
    kernel, potential = _pyro_hmc_kernel(
        HMC, model, x, y, fast, step_size=step_size, num_steps=None if trajectory_length else num_steps,
        trajectory_length=trajectory_length, target_accept_prob=resolve_target_accept(target_accept, model, "hmc"),
        adapt_step_size=adapt_step_size, adapt_mass_matrix=adapt_mass_matrix)
    return run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress,
                    init_radius=init_radius)


@engine("rwmh")
def rwmh(model, x, y, num_samples, warmup_steps, num_chains, progress, scale: float = 0.05,
         target_accept: float = 0.234, adapt_scale: bool = True, chain_method: str = "vectorized",
         init_radius: float = 1.0) -> Draws:
    """Random-walk Metropolis with its scale adapted toward acceptance 0.234."""
    vectorized = _chain_method(chain_method)
    potential = make_potential(model, x, y)
    kernel = RandomWalkMH(potential=potential, scale=scale, target_accept=target_accept,
                          adapt_scale=adapt_scale, num_chains=num_chains if vectorized else 1,
                          init_radius=init_radius)
    return run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress, vectorized)


CHAIN_METHODS = ("vectorized", "sequential")


def _chain_method(chain_method: str) -> bool:
    if chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method {chain_method!r}: choose one of {', '.join(CHAIN_METHODS)}")
    return chain_method == "vectorized"


@engine("chees")
def chees(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 0.1,
          target_accept: float | None = None, trajectory_length: float | None = None, adapt_step_size: bool = True,
          adapt_mass_matrix: bool = True, adapt_trajectory: bool = True, max_leapfrog_steps: int = 1000,
          jitter: str = "halton", init_radius: float = 1.0, compile: bool = False) -> Draws:
    """ChEES-HMC: all chains as one batch, jittered trajectory length adapted across chains.

    ``compile=True`` runs the potential and the leapfrog step as ``torch.compile``
    graphs (:class:`~bnnzoo.inference.potential.BNNPotential`); the time spent
    compiling is in ``Run.compile_seconds``."""
    from .chees import ChEESHMC, check_memory

    potential = make_potential(model, x, y, compile=compile)
    kernel = ChEESHMC(potential=potential, step_size=step_size, target_accept=target_accept,
                      trajectory_length=trajectory_length, adapt_step_size=adapt_step_size,
                      adapt_mass_matrix=adapt_mass_matrix, adapt_trajectory=adapt_trajectory,
                      max_leapfrog_steps=max_leapfrog_steps, jitter=jitter, num_chains=num_chains,
                      init_radius=init_radius)
    check_memory(model, num_chains, int(x.shape[0]))
    return with_compile_time(
        run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress, vectorized=True),
        potential)


def with_compile_time(draws: Draws, potential: FlatPotential) -> Draws:
    """Record a compiled potential's compile time in the draws (and InferenceData attrs)."""
    if getattr(potential, "compile", False):
        draws.compile_seconds = potential.compile_seconds
        draws.notes["compile_seconds"] = potential.compile_seconds
    return draws
