"""The ``bnnzoo`` command: ``demo``, ``run SPEC.toml``, ``sweep GRID.toml``, ``list``, ``inspect RUN.nc``.

Errors print one line and exit with status 1 (2 for usage errors); ``--debug``
shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import inspect
import re
import sys
import textwrap
import warnings
from pathlib import Path

from . import __version__

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEMO_TITLE = "bnnzoo demo: one network, five engines"
DEMO_DESCRIPTION = """\
**What to conclude.** The five engines get a few minutes each at most on the same
posterior. ChEES-HMC and NUTS (bnnzoo's `batched_nuts`) run 16 chains each as one
batched gradient: at this budget their rows are the ones that converge by the table's
rule (R-hat of lp and f at most 1.05, ESS of both at least 100, divergences at most 1%)
and so the only ones ranked. HMC and RWMH run 2 chains each and have not converged (their
`note` says why: too few effective draws, chains that disagree); their ESS/s is in
parentheses because an unconverged run ranks nothing. SVI is not MCMC: its row says
whether its fits settled, and its draws come from the fitted guide. Errors (rmse, nll)
are close for all of them: a good test error does not mean a sampled posterior.

The model: a 1-10-1 tanh network with a N(0, 1) prior on every weight and bias,
Gaussian noise 0.1, on the `cosine` data (100 points, x ~ U(0, 4),
y = cos x + N(0, 0.1^2)). ChEES-HMC: 16 chains, 400 warm-up + 100 draws each, its
defaults; NUTS: 16 chains x (400 + 100), tree depth at most 9, target acceptance 0.9
(at the default 0.8, 2-3% of its transitions diverge on this posterior); HMC (Pyro's,
15 leapfrog steps): 2 chains x (200 + 200); RWMH: 2 chains x (2000 + 2000); SVI: 2 fits
of at most 3000 steps, 200 draws each. ChEES and NUTS run eagerly (`compile=False`), so the
table's times do not include a compile."""


def demo_plan(quick: bool = False) -> dict:
    """The demo's model, data and engines (``quick``: a much smaller smoke run)."""
    from .models import Gaussian, zoo

    spec = zoo.cosine_mlp(hidden=8 if quick else 10, prior=Gaussian(1.0), noise=0.1)
    n = 20 if quick else 200
    engines = [
        {"kind": "chees", "num_chains": 4 if quick else 16, "num_samples": n // 8 if quick else 100,
         "warmup_steps": n if quick else 400, "compile": False},
        {"kind": "batched_nuts", "num_chains": 4 if quick else 16, "num_samples": n // 8 if quick else 100,
         "warmup_steps": n if quick else 400, "max_tree_depth": 4 if quick else 9, "target_accept": 0.9,
         "compile": False},
        {"kind": "hmc", "num_samples": n, "warmup_steps": n, "num_steps": 5 if quick else 15},
        {"kind": "rwmh", "num_samples": 10 * n, "warmup_steps": 10 * n, "scale": 0.02},
        {"kind": "svi", "num_samples": n, "num_steps": 100 if quick else 3000, "lr": 0.01},
    ]
    return {"spec": spec, "data": {"name": "cosine"}, "engines": engines, "num_chains": 2, "seed": 0}


def _data_table(table) -> tuple[str, dict]:
    """``(name, keywords)`` of a run file's ``[data]``: a data set name or a table of
    :func:`~bnnzoo.data.load`'s keywords (``path`` alone: ``name = "csv"``)."""
    if table is None:
        raise ValueError("[data]: missing; give name = '<dataset>' or path = 'train.csv' with target = '<column>'")
    if isinstance(table, str):
        return table, {}
    if not isinstance(table, dict):
        raise ValueError(f"[data]: expected a table or a data set name, got {table!r}")
    options = dict(table)
    name = options.pop("name", "csv" if "path" in options else None)
    if name is None:
        raise ValueError("[data]: give name = '<dataset>' or path = 'train.csv'")
    return name, options


def load_data(table: dict | str | None, seed: int):
    """The data set of a run file's ``[data]`` (a name or a table); its own ``seed`` wins."""
    from .data import load

    name, options = _data_table(table)
    return load(name, **{"seed": seed, **options})


def _compare(plan: dict, out: str, title: str, description: str, progress: bool, resume: bool = True,
             checkpoint_every: int | None = None, checkpoint_seconds: float | None = 30.0, again: str = "",
             threads="auto") -> int:
    """Run the plan's engines with checkpoints in ``out``; on Ctrl-C, report what finished and how to go on."""
    from .experiments import compare, format_table, write_report

    seed = plan.get("seed", 0)
    data = load_data(plan["data"], seed)
    common = {k: plan[k] for k in ("num_samples", "warmup_steps", "num_chains") if k in plan}
    try:
        table, runs = compare(plan["spec"], data, engines=plan.get("configs", plan["engines"]), seed=seed,
                              progress=progress,
                              checkpoint=out, resume=resume, checkpoint_every=checkpoint_every,
                              checkpoint_seconds=checkpoint_seconds, threads=threads, dtype=plan.get("dtype"),
                              device=plan.get("device"), **common)
    except KeyboardInterrupt as stop:
        runs = getattr(stop, "runs", {})
        print(f"bnnzoo: interrupted; {len(runs)} finished engine(s) and the running engine's checkpoint are in "
              f"{Path(out)}/; continue with: {again} --out {out} --resume", file=sys.stderr, flush=True)
        if runs:  # after the message: a second Ctrl-C here loses only this report
            write_report(stop.table, runs, out, f"{title} (interrupted)", description)
        return 130
    print(format_table(table))
    path = write_report(table, runs, out, title, description)
    print(f"\nwrote {path} and {len(runs)} run file(s) in {Path(out)}/")
    return 0


def cmd_demo(args) -> int:
    from . import validation

    plan = demo_plan(quick=args.quick)
    if args.device is not None:
        plan["device"] = validation.device("--device", args.device)
    return _compare(plan, args.out, DEMO_TITLE, DEMO_DESCRIPTION, progress=not args.no_progress,
                    again="bnnzoo demo" + (" --quick" if args.quick else "") + _device_flag(args),
                    **_checkpointing(args))


def _read_plan(path: str | Path, doc: dict, tables: tuple[str, ...], device: str | None = None) -> dict:
    """What run files and sweep files share, checked: the tables present, ``[model]`` (a spec),
    ``[data]`` and ``[run]`` (counts, ``dtype`` and ``device``; ``device``, the CLI's ``--device``,
    replaces the file's). ``settings`` holds the counts."""
    from . import validation
    from .data import check_load
    from .inference.engines import COUNTS
    from .inference.engines.run import resolve_dtype
    from .models.spec import BNNSpec

    _check_tables(path, doc, tables)
    settings = doc.get("run", {})
    keys = list(COUNTS) + ["dtype", "device"]
    if not isinstance(settings, dict):
        raise ValueError(f"[run]: expected a table of {', '.join(keys)}, got {settings!r}")
    bad = sorted(set(settings) - set(keys))
    if bad:
        raise ValueError(f"[run]: unknown key(s) {', '.join(bad)}; expected {', '.join(keys)}")
    settings = dict(settings)
    dtype = settings.pop("dtype", None)
    try:
        resolve_dtype(dtype)
    except ValueError as err:
        raise ValueError(f"[run] {err}") from None
    in_file = settings.pop("device", None)
    field, device = ("--device", device) if device is not None else ("[run] device", in_file)
    if device is not None:
        device = validation.device(field, device)
    for key, value in settings.items():
        minimum, maximum = COUNTS[key]
        validation.integer(f"[run] {key}", value, minimum, maximum=maximum)
    spec = BNNSpec.from_dict(doc["model"])
    name, data_options = _data_table(doc.get("data"))
    check_load(name, [k for k in data_options if k != "seed"])
    return {"spec": spec, "data": doc.get("data"), "dtype": dtype, "device": device, "settings": settings,
            "data_name": name, "data_options": data_options}


#: the tables of a run file and of a sweep file
RUN_TABLES = ("model", "data", "engines", "run", "description")
SWEEP_TABLES = ("model", "data", "run", "sweep")


def _check_tables(path: str | Path, doc: dict, tables: tuple[str, ...]) -> None:
    """The file's tables are among ``tables`` and ``[model]`` is one of them."""
    unknown = sorted(set(doc) - set(tables))
    if unknown:
        described = " (and a top-level description)" if "description" in tables else ""
        raise ValueError(f"{path}: unknown table(s) {', '.join(unknown)}; expected "
                         f"{', '.join(t for t in tables if t != 'description')}{described}")
    if "model" not in doc:
        raise ValueError(f"{path}: missing the [model] table")


def precheck_file(path: str | Path, what: str, tables: tuple[str, ...]) -> dict:
    """The checks of a run or sweep file that need neither torch nor Pyro, made before they are
    imported (which takes seconds, and tens of seconds on a loaded machine): the file exists, is
    TOML, has known tables, a ``[model]`` and ``[data]``, a ``[run]`` table, and (a run file) a
    list of ``[[engines]]`` tables with a ``kind``. Returns the parsed file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from None
    _check_tables(path, doc, tables)
    if "data" not in doc:
        raise ValueError("[data]: missing; give name = '<dataset>' or path = 'train.csv' with target = '<column>'")
    if not isinstance(doc.get("run", {}), dict):
        raise ValueError(f"[run]: expected a table, got {doc['run']!r}")
    if "engines" in tables:
        engines = doc.get("engines")
        if not isinstance(engines, list) or not engines:
            raise ValueError(f"{path}: add at least one [[engines]] table with kind = '<engine>', got {engines!r}")
        for i, table in enumerate(engines):
            if not isinstance(table, str) and not (isinstance(table, dict) and isinstance(table.get("kind"), str)):
                raise ValueError(f"engines[{i}]: expected a table with kind = '<engine>', got {table!r}")
    return doc


def read_run_file(path: str | Path, device: str | None = None) -> dict:
    """Read a run file: ``[model]`` (a spec), ``[data]``, ``[[engines]]``, an optional ``[run]``
    table with ``num_samples``, ``warmup_steps``, ``num_chains``, ``seed``, ``dtype`` (``"float64"``),
    ``device`` (``"cuda"``), and an optional top-level ``description = "..."`` (the report's
    description; without it, a summary of the model, data and engines). ``device`` (the CLI's
    ``--device``) replaces the file's. Every table is checked before anything runs (the data set's
    values by its loader): a ``ValueError`` naming the table, the key and the value. The plan has
    the file's own text as ``text``, and ``configs``: each engine's ``(label, RunConfig)``, checked here
    once (:func:`~bnnzoo.inference.run_config`), which ``bnnzoo run`` hands to ``compare`` as they are."""
    from .inference import run_config
    from .models.spec import read_toml

    doc = read_toml(path, "run file")
    plan = _read_plan(path, doc, RUN_TABLES, device)
    spec, settings = plan["spec"], plan["settings"]
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"description: expected a string, got {description!r}")
    engines = doc.get("engines")
    if not isinstance(engines, list) or not engines:
        raise ValueError(f"{path}: add at least one [[engines]] table with kind = '<engine>', got {engines!r}")
    configs = []  # each engine's checked run configuration, which compare() runs as it is
    for i, table in enumerate(engines):  # as experiments.compare reads them: a name or a table with a kind
        table = {"kind": table} if isinstance(table, str) else table
        if not isinstance(table, dict) or not isinstance(table.get("kind"), str):
            raise ValueError(f"engines[{i}]: expected a table with kind = '<engine>', got {table!r}")
        options = {k: v for k, v in table.items() if k not in ("kind", "label")}
        try:
            configs.append((table.get("label"), run_config(table["kind"], **{**settings, **options})))
        except ValueError as err:
            raise ValueError(f"engines[{i}] ({table['kind']}): {err}") from None
    if not description.strip():
        kinds = [table if isinstance(table, str) else table.get("label", table["kind"]) for table in engines]
        layers = "-".join([str(spec.input_dim or "x".join(map(str, spec.input_shape or ())))]
                          + [str(getattr(layer, "units", None) or type(layer).__name__) for layer in spec.layers])
        counts = ", ".join(f"{k} = {v}" for k, v in settings.items())
        data_keys = ", ".join(f"{k} = {v}" for k, v in plan["data_options"].items())
        description = (f"Model {spec.name or 'from the run file'} ({layers} units, prior "
                       f"{type(spec.prior).__name__}, likelihood {type(spec.likelihood).__name__}) on data "
                       f"`{plan['data_name']}`{f' ({data_keys})' if data_keys else ''}; engines: {', '.join(kinds)}"
                       f"{'; ' + counts if counts else ''}.")
    return {"spec": spec, "data": plan["data"], "engines": engines, "configs": configs,
            "description": description.strip(),
            "text": Path(path).read_text(), "dtype": plan["dtype"], "device": plan["device"], **settings}


#: keys of a sweep file's [sweep] table
SWEEP_KEYS = ("engines", "seeds", "grid")
#: columns of a sweep's table that its printout leaves to sweep.csv
SWEEP_HIDDEN = ("kind", "chains", "draws", "target_accept", "failed", "elbo", "note", "nrhat_lp", "nrhat_f_max",
                "rhat_w_max", "ess_w_min")


def read_sweep_file(path: str | Path, device: str | None = None) -> dict:
    """Read a sweep file: ``[model]``, ``[data]`` and ``[run]`` as in a run file, and ``[sweep]`` with
    ``engines = [...]``, ``seeds = [...]`` (default: ``[run] seed``, else ``[0]``) and a grid per engine,
    ``[sweep.grid.<engine>]`` with ``option = [values]`` (a single value: fixed). Every cell is built
    and checked before anything runs: a ``ValueError`` naming the table, the key and the value. The
    plan has the cells' counts (``num_samples``, ``warmup_steps``, ``num_chains``), ``engines``,
    ``grid``, ``seeds`` and ``cells`` (each with its checked :class:`~bnnzoo.inference.RunConfig`, counts
    not in the file at :func:`~bnnzoo.experiments.sweep`'s defaults), which ``bnnzoo sweep`` runs."""
    from .experiments import grid_cells, sweep_counts
    from .models.spec import read_toml

    doc = read_toml(path, "sweep file")
    plan = _read_plan(path, doc, SWEEP_TABLES, device)
    table, settings = doc.get("sweep"), plan.pop("settings")
    if not isinstance(table, dict):
        raise ValueError(f"{path}: add a [sweep] table with engines = [...] (and seeds, [sweep.grid.<engine>])")
    unknown = sorted(set(table) - set(SWEEP_KEYS))
    if unknown:
        raise ValueError(f"[sweep]: unknown key(s) {', '.join(unknown)}; expected {', '.join(SWEEP_KEYS)}")
    if "seed" in settings and "seeds" in table:
        raise ValueError(f"[run] seed = {settings['seed']!r} and [sweep] seeds = {table['seeds']!r}: give the "
                         f"seeds once, in [sweep] seeds")
    seeds = table["seeds"] if "seeds" in table else [settings.pop("seed", 0)]
    # every cell checked into its run configuration once, here; bnnzoo sweep runs these cells
    cells = grid_cells(table.get("engines"), table.get("grid"), seeds, sweep_counts(**settings), where="sweep.")
    return {**plan, **settings, "engines": table["engines"], "grid": table.get("grid", {}), "seeds": seeds,
            "cells": cells}


def cmd_run(args) -> int:
    precheck_file(args.spec, "run file", RUN_TABLES)  # before torch is imported
    plan = read_run_file(args.spec, device=args.device)
    description = (f"{plan['description']}\n\nThe run file `{args.spec}`:\n\n```toml\n"
                   f"{plan['text'].rstrip()}\n```")
    return _compare(plan, args.out, f"bnnzoo run {Path(args.spec).name}", description,
                    progress=not args.no_progress, again=f"bnnzoo run {args.spec}{_device_flag(args)}",
                    **_checkpointing(args))


def _device_flag(args) -> str:
    """``--device`` as given (to repeat on ``--resume``)."""
    return f" --device {args.device}" if args.device is not None else ""


def _executor(args):
    """The executor of ``--ray [ADDRESS]`` / ``--workers N`` (checked before anything runs)."""
    from .experiments import RayExecutor

    if args.ray is None:
        if args.workers is not None:
            raise ValueError(f"--workers {args.workers}: give --ray too (without it the cells run in this "
                             f"process, one after another)")
        return "inprocess"
    return RayExecutor(None if args.ray == "local" else args.ray, workers=args.workers)


def cmd_sweep(args) -> int:
    precheck_file(args.grid, "sweep file", SWEEP_TABLES)  # before torch is imported
    from .experiments import format_table, sweep

    plan = read_sweep_file(args.grid, getattr(args, "device", None))
    executor = _executor(args)
    data = load_data(plan["data"], 0)  # drawn once for every cell ([data] seed = N to change it)
    try:
        table = sweep(plan["spec"], data, cells=plan["cells"], out=args.out,
                      executor=executor, progress=not args.no_progress, threads=args.threads, dtype=plan["dtype"],
                      device=plan["device"],
                      checkpoint_every=args.checkpoint_every, checkpoint_seconds=args.checkpoint_seconds,
                      resume=not args.fresh)
    except KeyboardInterrupt as stop:
        done = len(getattr(stop, "finished", []))
        print(f"bnnzoo: interrupted; {done} of {len(plan['cells'])} cells finished and the running cells' "
              f"checkpoints are in {Path(args.out)}/; run the same command again to continue", file=sys.stderr)
        return 130
    print(format_table(table.drop(columns=[c for c in SWEEP_HIDDEN if c in table])))
    print(f"\nwrote {Path(args.out) / 'sweep.csv'} (every column) and {len(table)} run file(s) in {Path(args.out)}/")
    return 0


def _checkpointing(args) -> dict:
    if args.resume and args.fresh:
        raise ValueError("--resume and --fresh: give one (--resume continues what --out holds, --fresh drops it)")
    return {"resume": not args.fresh, "checkpoint_every": args.checkpoint_every,
            "checkpoint_seconds": args.checkpoint_seconds, "threads": args.threads}


def _add_checkpoint_arguments(p, resume: bool = True) -> None:
    what = "engines" if resume else "cells"
    if resume:
        p.add_argument("--resume", action="store_true",
                       help="skip the engines that finished in --out and continue the one that was running "
                            "(the default, as for bnnzoo sweep; kept for the commands printed before)")
    p.add_argument("--fresh", action="store_true",
                   help=f"run every one of the {what} afresh, dropping what --out holds (default: skip the "
                        f"{what} that finished there and continue the running ones)")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="save each running engine's state every N iterations (default: by time only)")
    p.add_argument("--checkpoint-seconds", type=float, default=30.0, metavar="T",
                   help="save each running engine's state every T seconds (default 30)")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="where the engines compute: cpu, cuda or cuda:N (default: [run] device of a run file, "
                        "else cpu)")


def _latex(math: str) -> str:
    r"""Inline LaTeX as plain text: ``\tau \sim C^+(0, \text{s})`` -> ``tau ~ C^+(0, s)``."""
    math = re.sub(r"\\text\{([^}]*)\}", r"\1", math).replace("\\_", "_").replace("\\,", " ").replace("\\sim", "~")
    return " ".join(re.sub(r"\\([A-Za-z]+)", r"\1", math).split())


def _plain(text: str) -> str:
    """A docstring's reST markup as plain text: ``x`` -> x, :math:`...` -> text, :class:`~a.B` -> B."""
    text = re.sub(r":math:`([^`]*)`", lambda m: _latex(m.group(1)), text)
    text = re.sub(r":[a-z:]+:`~(?:[\w.]*\.)?([^`]*)`", r"\1", text)
    text = re.sub(r":[a-z:]+:`([^`]*)`", r"\1", text)
    return " ".join(text.replace("``", "").split())


def _first_sentence(obj) -> str:
    """The first sentence of ``obj``'s docstring, whole and as plain text; a display formula
    (``.. math::``) that follows an opening sentence ends it."""
    doc = re.split(r"\n\S[^\n]*\n-{3,}\n", "\n" + (inspect.getdoc(obj) or ""))[0]  # numpydoc sections off
    text = ""
    for paragraph in doc.strip().split("\n\n"):
        display = paragraph.lstrip().startswith(".. math::")
        text = f"{text} {_latex(paragraph.split('::', 1)[1]) if display else _plain(paragraph)}".strip()
        end = re.search(r"(?<!e\.g)(?<!i\.e)[.!?](?=\s+\D|$)", text)  # "eq. 4" does not end a sentence
        if end:
            return text[:end.end()]
        if display:
            return text.rstrip(",;:") + "."
    return text


def _parameters(obj) -> str:
    """``Name(a=1, b='x')``: a class's or function's parameters with their defaults."""
    params = [p.name if p.default is p.empty else f"{p.name}={p.default!r}"
              for p in inspect.signature(obj).parameters.values()]
    return f"{obj.__name__}({', '.join(params)})"


def _print_start_options() -> None:
    """The run's start keys of an MCMC engine (``warm_start = "ensemble"`` and its members' options)."""
    from .inference.ensemble import EnsembleOptions

    print("\nstart (keys of the same [[engines]] table):\n"
          "  warm_start = 'prior': 'prior' (the kernel's own initial points) or 'ensemble' (MAP members, then chains)\n"
          "  num_members = None: ensemble members K (None: num_chains // chains_per_member, or 4)\n"
          "  chains_per_member = 1: chains M started from each member; num_chains = K * M\n"
          "  budget = None: gradient evaluations for the whole run (members, warm-up, sampling)\n"
          "  warmup_budget = 0.5: with budget, the share of it (after the members) that warm-up may spend\n"
          "ensemble = {...} (the members' options):")
    for name, default in EnsembleOptions.defaults().items():
        print(f"  {name} = {default!r}: {EnsembleOptions.docs()[name]}")


def cmd_list(args) -> int:
    from .data import DATASETS
    from .inference import ENGINES
    from .models import LIKELIHOODS, PRIORS, zoo

    if args.engine is not None:
        if args.engine not in ENGINES:
            raise ValueError(f"engine {args.engine!r}: unknown engine; choose one of {', '.join(ENGINES)}")
        engine, docs = ENGINES[args.engine], ENGINES[args.engine].option_docs()
        print(f"{engine.name}: {engine.description}\n\noptions (default: meaning):")
        for name, default in engine.defaults().items():
            print(f"  {name} = {default!r}: {docs[name]}".rstrip(": "))
        if engine.kind == "mcmc":
            _print_start_options()
        return 0

    def section(title, rows):
        """``rows``: (name, lines); each line wrapped under the name's column."""
        indent = max(len(name) for name, _ in rows) + 4
        print(f"{title}:")
        for name, lines in rows:
            for i, line in enumerate(lines):
                print(textwrap.fill(line, 100, initial_indent=f"  {name if i == 0 else '':<{indent - 2}}",
                                    subsequent_indent=" " * indent, break_on_hyphens=False))
        print()

    described = lambda registry: [(k, [_parameters(v), _first_sentence(v)]) for k, v in registry.items()]  # noqa: E731
    section("priors", described(PRIORS))
    section("likelihoods", described(LIKELIHOODS))
    section("engines (bnnzoo list ENGINE: every option with its default and meaning)",
            [(k, [e.description, f"options: {', '.join(e.options())}"]) for k, e in ENGINES.items()])
    section("datasets", described(DATASETS))
    section("zoo models", described(zoo.ZOO))
    return 0


#: InferenceData attributes every run has; the others are the engine's notes
_RUN_ATTRS = {"created_at", "arviz_version", "creation_library", "creation_library_version",
              "creation_library_language", "sample_dims", "inference_library", "inference_library_version",
              "bnnzoo_version", "num_chains", "num_draws", "engine", "method", "sampling_time", "num_warmup", "options", "model"}


def cmd_inspect(args) -> int:
    import json
    import math

    import pandas as pd

    from .diagnostics import chain_table, run_diagnostics, summary
    from .diagnostics._arviz import from_netcdf, groups

    path = Path(args.run)
    if not path.exists():
        raise FileNotFoundError(f"run file not found: {path}")
    idata = from_netcdf(path)
    attrs = dict(idata.posterior.attrs)
    options = json.loads(attrs.get("options", "{}"))
    table, chains = summary(idata), chain_table(idata)
    per_chain = lambda column, fmt: ", ".join(format(v, fmt) for v in chains[column])  # noqa: E731
    print(f"{path}: groups {', '.join(groups(idata))}")
    for key in ("engine", "method", "model", "sampling_time", "num_chains", "num_draws", "num_warmup"):
        if key in attrs:
            print(f"  {key}: {attrs[key]:.4g}" if isinstance(attrs[key], float) else f"  {key}: {attrs[key]}")
    run = run_diagnostics(idata)  # what the report and the comparison table compute
    print("run diagnostics:")
    for stuck in run["never_moved"]:
        print(f"  {stuck['message']}")
    acceptance, divergences = run["acceptance"], run["divergences"]
    if not math.isnan(acceptance):
        target = f" (target {options['target_accept']})" if options.get("target_accept") is not None else ""
        print(f"  acceptance: {acceptance:.3f} mean{target}; per chain {per_chain('acceptance_rate', '.3f')}")
    if not math.isnan(divergences):
        print(f"  divergences: {divergences:.0f}; per chain {per_chain('divergences', '.0f')}")
    if chains["step_size"].notna().all():
        print(f"  step size: per chain {per_chain('step_size', '.3g')}")
    if "lp" in table.index:  # NaN where there are too few draws, as in the report's table
        tail = f", ESS tail {table.loc['lp', 'ess_tail']:.0f}" if "lp" in table.index else ""
        print(f"  lp: R-hat {run['rhat_lp']:.3f}, ESS bulk {run['ess_lp']:.0f}{tail}")
    if "predictions" in groups(idata):
        print(f"  function space (predictive mean at the test inputs): R-hat max {run['rhat_f_max']:.3f}, "
              f"ESS bulk min {run['ess_f_min']:.0f}")
    if "verdict" in table.attrs:  # an ensemble warm start: judged within modes
        members = table.attrs["members"]
        print(f"  members: {members['num_members']} x {members['chains_per_member']} chains; {table.attrs['verdict']}")
        print(f"  R-hat across all chains (modes differ): lp {members['rhat_lp_across']:.3f}, "
              f"f {members['rhat_f_across_max']:.3f}")
    if options:
        print("options:\n" + "\n".join(f"  {k} = {v!r}" for k, v in options.items()))
    notes = {k: v for k, v in attrs.items() if k not in _RUN_ATTRS and not k.startswith("option.")}
    if notes:
        print("notes:\n" + "\n".join(f"  {k}: {v}" for k, v in notes.items()))
    rows = table.drop(index=[i for i in table.index if i == "lp"]).drop(columns=["acceptance", "divergences"])
    print("weight-space rows (for reference: network weights are not identifiable, so their R-hat is "
          "inflated even where lp and the function space have mixed):")
    with pd.option_context("display.width", 160, "display.max_rows", args.rows):
        print(rows.head(args.rows).to_string())
    return 0


def _threads(text: str):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bnnzoo", description="Bayesian neural networks: models, engines, diagnostics.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--threads", type=_threads, default="auto",
                        help="torch CPU threads: a number, or 'auto' (default: one for a small network, "
                             "else the free cores; see bnnzoo.inference.threads)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="compare NUTS, HMC, RWMH, SVI and ChEES-HMC on the cosine MLP and write a report")
    p.add_argument("--out", default="out")
    p.add_argument("--quick", action="store_true", help="a tiny smoke run (seconds)")
    p.add_argument("--no-progress", action="store_true")
    _add_checkpoint_arguments(p)
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("run", help="run the engines of a TOML run file and write a report")
    p.add_argument("spec", help="TOML file with [model], [data], [[engines]] and optional [run]")
    p.add_argument("--out", default="out")
    p.add_argument("--no-progress", action="store_true")
    _add_checkpoint_arguments(p)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("sweep", help="run engines x option grids x seeds from a TOML sweep file, each cell "
                       "written as it finishes; run again to continue")
    p.add_argument("grid", help="TOML file with [model], [data], optional [run], and [sweep] (engines, seeds, "
                   "[sweep.grid.<engine>])")
    p.add_argument("--out", default="out/sweep")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the cells as Ray tasks: on a local Ray started for the sweep (no ADDRESS), or on a "
                        "cluster ('auto', HOST:PORT, ray://HOST:PORT); needs pip install bnnzoo[ray]")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --ray: cells running at once (default: the cluster's CPUs)")
    p.add_argument("--no-progress", action="store_true")
    _add_checkpoint_arguments(p, resume=False)  # a sweep continues unless --fresh: finished cells are skipped
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser("list", help="priors, likelihoods, engines, datasets and zoo models; or one engine's options")
    p.add_argument("engine", nargs="?", help="an engine: list its options with their defaults and meanings")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("inspect", help="summarise a saved run (.nc)")
    p.add_argument("run")
    p.add_argument("--rows", type=int, default=30)
    p.set_defaults(fn=cmd_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    code = _main(argv)
    if code == 130 and argv is None:  # the command, interrupted: what matters is written; end now rather
        sys.stdout.flush()            # than wait for torch's compile threads to finish their work
        sys.stderr.flush()
        os._exit(code)
    return code


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", message="num_chains=.*available_cpu")
    warnings.filterwarnings("ignore", category=FutureWarning)
    formatwarning = warnings.formatwarning
    if not args.debug:  # one line per warning, no source line (--debug: Python's format)
        warnings.formatwarning = lambda message, category, *rest: f"bnnzoo: warning: {message}\n"
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("bnnzoo: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one clear line unless --debug
        if args.debug:
            raise
        print(f"bnnzoo: error: {e}", file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    sys.exit(main())
