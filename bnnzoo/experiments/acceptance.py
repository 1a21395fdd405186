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
from typing import Sequence

import numpy as np
import pandas as pd

from .. import validation
from ..diagnostics.theory import optimal_acceptance
from ..inference import run
from ..models import BNN, zoo
from ..models.spec import BNNSpec, Dense, spec_from

__all__ = ["SWEEP_COLUMNS", "EfficiencyCurve", "acceptance_sweep", "efficiency_curve", "size_sweep"]

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


def _check_counts(num_samples, warmup_steps, num_chains) -> None:
    _check_int("num_samples", num_samples, 1)
    _check_int("warmup_steps", warmup_steps, 0)
    _check_int("num_chains", num_chains, 1)


# ------------------------------------------------------------------ cells
def _standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of independent values (NaN for fewer than two)."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan


def _run_cell(model, data, step_size: float, num_steps: int, num_samples: int, warmup_steps: int,
              num_chains: int, seed: int) -> dict:
    """One ``fixed_hmc`` run; its acceptance (mean over chains of each chain's mean
    acceptance probability after burn-in, and the standard error over chains)."""
    result = run(model, data, engine="fixed_hmc", step_size=step_size, num_steps=num_steps,
                 num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains, seed=seed)
    accept = np.asarray(result.sample_stats["acceptance_rate"], dtype=float)  # [chain, draw]
    per_chain = accept.mean(axis=1)
    return {"step_size": step_size, "num_steps": num_steps, "travel_time": step_size * num_steps,
            "acceptance": float(per_chain.mean()), "acceptance_se": _standard_error(per_chain),
            "divergences": int(np.asarray(result.sample_stats["diverging"]).sum()),
            "transitions": int(accept.size), "num_chains": num_chains,
            "num_params": int(result.model.num_params), "wall_time": result.wall_time}


def _sweep(model, data, cells, num_samples, warmup_steps, num_chains, seed) -> pd.DataFrame:
    rows = [_run_cell(model, data, eps, steps, num_samples, warmup_steps, num_chains, seed) for eps, steps in cells]
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def acceptance_sweep(model_or_spec, data, step_sizes: Sequence[float], num_steps: Sequence[int],
                     num_samples: int = 500, warmup_steps: int = 100, num_chains: int = 4,
                     seed: int = 0) -> pd.DataFrame:
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
    step_sizes, steps = _check_step_sizes(step_sizes), _check_ints("num_steps", num_steps)
    _check_counts(num_samples, warmup_steps, num_chains)
    cells = [(eps, n) for n in steps for eps in step_sizes]
    return _sweep(model_or_spec, data, cells, num_samples, warmup_steps, num_chains, seed)


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


def efficiency_curve(model_or_spec, data, travel_time: float, step_sizes: Sequence[float],
                     num_samples: int = 500, warmup_steps: int = 100, num_chains: int = 4,
                     seed: int = 0) -> EfficiencyCurve:
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
    model_or_spec, data, num_samples, warmup_steps, num_chains, seed
        As for :func:`acceptance_sweep`.
    travel_time : float
        :math:`T > 0`.
    step_sizes : sequence of float

    Returns
    -------
    EfficiencyCurve
    """
    validation.positive("travel_time", travel_time)
    step_sizes = sorted(_check_step_sizes(step_sizes))
    _check_counts(num_samples, warmup_steps, num_chains)
    cells = [(eps, max(1, round(travel_time / eps))) for eps in step_sizes]
    table = _sweep(model_or_spec, data, cells, num_samples, warmup_steps, num_chains, seed)
    table["efficiency"] = table["acceptance"] / table["num_steps"]
    table["efficiency_se"] = table["acceptance_se"] / table["num_steps"]
    best, at_edge = optimal_acceptance(table["acceptance"], table["efficiency"])
    return EfficiencyCurve(table, float(travel_time), best, at_edge)


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


def size_sweep(model_or_spec, data, step_size: float, num_steps: int, widths: Sequence[int] = (10, 50, 100),
               depths: Sequence[int] = (1, 2, 3), depth_width: int = 20, num_samples: int = 500,
               warmup_steps: int = 100, num_chains: int = 4, seed: int = 0) -> pd.DataFrame:
    """Acceptance against the number of parameters as an MLP grows (paper 003, Fig. 3).

    Two families from the spec of ``model_or_spec`` (its first hidden layer's
    activation, its prior, likelihood and output layer): one hidden layer of
    each of ``widths`` units ("width"), and ``d`` hidden layers of
    ``depth_width`` units for each ``d`` of ``depths`` ("depth"). Each runs one
    :func:`acceptance_sweep` cell at ``(step_size, num_steps)``. Per-site prior
    overrides are dropped (the sites change).

    Returns
    -------
    pandas.DataFrame
        ``architecture`` ("width" or "depth"), ``width``, ``depth`` and the
        columns of :func:`acceptance_sweep` (``num_params`` among them).
    """
    spec = _spec_of(model_or_spec)
    _check_step_sizes([step_size])
    _check_int("num_steps", num_steps, 1)
    _check_int("depth_width", depth_width, 1)
    _check_counts(num_samples, warmup_steps, num_chains)
    shapes = [("width", w, 1) for w in _check_ints("widths", widths)] + \
             [("depth", depth_width, d) for d in _check_ints("depths", depths)]
    rows = []
    for architecture, width, depth in shapes:
        cell = _run_cell(_resized(spec, [width] * depth), data, float(step_size), int(num_steps), num_samples,
                         warmup_steps, num_chains, seed)
        rows.append({"architecture": architecture, "width": width, "depth": depth, **cell})
    return pd.DataFrame(rows, columns=["architecture", "width", "depth", *SWEEP_COLUMNS])
