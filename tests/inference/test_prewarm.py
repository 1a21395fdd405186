"""Inductor's one-time set-up in a background process (:mod:`bnnzoo.inference.prewarm`): when it
starts, what it leaves, and that a run says whether it started one."""

import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from bnnzoo.inference import compiled_graphs, prewarm, run


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty bnnzoo cache, the set-up allowed, no earlier start in this process, two free cores."""
    monkeypatch.setenv("BNNZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(prewarm.ENV, "1")
    monkeypatch.setattr(prewarm, "_started", None)
    monkeypatch.setattr(prewarm, "free_cores", lambda: 2)
    monkeypatch.setattr(prewarm, "compiler_available", lambda: True)
    return tmp_path


class FakePopen:
    made = []

    def __init__(self, command, **kwargs):
        self.command, self.kwargs, self.pid = command, kwargs, 4242
        FakePopen.made.append(self)


def test_it_starts_once_a_process_and_leaves_a_lock_for_the_others(fresh, monkeypatch):
    FakePopen.made = []
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    assert prewarm.start("cpu") == "started a background process (pid 4242) for inductor's one-time set-up"
    (child,) = FakePopen.made
    assert child.command == [sys.executable, "-m", "bnnzoo.inference.prewarm"]
    assert child.kwargs["env"]["TORCHINDUCTOR_CACHE_DIR"]  # the folder the run's own compile will use
    assert prewarm.start("cpu") == "not started (started earlier in this process)"
    monkeypatch.setattr(prewarm, "_started", None)  # as another process sees it: the lock is fresh
    assert prewarm.start("cpu") == "not started (under way in another process)"
    assert len(FakePopen.made) == 1


def test_it_does_not_start_where_it_cannot_help_or_would_cost(fresh, monkeypatch):
    assert prewarm.reason_not_to_start("cpu") is None
    assert prewarm.reason_not_to_start("cuda") == "not a CPU run"
    monkeypatch.setattr(prewarm, "free_cores", lambda: 0)
    assert prewarm.reason_not_to_start("cpu") == "no core free of this run's threads"
    monkeypatch.setattr(prewarm, "free_cores", lambda: 1)
    monkeypatch.setattr(prewarm, "compiler_available", lambda: False)
    assert prewarm.reason_not_to_start("cpu") == "no C++ compiler"
    monkeypatch.setattr(prewarm, "compiler_available", lambda: True)
    prewarm.marker().parent.mkdir(parents=True)
    prewarm.marker().write_text("done\n")
    assert prewarm.reason_not_to_start("cpu") == "done on this machine earlier"
    monkeypatch.setenv(prewarm.ENV, "0")
    assert prewarm.reason_not_to_start("cpu") == "BNNZOO_PREWARM=0"


def test_a_lock_left_by_a_dead_set_up_is_taken_over(fresh, monkeypatch):
    FakePopen.made = []
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    lock = prewarm.marker().with_name(prewarm.marker().name + ".lock")
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    assert prewarm.reason_not_to_start("cpu") == "under way in another process"
    old = time.time() - prewarm.STALE_SECONDS - 1
    os.utime(lock, (old, old))
    assert prewarm.start("cpu").startswith("started")
    assert lock.exists() and time.time() - lock.stat().st_mtime < 60


def test_a_run_that_may_compile_says_whether_it_started_one(fresh, monkeypatch):
    FakePopen.made = []
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setattr(prewarm, "compiler_available", lambda: True)
    out = run("cosine_mlp", {"name": "cosine", "n_train": 20, "n_test": 10}, engine="chees", num_samples=4,
              warmup_steps=4, num_chains=2, seed=0, progress=False, threads=1, compile="auto")
    assert out.notes["compile_prewarm"] == "started a background process (pid 4242) for inductor's one-time set-up"
    assert len(FakePopen.made) == 1
    eager = run("cosine_mlp", {"name": "cosine", "n_train": 20, "n_test": 10}, engine="chees", num_samples=4,
                warmup_steps=4, num_chains=2, seed=0, progress=False, threads=1, compile=False)
    assert "compile_prewarm" not in eager.notes
    for name, draws in eager.samples.items():  # the set-up changes nothing a run computes
        assert (out.samples[name] == draws).all()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on the PATH")
def test_the_background_process_compiles_leaves_its_marker_and_drops_its_lock(tmp_path):
    """The child itself, as a run starts it but at normal priority (at its lowest it waits for the busy
    cores of a test run), the inductor cache the suite's and bnnzoo's empty."""
    env = dict(os.environ, BNNZOO_CACHE=str(tmp_path / "cache"))
    lock = tmp_path / "cache" / "prewarm" / f"{prewarm.marker().name}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    subprocess.run([sys.executable, "-c", "from bnnzoo.inference import prewarm; prewarm.main(nice=0)"], env=env,
                   check=True, timeout=600)
    assert (tmp_path / "cache" / "prewarm" / prewarm.marker().name).read_text().endswith(": done\n")
    assert not lock.exists()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on the PATH")
@pytest.mark.parametrize("wrapper", ["cpp", pytest.param("python", marks=pytest.mark.slow)])
def test_the_set_up_builds_the_header_a_compiled_graph_then_uses(tmp_path, monkeypatch, wrapper):
    """The set-up builds a small module, not a compiled graph: the precompiled header it leaves must be
    the one a graph's module asks for (same header, same flags), or a run would still build its own.
    On an empty folder of headers (``$TMPDIR``), the set-up builds one, and a compiled run after it
    builds none: with the C++ wrapper bnnzoo's CPU graphs use, and with inductor's Python wrapper
    (``BNNZOO_CPP_WRAPPER=0``), whose kernels ask for another header."""
    monkeypatch.setenv(compiled_graphs.CPP_WRAPPER_ENV, "1" if wrapper == "cpp" else "0")
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, BNNZOO_CACHE=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"))
    subprocess.run([sys.executable, "-c", "from bnnzoo.inference import prewarm; prewarm.main(nice=0)"], env=env,
                   check=True, timeout=600)
    assert (tmp_path / "cache" / "prewarm" / prewarm.marker().name).read_text().endswith(": done\n")
    headers = sorted((tmp_path / "tmp").rglob("*.gch"))
    assert len(headers) == 1
    built = headers[0].stat().st_mtime_ns
    compiled_run = ("from bnnzoo.inference import run; out = run('cosine_mlp', {'name': 'cosine', 'n_train': 20, "
                    "'n_test': 10}, engine='chees', num_samples=4, warmup_steps=4, num_chains=2, seed=0, progress=False, "
                    "threads=1, compile=True); assert out.compile_seconds > 0")
    subprocess.run([sys.executable, "-c", compiled_run], env=dict(env, BNNZOO_PREWARM="0"), check=True, timeout=600)
    assert sorted((tmp_path / "tmp").rglob("*.gch")) == headers
    assert headers[0].stat().st_mtime_ns == built


def test_where_the_kernel_cannot_be_built_a_compiled_function_sets_up(fresh, monkeypatch):
    def changed():
        raise AttributeError("no load_pybinding in this torch")

    compiled = []
    monkeypatch.setattr(prewarm, "build_a_kernel", changed)
    monkeypatch.setattr(torch, "compile", lambda f, **kwargs: compiled.append(f) or f)
    lock = prewarm.marker().with_name(prewarm.marker().name + ".lock")
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    prewarm.main(nice=0)
    assert len(compiled) == 1
    assert prewarm.marker().read_text().endswith(
        ": done by a compiled function (the kernel alone failed: AttributeError: no load_pybinding in this torch)\n")
    assert not lock.exists()


def test_a_failed_set_up_is_marked_and_not_tried_again(fresh, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(prewarm, "build_a_kernel", broken)
    monkeypatch.setattr(torch, "compile", broken)
    lock = prewarm.marker().with_name(prewarm.marker().name + ".lock")
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    prewarm.main(nice=0)
    assert prewarm.marker().read_text().endswith(": failed (RuntimeError: no compiler today)\n")
    assert not lock.exists()
    assert prewarm.reason_not_to_start("cpu") == "done on this machine earlier"
