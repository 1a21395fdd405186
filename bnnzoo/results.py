"""What a finished run hands on: draws chain by chain, sampler statistics and typed engine results.

The hand-off between ``inference`` (which builds these containers) and
``diagnostics`` (which reads them). Plain data, no sampler logic: this module
imports nothing from ``bnnzoo.inference`` or ``bnnzoo.diagnostics``.

* :class:`Draws`: what an engine returns: ``samples[name] -> [chain, draw, ...]``
  (constrained), ``sample_stats[name] -> [chain, draw]`` and the typed results
  some engines add (inclusion probabilities, pruning masks, a VI trace,
  compile time, notes for the InferenceData attributes).
* :class:`Run`: :class:`Draws` plus what ``run()`` knows: engine, model, data,
  options and wall time.
* :func:`split_mcmc`: :class:`Draws` of a finished ``pyro.infer.MCMC`` (bnnzoo's
  kernels or Pyro's own). A bnnzoo kernel that advanced C vectorized chains
  inside one Pyro chain is split back into C chains; chains keep their integer
  order (never the string order of ``"chain 10" < "chain 2"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Draws", "MemberFit", "Run", "VITrace", "failure_notes", "split_mcmc"]


@dataclass
class VITrace:
    """The optimisation record of a VI run, one row per independent fit (chain).

    The convergence tests (``bnnzoo.inference.vi.convergence``): a fit has converged when
    the mean ELBO estimate of its last ``window`` steps differs from that of the ``window``
    steps before by at most ``tolerance`` standard errors of that difference, and the mean of
    ``gradient_draws`` fresh gradient estimates at the fitted guide is zero within noise
    (``stationarity``, about N(0, 1) at a stationary point, at most ``tolerance``).

    Attributes
    ----------
    loss : ndarray
        ``[chain, step]`` the negative ELBO estimate of every step (NaN after a fit stopped).
    terms : dict of ndarray
        ``[chain, step]`` per recorded term (e.g. ``nll``, ``kl``, learning rates).
    guide : dict of ndarray
        ``loc`` and ``scale`` of each fit's mean-field guide, ``[chain, D]``.
    num_batches : int
        Minibatches per epoch.
    skipped_steps : ndarray
        ``[chain]`` steps skipped because the loss or a gradient was not finite.
    num_steps : ndarray of int, optional
        ``[chain]`` steps each fit took.
    converged : ndarray of bool, optional
        ``[chain]`` ``|relative_change| <= tolerance`` and ``stationarity <= tolerance``.
    relative_change : ndarray, optional
        ``[chain]`` change of the smoothed ELBO over the last window, in standard errors
        (positive: still improving; NaN: too few steps to judge).
    stationarity : ndarray, optional
        ``[chain]`` the standardised sum of squared t-statistics of the fresh mean gradient.
    final_elbo : ndarray, optional
        ``[chain]`` mean ELBO estimate over each fit's last window.
    window : int
        Steps per window of the ELBO test.
    gradient_draws : int
        Fresh gradient estimates per fit behind ``stationarity``.
    tolerance : float
    spread_elbo : float
        Largest difference of ``final_elbo`` between two fits (nats; NaN for one fit).
    spread_loc : float
        Largest difference of a guide mean between two fits, in units of the guide sd
        (``sqrt((s_c^2 + s_c'^2) / 2)``; NaN for one fit). Network weights are not identifiable:
        fits of a network differ here even when each converged.
    """

    loss: np.ndarray
    terms: dict[str, np.ndarray] = field(default_factory=dict)
    guide: dict[str, np.ndarray] = field(default_factory=dict)
    num_batches: int = 1
    skipped_steps: np.ndarray | None = None
    num_steps: np.ndarray | None = None
    converged: np.ndarray | None = None
    relative_change: np.ndarray | None = None
    stationarity: np.ndarray | None = None
    final_elbo: np.ndarray | None = None
    window: int = 0
    gradient_draws: int = 0
    tolerance: float = math.nan
    spread_elbo: float = math.nan
    spread_loc: float = math.nan


@dataclass
class MemberFit:
    """One member of an ensemble warm start: a MAP point found by minibatch optimisation
    (``bnnzoo.inference.ensemble``), from which ``chains_per_member`` chains start.

    Attributes
    ----------
    theta : ndarray
        ``[D]`` the member's point in the flat unconstrained space of the potential.
    values : dict of ndarray
        The same point as constrained site values (what the model sees), ``{site: [*shape]}``.
    losses : ndarray
        The training loss of every optimiser step (minibatch :math:`\\hat U / N`).
    val_losses : ndarray
        The validation loss after every epoch (:math:`\\hat U / N` on the held-out rows;
        empty without a validation split).
    val_metric : float
        The validation loss of the returned point (the best epoch's; NaN without a split).
    best_epoch, epochs : int
        The epoch whose point is returned, and the epochs run (early stopping may end sooner).
    wall_time : float
        Seconds of the fit.
    grad_evals : int
        Gradient evaluations of the fit (one per minibatch step: epochs x batches).
    seed : int
        The member's own seed.
    """

    theta: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    val_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    val_metric: float = math.nan
    best_epoch: int = 0
    epochs: int = 0
    wall_time: float = 0.0
    grad_evals: int = 0
    seed: int = 0


@dataclass
class Draws:
    """Posterior draws and per-draw statistics, chain-major, with the typed results of an engine.

    Attributes
    ----------
    samples : dict of ndarray
        Constrained draws, ``[chain, draw, *shape]`` per site.
    sample_stats : dict of ndarray
        Per-draw sampler statistics (ArviZ names), ``[chain, draw]``.
    warmup_sample_stats : dict of ndarray
        The same for the warm-up iterations, where the kernel records them.
    inclusion_prob : dict of ndarray, optional
        Final spike-and-slab inclusion probabilities, ``[chain, *shape]`` per sparse site (SA kernels).
    pruning_mask : dict of ndarray, optional
        Final keep-masks, ``[chain, *shape]`` per pruned site (pruning kernels).
    vi : VITrace, optional
        The optimisation record of a VI run.
    compile_seconds : float, optional
        Seconds spent compiling the potential (``compile=True``).
    notes : dict
        Short facts for the InferenceData attributes (what ``lp`` estimates,
        iterations per draw, why a default was chosen, ...).
    members : list of MemberFit, optional
        The members of an ensemble warm start (``warm_start="ensemble"``); chain ``c``
        started from member ``c // chains_per_member``.
    chains_per_member : int, optional
        Chains started from each member (None: no ensemble warm start).
    grad_evals : dict
        Gradient evaluations per stage: ``members``, ``warmup``, ``sampling`` (summed over
        members and chains) and ``total``; empty where unknown.
    """

    samples: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    warmup_sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    inclusion_prob: dict[str, np.ndarray] | None = None
    pruning_mask: dict[str, np.ndarray] | None = None
    vi: VITrace | None = None
    compile_seconds: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    members: list[MemberFit] | None = None
    chains_per_member: int | None = None
    grad_evals: dict[str, int] = field(default_factory=dict)

    @property
    def num_chains(self) -> int:
        return next(iter(self.samples.values())).shape[0]

    @property
    def num_draws(self) -> int:
        return next(iter(self.samples.values())).shape[1]


@dataclass
class Run(Draws):
    """The result of one engine on one model and data set: :class:`Draws` plus
    the engine's name and kind, the model, the data, the options used (defaults
    filled in) and the wall time. Build its InferenceData with
    :func:`bnnzoo.diagnostics.to_inference_data`.

    Attributes
    ----------
    engine : str
    kind : str
        ``"mcmc"`` or ``"vi"``.
    model : BNN
    data : Dataset
    wall_time : float
        Seconds spent in the engine (set-up, warm-up and sampling).
    options : dict
        Run-level counts and every engine option, defaults included.
    """

    engine: str = ""
    kind: str = "mcmc"
    model: Any = None
    data: Any = None
    wall_time: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_draws(cls, draws: Draws, **run_fields) -> "Run":
        """A :class:`Run` with the fields of ``draws`` and ``run_fields``."""
        return cls(**{f: getattr(draws, f) for f in Draws.__dataclass_fields__}, **run_fields)

    def values(self, chunk: slice | None = None) -> dict[str, torch.Tensor]:
        """Draws as tensors with one flat batch dim ``[chain * draw, ...]`` (optionally a slice of it)."""
        dtype = torch.get_default_dtype()
        out = {}
        for name, v in self.samples.items():
            flat = v.reshape((-1,) + v.shape[2:])
            out[name] = torch.as_tensor(flat if chunk is None else flat[chunk], dtype=dtype)
        return out

    def predict(self, x, chunk_size: int = 256) -> np.ndarray:
        """Network outputs ``f`` at ``x`` for every draw: ``[chain, draw, N, out]``."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.get_default_dtype())
        total = self.num_chains * self.num_draws
        parts = []
        with torch.no_grad():
            for start in range(0, total, chunk_size):
                values = self.values(slice(start, start + chunk_size))
                parts.append(self.model.apply(values, x).cpu().numpy())
        f = np.concatenate(parts)
        return f.reshape((self.num_chains, self.num_draws) + f.shape[1:])


# ------------------------------------------------------------ from Pyro's MCMC
def _to_numpy(v) -> np.ndarray:
    return v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)


def _chain_stats(diag: dict, num_draws: int, vectorized: int) -> dict[str, np.ndarray]:
    """One Pyro chain's stats as ``[vectorized, draws, *rest]`` arrays.

    A kernel reports ``[draws, *rest]`` per stat, or ``[draws, C, *rest]`` when it
    advanced C vectorized chains.
    """
    stats = {k: np.asarray(v) for k, v in (diag.get("sample_stats") or {}).items()}
    if "diverging" not in stats:  # a stock Pyro kernel: only the divergence indices survive
        diverging = np.zeros((num_draws, vectorized) if vectorized > 1 else num_draws, dtype=bool)
        index = np.asarray(diag.get("divergences", []), dtype=int)
        if vectorized == 1:
            diverging[index] = True
        stats["diverging"] = diverging
    return {k: np.moveaxis(v, 1, 0) if vectorized > 1 else v[None] for k, v in stats.items()}


def _stack_stats(rows: list[dict], num_draws_of, vectorized: int) -> dict[str, np.ndarray]:
    per_chain = [_chain_stats(d, num_draws_of(d), vectorized) for d in rows]
    if not per_chain:
        return {}
    return {k: np.concatenate([c[k] for c in per_chain])
            for k in per_chain[0] if all(k in c for c in per_chain)}


#: what a kernel's ``diagnostics()`` carries besides Pyro's own entries
KERNEL_DIAGNOSTICS = ("divergences", "sample_stats", "warmup_sample_stats", "final_state", "num_chains")


def _kernel_diagnostics(mcmc) -> list[dict]:
    """Each Pyro chain's kernel diagnostics, through the public ``MCMC.diagnostics()``
    (``{name: {"chain i": value}}``)."""
    diag = mcmc.diagnostics()
    return [{k: diag[k][f"chain {i}"] for k in KERNEL_DIAGNOSTICS if k in diag and f"chain {i}" in diag[k]}
            for i in range(mcmc.num_chains)]


def _final_state(diagnostics: list[dict], name: str) -> dict[str, np.ndarray] | None:
    """A kernel's final per-chain arrays ``diagnostics()["final_state"][name]``, concatenated over
    Pyro chains: ``{site: [chain, ...]}`` (None where the kernel has none)."""
    rows = [(d.get("final_state") or {}).get(name) for d in diagnostics]
    if not rows or any(r is None for r in rows):
        return None
    return {site: np.concatenate([np.asarray(r[site]) for r in rows]) for site in rows[0]}


def failure_notes(failure: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """``Run.notes`` of a kernel that flags failed chains (the SG-MCMC kernels' ``final_state["failure"]``,
    ``[chain]`` arrays): ``failed`` (a bool per chain) and ``failed_at`` (per chain None, or
    ``{"phase": "warmup" | "sampling", "iteration", "draw", "reason"}``: the SG-MCMC iteration
    counted from 1 over the whole run, and the index of the draw in ``warmup_sample_stats`` /
    ``sample_stats``). Empty where the kernel does not check."""
    if failure is None:
        return {}
    failed = [bool(f) for f in np.asarray(failure["failed"]).reshape(-1)]
    columns = (np.asarray(failure[k]).reshape(-1) for k in ("warmup", "iteration", "draw", "reason"))
    at = [None if not f else {"phase": "warmup" if bool(w) else "sampling", "iteration": int(i), "draw": int(d),
                              "reason": str(r)}
          for f, w, i, d, r in zip(failed, *columns)]
    return {"failed": failed, "failed_at": at}


def _kernel_notes(mcmc) -> dict:
    """The notes of the potential of an MCMC's kernel where it has one (bnnzoo's kernels, set up in
    this process), e.g. how a Pyro model's chains were batched."""
    potential = getattr(getattr(mcmc, "kernel", None), "potential", None)
    notes = getattr(potential, "notes", None)
    return dict(notes()) if callable(notes) else {}


def split_mcmc(mcmc) -> Draws:
    """:class:`Draws` of a finished ``pyro.infer.MCMC`` or ``bnnzoo.inference.MCMC``.

    ``bnnzoo.inference.MCMC`` already presents C chains (``sample_stats()``); under plain
    Pyro the kernels' statistics come from the public ``diagnostics()``, and a bnnzoo
    kernel that advanced C chains inside one Pyro chain is split back into C chains.
    Failed chains (:func:`failure_notes`) go to ``notes``."""
    grouped = {k: _to_numpy(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    if hasattr(mcmc, "sample_stats"):
        return Draws(grouped, mcmc.sample_stats(), mcmc.sample_stats(warmup=True),
                     inclusion_prob=mcmc.final_state("inclusion_prob"), pruning_mask=mcmc.final_state("pruning_mask"),
                     notes={**_kernel_notes(mcmc), **failure_notes(mcmc.final_state("failure"))})
    diagnostics = _kernel_diagnostics(mcmc)
    vectorized = int(diagnostics[0].get("num_chains", 1)) if diagnostics else 1
    num_draws = next(iter(grouped.values())).shape[1]
    if vectorized > 1:  # [pyro_chain, draw, C, ...] -> [pyro_chain * C, draw, ...]
        grouped = {
            k: np.moveaxis(v, 2, 1).reshape((-1, num_draws) + v.shape[3:]) for k, v in grouped.items()
        }
    stats = _stack_stats(diagnostics, lambda d: num_draws, vectorized)
    warm_rows = [{"sample_stats": d.get("warmup_sample_stats") or {}, "divergences": []} for d in diagnostics]
    warm = {}
    if warm_rows and warm_rows[0]["sample_stats"]:
        warm = _stack_stats(warm_rows, lambda d: len(next(iter(d["sample_stats"].values()))), vectorized)
    return Draws(grouped, stats, warm, inclusion_prob=_final_state(diagnostics, "inclusion_prob"),
                 pruning_mask=_final_state(diagnostics, "pruning_mask"),
                 notes={**_kernel_notes(mcmc), **failure_notes(_final_state(diagnostics, "failure"))})
