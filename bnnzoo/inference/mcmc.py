r"""``bnnzoo.inference.MCMC``: Pyro's ``MCMC`` driver with NumPyro's ``chain_method``.

``MCMC(kernel, num_samples, warmup_steps, num_chains=C, chain_method=...)`` takes
Pyro's constructor and adds one keyword:

* ``"vectorized"``: the C chains advance as one ``[C, D]`` batch inside one bnnzoo
  kernel (a :class:`~bnnzoo.inference.kernels.base.FlatKernel`): one batched
  potential evaluation per leapfrog step for all chains;
* ``"sequential"``: C Pyro chains one after another in this process;
* ``"parallel"``: Pyro's own choice (worker processes when there are more CPUs
  than chains, else sequential).

Whichever way they are computed, C chains are C chains: ``get_samples()`` is
``[C * num_samples, ...]`` (it feeds :class:`pyro.infer.Predictive` directly),
``get_samples(group_by_chain=True)`` is ``[C, num_samples, ...]``, and
``summary()`` and ``diagnostics()`` compute R-hat and ESS across the C chains.
:meth:`MCMC.sample_stats` gives every per-draw statistic as ``[C, num_samples]``.

Example
-------
>>> mcmc = MCMC(ChEESHMC(model), num_samples=500, warmup_steps=500, num_chains=8, chain_method="vectorized")
>>> mcmc.run(x, y)
>>> Predictive(model, posterior_samples=mcmc.get_samples())(x)["obs"].shape   # [8 * 500, N]
"""

from __future__ import annotations

import itertools
import json
import math
import time
from functools import partial

import numpy as np
import torch
from pyro.infer import MCMC as PyroMCMC
from pyro.infer.mcmc.api import _UnarySampler
from pyro.infer.mcmc.logger import DIAGNOSTIC_MSG, ProgressBar, initialize_logger

from .. import validation
from .budget import BudgetMeter
from .checkpoint import Checkpoint, deferred_interrupt, kernel_state, rng_state, set_rng_state
from .kernels.base import FlatKernel

__all__ = ["CHAIN_METHODS", "MCMC"]

CHAIN_METHODS = ("parallel", "sequential", "vectorized")


def _split_diagnostics(diag: dict, num_chains: int) -> list[dict]:
    """One vectorized kernel's ``diagnostics()`` (stats ``[draws, C]``, ``[draws]`` for one chain)
    as C per-chain dicts."""
    if num_chains == 1:
        return [diag]
    out = []
    for c in range(num_chains):
        one = {k: v for k, v in diag.items() if k not in ("divergences", "sample_stats", "warmup_sample_stats",
                                                           "final_state", "acceptance rate", "num_chains")}
        stats = {k: np.asarray(v)[:, c] for k, v in (diag.get("sample_stats") or {}).items()}
        warm = {k: np.asarray(v)[:, c] for k, v in (diag.get("warmup_sample_stats") or {}).items()}
        one["sample_stats"], one["warmup_sample_stats"], one["num_chains"] = stats, warm, 1
        one["divergences"] = np.flatnonzero(stats["diverging"]).tolist() if "diverging" in stats else []
        if "acceptance_rate" in stats:
            one["acceptance rate"] = float(np.mean(stats["acceptance_rate"]))
        if diag.get("final_state"):
            one["final_state"] = {name: {site: np.asarray(a)[c:c + 1] for site, a in sites.items()}
                                  for name, sites in diag["final_state"].items()}
        out.append(one)
    return out


#: seconds between two updates of the progress bar's kernel line (Pyro computes it every iteration)
LOG_EVERY = 0.25


class _LoggingHook:
    """Pyro's logging hook (``_add_logging_hook``: the kernel's ``logging()`` line on the progress
    bar, then the user's hook), with the kernel's line made at most every :data:`LOG_EVERY` seconds
    and only when a bar shows it: Pyro builds it (a mean over the last 50 draws, as JSON) at every
    iteration, about 0.1 ms, a tenth of a small network's transition."""

    def __init__(self, logger, progress: ProgressBar, hook, shown: bool):
        self.logger, self.progress, self.hook, self.shown = logger, progress, hook, shown
        self._last = -math.inf

    def __call__(self, kernel, params, stage: str, i: int) -> None:
        if self.shown:
            now = time.monotonic()
            if now - self._last >= LOG_EVERY:
                self._last = now
                self.logger.info(json.dumps(kernel.logging()), extra={"msg_type": DIAGNOSTIC_MSG})
            self.progress.set_description(stage, refresh=False)
        if self.hook is not None:
            self.hook(kernel, params, stage, i)


class _NoInterrupt:
    """What the loop reads of :func:`deferred_interrupt` when nothing is saved: Ctrl-C raises as usual."""

    requested = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Sampler(_UnarySampler):
    """bnnzoo's one-process MCMC loop: the chains one after another, each yielding what Pyro's
    ``_gen_samples`` yields (the sites' shapes, each kept draw flat, the kernel's diagnostics), so
    Pyro's ``MCMC.run`` collects them as its own. Beside Pyro's loop it

    * advances a :class:`~bnnzoo.inference.kernels.base.FlatKernel` on its ``[C, D]`` point
      (:meth:`~bnnzoo.inference.kernels.base.FlatKernel.sample_flat`): the point goes from one
      transition to the next as it is, and a site dict (views of it) is made only for the hook
      and a kept draw; another kernel (Pyro's NUTS) steps through ``kernel.sample(params)``;
    * builds the progress bar's kernel line only when a bar shows it (:class:`_LoggingHook`);
    * saves as a :class:`Checkpoint` asks, when it is given one: on resume, finished chains and
      the draws so far are replayed from disk and the running chain continues from its saved
      iteration with its saved kernel and RNG states;
    * counts a gradient budget as it goes, when it is given a
      :class:`~bnnzoo.inference.budget.BudgetMeter` (one Pyro chain holding every chain): warm-up
      ends once it has spent its share, and sampling stops at the draw that passes the budget
      (``kept``: the draws yielded; the ``MCMC`` collects that many).
    """

    def __init__(self, kernel, num_samples, warmup_steps, num_chains, disable_progbar, initial_params, hook,
                 checkpoint: Checkpoint | None = None, budget: BudgetMeter | None = None):
        super().__init__(kernel, num_samples, warmup_steps, num_chains, disable_progbar, initial_params, hook)
        self.checkpoint = checkpoint
        # counted in the loop where one Pyro chain holds every chain (chains in sequence: cut afterwards)
        self.budget = budget if isinstance(kernel, FlatKernel) and num_chains == 1 else None
        self.kept = num_samples  # the draws the running chain yields (fewer where the budget stops it)
        self.on_kept = None  # told the count before the draws that end a chain early are yielded

    def _keep(self, draws: int) -> None:
        self.kept = draws
        if self.on_kept is not None:
            self.on_kept(draws)

    def run(self, *args, **kwargs):
        import logging

        kernel, ck = self.kernel, self.checkpoint
        flat_kernel = isinstance(kernel, FlatKernel)
        saved = (ck.load() if ck is not None else None) or {"chain": 0, "finished": [], "chunks": [], "draws": 0}
        finished, total = list(saved["finished"]), self.warmup_steps + self.num_samples
        for chain in range(self.num_chains):
            if chain < len(finished):  # replay a finished chain
                done = finished[chain]
                self._keep(done.get("draws", self.num_samples))
                yield done["structure"], chain
                for name in done["chunks"]:
                    for flat in ck.load_chunk(name):
                        yield flat, chain
                yield done["diagnostics"], chain
                continue
            if self.initial_params is not None:
                kernel.initial_params = {k: v[chain] for k, v in self.initial_params.items()}
            if saved["chain"] == chain and "rng" in saved:
                set_rng_state(saved["rng"])  # where the previous chain left it (restored again below mid-chain)
            kernel.setup(self.warmup_steps, *args, **kwargs)
            params = kernel.initial_params
            save_params = getattr(kernel, "save_params", sorted(params))
            structure = {name: params[name].shape for name in save_params}
            start, chunks, pending, kept = 0, [], [], 0
            if saved["chain"] == chain and "kernel" in saved:  # continue the running chain
                vars(kernel).update(saved["kernel"])
                set_rng_state(saved["rng"])
                params, start, chunks, kept = saved["params"], saved["iteration"], list(saved["chunks"]), saved["draws"]
            theta = kernel.flatten(params) if flat_kernel else None
            # warm-up's end: the kernel's own count (a budget may have ended it early, before a save)
            warmup_end = kernel._warmup_steps if flat_kernel else self.warmup_steps
            meter = self.budget
            self._keep(self.num_samples)
            if meter is not None:
                meter.start(kernel, self.warmup_steps)
            yield structure, chain
            for name in chunks:
                for flat in ck.load_chunk(name):
                    yield flat, chain
            progress = ProgressBar(self.warmup_steps, self.num_samples, disable=self.disable_progbar)
            hook = _LoggingHook(initialize_logger(logging.getLogger("pyro.infer.mcmc"), "", progress), progress,
                                self.hook, shown=not self.disable_progbar)
            label = f" [{chain}]" if self.num_chains > 1 else ""

            def flush():
                """Write the draws kept since the last save as one chunk."""
                nonlocal kept, pending
                if pending:
                    chunks.append(ck.save_chunk(f"chain{chain}-{kept:08d}.pt", torch.stack(pending)))
                    kept, pending = kept + len(pending), []

            def save(iteration):
                flush()
                ck.save({"chain": chain, "iteration": iteration, "kernel": kernel_state(kernel), "params": params,
                         "rng": rng_state(), "chunks": chunks, "draws": kept, "finished": finished},
                        chain=chain, iteration=iteration, draws=kept)

            if hasattr(self.hook, "resumed"):  # progress lines count from where the run is
                self.hook.resumed(chain * total + start)
            policy = getattr(getattr(kernel, "runtime", None), "policy", None)
            with deferred_interrupt() if ck is not None else _NoInterrupt() as interrupt:
                for t in itertools.count(start):
                    if t >= warmup_end + self.num_samples:
                        break
                    warmup = t < warmup_end
                    try:
                        compiling = policy is not None and policy.compiled
                        if flat_kernel:
                            theta = kernel.sample_flat(theta)
                            params = kernel.unflatten(theta)
                        else:
                            params = kernel.sample(params)
                        action = meter.after(kernel, warmup) if meter is not None else None
                        if action == "end_warmup" and t + 1 < warmup_end:  # before its scheduled end
                            kernel.end_warmup()
                            warmup_end = meter.warmup_ended_at = t + 1
                        hook(kernel, params, ("Warmup" if warmup else "Sample") + label,
                             t if warmup else t - warmup_end)
                        if not warmup:
                            flat = [params[name].reshape(-1) for name in save_params]
                            flat = (torch.cat if flat else torch.tensor)(flat)
                            if ck is not None:
                                pending.append(flat)
                    except KeyboardInterrupt:  # a hard stop (deferred_interrupt): the last save stands
                        if ck is None:
                            raise
                        raise ck.stopped(f"iteration {t + 1} of chain {chain}") from None
                    if action == "stop":  # this draw passed the budget: the chain ends with it
                        self._keep(t + 1 - warmup_end)
                        meter.draws_not_run = self.num_samples - self.kept
                    if not warmup:
                        yield flat, chain
                    if action == "stop":
                        break
                    if ck is None:
                        continue
                    if interrupt.requested:
                        interrupt.acknowledge()
                        save(t + 1)
                        stage = f"at warm-up iteration {t + 1}" if warmup else \
                            f"after draw {t + 1 - warmup_end}"
                        raise ck.interrupted(f"{stage} of {self.num_samples} (chain {chain})")
                    # a save before a compile starts (compile="auto" decided now; the next step compiles):
                    # a Ctrl-C during the compile then loses nothing
                    if ck.due() or (policy is not None and policy.compiled and not compiling):
                        save(t + 1)
            diagnostics = kernel.diagnostics()
            progress.close()
            if ck is not None:
                flush()
                finished.append({"structure": structure, "chunks": list(chunks), "diagnostics": diagnostics,
                                 "draws": self.kept})
                ck.save({"chain": chain + 1, "rng": rng_state(), "chunks": [], "draws": 0, "finished": finished},
                        chain=chain + 1, iteration=0, draws=0)
            yield diagnostics, chain
            kernel.cleanup()


class MCMC(PyroMCMC):
    """:class:`pyro.infer.MCMC` with ``chain_method`` (module docstring); every other
    argument is Pyro's.

    :param str chain_method: ``"parallel"`` (default, Pyro's behaviour), ``"sequential"``
        or ``"vectorized"`` (a bnnzoo kernel only).
    :param Checkpoint checkpoint: save the run's state there as it goes and continue from it
        when it was opened with ``resume=True`` (:mod:`bnnzoo.inference.checkpoint`); the chains
        then run in this process, one after another.
    :param BudgetMeter budget: count a gradient budget while the chains run
        (:mod:`bnnzoo.inference.budget`; a bnnzoo kernel with ``chain_method="vectorized"``): warm-up
        ends at its share and sampling at the draw that passes it, so ``num_samples`` is then the
        draws that ran.
    """

    def __init__(self, kernel, num_samples, warmup_steps=None, initial_params=None, num_chains=1, hook_fn=None,
                 mp_context=None, disable_progbar=False, disable_validation=True, transforms=None,
                 save_params=None, chain_method="parallel", checkpoint: Checkpoint | None = None,
                 budget: BudgetMeter | None = None):
        validation.one_of("chain_method", chain_method, CHAIN_METHODS)
        validation.integer("num_chains", num_chains, 1)
        self.chain_method = chain_method
        self._vectorized_chains = num_chains if chain_method == "vectorized" else None
        if chain_method == "vectorized":
            if not isinstance(kernel, FlatKernel):
                raise ValueError(f"chain_method='vectorized' needs a bnnzoo kernel (a FlatKernel), got "
                                 f"{type(kernel).__name__}; use chain_method='sequential' or 'parallel'")
            kernel.set_num_chains(num_chains)
            if initial_params is not None:
                kernel.initial_params = initial_params  # [C, ...] per site: the kernel's own batch
                initial_params = None
            num_chains = 1
        elif isinstance(kernel, FlatKernel) and kernel.num_chains != 1:
            kernel.set_num_chains(1)  # one chain per Pyro chain
        super().__init__(kernel, num_samples, warmup_steps, initial_params, num_chains, hook_fn, mp_context,
                         disable_progbar, disable_validation, transforms, save_params)
        if chain_method == "sequential" and not isinstance(self.sampler, _UnarySampler):
            # Pyro has no public switch: its one-process sampler, as it uses when CPUs are short
            self.sampler = _UnarySampler(kernel, num_samples, self.warmup_steps, num_chains, disable_progbar,
                                         initial_params=self.sampler.initial_params, hook=hook_fn)
        if checkpoint is not None:
            checkpoint.externals.setdefault("kernel.model", getattr(kernel, "model", None))
        if checkpoint is not None or (isinstance(kernel, FlatKernel) and isinstance(self.sampler, _UnarySampler)):
            # bnnzoo's loop (_Sampler): a flat kernel's point goes from step to step as it is; saves
            self.sampler = _Sampler(kernel, num_samples, self.warmup_steps, num_chains, disable_progbar,
                                    self.sampler.initial_params, hook_fn, checkpoint, budget)
            # Pyro's run collects num_samples draws a chain: as many as the budget let run
            self.sampler.on_kept = partial(setattr, self, "num_samples")
        self.requested_samples = num_samples

    def run(self, *args, **kwargs):
        self.num_samples = self.requested_samples
        if self._vectorized_chains is not None:
            self.num_chains = 1  # what Pyro's loop runs: one chain holding the C-chain batch
        super().run(*args, **kwargs)
        if self._vectorized_chains is not None:
            chains = self._vectorized_chains
            if chains > 1:  # [1, draws, C, ...] -> [C, draws, ...] (one chain has no chain dim inside)
                self._samples = {k: torch.movedim(v[0], 1, 0) for k, v in self._samples.items()}
            self._diagnostics = _split_diagnostics(self._diagnostics[0], chains)
            self.num_chains = chains

    def sample_stats(self, warmup: bool = False) -> dict[str, np.ndarray]:
        """Every per-draw statistic the kernel recorded, ``[chain, draw]`` (``warmup``: of the warm-up
        iterations); for a stock Pyro kernel only ``diverging`` (from its divergence indices)."""
        key = "warmup_sample_stats" if warmup else "sample_stats"
        rows = [d or {} for d in self._diagnostics]
        if rows and rows[0].get(key):
            return {k: np.stack([np.asarray(r[key][k]) for r in rows]) for k in rows[0][key]}
        if warmup:
            return {}
        diverging = np.zeros((self.num_chains, self.num_samples), dtype=bool)
        for c, r in enumerate(rows):
            diverging[c, np.asarray(r.get("divergences", []), dtype=int)] = True
        return {"diverging": diverging}

    def final_state(self, name: str) -> dict[str, np.ndarray] | None:
        """A kernel's final per-chain arrays (``"inclusion_prob"``, ``"pruning_mask"``), ``[chain, ...]``."""
        rows = [((d or {}).get("final_state") or {}).get(name) for d in self._diagnostics]
        if not rows or any(r is None for r in rows):
            return None
        return {site: np.concatenate([np.asarray(r[site]) for r in rows]) for site in rows[0]}
