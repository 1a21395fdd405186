"""Checkpoints: a stopped run continues where it stopped, with the same draws.

A :class:`Checkpoint` is a folder that holds one running engine's state:

* ``state.pt``: everything needed to continue: the chain and iteration reached,
  the kernel's complete state (positions, momenta, step sizes, mass matrices,
  adaptation counters, SA hyperparameters, pruning masks, its own random
  generators), the current point, the global RNG states (torch, NumPy, Python),
  the finished chains' statistics and, for VI, the guide and optimizer state;
* ``draws/``: the kept draws, one chunk file per save (a save writes only the
  draws since the previous one);
* ``progress.json``: where the run is (chain, iteration, draws kept), readable by anyone;
* ``result.pt``: the engine's finished :class:`~bnnzoo.results.Draws` and wall time,
  once it has finished (``state.pt`` and ``draws/`` are then removed).

Every file is written to a temporary name and renamed into place, so a kill in
the middle of a write leaves the previous checkpoint intact. A save happens
every ``every`` iterations and/or ``seconds`` seconds (whichever comes first),
at the end of every chain and on Ctrl-C.

The kernel's state is its ``__dict__`` without what its ``setup()`` rebuilds from
the model and data (:data:`ENVIRONMENT`: the model, the potential, transforms);
on resume the kernel is set up afresh, then its state and the RNG states are put
back. Objects that belong to the run, not the kernel (the potential, the model,
the data), are stored by name, never by value. Because every random number
comes from a restored generator, the resumed run's draws are bit-identical to an
uninterrupted run's with the same seed (tests kill runs with SIGKILL and SIGINT
and compare).

A checkpoint records a fingerprint of what produced it (model spec, data,
engine, options, counts, seed); resuming with anything different is refused
with the fields that differ.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyro
import torch

from .. import validation

__all__ = ["Checkpoint", "CheckpointMismatch", "ENVIRONMENT", "Interrupted", "deferred_interrupt", "fingerprint",
           "load_object", "restore_object", "save_object", "snapshot_object"]

#: kernel attributes that ``setup()`` rebuilds from the model and data, never stored
ENVIRONMENT = ("model", "potential", "potential_fn", "transforms", "_prototype_trace")
#: default seconds between saves
CHECKPOINT_SECONDS = 30.0


class CheckpointMismatch(ValueError):
    """A checkpoint written by a different model, data, engine or options."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a checkpointed run, after the final checkpoint was written to ``path``."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


# ------------------------------------------------------------------ files
def _atomic(path: Path, write) -> None:
    """``write(file)`` into a temporary file beside ``path``, flushed to disk, then renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class _Pickler(pickle.Pickler):
    """Pickles a state with the run's objects (``externals``) by name and every tensor set aside
    for ``torch.save`` (which keeps views sharing their storage)."""

    def __init__(self, file, externals: Mapping[str, Any]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(v): k for k, v in externals.items() if v is not None}
        self._keep = list(externals.values())  # ids stay valid while pickling
        self.tensors: list[torch.Tensor] = []
        self._index: dict[int, int] = {}

    def persistent_id(self, obj):
        name = self._names.get(id(obj))
        if name is not None:
            return ("external", name)
        if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter):
            if id(obj) not in self._index:
                self._index[id(obj)] = len(self.tensors)
                self.tensors.append(obj.detach() if obj.grad_fn is not None else obj)
            return ("tensor", self._index[id(obj)])
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, externals: Mapping[str, Any], tensors: list[torch.Tensor]):
        super().__init__(file)
        self._externals, self._tensors = externals, tensors

    def persistent_load(self, pid):
        kind, key = pid
        if kind == "tensor":
            return self._tensors[key]
        if key not in self._externals:
            raise ValueError(f"checkpoint: it refers to {key!r}, which this run does not provide")
        return self._externals[key]


def snapshot_object(obj, externals: Mapping[str, Any] | None = None) -> dict:
    """``obj`` as ``{"pickle": bytes, "tensors": [...]}`` with ``externals`` stored by name."""
    buf = io.BytesIO()
    pickler = _Pickler(buf, externals or {})
    pickler.dump(obj)
    return {"pickle": buf.getvalue(), "tensors": pickler.tensors}


def restore_object(snapshot: dict, externals: Mapping[str, Any] | None = None):
    """The object of :func:`snapshot_object`, its external names bound to ``externals``."""
    return _Unpickler(io.BytesIO(snapshot["pickle"]), externals or {}, snapshot["tensors"]).load()


def save_object(obj, path: Path, externals: Mapping[str, Any] | None = None) -> None:
    """Write ``obj`` to ``path`` atomically."""
    snapshot = snapshot_object(obj, externals)
    _atomic(Path(path), lambda f: torch.save(snapshot, f))


def load_object(path: Path, externals: Mapping[str, Any] | None = None):
    return restore_object(torch.load(path, weights_only=False), externals)


# ------------------------------------------------------------ fingerprint
def _digest(value) -> str:
    if torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        h = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        return f"array{list(value.shape)} {value.dtype} sha256:{h}"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def fingerprint(**parts) -> dict[str, str]:
    """What produced a checkpoint, one comparable string per field (mappings give ``name.key``)."""
    out = {}
    for name, value in parts.items():
        if isinstance(value, Mapping):
            out.update({f"{name}.{k}": _digest(v) for k, v in value.items()})
        else:
            out[name] = _digest(value)
    return out


def _differences(saved: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    def short(s):
        return s if s is None or len(s) < 60 else s[:57] + "..."

    return [f"{k}: checkpoint {short(saved.get(k))}, now {short(now.get(k))}"
            for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]


# ------------------------------------------------------------- interrupts
@contextmanager
def deferred_interrupt():
    """Within the block, Ctrl-C sets ``flag["requested"]`` instead of raising, so that the loop can
    finish its iteration and write a checkpoint; a second Ctrl-C raises at once. Outside the main
    thread (no signal handler can be set) it does nothing."""
    flag = {"requested": False}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        flag["requested"] = True
        signal.signal(signal.SIGINT, previous if callable(previous) else signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


# -------------------------------------------------------------- checkpoint
class Checkpoint:
    """One engine's checkpoint folder (module docstring).

    Parameters
    ----------
    directory : path
    fingerprint : dict
        From :func:`fingerprint`; a resumed checkpoint must match it.
    resume : bool
        Continue from what is in ``directory``; otherwise it is cleared first.
    every : int, optional
        Save every ``every`` iterations (warm-up included; VI: optimisation steps).
    seconds : float, optional
        Save when ``seconds`` have passed since the last save (default 30).
    """

    def __init__(self, directory, fingerprint: Mapping[str, str], resume: bool = False, every: int | None = None,
                 seconds: float | None = CHECKPOINT_SECONDS):
        if every is not None:
            validation.integer("checkpoint_every", every, 1)
        if seconds is not None:
            validation.positive("checkpoint_seconds", seconds)
        validation.boolean("resume", resume)
        self.directory = Path(directory)
        self.fingerprint = dict(fingerprint)
        self.resume, self.every, self.seconds = resume, every, seconds
        self._since, self._last = 0, time.monotonic()
        self.externals: dict[str, Any] = {}
        if not resume:
            self.clear()
        elif self.state_path.exists() or self.result_path.exists():
            self._check(torch.load(self.directory / "fingerprint.pt", weights_only=False))

    # paths
    @property
    def state_path(self) -> Path:
        return self.directory / "state.pt"

    @property
    def result_path(self) -> Path:
        return self.directory / "result.pt"

    def _check(self, saved: Mapping[str, str]) -> None:
        diff = _differences(saved, self.fingerprint)
        if diff:
            raise CheckpointMismatch(f"checkpoint {self.directory}: written by a different run; "
                                     + "; ".join(diff) + " (start afresh without resume, or use another folder)")

    def threads(self, chosen: int) -> int:
        """The thread count to run with: the one the stopped run used, when resuming one (a matrix
        product's rounding may depend on it), else ``chosen``, recorded for a later resume."""
        path = self.directory / "threads.json"
        if self.resume and path.exists():
            return int(json.loads(path.read_text()))
        _atomic(path, lambda f: f.write(str(int(chosen)).encode()))
        return chosen

    def clear(self) -> None:
        for name in ("state.pt", "result.pt", "fingerprint.pt", "progress.json", "threads.json"):
            (self.directory / name).unlink(missing_ok=True)
        shutil.rmtree(self.directory / "draws", ignore_errors=True)

    # saving
    def due(self) -> bool:
        """Count one iteration; True when a save is due."""
        self._since += 1
        if self.every is not None and self._since >= self.every:
            return True
        return self.seconds is not None and time.monotonic() - self._last >= self.seconds

    def save(self, state: Mapping[str, Any], **progress) -> None:
        """Write the running engine's ``state`` (atomically), and ``progress`` (plain numbers:
        chain, iteration, draws) to ``progress.json``."""
        if not (self.directory / "fingerprint.pt").exists():
            _atomic(self.directory / "fingerprint.pt", lambda f: torch.save(self.fingerprint, f))
        save_object(dict(state), self.state_path, self.externals)
        _atomic(self.directory / "progress.json", lambda f: f.write(json.dumps(progress).encode()))
        self._since, self._last = 0, time.monotonic()

    def load(self) -> dict | None:
        """The saved running state (None when there is none or ``resume`` is off)."""
        if not self.resume or not self.state_path.exists():
            return None
        return load_object(self.state_path, self.externals)

    def save_chunk(self, name: str, value) -> str:
        """Write one chunk of draws under ``draws/``; returns its file name for the state to list."""
        save_object(value, self.directory / "draws" / name)
        return name

    def load_chunk(self, name: str):
        return load_object(self.directory / "draws" / name)

    # the finished result
    def finish(self, result) -> None:
        """Store the finished engine's result, then drop the running state."""
        if not (self.directory / "fingerprint.pt").exists():
            _atomic(self.directory / "fingerprint.pt", lambda f: torch.save(self.fingerprint, f))
        save_object(result, self.result_path)
        _atomic(self.directory / "progress.json", lambda f: f.write(b'{"finished": true}'))
        self.state_path.unlink(missing_ok=True)
        shutil.rmtree(self.directory / "draws", ignore_errors=True)

    def finished(self):
        """The stored result when resuming a finished engine, else None."""
        if self.resume and self.result_path.exists():
            return load_object(self.result_path)
        return None

    def interrupted(self, where: str) -> Interrupted:
        return Interrupted(f"interrupted {where}; checkpoint written to {self.directory}; continue with "
                           f"resume=True (CLI: --resume) and the same checkpoint folder", self.directory)


# ------------------------------------------------------------- kernel state
def kernel_state(kernel) -> dict:
    """A kernel's state: its ``__dict__`` without its :data:`ENVIRONMENT`."""
    environment = set(getattr(kernel, "checkpoint_environment", ENVIRONMENT))
    return {k: v for k, v in vars(kernel).items() if k not in environment}


def rng_state() -> dict:
    """Pyro's RNG states (torch's CPU generator, Python's, NumPy's) and, once CUDA is in use,
    every CUDA device's generator."""
    state = pyro.util.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    pyro.util.set_rng_state(state)
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
