r"""A potential's ``torch.compile`` graphs: made once per process, run and timed per potential.

The potential holds the mathematics: its full-data value and gradient in the formulation a graph
traces, ``potential.graph_value_and_grad(theta)`` (for
:class:`~bnnzoo.inference.potential.BNNPotential`, the feature-major layout of
:func:`~bnnzoo.inference.potential.analytic._dense_feature_major`), and eagerly,
``potential.analytic_value_and_grad(theta)``. This module turns it into three graphs
(:data:`GRAPHS`), compiled by :func:`compiled` once per process and shared by every potential:

* ``value_and_grad``: the value and gradient;
* ``leapfrog_step``: one leapfrog step on it (:func:`~bnnzoo.inference.integrators.leapfrog_step`'s
  plain formulas, which inductor fuses with the gradient into one loop nest);
* ``leapfrog_steps``: :data:`UNROLL` such steps and the running bounds of the energy, the graph a
  kernel's fixed-length trajectories run on (:class:`~bnnzoo.inference.runtime.LeapfrogRuntime`).

:class:`CompiledGraphs` runs them for one potential (``potential.graphs``) while
``potential.compile`` is True, and holds what a compile leaves behind: the seconds spent
(``compile_seconds``, which a run reports as ``Run.compile_seconds``), the input shapes compiled, and
what happens when a compile fails (raise for ``compile=True``; warn and go on eagerly, the potential's
``compile`` set back to False, for ``compile="auto"``, :class:`~bnnzoo.inference.compilation.AutoCompile`).
A compiled graph runs with subnormal floats flushed to zero (:func:`_flushing_denormals`). On the
CPU inductor writes each graph's wrapper, the code that allocates its buffers and calls its kernels
and matrix products, in C++ (:data:`CPU_OPTIONS`) instead of Python: a step's dozen or more calls
then cost no Python each, and the draws are the same (``benchmarks/results/hot_path_cpp_wrapper.md``);
``BNNZOO_CPP_WRAPPER=0`` in the environment keeps inductor's Python wrapper.
Every first compile points inductor at bnnzoo's persistent cache first
(:func:`~bnnzoo.inference.compilation.use_persistent_inductor_cache`). Whether and when a potential
runs compiled is chosen outside it: by ``compile=True`` when it is built, or by the run's
``compile="auto"`` policy mid-run.
"""

from __future__ import annotations

import functools
import os
import time
import warnings

import torch

from .compilation import one_isa_check, use_persistent_inductor_cache
from .integrators import kinetic_energy, leapfrog_step

__all__ = ["CPU_OPTIONS", "CPP_WRAPPER_ENV", "CompiledGraphs", "GRAPHS", "RECOMPILE_LIMIT", "UNROLL", "compiled",
           "leapfrog_steps", "unroll_step_sizes"]

Tensor = torch.Tensor

#: leapfrog steps one call of the compiled ``leapfrog_steps`` graph runs: a call's Python and
#: dispatch cost (tens of microseconds, as much as a small network's step) is paid once for them
UNROLL = 4

#: variants (networks, shapes, thread counts) of each compiled graph one process may hold
RECOMPILE_LIMIT = 128


def _flushing_denormals(graph, *args):
    """``graph(*args)`` with subnormal floats flushed to zero on the CPU (``torch.set_flush_denormal``),
    then flushing off again (torch's default). A compiled graph's intermediate values can fall below
    the smallest normal float, and each such value costs the CPU a slow path: the digits MLP's
    compiled gradient is several times slower unflushed at some points (where the gradient's own
    entries hold no subnormal; which intermediate produces them was not traced) (``benchmarks/results/denormals.md``, ``benchmarks/bench_denormals.py``). Values
    below 1.2e-38 (float32) or 2.2e-308 (float64) become 0; setting the flag twice costs well under a
    microsecond."""
    torch.set_flush_denormal(True)
    try:
        return graph(*args)
    finally:
        torch.set_flush_denormal(False)


def unroll_step_sizes(step_size: float | Tensor, like: Tensor, num_steps: int = UNROLL) -> Tensor:
    """The step sizes of one call of the compiled ``leapfrog_steps`` graph, ``[UNROLL, *step_size.shape]``:
    ``step_size`` for the first ``num_steps`` (1 to :data:`UNROLL`) and 0 for the rest. A leapfrog step
    of size 0 leaves ``theta`` and ``p`` as they are (and recomputes the same ``U`` and gradient), so a
    trajectory of any length runs on this one graph, its last call padded with such steps: a kernel
    needs no one-step graph beside it, and a first compile of a network costs about a quarter less."""
    if not 1 <= num_steps <= UNROLL:
        raise ValueError(f"num_steps must be in 1..{UNROLL}, got {num_steps!r}")
    step = torch.as_tensor(step_size, dtype=like.dtype, device=like.device)
    weights = torch.zeros((UNROLL,) + (1,) * step.dim(), dtype=like.dtype, device=like.device)
    weights[:num_steps] = 1.0
    return weights * step


def leapfrog_steps(step, theta, p, grad, step_sizes, inv_mass, high, low):
    """:data:`UNROLL` leapfrog steps ``step(theta, p, grad, step_size, inv_mass)``, step ``k`` of
    size ``step_sizes[k]`` (:func:`unroll_step_sizes`), and the running highest and lowest energy
    over them (:class:`~bnnzoo.inference.integrators.EnergyTracker`'s update; NaN propagates)."""
    for k in range(UNROLL):
        theta, p, value, grad = step(theta, p, grad, step_sizes[k], inv_mass)
        energy = value + kinetic_energy(p, inv_mass)
        high, low = torch.maximum(high, energy), torch.minimum(low, energy)
    return theta, p, value, grad, high, low


def _value_and_grad_graph(potential, theta: Tensor) -> tuple[Tensor, Tensor]:
    return potential.graph_value_and_grad(theta)


def _leapfrog_step_graph(potential, theta, p, grad, step_size, inv_mass):
    return leapfrog_step(theta, p, grad, step_size, inv_mass, potential.graph_value_and_grad, fused=False)


def _leapfrog_steps_graph(potential, theta, p, grad, step_sizes, inv_mass, high, low):
    step = functools.partial(_leapfrog_step_graph, potential)
    return leapfrog_steps(step, theta, p, grad, step_sizes, inv_mass, high, low)


#: the functions :func:`compiled` compiles, by name; each takes the potential first
GRAPHS = {"value_and_grad": _value_and_grad_graph, "leapfrog_step": _leapfrog_step_graph,
          "leapfrog_steps": _leapfrog_steps_graph}


#: inductor's options for the graphs compiled for the CPU: the graph's wrapper in C++. The Python
#: wrapper spends a few microseconds of Python on each of a step's calls (a dozen kernels and matrix
#: products on a two-layer network, four steps a call of ``leapfrog_steps``), as much as a small
#: network's arithmetic. The C++ wrapper's module is built with its own precompiled header, which
#: :mod:`~bnnzoo.inference.prewarm` builds ahead of a first compile
CPU_OPTIONS = {"cpp_wrapper": True}

#: the environment variable that keeps inductor's Python wrapper on the CPU ("0")
CPP_WRAPPER_ENV = "BNNZOO_CPP_WRAPPER"


def cpu_options() -> dict | None:
    """The options of a CPU graph's compile: :data:`CPU_OPTIONS`, or None where ``BNNZOO_CPP_WRAPPER=0``."""
    return None if os.environ.get(CPP_WRAPPER_ENV, "1") == "0" else CPU_OPTIONS


@functools.cache
def compiled(name: str, device_type: str = "cpu"):
    """The compiled graph function ``name`` of :data:`GRAPHS` for devices of ``device_type``, made once
    per process (the CPU's with :func:`cpu_options`): the potential is an argument, so a new potential
    of the same network (same shapes, priors and likelihood) reuses the graph; dynamo's guards
    recompile when they differ."""
    return torch.compile(GRAPHS[name], dynamic=False, options=cpu_options() if device_type == "cpu" else None)


class CompiledGraphs:
    """The compiled graphs of one potential (``potential.graphs``; module docstring).

    ``potential``: has ``compile`` (True while it runs compiled), ``graph_value_and_grad`` and
    ``analytic_value_and_grad`` (its full-data value and gradient, as a graph traces it and eagerly),
    and its eager ``value_and_grad`` and ``leapfrog_step`` (what runs after a failed compile)."""

    def __init__(self, potential):
        self.potential = potential
        #: seconds spent in the calls that compiled a graph (one per function and input shapes)
        self.compile_seconds = 0.0
        #: on a failed compile, warn and go on eagerly instead of raising (``compile="auto"``)
        self.fallback = False
        #: ``(name, threads, *input shapes)`` of the graphs compiled for this potential
        self.keys: set[tuple] = set()
        self._called_once: set[tuple] = set()  # value_and_grad's shapes whose first call ran eagerly

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U(theta)`` and ``dU/dtheta`` from the ``value_and_grad`` graph."""
        return self.run("value_and_grad", theta)

    def leapfrog_step(self, theta, p, grad, step_size, inv_mass):
        """One leapfrog step, the update and the gradient as one graph."""
        # a tensor: a Python float would be compiled in as a constant, one graph per step size
        step_size = torch.as_tensor(step_size, dtype=theta.dtype, device=theta.device)
        return self.run("leapfrog_step", theta, p, grad, step_size, inv_mass)

    def leapfrog_steps(self, theta, p, grad, step_sizes, inv_mass, high, low):
        """:data:`UNROLL` leapfrog steps of the sizes ``step_sizes`` ``[UNROLL, ...]``
        (:func:`unroll_step_sizes`; a size of 0 is a step that changes nothing), and the running
        highest and lowest energy ``high``, ``low`` ``[C]`` over them: ``(theta', p', U', grad U', high',
        low')``. One compiled graph while the potential runs compiled; otherwise (e.g. after a compile
        failed) the same steps run eagerly on the potential's own step."""
        if not self.potential.compile:
            return leapfrog_steps(self.potential.leapfrog_step, theta, p, grad, step_sizes, inv_mass, high, low)
        return self.run("leapfrog_steps", theta, p, grad, step_sizes, inv_mass, high, low)

    def run(self, name: str, *args: Tensor):
        """The graph ``name`` of :data:`GRAPHS` on the potential and ``args``, compiled at its first call
        for these shapes (``value_and_grad``: at its second; the first runs eagerly)."""
        # torch.Size is hashable: no copies on the hot path. The thread count is in the key because
        # dynamo's guards are: a new count compiles anew (so it must go through the branch below)
        key = (name, torch.get_num_threads(), *(a.shape for a in args))
        if key in self.keys:
            return _flushing_denormals(compiled(name, args[0].device.type), self.potential, *args)
        if name == "value_and_grad" and key not in self._called_once:
            # a kernel that steps with the leapfrog graphs calls this one once a run (ChEES's first
            # gradient), not worth a second of compiling: its first call runs eagerly
            self._called_once.add(key)
            return self.potential.analytic_value_and_grad(args[0])
        use_persistent_inductor_cache()  # compile=True too, before torch settles on /tmp's
        start = time.perf_counter()
        try:
            # the graphs are shared by every potential of the process, and dynamo keeps at most
            # recompile_limit (8) variants of one function before it runs it eagerly, silently: one
            # process sampling nine networks would run the ninth uncompiled, 5x slower
            with torch._dynamo.config.patch(recompile_limit=max(RECOMPILE_LIMIT, torch._dynamo.config.recompile_limit)), \
                    one_isa_check(args[0].device):
                out = _flushing_denormals(compiled(name, args[0].device.type), self.potential, *args)
        except Exception as err:
            if not self.fallback:
                raise RuntimeError(f"compile=True: torch.compile of the potential's {name} failed "
                                   f"({type(err).__name__}: {err}); run with compile=False"
                                   + (f", or with {CPP_WRAPPER_ENV}=0 for inductor's Python wrapper"
                                      if args[0].device.type == "cpu" and cpu_options() else "")) from err
            warnings.warn(f"compile='auto': torch.compile of the potential's {name} failed "
                          f"({type(err).__name__}: {err}); running eagerly")
            self.potential.compile = False
            return getattr(self if name == "leapfrog_steps" else self.potential, name)(*args)
        self.compile_seconds += time.perf_counter() - start
        self.keys.add(key)
        return out
