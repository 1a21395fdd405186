"""Pyro's ``HMC`` and ``NUTS`` (engines ``"hmc"``, ``"nuts"``), recording per-draw sampler statistics.

Pyro's kernels keep only a running mean acceptance and a list of divergences.
These subclasses run Pyro's own update unchanged and record, for every draw,
the ArviZ statistics ``acceptance_rate``, ``step_size``, ``n_steps``,
``tree_depth`` (NUTS), ``energy``, ``energy_error``, ``max_energy_error``, ``lp``
and ``diverging`` (floats as float64, ``n_steps``/``tree_depth`` int64, ``diverging``
bool); they come out of ``diagnostics()["sample_stats"]`` like those of every
bnnzoo kernel. Every read of Pyro's private state goes through
:class:`PyroInternals` (a test checks that the installed Pyro has all of it).

* ``acceptance_rate``: the transition's Metropolis acceptance probability (HMC)
  or mean acceptance over the trajectory (NUTS), recovered exactly from Pyro's
  running mean.
* ``energy``: the Hamiltonian ``U(z) + K(r)`` at the accepted state (ArviZ's
  definition, what ``az.plot_energy`` / ``az.bfmi`` assume): HMC's proposal where
  accepted, else the start (after the momentum refresh); NUTS's chosen leaf.
* ``energy_error``: HMC: H at the proposal minus H at the start (inf if not finite;
  the acceptance probability is ``min(1, exp(-energy_error))``); NUTS: H at the
  accepted state minus H at the start (0 where the chain stays).
* ``max_energy_error``: the largest ``|H_t - H_0|`` over the leapfrog steps (HMC's
  trajectory step by step, NUTS's leaves); inf if any is not finite.
* ``lp``: ``-U`` at the new draw (log joint in unconstrained space, Jacobian included).

Their defaults are those of the ``nuts`` and ``hmc`` engines, one value per option in
:class:`NUTSOptions` and :class:`HMCOptions` (``target_accept`` None: recommended for the
model's smoothness, 0.8 for a smooth network or any other Pyro model); Pyro's own keywords
(``target_accept_prob``, ``init_strategy``, ``jit_compile``, ...) are accepted as in Pyro.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
from pyro.infer.mcmc import HMC as PyroHMC
from pyro.infer.mcmc import NUTS as PyroNUTS

from ..potential.pyro_model import explained_initialization
from ..options import Options, flag, fraction, integer, option, optional, positive
from ..tuning import resolve_target_accept
from .pyro_internals import PyroInternals, _finite_or_inf, _Transition

__all__ = ["HMC", "HMCOptions", "NUTS", "NUTSOptions", "PyroInternals"]


@dataclass(frozen=True)
class PyroOptions(Options):
    """Options shared by the ``nuts`` and ``hmc`` engines."""

    step_size: float = option(0.1, "initial step size (Pyro finds a reasonable one before warm-up)", positive)
    target_accept: float | None = option(
        None, "target acceptance (None: 0.8 for a smooth network, 0.715 for a ReLU-family one)", optional(fraction))
    adapt_mass_matrix: bool = option(True, "adapt the mass matrix during warm-up", flag)
    fast: bool = option(True, "engine: bnnzoo's batched BNN potential (False: Pyro traces the model)", flag)
    init_radius: float = option(1.0, "engine: initial points uniform in (-r, r) unconstrained", positive)

    #: option name -> Pyro's keyword, for the options the Pyro kernel takes
    PYRO_NAMES = {"step_size": "step_size", "target_accept": "target_accept_prob",
                  "adapt_mass_matrix": "adapt_mass_matrix"}

    def pyro_kwargs(self, model) -> dict:
        """The kernel keywords, in Pyro's names, with ``target_accept`` resolved for ``model``."""
        kwargs = {pyro: getattr(self, name) for name, pyro in self.PYRO_NAMES.items()}
        kwargs["target_accept_prob"] = resolve_target_accept(self.target_accept, model, self.engine)
        return kwargs


@dataclass(frozen=True)
class NUTSOptions(PyroOptions):
    """Options of the ``nuts`` engine and defaults of :class:`NUTS`."""

    max_tree_depth: int = option(10, "cap on tree doublings (2^depth - 1 leapfrog steps per draw)", integer(1))
    full_mass: bool = option(False, "a dense mass matrix instead of a diagonal one", flag)

    engine = "nuts"
    PYRO_NAMES = {**PyroOptions.PYRO_NAMES, "max_tree_depth": "max_tree_depth", "full_mass": "full_mass"}


@dataclass(frozen=True)
class HMCOptions(PyroOptions):
    """Options of the ``hmc`` engine and defaults of :class:`HMC`."""

    step_size: float = option(0.01, "initial step size (adapted when adapt_step_size)", positive)
    num_steps: int = option(20, "leapfrog steps per transition, whatever step size warm-up adapts (unless "
                            "trajectory_length is given)", integer(1))
    trajectory_length: float | None = option(None, "a fixed trajectory length instead: int(trajectory_length / "
                                             "step_size) steps per transition (Pyro's rule)", optional(positive))
    adapt_step_size: bool = option(True, "adapt the step size during warm-up", flag)

    engine = "hmc"
    PYRO_NAMES = {**PyroOptions.PYRO_NAMES, "adapt_step_size": "adapt_step_size"}

    def pyro_kwargs(self, model) -> dict:
        kwargs = super().pyro_kwargs(model)
        kwargs["num_steps"] = None if self.trajectory_length else self.num_steps
        kwargs["trajectory_length"] = self.trajectory_length
        return kwargs


def _with_defaults(options_cls, model, kwargs: dict) -> dict:
    """Pyro keywords: the caller's, the rest from ``options_cls``'s defaults (validated there)."""
    to_option = {pyro: name for name, pyro in options_cls.PYRO_NAMES.items()}
    to_option.update({"num_steps": "num_steps", "trajectory_length": "trajectory_length"})
    given = {to_option[k]: v for k, v in kwargs.items()
             if k in to_option and to_option[k] in options_cls.names() and v is not None}
    defaults = options_cls(**given).pyro_kwargs(model)
    if "trajectory_length" in kwargs or "num_steps" in kwargs:  # Pyro's own rule between the two
        defaults.pop("num_steps", None), defaults.pop("trajectory_length", None)
    return {**defaults, **kwargs}


class _RecordingMixin:
    """Wraps ``sample`` of a Pyro HMC-family kernel to record per-draw statistics
    (through :class:`PyroInternals` only)."""

    def _reset(self):
        super()._reset()
        self._stat_rows: list[dict] = []
        self._warmup_steps_rows: list[int] = []  # leapfrog steps of each warm-up transition (gradient counts)
        self._record = _Transition()

    def setup(self, warmup_steps, *args, **kwargs):
        PyroInternals.check(self)
        if self.model is None:
            return super().setup(warmup_steps, *args, **kwargs)
        with explained_initialization(self.model, args, kwargs):
            return super().setup(warmup_steps, *args, **kwargs)

    def _kinetic_energy(self, r_unscaled):
        kinetic = super()._kinetic_energy(r_unscaled)
        if self._record.kinetic_start is None:
            self._record.kinetic_start = kinetic
        self._record.kinetic_last = kinetic
        return kinetic

    def _tracking(self):
        return nullcontext()

    def _energy_stats(self, record: _Transition, start: float) -> dict:
        """``energy``, ``energy_error`` and ``max_energy_error`` of the transition."""
        raise NotImplementedError

    def _transition_stats(self) -> dict:
        return {}

    def sample(self, params):
        step_size = float(self.step_size)
        potential_start = PyroInternals.potential_energy(self)
        _, _, mean_before, divergences_before = PyroInternals.counters(self)
        self._record = record = _Transition()
        with self._tracking():
            z = super().sample(params)
        t, warmup, mean_after, divergences_after = PyroInternals.counters(self)
        n = t - warmup if t > warmup else t
        accept_prob = mean_before + (mean_after - mean_before) * n
        start = math.nan
        if record.energy_start is not None:
            start = record.energy_start
        elif potential_start is not None and record.kinetic_start is not None:
            start = float(potential_start) + float(record.kinetic_start)
        row = {
            "acceptance_rate": min(max(accept_prob, 0.0), 1.0),
            "step_size": step_size,
            **self._energy_stats(record, start),
            "lp": -float(PyroInternals.potential_energy(self)),
            "diverging": divergences_after > divergences_before,
            **self._transition_stats(),
        }
        if t > warmup:
            self._stat_rows.append(row)
        elif "n_steps" in row:
            self._warmup_steps_rows.append(int(row["n_steps"]))
        return z

    def diagnostics(self):
        diag = super().diagnostics()
        if self._stat_rows:
            diag["sample_stats"] = {
                k: np.asarray([row[k] for row in self._stat_rows], dtype=_DTYPES.get(k, np.float64))
                for k in self._stat_rows[0]
            }
        else:
            diag["sample_stats"] = {}
        diag["warmup_n_steps"] = int(sum(self._warmup_steps_rows))  # the warm-up's gradients (the run's count)
        return diag

    def logging(self):
        return OrderedDict(super().logging())


_DTYPES = {"diverging": bool, "n_steps": np.int64, "tree_depth": np.int64, "reached_max_tree_depth": bool}


class HMC(_RecordingMixin, PyroHMC):
    """Pyro's :class:`pyro.infer.mcmc.HMC` with per-draw statistics
    (adds ``n_steps``: leapfrog steps of the transition); defaults from :class:`HMCOptions`.

    ``num_steps`` is the number of leapfrog steps of every transition. (Pyro turns it into a
    trajectory length, ``step_size x num_steps`` at the *initial* step size, and takes
    ``int(length / step_size)`` steps at the adapted one: a step size that grows in warm-up left
    a logistic regression one step per draw.) With ``trajectory_length`` given, Pyro's rule holds."""

    Options = HMCOptions

    def __init__(self, model=None, potential_fn=None, **kwargs):
        kwargs = _with_defaults(HMCOptions, model, kwargs)
        # Pyro's rule: a given trajectory_length wins over num_steps
        self._fixed_steps = int(kwargs["num_steps"]) if kwargs.get("trajectory_length") is None \
            and kwargs.get("num_steps") is not None else None
        super().__init__(model, potential_fn, **kwargs)

    @property
    def num_steps(self) -> int:
        """Leapfrog steps of the next transition: ``num_steps`` as given, else Pyro's
        ``max(1, int(trajectory_length / step_size))``."""
        if getattr(self, "_fixed_steps", None) is not None:
            return self._fixed_steps
        return max(1, int(self.trajectory_length / self.step_size))

    def _tracking(self):
        return PyroInternals.tracked_integrator(self, self._record)

    def _energy_stats(self, record, start):
        proposal = record.energies[-1] if record.energies else math.nan
        accepted = record.proposal is not None and PyroInternals.current_state(self) is record.proposal
        if math.isnan(start) and not accepted and record.kinetic_start is not None:  # Pyro's cache was clear
            start = float(PyroInternals.potential_energy(self)) + float(record.kinetic_start)
        error = _finite_or_inf(proposal - start)
        return {"energy": proposal if accepted else start, "energy_error": error,
                "max_energy_error": record.max_error(start)}

    def sample(self, params):
        self._steps_this_draw = self.num_steps
        return super().sample(params)

    def _transition_stats(self):
        return {"n_steps": self._steps_this_draw}


class NUTS(_RecordingMixin, PyroNUTS):
    """Pyro's :class:`pyro.infer.mcmc.NUTS` with per-draw statistics
    (adds ``n_steps``: leapfrog steps, ``tree_depth``: doublings of the final tree, and
    ``reached_max_tree_depth``: the tree stopped at ``max_tree_depth`` before a U-turn);
    defaults from :class:`NUTSOptions`."""

    Options = NUTSOptions

    def __init__(self, model=None, potential_fn=None, **kwargs):
        super().__init__(model, potential_fn, **_with_defaults(NUTSOptions, model, kwargs))

    def sample(self, params):
        self._leapfrogs = 0
        self._depth = 0
        return super().sample(params)

    def _build_basetree(self, *args, **kwargs):
        """One leapfrog step (a leaf): counted, and its energy ``U + K`` kept with its state."""
        self._leapfrogs += 1
        tree = super()._build_basetree(*args, **kwargs)
        state, potential = PyroInternals.leaf(tree)
        kinetic = self._record.kinetic_last  # Pyro's K of this leaf's momentum, just computed
        self._record.leaves[id(state)] = (state, self._record.add_step(potential, kinetic))
        return tree

    def _build_tree(self, z, r, z_grads, log_slice, direction, tree_depth, energy_current):
        self._depth = max(self._depth, tree_depth + 1)
        if self._record.energy_start is None:
            self._record.energy_start = float(energy_current)
        return super()._build_tree(z, r, z_grads, log_slice, direction, tree_depth, energy_current)

    def _energy_stats(self, record, start):
        """The accepted state is the start or one leaf (found by identity): its energy,
        its error against the start, and the largest error over all leaves."""
        state = PyroInternals.current_state(self)
        leaf = record.leaves.get(id(state))
        energy = record.energies[leaf[1]] if leaf is not None and leaf[0] is state else start
        return {"energy": energy, "energy_error": _finite_or_inf(energy - start),
                "max_energy_error": record.max_error(start)}

    def _transition_stats(self):
        self._record.leaves.clear()
        return {"n_steps": self._leapfrogs, "tree_depth": self._depth,
                "reached_max_tree_depth": self._depth >= PyroInternals.max_tree_depth(self)}
