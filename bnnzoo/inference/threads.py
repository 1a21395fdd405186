"""How many intra-op threads torch uses for a run.

torch's default (one thread per core) is right for a large network on an idle
machine and badly wrong for a small one or a busy machine: a batched gradient of
a small network is dispatch-bound, and extra threads only wait on each other (on
a 2-core machine with other work running, one such gradient took 10x longer with
2 threads than with 1). :func:`choose_threads` picks a count from the work per
gradient and the cores that are free now; :func:`using_threads` applies a count
for the duration of a run and restores the caller's setting afterwards.

The rule (``threads="auto"``):

* work per gradient ``W = chains x rows x (multiply-adds per row of the network)``;
  below :data:`SMALL_WORK` one thread (dispatch-bound: more threads cannot pay);
* otherwise the cores this process may use, less those busy with other work
  (the 1-minute load average less this process's own share, rounded), at least one.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch


__all__ = ["SMALL_WORK", "check_threads", "choose_threads", "using_threads", "work_per_gradient"]

#: multiply-adds per batched gradient below which one thread is fastest (measured:
#: ``benchmarks/bench_threads.py``)
SMALL_WORK = 2_000_000


def check_threads(threads) -> None:
    """``threads`` is ``"auto"``, None (leave torch's setting) or an integer >= 1."""
    if threads is None or threads == "auto":
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be 'auto', None or an integer >= 1, got {threads!r}")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _busy_cores() -> int:
    """Cores busy with other work: the 1-minute load average less this process's own one."""
    try:
        return max(0, int(round(os.getloadavg()[0] - 1)))
    except (AttributeError, OSError):
        return 0


def work_per_gradient(model, num_rows: int, num_chains: int) -> int | None:
    """Multiply-adds of one batched forward pass (None where the model's layers are unknown)."""
    spec = getattr(model, "spec", None)
    if spec is None or not hasattr(model, "num_params"):
        return None
    return int(num_chains) * int(num_rows) * int(model.num_params)


def choose_threads(work: int | None, cores: int | None = None, busy: int | None = None) -> int:
    """The thread count for ``work`` multiply-adds per gradient (module docstring)."""
    cores = _cores() if cores is None else cores
    if work is not None and work < SMALL_WORK:
        return 1
    busy = _busy_cores() if busy is None else busy
    return max(1, min(cores, cores - busy))


@contextmanager
def using_threads(threads, work: int | None = None):
    """Within the block torch uses ``threads`` intra-op threads (``"auto"``: :func:`choose_threads` of
    ``work``; None: unchanged); the caller's count is restored afterwards. Yields the count used."""
    check_threads(threads)
    before = torch.get_num_threads()
    count = before if threads is None else choose_threads(work) if threads == "auto" else threads
    if count != before:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
