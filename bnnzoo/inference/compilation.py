r"""``compile="auto"``: compile the potential when the rest of the run pays the compile back.

The batched HMC kernels (``chees``, ``fixed_hmc``, ``proximal_hmc``) can run the full-data
gradient and the leapfrog step as ``torch.compile`` graphs
(:class:`~bnnzoo.inference.potential.BNNPotential` with ``compile=True``): 2.3 to 3.1x
faster per step on the networks of ``benchmarks/results/gradient.md``, for a compile of
about 10-13 s with an empty inductor cache and 3-9 s once inductor is set up. Whether that pays
depends on how long the run is, which for ChEES is not known before warm-up has set the
trajectory length. So :class:`AutoCompile` decides during the run:

1. if this process has compiled the same network and batch already (any run, ``compile=True``
   or ``"auto"``), the graphs are reused and cost nothing: the run compiles at its first
   iteration;
2. otherwise the run starts eagerly, and at the *decision point* (after the first
   mass-matrix window of warm-up plus :data:`PROBE` iterations, or after :data:`PROBE`
   iterations where there is no window) it measures the eager seconds per leapfrog step
   over the last :data:`PROBE` iterations and projects the rest of the run at their mean
   steps per iteration (ChEES jitters its step count from one iteration to the next);
3. it compiles when the saving, :math:`(t_\text{past} + t_\text{rest})(1 - 1/s)`, exceeds
   the expected compile time: the time the last first compile of it took on this machine,
   else :data:`WARM_SECONDS` where this process or the record has compiled another network
   (inductor's one-time set-up, most of a first compile, is then on disk), else
   :data:`COLD_SECONDS`. :math:`t_\text{rest}` is the projected rest of this run and
   :math:`t_\text{past}` the eager seconds earlier ``"auto"`` runs of the same network and
   batch spent on this machine since it was last compiled (recorded): the rent-or-buy rule
   (ski rental), so repeated short runs, none of which pays a compile alone, compile once
   the eager time they have spent would have paid for it, and their total time stays within
   about twice what knowing the future would give. Where :math:`t_\text{past}` alone pays,
   the run compiles at its first iteration. The speed-up :math:`s` is the one measured for
   this network and batch on this machine, else an assumed one (:func:`assumed_speedup`: 4
   for a small, dispatch-bound network, 2 for a larger one);
4. a run that compiled measures its compiled seconds per leapfrog step over the
   :data:`PROBE` iterations after the compiling one, and records the compile time and
   the speed-up over the eager seconds it measured before (``compile_seconds.json`` in
   the cache folder) for the next run's decision, with no eager seconds owed; a run that
   stayed eager adds its eager seconds to the record.

The inductor cache lives in ``~/.cache/bnnzoo/inductor`` (``$BNNZOO_CACHE/inductor``)
unless ``TORCHINDUCTOR_CACHE_DIR`` is set, so a second process pays only the warm-cache
cost. Without a C++ compiler, or if compiling fails, the run goes on eagerly with a
one-line notice. The decision and its numbers are in ``Run.notes["compile"]``; the
compile time is in ``Run.compile_seconds``. Because the decision uses measured time, two
runs with ``compile="auto"`` may differ in the last bits of their draws (a compiled graph
rounds differently from the eager one); ``compile=True`` or ``False`` is bit-reproducible.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from pathlib import Path

import torch

from .threads import work_per_gradient

__all__ = ["ASSUMED_SPEEDUP", "ASSUMED_SPEEDUP_SMALL", "AutoCompile", "CHOICES", "COLD_SECONDS", "DISPATCH_BOUND_WORK",
           "PROBE", "WARM_SECONDS", "SPEEDUP_RANGE", "assumed_speedup", "cache_dir", "check_compile", "compiled_here",
           "compiler_available", "pays_back"]

#: the values of ``compile``
CHOICES = (True, False, "auto")
#: eager / compiled seconds per leapfrog step assumed where none was measured on this machine,
#: for a network above :data:`DISPATCH_BOUND_WORK`: a little below the compiled speed-up of the
#: digits MLP's gradient (``benchmarks/results/gradient.md``)
ASSUMED_SPEEDUP = 2.0
#: ... and at or below it, where the eager step is bound by dispatch, for a kernel whose
#: fixed-length trajectories run the four-step graph (below what whole ChEES runs of the cosine
#: MLP measured at 8-32 chains: docs/performance.md)
ASSUMED_SPEEDUP_SMALL = 4.0
#: multiply-adds of one batched forward pass (:func:`~bnnzoo.inference.threads.work_per_gradient`)
DISPATCH_BOUND_WORK = 1_000_000
#: the range a recorded speed-up is trusted in (a noisy measurement must not make a run
#: compile for a saving it cannot have, or never compile again)
SPEEDUP_RANGE = (1.0, 10.0)
#: seconds a first compile is expected to take with no record on this machine: a little above the
#: cold compiles (empty inductor cache) of the cosine MLP's graphs under ChEES and batched NUTS
#: (docs/performance.md, "The potential and compilation")
COLD_SECONDS = 13.0
#: ... and where this process or the record has compiled another network: inductor's one-time
#: set-up (most of a cold compile; it stays in the inductor cache folder, where a second process
#: pays little for it) is done, and a new network pays only its graphs (about the compiles of
#: the cosine and digits MLPs measured after the set-up, docs/performance.md)
WARM_SECONDS = 8.0
#: iterations measured before deciding
PROBE = 10
#: signatures compiled in this process (:func:`compiled_here`): their graphs are reused, so a
#: second run here pays (almost) nothing, and its tiny compile time must not become the
#: estimate for a new process
_COMPILED_HERE: set[str] = set()


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


def pays_back(rest_seconds: float, compile_seconds: float, speedup: float = ASSUMED_SPEEDUP) -> bool:
    """Whether compiling saves time: ``rest_seconds * (1 - 1/speedup) > compile_seconds``."""
    return rest_seconds * (1.0 - 1.0 / speedup) > compile_seconds


class CompileRecord:
    """Seconds the last compile of each network and batch took on this machine and the speed-up
    it gave (``cache_dir()/compile_seconds.json``); unreadable or missing: no record."""

    def __init__(self, path: Path | None = None):
        self.path = path or cache_dir() / "compile_seconds.json"

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _entry(self, key: str) -> dict:
        value = self._read().get(key)
        if isinstance(value, (int, float)):  # the older format: the seconds alone
            return {"seconds": float(value)}
        return value if isinstance(value, dict) else {}

    def get(self, key: str) -> float | None:
        """The recorded compile seconds, or None."""
        value = self._entry(key).get("seconds")
        return float(value) if isinstance(value, (int, float)) else None

    def speedup(self, key: str) -> float | None:
        """The recorded eager / compiled seconds per leapfrog step, or None."""
        value = self._entry(key).get("speedup")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def has_compiled(self) -> bool:
        """Whether any compile with this torch is recorded: inductor's one-time set-up is then paid."""
        prefix = f"torch {torch.__version__} |"
        return any(key.startswith(prefix) and self.get(key) is not None for key in self._read())

    def eager_seconds(self, key: str) -> float:
        """Eager seconds ``"auto"`` runs of it spent here since its last recorded compile (0 if none)."""
        value = self._entry(key).get("eager_seconds")
        return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0

    def put(self, key: str, seconds: float, speedup: float | None = None) -> None:
        """A compile of ``key`` took ``seconds`` (and gave ``speedup``): no eager seconds owed."""
        entry = {"seconds": round(float(seconds), 3)}
        if speedup is not None:
            entry["speedup"] = round(float(speedup), 2)
        self._write(key, entry)

    def add_eager(self, key: str, seconds: float) -> None:
        """An eager ``"auto"`` run of ``key`` took ``seconds``: added to its eager seconds."""
        entry = dict(self._entry(key))
        entry["eager_seconds"] = round(self.eager_seconds(key) + max(float(seconds), 0.0), 3)
        self._write(key, entry)

    def _write(self, key: str, entry: dict) -> None:
        records = {**self._read(), key: entry}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a name of this process's own: processes that finish together (a study's workers)
            # must not write into one another's file before it replaces the record
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(records, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError:  # a read-only home: the estimate falls back to COLD_SECONDS
            pass


def signature(potential, theta: torch.Tensor) -> str:
    """What a compiled graph depends on: torch's version, the network, the likelihood, the data
    rows, the batch and the dtype."""
    model = potential.model
    layers = "-".join(f"{type(layer).__name__}{getattr(layer, 'units', '')}{getattr(layer, 'activation', '')}"
                      for layer in model.spec.layers)
    return (f"torch {torch.__version__} | {layers} | {type(model.likelihood).__name__} | N={potential.num_data} | "
            f"batch={tuple(theta.shape)} | {theta.dtype}")


def compiled_here(potential, theta: torch.Tensor) -> None:
    """Note that this process compiled ``potential``'s graphs for ``theta``'s batch (called by
    the potential after a compiling call): a later ``compile="auto"`` run of them compiles at once."""
    _COMPILED_HERE.add(signature(potential, theta))


def assumed_speedup(potential, theta: torch.Tensor, multi_step: bool = True) -> float:
    """The speed-up assumed for a network no run on this machine has measured:
    :data:`ASSUMED_SPEEDUP_SMALL` up to :data:`DISPATCH_BOUND_WORK` multiply-adds per batched
    forward pass where the kernel runs the four-step graph (``multi_step``), else
    :data:`ASSUMED_SPEEDUP`."""
    if not multi_step:
        return ASSUMED_SPEEDUP
    work = work_per_gradient(potential.model, potential.num_data, theta[..., 0].numel())  # chains: 1 for [D]
    return ASSUMED_SPEEDUP_SMALL if work is not None and work <= DISPATCH_BOUND_WORK else ASSUMED_SPEEDUP


class AutoCompile:
    """The ``compile="auto"`` decision for one run of a batched HMC kernel (module docstring).

    The kernel calls :meth:`observe` after each transition with the leapfrog steps it took.
    ``total_iterations`` is warm-up plus draws; ``decide_at`` the iteration of the decision."""

    def __init__(self, potential, total_iterations: int, decide_at: int, record: CompileRecord | None = None,
                 multi_step: bool = True):
        self.potential = potential
        self.total_iterations = int(total_iterations)
        self.decide_at = int(decide_at)
        self.record = record or CompileRecord()
        self.iteration = 0
        self.decision: str | None = None
        self.compiled = False
        self._window: list[tuple[float, int]] = []  # (time after the transition, its leapfrog steps)
        self._key: str | None = None
        self._fresh = False  # this run compiles the graphs first in this process
        self._eager_per_step: float | None = None
        self._compiled_at: int | None = None
        self.speedup: float | None = None  # measured by this run
        self._compile_clock = 0.0
        self._assumed = ASSUMED_SPEEDUP
        self.multi_step = multi_step  # the kernel runs the compiled four-step graph (assumed_speedup)
        self._started: float | None = None  # the end of the first transition and of the last one
        self._last: float | None = None
        if not getattr(potential, "analytic", False):
            self.decision = "auto: eager (the model has no analytic gradient to compile)"
        elif not compiler_available():
            self.decision = "auto: eager (no C++ compiler found)"
            warnings.warn("compile='auto': no C++ compiler found (g++, c++, clang++ or $CXX); running eagerly")
        self._eligible = self.decision is None  # whether compiling was an option at all

    def observe(self, steps: int, theta: torch.Tensor) -> None:
        """One transition done with ``steps`` leapfrog steps; decides at :attr:`decide_at`."""
        self.iteration += 1
        if self.decision is not None:
            if self.compiled and not self.potential.compile:  # a resumed run's fresh potential
                self._compile()
            elif self._compiled_at is not None and self.speedup is None:
                self._measure_compiled(steps)
            elif not self.compiled:
                self._last = time.perf_counter()  # the eager run goes on: its seconds are owed (finish)
            return
        now = time.perf_counter()
        if self._key is None:
            self._key = signature(self.potential, theta)
            self._assumed = assumed_speedup(self.potential, theta, self.multi_step)
            self._started = now
            if self._key in _COMPILED_HERE:
                self._compile()
                self.decision = (f"auto: compiled at iteration {self.iteration} (this process has compiled "
                                 "this network and batch already)")
                return
            if self._decide_early():
                return
        self._last = now
        self._window = (self._window + [(now, int(steps))])[-(PROBE + 1):]
        if self.iteration >= self.decide_at and len(self._window) > PROBE:
            self._decide()

    def _window_per_step(self, excluded: float = 0.0) -> tuple[float, int]:
        """Seconds per leapfrog step over the window (from the end of its first transition to the
        end of its last, less ``excluded`` seconds) and the steps they took."""
        steps = sum(s for _, s in self._window[1:])
        return (self._window[-1][0] - self._window[0][0] - excluded) / max(steps, 1), steps

    def _estimate(self) -> tuple[float, float, bool, float]:
        """From the record: the expected compile seconds, the speed-up, whether that was measured here
        before, and the eager seconds owed."""
        recorded = self.record.get(self._key)
        measured = self.record.speedup(self._key)
        speedup = self._assumed if measured is None else min(max(measured, SPEEDUP_RANGE[0]), SPEEDUP_RANGE[1])
        expected = recorded
        if expected is None:
            expected = WARM_SECONDS if _COMPILED_HERE or self.record.has_compiled() else COLD_SECONDS
        return expected, speedup, measured is not None, self.record.eager_seconds(self._key)

    @staticmethod
    def _terms(estimate: tuple[float, float, bool, float], rest_seconds: float | None) -> str:
        """The numbers of a decision (``rest_seconds`` None: before any was measured)."""
        expected, speedup, measured, past = estimate
        parts = [] if rest_seconds is None else [f"about {rest_seconds:.0f} s left eagerly"]
        parts += [f"{past:.0f} s eager on it before"] if past else []
        parts += [f"compile expected {expected:.1f} s",
                  f"speed-up {speedup:.2g}x {'measured here before' if measured else 'assumed'}"]
        return ", ".join(parts)

    def _decide_early(self) -> bool:
        """At the first iteration: compile when the eager seconds owed pay the compile alone."""
        estimate = self._estimate()
        expected, speedup, _, past = estimate
        if past > 0 and pays_back(past, expected, speedup):
            self._decide_now(None, f"at iteration {self.iteration}: {self._terms(estimate, None)}")
        return self.compiled

    def _decide(self) -> None:
        per_step, steps = self._window_per_step()
        rest_seconds = (self.total_iterations - self.iteration) * steps / (len(self._window) - 1) * per_step
        estimate = self._estimate()
        expected, speedup, _, past = estimate
        numbers = (f"at iteration {self.iteration}: eager {per_step * 1e3:.2g} ms per leapfrog step, "
                   f"{self._terms(estimate, rest_seconds)}")
        if pays_back(rest_seconds + past, expected, speedup):
            self._decide_now(per_step, numbers)
        else:
            self.decision = f"auto: eager ({numbers})"
        self._window = []

    def _decide_now(self, eager_per_step: float | None, numbers: str) -> None:
        """Compile from the next leapfrog step on; ``eager_per_step`` (None: not measured) is what
        the compiled steps' speed-up is measured against."""
        self._fresh = self._key not in _COMPILED_HERE  # another run may have compiled it meanwhile
        self._eager_per_step, self._compiled_at = eager_per_step, self.iteration
        self._compile()
        self.decision = f"auto: compiled {numbers}"

    def _measure_compiled(self, steps: int) -> None:
        """The compiled seconds per step over the PROBE iterations after the compiling one, less
        the time of any compiling call among them (a graph first needed there, e.g. another shape)."""
        if self.iteration == self._compiled_at + 1:  # the iteration that compiled: its end starts the clock
            self._window = [(time.perf_counter(), 0)]
            self._compile_clock = self._compile_time()
            return
        self._window.append((time.perf_counter(), int(steps)))
        if len(self._window) > PROBE:
            per_step, _ = self._window_per_step(excluded=self._compile_time() - self._compile_clock)
            if per_step > 0 and self._eager_per_step is not None:
                self.speedup = self._eager_per_step / per_step
            self._window = []

    def _compile_time(self) -> float:
        return float(getattr(self.potential, "compile_seconds", 0.0))

    def _compile(self) -> None:
        self.potential.compile = self.potential.compile_fallback = self.compiled = True

    def finish(self) -> None:
        """After the run: record this compile's time for the next estimate, or, for a run that could
        have compiled and stayed eager, add its eager seconds to those owed."""
        seconds = getattr(self.potential, "compile_seconds", 0.0)
        if self._fresh and self.potential.compile and seconds > 0:
            self.record.put(self._key, seconds, self.speedup or self.record.speedup(self._key))
        elif self._eligible and not self.compiled and self._last is not None:
            self.record.add_eager(self._key, self._last - self._started)

    def note(self) -> str:
        return self.decision or f"auto: eager (the run ended before the decision at iteration {self.decide_at})"
