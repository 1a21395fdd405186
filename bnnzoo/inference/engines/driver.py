"""How engines run: one driver for every flat MCMC kernel, one for Pyro's NUTS/HMC, one for VI.

The driver owns what is the same for every kernel: the potential (compiled or
not), the chain split (``chain_method="vectorized"``: the C chains are one
``[C, D]`` batch inside one Pyro chain; ``"sequential"``: C Pyro chains of one
chain each), the memory check of a vectorized run, Pyro's ``MCMC`` driver, the
split into chains and the compile time. Each returns :class:`~bnnzoo.results.Draws`.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings

import torch

from ...models import BNN, Gaussian, GaussianLikelihood
from ...models.defaults import tensor_defaults
from ...models.spec import Conv2d
from ...results import Draws, split_mcmc
from ..potential import BNNPotential, FlatPotential, initial_theta, make_potential
from ..adaptation import mass_windows
from ..budget import BudgetMeter
from ..checkpoint import Checkpoint
from .. import prewarm
from ..compilation import PROBE, AutoCompile
from ..mcmc import MCMC
from ..progress import ProgressLines, use_bar
from ..vi import sample_mean_field

__all__ = ["check_memory", "run_flat_kernel", "run_pyro_hmc", "run_vi"]


def _available_memory(device: torch.device | str = "cpu") -> int | None:
    """Free memory of ``device`` in bytes: ``MemAvailable`` from ``/proc/meminfo`` for the CPU,
    ``torch.cuda.mem_get_info`` for a CUDA device; None where unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
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


def check_memory(model, num_chains: int, num_data: int, engine: str = "chees", fraction: float = 0.75,
                 device: torch.device | str = "cpu") -> None:
    """Refuse, before sampling, a vectorized run whose batched chains would not fit in the memory of
    ``device`` (the data's).

    Estimate: ``C * D * 8 * 16`` (positions, momenta, gradients, proposals and
    adaptation state) ``+ C * N * widest * 4 * 6`` (the batched forward pass and
    its backward) bytes; an error if above ``fraction`` of the free memory
    (:func:`_available_memory`). No check where that is unknown or the model is not a BNN.
    """
    available = _available_memory(device)
    if available is None or not hasattr(model, "num_params"):
        return
    dim = int(model.num_params)
    widest = _widest_activation(model.spec) if hasattr(model, "spec") else 0
    estimate = num_chains * dim * 8 * 16 + num_chains * num_data * widest * 4 * 6
    if estimate > fraction * available:
        gib = 2.0 ** 30
        raise ValueError(
            f"num_chains={num_chains}: the {engine} engine would need about {estimate / gib:.1f} GiB "
            f"({num_chains} chains x {dim} parameters, {num_data} data rows x {widest} activations), "
            f"more than {fraction:.0%} of the {available / gib:.1f} GiB available on {device}; use fewer chains")


def _gradient_seconds(potential, chains: int, repeats: int = 3) -> float:
    """Median seconds of one value-and-gradient of ``chains`` chains at the origin (no random numbers)."""
    theta = torch.zeros(chains, potential.dim, **potential.placement)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        potential.value_and_grad(theta)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def slow_path_note(model, potential, chains: int) -> str | None:
    """One line for a BNN whose gradient runs on autograd (:attr:`BNNPotential.slow_path`): which
    part sends it there and what that costs, measured now: one gradient of ``chains`` chains, beside
    the analytic gradient of the same layers under Gaussian priors and a fixed Gaussian noise where
    those have one. None on the analytic path or for a model that is not a BNN."""
    reason = getattr(potential, "slow_path", None)
    if reason is None or not isinstance(potential, BNNPotential):
        return None
    devices = [potential.device] if potential.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # building the comparison draws a prototype: the run's draws stay
        return _slow_path_line(model, potential, chains, reason)


def _slow_path_line(model, potential, chains: int, reason: str) -> str:
    slow = _gradient_seconds(potential, chains)
    line = (f"the gradient runs on autograd (the slow path): {reason}; one gradient of {chains} chain(s) "
            f"took {slow * 1e3:.3g} ms")
    spec = model.spec
    likelihood = spec.likelihood if not isinstance(spec.likelihood, GaussianLikelihood) else GaussianLikelihood(0.1)
    with tensor_defaults(potential.device, None):  # the comparison's model on the data's device
        surrogate = BNNPotential(BNN(dataclasses.replace(spec, prior=Gaussian(1.0), priors={}, likelihood=likelihood)),
                                 potential.x, potential.y)
    if surrogate.analytic:
        fast = _gradient_seconds(surrogate, chains)
        line += f", about {slow / fast:.1f}x the analytic gradient of the same layers ({fast * 1e3:.3g} ms)"
    if potential.traced.after:
        line += (f", until a traced graph of its operations replays it after {potential.traced.after} calls "
                 "(Run.notes['gradient_graph'])")
    return line


def _record_compile_time(draws: Draws, potential: FlatPotential, policy: AutoCompile | None = None) -> Draws:
    if policy is not None:
        policy.finish()
        draws.notes["compile"] = policy.note()
        if policy.prewarm is not None:
            draws.notes["compile_prewarm"] = policy.prewarm
    if getattr(potential, "compile", False):
        draws.compile_seconds = potential.compile_seconds
        draws.notes["compile_seconds"] = potential.compile_seconds
    return draws


def _auto_compile(kernel, potential: FlatPotential, warmup_steps: int, num_samples: int,
                  runs: int, budget: BudgetMeter | None = None, num_chains: int = 1) -> AutoCompile:
    """The ``compile="auto"`` policy of a run: decided :data:`~bnnzoo.inference.compilation.PROBE`
    iterations after the first mass-matrix window (ChEES sets its trajectory length there), or
    after the first ``PROBE + 1`` where the kernel has none. ``runs``: chains run one after another;
    ``budget``: a budget counted in the loop bounds what is left (its gradients over the
    ``num_chains`` chains of the batch)."""
    # the kernel's own windows where it has them (the HMC family's warm-up)
    if hasattr(kernel, "mass_windows"):
        windows = kernel.mass_windows(warmup_steps)
    else:
        windows = mass_windows(warmup_steps) if getattr(kernel.options, "adapt_mass_matrix", False) else []
    decide_at = (windows[0][1] if windows else 1) + PROBE
    multi_step = getattr(kernel, "multi_step_graph", False)
    limit = None if budget is None else max(budget.budget - budget.spent, 0) / num_chains
    policy = AutoCompile(potential, (warmup_steps + num_samples) * runs, decide_at, multi_step=multi_step,
                         unit=getattr(kernel, "gradient_unit", "leapfrog steps"), gradient_limit=limit,
                         projection=getattr(kernel, "expected_steps", None))
    if policy.decision is None:  # it may compile: inductor's one-time set-up can start on a free core
        policy.prewarm = prewarm.start(getattr(potential, "device", None))
    return policy


def _progress(engine, progress: bool, warmup_steps: int, num_samples: int, chains: int) -> dict:
    """``MCMC`` keywords for progress: Pyro's bar on a terminal, a line every few seconds elsewhere."""
    if not progress or use_bar():
        return {"disable_progbar": not progress}
    return {"disable_progbar": True,
            "hook_fn": ProgressLines(engine.name, {"warm-up": warmup_steps, "sampling": num_samples}, chains)}


def _externals(checkpoint, **objects) -> None:
    """The run's objects a checkpoint stores by name (never by value)."""
    if checkpoint is not None:
        checkpoint.externals.update(objects)


def run_flat_kernel(engine, model, x, y, config, checkpoint: Checkpoint | None = None,
                    initial: torch.Tensor | None = None, budget: BudgetMeter | None = None) -> Draws:
    """Run ``engine.kernel`` (a :class:`~bnnzoo.inference.kernels.base.FlatKernel`) under Pyro's ``MCMC``,
    built from ``config.options`` (the run's typed options); ``initial``: ``[C, D]`` initial points (else
    the kernel draws its own); ``budget``: counted in the loop where the chains are vectorized
    (:class:`~bnnzoo.inference.budget.BudgetMeter`)."""
    num_samples, warmup_steps, num_chains = config.num_samples, config.warmup_steps, config.num_chains
    chain_method = config.driver_options.get("chain_method", "vectorized")
    compile = config.driver_options.get("compile", False)
    vectorized = chain_method == "vectorized"
    potential = make_potential(model, x, y, compile=compile is True)
    kernel = engine.kernel.from_options(config.options, potential=potential)
    kernel.check_potential(potential)  # before any chain starts
    slow = slow_path_note(model, potential, num_chains if vectorized else 1)
    if slow is not None:
        warnings.warn(f"{engine.name}: {slow}", stacklevel=2)
    policy = None
    if compile == "auto":
        policy = kernel.runtime.policy = _auto_compile(kernel, potential, warmup_steps, num_samples,
                                                       1 if vectorized else num_chains,
                                                       budget if vectorized else None, num_chains)
    if vectorized and num_chains > 1:
        check_memory(model, num_chains, int(x.shape[0]), engine.name, device=x.device)
    _externals(checkpoint, potential=potential, model=model, x=x, y=y)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains,
                chain_method=chain_method, transforms=potential.transforms, checkpoint=checkpoint,
                initial_params=_initial_params(potential, initial, num_chains), budget=budget,
                **_progress(engine, config.settings.progress, warmup_steps, num_samples,
                            1 if vectorized else num_chains))
    mcmc.run(x, y)
    draws = split_mcmc(mcmc)
    draws.notes.update(kernel.notes())
    if slow is not None:
        draws.notes["gradient"] = slow
    return _record_compile_time(draws, potential, policy)


def _initial_params(potential: FlatPotential, initial: torch.Tensor | None, num_chains: int) -> dict | None:
    """``[C, D]`` initial points as Pyro's ``initial_params`` (per site ``[C, ...]``; no chain dim for one chain)."""
    if initial is None:
        return None
    initial = initial.to(**potential.placement)
    return potential.unflatten(initial if num_chains > 1 else initial[0])


def run_pyro_hmc(engine, model, x, y, config, checkpoint: Checkpoint | None = None,
                 initial: torch.Tensor | None = None, budget: BudgetMeter | None = None) -> Draws:
    """Pyro's NUTS/HMC (bnnzoo's recording subclasses) with ``config.options``: on the BNN's batched
    potential when ``fast``, with initial points drawn like bnnzoo's kernels draw theirs. Pyro's chains
    run in worker processes on the CPU; with a checkpoint, or on a GPU (which a forked worker cannot
    use), one after another in this process. ``budget`` goes to ``MCMC``, whose loop counts it only for
    a bnnzoo kernel: Pyro's draws are cut after the run."""
    num_samples, warmup_steps, num_chains = config.num_samples, config.warmup_steps, config.num_chains
    opts = config.options
    kwargs = opts.pyro_kwargs(model)
    if opts.fast:
        potential = BNNPotential(model, x, y)
        kernel = engine.kernel(potential_fn=potential.potential_fn, **kwargs)
        theta = initial_theta(potential, num_chains, opts.init_radius) if initial is None else initial
        initial = _initial_params(potential, theta, num_chains)
    else:
        kernel = engine.kernel(model, **kwargs)
        potential = make_potential(model, x, y)
        initial = _initial_params(potential, initial, num_chains)
    _externals(checkpoint, potential=potential, model=model, x=x, y=y)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains,
                initial_params=initial, transforms=potential.transforms,
                chain_method="sequential" if checkpoint is not None or x.device.type != "cpu" else "parallel",
                checkpoint=checkpoint, budget=budget,
                **_progress(engine, config.settings.progress, warmup_steps, num_samples, num_chains))
    mcmc.run(x, y)
    draws = split_mcmc(mcmc)
    # each chain's kernel diagnostics (what Pyro's MCMC keeps per chain; its diagnostics() would add R-hat,
    # which needs 4 draws)
    warmup = [d["warmup_n_steps"] for d in getattr(mcmc, "_diagnostics", []) if "warmup_n_steps" in d]
    if warmup:
        draws.notes["warmup_grad_evals"] = int(sum(int(v) for v in warmup))
    return draws


def run_vi(engine, model, x, y, config, checkpoint: Checkpoint | None = None) -> Draws:
    """Mean-field VI with ``config.options`` (:class:`~bnnzoo.inference.vi.VIOptions`): one independent
    fit per chain, ``num_samples`` draws from each guide."""
    return sample_mean_field(make_potential(model, x, y), config.options, config.num_samples, config.num_chains,
                             checkpoint)
