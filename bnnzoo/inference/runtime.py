r"""How a kernel's leapfrog trajectories run: chosen here, outside the algorithms.

The sampler of an HMC-family kernel (:class:`~bnnzoo.inference.kernels.hmc.HMCSampler`, of
:class:`~bnnzoo.inference.kernels.hmc.FixedStepHMC` and the kernels one level below it) asks for ``L``
leapfrog steps and gets them from its kernel's :class:`LeapfrogRuntime`, which runs them in one of three
ways:

* **CUDA graph**: on a GPU, a potential whose step may be captured (``potential.graphable``) and one
  step count for all chains: each step one replay of a captured graph
  (:class:`~bnnzoo.inference.cuda_graphs.GraphedLeapfrog`; ``BNNZOO_CUDA_GRAPHS=0`` turns it off);
* **compiled**: a potential running compiled (``potential.compile``) whose own step the kernel uses,
  one step count for all chains: the four-step ``torch.compile`` graph of the potential's mathematics
  (``potential.graphs``, :class:`~bnnzoo.inference.compiled_graphs.CompiledGraphs`;
  :data:`~bnnzoo.inference.compiled_graphs.UNROLL` steps a call, the last call padded with steps
  of size 0);
* **eager**: :func:`~bnnzoo.inference.integrators.leapfrog`, one step at a time (per-chain step counts,
  a kernel's own step such as proximal HMC's, a Pyro model).

The microcanonical kernels' steps (isokinetic, not leapfrog) take the first or the last way: on a GPU
with a capturable potential, one integrator step as a CUDA graph
(:meth:`LeapfrogRuntime.step_graph`, a :class:`~bnnzoo.inference.cuda_graphs.GraphedStep`), else eager
steps on the potential's ``value_and_grad`` (compiled when the potential is).

The runtime also holds the run's ``compile="auto"`` policy
(:class:`~bnnzoo.inference.compilation.AutoCompile`, set by the driver), which it tells the steps each
transition took; the policy switches the potential to its compiled graphs once the rest of the run
pays the compile back. The thread policy is :mod:`bnnzoo.inference.threads`, set by the driver before
a run. A kernel never looks at which way its steps ran; the three give the same trajectory up to the
rounding of the compiled graphs (``tests/inference/test_compilation.py``,
``tests/inference/test_cuda_graphs.py``).
"""

from __future__ import annotations

from typing import Callable

import torch

from . import cuda_graphs
from .cuda_graphs import GraphedLeapfrog, GraphedStep
from .compiled_graphs import UNROLL, unroll_step_sizes
from .integrators import EnergyTracker, leapfrog

__all__ = ["LeapfrogRuntime"]

Tensor = torch.Tensor


class LeapfrogRuntime:
    """The execution of one kernel's leapfrog trajectories (module docstring).

    ``policy``: the run's :class:`~bnnzoo.inference.compilation.AutoCompile` (``compile="auto"``), or
    None. ``graph``: the kernel's CUDA graph once one is captured. Both are part of a checkpoint
    (the graph without its captures, which are device state)."""

    def __init__(self, policy=None):
        self.policy = policy
        self.graph: GraphedLeapfrog | GraphedStep | None = None

    def fresh(self) -> LeapfrogRuntime:
        """A runtime for a new run of the same kernel: the policy kept, no graph."""
        return LeapfrogRuntime(self.policy)

    # ------------------------------------------------------------- the choice
    def cuda_graph(self, potential, theta: Tensor, step_fn, num_steps) -> GraphedLeapfrog | None:
        """The :class:`~bnnzoo.inference.cuda_graphs.GraphedLeapfrog` where one applies: on CUDA, a
        potential whose step may be captured, one step count for all chains."""
        if (not theta.is_cuda or step_fn is None or not isinstance(num_steps, int) or num_steps < 1
                or not getattr(potential, "graphable", False) or not cuda_graphs.enabled()):
            return None
        key = (potential, getattr(potential, "compile", None))
        if not isinstance(self.graph, GraphedLeapfrog) or self.graph.key != key:
            self.graph = GraphedLeapfrog(step_fn, key)
        return self.graph

    def step_graph(self, potential, theta: Tensor, body: Callable, what: str) -> GraphedStep | None:
        """The :class:`~bnnzoo.inference.cuda_graphs.GraphedStep` of ``body`` where one applies: on CUDA,
        a potential whose step may be captured, graphs not turned off. A new one when the potential
        switches to or from its compiled graphs."""
        if not theta.is_cuda or not getattr(potential, "graphable", False) or not cuda_graphs.enabled():
            return None
        key = (potential, getattr(potential, "compile", None), what)
        if not isinstance(self.graph, GraphedStep) or self.graph.key != key:
            self.graph = GraphedStep(body, key, what)
        return self.graph

    def compiled(self, potential, step_fn, num_steps) -> bool:
        """True where the potential's compiled multi-step graph applies: the potential runs compiled,
        the kernel uses its own step, one step count for all chains."""
        return (isinstance(num_steps, int) and num_steps >= 1 and getattr(potential, "compile", False)
                and step_fn == getattr(potential, "leapfrog_step", None))

    def stride(self, potential, step_fn) -> int:
        """The steps one call runs at the least cost: :data:`UNROLL` on the compiled graph, else 1 (for a
        caller that looks at the trajectory between calls, as ChEES's U-turn search does)."""
        return UNROLL if self.compiled(potential, step_fn, UNROLL) else 1

    # ---------------------------------------------------------------- running
    def leapfrog(self, potential, theta: Tensor, p: Tensor, value: Tensor, force: Tensor, step: float | Tensor,
                 num_steps: int | Tensor, inv_mass: Tensor, evaluate: Callable, step_fn: Callable | None,
                 tracker: EnergyTracker | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``num_steps`` leapfrog steps from ``(theta, p)`` (``value``, ``force`` at ``theta``; ``evaluate``
        gives them at a point, ``step_fn`` is one step or None for the generic one):
        ``(theta', p', U', force')``."""
        graphed = self.cuda_graph(potential, theta, step_fn, num_steps)
        end = graphed.leapfrog(theta, p, force, step, num_steps, inv_mass, tracker) if graphed else None
        if end is None and self.compiled(potential, step_fn, num_steps):
            end = self._unrolled(potential, theta, p, force, step, num_steps, inv_mass, tracker)
        if end is None:
            end = leapfrog(theta, p, force, step, num_steps, evaluate, inv_mass, value, step=step_fn,
                           track_energy=tracker)
        return end

    @staticmethod
    def _unrolled(potential, theta, p, grad, step, num_steps, inv_mass, tracker):
        """``num_steps`` steps as calls of the potential's compiled ``leapfrog_steps`` graph
        (:meth:`~bnnzoo.inference.compiled_graphs.CompiledGraphs.leapfrog_steps`), UNROLL steps each, the
        last call padded with steps of size 0 (:func:`~bnnzoo.inference.compiled_graphs.unroll_step_sizes`):
        the trajectory of :func:`~bnnzoo.inference.integrators.leapfrog`, on one graph."""
        blocks, rest = divmod(num_steps, UNROLL)
        high, low = tracker.bounds() if tracker is not None else (grad.new_zeros(len(grad)), grad.new_zeros(len(grad)))
        full = [unroll_step_sizes(step, theta)] * blocks if blocks else []
        last = [unroll_step_sizes(step, theta, rest)] if rest else []
        steps = potential.graphs.leapfrog_steps
        for sizes in full + last:
            theta, p, value, grad, high, low = steps(theta, p, grad, sizes, inv_mass, high, low)
        if tracker is not None:
            tracker.set_bounds(high, low)
        return theta, p, value, grad

    def observe(self, steps: int, theta: Tensor) -> None:
        """One transition done with ``steps`` leapfrog steps (the ``compile="auto"`` policy counts them)."""
        if self.policy is not None:
            self.policy.observe(steps, theta)

    def notes(self) -> dict:
        """How the steps ran, for ``Run.notes``: whether CUDA graphs were used."""
        if self.graph is None:  # ran on the CPU, or a potential that cannot be captured
            return {}
        return self.graph.notes()
