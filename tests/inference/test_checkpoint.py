"""Checkpoints: a run stopped at a random draw (SIGINT or SIGKILL) and resumed gives the
draws of an uninterrupted run bit for bit; a checkpoint from another run is refused."""

import errno
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bnnzoo.inference import run
from bnnzoo.inference.checkpoint import (Checkpoint, CheckpointCorrupt, CheckpointMismatch, FolderLocked, Interrupted,
                                        fingerprint, load_object, save_object)
from bnnzoo.models import zoo

from ..support import resume_child

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "support" / "resume_child.py"


#: one engine per family for the real-signal test (every engine is stopped in-process below)
FAMILIES = ("nuts", "chees", "proximal_hmc", "rwmh", "sghmc", "sgld_sa", "sghmc_group_ss", "svi")
#: the default run's share of them: a Pyro kernel, a batched bnnzoo kernel and VI (each stop
#: starts a fresh process, about 3.5 s of imports; all eight families are the slow test)
QUICK_FAMILIES = ("nuts", "chees", "svi")


def _launch(out: Path, families, resume: bool) -> subprocess.Popen:
    argv = [sys.executable, str(CHILD), str(out), *families] + (["--resume"] if resume else [])
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _position(out: Path, engine: str, per_chain: int) -> float:
    """Iterations the running ``engine`` has saved (inf once finished, -1 before it starts)."""
    try:
        progress = json.loads((out / engine / "progress.json").read_text())
    except (OSError, ValueError):
        return -1
    if progress.get("finished"):
        return float("inf")
    return progress["chain"] * per_chain + progress["iteration"]


def _stop_at(proc: subprocess.Popen, out: Path, engine: str, target: int, per_chain: int, sig) -> bool:
    """Send ``sig`` once ``engine`` has saved ``target`` iterations; False when it finished first."""
    while proc.poll() is None:
        position = _position(out, engine, per_chain)
        if position == float("inf"):
            return False
        if position >= target:
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
            if sig == signal.SIGINT:  # a final checkpoint, and where it is
                assert "checkpoint written to" in err and "resume=True" in err, err[-2000:]
            return True
        time.sleep(0.002)
    raise AssertionError(f"the run ended before {engine} reached iteration {target}: {proc.stderr.read()[-2000:]}")


def _assert_same(got, want, label: str) -> None:
    for site, draws in want.samples.items():
        np.testing.assert_array_equal(got.samples[site], draws, err_msg=f"{label} {site}")
    for stat, values in want.sample_stats.items():
        np.testing.assert_array_equal(got.sample_stats[stat], values, err_msg=f"{label} {stat}")
    if want.vi is not None:
        for key, values in want.vi.guide.items():
            np.testing.assert_array_equal(got.vi.guide[key], values, err_msg=f"{label} guide {key}")


@pytest.mark.parametrize("families", [pytest.param(QUICK_FAMILIES, id="three-families"),
                                      pytest.param(FAMILIES, id="every-family", marks=pytest.mark.slow)])
def test_killed_and_resumed_runs_give_the_uninterrupted_draws(tmp_path, families):
    """One engine of each family is stopped twice at random iterations, first by SIGINT (the run
    writes a final checkpoint and says where), then by SIGKILL (the last periodic checkpoint must be
    intact), and resumed in a fresh process."""
    rng = random.Random(0)
    proc = _launch(tmp_path, families, resume=False)
    stops = 0
    for engine in families:
        chains, per_chain = resume_child.iterations(engine)
        total = chains * per_chain
        first = rng.randint(1, total - 2)
        second = rng.randint(first + 1, total - 1)
        for target, sig in ((first, signal.SIGINT), (second, signal.SIGKILL)):
            if _stop_at(proc, tmp_path, engine, target, per_chain, sig):
                stops += 1
                proc = _launch(tmp_path, families, resume=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert stops >= 2 * len(families) - 2  # (an engine may finish before its stop is sent)
    for engine in families:
        _assert_same(load_object(tmp_path / engine / "result.pt")["draws"], run(**resume_child.settings(engine)),
                     engine)


def _stopped_after_a_save_and_resumed(tmp_path, settings: dict, stop_after: int, monkeypatch, label: str) -> None:
    """Run ``settings`` stopped right after save number ``stop_after`` (as a kill after a checkpoint
    leaves it), resume it, and compare with the run never stopped."""
    want = run(**settings)
    save, saves = Checkpoint.save, []

    def stopping_save(self, state, **progress):
        save(self, state, **progress)
        saves.append(1)
        if len(saves) == stop_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", stopping_save)
    with pytest.raises(KeyboardInterrupt):
        run(**settings, checkpoint=tmp_path, checkpoint_every=1)
    monkeypatch.setattr(Checkpoint, "save", save)
    _assert_same(run(**settings, checkpoint=tmp_path, resume=True, checkpoint_every=1), want, label)


@pytest.mark.parametrize("engine", list(resume_child.ENGINES))
def test_every_engine_resumes_bit_identically(tmp_path, engine, monkeypatch):
    """Stopped right after a random save, then resumed."""
    chains, per_chain = resume_child.iterations(engine)
    stop_after = random.Random(engine).randint(1, chains * per_chain - 1)
    _stopped_after_a_save_and_resumed(tmp_path, resume_child.settings(engine), stop_after, monkeypatch, engine)


@pytest.mark.parametrize("stop_after", [2, 5])
def test_mams_stopped_within_its_burn_in_or_after_it_resumes_bit_identically(tmp_path, stop_after, monkeypatch):
    """The burn-in's velocity and step-size tuner are warm-up state: a save within the burn-in (its
    4 of the 8 warm-up steps) or after it resumes to the draws of the run never stopped."""
    settings = {**resume_child.settings("mams"), "burn_in": 0.5}
    _stopped_after_a_save_and_resumed(tmp_path, settings, stop_after, monkeypatch, "mams burn-in")


@pytest.mark.parametrize("stop_after", [3, 9])
def test_mclmc_with_each_chain_tuned_stopped_in_or_after_warm_up_resumes_bit_identically(tmp_path, stop_after,
                                                                                         monkeypatch):
    """``pool_chains=False``: the per-chain step sizes, their tuner's averages and the per-chain L are
    warm-up state and parameters that a save within warm-up or after it carries to the resumed run."""
    settings = {**resume_child.settings("mclmc"), "pool_chains": False}
    _stopped_after_a_save_and_resumed(tmp_path, settings, stop_after, monkeypatch, "mclmc per chain")


# ----------------------------------------------------------------- in-process
SMALL = dict(num_samples=4, warmup_steps=4, num_chains=2, seed=1)


@pytest.fixture(scope="module")
def model():
    return zoo.cosine_mlp(hidden=3)


def test_resuming_a_finished_engine_loads_it_without_running(tmp_path, model, monkeypatch):
    first = run(model, "cosine", engine="rwmh", checkpoint=tmp_path, **SMALL)
    from bnnzoo.inference.engines import registry

    monkeypatch.setattr(registry.Engine, "run", lambda *a, **k: pytest.fail("a finished engine ran again"))
    again = run(model, "cosine", engine="rwmh", checkpoint=tmp_path, resume=True, **SMALL)
    for site in first.samples:
        np.testing.assert_array_equal(first.samples[site], again.samples[site])
    assert again.wall_time == first.wall_time


@pytest.mark.parametrize("change, field", [
    ({"scale": 0.5}, "options.scale"),
    ({"seed": 2}, "run.seed"),
    ({"data": {"name": "cosine", "n_train": 31}}, "data.x_train"),
    ({"engine": "chees"}, "engine"),
])
def test_a_checkpoint_from_another_run_is_refused_naming_what_differs(tmp_path, model, change, field):
    run(model, "cosine", engine="rwmh", checkpoint=tmp_path, **SMALL)
    settings = {**SMALL, "data": "cosine", "engine": "rwmh", **change}
    data = settings.pop("data")
    with pytest.raises(CheckpointMismatch, match=field.replace(".", r"\.")):
        run(model, data, checkpoint=tmp_path, resume=True, **settings)


def test_another_spec_is_refused(tmp_path, model):
    run(model, "cosine", engine="rwmh", checkpoint=tmp_path, **SMALL)
    with pytest.raises(CheckpointMismatch, match=r"model\.layers"):
        run(zoo.cosine_mlp(hidden=4), "cosine", engine="rwmh", checkpoint=tmp_path, resume=True, **SMALL)


def test_without_resume_the_folder_starts_afresh(tmp_path, model):
    run(model, "cosine", engine="rwmh", checkpoint=tmp_path, **SMALL)
    fresh = run(model, "cosine", engine="rwmh", checkpoint=tmp_path, **{**SMALL, "seed": 2})  # no mismatch
    assert fresh.options["seed"] == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"resume": True}, "checkpoint=DIR"),
    ({"checkpoint": "x", "checkpoint_every": 0}, "checkpoint_every"),
    ({"checkpoint": "x", "checkpoint_seconds": -1.0}, "checkpoint_seconds"),
    ({"checkpoint": "x", "resume": "yes"}, "resume"),
])
def test_bad_checkpoint_arguments_are_named(tmp_path, model, kwargs, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        run(model, "cosine", engine="rwmh", **SMALL, **kwargs)


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    path = tmp_path / "state.pt"
    save_object({"step": 1, "theta": torch.arange(3.0)}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        save_object({"step": 2, "bad": Unpicklable()}, path)
    assert load_object(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]  # no temporary left behind


def test_views_keep_sharing_their_storage(tmp_path):
    base = torch.zeros(4)
    save_object({"base": base, "view": base[1:3]}, tmp_path / "s.pt")
    back = load_object(tmp_path / "s.pt")
    back["view"].fill_(1.0)
    assert back["base"].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_fingerprint_names_each_field():
    fp = fingerprint(engine="nuts", options={"step_size": 0.1}, data={"x": np.zeros(3)})
    assert set(fp) == {"engine", "options.step_size", "data.x"}
    ck = Checkpoint.__new__(Checkpoint)
    ck.directory, ck.fingerprint = Path("d"), fp
    with pytest.raises(CheckpointMismatch, match=r"options\.step_size: checkpoint 0\.2, now 0\.1"):
        ck._check({**fp, "options.step_size": "0.2"})


# ------------------------------------------------------------- interrupts and faults
def _rwmh(tmp_path, **kwargs):
    return run(zoo.cosine_mlp(hidden=3), "cosine", engine="rwmh", checkpoint=tmp_path, progress=False,
               **{**SMALL, "num_samples": 6, "warmup_steps": 6, **kwargs})


def _sigint_soon(delay: float = 0.0) -> None:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT)).start()


@pytest.fixture
def rwmh_sample(monkeypatch):
    """``calls``: the rwmh kernel's transitions so far; ``hooks[n]()`` runs inside transition ``n``."""
    from bnnzoo.inference import ENGINES

    kernel = ENGINES["rwmh"].kernel
    real, calls, hooks = kernel.sample_flat, [0], {}  # one iteration of bnnzoo's MCMC loop

    def sample_flat(self, theta):
        calls[0] += 1
        if calls[0] in hooks:
            hooks[calls[0]]()
        return real(self, theta)

    monkeypatch.setattr(kernel, "sample_flat", sample_flat)
    return calls, hooks


def test_ctrl_c_stops_at_the_end_of_the_iteration_with_a_final_save(tmp_path, model, rwmh_sample):
    """SIGINT inside iteration 4: that iteration ends, it is saved, and no other one starts."""
    calls, hooks = rwmh_sample
    want = run(model, "cosine", engine="rwmh", progress=False, **{**SMALL, "num_samples": 6, "warmup_steps": 6})
    calls[0] = 0
    hooks[4] = lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2))
    with pytest.raises(Interrupted, match="at warm-up iteration 4 of 6"):
        _rwmh(tmp_path)
    assert calls[0] == 4
    assert json.loads((tmp_path / "progress.json").read_text())["iteration"] == 4
    hooks.clear()
    _assert_same(_rwmh(tmp_path, resume=True), want, "rwmh")


def test_ctrl_c_in_an_iteration_that_does_not_end_stops_it_and_the_last_save_continues(tmp_path, model,
                                                                                      rwmh_sample):
    """An iteration that would take a minute (a compile, a long warm-up step): Ctrl-C stops the run
    within the grace of 2 s, nothing is saved at the stop, and the resumed run gives the draws of an
    uninterrupted one."""
    calls, hooks = rwmh_sample
    want = run(model, "cosine", engine="rwmh", progress=False, **{**SMALL, "num_samples": 6, "warmup_steps": 6})
    calls[0], ticks = 0, [0]

    def minute():  # 600 ticks of 0.1 s unless stopped
        _sigint_soon(0.3)
        for ticks[0] in range(600):
            time.sleep(0.1)

    hooks[8] = minute
    with pytest.raises(Interrupted, match=r"in the middle of iteration 8 of chain 0 .*holds its last save: "
                                          r"chain 0, iteration 6"):
        _rwmh(tmp_path, checkpoint_every=3)
    assert ticks[0] < 100  # stopped within 10 s (the grace is 2 s), not after the minute
    assert json.loads((tmp_path / "progress.json").read_text())["iteration"] == 6
    hooks.clear()
    _assert_same(_rwmh(tmp_path, resume=True, checkpoint_every=3), want, "rwmh")


def test_a_resumed_runs_wall_time_counts_every_segment(tmp_path, model, rwmh_sample):
    calls, hooks = rwmh_sample
    for n in range(1, 6):
        hooks[n] = lambda: time.sleep(0.05)
    hooks[5] = lambda: (time.sleep(0.05), os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(Interrupted):
        _rwmh(tmp_path)
    first = json.loads((tmp_path / "progress.json").read_text())
    assert first["seconds"] >= 0.25 and first["segments"] == 1
    hooks.clear()
    resumed = _rwmh(tmp_path, resume=True)
    assert resumed.wall_time >= first["seconds"]
    assert resumed.notes["resumed"].startswith("continued from chain 0, iteration 5; 2 segments")
    assert _rwmh(tmp_path, resume=True).wall_time == resumed.wall_time  # the finished run, loaded


def _stopped_rwmh(tmp_path):
    """A run stopped after its fourth iteration's save (state, draws and progress on disk)."""
    save, saves = Checkpoint.save, []

    def stopping(self, state, **progress):
        save(self, state, **progress)
        saves.append(1)
        if len(saves) == 9:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Checkpoint, "save", stopping)
        with pytest.raises(KeyboardInterrupt):
            _rwmh(tmp_path, checkpoint_every=1)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) * 3 // 4] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, damage", [
    ("state.pt", _truncate), ("state.pt", _flip), ("fingerprint.pt", _flip), ("draws", _flip),
    ("progress.json", lambda p: p.write_text('{"chain": 0, "itera')),
])
def test_a_truncated_or_corrupted_checkpoint_is_refused_naming_the_file(tmp_path, model, name, damage):
    """Never loaded: the resume stops with CheckpointCorrupt naming the file; a run without resume
    starts afresh in the same folder."""
    _stopped_rwmh(tmp_path)
    path = sorted((tmp_path / "draws").iterdir())[-1] if name == "draws" else tmp_path / name
    damage(path)
    with pytest.raises(CheckpointCorrupt, match=re.escape(str(path))):
        _rwmh(tmp_path, resume=True, checkpoint_every=1)
    want = run(model, "cosine", engine="rwmh", progress=False, **{**SMALL, "num_samples": 6, "warmup_steps": 6})
    _assert_same(_rwmh(tmp_path, checkpoint_every=1), want, "rwmh afresh")


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint_and_names_the_file(tmp_path, model,
                                                                                    monkeypatch):
    """The disk fills up half-way through the fifth write of ``state.pt``: the run stops with an
    OSError (ENOSPC) naming ``state.pt``, the previous one loads, no temporary file is left, and
    the resumed run gives the uninterrupted draws."""
    from bnnzoo.inference import checkpoint as module

    writes = []

    class Full(io.FileIO):
        def write(self, data):
            super().write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    def opener(path, mode="r", *args, **kwargs):
        if mode == "wb" and Path(path).name.startswith(".state.pt"):
            writes.append(path)
            if len(writes) == 5:
                return Full(path, "wb")
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(module, "open", opener, raising=False)
    with pytest.raises(OSError, match=re.escape(f"cannot write {tmp_path / 'state.pt'}")) as error:
        _rwmh(tmp_path, checkpoint_every=1)
    assert error.value.errno == errno.ENOSPC
    assert load_object(tmp_path / "state.pt", None)["iteration"] == 4
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob("draws/.*.tmp"))
    monkeypatch.undo()
    want = run(model, "cosine", engine="rwmh", progress=False, **{**SMALL, "num_samples": 6, "warmup_steps": 6})
    _assert_same(_rwmh(tmp_path, resume=True, checkpoint_every=1), want, "rwmh")


def test_a_second_process_in_the_same_checkpoint_folder_is_refused(tmp_path, model):
    """Another process holds the folder (its lock): the run is refused before it clears or reads
    anything, naming the folder and the process; once that process ends, the folder is free."""
    _rwmh(tmp_path)
    finished = (tmp_path / "result.pt").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import fcntl, sys, time
        f = open({str(tmp_path / '.lock')!r}, "a+")
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0); f.truncate(); f.write("process 4242 on elsewhere"); f.flush()
        print("locked", flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLocked, match=re.escape(f"checkpoint folder {tmp_path} is in use by process "
                                                         f"4242 on elsewhere")):
            _rwmh(tmp_path, seed=2)  # without resume: it would clear the folder
        assert (tmp_path / "result.pt").read_bytes() == finished
    finally:
        holder.kill()
        holder.wait()
    assert _rwmh(tmp_path, seed=2).options["seed"] == 2
