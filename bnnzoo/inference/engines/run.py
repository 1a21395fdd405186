"""``run()``: one model, one engine, one :class:`~bnnzoo.results.Run`."""

from __future__ import annotations

import dataclasses
import inspect
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import pyro
import torch

from ...data import Dataset, check_data, load
from ...data.checks import scale_warning
from ...models import BNN, zoo
from ...models.defaults import default_dtype
from ...models.spec import spec_from
from ...results import Run
from ..budget import BudgetMeter, fixed_cost, iteration_cost, plan_samples, plan_warmup, stage_grad_evals, truncate
from ..checkpoint import CHECKPOINT_SECONDS, STATE_LAYOUT, Checkpoint, fingerprint
from ..ensemble import fit_members, initial_points, members_cost
from ..potential import make_potential
from ..threads import busy_note, choose_threads, using_threads, work_per_gradient
from .config import COUNTS, RunConfig, resolve_dtype, run_config
from .registry import Engine

__all__ = ["COUNTS", "check_run", "resolve", "run"]


# ------------------------------------------------------------- helpers
def _resolve_model(model_or_spec) -> BNN:
    if isinstance(model_or_spec, BNN):
        return model_or_spec
    if isinstance(model_or_spec, str) and model_or_spec in zoo.ZOO:
        return BNN(zoo.get(model_or_spec))
    return BNN(spec_from(model_or_spec))


def _resolve_data(data, model: BNN, seed: int) -> Dataset:
    if isinstance(data, str):
        data = load(data, seed=seed)
    elif isinstance(data, dict):
        data = load(seed=seed, **data) if "name" in data else Dataset(**data)
    elif isinstance(data, (tuple, list)):
        if len(data) not in (2, 4):
            raise ValueError(f"data: expected (x, y) or (x_train, y_train, x_test, y_test), got {len(data)} items")
        checks = {"task": model.task, "input_dim": model.spec.num_inputs, "num_classes": model.spec.num_classes}
        x, y = check_data(*data[:2], name="user/train", **checks)  # the model's width: a 1-D x is one column
        xt, yt = check_data(*data[2:], name="user/test", **checks) if len(data) == 4 else (x, y)
        data = Dataset("user", model.task, x, y, xt, yt, num_classes=model.spec.num_classes)
    if not isinstance(data, Dataset):
        raise TypeError(f"data: expected a Dataset, a dataset name or (x, y), got {type(data).__name__}")
    spec = model.spec
    for split, (x, y) in {"train": (data.x_train, data.y_train), "test": (data.x_test, data.y_test)}.items():
        check_data(x, y, task=model.task, input_dim=spec.num_inputs, num_classes=spec.num_classes,
                   name=f"{data.name}/{split}")
    if data.task != model.task:
        raise ValueError(f"data: {data.name} is a {data.task} data set but the model's "
                         f"{spec.likelihood.kind} likelihood is for {model.task}")
    return data


def resolve(model_or_spec, data, seed: int = 0, dtype=None) -> tuple[BNN, Dataset]:
    """The ``BNN`` and the checked ``Dataset`` that :func:`run` would build from its arguments, in the
    run's ``dtype`` (the data cast to it): resolved once, the same objects go to many runs."""
    with default_dtype(resolve_dtype(dtype)):
        model = _resolve_model(model_or_spec)
        data = _resolve_data(data, model, seed)
        if data.x_train.dtype != torch.get_default_dtype():
            data = dataclasses.replace(data)
    return model, data


def check_run(engine: str, num_samples: int = 500, warmup_steps: int = 500, num_chains: int | None = None,
              seed: int = 0, **engine_options) -> Engine:
    """Every check :func:`run` makes on its engine, counts, warm start, budget and options, without
    running anything (:func:`~bnnzoo.inference.engines.config.run_config`): a ``ValueError`` naming the
    field and the value, or the :class:`Engine`."""
    return run_config(engine, num_samples, warmup_steps, num_chains, seed, **engine_options).spec


def _fingerprint(engine: str, model: BNN, data: Dataset, options: dict, counts: dict) -> dict[str, str]:
    """What a checkpoint of this run must match: the model spec, the data (and their device), the engine,
    options and counts, and the layout of the kernels' saved states (``STATE_LAYOUT``)."""
    return fingerprint(engine=engine, model=model.spec.to_dict(), options=options, run=counts,
                       state_layout=STATE_LAYOUT,
                       device=str(data.x_train.device),
                       data={"x_train": data.x_train, "y_train": data.y_train, "x_test": data.x_test,
                             "y_test": data.y_test})


def run(model_or_spec, data, engine: str | RunConfig = "nuts", num_samples: int = 500, warmup_steps: int = 500,
        num_chains: int | None = None, seed: int = 0, progress: bool = True, checkpoint=None, resume: bool = False,
        checkpoint_every: int | None = None, checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
        threads="auto", dtype=None, device=None, member_executor=None, **engine_options) -> Run:
    """Run one engine on one model and data set.

    Parameters
    ----------
    model_or_spec : BNN, BNNSpec, dict, zoo name or TOML path
    data : Dataset, dataset name, or ``(x, y)`` / ``(x, y, x_test, y_test)``
    engine : str or RunConfig
        A key of :data:`ENGINES`; or a :class:`~bnnzoo.inference.engines.config.RunConfig` (from
        :func:`~bnnzoo.inference.run_config`), which carries the counts, options and settings of the
        run: the other keywords (but ``member_executor``) are then left out.
    num_samples, warmup_steps, num_chains : int
        Draws kept per chain (with ``budget``: the most), warm-up steps per chain, chains
        (None: 2, or ``num_members * chains_per_member`` under an ensemble warm start, which a
        given ``num_chains`` must equal).
    seed : int
    progress : bool
        Show progress: Pyro's bar on a terminal, else a line every few seconds with the
        phase, iterations done, rate and time left (:mod:`bnnzoo.inference.progress`).
    checkpoint : path, optional
        A folder for this run's checkpoint (:mod:`bnnzoo.inference.checkpoint`): the state
        is saved there as the run goes, and the finished result when it ends.
    resume : bool
        Continue from ``checkpoint``: a finished run is loaded, a stopped one continues
        from its last save and gives the draws an uninterrupted run would have given.
    checkpoint_every, checkpoint_seconds
        Save every that many iterations (VI: steps) and/or seconds (default: every 30 s).
    threads : "auto", int or None
        torch intra-op threads during the run (:mod:`bnnzoo.inference.threads`): ``"auto"``
        picks from the work per gradient and the free cores, None leaves torch's setting; the
        caller's setting is restored afterwards. The count used is in ``Run.notes["threads"]``.
    dtype : torch.dtype or str, optional
        The floating dtype of the run (``torch.float64`` or ``"float64"``, ...): every tensor
        the run creates, the data (cast where they differ; the cast is in ``Run.notes["cast"]``)
        and the draws and statistics. None: torch's default dtype.
    device : torch.device or str, optional
        Where the run computes (``"cpu"``, ``"cuda"``, ``"cuda:1"``): every tensor the run
        creates lives there, the data are moved there (the move is in ``Run.notes["cast"]``) and the
        device is in ``Run.notes["device"]``. None: where the data are (a data set loaded by name: the
        CPU). A device this machine does not have is an error before anything runs. The returned
        :class:`Run` is on the host (NumPy draws, its data on the CPU).
    member_executor : optional
        Where the members of an ensemble warm start are fitted: an executor of
        :mod:`bnnzoo.experiments.executors` (``RayExecutor()``: one member per worker), entered by the
        caller; None: one after another in this process. The members are the same either way.
    **engine_options
        Options of the engine (``ENGINES[engine].options()`` lists them), and the run's start
        (:mod:`bnnzoo.inference.ensemble`): ``warm_start`` (``"prior"``, the default: the kernel's
        own initial points; ``"ensemble"``: K MAP fits, then M chains from each), ``num_members``
        (K), ``chains_per_member`` (M, default 1), ``ensemble`` (a dict of
        :class:`~bnnzoo.inference.ensemble.EnsembleOptions`: optimizer, lr, num_epochs, batch_size,
        val_fraction, patience, jitter, ...); and ``budget``: gradient evaluations for the whole run
        (members, warm-up, sampling; :mod:`bnnzoo.inference.budget`) instead of a fixed ``num_samples``.
        The members are in ``Run.members``, the gradient evaluations of every stage in ``Run.grad_evals``.

    Returns
    -------
    Run
    """
    if isinstance(engine, RunConfig):
        _only_config(locals(), engine_options)
        config = engine
    else:
        config = run_config(engine, num_samples, warmup_steps, num_chains, seed, progress=progress,
                            checkpoint=checkpoint, resume=resume, checkpoint_every=checkpoint_every,
                            checkpoint_seconds=checkpoint_seconds, threads=threads, dtype=dtype, device=device,
                            **engine_options)
    with default_dtype(config.settings.dtype):
        return _run(config, model_or_spec, data, member_executor)


#: run()'s keywords that a RunConfig carries, with their defaults (read off run()'s signature)
_CONFIG_KEYWORDS = {name: p.default for name, p in inspect.signature(run).parameters.items()
                    if p.default is not inspect.Parameter.empty and name not in ("engine", "member_executor")}


def _only_config(given: dict, engine_options: dict) -> None:
    """Refuse run()'s own keywords beside a RunConfig: the config carries them."""
    extra = [k for k, default in _CONFIG_KEYWORDS.items() if given[k] is not default and given[k] != default]
    extra += list(engine_options)
    if extra:
        raise ValueError(f"{extra[0]}: engine= is a RunConfig, which carries the run's counts, options and "
                         f"settings; give {extra[0]} to run_config(), not to run()")


def _placed(data: Dataset, device: torch.device | None) -> tuple[Dataset, dict]:
    """``data`` in torch's default dtype on ``device`` (None: where they are), and the note
    ``{"cast": "data <dtype> -> <dtype>, <device> -> <device>"}`` of what changed (empty if nothing)."""
    dtype, here = torch.get_default_dtype(), data.x_train.device
    device = here if device is None else device
    changes = [f"{a} -> {b}" for a, b in ((data.x_train.dtype, dtype), (here, device)) if a != b]
    if not changes:
        return data, {}
    moved = {f: getattr(data, f).to(device) for f in ("x_train", "y_train", "x_test", "y_test")}
    # re-validated, and cast to the default dtype, on the way
    return dataclasses.replace(data, **moved), {"cast": "data " + ", ".join(changes)}


def _run(config: RunConfig, model_or_spec, data, member_executor=None) -> Run:
    """:func:`run` after its argument checks (``config``), under the run's default dtype."""
    settings, plan = config.settings, config.start
    model = _resolve_model(model_or_spec)
    data, cast = _placed(_resolve_data(data, model, config.seed), settings.device)
    host = _placed(data, torch.device("cpu"))[0]  # what the Run keeps
    scale = scale_warning(data.x_train, data.y_train, model.task, f"data {data.name!r}")
    if scale is not None:
        warnings.warn(scale, stacklevel=3)
        cast = {**cast, "data_scale": scale}  # a note of the run, as the cast is
    config, tuning = config.for_model(model)
    potential = make_potential(model, data.x_train, data.y_train) if plan.ensemble else None
    member_most = members_cost(potential, plan.num_members, plan.options) if plan.ensemble else 0
    if plan.budget is not None:  # before anything runs
        warmup, cost = config.warmup_steps, iteration_cost(config.spec, config.engine_options)
        if cost is not None:  # the most: planned to its share once the members are fitted
            warmup = plan_warmup(plan.budget, member_most, warmup, config.num_chains, plan.warmup_budget, cost)
        planned = plan_samples(plan.budget, member_most, warmup, config.num_chains, config.num_samples,
                               fixed_cost(config.spec, config.engine_options))
        config = dataclasses.replace(config, num_samples=planned)
    options = config.record()
    counts = {"num_samples": config.num_samples, "num_chains": config.num_chains, "seed": config.seed}
    if config.spec.kind == "mcmc":
        counts["warmup_steps"] = config.warmup_steps
    store = None
    if settings.checkpoint is not None:
        store = Checkpoint(settings.checkpoint, _fingerprint(config.engine, model, data, options, counts),
                           settings.resume, settings.checkpoint_every, settings.checkpoint_seconds)
    try:
        return _run_engine(config, model, data, host, cast, tuning, options, store, potential, member_executor)
    finally:
        if store is not None:
            store.close()


def _resumed_note(store: Checkpoint, wall: float) -> dict:
    """``{"resumed": ...}``: where a resumed run continued from, its segments and their seconds."""
    if store.resumed_from is None:
        return {}
    at = store.resumed_from
    return {"resumed": f"continued from chain {at.get('chain', 0)}, iteration {at.get('iteration', 0)}; "
                       f"{store.segments} segments, {wall:.1f} s in all"}


def _run_engine(config: RunConfig, model, data, host, cast, tuning, options, store, potential=None,
                member_executor=None) -> Run:
    """The engine's run (or its finished result from ``store``) once the checkpoint is open."""
    spec, engine, plan = config.spec, config.engine, config.start
    seed, num_chains, progress, threads = config.seed, config.num_chains, config.settings.progress, \
        config.settings.threads
    if store is not None:
        done = store.finished()
        if done is not None:
            return Run.from_draws(done["draws"], engine=engine, kind=spec.kind, model=model, data=host,
                                  wall_time=done["wall_time"], options=options)
    pyro.set_rng_seed(int(seed))  # Python's random takes no numpy integer
    if store is not None and threads is not None:
        threads = store.threads(choose_threads(work_per_gradient(model, len(data.x_train), num_chains))
                                if threads == "auto" else threads)
    if store is not None and store.resumed_from is not None and progress:
        at = store.resumed_from
        print(f"bnnzoo {engine}: continuing from the checkpoint in {store.directory} (chain {at.get('chain', 0)}, "
              f"iteration {at.get('iteration', 0)}, {store.previous_seconds:.0f} s so far)", file=sys.stderr,
              flush=True)
    members, initial, member_seconds = None, None, 0.0
    with using_threads(threads, work_per_gradient(model, len(data.x_train), num_chains)) as used:
        busy = busy_note(used) if threads == "auto" else None
        if busy is not None and progress:
            print(f"bnnzoo {engine}: {busy}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        if store is not None:
            store.start_clock()
        if plan.ensemble:
            members = fit_members(potential, plan.num_members, plan.options, seed,
                                  executor=member_executor, **_member_store(store, plan.num_members))
            initial = initial_points(potential, members, plan.chains_per_member, plan.options.jitter, seed)
            member_seconds = time.perf_counter() - start
            pyro.set_rng_seed(int(seed))  # the sampler's draws do not depend on the members' use of the RNG
        member_evals = sum(m.grad_evals for m in members) if members else 0
        meter, planned = None, {}
        if plan.budget is not None and fixed_cost(spec, config.engine_options) is None:
            meter = BudgetMeter(plan.budget, member_evals, plan.warmup_budget)  # adaptive costs: counted as they run
            cost = iteration_cost(spec, config.engine_options)
            warmup = config.warmup_steps if cost is None else plan_warmup(
                plan.budget, member_evals, config.warmup_steps, num_chains, plan.warmup_budget, cost)
            if warmup < config.warmup_steps:  # the adaptation's phases planned on what its share pays for
                config, planned = dataclasses.replace(config, warmup_steps=warmup), {"warmup_planned": warmup}
        draws = spec.run(model, data.x_train, data.y_train, config, checkpoint=store, initial=initial, budget=meter)
        wall = time.perf_counter() - start
    if plan.budget is not None:
        spent = member_evals + stage_grad_evals(draws)["warmup"]
        draws.notes["budget"] = {**truncate(draws, plan.budget, spent), **planned, **(meter.note() if meter else {})}
    if members is not None:
        draws.members, draws.chains_per_member = members, plan.chains_per_member
        draws.notes.update(num_members=plan.num_members, chains_per_member=plan.chains_per_member,
                           member_seconds=member_seconds)
    if spec.kind == "mcmc":
        draws.grad_evals = stage_grad_evals(draws, member_evals)
        draws.notes.pop("warmup_grad_evals", None)  # now in grad_evals["warmup"]
    # into the InferenceData's attrs too
    draws.notes.update(tuning, threads=used, device=str(data.x_train.device), **cast)
    if busy is not None:
        draws.notes["threads_note"] = busy
    if draws.grad_evals:
        draws.notes["grad_evals"] = dict(draws.grad_evals)
    if store is not None:  # every segment of a resumed run counts
        wall += store.previous_seconds
        draws.notes.update(_resumed_note(store, wall))
        store.finish({"draws": draws, "wall_time": wall})
    return Run.from_draws(draws, engine=engine, kind=spec.kind, model=model, data=host, wall_time=wall,
                          options=options)


def _member_store(store: Checkpoint | None, num_members: int) -> dict:
    """``fit_members`` keywords that keep each finished member in the run's checkpoint folder
    (``members/<k>.pt``) and take the saved ones back on resume: a stopped run keeps its
    finished members. The folder is the checkpoint's; its fingerprint covers the members' options."""
    if store is None:
        return {}
    folder = Path(store.directory) / "members"
    if not store.resume:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "fingerprint.pt"
    if stamp.exists() and torch.load(stamp, weights_only=False) != store.fingerprint:
        raise ValueError(f"checkpoint {store.directory}: its ensemble members were written by a different run "
                         f"(start afresh without resume, or use another folder)")
    torch.save(store.fingerprint, stamp)
    done = []
    for k in range(num_members):
        path = folder / f"{k}.pt"
        done.append(torch.load(path, weights_only=False) if path.exists() else None)

    def save(k, fit):
        tmp = folder / f".{k}.pt.tmp"
        torch.save(fit, tmp)
        os.replace(tmp, folder / f"{k}.pt")

    return {"done": done, "on_member": save}
