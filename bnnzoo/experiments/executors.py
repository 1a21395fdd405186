"""Where a study's cells run: in this process, one after another (the default), or as Ray tasks.

An executor is a context manager (entering it connects, before any cell runs) with
``map(fn, shared, jobs, started)``: it calls ``fn(*shared, *args)`` for every
``(key, args)`` of ``jobs`` and yields ``(key, result)`` as each call finishes,
calling ``started(key)`` when a call starts. A cell's result does not depend on
the executor: every run seeds itself (:func:`bnnzoo.inference.run`).

>>> from bnnzoo.experiments import RayExecutor, acceptance_sweep
>>> acceptance_sweep("cosine_mlp", "cosine", [1e-3], [50, 100], executor=RayExecutor(workers=2))  # doctest: +SKIP

Ray is an optional extra (``pip install bnnzoo[ray]``), imported only when a
:class:`RayExecutor` connects.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .. import validation

__all__ = ["EXECUTORS", "InProcess", "RayExecutor", "executor_from"]

#: seconds to wait for a Ray address to answer before calling it unreachable
CONNECT_TIMEOUT = 5.0
#: times a cell whose Ray worker died is run again
RETRIES = 2


class InProcess:
    """Every cell in this process, one after another, with the caller's thread setting and
    the engines' own progress lines."""

    name = "inprocess"
    shows_engine_progress = True
    shared_disk = True  # a running cell keeps its engine checkpoint in the study's folder

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def threads(self, threads):
        """The thread setting of a cell: the study's."""
        return threads

    def map(self, fn: Callable, shared: tuple, jobs: Iterable[tuple[Any, tuple]],
            started: Callable[[Any], None]) -> Iterator[tuple[Any, Any]]:
        for key, args in jobs:
            started(key)
            yield key, fn(*shared, *args)


def _host_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``"HOST:PORT"`` or ``"ray://HOST:PORT"``, or a ValueError naming the address."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"ray address {address!r}: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
    return host, int(port)


def _check_reachable(address: str) -> None:
    """A TCP connection to the address, within :data:`CONNECT_TIMEOUT` seconds (Ray itself retries for
    about 20 s, printing a line each time, before it gives up)."""
    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as err:
        raise ConnectionError(f"ray address {address!r}: cannot reach {host}:{port} ({err}); is the Ray head "
                              f"running there (ray start --head)?") from None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("executor 'ray' needs Ray, an optional extra: pip install bnnzoo[ray]") from None
    return ray


def _package_path() -> str:
    """The folder bnnzoo is imported from, first on the workers' PYTHONPATH, so that a local Ray's
    workers run this very code (a source checkout beside an installed copy included)."""
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


class RayExecutor:
    """Cells as Ray tasks, one CPU and one torch thread each, at most ``workers`` at a time.

    Parameters
    ----------
    address : str, optional
        None: a local Ray started for the study (and stopped after it), with ``workers``
        CPUs, unless ``RAY_ADDRESS`` names a cluster or Ray is already initialised in this
        process. ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"``: a running cluster
        (``ray://`` needs ``pip install "ray[client]"``).
    workers : int, optional
        Cells running at once (default: the cluster's CPUs).
    shared_disk : bool, optional
        Whether the workers see the study's folder, so that a running cell keeps its engine
        checkpoint there (and a killed study continues it). Default: True for a local Ray,
        False for a cluster (a running cell then starts afresh after a kill). The driver
        writes every finished cell's files itself either way.

    Entering the executor connects (an unreachable address is a ``ConnectionError``
    naming it, before any cell runs); it may be entered again by several studies, and
    the outermost one leaving stops the local Ray it started, or disconnects from the
    cluster (a Ray initialised by the caller is left as it is).
    """

    name = "ray"
    shows_engine_progress = False  # workers' lines would interleave; the study prints cells done / running

    def __init__(self, address: str | None = None, workers: int | None = None, shared_disk: bool | None = None):
        if address is not None and (not isinstance(address, str) or not address):
            raise ValueError(f"ray address must be None, 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {address!r}")
        if address not in (None, "auto"):
            _host_port(address)
        if workers is not None:
            validation.integer("workers", workers, 1)
        if shared_disk is not None:
            validation.boolean("shared_disk", shared_disk)
        self.address, self.workers = address, workers
        self.shared_disk = self._local() if shared_disk is None else shared_disk
        self._depth, self._connected, self._ray = 0, False, None

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers!r}, shared_disk={self.shared_disk!r})"

    def __enter__(self) -> "RayExecutor":
        if self._depth == 0:
            self._connect()
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._connected:
            self._ray.shutdown()
            self._connected = False

    def _local(self) -> bool:
        """Whether this executor starts a Ray of its own on this machine."""
        return self.address is None and not os.environ.get("RAY_ADDRESS")

    def _connect(self) -> None:
        if self.address not in (None, "auto"):
            _check_reachable(self.address)
        ray = self._ray = _import_ray()
        if ray.is_initialized():
            return
        local = self._local()
        options = {"num_cpus": self.workers, "include_dashboard": False,
                   "runtime_env": {"env_vars": {"PYTHONPATH": _package_path()}}} if local else {}
        try:
            ray.init(address=self.address, logging_level=logging.ERROR, **options)
        except Exception as err:  # ConnectionError, a missing ray[client], a refused version: one line
            raise ConnectionError(f"ray address {self.address or os.environ.get('RAY_ADDRESS') or 'local'!r}: "
                                  f"{type(err).__name__}: {err}") from None
        self._connected = True

    @property
    def slots(self) -> int:
        """Cells running at once."""
        cpus = int(self._ray.cluster_resources().get("CPU", 1)) if self._ray is not None else 1
        return self.workers or max(1, cpus)

    def threads(self, threads) -> int:
        """One torch thread per cell: a task holds one CPU."""
        return 1

    def map(self, fn: Callable, shared: tuple, jobs: Iterable[tuple[Any, tuple]],
            started: Callable[[Any], None]) -> Iterator[tuple[Any, Any]]:
        ray = self._ray
        # a worker that dies (killed, out of memory, a lost node) runs its cell again, which continues
        # from the cell's checkpoint where the disk is shared; the cell's own errors are not retried
        remote = ray.remote(num_cpus=1, max_retries=RETRIES)(fn)
        shared = [ray.put(value) for value in shared]
        jobs, running, slots = iter(jobs), {}, self.slots
        try:
            while True:
                for key, args in jobs:
                    running[remote.remote(*shared, *args)] = key
                    started(key)
                    if len(running) >= slots:
                        break
                if not running:
                    return
                (done,), _ = ray.wait(list(running), num_returns=1)
                key = running.pop(done)
                yield key, self._result(done)
        finally:  # Ctrl-C, an error: the running cells stop (their engine checkpoints stay)
            for ref in running:
                ray.cancel(ref)

    def _result(self, ref):
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as err:  # the cell's own exception, not Ray's wrapper
            cause = getattr(err, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise


#: executor name -> class, for ``executor="ray"``
EXECUTORS = {"inprocess": InProcess, "ray": RayExecutor}


def executor_from(executor) -> InProcess | RayExecutor:
    """An executor from its name (``"inprocess"``, ``"ray"``) or an executor object."""
    if isinstance(executor, str) and executor in EXECUTORS:
        return EXECUTORS[executor]()
    if isinstance(executor, (InProcess, RayExecutor)):
        return executor
    raise ValueError(f"executor must be one of {', '.join(repr(k) for k in EXECUTORS)} or a RayExecutor, "
                     f"got {executor!r}")
