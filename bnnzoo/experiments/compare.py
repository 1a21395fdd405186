"""Several engines on one model and data set, one comparison table.

>>> from bnnzoo.experiments import compare, format_table
>>> table, runs = compare("cosine_mlp", "cosine", engines=("nuts", {"kind": "svi", "num_steps": 500}))
>>> print(format_table(table))

Mixing is judged in function space (``ess_f_min``, ``rhat_f_max``: the predictive
mean, or the predicted-class probability, at the test inputs), because network
weights are not identifiable; weight-space ``rhat_w_max`` / ``ess_w_min`` are
reported beside it.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..diagnostics import to_inference_data
from ..diagnostics.predictive import predictive_metrics
from ..diagnostics.summary import mixing
from ..inference import check_run, run
from ..inference.checkpoint import CHECKPOINT_SECONDS
from ..results import Run

COMMON = ("num_samples", "warmup_steps", "num_chains", "seed")

COLUMNS = {
    "regression": ["engine", "kind", "chains", "draws", "wall_time_s", "rmse", "nll", "acceptance", "divergences",
                   "failed", "converged", "ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max", "ess_per_s", "rhat_w_max",
                   "ess_w_min"],
    "classification": ["engine", "kind", "chains", "draws", "wall_time_s", "accuracy", "ece", "nll", "acceptance",
                       "divergences", "failed", "converged", "ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max",
                       "ess_per_s", "rhat_w_max", "ess_w_min"],
}


def _engine_items(engines: Iterable) -> list[tuple[str, str, dict[str, Any]]]:
    """``(label, kind, options)`` per engine; repeated labels become ``kind#2``, ``kind#3``..."""
    if isinstance(engines, (str, Mapping)):
        engines = [engines]
    items, seen = [], {}
    for i, item in enumerate(engines):
        if isinstance(item, str):
            kind, options, label = item, {}, None
        elif isinstance(item, Mapping):
            options = dict(item)
            kind = options.pop("kind", None)
            label = options.pop("label", None)
            if not isinstance(kind, str):
                raise ValueError(f"engines[{i}]: a dict needs a 'kind' (engine name), got {item!r}")
        else:
            raise TypeError(f"engines[{i}]: expected an engine name or a dict, got {type(item).__name__}")
        label = str(label or kind)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        items.append((label, kind, options))
    if not items:
        raise ValueError("engines: give at least one engine")
    return items


def _row(label: str, kind: str, result: Run) -> dict[str, Any]:
    stats = result.sample_stats or {}
    row: dict[str, Any] = {
        "engine": label, "kind": kind, "chains": result.num_chains, "draws": result.num_draws,
        "wall_time_s": float(result.wall_time),
    }
    row.update(predictive_metrics(result))
    acceptance = stats.get("acceptance_rate")
    row["acceptance"] = float(np.mean(acceptance)) if acceptance is not None else math.nan
    diverging = stats.get("diverging")
    row["divergences"] = int(np.sum(diverging)) if diverging is not None else math.nan
    # the run's own verdicts: chains that blew up (SG-MCMC), fits that settled (SVI); NaN where not checked
    failed = (result.notes or {}).get("failed")
    row["failed"] = int(np.sum(failed)) if failed is not None else math.nan
    converged = getattr(result.vi, "converged", None)
    row["converged"] = int(np.sum(converged)) if converged is not None else math.nan
    row.update(mixing(result))
    ess = [row["ess_lp"], row["ess_f_min"]]
    ess = [e for e in ess if not math.isnan(e)]
    row["ess_per_s"] = min(ess) / row["wall_time_s"] if ess and row["wall_time_s"] > 0 else math.nan
    return row


def safe_label(label: str) -> str:
    """A run label as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def _table(rows: list[dict], task: str) -> pd.DataFrame:
    table = pd.DataFrame(rows).set_index("engine", drop=False)
    table.index.name = "label"
    return table[COLUMNS[task]]


def save_finished(out: str | Path, label: str, result: Run, table: pd.DataFrame) -> None:
    """Write one finished run (``<label>.nc``) and the table so far (``comparison.csv``) into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for path, write in ((out / f"{safe_label(label)}.nc", lambda p: to_inference_data(result).to_netcdf(str(p))),
                        (out / "comparison.csv", lambda p: table.to_csv(p, index=False))):
        tmp = path.with_name(f".{path.name}.tmp")  # written whole, then renamed: a kill leaves no half file
        write(tmp)
        os.replace(tmp, path)


def compare(model_or_spec, data, engines=("nuts", "svi"), *, num_samples: int = 500, warmup_steps: int = 500,
            num_chains: int = 2, seed: int = 0, progress: bool = True, checkpoint=None, resume: bool = False,
            checkpoint_every: int | None = None, checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
            threads="auto") -> tuple[pd.DataFrame, dict[str, Run]]:
    """Run several engines on the same model and data; one row per engine.

    Parameters
    ----------
    model_or_spec, data
        As for :func:`bnnzoo.inference.run`. They are resolved once (by the first
        engine) and the same ``BNN`` and ``Dataset`` go to every engine.
    engines : iterable of str or dict
        Engine names, or ``{"kind": "nuts", "label": "nuts-short", "num_samples": 200, **options}``:
        per-engine overrides of ``num_samples``, ``warmup_steps``, ``num_chains``, ``seed``,
        plus the engine's own options. Rows are labelled by ``label`` or the engine
        name; repeats become ``nuts#2``, ``nuts#3``.
    num_samples, warmup_steps, num_chains, seed, progress
        Common settings.
    checkpoint : path, optional
        A folder: each engine's ``<label>.nc`` and the table so far (``comparison.csv``) are
        written there as soon as that engine finishes, and the running engine's checkpoint
        under ``checkpoints/<label>/`` (:func:`bnnzoo.inference.run`).
    resume : bool
        Skip the engines that finished in ``checkpoint`` and continue the one that was running.
    checkpoint_every, checkpoint_seconds
        How often the running engine's state is saved.
    threads : "auto", int or None
        torch threads for each run (:func:`bnnzoo.inference.run`).

    Returns
    -------
    table : pandas.DataFrame
        Indexed by label. Columns: ``engine, kind, chains, draws, wall_time_s``, the test
        metrics (regression: ``rmse``; classification: ``accuracy``, ``ece``) and ``nll``,
        ``acceptance`` (mean; NaN if the engine has none), ``divergences`` (total; NaN if
        not recorded), ``ess_lp``, ``rhat_lp``, ``ess_f_min``, ``rhat_f_max`` (function
        space, the headline mixing), ``ess_per_s`` (min of ``ess_lp`` and ``ess_f_min``
        per second of wall time), ``rhat_w_max``, ``ess_w_min`` (weight space).
    runs : dict
        Label -> :class:`~bnnzoo.results.Run`.
    """
    items = _engine_items(engines)
    common = {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": num_chains, "seed": seed}
    for i, (label, kind, options) in enumerate(items):  # every entry checked before the first engine runs
        try:
            check_run(kind, **{**common, **options})
        except ValueError as err:
            raise ValueError(f"engines[{i}] ({kind}): {err}") from None
    if resume and checkpoint is None:
        raise ValueError("resume=True: give the checkpoint folder to continue from (checkpoint=DIR)")
    runs: dict[str, Run] = {}
    rows = []
    try:
        for label, kind, options in items:
            settings = {**common, **{k: options.pop(k) for k in COMMON if k in options}}
            if checkpoint is not None:
                settings.update(checkpoint=Path(checkpoint) / "checkpoints" / safe_label(label), resume=resume,
                                checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds)
            result = run(model_or_spec, data, engine=kind, progress=progress, threads=threads, **settings, **options)
            model_or_spec, data = result.model, result.data  # every engine sees the same model and data
            runs[label] = result
            rows.append(_row(label, kind, result))
            if checkpoint is not None:
                save_finished(checkpoint, label, result, _table(rows, result.model.task))
    except KeyboardInterrupt as stop:  # hand on what finished
        stop.runs = runs
        stop.table = _table(rows, next(iter(runs.values())).model.task) if runs else None
        raise
    return _table(rows, next(iter(runs.values())).model.task), runs


# ------------------------------------------------------------------ table
_DECIMALS = {"wall_time_s": 2, "rmse": 4, "nll": 4, "accuracy": 4, "ece": 4, "acceptance": 3,
             "rhat_lp": 3, "rhat_f_max": 3, "rhat_w_max": 3, "ess_per_s": 2}
_INTEGERS = ("chains", "draws", "divergences", "ess_lp", "ess_f_min", "ess_w_min")


def _cell(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (str, bytes)):
        return str(value)
    value = float(value)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if column in _INTEGERS:
        return f"{value:.0f}"
    if column in _DECIMALS:
        return f"{value:.{_DECIMALS[column]}f}"
    return f"{value:.4g}"


def format_table(df: pd.DataFrame) -> str:
    """A comparison table as GitHub markdown: ESS and counts as integers, R-hat to 3
    decimals, metrics to 4, NaN as ``–``."""
    columns = [str(c) for c in df.columns]
    rows = [[_cell(c, v) for c, v in zip(columns, record)] for record in df.itertuples(index=False)]
    numeric = [not all(isinstance(v, str) for v in df[c]) for c in df.columns]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def line(cells):
        return "| " + " | ".join(
            cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(cells, widths, numeric)
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else (":" + "-" * (w + 1))
                          for w, num in zip(widths, numeric)) + "|"
    return "\n".join([line(columns), rule] + [line(r) for r in rows])
