"""Grids of engines x options x seeds on one model and data set (``bnnzoo sweep GRID.toml``).

>>> from bnnzoo.experiments import sweep
>>> table = sweep("cosine_mlp", "cosine", engines=["fixed_hmc", "rwmh"], seeds=[0, 1],
...               grid={"fixed_hmc": {"step_size": [1e-3, 2e-3], "num_steps": 50}},
...               out="out/sweep")  # doctest: +SKIP

Every engine runs once per combination of the values of its grid (a list is an axis,
a single value is fixed for every cell) and once per seed; an engine without a grid
runs at its defaults. Each cell is a :class:`~bnnzoo.experiments.Study` cell: with
``out``, its NetCDF and its row are written as soon as it finishes, and calling
again skips the finished cells. The table has the columns of
:func:`~bnnzoo.experiments.compare` with the cell's ``seed`` and grid values after
``kind``; rows are ranked by ESS/s among converged MCMC rows.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Mapping, Sequence

import pandas as pd

from .. import validation
from ..inference import ENGINES, run_config
from ..inference.checkpoint import CHECKPOINT_SECONDS
from ..inference.engines import COUNTS
from ..inference.options import suggest
from .compare import COLUMNS, comparison_row, ranked_table
from .study import Cell, Study

__all__ = ["grid_cells", "sweep", "sweep_counts"]

#: run counts a grid may set per engine (seeds have their own list)
GRID_COUNTS = ("num_samples", "warmup_steps", "num_chains")


def _check_engines(engines, where: str) -> list[str]:
    """A non-empty list of distinct engine names."""
    if isinstance(engines, str) or not isinstance(engines, Sequence) or not engines:
        raise ValueError(f"{where}engines: give a non-empty list of engine names, got {engines!r}")
    for i, engine in enumerate(engines):
        if not isinstance(engine, str) or engine not in ENGINES:
            raise ValueError(f"{where}engines[{i}]: unknown engine {engine!r}{suggest(str(engine), ENGINES)}; "
                             f"choose from {', '.join(ENGINES)}")
        if engine in engines[:i]:
            raise ValueError(f"{where}engines[{i}]: {engine!r} is listed twice; give each engine once (its grid "
                             f"sets its options)")
    return list(engines)


def _check_seeds(seeds, where: str) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"{where}seeds: give a non-empty list of seeds, got {seeds!r}")
    minimum, maximum = COUNTS["seed"]
    for i, seed in enumerate(seeds):
        validation.integer(f"{where}seeds[{i}]", seed, minimum, maximum=maximum)
        if seed in seeds[:i]:
            raise ValueError(f"{where}seeds[{i}]: seed {seed} is listed twice")
    return list(seeds)


def _axis(name: str, values) -> list:
    """The values of one grid key: a list (an axis), or one value."""
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    if not values:
        raise ValueError(f"{name}: an empty list; give at least one value")
    return values


def _check_grid(grid, engines: list[str], where: str) -> dict[str, dict[str, list]]:
    """Engine -> option -> values; every key an option of its engine, before any cell is built."""
    grid = {} if grid is None else grid
    if not isinstance(grid, Mapping):
        raise ValueError(f"{where}grid: expected a table of engines, got {grid!r}")
    checked = {}
    for engine, axes in grid.items():
        name = f"{where}grid.{engine}"
        if engine not in engines:
            raise ValueError(f"{name}: {engine!r} is not one of the engines ({', '.join(engines)}); add it to "
                             f"{where}engines or remove its grid")
        if not isinstance(axes, Mapping):
            raise ValueError(f"{name}: expected a table of option = [values], got {axes!r}")
        valid = ENGINES[engine].options() + list(GRID_COUNTS)
        for key in axes:
            if key == "seed":
                raise ValueError(f"{name}.seed: give the seeds of every cell in {where}seeds = [...]")
            if key not in valid:
                raise ValueError(f"{name}.{key}: not an option of engine {engine!r}{suggest(key, valid)}; its "
                                 f"options: {', '.join(valid)}")
        checked[engine] = {key: _axis(f"{name}.{key}", values) for key, values in axes.items()}
    return checked


def _value(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def grid_cells(engines: Sequence[str], grid: Mapping | None = None, seeds: Sequence[int] = (0,),
               common: Mapping[str, Any] | None = None, where: str = "") -> list[Cell]:
    """The cells of a sweep, every one checked before any runs (each into its
    :class:`~bnnzoo.inference.RunConfig`, :attr:`Cell.config`, so that the study does not check it
    again): engine-major, then the grid's combinations (its last key fastest), then the seeds.
    ``common`` holds run counts for every cell; ``where`` prefixes the field names of errors
    (``"sweep."`` for a sweep file)."""
    engines = _check_engines(engines, where)
    grid, seeds = _check_grid(grid, engines, where), _check_seeds(seeds, where)
    cells = []
    for engine in engines:
        axes = grid.get(engine, {})
        for values in itertools.product(*axes.values()):
            options = dict(zip(axes, values))
            for seed in seeds:
                given = {**(common or {}), **options, "seed": seed}
                try:
                    config = run_config(engine, **given)
                except ValueError as err:
                    raise ValueError(f"{where}grid.{engine} ({', '.join(f'{k} = {v!r}' for k, v in options.items())}): "
                                     f"{err}") from None
                label = " ".join([engine, *(f"{k}={_value(v)}" for k, v in options.items()), f"seed={seed}"])
                cells.append(Cell(label, engine, given, coords={"seed": seed, **options}, config=config))
    return cells


def sweep_counts(**given) -> dict[str, int]:
    """The counts of every cell of a sweep: :func:`sweep`'s defaults (``num_samples``, ``warmup_steps``,
    ``num_chains``), then ``given``."""
    parameters = inspect.signature(sweep).parameters
    return {**{k: parameters[k].default for k in GRID_COUNTS}, **given}


def sweep_table(rows: list[dict]) -> pd.DataFrame:
    """The ranked comparison table of a sweep's rows with each cell's seed and grid values after ``kind``."""
    known = {c for columns in COLUMNS.values() for c in columns}
    coords = [k for k in dict.fromkeys(k for row in rows for k in row) if k not in known and not k.startswith("_")]
    table = ranked_table(rows)
    grid = pd.DataFrame(rows, columns=coords, index=table.index)
    return pd.concat([table[["engine", "kind"]], grid, table.drop(columns=["engine", "kind"])], axis=1)


def sweep(model_or_spec, data, engines: Sequence[str] | None = None, grid: Mapping | None = None,
          seeds: Sequence[int] = (0,), *, cells: Sequence[Cell] | None = None, num_samples: int = 500,
          warmup_steps: int = 500, num_chains: int = 2, out=None, executor="inprocess",
          progress: bool = True, threads="auto", dtype=None, device=None, checkpoint_every: int | None = None,
          checkpoint_seconds: float | None = CHECKPOINT_SECONDS, resume: bool = True) -> pd.DataFrame:
    """Run every engine on every combination of its grid's values and every seed (module docstring).

    Parameters
    ----------
    model_or_spec, data
        As for :func:`bnnzoo.inference.run`; resolved once, shared by every cell.
    engines : list of str
        Engine names, each once.
    grid : dict, optional
        ``{engine: {option: [values] or value}}``: each key an option of its engine
        (``bnnzoo list ENGINE``) or ``num_samples``, ``warmup_steps``, ``num_chains``.
    seeds : list of int
        Every cell runs once per seed.
    cells : list of Cell, optional
        The sweep's cells as :func:`grid_cells` built them, already checked (what ``bnnzoo sweep``
        reads from its file), instead of ``engines``, ``grid``, ``seeds`` and the counts.
    num_samples, warmup_steps, num_chains
        Counts of every cell (a grid may override them per engine).
    out : path, optional
        The sweep's folder: ``<label>.nc`` and ``cells/<label>.json`` per cell as it finishes,
        ``sweep.csv`` (the table so far), ``progress.json``, the running cells' checkpoints.
        Calling again skips the finished cells and continues the running ones.
    executor : "inprocess", "ray" or an executor
        Where the cells run (:mod:`bnnzoo.experiments.executors`); the same draws either way.
    progress, threads, dtype, device, checkpoint_every, checkpoint_seconds
        As for :func:`~bnnzoo.experiments.compare`.
    resume : bool
        Skip the cells finished in ``out`` and continue the running ones (default); False: every
        cell afresh.

    Returns
    -------
    pandas.DataFrame
        One row per cell, labelled ``"<engine> <key>=<value> ... seed=<seed>"``.

    Raises
    ------
    ValueError
        An unknown engine, a grid key that is not an option of its engine, a bad value,
        seed or count: named with its field and value before any cell runs.
    """
    if cells is None:
        common = {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": num_chains}
        cells = grid_cells(engines, grid, seeds, common)
    elif engines is not None or grid is not None:
        raise ValueError("cells: give the engines (and grid, seeds) or the cells of grid_cells(), not both")
    study = Study(cells, data, model_or_spec, row=comparison_row, table=sweep_table, table_name="sweep.csv",
                  out=out, resume=resume, executor=executor, name="sweep", progress=progress, threads=threads, dtype=dtype,
                  device=device,
                  checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds, keep_runs=False)
    return sweep_table([f.row for f in study.run()])
