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
the middle of a write (or a full disk: the error names the file) leaves the
previous checkpoint intact. Each ``.pt`` file starts with a SHA-256 of its
content: a truncated or corrupted file is refused with :class:`CheckpointCorrupt`
naming it, never loaded. A save happens every ``every`` iterations and/or
``seconds`` seconds (whichever comes first), at the end of every chain and on
Ctrl-C. The seconds the run has taken are saved too, so a resumed run's wall
time counts every segment. One process at a time works in a folder: a second one
is refused with :class:`FolderLocked` (an ``flock`` on ``.lock``, released when
the process ends, however it ends).

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

import _thread
import errno
import hashlib
import io
import json
import math
import os
import pickle
import shutil
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None
import numpy as np
import pyro
import torch

from .. import validation

__all__ = ["Checkpoint", "CheckpointCorrupt", "CheckpointMismatch", "ENVIRONMENT", "FolderLocked", "Interrupted",
           "deferred_interrupt", "fingerprint", "folder_lock", "load_object", "read_json", "restore_object",
           "save_object", "snapshot_object", "write_atomic"]

#: kernel attributes that ``setup()`` rebuilds from the model and data, never stored
ENVIRONMENT = ("model", "potential", "potential_fn", "transforms", "_prototype_trace")
#: the layout of the kernel states a checkpoint holds: part of every run's fingerprint, raised when a
#: kernel's saved attributes change, so a checkpoint of an older layout is refused by name, never loaded
#: into the new kernels (2: the SG-MCMC kernels' composed parts and the HMC family's runtime; 3: the HMC
#: family, batched NUTS and SG-MCMC on the sampler core, their state, parameters and adaptation explicit)
STATE_LAYOUT = 3
#: default seconds between saves
CHECKPOINT_SECONDS = 30.0
#: seconds a Ctrl-C waits for the running iteration to end before it stops the run where it is
#: (a compile or a long warm-up step): the run then continues from its last save
INTERRUPT_GRACE_SECONDS = 2.0
#: the first bytes of a checksummed file, then 64 hex digits of the SHA-256 of the rest
_MAGIC = b"bnnzoo-sha256:"


class CheckpointMismatch(ValueError):
    """A checkpoint written by a different model, data, engine or options."""


class CheckpointCorrupt(ValueError):
    """A checkpoint file that is truncated or corrupted (its checksum does not match, or it cannot be read)."""


class FolderLocked(RuntimeError):
    """An output or checkpoint folder in use by another process."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a checkpointed run, after the final checkpoint was written to ``path``."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


# ------------------------------------------------------------------ files
def write_atomic(path: Path, write) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then renamed over it: a kill or a failed
    write (a full disk) leaves the previous file as it was; an ``OSError`` names ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from err
    finally:
        tmp.unlink(missing_ok=True)


def _atomic(path: Path, write) -> None:
    """``write(file)`` into a temporary file beside ``path``, flushed to disk, then renamed over ``path``."""
    def to_file(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())

    write_atomic(path, to_file)


def _checksummed(payload: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload


def _verified(path: Path) -> bytes:
    """The content of a checksummed file, or :class:`CheckpointCorrupt` naming it."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CheckpointCorrupt(f"checkpoint file {path} is missing (the checkpoint is incomplete)") from None
    head = len(_MAGIC) + 64
    if not data.startswith(_MAGIC):  # written before files had checksums: torch.load alone judges it
        return data
    payload = data[head:]
    if hashlib.sha256(payload).hexdigest().encode() != data[len(_MAGIC):head]:
        raise CheckpointCorrupt(f"checkpoint file {path} is truncated or corrupted: its SHA-256 does not match "
                                f"({len(data)} bytes); the run cannot continue from it: start it afresh (without resume; "
                                f"--fresh on the command line)")
    return payload


def _torch_load(path: Path):
    """``torch.load`` of a checksummed file (:class:`CheckpointCorrupt` if it is damaged)."""
    payload = _verified(path)
    try:
        return torch.load(io.BytesIO(payload), weights_only=False)
    except Exception as err:  # a valid checksum of something that is not a checkpoint
        raise CheckpointCorrupt(f"checkpoint file {path} cannot be read: {type(err).__name__}: {err}") from None


def _torch_save(value, path: Path) -> None:
    buf = io.BytesIO()
    torch.save(value, buf)
    data = _checksummed(buf.getvalue())
    _atomic(Path(path), lambda f: f.write(data))


def read_json(path: Path, what: str = "file"):
    """A JSON file, or :class:`CheckpointCorrupt` naming it when it is not JSON."""
    text = Path(path).read_text()
    try:
        return json.loads(text)
    except ValueError as err:
        raise CheckpointCorrupt(f"{what} {path} is corrupted: {err} ({len(text)} characters)") from None


# ------------------------------------------------------------------ locks
@contextmanager
def folder_lock(directory, what: str = "folder"):
    """Hold ``directory/.lock`` (an exclusive ``flock``) within the block, or :class:`FolderLocked`
    naming the folder and the process that holds it. The lock goes with the process, however it ends."""
    handle = lock_folder(directory, what)
    try:
        yield
    finally:
        handle.close()


def lock_folder(directory, what: str = "folder"):
    """:func:`folder_lock` as an open file: the lock is held until it is closed."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".lock"
    handle = open(path, "a+")
    if fcntl is None:  # no flock here (not POSIX): no lock
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # a file system without locks
            return handle
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise FolderLocked(f"{what} {directory} is in use by {holder}; wait until it ends, or give another "
                           f"folder") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()} on {socket.gethostname()}")
    handle.flush()
    return handle


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
    """Write ``obj`` to ``path`` atomically, with a checksum."""
    _torch_save(snapshot_object(obj, externals), Path(path))


def load_object(path: Path, externals: Mapping[str, Any] | None = None):
    """The object of :func:`save_object`; :class:`CheckpointCorrupt` naming ``path`` if the file is damaged."""
    snapshot = _torch_load(Path(path))
    if not isinstance(snapshot, dict) or "pickle" not in snapshot:
        raise CheckpointCorrupt(f"checkpoint file {path} holds no saved object")
    try:
        return restore_object(snapshot, externals)
    except Exception as err:
        raise CheckpointCorrupt(f"checkpoint file {path} cannot be restored: {type(err).__name__}: {err}") from None


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
class InterruptRequest:
    """A Ctrl-C that :func:`deferred_interrupt` holds back: ``requested`` once it came; the loop calls
    :meth:`acknowledge` when it stops at an iteration's end (then no hard stop follows)."""

    def __init__(self):
        self.requested = False
        self.acknowledged = False
        self.lock = threading.Lock()
        self.open = True
        self.timer: threading.Timer | None = None

    def __getitem__(self, key):  # interrupt["requested"], as before
        return getattr(self, key)

    def acknowledge(self) -> None:
        with self.lock:
            self.acknowledged = True
            if self.timer is not None:
                self.timer.cancel()


@contextmanager
def deferred_interrupt(grace: float = INTERRUPT_GRACE_SECONDS):
    """Within the block, Ctrl-C sets ``requested`` instead of raising, so that the loop can finish its
    iteration and write a checkpoint. When the iteration has not ended ``grace`` seconds later (a
    compile, a long warm-up step), or at a second Ctrl-C, ``KeyboardInterrupt`` is raised where the
    run is: the loop then stops without saving, and the last save is what a resume continues from.
    Outside the main thread (no signal handler can be set) it does nothing."""
    request = InterruptRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = signal.getsignal(signal.SIGINT)

    def stop_now():
        with request.lock:
            if request.open and not request.acknowledged:
                _thread.interrupt_main(signal.SIGINT)  # the handler below, in the main thread: raises

    def handler(signum, frame):
        if not request.open or request.acknowledged:
            return
        if request.requested:
            raise KeyboardInterrupt("interrupted in the middle of an iteration")
        request.requested = True
        request.timer = threading.Timer(grace, stop_now)
        request.timer.daemon = True
        request.timer.start()

    signal.signal(signal.SIGINT, handler)
    try:
        yield request
    finally:
        with request.lock:
            request.open = False
            if request.timer is not None:
                request.timer.cancel()
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

    Opening one locks the folder (:func:`folder_lock`) until :meth:`close`: a second process
    is refused with :class:`FolderLocked` before it clears or reads anything.
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
        #: seconds and segments (runs of a process) before this one; where a resumed run continues from
        self.previous_seconds, self.segments, self.resumed_from = 0.0, 1, None
        self._clock = time.monotonic()
        self._lock = lock_folder(self.directory, "checkpoint folder")
        try:
            if not resume:
                self.clear()
            elif self.state_path.exists() or self.result_path.exists():
                self._check(_torch_load(self.directory / "fingerprint.pt"))
                if self.state_path.exists():
                    progress = read_json(self.directory / "progress.json", "checkpoint file")
                    self.previous_seconds = float(progress.get("seconds", 0.0))
                    self.segments = int(progress.get("segments", 1)) + 1
                    self.resumed_from = progress
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the folder's lock."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

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
            return int(read_json(path, "checkpoint file"))
        _atomic(path, lambda f: f.write(str(int(chosen)).encode()))
        return chosen

    def clear(self) -> None:
        for name in ("state.pt", "result.pt", "fingerprint.pt", "progress.json", "threads.json"):
            (self.directory / name).unlink(missing_ok=True)
        shutil.rmtree(self.directory / "draws", ignore_errors=True)

    # time
    def start_clock(self) -> None:
        """The run's own work starts now (what :meth:`elapsed` counts in this process)."""
        self._clock = time.monotonic()

    def elapsed(self) -> float:
        """Seconds of the run so far, the stopped segments' included."""
        return self.previous_seconds + time.monotonic() - self._clock

    # saving
    def due(self) -> bool:
        """Count one iteration; True when a save is due."""
        self._since += 1
        if self.every is not None and self._since >= self.every:
            return True
        return self.seconds is not None and time.monotonic() - self._last >= self.seconds

    def _write_fingerprint(self) -> None:
        if not (self.directory / "fingerprint.pt").exists():
            _torch_save(self.fingerprint, self.directory / "fingerprint.pt")

    def save(self, state: Mapping[str, Any], **progress) -> None:
        """Write the running engine's ``state`` (atomically), and ``progress`` (plain numbers:
        chain, iteration, draws; the seconds and segments so far are added) to ``progress.json``."""
        self._write_fingerprint()
        save_object(dict(state), self.state_path, self.externals)
        progress = {**progress, "seconds": self.elapsed(), "segments": self.segments}
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
        self._write_fingerprint()
        save_object(result, self.result_path)
        _atomic(self.directory / "progress.json", lambda f: f.write(json.dumps(
            {"finished": True, "seconds": result.get("wall_time"), "segments": self.segments}).encode()))
        self.state_path.unlink(missing_ok=True)
        shutil.rmtree(self.directory / "draws", ignore_errors=True)

    def finished(self):
        """The stored result when resuming a finished engine, else None."""
        if self.resume and self.result_path.exists():
            return load_object(self.result_path)
        return None

    def _last_save(self) -> str:
        try:
            progress = read_json(self.directory / "progress.json", "checkpoint file")
        except (OSError, CheckpointCorrupt):
            progress = {}
        if "iteration" not in progress:
            return "nothing of this engine yet (it starts afresh)"
        return f"chain {progress.get('chain', 0)}, iteration {progress['iteration']}"

    def interrupted(self, where: str) -> Interrupted:
        return Interrupted(f"interrupted {where}; checkpoint written to {self.directory}; continue with "
                           f"resume=True (CLI: --resume) and the same checkpoint folder", self.directory)

    def stopped(self, where: str) -> Interrupted:
        """Ctrl-C that stopped the run in the middle of an iteration (nothing saved at the stop)."""
        return Interrupted(f"interrupted in the middle of {where} (it did not end within "
                           f"{INTERRUPT_GRACE_SECONDS:g} s); the checkpoint in {self.directory} holds its last save: "
                           f"{self._last_save()}; continue with resume=True (CLI: --resume) and the same checkpoint "
                           f"folder", self.directory)


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
