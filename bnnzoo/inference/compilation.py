r"""``compile="auto"``: compile the potential when the rest of the run pays the compile back.

The batched HMC kernels (``chees``, ``batched_nuts``, ``fixed_hmc``, ``proximal_hmc``) can run the
full-data gradient and the leapfrog step as ``torch.compile`` graphs, and the microcanonical kernels
(``mclmc``, ``mams``) the gradient
(:class:`~bnnzoo.inference.potential.BNNPotential` with ``compile=True``, its graphs those of
:mod:`~bnnzoo.inference.compiled_graphs`): 2.3 to 3.1x
faster per step on the networks of ``benchmarks/results/gradient.md``, for a compile of
about 10-13 s with an empty inductor cache and 3-9 s once inductor is set up. A compiled graph
rounds differently from the eager code, so whether a run compiles changes the last bits of its
draws. The decision is therefore a function of the run's inputs alone (the network, the data
rows, the chains, the counts, the device and the leapfrog steps the run has taken, which the seed
fixes), never of measured time or of what earlier runs did: the same seed gives the same draws in
every process, whatever ran before. :class:`AutoCompile` decides during the run, because ChEES's
trajectory length is not known before warm-up has set it:

1. at the *decision point* (after the first mass-matrix window of warm-up plus :data:`PROBE`
   iterations, or after :data:`PROBE` iterations where there is no window) it projects the
   leapfrog steps of the rest of the run at the steps per iteration the kernel expects from its
   parameters now (ChEES: the mean of its jittered count at :math:`T` now, which is still growing
   then), or else at the mean of the last :data:`PROBE` iterations;
2. it prices them with a model of the eager seconds per leapfrog step
   (:func:`modeled_step_seconds`: a fixed cost per step, a cost per multiply-add of the
   batched forward pass and a cost per unit output of its layers (element-wise work and dispatch,
   up to a bound), fitted to ``benchmarks/results/gradient.md`` and checked against
   ``benchmarks/results/step_model.md``, one thread, CPU; a launch-bound cost per step on CUDA),
   plus, for a kernel that compiles the whole step (the four-step graph), the step's work beside
   the gradient (:data:`CPU_UPDATE`);
3. it compiles when the modeled saving, :math:`t_\text{rest}(1 - 1/s)`, exceeds
   :data:`COMPILE_SECONDS`, with :math:`s` the assumed speed-up (:func:`assumed_speedup`: 4 for a
   small, dispatch-bound network whose kernel runs the four-step graph, 2 otherwise).

The modeled times are not the machine's: on a loaded machine a run that would have paid a
compile back may stay eager, and the reverse; that is the price of reproducible draws. Give
``compile=True`` or ``False`` to choose. The inductor cache lives in ``~/.cache/bnnzoo/inductor``
(``$BNNZOO_CACHE/inductor``) unless ``TORCHINDUCTOR_CACHE_DIR`` is set, so a second process pays
only the warm-cache cost. Without a C++ compiler, or if compiling fails, the run goes on eagerly
with a one-line notice. The decision and its numbers (all modeled, none measured) are in
``Run.notes["compile"]``; the compile time is in ``Run.compile_seconds``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from ..models.spec import Dense
from .threads import work_per_gradient

__all__ = ["ASSUMED_SPEEDUP", "ASSUMED_SPEEDUP_SMALL", "AutoCompile", "CHOICES", "COMPILE_SECONDS",
           "DISPATCH_BOUND_WORK", "PROBE", "assumed_speedup", "cache_dir", "check_compile", "compiler_available",
           "modeled_step_seconds", "one_isa_check", "pays_back"]

#: the values of ``compile``
CHOICES = (True, False, "auto")
#: eager / compiled seconds per leapfrog step assumed for a network above
#: :data:`DISPATCH_BOUND_WORK`: the digits MLP's gradient (209 million multiply-adds at 8 chains)
#: ran 2.3x faster compiled (``benchmarks/results/gradient.md``)
ASSUMED_SPEEDUP = 2.0
#: ... and at or below it, where the eager step is bound by dispatch, for a kernel whose
#: fixed-length trajectories run the four-step graph (below what whole ChEES runs of the cosine
#: MLP measured at 8-32 chains: docs/performance.md)
ASSUMED_SPEEDUP_SMALL = 4.0
#: ... and on CUDA, where an eager step of a small network costs its launches (about 1 ms for the
#: cosine MLP on an H100, 0.6 ms compiled)
ASSUMED_SPEEDUP_CUDA = 1.6
#: multiply-adds of one batched forward pass (:func:`~bnnzoo.inference.threads.work_per_gradient`)
DISPATCH_BOUND_WORK = 1_000_000
#: seconds a compile is expected to take: about the cosine MLP's compiles with an empty inductor cache under
#: ChEES and batched NUTS (docs/performance.md, "The potential and compilation"). One number,
#: because what the cache holds is history
COMPILE_SECONDS = 10.0
#: the eager seconds per leapfrog step on the CPU (one thread): a fixed cost, a cost per
#: multiply-add of the batched forward pass, and a cost per unit output of its layers (rows x chains x
#: the units of every Dense layer: the element-wise work and its dispatch) up to
#: :data:`DISPATCH_BOUND_UNITS`; fitted to the eager gradients of ``benchmarks/results/gradient.md``
#: (cosine MLP at 1, 8 and 32 chains: 69, 155 and 442 us, modeled 72, 157 and 446; digits MLP at 8
#: chains 28.9 ms, modeled 30 ms; at one chain 2.1 ms, modeled 4.3 ms) and checked against the
#: networks with wider inputs of ``benchmarks/results/step_model.md``
CPU_STEP = (60e-6, 0.14e-9, 1.95e-9)
#: the unit outputs of a batched forward pass past which the element-wise cost stops growing
#: faster than the multiply-adds (the cosine MLP's outputs at 1 million multiply-adds)
DISPATCH_BOUND_UNITS = 340_000
#: the eager seconds a leapfrog step of a CPU run spends beside its gradient (the position and momentum
#: updates, and the transition's own work spread over its steps): a fixed cost and a cost per chain
#: coordinate, fitted to whole eager ChEES runs of the cosine MLP at 8 and 32 chains
#: (``benchmarks/results/step_model_update.md``: a run's seconds per leapfrog step less one gradient's). The
#: four-step graph compiles this part with the gradient, so the kernels that run it
#: (:func:`modeled_step_seconds` with ``update``) count it in the eager time they would save
CPU_UPDATE = (30e-6, 21e-9)
#: ... on CUDA: a fixed cost (kernel launches; 0.1 ms where the fixed-length trajectory is
#: replayed from a CUDA graph) and a cost per multiply-add
CUDA_STEP = (1e-3, 1e-4, 2e-12)
#: iterations measured before deciding
PROBE = 10


def check_compile(name: str, value) -> object:
    """``value`` if it is True, False or "auto", else a ValueError naming ``name`` and it."""
    if not any(value is c or (isinstance(value, str) and value == c) for c in CHOICES):
        raise ValueError(f"{name} must be True, False or 'auto', got {value!r}")
    return value


def compiler_available() -> bool:
    """Whether a C++ compiler for inductor is on the PATH (``$CXX`` or g++/c++/clang++)."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return any(shutil.which(name) for name in names)


def cache_dir() -> Path:
    """bnnzoo's cache folder: ``$BNNZOO_CACHE``, else ``~/.cache/bnnzoo``."""
    return Path(os.environ.get("BNNZOO_CACHE") or Path.home() / ".cache" / "bnnzoo")


def use_persistent_inductor_cache() -> None:
    """Point inductor's cache at ``cache_dir()/inductor`` unless the user chose one. Called
    before every first compile of a graph (``compile=True`` or ``"auto"``): torch writes its
    own default (a folder in the system's temporary directory) into the environment at its
    first compile, after which this would change nothing."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))


def _reported_x86_isas() -> list:
    """Inductor's x86 vector instruction sets that the processor reports, widest first, unchecked (none
    off x86)."""
    from torch._inductor import cpu_vec_isa

    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    reported = cpu_vec_isa.x86_isa_checker()
    return [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(flag in reported for flag in str(isa).split())]


def _best_x86_isa():
    """The widest of inductor's x86 vector instruction sets the processor reports (None: none, or not x86)."""
    return next(iter(_reported_x86_isas()), None)


def one_isa_check(device: torch.device | str = "cpu"):
    """A context for bnnzoo's compiles on ``device`` in which inductor checks one instruction set, not each.

    Before its first CPU kernel inductor dry-compiles a small program for every vector instruction set
    the processor reports (six compiler calls, 6.5 to 8 s on this project's machine with an empty
    cache: ``benchmarks/results/first_compile.md``). Here only the widest is built; where it builds,
    the compiler builds the narrower ones as well, and inductor is told so (its ``cpp.vec_isa_ok``)
    for the compile: it then picks the instruction set it would have picked after all six, so the
    compiled graphs and the draws are the same. Where the widest does not build, or the user set
    ``TORCHINDUCTOR_VEC_ISA_OK``, or on another processor family, inductor checks as it always does;
    a compile for a GPU needs no check (nothing changes). Inductor's checks of an instruction set's
    extensions (AVX-512's bfloat16, VNNI and AMX, where the processor reports them) are its own and
    still run for the set it picks; those of the narrower AVX-512 sets after it, which it never picks
    then, are left out (:func:`_skip_narrower_avx512`): 4 compiler calls instead of 7 on an Intel
    Xeon with AMX (``benchmarks/results/first_compile_kernel.md``, ``first_compile_isa_pruned.md``)."""
    from torch._inductor import config

    if torch.device(device).type != "cpu":
        return contextlib.nullcontext()
    if os.environ.get("TORCHINDUCTOR_VEC_ISA_OK") is not None or config.cpp.vec_isa_ok is not None:
        return contextlib.nullcontext()
    if not _widest_isa_builds():
        return contextlib.nullcontext()
    return _vouched()


@contextlib.contextmanager
def _vouched():
    """Inductor's ``cpp.vec_isa_ok`` set for the block, its instruction sets listed as
    :func:`_skip_narrower_avx512` lists them."""
    from torch._inductor import config

    with config.patch({"cpp.vec_isa_ok": True}):
        _skip_narrower_avx512()
        yield


@functools.cache
def _skip_narrower_avx512() -> None:
    """Fill inductor's list of valid instruction sets (``cpu_vec_isa.valid_vec_isa_list``, made once a
    process) without the AVX-512 sets that come after the first one valid, so that their extension
    checks (a dry compile each: AVX-512 with VNNI, with bfloat16; 3 of the 7 compiler calls on an
    Intel Xeon with AMX) are not made. Inductor picks the first set of its list, or the first whose
    name holds the ``ATEN_CPU_CAPABILITY`` asked for, or the first of the width ``cpp.simdlen`` asks for;
    every narrower AVX-512 set has a name and a width that the first valid one matches too, so none of
    them can be picked, and every pick is the one the full list gives (tested). Nothing happens where
    inductor has made its list already, off x86, or where inductor's module is not laid out as this
    expects (another torch version: then inductor checks every set, as without this)."""
    from torch._inductor import cpu_vec_isa

    cache_info = getattr(cpu_vec_isa.valid_vec_isa_list, "cache_info", None)
    if (platform.machine() not in ("x86_64", "AMD64") or cache_info is None or cache_info().currsize
            or not isinstance(getattr(cpu_vec_isa, "supported_vec_isa_list", None), list)
            or not hasattr(cpu_vec_isa, "x86_isa_checker")):
        return
    kept, found = [], False
    for isa in _reported_x86_isas():
        wide = "avx512" in str(isa)
        if found and wide:
            continue
        kept.append(isa)
        found = found or (wide and bool(isa))  # bool(): inductor's checks of this set, cached on it
    every = cpu_vec_isa.supported_vec_isa_list
    cpu_vec_isa.supported_vec_isa_list = kept
    try:
        cpu_vec_isa.valid_vec_isa_list()
    finally:
        cpu_vec_isa.supported_vec_isa_list = every


@functools.cache
def _widest_isa_builds() -> bool:
    """Whether the widest reported instruction set (:func:`_best_x86_isa`) builds: one dry compile a
    machine (inductor keeps it on disk), and one look a process (a run compiles several graphs)."""
    from torch._inductor.cpu_vec_isa import VecISA

    best = _best_x86_isa()
    return best is not None and best.check_build(VecISA._avx_code)


def pays_back(rest_seconds: float, compile_seconds: float = COMPILE_SECONDS, speedup: float = ASSUMED_SPEEDUP) -> bool:
    """Whether compiling saves time: ``rest_seconds * (1 - 1/speedup) > compile_seconds``."""
    return rest_seconds * (1.0 - 1.0 / speedup) > compile_seconds


def _work(potential, theta: torch.Tensor) -> int | None:
    return work_per_gradient(potential.model, potential.num_data, theta[..., 0].numel())  # chains: 1 for [D]


def _units(potential, theta: torch.Tensor) -> int | None:
    """Unit outputs of one batched forward pass of a Dense network (rows x chains x the units of every
    layer), or None for another model."""
    layers = getattr(getattr(getattr(potential, "model", None), "spec", None), "layers", None)
    if not layers or not all(isinstance(layer, Dense) for layer in layers):
        return None
    return int(theta[..., 0].numel()) * int(potential.num_data) * sum(int(layer.units) for layer in layers)


def modeled_step_seconds(potential, theta: torch.Tensor, graphed: bool = False, update: bool = False) -> float:
    """The modeled eager seconds of one leapfrog step of ``potential`` for ``theta``'s chains on
    ``theta``'s device (:data:`CPU_STEP`, :data:`CUDA_STEP`; ``graphed``: a fixed-length trajectory
    that CUDA replays from a graph; ``update``: with the step's work beside the gradient on the CPU,
    :data:`CPU_UPDATE`): a function of the network, the data rows, the chains and the device, never of
    a clock."""
    work = _work(potential, theta) or 0
    if theta.device.type == "cuda":
        launched, replayed, per_work = CUDA_STEP
        return (replayed if graphed else launched) + work * per_work
    fixed, per_work, per_unit = CPU_STEP
    units = _units(potential, theta)
    if units is None:  # not a Dense network: the element-wise work taken as the cosine MLP's share of it
        units = work * DISPATCH_BOUND_UNITS // DISPATCH_BOUND_WORK
    seconds = fixed + work * per_work + min(units, DISPATCH_BOUND_UNITS) * per_unit
    if update:
        seconds += CPU_UPDATE[0] + theta.numel() * CPU_UPDATE[1]
    return seconds


def assumed_speedup(potential, theta: torch.Tensor, multi_step: bool = True) -> float:
    """The speed-up assumed for compiling: :data:`ASSUMED_SPEEDUP_CUDA` on CUDA;
    :data:`ASSUMED_SPEEDUP_SMALL` up to :data:`DISPATCH_BOUND_WORK` multiply-adds per batched
    forward pass where the kernel runs the four-step graph (``multi_step``), else
    :data:`ASSUMED_SPEEDUP`."""
    if theta.device.type == "cuda":
        return ASSUMED_SPEEDUP_CUDA
    if not multi_step:
        return ASSUMED_SPEEDUP
    work = _work(potential, theta)
    return ASSUMED_SPEEDUP_SMALL if work is not None and work <= DISPATCH_BOUND_WORK else ASSUMED_SPEEDUP


class AutoCompile:
    """The ``compile="auto"`` decision for one run of a batched HMC kernel (module docstring).

    The kernel calls :meth:`observe` after each transition with the gradients it took (the HMC
    family's leapfrog steps; the microcanonical kernels' integrator steps times their gradients a step:
    ``unit`` names them in the note).
    ``total_iterations`` is warm-up plus draws; ``decide_at`` the iteration of the decision;
    ``gradient_limit``: the most gradient calls (of the batch, in :meth:`observe`'s unit) the whole
    run may take, where a gradient budget ends it sooner than its iterations would (None: none);
    ``projection``: the kernel's expected calls per iteration from its parameters now (ChEES's
    :meth:`~bnnzoo.inference.kernels.ChEESHMC.expected_steps`: its trajectory may still be growing
    when the probe ends), used in place of the probe's mean where it gives a number."""

    def __init__(self, potential, total_iterations: int, decide_at: int, multi_step: bool = True,
                 unit: str = "leapfrog steps", gradient_limit: float | None = None,
                 projection: Callable[[], float | None] | None = None):
        self.potential = potential
        self.total_iterations = int(total_iterations)
        self.gradient_limit = gradient_limit
        self.counted = 0  # gradient calls observed so far
        self.decide_at = int(decide_at)
        self.iteration = 0
        self.decision: str | None = None
        self.compiled = False
        self._steps: list[int] = []  # leapfrog steps of the last PROBE transitions
        self.multi_step = multi_step  # the kernel runs the compiled four-step graph (assumed_speedup)
        self.unit = unit  # what observe() counts, one gradient each: the note's word for it
        self.projection = projection
        self.prewarm: str | None = None  # the line of inductor's background set-up (bnnzoo.inference.prewarm)
        if not getattr(potential, "analytic", False):
            self.decision = "auto: eager (the model has no analytic gradient to compile)"
        elif not getattr(potential, "compilable", True):
            self.decision = "auto: eager (the likelihood has no graph loss to compile)"
        elif not compiler_available():
            self.decision = "auto: eager (no C++ compiler found)"
            warnings.warn("compile='auto': no C++ compiler found (g++, c++, clang++ or $CXX); running eagerly")

    def observe(self, steps: int, theta: torch.Tensor) -> None:
        """One transition done with ``steps`` leapfrog steps; decides at :attr:`decide_at`."""
        self.iteration += 1
        self.counted += int(steps)
        if self.decision is not None:
            if self.compiled and not self.potential.compile:  # a resumed run's fresh potential
                self._compile()
            return
        self._steps = (self._steps + [int(steps)])[-PROBE:]
        if self.iteration >= self.decide_at and len(self._steps) >= PROBE:
            self._decide(theta)

    def _decide(self, theta: torch.Tensor) -> None:
        projected = self.projection() if self.projection is not None else None
        mean_steps = projected if projected is not None else sum(self._steps) / len(self._steps)
        graphed = self.multi_step and bool(getattr(self.potential, "graphable", False))
        # the four-step graph compiles the whole step, so its eager update is saved too
        per_step = modeled_step_seconds(self.potential, theta, graphed, update=self.multi_step)
        speedup = assumed_speedup(self.potential, theta, self.multi_step)
        calls = (self.total_iterations - self.iteration) * mean_steps
        if self.gradient_limit is not None:  # a budget's end comes first
            calls = min(calls, max(self.gradient_limit - self.counted, 0.0))
        rest = calls * per_step
        source = " expected from the kernel's parameters" if projected is not None else ""
        numbers = (f"at iteration {self.iteration}: {mean_steps:.3g} {self.unit} per iteration{source}, modeled "
                   f"{per_step * 1e3:.2g} ms per eager step, about {rest:.0f} s left eagerly, compile expected "
                   f"{COMPILE_SECONDS:.0f} s, speed-up {speedup:.2g}x assumed")
        if pays_back(rest, COMPILE_SECONDS, speedup):
            self._compile()
            self.decision = f"auto: compiled {numbers}"
        else:
            self.decision = f"auto: eager ({numbers})"
        self._steps = []

    def _compile(self) -> None:
        self.potential.graphs.fallback = True  # a compile that fails warns and goes on eagerly
        self.potential.compile = self.compiled = True

    def finish(self) -> None:
        """After the run (nothing to record: no later decision depends on this one)."""

    def note(self) -> str:
        return self.decision or f"auto: eager (the run ended before the decision at iteration {self.decide_at})"
