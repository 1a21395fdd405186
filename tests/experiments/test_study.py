"""Studies: each cell written as it finishes, finished cells skipped on a second run, a changed
cell run again, a stopped study losing only its unfinished cells, bad input refused first."""

import json
import os
import sys

from tests.support import arviz_calls as az
import numpy as np
import pandas as pd
import pytest

from bnnzoo.experiments import Cell, RayExecutor, Study, compare
from bnnzoo.experiments import study as study_module
from bnnzoo.experiments.executors import executor_from
from bnnzoo.models import zoo

MODEL = zoo.cosine_mlp(hidden=3)
COUNTS = {"num_samples": 15, "warmup_steps": 15, "num_chains": 2}


def acceptance(cell, result):
    return {"acceptance": float(np.mean(result.sample_stats["acceptance_rate"]))}


def rwmh_cells(scale=0.02, seeds=(0, 1, 2)):
    return [Cell(f"rwmh seed={s}", "rwmh", {**COUNTS, "seed": s, "scale": scale}, coords={"seed": s})
            for s in seeds]


@pytest.fixture
def counted(monkeypatch):
    """The labels of the cells that actually ran (``fail``: labels whose run raises)."""
    ran, fail = [], set()
    real = study_module.run

    def run(model, data, engine, **kwargs):  # a cell runs its RunConfig (engine=)
        label = f"{engine.engine} seed={engine.seed}"
        if label in fail:
            raise RuntimeError(f"{label} failed")
        ran.append(label)
        return real(model, data, engine=engine, **kwargs)

    monkeypatch.setattr(study_module, "run", run)
    return ran, fail


def test_each_cell_is_written_and_a_second_run_skips_the_finished_ones(cosine, tmp_path, counted, capsys):
    ran, _ = counted
    first = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert ran == ["rwmh seed=0", "rwmh seed=1", "rwmh seed=2"] and not any(f.earlier for f in first)
    table = pd.read_csv(tmp_path / "study.csv")
    assert list(table.columns) == ["seed", "acceptance"] and list(table.seed) == [0, 1, 2]
    for s in range(3):
        record = json.loads((tmp_path / "cells" / f"rwmh_seed_{s}.json").read_text())
        assert record["label"] == f"rwmh seed={s}" and record["row"]["acceptance"] == first[s].row["acceptance"]
        assert az.from_netcdf(str(tmp_path / f"rwmh_seed_{s}.nc")).posterior.sizes["draw"] == 15
    assert json.loads((tmp_path / "progress.json").read_text()) == {"total": 3, "done": 3, "earlier": 0,
                                                                    "running": []}
    err = capsys.readouterr().err
    assert "bnnzoo study: 1/3 cells done" in err and "running: rwmh seed=1" in err
    assert "bnnzoo study: 3/3 cells done" in err

    again = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert len(ran) == 3  # nothing ran
    assert all(f.earlier and f.run is None for f in again)
    assert [f.row for f in again] == [f.row for f in first]
    assert "3/3 cells done (3 in an earlier run)" in capsys.readouterr().err


def test_a_changed_cell_runs_again_and_resume_false_runs_all(cosine, tmp_path, counted):
    ran, _ = counted
    Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    cells = rwmh_cells()
    cells[1] = rwmh_cells(scale=0.05, seeds=(1,))[0]  # same label, another option: not the finished cell
    ran.clear()
    finished = Study(cells, cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert ran == ["rwmh seed=1"] and [f.earlier for f in finished] == [True, False, True]
    ran.clear()
    with pytest.warns(UserWarning, match=r"starting afresh \(resume=False, --fresh\): 3 finished cell\(s\) in .* run again "
                                          r"\(rwmh seed=0, "):
        Study(cells, cosine, MODEL, row=acceptance, out=tmp_path, resume=False).run()
    assert ran == ["rwmh seed=0", "rwmh seed=1", "rwmh seed=2"]


def test_a_stopped_study_loses_only_its_unfinished_cells(cosine, tmp_path, counted):
    ran, fail = counted
    fail.add("rwmh seed=1")
    with pytest.raises(RuntimeError, match="rwmh seed=1 failed") as stopped:
        Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert [f.cell.label for f in stopped.value.finished] == ["rwmh seed=0"]
    assert (tmp_path / "rwmh_seed_0.nc").exists() and not (tmp_path / "rwmh_seed_1.nc").exists()
    assert list(pd.read_csv(tmp_path / "study.csv").seed) == [0]
    fail.clear()
    ran.clear()
    finished = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert ran == ["rwmh seed=1", "rwmh seed=2"]  # the finished cell is not run again
    assert [f.earlier for f in finished] == [True, False, False]
    assert list(pd.read_csv(tmp_path / "study.csv").seed) == [0, 1, 2]


def test_compare_resumed_gives_every_run_and_the_same_table(cosine, tmp_path, counted):
    ran, _ = counted
    engines = [{"kind": "rwmh", "seed": 0}, {"kind": "rwmh", "seed": 1, "label": "second"}]
    table, runs = compare(MODEL, cosine, engines=engines, checkpoint=tmp_path, progress=False, **COUNTS)
    ran.clear()
    again, reloaded = compare(MODEL, cosine, engines=engines, checkpoint=tmp_path, resume=True, progress=False,
                              **COUNTS)
    assert list(reloaded) == ["rwmh", "second"]
    pd.testing.assert_frame_equal(table, again)
    for label, result in runs.items():  # loaded from the engines' checkpoints, not sampled again
        np.testing.assert_array_equal(result.samples["layers.0.weight"], reloaded[label].samples["layers.0.weight"])
        assert reloaded[label].wall_time == result.wall_time
    assert all(r.model is reloaded["rwmh"].model for r in reloaded.values())


def test_without_a_folder_nothing_is_written_or_skipped(cosine, tmp_path, counted, monkeypatch):
    ran, _ = counted
    monkeypatch.chdir(tmp_path)
    finished = Study(rwmh_cells(seeds=(0, 1)), cosine, MODEL, row=acceptance, progress=False).run()
    assert [f.row["seed"] for f in finished] == [0, 1] and all(f.run is not None for f in finished)
    assert finished[0].run.model is finished[1].run.model and finished[0].run.data is finished[1].run.data
    assert not list(tmp_path.iterdir()) and len(ran) == 2


@pytest.mark.parametrize("make, message", [
    (lambda: Study([], "cosine", MODEL, row=acceptance), "cells: give at least one cell"),
    (lambda: Study(rwmh_cells(seeds=(0, 0)), "cosine", MODEL, row=acceptance),
     "cells[1]: label 'rwmh seed=0' is the same file name as 'rwmh seed=0'"),
    (lambda: Study([Cell("a b", "rwmh"), Cell("a_b", "rwmh")], "cosine", MODEL, row=acceptance),
     "cells[1]: label 'a_b' is the same file name as 'a b'"),
    (lambda: Study([Cell("x", "rwmh", {"scale": -1.0})], "cosine", MODEL, row=acceptance),
     "cell 'x': engine 'rwmh': scale must be a positive number, got -1.0"),
    (lambda: Study([Cell("x", "rwhm")], "cosine", MODEL, row=acceptance), "cell 'x': engine 'rwhm': unknown engine"),
    (lambda: Study(rwmh_cells(), "cosine", MODEL, row=acceptance, executor="dask"),
     "executor must be one of 'inprocess', 'ray' or a RayExecutor, got 'dask'"),
    (lambda: RayExecutor("my-cluster"), "ray address 'my-cluster': expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT'"),
    (lambda: RayExecutor(workers=0), "workers must be an integer >= 1, got 0"),
])
def test_bad_studies_are_refused_before_anything_runs(make, message, counted):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        make()
    assert not counted[0]


def test_an_unreachable_ray_address_is_named_before_any_cell_runs(cosine, tmp_path, counted):
    study = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path,
                  executor=RayExecutor("127.0.0.1:1"))
    with pytest.raises(ConnectionError, match=r"ray address '127.0.0.1:1': cannot reach 127.0.0.1:1"):
        study.run()
    assert not counted[0] and not list(tmp_path.glob("*.nc"))


def test_ray_missing_says_how_to_install_it(cosine, monkeypatch, counted):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    study = Study(rwmh_cells(), cosine, MODEL, row=acceptance, executor="ray")
    with pytest.raises(ImportError, match=r"pip install bnnzoo\[ray\]"):
        study.run()
    assert not counted[0]
    assert executor_from("ray").threads("auto") == 1  # a Ray cell holds one CPU: one torch thread


# ------------------------------------------------------------------ faults
def test_a_full_disk_while_a_cell_is_written_keeps_the_other_files_and_names_the_path(cosine, tmp_path, counted,
                                                                                     monkeypatch):
    """The disk fills up half-way through the second cell's NetCDF: the study stops with an OSError
    naming that file, the first cell's files and the table stay as they were, no temporary file is
    left; run again, the second cell is not sampled again (its finished run is in its checkpoint)."""
    import errno

    ran, _ = counted
    real = study_module.write_atomic

    def full(path, write):
        if path.name == "rwmh_seed_1.nc":
            def half(tmp):
                tmp.write_bytes(b"CDF" + bytes(100))
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, half)
        return real(path, write)

    monkeypatch.setattr(study_module, "write_atomic", full)
    with pytest.raises(OSError, match=f"cannot write {tmp_path / 'rwmh_seed_1.nc'}: No space left on device"):
        Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert not (tmp_path / "rwmh_seed_1.nc").exists() and not list(tmp_path.rglob(".*.tmp"))
    assert az.from_netcdf(str(tmp_path / "rwmh_seed_0.nc")).posterior.sizes["draw"] == 15
    assert list(pd.read_csv(tmp_path / "study.csv").seed) == [0]
    result = tmp_path / "checkpoints" / "rwmh_seed_1" / "result.pt"
    sampled = result.stat().st_mtime_ns
    monkeypatch.setattr(study_module, "write_atomic", real)
    ran.clear()
    finished = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert [f.earlier for f in finished] == [True, False, False]
    assert (tmp_path / "rwmh_seed_1.nc").exists() and list(pd.read_csv(tmp_path / "study.csv").seed) == [0, 1, 2]
    assert result.stat().st_mtime_ns == sampled  # its run loaded, not sampled again


def test_a_corrupted_cell_record_runs_that_cell_again(cosine, tmp_path, counted):
    ran, _ = counted
    Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    (tmp_path / "cells" / "rwmh_seed_2.json").write_text('{"label": "rwmh seed=2", "fingerpr')
    ran.clear()
    with pytest.warns(UserWarning, match=r"record .*rwmh_seed_2\.json is corrupted.*that cell runs again"):
        finished = Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert [f.earlier for f in finished] == [True, True, False]
    assert json.loads((tmp_path / "cells" / "rwmh_seed_2.json").read_text())["label"] == "rwmh seed=2"


def test_two_studies_in_one_folder_the_second_is_refused(cosine, tmp_path, counted):
    from bnnzoo.inference.checkpoint import FolderLocked, folder_lock

    with folder_lock(tmp_path, "output folder"):  # another study (process) at work there
        with pytest.raises(FolderLocked, match=f"output folder {tmp_path} is in use by process {os.getpid()}"):
            Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()
    assert not counted[0] and not list(tmp_path.glob("*.nc"))
    assert len(Study(rwmh_cells(), cosine, MODEL, row=acceptance, out=tmp_path).run()) == 3  # free again
