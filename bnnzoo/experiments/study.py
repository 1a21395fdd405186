"""Studies: many independent runs (engines x options x seeds), each written as it finishes.

A :class:`Study` runs a list of :class:`Cell` s, each one :func:`bnnzoo.inference.run`
of one engine with its options and seed, on an executor (:mod:`.executors`: in this
process by default, or on Ray). :func:`~bnnzoo.experiments.compare`, the acceptance,
efficiency and size sweeps and :func:`~bnnzoo.experiments.sweep` are studies.

With an output folder ``out``, as soon as a cell finishes the study writes

* ``<label>.nc``: the cell's InferenceData (:func:`~bnnzoo.diagnostics.to_inference_data`);
* ``cells/<label>.json``: its row and the fingerprint of what produced it (engine,
  options with their defaults, model spec, data, dtype, row function), written last:
  a cell is finished when this file matches;
* the table of the cells finished so far (``table_name``) and ``progress.json``
  (cells done, total, running).

Each file is written under a temporary name and renamed. A running cell keeps its
engine checkpoint in ``checkpoints/<label>/`` (:mod:`bnnzoo.inference.checkpoint`;
a study that keeps runs keeps it after the cell finishes, to load the run from).
Running the same study again (``resume=True``, the default) skips the finished
cells and continues the ones that were running from their checkpoints (a first
run's too: ``checkpoints/<label>/cell.json`` is written before its cell starts); a
cell whose fingerprint changed runs afresh. ``resume=False`` runs every cell
afresh and warns when that drops finished cells. A killed study loses only the
work since the running cells' last checkpoints. On Ctrl-C or an error, the
exception carries ``finished``: the cells done so far. While it runs, the folder
is locked (``.lock``): a second study in the same folder is refused.

>>> from bnnzoo.experiments import Cell, Study
>>> cells = [Cell(f"rwmh seed={s}", "rwmh", {"seed": s, "num_samples": 100}) for s in range(4)]
>>> finished = Study(cells, "cosine", "cosine_mlp", row=lambda cell, run: {"accept": run.sample_stats[
...     "acceptance_rate"].mean()}, out="out/study", executor="ray").run()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import time
import warnings
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from .. import validation
from ..diagnostics import to_inference_data
from ..inference import RunConfig, run, run_config, run_settings
from ..inference.checkpoint import (CHECKPOINT_SECONDS, CheckpointCorrupt, fingerprint, folder_lock, read_json,
                                    write_atomic)
from ..inference.engines import resolve
from ..results import Run
from .executors import executor_from

__all__ = ["Cell", "Finished", "Study", "safe_label", "unique_labels"]


@dataclass(frozen=True)
class Cell:
    """One run of a study.

    Attributes
    ----------
    label : str
        Unique in its study; names its files (:func:`safe_label`).
    engine : str
        A key of :data:`bnnzoo.inference.ENGINES`.
    options : dict
        Run counts (``num_samples``, ``warmup_steps``, ``num_chains``, ``seed``) and
        the engine's options, as :func:`bnnzoo.inference.run` takes them.
    model : optional
        The cell's own model (a spec, a ``BNN``, a zoo name); None: the study's.
    coords : dict
        The cell's place in the study (grid values, seed, ...): the first columns of its row.
    config : RunConfig, optional
        The checked run configuration of ``engine`` and ``options``
        (:func:`~bnnzoo.inference.run_config`), where the code that built the cell has checked it
        (:func:`~bnnzoo.experiments.compare`, :func:`~bnnzoo.experiments.grid_cells`); None: the
        study builds it. ``options`` stays the cell's record (its fingerprint, its file).
    """

    label: str
    engine: str
    options: Mapping[str, Any] = field(default_factory=dict)
    model: Any = None
    coords: Mapping[str, Any] = field(default_factory=dict)
    config: RunConfig | None = field(default=None, repr=False, compare=False)


@dataclass
class Finished:
    """A finished cell: its row, and its :class:`~bnnzoo.results.Run` (None when the study
    does not keep runs, or the cell finished in an earlier call and was loaded from disk)."""

    cell: Cell
    row: dict
    run: Run | None = None
    earlier: bool = False


@dataclass
class _Outcome:
    """What a cell sends back from wherever it ran: its row, and its run without model and data."""

    row: dict
    run: Run


def safe_label(label: str) -> str:
    """A run label as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def unique_labels(labels) -> list[str]:
    """The labels, repeats numbered: ``a, a, b`` -> ``a, a#2, b``."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def _execute(data, cell: Cell, model, config: RunConfig, row: Callable) -> _Outcome:
    """Run one cell (in this process or a worker) as ``config`` says and compute its row where its run is."""
    result = run(model, data, engine=config)
    return _Outcome({**cell.coords, **row(cell, result)}, dataclasses.replace(result, model=None, data=None))


# ------------------------------------------------------------------ files
def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then renamed over it: a kill or a full disk
    leaves the previous file whole (the error names ``path``)."""
    write_atomic(path, write)


def _read_record(path: Path) -> dict | None:
    """A JSON record, or None (with a warning naming it) when it is damaged: its cell runs again."""
    try:
        record = read_json(path, "record")
    except CheckpointCorrupt as err:
        warnings.warn(f"{err}; that cell runs again", stacklevel=3)
        return None
    return record if isinstance(record, dict) else None


def _plain(value):
    """A JSON value from a NumPy scalar (anything else by its repr)."""
    return value.item() if hasattr(value, "item") else repr(value)


def _write_json(path: Path, value) -> None:
    _write_atomic(path, lambda p: p.write_text(json.dumps(value, default=_plain)))


class _Store:
    """A study's output folder (module docstring)."""

    def __init__(self, out, table_name: str, table: Callable[[list[dict]], pd.DataFrame]):
        self.out, self.table_name, self.table = Path(out), table_name, table

    def record(self, cell: Cell) -> Path:
        return self.out / "cells" / f"{safe_label(cell.label)}.json"

    def netcdf(self, cell: Cell) -> Path:
        return self.out / f"{safe_label(cell.label)}.nc"

    def checkpoint(self, cell: Cell) -> Path:
        return self.out / "checkpoints" / safe_label(cell.label)

    def finished_row(self, cell: Cell, print_: dict) -> dict | None:
        """The stored row of a cell finished with this fingerprint, else None."""
        path = self.record(cell)
        if not path.exists() or not self.netcdf(cell).exists():
            return None
        record = _read_record(path)
        return record["row"] if record is not None and record.get("fingerprint") == print_ else None

    def forget(self, cell: Cell) -> bool:
        """Drop the cell's record; whether there was one."""
        path = self.record(cell)
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def prepare(self, cell: Cell, print_: dict, resume: bool) -> None:
        """The cell's engine checkpoint folder, ready for a run with ``resume=True``: kept when it was
        written by this very cell and ``resume``, else emptied; ``cell.json`` says whose it is. (A
        first run writes it too, so that the run it starts can be continued, a retried task's included.)"""
        folder = self.checkpoint(cell)
        path = folder / "cell.json"
        if resume and path.exists() and _read_record(path) == print_:
            return
        if folder.exists():
            with folder_lock(folder, f"checkpoint folder of cell {cell.label!r}"):  # not in use elsewhere
                for item in folder.iterdir():
                    if item.name != ".lock":
                        shutil.rmtree(item) if item.is_dir() else item.unlink()
        _write_json(path, print_)

    def save(self, cell: Cell, print_: dict, result: Run, row: dict, keep_checkpoint: bool) -> None:
        """The cell's NetCDF, then its record; its engine checkpoint (the finished run, for
        :meth:`Study.load_run`) is removed unless kept."""
        _write_atomic(self.netcdf(cell), lambda p: to_inference_data(result).to_netcdf(str(p)))
        _write_json(self.record(cell), {"label": cell.label, "fingerprint": print_, "row": row})
        if not keep_checkpoint:
            shutil.rmtree(self.checkpoint(cell), ignore_errors=True)

    def write_table(self, rows: list[dict]) -> None:
        table = self.table(rows)
        _write_atomic(self.out / self.table_name, lambda p: table.to_csv(p, index=False))

    def write_progress(self, **progress) -> None:
        _write_json(self.out / "progress.json", progress)


# ------------------------------------------------------------------ study
class Study:
    """Cells run on an executor, each written as it finishes (module docstring).

    Parameters
    ----------
    cells : sequence of Cell
    data
        As for :func:`bnnzoo.inference.run`; resolved once (a data set name with the first
        cell's seed), the same ``Dataset`` goes to every cell.
    model : optional
        The model of the cells that have none of their own.
    row : callable
        ``row(cell, run) -> dict``: the cell's row, computed where the cell ran (a
        module-level function, so that it reaches Ray workers). The cell's ``coords`` come first.
    table : callable, optional
        ``table(rows) -> DataFrame`` for the table file (default: the rows as they are).
    table_name : str
        The table's file in ``out``.
    out : path, optional
        The study's folder; None: nothing is written and nothing skipped.
    resume : bool
        Skip the cells finished in ``out`` and continue the running ones from their
        checkpoints; False: every cell afresh.
    executor : "inprocess", "ray" or an executor
        Where the cells run (:mod:`bnnzoo.experiments.executors`).
    name : str
        What the progress lines call the study.
    progress : bool
        Lines of cells done / total and the running ones (and, in this process, each engine's own).
    threads, dtype, device, checkpoint_every, checkpoint_seconds
        As for :func:`bnnzoo.inference.run` (threads: in this process; a Ray cell runs on one).
    keep_runs : bool
        Keep each cell's ``Run`` in :attr:`Finished.run`, and its engine checkpoint in ``out`` to
        load it from in a later call (:meth:`load_run`); else only its row (less memory and disk).

    Every cell's engine and options (into its :class:`~bnnzoo.inference.RunConfig`, once: a cell
    that comes with its config is not checked again), the settings (:func:`~bnnzoo.inference.run_settings`,
    once for every cell), every model and the data are checked when the study is built, before any
    cell runs: a ``ValueError`` naming the cell, the field and the value. Each cell then runs its
    config under the study's settings (its own checkpoint folder; one thread on Ray).
    """

    def __init__(self, cells: Sequence[Cell], data, model=None, *, row: Callable[[Cell, Run], dict],
                 table: Callable[[list[dict]], pd.DataFrame] | None = None, table_name: str = "study.csv",
                 out=None, resume: bool = True, executor="inprocess", name: str = "study", progress: bool = True,
                 threads="auto", dtype=None, device=None, checkpoint_every: int | None = None,
                 checkpoint_seconds: float | None = CHECKPOINT_SECONDS, keep_runs: bool = True):
        self.cells, self.configs = _check_cells(cells)
        for flag, value in (("resume", resume), ("keep_runs", keep_runs)):
            validation.boolean(flag, value)
        self.settings = run_settings(progress=progress, checkpoint_every=checkpoint_every,
                                     checkpoint_seconds=checkpoint_seconds, threads=threads, dtype=dtype,
                                     device=device)
        self.executor = executor_from(executor)
        self.row, self.name, self.progress, self.keep_runs = row, name, progress, keep_runs
        self.resume = resume
        seed = self.cells[0].options.get("seed", 0)
        first = model if model is not None else self.cells[0].model
        self.model, self.data = resolve(first, data, seed, self.settings.dtype)
        self.models = self._resolve_models(self.settings.dtype, seed)
        self.store = None if out is None else _Store(out, table_name, table or pd.DataFrame)
        data_print = fingerprint(data={"x_train": self.data.x_train, "y_train": self.data.y_train,
                                       "x_test": self.data.x_test, "y_test": self.data.y_test})
        # the dtype as given: the fingerprints of folders written before stay valid
        self.prints = [{**self._fingerprint(cell, i, dtype), **data_print} for i, cell in enumerate(self.cells)]

    def _resolve_models(self, dtype, seed) -> list:
        """Each cell's BNN; cells that share a model object share its BNN (no model: the study's)."""
        resolved = {id(None): self.model}
        for cell in self.cells:
            if id(cell.model) not in resolved:
                try:
                    resolved[id(cell.model)] = resolve(cell.model, self.data, seed, dtype)[0]
                except ValueError as err:
                    raise ValueError(f"cell {cell.label!r}: {err}") from None
        return [resolved[id(cell.model)] for cell in self.cells]

    def _fingerprint(self, cell: Cell, index: int, dtype) -> dict[str, str]:
        defaults = self.configs[index].spec.defaults()
        return fingerprint(engine=cell.engine, options={**defaults, **cell.options},
                           model=self.models[index].spec.to_dict(), dtype=str(dtype),
                           device=str(self.settings.device),
                           row=f"{self.row.__module__}.{self.row.__qualname__}")

    # ------------------------------------------------------------ running
    def run(self) -> list[Finished]:
        """Run the cells not finished yet; every cell's :class:`Finished`, in cell order. The output
        folder is locked meanwhile: a second process is refused (:class:`FolderLocked`)."""
        if self.store is None:
            return self._run()
        with folder_lock(self.store.out, "output folder"):
            return self._run()

    def _run(self) -> list[Finished]:
        finished = self._earlier()
        self._start, self._running = time.monotonic(), []
        if finished:
            self._report(finished)
        pending = [i for i in range(len(self.cells)) if i not in finished]
        try:
            if pending:
                self._run_pending(pending, finished)
        except BaseException as stop:  # Ctrl-C, an error: hand on what finished
            stop.finished = [finished[i] for i in sorted(finished)]
            raise
        return [finished[i] for i in range(len(self.cells))]

    def _run_pending(self, pending: list[int], finished: dict[int, Finished]) -> None:
        """The pending cells on the executor, each written (and added to ``finished``) as it finishes."""
        def started(i: int) -> None:
            self._running.append(self.cells[i].label)
            self._report(finished)

        with self.executor as executor:  # connects here: a bad address fails before any cell runs
            jobs = ((i, self._job(i, executor)) for i in pending)
            with closing(executor.map(_execute, (self.data,), jobs, started)) as outcomes:
                for i, outcome in outcomes:
                    self._running.remove(self.cells[i].label)
                    finished[i] = self._finish(i, outcome, finished)
                    if len(finished) + len(self._running) == len(self.cells):  # else the next start reports
                        self._report(finished)

    def _earlier(self) -> dict[int, Finished]:
        """The cells finished in ``out`` by an earlier call (none without ``resume``)."""
        if self.store is None:
            return {}
        done, dropped = {}, []
        for i, cell in enumerate(self.cells):
            row = self.store.finished_row(cell, self.prints[i]) if self.resume else None
            if row is None:
                if self.store.forget(cell) and not self.resume:
                    dropped.append(cell.label)
            else:
                done[i] = Finished(cell, row, earlier=True)
        if dropped:
            warnings.warn(f"{self.name}: starting afresh (resume=False, --fresh): {len(dropped)} finished cell(s) "
                          f"in {self.store.out} run again ({', '.join(dropped)})", stacklevel=4)
        return done

    def _job(self, i: int, executor) -> tuple:
        """The arguments of cell ``i``'s run on ``executor`` (after the study's data): its config under the
        study's settings as they are there (threads, progress, its checkpoint folder)."""
        cell = self.cells[i]
        settings = dataclasses.replace(self.settings, threads=executor.threads(self.settings.threads),
                                       progress=self.progress and executor.shows_engine_progress)
        if self.store is not None and executor.shared_disk:
            self.store.prepare(cell, self.prints[i], self.resume)
            settings = dataclasses.replace(settings, checkpoint=str(self.store.checkpoint(cell).absolute()),
                                           resume=True)
        return cell, self.models[i], self.configs[i].with_settings(settings), self.row

    def _finish(self, i: int, outcome: _Outcome, finished: dict[int, Finished]) -> Finished:
        """Write a finished cell (NetCDF, record, table); its run gets the study's model and data back."""
        result = dataclasses.replace(outcome.run, model=self.models[i], data=self.data)
        if self.store is not None:
            self.store.save(self.cells[i], self.prints[i], result, outcome.row, keep_checkpoint=self.keep_runs)
            rows = {**{j: f.row for j, f in finished.items()}, i: outcome.row}
            self.store.write_table([rows[j] for j in sorted(rows)])
        return Finished(self.cells[i], outcome.row, result if self.keep_runs else None)

    def _report(self, finished: dict[int, Finished]) -> None:
        """A progress line (cells done / total, the running ones) and ``progress.json``."""
        total, earlier, running = len(self.cells), sum(f.earlier for f in finished.values()), self._running
        if self.store is not None:
            self.store.write_progress(total=total, done=len(finished), earlier=earlier, running=running)
        if not self.progress or total < 2:
            return
        line = f"bnnzoo {self.name}: {len(finished)}/{total} cells done"
        if earlier:
            line += f" ({earlier} in an earlier run)"
        line += f", {time.monotonic() - self._start:.0f} s"
        if running:
            line += f"; running: {', '.join(running)}"
        print(line, file=sys.stderr, flush=True)

    def load_run(self, cell: Cell) -> Run:
        """The run of a cell finished in an earlier call, from its engine checkpoint (run again in this
        process if the checkpoint is gone: the same draws)."""
        index = self.cells.index(cell)
        settings = dataclasses.replace(self.settings, progress=False)
        if self.store is not None:
            settings = dataclasses.replace(settings, checkpoint=str(self.store.checkpoint(cell)), resume=True)
        return run(self.models[index], self.data, engine=self.configs[index].with_settings(settings))


def _check_cells(cells) -> tuple[list[Cell], list[RunConfig]]:
    """A non-empty list of cells with distinct labels (as file names too), and each cell's run
    configuration: its own where it has one, else built here (every check of its engine and options)."""
    cells = list(cells)
    if not cells:
        raise ValueError("cells: give at least one cell")
    seen: dict[str, str] = {}
    configs = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, Cell):
            raise TypeError(f"cells[{i}]: expected a Cell, got {type(cell).__name__}")
        name = safe_label(cell.label)
        if name in seen:
            raise ValueError(f"cells[{i}]: label {cell.label!r} is the same file name as {seen[name]!r}; "
                             "give the cells distinct labels")
        seen[name] = cell.label
        if cell.config is not None:
            if not isinstance(cell.config, RunConfig) or cell.config.engine != cell.engine:
                raise ValueError(f"cell {cell.label!r}: config is not a RunConfig of engine {cell.engine!r}")
            configs.append(cell.config)
            continue
        try:
            configs.append(run_config(cell.engine, **cell.options))
        except ValueError as err:
            raise ValueError(f"cell {cell.label!r}: {err}") from None
    return cells, configs
