"""Every access to Pyro's private HMC/NUTS internals, in one small adapter.

:mod:`.pyro_hmc` records per-draw statistics of Pyro's own NUTS and HMC; Pyro exposes
them nowhere public, so they are read here and only here. ``tests/inference/kernels/
test_pyro_hmc.py`` fails loudly, naming the attribute and the Pyro version, if a Pyro
release drops one of them.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import pyro
import torch
from pyro.infer.mcmc import HMC as PyroHMC
from pyro.infer.mcmc import NUTS as PyroNUTS

__all__ = ["PyroInternals"]


class PyroInternals:
    """Every access to Pyro's private HMC/NUTS internals, in one place.

    Pyro's kernels keep only a running mean acceptance and a list of divergences;
    the per-draw statistics are read from private attributes and hooks that Pyro
    does not promise to keep. :meth:`missing` lists those absent from a kernel (a
    test checks it against the installed Pyro; :meth:`check` raises at ``setup``).
    """

    #: instance attributes and methods of Pyro's ``HMC`` (and so ``NUTS``) read or wrapped here
    HMC_ATTRS = ("_t", "_warmup_steps", "_mean_accept_prob", "_divergences", "_potential_energy_last", "_z_last",
                 "_reset", "_kinetic_energy", "mass_matrix_adapter", "step_size", "num_steps")
    #: NUTS's tree builders, wrapped to count leaves, depth and every leaf's energy
    NUTS_ATTRS = ("_build_basetree", "_build_tree", "_max_tree_depth")
    #: fields of the NUTS tree (``pyro.infer.mcmc.nuts._TreeInfo``) read from a leaf
    TREE_FIELDS = ("z_proposal", "z_proposal_pe")
    #: module globals: HMC's integrator, swapped for a step-by-step copy during a transition
    MODULE_ATTRS = (("pyro.infer.mcmc.hmc", "velocity_verlet"), ("pyro.infer.mcmc.nuts", "_TreeInfo"))

    @classmethod
    def missing(cls, kernel) -> list[str]:
        """Names of the internals this module relies on that ``kernel`` or Pyro lacks."""
        import importlib

        names = list(cls.HMC_ATTRS) + (list(cls.NUTS_ATTRS) if isinstance(kernel, PyroNUTS) else [])
        out = [f"{type(kernel).__name__}.{n}" for n in names if not hasattr(kernel, n)]
        for module, attr in cls.MODULE_ATTRS:
            if not hasattr(importlib.import_module(module), attr):
                out.append(f"{module}.{attr}")
        tree = getattr(importlib.import_module("pyro.infer.mcmc.nuts"), "_TreeInfo", None)
        if tree is not None:
            out += [f"pyro.infer.mcmc.nuts._TreeInfo.{f}" for f in cls.TREE_FIELDS
                    if f not in getattr(tree, "_fields", ())]
        return out

    @classmethod
    def check(cls, kernel) -> None:
        missing = cls.missing(kernel)
        if missing:
            raise RuntimeError(f"bnnzoo's {type(kernel).__name__} reads Pyro internals that Pyro {pyro.__version__} "
                               f"lacks: {', '.join(missing)}; pin a Pyro version these exist in")

    # ------------------------------------------------------------ reads
    @staticmethod
    def counters(kernel) -> tuple[int, int, float, int]:
        """``(t, warmup_steps, mean_accept_prob, number of divergences)``."""
        return kernel._t, kernel._warmup_steps, kernel._mean_accept_prob, len(kernel._divergences)

    @staticmethod
    def max_tree_depth(kernel) -> int:
        """NUTS's cap on tree doublings."""
        return kernel._max_tree_depth

    @staticmethod
    def potential_energy(kernel):
        """U at the chain's current state (None when Pyro's cache is clear)."""
        return kernel._potential_energy_last

    @staticmethod
    def current_state(kernel):
        """The dict of the chain's current (accepted) state, compared by identity."""
        return kernel._z_last

    @staticmethod
    def kinetic_energy(kernel, r):
        """K of the (scaled) momentum ``r``, as Pyro's HMC computes it."""
        return PyroHMC._kinetic_energy(kernel, kernel.mass_matrix_adapter.unscale(r))

    @staticmethod
    def leaf(tree) -> tuple[dict, object]:
        """A NUTS base tree's state dict and its potential energy."""
        return tree.z_proposal, tree.z_proposal_pe

    @staticmethod
    @contextmanager
    def tracked_integrator(kernel, record: "_Transition"):
        """Within the block, the first call of Pyro's ``velocity_verlet`` from ``pyro.infer.mcmc.hmc``
        (the transition's trajectory) runs step by step and puts every step's energy into
        ``record``; later calls (warm-up's step-size search) pass through."""
        from pyro.infer.mcmc import hmc as hmc_module

        original = hmc_module.velocity_verlet

        def velocity_verlet(z, r, potential_fn, kinetic_grad, step_size, num_steps=1, z_grads=None):
            if record.proposal is not None:
                return original(z, r, potential_fn, kinetic_grad, step_size, num_steps, z_grads=z_grads)
            potential = None
            for _ in range(num_steps):
                z, r, z_grads, potential = original(z, r, potential_fn, kinetic_grad, step_size, 1, z_grads=z_grads)
                record.add_step(potential, PyroInternals.kinetic_energy(kernel, r))
            record.proposal = z
            return z, r, z_grads, potential

        hmc_module.velocity_verlet = velocity_verlet
        try:
            yield
        finally:
            hmc_module.velocity_verlet = original


def _finite_or_inf(x: float) -> float:
    return x if math.isfinite(x) else math.inf


class _Transition:
    """What one transition of a Pyro kernel records: the start energy, every step's energy,
    the proposal (HMC) or every leaf's state and the index of its energy (NUTS). The steps'
    energies stay tensors (on the chain's device) until :attr:`energies` reads them all at once."""

    def __init__(self):
        self.kinetic_start = None  # K after the momentum refresh (Pyro's first kinetic energy of the transition)
        self.kinetic_last = None  # the latest K Pyro computed
        self.energy_start: float | None = None  # H_0, where Pyro hands it over (NUTS)
        self._steps: list[tuple] = []  # (U, K) of every leapfrog step; K None where Pyro computed none
        self._energies: list[float] | None = None
        self.proposal = None  # HMC: the proposal's state dict
        self.leaves: dict[int, tuple[dict, int]] = {}  # NUTS: id(state) -> (state, index into energies)

    def add_step(self, potential, kinetic) -> int:
        """Record a leapfrog step's ``U`` and ``K`` (tensors); returns the index of its energy."""
        self._steps.append((potential, kinetic))
        self._energies = None
        return len(self._steps) - 1

    @property
    def energies(self) -> list[float]:
        """:math:`H_t = U + K` of every step (NaN where K is unknown), in float64, read from the
        device in one transfer."""
        if self._energies is None:
            known = [torch.stack((u, k)).detach() for u, k in self._steps if k is not None]
            host = iter(torch.stack(known).double().tolist() if known else [])
            self._energies = [sum(next(host)) if k is not None else math.nan for _, k in self._steps]
        return self._energies

    def max_error(self, start: float) -> float:
        r""":math:`\max_t |H_t - H_0|`, inf if any step's energy is not finite."""
        return max((_finite_or_inf(abs(e - start)) for e in self.energies), default=0.0)


