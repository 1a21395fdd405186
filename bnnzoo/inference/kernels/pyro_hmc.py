"""Pyro's ``HMC`` and ``NUTS`` (engines ``"hmc"``, ``"nuts"``), recording per-draw sampler statistics.

Pyro's kernels keep only a running mean acceptance and a list of divergences.
These subclasses run Pyro's own update unchanged and record, for every draw,
the ArviZ statistics ``acceptance_rate``, ``step_size``, ``n_steps``,
``tree_depth`` (NUTS), ``energy``, ``lp`` and ``diverging``; they come out of
``diagnostics()["sample_stats"]`` like those of every bnnzoo kernel.

* ``acceptance_rate``: the transition's Metropolis acceptance probability (HMC)
  or mean acceptance over the trajectory (NUTS), recovered exactly from Pyro's
  running mean.
* ``energy``: the Hamiltonian at the start of the transition, after the
  momentum refresh, ``U(z) + K(r)``: the quantity whose marginal and
  transition distributions ``az.plot_energy`` / E-BFMI compare.
* ``lp``: ``-U`` at the new draw (log joint in unconstrained space, Jacobian included).

Their defaults are those of the ``nuts`` and ``hmc`` engines, one value per option in
:class:`NUTSOptions` and :class:`HMCOptions` (``target_accept`` None: recommended for the
model's smoothness, 0.8 for a smooth network or any other Pyro model); Pyro's own keywords
(``target_accept_prob``, ``init_strategy``, ``jit_compile``, ...) are accepted as in Pyro.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from pyro.infer.mcmc import HMC as PyroHMC
from pyro.infer.mcmc import NUTS as PyroNUTS

from ..options import Options, flag, fraction, integer, option, optional, positive
from ..tuning import resolve_target_accept

__all__ = ["HMC", "HMCOptions", "NUTS", "NUTSOptions"]


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
    num_steps: int = option(20, "leapfrog steps per transition (unless trajectory_length is given)", integer(1))
    trajectory_length: float | None = option(None, "step_size * num_steps held fixed instead of num_steps",
                                             optional(positive))
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
    """Wraps ``sample`` of a Pyro HMC-family kernel to record per-draw statistics."""

    def _reset(self):
        super()._reset()
        self._stat_rows: list[dict] = []
        self._kinetic_start = None

    def _kinetic_energy(self, r_unscaled):
        kinetic = super()._kinetic_energy(r_unscaled)
        if self._kinetic_start is None:
            self._kinetic_start = kinetic
        return kinetic

    def _before_transition(self) -> None:
        self._kinetic_start = None

    def _transition_stats(self) -> dict:
        return {}

    def sample(self, params):
        step_size = self.step_size
        potential_start = self._potential_energy_last
        mean_before = self._mean_accept_prob
        divergences_before = len(self._divergences)
        self._before_transition()
        z = super().sample(params)
        n = self._t - self._warmup_steps if self._t > self._warmup_steps else self._t
        accept_prob = mean_before + (self._mean_accept_prob - mean_before) * n
        energy = np.nan
        if potential_start is not None and self._kinetic_start is not None:
            energy = float(potential_start) + float(self._kinetic_start)
        row = {
            "acceptance_rate": min(max(accept_prob, 0.0), 1.0),
            "step_size": float(step_size),
            "energy": energy,
            "lp": -float(self._potential_energy_last),
            "diverging": len(self._divergences) > divergences_before,
            **self._transition_stats(),
        }
        if self._t > self._warmup_steps:
            self._stat_rows.append(row)
        return z

    def diagnostics(self):
        diag = super().diagnostics()
        if self._stat_rows:
            diag["sample_stats"] = {
                k: np.asarray([row[k] for row in self._stat_rows]) for k in self._stat_rows[0]
            }
        else:
            diag["sample_stats"] = {}
        return diag

    def logging(self):
        return OrderedDict(super().logging())


class HMC(_RecordingMixin, PyroHMC):
    """Pyro's :class:`pyro.infer.mcmc.HMC` with per-draw statistics
    (adds ``n_steps``: leapfrog steps of the transition); defaults from :class:`HMCOptions`."""

    Options = HMCOptions

    def __init__(self, model=None, potential_fn=None, **kwargs):
        super().__init__(model, potential_fn, **_with_defaults(HMCOptions, model, kwargs))

    def _before_transition(self):
        super()._before_transition()
        self._steps_this_draw = self.num_steps

    def _transition_stats(self):
        return {"n_steps": self._steps_this_draw}


class NUTS(_RecordingMixin, PyroNUTS):
    """Pyro's :class:`pyro.infer.mcmc.NUTS` with per-draw statistics
    (adds ``n_steps``: leapfrog steps, and ``tree_depth``: doublings of the final tree);
    defaults from :class:`NUTSOptions`."""

    Options = NUTSOptions

    def __init__(self, model=None, potential_fn=None, **kwargs):
        super().__init__(model, potential_fn, **_with_defaults(NUTSOptions, model, kwargs))

    def _before_transition(self):
        super()._before_transition()
        self._leapfrogs = 0
        self._depth = 0

    def _build_basetree(self, *args, **kwargs):
        self._leapfrogs += 1
        return super()._build_basetree(*args, **kwargs)

    def _build_tree(self, z, r, z_grads, log_slice, direction, tree_depth, energy_current):
        self._depth = max(self._depth, tree_depth + 1)
        return super()._build_tree(z, r, z_grads, log_slice, direction, tree_depth, energy_current)

    def _transition_stats(self):
        return {"n_steps": self._leapfrogs, "tree_depth": self._depth}
