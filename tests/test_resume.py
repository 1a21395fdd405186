"""Interrupt and resume, every way of running (``bnnzoo run``, ``compare()``, ``run(checkpoint=...)``):
a run stopped by SIGINT or SIGKILL, in warm-up and in sampling, continues from its checkpoint with
the command the interrupt message prints, and its final draws are those of an uninterrupted run."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import arviz as az
import numpy as np
import pytest

from bnnzoo.inference import run
from bnnzoo.inference.checkpoint import load_object

from .support import interrupt_child as child

ROOT = Path(__file__).resolve().parents[1]
CHILD = ROOT / "tests" / "support" / "interrupt_child.py"
#: the subprocesses run this checkout's bnnzoo
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
#: (signal, phase) of the two stops of one test: each signal once in warm-up and once in sampling
ORDERS = {"sigint-warmup-sigkill-sampling": ((signal.SIGINT, "warm-up"), (signal.SIGKILL, "sampling")),
          "sigkill-warmup-sigint-sampling": ((signal.SIGKILL, "warm-up"), (signal.SIGINT, "sampling"))}


def _command(way: str, out: Path, spec: Path) -> list[str]:
    if way == "cli":
        return [sys.executable, "-m", "bnnzoo.cli", "--threads", "1", "run", str(spec), "--out", str(out),
                "--no-progress", "--checkpoint-every", "1"]
    return [sys.executable, str(CHILD), way, str(out)]


def _continue_command(way: str, err: str) -> list[str]:
    """The command the interrupt message prints, as argv (``bnnzoo`` is this Python's ``-m bnnzoo.cli``)."""
    line = next(line for line in err.splitlines() if "continue with: " in line)
    argv = shlex.split(line.split("continue with: ", 1)[1])
    if way == "cli":
        assert argv[:2] == ["bnnzoo", "run"], line
        return [sys.executable, "-m", "bnnzoo.cli", "--threads", "1", *argv[1:], "--no-progress",
                "--checkpoint-every", "1"]
    return argv


def _progress(folder: Path) -> dict:
    try:
        return json.loads((folder / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def _stop(proc: subprocess.Popen, folder: Path, target: int, sig) -> tuple[str, dict]:
    """Send ``sig`` once the engine in ``folder`` has saved ``target`` iterations; its stderr and
    what its checkpoint holds after the stop."""
    deadline = time.monotonic() + 240
    while _progress(folder).get("iteration", -1) < target and not _progress(folder).get("finished"):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the engine did not start"
        time.sleep(0.002)
    assert not _progress(folder).get("finished"), "the engine finished before it could be stopped"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return err, _progress(folder)


#: the default run's share: every way and each signal in both phases (the other orders: slow)
QUICK = {("cli", "sigint-warmup-sigkill-sampling"), ("compare", "sigkill-warmup-sigint-sampling"),
         ("run", "sigint-warmup-sigkill-sampling")}


@pytest.mark.parametrize("way, order", [
    pytest.param(way, order, id=f"{way}-{order}", marks=() if (way, order) in QUICK else pytest.mark.slow)
    for way in ("cli", "compare", "run") for order in ORDERS])
def test_an_interrupted_run_continues_with_the_printed_command_and_gives_the_uninterrupted_draws(tmp_path, way,
                                                                                                   order):
    spec, out = tmp_path / "run.toml", tmp_path / "out"
    spec.write_text(child.RUN_FILE)
    folder = out if way == "run" else out / "checkpoints" / "chees"
    command = _command(way, out, spec)
    proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    segments, seconds = 1, 0.0
    for sig, phase in ORDERS[order]:
        target = 5 if phase == "warm-up" else child.WARMUP + 5
        err, saved = _stop(proc, folder, target, sig)
        if sig == signal.SIGINT:
            assert proc.returncode == 130, err[-3000:]
            assert "checkpoint" in err, err[-3000:]
            command = _continue_command(way, err)  # from here on, what the message says
        elif way != "cli" and "--resume" not in command:  # killed: no message; Python callers pass resume=True
            command = command + ["--resume"]  # (bnnzoo run continues without it, as bnnzoo sweep)
        assert saved["segments"] == segments, saved  # each resumed segment continued the one before
        assert saved["iteration"] >= target, saved
        if phase == "warm-up":
            assert saved["iteration"] <= child.WARMUP + 1, saved  # stopped in warm-up (one more may end)
        segments, seconds = segments + 1, saved["seconds"]
        proc = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]

    want = run(**child.run_settings(), threads=1, progress=False)
    if way == "run":
        result = load_object(out / "result.pt")
        got, notes, wall = result["draws"].samples, result["draws"].notes, result["wall_time"]
    else:
        idata = az.from_netcdf(str(out / "chees.nc"))
        got = {site: idata.posterior[site].values for site in want.samples}
        notes, wall = idata.posterior.attrs, float(json.loads((out / "cells" / "chees.json").read_text())
                                                   ["row"]["wall_time_s"])
        assert az.from_netcdf(str(out / "rwmh.nc")).posterior.sizes["draw"] == 5  # the first engine, kept
    for site, draws in want.samples.items():
        np.testing.assert_array_equal(np.asarray(got[site]), draws, err_msg=f"{way} {site}")
    assert f"{segments} segments" in notes["resumed"], notes["resumed"]
    assert wall >= seconds  # the row's wall time counts the stopped segments
