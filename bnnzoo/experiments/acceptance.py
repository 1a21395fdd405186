r"""Acceptance of leapfrog HMC by step size, trajectory and network size (paper 003).

Leapfrog's energy error is :math:`O(\epsilon^3)` per step on a smooth potential and
:math:`O(\epsilon)` at each kink of a ReLU network, so a ReLU network loses
acceptance where a sigmoid network of the same size keeps it. These studies
make that visible for any model:

* :func:`acceptance_sweep`: mean acceptance (with its standard error over
  chains) and divergences on a grid of step sizes :math:`\epsilon` and numbers
  of leapfrog steps :math:`L` (paper 003, Table 2);
* :func:`efficiency_curve`: at a fixed travel time :math:`T = \epsilon L`, the
  efficiency (accepted proposals per gradient evaluation, :math:`a(\epsilon)/L
  = a(\epsilon)\,\epsilon / T`) against the acceptance, and the empirically
  optimal acceptance (paper 003, Fig. 2);
* :func:`size_sweep`: acceptance against the number of parameters as the
  network grows in width and in depth (paper 003, Fig. 3).

Every cell runs the ``fixed_hmc`` engine (:class:`~bnnzoo.inference.FixedStepHMC`:
fixed step size and steps, no adaptation, all chains as one batch). What the
theory predicts, and the optimum of a finished curve, are computed from numbers
alone in :mod:`bnnzoo.diagnostics.theory`
(:func:`~bnnzoo.diagnostics.theory.theoretical_efficiency`,
:func:`~bnnzoo.diagnostics.theory.theoretical_optimal_acceptance`,
:func:`~bnnzoo.diagnostics.theory.optimal_acceptance`). Figures:
:func:`~bnnzoo.diagnostics.plots.plot_acceptance_sweep`,
:func:`~bnnzoo.diagnostics.plots.plot_efficiency` and
:func:`~bnnzoo.diagnostics.plots.plot_acceptance_vs_size`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .. import validation
from ..diagnostics.theory import optimal_acceptance
from ..models import BNN, zoo
from ..models.spec import BNNSpec, Dense, spec_from
from ..results import Run
from .study import Cell, Study, unique_labels

__all__ = ["SWEEP_COLUMNS", "EfficiencyCurve", "acceptance_cells", "acceptance_row", "acceptance_sweep",
           "efficiency_cells", "efficiency_curve", "run_sweep", "size_cells", "size_sweep"]

#: columns of the table of :func:`acceptance_sweep`
SWEEP_COLUMNS = ("step_size", "num_steps", "travel_time", "acceptance", "acceptance_se", "divergences",
                 "transitions", "num_chains", "num_params", "wall_time")


# ---------------------------------------------------------------- checks
def _check_step_sizes(step_sizes) -> list[float]:
    values = list(np.atleast_1d(np.asarray(step_sizes, dtype=object)))
    if not values:
        raise ValueError("step_sizes is empty: give at least one step size")
    for value in values:
        if not (validation.is_real(value) and value > 0):
            raise ValueError(f"step_sizes: every step size must be a positive number, got {value!r}")
    return [float(v) for v in values]


def _check_int(name: str, value, minimum: int) -> int:
    validation.integer(name, value, minimum)
    return int(value)


def _check_ints(name: str, values) -> list[int]:
    """A non-empty sequence of integers >= 1."""
    values = list(np.atleast_1d(np.asarray(values, dtype=object)))
    if not values:
        raise ValueError(f"{name} is empty: give at least one value")
    return [_check_int(name, v, 1) for v in values]


def _check_counts(num_samples, warmup_steps, num_chains, seed) -> dict:
    """The run counts of every cell, checked."""
    _check_int("num_samples", num_samples, 1)
    _check_int("warmup_steps", warmup_steps, 0)
    _check_int("num_chains", num_chains, 1)
    return {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": num_chains, "seed": seed}


# ------------------------------------------------------------------ cells
def _standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of independent values (NaN for fewer than two)."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan


def acceptance_row(cell: Cell, result: Run) -> dict:
    """A cell's acceptance (mean over chains of each chain's mean acceptance probability after
    burn-in, and the standard error over chains), divergences and size: the columns of
    :data:`SWEEP_COLUMNS`. The row function of every acceptance study."""
    accept = np.asarray(result.sample_stats["acceptance_rate"], dtype=float)  # [chain, draw]
    per_chain = accept.mean(axis=1)
    step_size, num_steps = cell.options["step_size"], cell.options["num_steps"]
    return {"step_size": step_size, "num_steps": num_steps, "travel_time": step_size * num_steps,
            "acceptance": float(per_chain.mean()), "acceptance_se": _standard_error(per_chain),
            "divergences": int(np.asarray(result.sample_stats["diverging"]).sum()),
            "transitions": int(accept.size), "num_chains": cell.options["num_chains"],
            "num_params": int(result.model.num_params), "wall_time": result.wall_time}


def _cell(model, step_size: float, num_steps: int, counts: dict, coords: dict) -> Cell:
    """One ``fixed_hmc`` cell, labelled by its coordinates, step size and steps."""
    label = " ".join([*(f"{k}={v}" for k, v in coords.items()), f"step_size={step_size!r}",
                      f"num_steps={num_steps}"])
    return Cell(label, "fixed_hmc", {"step_size": step_size, "num_steps": num_steps, **counts}, model, dict(coords))


def _cells(model, shapes, counts: dict, coords: Mapping | None) -> list[Cell]:
    """Cells of ``(step_size, num_steps)`` pairs; repeated pairs labelled ``#2``, ``#3``..."""
    cells = [_cell(model, eps, steps, counts, dict(coords or {})) for eps, steps in shapes]
    labels = unique_labels(cell.label for cell in cells)
    return [dataclasses.replace(cell, label=label) for cell, label in zip(cells, labels)]


def run_sweep(cells: Sequence[Cell], data, *, executor="inprocess", out=None, progress: bool = True,
              name: str = "sweep") -> pd.DataFrame:
    """Run ``fixed_hmc`` cells (:func:`acceptance_cells`, :func:`efficiency_cells`, :func:`size_cells`,
    of several models at once if they like) as one :class:`~bnnzoo.experiments.Study`: one row per
    cell, in cell order, its ``coords`` and then :data:`SWEEP_COLUMNS`. With ``out``, each cell's
    NetCDF and row are written as it finishes (``sweep.csv``: the rows so far) and a second call
    skips the finished cells."""
    study = Study(cells, data, row=acceptance_row, table_name="sweep.csv", out=out, executor=executor,
                  name=name, progress=progress, keep_runs=False)
    rows = [f.row for f in study.run()]
    coords = list(dict.fromkeys(k for cell in cells for k in cell.coords))
    return pd.DataFrame(rows, columns=[*coords, *SWEEP_COLUMNS])


def acceptance_cells(model_or_spec, step_sizes: Sequence[float], num_steps: Sequence[int], num_samples: int = 500,
                     warmup_steps: int = 100, num_chains: int = 4, seed: int = 0,
                     coords: Mapping | None = None) -> list[Cell]:
    """The cells of :func:`acceptance_sweep` (``num_steps``-major), checked; ``coords`` (e.g.
    ``{"activation": "relu"}``) label them and become columns of their rows."""
    step_sizes, steps = _check_step_sizes(step_sizes), _check_ints("num_steps", num_steps)
    counts = _check_counts(num_samples, warmup_steps, num_chains, seed)
    return _cells(model_or_spec, [(eps, n) for n in steps for eps in step_sizes], counts, coords)


def acceptance_sweep(model_or_spec, data, step_sizes: Sequence[float], num_steps: Sequence[int],
                     num_samples: int = 500, warmup_steps: int = 100, num_chains: int = 4,
                     seed: int = 0, *, executor="inprocess", out=None, progress: bool = True) -> pd.DataFrame:
    r"""Mean acceptance of fixed-step leapfrog HMC on a grid of step sizes and steps.

    Every cell ``(step_size, num_steps)`` runs ``num_chains`` independent chains
    (one batch, the ``fixed_hmc`` engine, unit mass, no adaptation) for
    ``warmup_steps`` burn-in transitions and ``num_samples`` kept ones, from the
    same seed (common random numbers across cells). A non-finite energy, or an
    energy error above 1000, is a rejected, counted divergence.

    Parameters
    ----------
    model_or_spec, data
        As for :func:`bnnzoo.inference.run`.
    step_sizes : sequence of float
        Leapfrog step sizes :math:`\epsilon > 0`.
    num_steps : sequence of int
        Leapfrog steps :math:`L \ge 1` per transition.
    num_samples, warmup_steps, num_chains, seed : int
        Kept draws and burn-in per chain, chains per cell (the paper's seeds;
        at least 2 for a standard error), seed of every cell.
    executor : "inprocess", "ray" or an executor
        Where the cells run (:mod:`bnnzoo.experiments.executors`); the same numbers either way.
    out : path, optional
        A folder: each cell's NetCDF and row as it finishes; a second call skips the
        finished cells (:class:`~bnnzoo.experiments.Study`).
    progress : bool
        Progress lines (cells done / total, running cells, each run's own).

    Returns
    -------
    pandas.DataFrame
        One row per cell, ``num_steps``-major: ``step_size``, ``num_steps``,
        ``travel_time`` (:math:`\epsilon L`), ``acceptance`` (mean over chains of
        each chain's mean acceptance probability :math:`\min(1, e^{-\Delta H})`),
        ``acceptance_se`` (its standard error over chains), ``divergences``
        (count over all kept transitions), ``transitions``, ``num_chains``,
        ``num_params`` and ``wall_time`` (seconds).

    Raises
    ------
    ValueError
        Empty or non-positive ``step_sizes``, ``num_steps`` < 1, bad counts,
        before anything runs.
    """
    cells = acceptance_cells(model_or_spec, step_sizes, num_steps, num_samples, warmup_steps, num_chains, seed)
    return run_sweep(cells, data, executor=executor, out=out, progress=progress, name="acceptance sweep")


# ------------------------------------------------------------- efficiency
@dataclass(frozen=True)
class EfficiencyCurve:
    """Efficiency against acceptance at a fixed travel time.

    Attributes
    ----------
    table : pandas.DataFrame
        :func:`acceptance_sweep`'s columns plus ``efficiency`` (acceptance per
        leapfrog step, :math:`a/L`) and ``efficiency_se``, by step size.
    travel_time : float
    optimal_acceptance : float
        The acceptance of the most efficient step size
        (:func:`~bnnzoo.diagnostics.theory.optimal_acceptance`).
    at_edge : bool
        True when that is the highest or lowest acceptance of the grid: the
        optimum may lie outside it.
    """

    table: pd.DataFrame
    travel_time: float
    optimal_acceptance: float
    at_edge: bool

    @classmethod
    def from_table(cls, table: pd.DataFrame, travel_time: float) -> "EfficiencyCurve":
        """The curve of a finished :func:`efficiency_cells` sweep (its rows by step size)."""
        table = table.reset_index(drop=True)
        table["efficiency"] = table["acceptance"] / table["num_steps"]
        table["efficiency_se"] = table["acceptance_se"] / table["num_steps"]
        best, at_edge = optimal_acceptance(table["acceptance"], table["efficiency"])
        return cls(table, float(travel_time), best, at_edge)


def efficiency_cells(model_or_spec, travel_time: float, step_sizes: Sequence[float], num_samples: int = 500,
                     warmup_steps: int = 100, num_chains: int = 4, seed: int = 0,
                     coords: Mapping | None = None) -> list[Cell]:
    """The cells of :func:`efficiency_curve`, by step size (``L = max(1, round(T / eps))``),
    checked; ``coords`` as for :func:`acceptance_cells`."""
    validation.positive("travel_time", travel_time)
    step_sizes = sorted(_check_step_sizes(step_sizes))
    counts = _check_counts(num_samples, warmup_steps, num_chains, seed)
    return _cells(model_or_spec, [(eps, max(1, round(travel_time / eps))) for eps in step_sizes], counts, coords)


def efficiency_curve(model_or_spec, data, travel_time: float, step_sizes: Sequence[float],
                     num_samples: int = 500, warmup_steps: int = 100, num_chains: int = 4,
                     seed: int = 0, *, executor="inprocess", out=None, progress: bool = True) -> EfficiencyCurve:
    r"""The efficiency of fixed-step HMC against its acceptance, at a fixed travel time.

    For each :math:`\epsilon` in ``step_sizes``, :math:`L = \max(1, \mathrm{round}(T/\epsilon))`
    leapfrog steps; the efficiency is the expected number of accepted proposals per
    gradient evaluation, :math:`a(\epsilon)/L \approx a(\epsilon)\,\epsilon/T`: the
    inverse of the cost per accepted proposal, paper 003's measure (Sec. 2 and
    Fig. 2; the theory's :math:`a \cdot l`). Its argmax over :math:`\epsilon` gives the
    empirically optimal acceptance, to compare with 0.651 (smooth) and 0.45
    (piecewise affine).

    Parameters
    ----------
    model_or_spec, data, num_samples, warmup_steps, num_chains, seed, executor, out, progress
        As for :func:`acceptance_sweep`.
    travel_time : float
        :math:`T > 0`.
    step_sizes : sequence of float

    Returns
    -------
    EfficiencyCurve
    """
    cells = efficiency_cells(model_or_spec, travel_time, step_sizes, num_samples, warmup_steps, num_chains, seed)
    table = run_sweep(cells, data, executor=executor, out=out, progress=progress, name="efficiency curve")
    return EfficiencyCurve.from_table(table, travel_time)


# ------------------------------------------------------------------- size
def _spec_of(model_or_spec) -> BNNSpec:
    """The spec of a BNN, a spec, a dict, a TOML path or a zoo name."""
    if isinstance(model_or_spec, BNN):
        return model_or_spec.spec
    if isinstance(model_or_spec, str) and model_or_spec in zoo.ZOO:
        return zoo.get(model_or_spec)
    return spec_from(model_or_spec)


def _resized(spec: BNNSpec, hidden: Sequence[int]) -> BNNSpec:
    """``spec`` with its hidden Dense layers replaced by ``len(hidden)`` layers of the
    given widths, with the first hidden layer's activation; the output layer kept."""
    if len(spec.layers) < 2 or not all(isinstance(layer, Dense) for layer in spec.layers):
        raise ValueError("size_sweep: the model must be an MLP (Dense layers) with at least one hidden layer")
    first = spec.layers[0]
    layers = [dataclasses.replace(first, units=int(w)) for w in hidden] + [spec.layers[-1]]
    return dataclasses.replace(spec, layers=tuple(layers), priors={})


def size_cells(model_or_spec, step_size: float, num_steps: int, widths: Sequence[int] = (10, 50, 100),
               depths: Sequence[int] = (1, 2, 3), depth_width: int = 20, num_samples: int = 500,
               warmup_steps: int = 100, num_chains: int = 4, seed: int = 0,
               coords: Mapping | None = None) -> list[Cell]:
    """The cells of :func:`size_sweep`, each with its own resized model, checked; their coordinates
    are ``coords`` plus ``architecture``, ``width`` and ``depth``."""
    spec = _spec_of(model_or_spec)
    _check_step_sizes([step_size])
    _check_int("num_steps", num_steps, 1)
    _check_int("depth_width", depth_width, 1)
    counts = _check_counts(num_samples, warmup_steps, num_chains, seed)
    shapes = [("width", w, 1) for w in _check_ints("widths", widths)] + \
             [("depth", depth_width, d) for d in _check_ints("depths", depths)]
    return [_cell(_resized(spec, [width] * depth), float(step_size), int(num_steps), counts,
                  {**(coords or {}), "architecture": architecture, "width": width, "depth": depth})
            for architecture, width, depth in shapes]


def size_sweep(model_or_spec, data, step_size: float, num_steps: int, widths: Sequence[int] = (10, 50, 100),
               depths: Sequence[int] = (1, 2, 3), depth_width: int = 20, num_samples: int = 500,
               warmup_steps: int = 100, num_chains: int = 4, seed: int = 0, *, executor="inprocess", out=None,
               progress: bool = True) -> pd.DataFrame:
    """Acceptance against the number of parameters as an MLP grows (paper 003, Fig. 3).

    Two families from the spec of ``model_or_spec`` (its first hidden layer's
    activation, its prior, likelihood and output layer): one hidden layer of
    each of ``widths`` units ("width"), and ``d`` hidden layers of
    ``depth_width`` units for each ``d`` of ``depths`` ("depth"). Each runs one
    :func:`acceptance_sweep` cell at ``(step_size, num_steps)``. Per-site prior
    overrides are dropped (the sites change). ``executor``, ``out``, ``progress``: as
    for :func:`acceptance_sweep`.

    Returns
    -------
    pandas.DataFrame
        ``architecture`` ("width" or "depth"), ``width``, ``depth`` and the
        columns of :func:`acceptance_sweep` (``num_params`` among them).
    """
    cells = size_cells(model_or_spec, step_size, num_steps, widths, depths, depth_width, num_samples,
                       warmup_steps, num_chains, seed)
    return run_sweep(cells, data, executor=executor, out=out, progress=progress, name="size sweep")
