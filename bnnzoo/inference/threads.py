"""How many intra-op threads torch uses for a run.

A matrix product's or a reduction's rounding can depend on the number of threads, so the
count is a function of the run's inputs and the machine, never of the load at the moment:
the same seed gives the same draws in every process on a machine (``threads="auto"``).

torch's default (one thread per core) is right on an idle machine and wrong for work too
small to share: a batched gradient of a small network is dispatch-bound, and a second thread
only waits on the first. On an idle machine a second thread starts to pay from about
:data:`SMALL_WORK` multiply-adds per gradient (on the cosine MLP about even with 8 chains,
31-37% with 32, eager and compiled; ``benchmarks/bench_threads.py``).

The rule (``threads="auto"``, :func:`choose_threads`):

* work per gradient ``W = chains x rows x (multiply-adds per row of the network)``;
  below :data:`SMALL_WORK` one thread;
* otherwise every core this process may use.

On a machine busy with other work, threads that must wait for a core held by another process
wait on each other (on a 2-core machine with other work running, one such gradient took 10x
longer with 2 threads than with 1). The count does not follow the load (that would make the
draws depend on it); :func:`busy_note` measures it at the start of the run (:func:`busy_cores`:
the CPU time the machine's cores spent busy over :data:`LOAD_WINDOW` seconds, less this
process's own, from ``/proc/stat``; where that file does not exist, the 1-minute load average
less one for this process) and, where other work holds cores the run would use, says so and
that ``threads=1`` (or the free cores) may run faster there. :func:`using_threads` applies a
count for the duration of a run and restores the caller's setting afterwards.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import torch


__all__ = ["LOAD_TTL", "LOAD_WINDOW", "SMALL_WORK", "busy_cores", "busy_note", "check_threads", "choose_threads",
           "using_threads", "work_per_gradient"]

#: multiply-adds per batched gradient below which one thread is used: below it (the demo's 16
#: chains of a 1-10-1 MLP, 50 thousand) a second thread did not pay on an idle 2-core machine,
#: for the gradient alone or a whole batched-NUTS run; at 8 chains of the cosine MLP (120
#: thousand) the two ran about even on an idle machine and one thread was 1.7-1.9x faster with
#: a core busy; above it (the cosine MLP with 32 chains, 483 thousand) a second thread paid on
#: an idle machine (``benchmarks/bench_threads.py``; docs/performance.md, "Threads"). Since the
#: count does not follow the load, work that ties on an idle machine takes the one thread that
#: does not lose on a busy one
SMALL_WORK = 250_000
#: seconds over which :func:`busy_cores` measures the other processes' CPU use
LOAD_WINDOW = 0.1
#: seconds a reading of :func:`busy_cores` is reused for
LOAD_TTL = 10.0


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


def _cpu_ticks(cpus) -> int | None:
    """Busy clock ticks of ``cpus`` (all time but idle and I/O wait) from ``/proc/stat``, or None."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    busy, seen = 0, 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]
        busy += sum(ticks) - ticks[3] - ticks[4]
        seen += 1
    return busy if seen else None


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _measure_busy(window: float) -> float | None:
    """Cores busy with other processes' work over ``window`` seconds (None where unmeasurable)."""
    try:
        cpus = os.sched_getaffinity(0)
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return None
    before, own_before, start = _cpu_ticks(cpus), _own_seconds(), time.monotonic()
    if before is None:
        return None
    time.sleep(window)
    after, own_after, elapsed = _cpu_ticks(cpus), _own_seconds(), time.monotonic() - start
    if after is None:
        return None
    return ((after - before) / hz - (own_after - own_before)) / elapsed


_reading: tuple[float, int] | None = None


def busy_cores() -> int:
    """Cores busy with other processes' work now (module docstring), rounded to a whole core."""
    global _reading
    now = time.monotonic()
    if _reading is not None and now - _reading[0] < LOAD_TTL:
        return _reading[1]
    busy = _measure_busy(LOAD_WINDOW)
    if busy is None:
        try:
            busy = os.getloadavg()[0] - 1
        except (AttributeError, OSError):
            busy = 0.0
    count = max(0, int(round(busy)))
    _reading = (now, count)
    return count


def work_per_gradient(model, num_rows: int, num_chains: int) -> int | None:
    """Multiply-adds of one batched forward pass (None where the model's layers are unknown)."""
    spec = getattr(model, "spec", None)
    if spec is None or not hasattr(model, "num_params"):
        return None
    return int(num_chains) * int(num_rows) * int(model.num_params)


def choose_threads(work: int | None, cores: int | None = None) -> int:
    """The thread count for ``work`` multiply-adds per gradient (module docstring): a function of
    the work and the cores this process may use, not of the load."""
    cores = _cores() if cores is None else cores
    if work is not None and work < SMALL_WORK:
        return 1
    return max(1, cores)


def busy_note(threads: int) -> str | None:
    """A line for a run on ``threads`` threads while other work holds some of the cores they need
    (:func:`busy_cores`), else None."""
    if threads <= 1:
        return None
    busy = busy_cores()
    free = max(1, _cores() - busy)
    if free >= threads:
        return None
    return (f"other work holds {busy} of this machine's {_cores()} cores: the run's {threads} threads wait on each "
            f"other for them; threads={free} may run faster here (threads='auto' does not follow the load, "
            f"so that the same seed gives the same draws)")


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
