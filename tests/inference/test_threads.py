"""The thread policy: one thread for small work, the free cores for large work, the caller's setting restored."""

import pytest
import torch

from bnnzoo.inference import run
from bnnzoo.inference.threads import SMALL_WORK, choose_threads, using_threads, work_per_gradient
from bnnzoo.models import BNN, zoo


@pytest.mark.parametrize("work, cores, busy, want", [
    (SMALL_WORK - 1, 16, 0, 1),      # dispatch-bound: one thread whatever the machine
    (SMALL_WORK * 10, 16, 0, 16),    # large and idle: every core
    (SMALL_WORK * 10, 2, 1, 1),      # large on a busy 2-core machine: the free core
    (SMALL_WORK * 10, 4, 9, 1),      # overloaded: one
    (None, 8, 2, 6),                 # unknown work: the free cores
])
def test_choose_threads(work, cores, busy, want):
    assert choose_threads(work, cores=cores, busy=busy) == want


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
