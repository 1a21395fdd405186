r"""``compile="auto"``: compile the potential when the rest of the run pays the compile back.

The batched HMC kernels (``chees``, ``fixed_hmc``, ``proximal_hmc``) can run the full-data
gradient and the leapfrog step as ``torch.compile`` graphs
(:class:`~bnnzoo.inference.potential.BNNPotential` with ``compile=True``): 2.3 to 3.1x
faster per step on the networks of ``benchmarks/results/gradient.md``, for a compile of
about 20 s with an empty inductor cache and about 3 s with a warm one. Whether that pays
depends on how long the run is, which for ChEES is not known before warm-up has set the
trajectory length. So :class:`AutoCompile` decides during the run:

1. the run starts eagerly;
2. at the *decision point* (after the first mass-matrix window of warm-up plus
   :data:`PROBE` iterations, or after :data:`PROBE` iterations where there is no window)
   it measures the eager seconds per leapfrog step over the last :data:`PROBE`
   iterations and projects the rest of the run at the current steps per iteration;
3. it compiles when the projected saving, :math:`t_\text{rest}(1 - 1/s)` with
   :data:`ASSUMED_SPEEDUP` :math:`s`, exceeds the expected compile time: none if this
   process compiled the same network and batch already (the graph is reused), else the
   time the last first compile of it took on this machine (recorded in the cache
   folder), else :data:`COLD_SECONDS`.

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

__all__ = ["ASSUMED_SPEEDUP", "AutoCompile", "COLD_SECONDS", "CHOICES", "PROBE", "cache_dir", "check_compile",
           "compiler_available", "pays_back"]

#: the values of ``compile``
CHOICES = (True, False, "auto")
#: eager / compiled seconds per leapfrog step assumed by the rule: the smallest measured
#: ratio was 2.3 (digits MLP), the cosine MLP's 3.1 (``benchmarks/results/gradient.md``)
ASSUMED_SPEEDUP = 2.0
#: seconds a first compile is expected to take with no record on this machine
#: (19-25 s measured with an empty inductor cache)
COLD_SECONDS = 25.0
#: iterations measured before deciding
PROBE = 10
#: signatures compiled in this process: their graphs are reused, so a second run here pays
#: (almost) nothing, and its tiny compile time must not become the estimate for a new process
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
    """Point inductor's cache at ``cache_dir()/inductor`` unless the user chose one."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))


def pays_back(rest_seconds: float, compile_seconds: float, speedup: float = ASSUMED_SPEEDUP) -> bool:
    """Whether compiling saves time: ``rest_seconds * (1 - 1/speedup) > compile_seconds``."""
    return rest_seconds * (1.0 - 1.0 / speedup) > compile_seconds


class CompileRecord:
    """Seconds the last compile of each network and batch took on this machine
    (``cache_dir()/compile_seconds.json``); unreadable or missing: no record."""

    def __init__(self, path: Path | None = None):
        self.path = path or cache_dir() / "compile_seconds.json"

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> float | None:
        value = self._read().get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def put(self, key: str, seconds: float) -> None:
        records = {**self._read(), key: round(float(seconds), 3)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
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


class AutoCompile:
    """The ``compile="auto"`` decision for one run of a batched HMC kernel (module docstring).

    The kernel calls :meth:`observe` after each transition with the leapfrog steps it took.
    ``total_iterations`` is warm-up plus draws; ``decide_at`` the iteration of the decision."""

    def __init__(self, potential, total_iterations: int, decide_at: int, record: CompileRecord | None = None):
        self.potential = potential
        self.total_iterations = int(total_iterations)
        self.decide_at = int(decide_at)
        self.record = record or CompileRecord()
        self.iteration = 0
        self.decision: str | None = None
        self.compiled = False
        self._window: list[tuple[float, int]] = []  # (time after the transition, its leapfrog steps)
        self._key: str | None = None
        if not getattr(potential, "analytic", False):
            self.decision = "auto: eager (the model has no analytic gradient to compile)"
        elif not compiler_available():
            self.decision = "auto: eager (no C++ compiler found)"
            warnings.warn("compile='auto': no C++ compiler found (g++, c++, clang++ or $CXX); running eagerly")

    def observe(self, steps: int, theta: torch.Tensor) -> None:
        """One transition done with ``steps`` leapfrog steps; decides at :attr:`decide_at`."""
        self.iteration += 1
        if self.decision is not None:
            if self.compiled and not self.potential.compile:  # a resumed run's fresh potential
                self._compile()
            return
        self._window = (self._window + [(time.perf_counter(), int(steps))])[-(PROBE + 1):]
        if self.iteration >= self.decide_at and len(self._window) > PROBE:
            self._decide(theta)

    def _decide(self, theta: torch.Tensor) -> None:
        (start, _), rest = self._window[0], self._window[1:]
        per_step = (rest[-1][0] - start) / max(sum(s for _, s in rest), 1)
        rest_seconds = (self.total_iterations - self.iteration) * rest[-1][1] * per_step
        self._key = signature(self.potential, theta)
        recorded = self.record.get(self._key)
        expected = 0.0 if self._key in _COMPILED_HERE else COLD_SECONDS if recorded is None else recorded
        numbers = (f"at iteration {self.iteration}: eager {per_step * 1e3:.2g} ms per leapfrog step, about "
                   f"{rest_seconds:.0f} s left eagerly, compile expected {expected:.1f} s")
        if pays_back(rest_seconds, expected):
            self._compile()
            self.decision = f"auto: compiled {numbers}"
        else:
            self.decision = f"auto: eager ({numbers})"
        self._window = []

    def _compile(self) -> None:
        use_persistent_inductor_cache()
        self.potential.compile = self.potential.compile_fallback = self.compiled = True

    def finish(self) -> None:
        """After the run: record this compile's time for the next estimate."""
        seconds = getattr(self.potential, "compile_seconds", 0.0)
        if self._key is not None and self.potential.compile and seconds > 0 and self._key not in _COMPILED_HERE:
            self.record.put(self._key, seconds)
            _COMPILED_HERE.add(self._key)

    def note(self) -> str:
        return self.decision or f"auto: eager (the run ended before the decision at iteration {self.decide_at})"
