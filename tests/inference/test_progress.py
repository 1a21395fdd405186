"""Progress: on by default; on a non-terminal, a line with phase, iterations, rate and time left."""

import io
import re

from bnnzoo.inference import run
from bnnzoo.inference.progress import ProgressLines, use_bar
from bnnzoo.models import zoo


def test_lines_name_phase_position_rate_and_time_left():
    out = io.StringIO()
    lines = ProgressLines("chees", {"warm-up": 2, "sampling": 3}, every=0.0, stream=out)
    for i in range(2):
        lines(None, {}, "Warmup", i)
    for i in range(3):
        lines(None, {}, "Sample", i)
    text = out.getvalue().splitlines()
    assert len(text) == 5
    assert text[0].startswith("bnnzoo chees: warm-up 1/2 (50%), ")
    assert re.fullmatch(r"bnnzoo chees: sampling 3/3 \(100%\), [\d.]+ it/s, about 0 s left", text[-1])


def test_lines_are_spaced_but_the_last_is_always_written():
    out = io.StringIO()
    lines = ProgressLines("rwmh", {"warm-up": 50, "sampling": 50}, every=3600.0, stream=out)
    for i in range(50):
        lines(None, {}, "Warmup", i)
    for i in range(50):
        lines(None, {}, "Sample", i)
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]
    assert "sampling 50/50" in out.getvalue()


def test_run_talks_by_default_and_progress_false_silences_it(capsys):
    model = zoo.cosine_mlp(hidden=3)
    run(model, "cosine", engine="rwmh", num_samples=3, warmup_steps=3, num_chains=2)
    assert not use_bar()  # pytest captures stderr: lines, not a bar
    assert "bnnzoo rwmh: sampling 3/3 (100%)" in capsys.readouterr().err
    run(model, "cosine", engine="rwmh", num_samples=3, warmup_steps=3, num_chains=2, progress=False)
    assert "bnnzoo" not in capsys.readouterr().err


def test_after_a_resume_the_time_left_is_that_of_the_remaining_work(monkeypatch):
    """A run resumed at iteration 150 of 200 has 50 left: at 10 it/s (this process's rate) about 5 s,
    whatever the iterations before the resume took."""
    from bnnzoo.inference import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    lines = ProgressLines("chees", {"warm-up": 100, "sampling": 100}, every=0.0, stream=out)
    lines.resumed(150)
    for i in range(50, 100):
        clock[0] += 0.1
        lines(None, {}, "Sample", i)
        if i == 99 - 40:  # 10 done in this process, 40 left
            assert out.getvalue().splitlines()[-1].endswith("sampling 60/100 (60%), 10.0 it/s, about 4 s left")
    assert out.getvalue().splitlines()[-1].endswith("sampling 100/100 (100%), 10.0 it/s, about 0 s left")
