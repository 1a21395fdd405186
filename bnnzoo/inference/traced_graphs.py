"""Traced graphs: a function of tensors replayed as the flat list of operations it ran.

A plain Pyro model's potential runs the model's Python at every evaluation: Pyro's effect
handlers, the distributions' constructors, the trace's bookkeeping. For a small model that
Python is nearly all of the time (eight schools: about 3 ms a batched value and gradient, of which
the arithmetic is a small part), and it is the same at every call. :class:`TracedGraphs` records
once the operations that one call ran (``torch.fx``'s ``make_fx``, with the backward pass of the
gradient in the same graph) and replays them, with no Python of the model in between.

Rules, so that a graph is used only where it gives what the function gives:

* A function is traced after :data:`TRACE_AFTER` calls of one input shape (dtype, device), never
  before: a short run (a test, an initial point) pays nothing, and the switch falls at a fixed
  call, whatever the clock says.
* Tracing refuses a function whose Python looks at a value (a comparison, ``.item()``, a branch on
  data): ``make_fx`` raises there, and the function keeps running as it is. What the function does
  in a context that the caller gives (a Pyro model: argument validation switched off, which checks
  values in Python) is traced in that context.
* The graph's output at the tracing call must be bit for bit the function's (NaN where it has
  NaN); otherwise it is not used. Random numbers drawn while tracing come from a forked
  generator, so the run's stream is as without the trace.
* The graph is then handed to TorchScript (``torch.jit.trace`` of a graph without control flow, run
  with its optimising passes off), which calls the same operations from C++: the fx graph's
  Python costs about 3 us an operation, a third of the time on eight schools. It is used where it
  gives the same bits at the tracing call, else the fx graph is.

The graphs are kept per input key; :attr:`TracedGraphs.note` says what happened, for a run's notes.
This module is the runtime layer's: it knows functions of tensors, no potential.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Callable, ContextManager

import torch

__all__ = ["TRACE_AFTER", "TracedGraphs"]

Tensor = torch.Tensor

#: calls of one input shape after which a function is traced
TRACE_AFTER = 32

_PENDING = object()


def _same(a: Tensor, b: Tensor) -> bool:
    """Bit for bit the same values, NaN where the other has NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = torch.isnan(a) if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool)
    return bool(torch.equal(nan, torch.isnan(b) if b.is_floating_point() else nan)) and \
        bool(torch.equal(torch.where(nan, torch.zeros_like(a), a), torch.where(nan, torch.zeros_like(b), b)))


class _Scripted:
    """A TorchScript graph run as it was recorded: its optimising passes off (on a GPU they may fuse
    operations, and then the bits could differ from the function's)."""

    def __init__(self, script):
        self.script = script

    def __call__(self, theta: Tensor) -> tuple:
        with torch.jit.optimized_execution(False):
            return self.script(theta)


def _in_torchscript(graph, theta: Tensor, want: tuple) -> _Scripted | None:
    """The fx ``graph`` as TorchScript, where it converts and gives ``want`` at ``theta`` (else None):
    the same operations, each called from C++ instead of Python (a third of the fx graph's time on
    eight schools). The graph has no control flow, so ``torch.jit.trace`` records it exactly;
    ``torch.jit`` is deprecated in favour of ``torch.compile`` (whose compile takes seconds to
    minutes), so a release without it keeps the fx graph."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is deprecated")
            script = _Scripted(torch.jit.trace(graph, (theta.detach(),), check_trace=False))
        got = script(theta)
        if len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want)):
            return script
    except Exception:  # a release without torch.jit, an operation TorchScript does not take
        pass
    return None


class TracedGraphs:
    """``fn(theta) -> tuple of tensors``, replayed from a traced graph after :data:`TRACE_AFTER`
    calls of one input key (module docstring).

    Parameters
    ----------
    fn : callable
        A function of one tensor returning a tuple of tensors.
    context : callable, optional
        Returns the context manager to trace in (e.g. ``lambda: pyro.validation_enabled(False)``).
    after : int, optional
        Calls of one key before it is traced (None: :data:`TRACE_AFTER`); 0 never traces.
    """

    def __init__(self, fn: Callable[[Tensor], tuple], context: Callable[[], ContextManager] | None = None,
                 after: int | None = None):
        self.fn, self.context = fn, context
        self.after = TRACE_AFTER if after is None else after
        self._reset()

    def _reset(self) -> None:
        #: per input key, the graph, or None where tracing was refused
        self.graphs: dict[tuple, object] = {}
        self.calls: dict[tuple, int] = {}
        #: seconds spent tracing (and checking the graphs)
        self.seconds = 0.0
        #: why the last refused trace was refused (None: none was)
        self.refused: str | None = None

    def __getstate__(self):  # a graph is rebuilt after unpickling, by tracing again
        state = dict(vars(self))
        state.update(graphs={}, calls={}, seconds=0.0, refused=None)
        return state

    def __call__(self, theta: Tensor) -> tuple:
        key = (theta.shape, theta.dtype, theta.device)
        graph = self.graphs.get(key, _PENDING)
        if graph is _PENDING:
            out = self.fn(theta)
            calls = self.calls[key] = self.calls.get(key, 0) + 1
            if self.after and calls >= self.after:
                self.graphs[key] = self._trace(theta, out)
            return out
        return self.fn(theta) if graph is None else graph(theta)

    def _trace(self, theta: Tensor, want: tuple):
        """The graph of ``fn`` at ``theta`` if it traces and gives ``want`` there, else None."""
        from torch.fx.experimental.proxy_tensor import make_fx

        start = time.perf_counter()
        try:
            with torch.random.fork_rng(devices=[] if theta.device.type == "cpu" else [theta.device]), \
                    (self.context() if self.context is not None else contextlib.nullcontext()):
                fn = self.fn
                graph = make_fx(lambda x: fn(x))(theta.detach())  # a plain function of one tensor
                graph.graph.eliminate_dead_code()
                graph.recompile()
                got = graph(theta)
            if len(got) != len(want) or not all(_same(g, w) for g, w in zip(got, want)):
                raise ValueError("the graph's output differs from the function's")
        except Exception as err:  # data-dependent Python, an operation make_fx cannot record, a mismatch
            self.refused = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
            graph = None
        if graph is not None:
            graph = _in_torchscript(graph, theta, want) or graph
        self.seconds += time.perf_counter() - start
        return graph

    @property
    def traced(self) -> bool:
        """Whether some input key runs on a graph."""
        return any(g is not None for g in self.graphs.values())

    def note(self) -> str | None:
        """One line for a run's notes: traced (after how many calls, in how long), refused (why), or
        None where no key reached :attr:`after` calls."""
        if not self.graphs:
            return None
        if self.traced:
            how = "TorchScript" if any(isinstance(g, _Scripted) for g in self.graphs.values()) else "an fx graph"
            return (f"traced into one graph of operations after {self.after} calls ({self.seconds:.2f} s), "
                    f"replayed as {how} without the model's Python")
        return f"not traced ({self.refused}): the model's Python runs at every call"
