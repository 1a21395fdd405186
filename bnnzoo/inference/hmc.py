"""Pyro's ``HMC`` and ``NUTS``, recording per-draw sampler statistics.

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
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from pyro.infer.mcmc import HMC as PyroHMC
from pyro.infer.mcmc import NUTS as PyroNUTS


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
    (adds ``n_steps``: leapfrog steps of the transition)."""

    def _before_transition(self):
        super()._before_transition()
        self._steps_this_draw = self.num_steps

    def _transition_stats(self):
        return {"n_steps": self._steps_this_draw}


class NUTS(_RecordingMixin, PyroNUTS):
    """Pyro's :class:`pyro.infer.mcmc.NUTS` with per-draw statistics
    (adds ``n_steps``: leapfrog steps, and ``tree_depth``: doublings of the final tree)."""

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
