r"""The leapfrog loop on a GPU as one captured CUDA graph, replayed once per step.

A small network's leapfrog step on a GPU is bound by kernel launches, not by arithmetic:
one value-and-gradient of the cosine MLP takes about as long for 1 chain as for 128
(``benchmarks/results/gradient_cuda.md``), while the GPU itself is busy for a small part of it. :class:`GraphedLeapfrog` captures one step
(the update, the gradient and the energy tracking) as a CUDA graph once per shape and
replays it: one launch per step instead of one per operation.

The graph reads and writes a fixed set of buffers. A trajectory copies its start into
them, replays the graph ``num_steps`` times (each replay writes its result back into
its own inputs) and returns copies of the end, so nothing a caller holds is a buffer
that a later replay overwrites. What the step reads besides its arguments (the data,
the priors' constants) is captured as it is, so only a potential whose step reads
nothing else that changes may be captured: ``potential.graphable`` says so
(:class:`~bnnzoo.inference.potential.BNNPotential` on its analytic gradient).

Kernels built on :class:`~bnnzoo.inference.kernels.hmc.FixedStepHMC` (HMC, ChEES) use it
by themselves on CUDA; ``BNNZOO_CUDA_GRAPHS=0`` in the environment turns it off. A capture
that fails warns once and the kernel goes on without graphs.

:class:`GraphedStep` is the same idea for any step written on named buffers: the
microcanonical samplers (:mod:`~bnnzoo.inference.kernels.mclmc`, :mod:`~bnnzoo.inference.kernels.mams`)
capture one isokinetic integrator step with it. What changes between draws (the step size,
L) enters through buffers filled on the host, the random draws through a buffer filled before
each replay, so a graph serves a whole run.
"""

from __future__ import annotations

import os
import warnings
from typing import Callable

import torch

from .integrators import EnergyTracker

__all__ = ["ENV", "GraphedLeapfrog", "GraphedStep", "enabled"]

Tensor = torch.Tensor
#: the environment variable that turns CUDA graphs off when it is "0"
ENV = "BNNZOO_CUDA_GRAPHS"


def enabled() -> bool:
    """False when ``BNNZOO_CUDA_GRAPHS=0`` is set."""
    return os.environ.get(ENV, "1").strip() != "0"


def cuda_capture(fn: Callable[[], None]) -> Callable[[], None]:
    """Capture ``fn`` (which reads and writes only buffers made beforehand) as a CUDA graph;
    returns its replay. ``fn`` runs three times first on a side stream (cuBLAS handles,
    compiled graphs and lazy initialisation happen then, outside the capture)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def capture_failed(owner, what: str, err: Exception) -> None:
    """Record on ``owner`` (its ``failed``) why the capture of ``what`` failed, and warn once."""
    owner.failed = f"{type(err).__name__}: {err}"
    warnings.warn(f"CUDA graph capture of the {what} failed ({owner.failed}); running without graphs "
                  f"({ENV}=0 skips the attempt)")


def graph_notes(owner, what: str) -> dict:
    """``Run.notes["cuda_graphs"]`` for ``owner`` (its ``failed`` and ``captures``): how ``what`` ran."""
    return {"cuda_graphs": f"capture failed ({owner.failed}); ran without graphs" if owner.failed else
            f"{what}s replayed from {owner.captures} captured CUDA graph(s)"}


class _Captured:
    """One captured step and its buffers, for one set of shapes."""

    def __init__(self, step, theta: Tensor, p: Tensor, grad: Tensor, step_size, inv_mass: Tensor,
                 capture: Callable):
        self.theta, self.p, self.grad = theta.clone(), p.clone(), grad.clone()
        self.value = theta.new_zeros(theta.shape[:-1])
        self.step_size = (step_size.detach().clone() if torch.is_tensor(step_size)
                          else theta.new_tensor(float(step_size)))
        self.inv_mass = inv_mass.clone()
        self.tracker = EnergyTracker(self.value.clone(), self.inv_mass)

        def one_step():
            theta_new, p_new, value_new, grad_new = step(self.theta, self.p, self.grad, self.step_size,
                                                         self.inv_mass)
            self.theta.copy_(theta_new)
            self.p.copy_(p_new)
            self.grad.copy_(grad_new)
            self.value.copy_(value_new)
            self.tracker.update(self.value, self.p)

        self.replay = capture(one_step)


class GraphedLeapfrog:
    """:func:`~bnnzoo.inference.integrators.leapfrog` with a fixed step count for every chain,
    each step one replay of a captured graph of ``step`` (module docstring).

    Parameters
    ----------
    step : callable
        One leapfrog step ``(theta, p, grad, step_size, inv_mass) -> (theta', p', U', grad U')``
        that computes on the GPU without reading a value on the host, e.g. a potential's
        :meth:`~bnnzoo.inference.potential.FlatPotential.leapfrog_step`.
    key : hashable
        What else the step's graph depends on (e.g. whether the potential runs compiled): a
        new key captures anew.
    capture : callable, optional
        ``fn -> replay`` (default :func:`cuda_capture`); tests pass one that runs ``fn`` as it is.
    """

    def __init__(self, step: Callable, key=None, capture: Callable | None = None):
        self.step, self.key = step, key
        self._capture = capture or cuda_capture
        self._graphs: dict[tuple, _Captured] = {}
        #: captures made so far (one per set of shapes)
        self.captures = 0
        #: why capturing failed (the kernel then runs without graphs); None while it has not
        self.failed: str | None = None

    def __getstate__(self) -> dict:
        """A checkpoint keeps no captured graph (device state, not data): each is captured again
        at its first use after a resume."""
        return {**self.__dict__, "_graphs": {}}

    def leapfrog(self, theta: Tensor, p: Tensor, grad: Tensor, step_size: float | Tensor, num_steps: int,
                 inv_mass: Tensor, track_energy: EnergyTracker | None = None
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
        """``num_steps`` (>= 1) steps from ``(theta, p)`` with ``grad`` :math:`= \\nabla U(\\theta)`:
        ``(theta', p', U', grad U')`` as new tensors, ``track_energy`` updated with every step's
        energy. None when the capture failed (:attr:`failed`): the caller integrates without graphs."""
        if self.failed is not None:
            return None
        shape = tuple(step_size.shape) if torch.is_tensor(step_size) else ()
        key = (self.key, theta.shape, theta.dtype, theta.device, shape, inv_mass.shape)
        g = self._graphs.get(key)
        if g is None:
            try:
                g = _Captured(self.step, theta, p, grad, step_size, inv_mass, self._capture)
            except Exception as err:  # noqa: BLE001 - any capture failure means: run without graphs
                capture_failed(self, "leapfrog step", err)
                return None
            self._graphs[key] = g
            self.captures += 1
        g.theta.copy_(theta)
        g.p.copy_(p)
        g.grad.copy_(grad)
        if torch.is_tensor(step_size):
            g.step_size.copy_(step_size)
        else:
            g.step_size.fill_(float(step_size))
        g.inv_mass.copy_(inv_mass)
        if track_energy is not None:
            g.tracker.load(track_energy)
        for _ in range(num_steps):
            g.replay()
        if track_energy is not None:
            track_energy.load(g.tracker)
        return g.theta.clone(), g.p.clone(), g.value.clone(), g.grad.clone()

    def notes(self) -> dict:
        """How the steps ran, for ``Run.notes``."""
        return graph_notes(self, "leapfrog step")


class GraphedStep:
    """A step that reads and writes only a fixed set of named buffers, captured as a CUDA graph
    once per set of shapes and replayed (module docstring).

    Parameters
    ----------
    body : callable
        ``buffers -> step``: given the dict of buffers (``name -> Tensor``), a function of no
        arguments that runs one step on them in place, without reading a value on the host.
    key : hashable
        What else the step depends on (e.g. whether the potential runs compiled).
    what : str
        The step's name in the warning a failed capture gives.
    capture : callable, optional
        ``fn -> replay`` (default :func:`cuda_capture`); tests pass one that runs ``fn`` as it is.
    """

    def __init__(self, body: Callable[[dict], Callable[[], None]], key=None, what: str = "step",
                 capture: Callable | None = None):
        self.body, self.key, self.what = body, key, what
        self._capture = capture or cuda_capture
        self._graphs: dict[tuple, tuple[dict, Callable]] = {}
        #: captures made so far (one per set of shapes)
        self.captures = 0
        #: why capturing failed (the caller then runs without graphs); None while it has not
        self.failed: str | None = None

    def __getstate__(self) -> dict:
        """A checkpoint keeps no captured graph (device state): each is captured again at its first use."""
        return {**self.__dict__, "_graphs": {}}

    def run(self, inputs: dict[str, Tensor], times: int,
            before: Callable[[dict], None] | None = None) -> dict[str, Tensor] | None:
        """Copy ``inputs`` into the buffers and replay the step ``times`` times, ``before(buffers)``
        ahead of each replay (e.g. filling a buffer of random draws). Returns the buffers, which the
        next call overwrites (copy what is kept); None when the capture failed (:attr:`failed`)."""
        if self.failed is not None:
            return None
        key = (self.key, tuple((name, t.shape, t.dtype, t.device) for name, t in inputs.items()))
        entry = self._graphs.get(key)
        if entry is None:
            buffers = {name: t.clone() for name, t in inputs.items()}
            try:
                entry = (buffers, self._capture(self.body(buffers)))
            except Exception as err:  # noqa: BLE001 - any capture failure means: run without graphs
                capture_failed(self, self.what, err)
                return None
            self._graphs[key] = entry
            self.captures += 1
        buffers, replay = entry
        for name, t in inputs.items():
            buffers[name].copy_(t)
        for _ in range(times):
            if before is not None:
                before(buffers)
            replay()
        return buffers

    def notes(self) -> dict:
        """How the steps ran, for ``Run.notes``."""
        return graph_notes(self, self.what)
