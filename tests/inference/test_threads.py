"""The thread policy: one thread for small work, every core for larger work whatever the load (the same seed gives
the same draws), a note where other work holds those cores, the caller's setting restored."""

import multiprocessing as mp
import os

import pytest
import torch

from bnnzoo.inference import run
from bnnzoo.inference import threads as threads_module
from bnnzoo.inference.threads import SMALL_WORK, busy_cores, busy_note, choose_threads, using_threads, work_per_gradient
from bnnzoo.models import BNN, zoo


@pytest.mark.parametrize("work, cores, want", [
    (SMALL_WORK - 1, 16, 1),         # dispatch-bound: one thread whatever the machine
    (SMALL_WORK * 10, 16, 16),       # large: every core
    (None, 8, 8),                    # unknown work: every core
])
def test_choose_threads(work, cores, want, monkeypatch):
    for busy in (0, 1, 9):  # the load does not enter: the same count, so the same rounding, in every process
        monkeypatch.setattr(threads_module, "busy_cores", lambda: busy)
        assert choose_threads(work, cores=cores) == want


def test_a_busy_machine_is_named_with_the_count_that_may_run_faster(monkeypatch):
    monkeypatch.setattr(threads_module, "_cores", lambda: 4)
    monkeypatch.setattr(threads_module, "busy_cores", lambda: 3)
    assert busy_note(4) == ("other work holds 3 of this machine's 4 cores: the run's 4 threads wait on each other "
                            "for them; threads=1 may run faster here (threads='auto' does not follow the load, so "
                            "that the same seed gives the same draws)")
    assert busy_note(1) is None  # one thread waits on nobody
    monkeypatch.setattr(threads_module, "busy_cores", lambda: 0)
    assert busy_note(4) is None


def _burn(stop, started) -> None:
    started.set()
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="measured from /proc/stat")
def test_a_process_burning_a_core_is_seen_at_once(monkeypatch):
    monkeypatch.setattr(threads_module, "_reading", None)
    context = mp.get_context("spawn")
    stop, started = context.Event(), context.Event()
    burner = context.Process(target=_burn, args=(stop, started), daemon=True)
    burner.start()
    try:
        started.wait()  # no clock: a slow machine waits for the burner to start, then for it to show
        while threads_module._measure_busy(0.1) < 0.5:
            pass
        assert busy_cores() >= 1
        # large work still takes every core (the draws do not depend on the load), and the run says why it may wait
        assert choose_threads(SMALL_WORK * 10) == threads_module._cores()
        if threads_module._cores() > 1:
            assert "other work holds" in busy_note(threads_module._cores())
    finally:
        stop.set()
        burner.join()


def test_this_process_own_work_is_not_counted(monkeypatch):
    ticks = iter([1000, 1000 + 100])                  # the machine: 100 ticks busy over the window ...
    own = iter([5.0, 5.0 + 100 / 100])                # ... all of them this process's
    monkeypatch.setattr(threads_module, "_cpu_ticks", lambda cpus: next(ticks))
    monkeypatch.setattr(threads_module, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(threads_module.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(threads_module.time, "sleep", lambda seconds: None)
    assert threads_module._measure_busy(0.1) == pytest.approx(0.0, abs=1e-9)


def test_without_proc_stat_the_load_average_less_this_process_is_used(monkeypatch):
    monkeypatch.setattr(threads_module, "_reading", None)
    monkeypatch.setattr(threads_module, "_cpu_ticks", lambda cpus: None)
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (3.2, 0.0, 0.0))
    assert busy_cores() == 2
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert busy_cores() == 2                          # the reading is kept for LOAD_TTL seconds
    monkeypatch.setattr(threads_module, "_reading", None)
    assert busy_cores() == 0


def test_the_callers_setting_is_restored():
    before = torch.get_num_threads()
    with using_threads(before + 1) as used:
        assert torch.get_num_threads() == used == before + 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), using_threads(before + 1):
        raise RuntimeError
    assert torch.get_num_threads() == before


def test_run_records_the_count_and_takes_an_override():
    model = BNN(zoo.cosine_mlp(hidden=3))
    assert work_per_gradient(model, 100, 2) < SMALL_WORK
    small = run(model, "cosine", engine="rwmh", num_samples=2, warmup_steps=2, progress=False)
    assert small.notes["threads"] == 1
    given = run(model, "cosine", engine="rwmh", num_samples=2, warmup_steps=2, progress=False, threads=2)
    assert given.notes["threads"] == 2


@pytest.mark.parametrize("threads", [0, -1, 1.5, "many", True])
def test_bad_threads_are_named(threads):
    with pytest.raises(ValueError, match=f"threads must be 'auto', None or an integer >= 1, got {threads!r}"):
        run("cosine_mlp", "cosine", engine="rwmh", threads=threads)
