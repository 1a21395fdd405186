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
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..diagnostics.members import member_mixing
from ..diagnostics.predictive import predictive_metrics
from ..diagnostics.scorecard import PredictiveReference, as_reference, check_reference, scorecard
from ..diagnostics.summary import mixing, never_moved
from ..inference import RunConfig, run_config
from ..inference.checkpoint import CHECKPOINT_SECONDS
from ..results import Run
from .study import Cell, Finished, Study, unique_labels

COMMON = ("num_samples", "warmup_steps", "num_chains", "seed")

_HEAD = ["engine", "kind", "chains", "draws", "wall_time_s"]
_TAIL = ["acceptance", "target_accept", "divergences", "failed", "elbo", "ess_lp", "rhat_lp", "ess_f_min",
         "rhat_f_max", "ess_per_s", "converged", "rank", "note", "nrhat_lp", "nrhat_f_max", "rhat_w_max",
         "ess_w_min", "members", "modes", "rhat_lp_within", "rhat_f_within", "grad_members", "grad_warmup",
         "grad_sampling", "grad_total"]
#: the gradient evaluations of a row, per stage (``Run.grad_evals``)
GRAD_COLUMNS = {"grad_members": "members", "grad_warmup": "warmup", "grad_sampling": "sampling", "grad_total": "total"}
COLUMNS = {
    "regression": _HEAD + ["rmse", "nll", "ece", "coverage"] + _TAIL,
    "classification": _HEAD + ["accuracy", "ece", "nll"] + _TAIL,
}
#: the columns a comparison against a reference predictive adds after the test metrics
#: (:mod:`bnnzoo.diagnostics.scorecard`): test LPPD, and the scores against the reference
REFERENCE_COLUMNS = {"regression": ["lppd", "w2", "tv"], "classification": ["lppd", "agreement", "tv"]}

#: the rule for a converged MCMC row: split R-hat of lp and of f at most RHAT_LISTED, bulk ESS of
#: both at least ESS_MIN, divergences at most DIVERGENCE_FRACTION of the draws, no failed chain.
#: Rows are ranked by ESS/s among converged rows only; the best is the first with R-hat <= RHAT_BEST.
RHAT_LISTED, RHAT_BEST, ESS_MIN, DIVERGENCE_FRACTION = 1.05, 1.01, 100, 0.01


def verdict(row: Mapping[str, Any]) -> list[str]:
    """Why an MCMC row is not converged by the rule above (empty: converged). A run started from an
    ensemble (``members`` > 0) is judged within modes: its within-member R-hat (``rhat_lp_within``,
    ``rhat_f_within``) stands for the R-hat across all chains, which differing modes inflate."""
    reasons = []
    within = isinstance(row.get("members"), (int, float)) and row.get("members", 0) > 0
    for name in (("rhat_lp_within", "rhat_f_within") if within else ("rhat_lp", "rhat_f_max")):
        value = row.get(name, math.nan)
        if not value <= RHAT_LISTED:  # NaN fails too
            reasons.append(f"{name} {value:.3g} > {RHAT_LISTED}" if math.isfinite(value) else f"{name} not finite")
    for name in ("ess_lp", "ess_f_min"):
        value = row.get(name, math.nan)
        if not value >= ESS_MIN:
            reasons.append(f"{name} {value:.0f} < {ESS_MIN}" if math.isfinite(value) else f"{name} not finite")
    divergences, draws = row.get("divergences", math.nan), row["chains"] * row["draws"]
    if isinstance(divergences, (int, float)) and divergences > DIVERGENCE_FRACTION * draws:
        reasons.append(f"{divergences:.0f} divergences > {DIVERGENCE_FRACTION:.0%} of draws")
    if isinstance(row.get("failed"), (int, float)) and row["failed"] > 0:
        reasons.append(f"{row['failed']:.0f} failed chain(s)")
    return reasons


def _rank(rows: list[dict]) -> None:
    """``rank`` by ESS/s among converged MCMC rows; ``note`` says "best" for the winner."""
    ranked = sorted((r for r in rows if r["converged"] and r["_mcmc"]), key=lambda r: -r["ess_per_s"])
    for i, r in enumerate(ranked, 1):
        r["rank"] = i
    def rhats(r):
        return (r["rhat_lp_within"], r["rhat_f_within"]) if r.get("members") else (r["rhat_lp"], r["rhat_f_max"])

    best = next((r for r in ranked if all(v <= RHAT_BEST for v in rhats(r))), None)
    if best is not None:
        best["note"] = "best"


def _engine_items(engines: Iterable) -> list[tuple[str, str, dict[str, Any], RunConfig | None]]:
    """``(label, kind, options, config)`` per engine (``config`` where one was given); repeated labels
    become ``kind#2``, ``kind#3``..."""
    if isinstance(engines, (str, Mapping, RunConfig)):
        engines = [engines]
    items = []
    for i, item in enumerate(engines):
        config = None
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], RunConfig):
            label, config = item
            kind, options = config.engine, config.given()
        elif isinstance(item, RunConfig):
            kind, options, label, config = item.engine, item.given(), None, item
        elif isinstance(item, str):
            kind, options, label = item, {}, None
        elif isinstance(item, Mapping):
            options = dict(item)
            kind = options.pop("kind", None)
            label = options.pop("label", None)
            if not isinstance(kind, str):
                raise ValueError(f"engines[{i}]: a dict needs a 'kind' (engine name), got {item!r}")
        else:
            raise TypeError(f"engines[{i}]: expected an engine name, a dict or a RunConfig, got {type(item).__name__}")
        items.append((str(label or kind), kind, options, config))
    if not items:
        raise ValueError("engines: give at least one engine")
    labels = unique_labels(label for label, *_ in items)
    return [(label, *rest) for label, (_, *rest) in zip(labels, items)]


def _row(label: str, kind: str, result: Run, reference: PredictiveReference | None = None) -> dict[str, Any]:
    stats = result.sample_stats or {}
    row: dict[str, Any] = {
        "engine": label, "kind": kind, "chains": result.num_chains, "draws": result.num_draws,
        "wall_time_s": float(result.wall_time), "_mcmc": result.kind == "mcmc",
    }
    row.update(predictive_metrics(result))
    if result.model.task == "regression" or reference is not None:
        card = scorecard(result, reference=reference)
        if result.model.task == "regression":  # the scorecard's calibration of the predictive CDF (PIT)
            row.update(ece=card["ece"], coverage=card["coverage"])
        if reference is not None:
            row.update({c: card[c] for c in REFERENCE_COLUMNS[result.model.task]})
    acceptance = stats.get("acceptance_rate")
    row["acceptance"] = float(np.mean(acceptance)) if acceptance is not None else math.nan
    target = (result.options or {}).get("target_accept")
    row["target_accept"] = float(target) if isinstance(target, (int, float)) else math.nan
    diverging = stats.get("diverging")
    row["divergences"] = int(np.sum(diverging)) if diverging is not None else math.nan
    failed = (result.notes or {}).get("failed")  # SG-MCMC chains that blew up
    row["failed"] = int(np.sum(failed)) if failed is not None else math.nan
    row["elbo"], row["rank"], row["note"] = math.nan, math.nan, ""
    row.update({"members": 0, "modes": math.nan, "rhat_lp_within": math.nan, "rhat_f_within": math.nan})
    evals = getattr(result, "grad_evals", None) or {}
    row.update({column: evals.get(stage, math.nan) for column, stage in GRAD_COLUMNS.items()})
    if result.kind == "vi":  # draws from a guide: judged by the fits' convergence, not by R-hat/ESS
        vi = result.vi
        row["elbo"] = float(np.nanmean(vi.final_elbo)) if vi is not None and vi.final_elbo is not None else math.nan
        fits = vi.converged if vi is not None and vi.converged is not None else np.zeros(0, bool)
        row["converged"] = bool(len(fits) and fits.all())
        row["note"] = f"VI: {int(fits.sum())} of {len(fits)} fits converged"
        row.update({k: math.nan for k in ("ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max", "ess_per_s",
                                          "nrhat_lp", "nrhat_f_max", "rhat_w_max", "ess_w_min")})
        return row
    row.update(mixing(result))
    if getattr(result, "chains_per_member", None):
        members = member_mixing(result)
        row.update(members=members["num_members"], modes=members["modes"],
                   rhat_lp_within=members["rhat_lp_within_max"], rhat_f_within=members["rhat_f_within_max"])
    ess = [row["ess_lp"], row["ess_f_min"]]
    ess = [e for e in ess if not math.isnan(e)]
    row["ess_per_s"] = min(ess) / row["wall_time_s"] if ess and row["wall_time_s"] > 0 else math.nan
    stuck = [f"chain {c['chain']} never moved (" + ("log density not finite at its start" if not
             math.isfinite(c["lp"]) else "every proposal rejected") + ")" for c in never_moved(result)]
    reasons = stuck + verdict(row)
    row["converged"], row["note"] = not reasons, "; ".join(reasons)
    return row


def comparison_row(cell: Cell, result: Run, reference: PredictiveReference | None = None) -> dict[str, Any]:
    """The row of one cell of a comparison (a study's row function); scored against ``reference``
    too when given."""
    return _row(cell.label, cell.engine, result, reference)


class ReferenceRow:
    """The row function of a comparison against a reference predictive: :func:`comparison_row` with
    ``reference`` (its name, in the studies' fingerprints, tells such rows from plain ones)."""

    def __init__(self, reference: PredictiveReference):
        self.reference = reference
        self.__qualname__ = f"comparison_row[reference={reference.problem}]"

    def __call__(self, cell: Cell, result: Run) -> dict[str, Any]:
        return comparison_row(cell, result, self.reference)


def columns_of(rows: list[dict]) -> list[str]:
    """The table columns of comparison rows: their task's, with the reference columns after the
    test metrics where the rows were scored against a reference."""
    task = "classification" if "accuracy" in rows[0] else "regression"
    columns = list(COLUMNS[task])
    if "tv" in rows[0]:
        at = columns.index("acceptance")
        columns[at:at] = REFERENCE_COLUMNS[task]
    return columns


def ranked_table(rows: list[dict]) -> pd.DataFrame:
    """The table of comparison rows (:func:`comparison_row`), ranked, with the columns of their task."""
    rows = [dict(r) for r in rows]
    _rank(rows)
    table = pd.DataFrame(rows).set_index("engine", drop=False)
    table.index.name = "label"
    return table[columns_of(rows)]


def compare(model_or_spec, data, engines=("nuts", "svi"), *, num_samples: int = 500, warmup_steps: int = 500,
            num_chains: int | None = None, seed: int = 0, progress: bool = True, checkpoint=None, resume: bool = True,
            checkpoint_every: int | None = None, checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
            threads="auto", dtype=None, device=None, executor="inprocess",
            reference=None) -> tuple[pd.DataFrame, dict[str, Run]]:
    """Run several engines on the same model and data; one row per engine.

    Parameters
    ----------
    model_or_spec, data
        As for :func:`bnnzoo.inference.run`. They are resolved once (by the first
        engine) and the same ``BNN`` and ``Dataset`` go to every engine.
    engines : iterable of str, dict or RunConfig
        Engine names, or ``{"kind": "nuts", "label": "nuts-short", "num_samples": 200, **options}``:
        per-engine overrides of ``num_samples``, ``warmup_steps``, ``num_chains``, ``seed``,
        plus the engine's own options; or a :class:`~bnnzoo.inference.RunConfig`
        (:func:`~bnnzoo.inference.run_config`), alone or as ``(label, config)``, which carries its
        counts and options (the common ones below do not apply to it). Each is checked once, into
        its config, before the first engine runs. Rows are labelled by ``label`` or the engine
        name; repeats become ``nuts#2``, ``nuts#3``.
    num_samples, warmup_steps, num_chains, seed, progress
        Common settings (``num_chains=None``: 2, or ``num_members * chains_per_member`` for an engine
        with ``warm_start="ensemble"``, as :func:`bnnzoo.inference.run` resolves it).
    checkpoint : path, optional
        A folder: each engine's ``<label>.nc``, its row (``cells/<label>.json``) and the table
        so far (``comparison.csv``) are written there as soon as that engine finishes, and the
        running engine's checkpoint under ``checkpoints/<label>/`` (a
        :class:`~bnnzoo.experiments.Study` with one cell per engine).
    resume : bool
        With ``checkpoint`` (default True, as every study): skip the engines that finished in
        ``checkpoint`` (their runs are loaded from their checkpoints) and continue the one that
        was running from its checkpoint; an engine whose settings changed since runs afresh.
        False: every engine afresh (a warning names the finished ones dropped).
    checkpoint_every, checkpoint_seconds
        How often the running engine's state is saved.
    threads : "auto", int or None
        torch threads for each run (:func:`bnnzoo.inference.run`).
    dtype : torch.dtype or str, optional
        The floating dtype of every run (:func:`bnnzoo.inference.run`).
    device : torch.device or str, optional
        Where every run computes (:func:`bnnzoo.inference.run`); None: where the data are.
    executor : "inprocess", "ray" or an executor
        Where the engines run (:mod:`bnnzoo.experiments.executors`): one after another in this
        process, or as Ray tasks side by side (each on one thread); the same draws either way.
    reference : str, path or PredictiveReference, optional
        A reference posterior predictive (:mod:`bnnzoo.diagnostics.scorecard`): the name of a stored
        problem (``"diabetes"``, ``"breast_cancer"``, ``"wine"``: a long ensemble-started NUTS run on the
        zoo network of that name, at the data set's seed-0 test split), a ``.npz`` path, or one in memory.
        It is loaded and checked against the data (task, test inputs) before any engine runs; each row
        then gains ``lppd`` (test log pointwise predictive density per point) and its scores against the
        reference: ``agreement`` and ``tv`` (classification) or ``w2`` and ``tv`` (regression).

    Returns
    -------
    table : pandas.DataFrame
        Indexed by label. Columns: ``engine, kind, chains, draws, wall_time_s``, the test
        metrics (regression: ``rmse``, ``nll``, ``ece`` and ``coverage`` of the 90% interval,
        :mod:`bnnzoo.diagnostics.scorecard`; classification: ``accuracy``, ``ece``, ``nll``),
        ``acceptance`` (mean; NaN if the engine has none) beside ``target_accept`` (the
        engine's target, NaN if it has none), ``divergences`` (total), ``failed`` (SG-MCMC
        chains that blew up), ``elbo`` (VI: mean final ELBO of the fits), ``ess_lp``, ``rhat_lp``,
        ``ess_f_min``, ``rhat_f_max`` (function space, the headline mixing), ``ess_per_s``
        (min of ``ess_lp`` and ``ess_f_min`` per second of wall time), ``converged`` (the
        rule of :func:`verdict`; VI: every fit converged), ``rank`` (by ``ess_per_s`` among
        converged MCMC rows only), ``note`` (why a row is not converged; ``best`` for the
        first converged row with R-hat <= 1.01; VI rows say so), ``nrhat_lp``, ``nrhat_f_max``
        (nested R-hat over 4 superchains, for 8 chains or more), ``rhat_w_max``,
        ``ess_w_min`` (weight space), ``members`` (ensemble members of the warm start; 0 without),
        ``modes`` (modes the members visited), ``rhat_lp_within``, ``rhat_f_within`` (the largest
        R-hat within a member: an ensemble-started row is judged by these,
        :mod:`bnnzoo.diagnostics.members`), ``grad_members``, ``grad_warmup``, ``grad_sampling``,
        ``grad_total`` (gradient evaluations per stage, :mod:`bnnzoo.inference.budget`). VI rows have no
        R-hat/ESS: their draws come from the guide, not from chains.
    runs : dict
        Label -> :class:`~bnnzoo.results.Run`.
    """
    items = _engine_items(engines)
    common = {"num_samples": num_samples, "warmup_steps": warmup_steps, "num_chains": num_chains, "seed": seed}
    cells = []
    for i, (label, kind, options, config) in enumerate(items):  # every entry checked before the first engine runs
        if config is None:
            options = {**common, **options}
            try:
                config = run_config(kind, **options)
            except ValueError as err:
                raise ValueError(f"engines[{i}] ({kind}): {err}") from None
        cells.append(Cell(label, kind, options, config=config))
    reference = as_reference(reference)
    row = comparison_row if reference is None else ReferenceRow(reference)
    study = Study(cells, data, model_or_spec, row=row, table=ranked_table,
                  table_name="comparison.csv", out=checkpoint, resume=resume, executor=executor, name="compare",
                  progress=progress, threads=threads, dtype=dtype, device=device, checkpoint_every=checkpoint_every,
                  checkpoint_seconds=checkpoint_seconds)
    if reference is not None:  # before any engine runs
        check_reference(reference, study.model.task, study.data.x_test)
    try:
        finished = study.run()
    except KeyboardInterrupt as stop:  # hand on what finished
        done = getattr(stop, "finished", [])
        stop.runs, stop.table = _runs(study, done), ranked_table([f.row for f in done]) if done else None
        raise
    return ranked_table([f.row for f in finished]), _runs(study, finished)


def _runs(study: Study, finished: list[Finished]) -> dict[str, Run]:
    """Label -> run of the finished cells (those of an earlier call loaded from their checkpoints)."""
    return {f.cell.label: f.run if f.run is not None else study.load_run(f.cell) for f in finished}


# ------------------------------------------------------------------ table
_DECIMALS = {"wall_time_s": 2, "rmse": 4, "nll": 4, "lppd": 4, "agreement": 4, "tv": 4, "w2": 4, "accuracy": 4, "ece": 4, "coverage": 3, "acceptance": 3, "target_accept": 3,
             "elbo": 1,
             "rhat_lp": 3, "rhat_f_max": 3, "rhat_w_max": 3, "rhat_lp_within": 3, "rhat_f_within": 3,
             "nrhat_lp": 3, "nrhat_f_max": 3, "ess_per_s": 2}
_INTEGERS = ("chains", "draws", "divergences", "failed", "rank", "ess_lp", "ess_f_min", "ess_w_min", "members", "modes",
             *GRAD_COLUMNS)


def _cell(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
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
    decimals, metrics to 4, NaN as ``–``; the ESS/s of a row that is not converged in
    parentheses (it is not ranked)."""
    columns = [str(c) for c in df.columns]
    rows = []
    for record in df.to_dict("records"):
        cells = [_cell(c, record[c]) for c in columns]
        if "ess_per_s" in columns and record.get("converged") is False and cells[columns.index("ess_per_s")] != "–":
            i = columns.index("ess_per_s")
            cells[i] = f"({cells[i]})"
        rows.append(cells)
    numeric = [not all(isinstance(v, str) for v in df[c]) for c in df.columns]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def line(cells):
        return "| " + " | ".join(
            cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(cells, widths, numeric)
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else (":" + "-" * (w + 1))
                          for w, num in zip(widths, numeric)) + "|"
    return "\n".join([line(columns), rule] + [line(r) for r in rows])
