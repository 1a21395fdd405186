r"""The sampler core: a sampler is explicit data and a step; one adapter makes it a Pyro kernel.

BlackJAX's shape inside, Pyro's outside. A sampler is an object with two methods on
explicit states whose tensors carry the chains as their leading dimension:

* ``init(position [C, D]) -> State``: a frozen ``NamedTuple`` (position, its potential and
  gradient, and the sampler's own fields);
* ``step(state, params, generator=None) -> (State, Info)``: one transition; ``params`` (a
  ``NamedTuple``: step size, trajectory length, preconditioner, ...) is what warm-up tunes,
  ``Info`` (a ``NamedTuple`` in ArviZ's names: ``acceptance_rate``, ``diverging``,
  ``energy``, ``energy_error``, ``step_size``, ``n_steps``, ...; a field may be None) is one
  row of per-draw statistics (less the fields its type names ``internal``: what warm-up reads,
  such as an HMC trajectory's end).

Warm-up is a separate component composed around the sampler (BlackJAX's
``window_adaptation(algorithm)``): an adaptation with ``start(sampler, state, params, num_steps)
-> (state, params)`` before the first warm-up step and ``update(sampler, t, state, info, params) ->
(state, params)`` after each (``t`` counts warm-up steps from 0; at ``t = num_steps - 1`` it
returns the final parameters; the sampler is there to try a step, as a step-size search does),
and ``finish(params, sampler, state) -> params``, which ends warm-up after the step just made (what
``update`` does at its last step; a gradient budget calls it earlier through
:meth:`TransitionKernel.end_warmup`; the sampler and the chains' state are there for a part that
still has to set a parameter, as ChEES's trajectory length does when warm-up ends before its first
mass update).
An adaptation may also make some warm-up transitions itself, with another dynamics on the same
state (MAMS's unadjusted burn-in): ``transition(sampler, t, state, params) -> (state, info)``, or
None where the sampler's own step is to run.
Its state is plain attributes (numbers, tensors), so a checkpoint stores it as it is.

:class:`TransitionKernel` is the one adapter: a :class:`~bnnzoo.inference.kernels.base.FlatKernel`
(so ``pyro.infer.MCMC``, ``bnnzoo.inference.MCMC`` with every ``chain_method``, ``Predictive``,
checkpoints and ArviZ work) whose transition is ``sampler.step`` and whose warm-up is
``adaptation.update``. A kernel on this core is one small class: its options dataclass and
:meth:`TransitionKernel.build`, which returns the sampler, the adaptation and the first
parameters. Its checkpoint is the state, the parameters and the adaptation's attributes (the
sampler itself holds only the potential and the options, and is rebuilt by ``setup()``). After each
transition and its warm-up update, :meth:`TransitionKernel.observe` tells the execution layer what
it took (the HMC family's leapfrog runtime counts its steps there for ``compile="auto"``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple, Protocol

import torch

from .base import FlatKernel

__all__ = ["Adaptation", "Sampler", "TransitionKernel", "drawing_from", "info_row"]

Tensor = torch.Tensor


class Sampler(Protocol):
    """What :class:`TransitionKernel` drives (module docstring)."""

    def init(self, position: Tensor) -> NamedTuple: ...

    def step(self, state: NamedTuple, params: NamedTuple,
             generator: torch.Generator | None = None) -> tuple[NamedTuple, NamedTuple]: ...


class Adaptation(Protocol):
    """Warm-up composed around a sampler (module docstring)."""

    def start(self, sampler: Sampler, state: NamedTuple, params: NamedTuple,
              num_steps: int) -> tuple[NamedTuple, NamedTuple]: ...

    def update(self, sampler: Sampler, t: int, state: NamedTuple, info: NamedTuple,
               params: NamedTuple) -> tuple[NamedTuple, NamedTuple]: ...

    def finish(self, params: NamedTuple, sampler: Sampler | None = None,
               state: NamedTuple | None = None) -> NamedTuple: ...


@contextmanager
def drawing_from(generator: torch.Generator | None) -> Iterator[None]:
    """Within the block, torch's global generator (of ``generator``'s device) draws ``generator``'s
    stream: its state is lent to the global generator and taken back, advanced, at the end; the
    global stream is then as it was. For a sampler whose random numbers come from calls without a
    ``generator`` argument (``torch.randn_like``), so that ``step(state, params, generator)`` draws
    from ``generator`` as a sampler that passes it on does. None: nothing changes. Not for threads
    that draw from the global generator meanwhile."""
    if generator is None:
        yield
        return
    device = generator.device
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        get, put = (lambda: torch.cuda.get_rng_state(index)), (lambda st: torch.cuda.set_rng_state(st, index))
    else:
        get, put = torch.get_rng_state, torch.set_rng_state
    saved = get()
    put(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(get())
        put(saved)


def info_row(info: NamedTuple) -> dict[str, Any]:
    """An ``Info`` as per-draw statistics: its fields that are not None, less those its type names in
    a class attribute ``internal`` (what warm-up reads, such as a trajectory's end, not a statistic);
    a field that is a ``dict`` gives its entries (statistics named by the model, e.g. one per site)."""
    internal = getattr(type(info), "internal", ())
    row = {}
    for k, v in info._asdict().items():
        if k in internal or v is None:
            continue
        if isinstance(v, dict):
            row.update(v)
        else:
            row[k] = v
    return row


class TransitionKernel(FlatKernel):
    """A Pyro ``MCMCKernel`` made of a sampler and its warm-up adaptation (module docstring).

    A subclass sets :attr:`Options` and writes :meth:`build`. The position of the kernel's
    state is the chains' current point; a point the driver hands back unchanged continues
    the state (its velocity and cached gradient), any other point starts a new state there.
    """

    #: rebuilt by ``setup()``, never stored in a checkpoint
    checkpoint_environment = ("model", "potential", "potential_fn", "transforms", "_prototype_trace", "sampler")

    def build(self, theta: Tensor) -> tuple[Sampler, Adaptation | None, NamedTuple]:
        """The sampler, its warm-up adaptation (None: nothing is tuned) and the first
        parameters, from :attr:`options`, :attr:`potential` and the initial points ``theta [C, D]``."""
        raise NotImplementedError

    def _reset(self) -> None:
        super()._reset()
        self.sampler: Sampler | None = None
        self.adaptation: Adaptation | None = None
        self.params: NamedTuple | None = None
        self.state: NamedTuple | None = None

    def prepare(self, theta: Tensor) -> None:
        self.sampler, self.adaptation, self.params = self.build(theta)
        self.state = self.sampler.init(theta)
        if self.adaptation is not None and self._warmup_steps > 0:
            self.state, self.params = self.adaptation.start(self.sampler, self.state, self.params,
                                                            self._warmup_steps)
        self.remember(self.state.position, self.state.value, self.state.grad)

    def _continue(self, theta: Tensor) -> NamedTuple:
        """The state at ``theta``: the kernel's own where ``theta`` is its position, else a new one."""
        state = self.state
        if state is not None and (theta is state.position or torch.equal(theta, state.position)):
            return state
        return self.sampler.init(theta)

    def transition(self, theta: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        state, stepped = self._continue(theta), None
        own_step = getattr(self.adaptation, "transition", None) if self.in_warmup else None
        if own_step is not None:
            stepped = own_step(self.sampler, self._t, state, self.params)
        state, info = stepped if stepped is not None else self.sampler.step(state, self.params)
        if self.in_warmup and self.adaptation is not None:
            state, self.params = self.adaptation.update(self.sampler, self._t, state, info, self.params)
        self.state = state
        self.observe(state, info)
        self.remember(state.position, state.value, state.grad)
        return state.position, {**info_row(info), "lp": -state.value, **self.extra_stats()}

    def end_warmup(self) -> None:
        """End warm-up after the transition just made, before its scheduled end (a gradient budget's
        call, :class:`~bnnzoo.inference.budget.BudgetMeter`): the adaptation's ``finish`` freezes the
        parameters as its last scheduled step would, and every later transition is a draw."""
        if not self.in_warmup:
            return
        self._warmup_steps = self._t
        if self.adaptation is not None:
            self.params = self.adaptation.finish(self.params, self.sampler, self.state)

    def observe(self, state: NamedTuple, info: NamedTuple) -> None:
        """After each transition and its warm-up update: tell the execution layer what it took (the
        HMC family's runtime counts leapfrog steps for ``compile="auto"``); nothing by default."""

    def extra_stats(self) -> dict[str, Any]:
        """Per-draw statistics from the parameters (numbers, the same for every chain)."""
        return {}

    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        if self.params is not None:
            diag.update(self.tuned())
        return diag

    def tuned(self) -> dict[str, Any]:
        """The parameters after warm-up as ``diagnostics()`` reports them (the HMC family's names
        where they mean the same)."""
        return {"step_size": self.params.step_size}
