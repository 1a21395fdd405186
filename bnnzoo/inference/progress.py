"""Progress of a run: Pyro's bar on a terminal, one line every few seconds elsewhere.

A log file or a CI console gets no bar (a bar there is thousands of carriage
returns); :class:`ProgressLines` prints at most one line every ``every`` seconds::

    bnnzoo chees: sampling 120/500 (24%), 35.2 it/s, about 11 s left

It is a Pyro ``MCMC`` ``hook_fn`` (``hook(kernel, params, stage, i)``) and has
:meth:`ProgressLines.step` for loops of its own (VI).
"""

from __future__ import annotations

import sys
import time

__all__ = ["ProgressLines", "use_bar"]


def use_bar(stream=None) -> bool:
    """Whether progress goes to a terminal (a bar) rather than a log (lines)."""
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class ProgressLines:
    """At most one progress line every ``every`` seconds, with phase, iterations done, rate and ETA.

    Parameters
    ----------
    label : str
        What runs (the engine's name).
    phases : dict
        Phase name -> iterations per chain in it, in order (``{"warm-up": 500, "sampling": 500}``).
    chains : int
        Chains run one after another (their iterations add up).
    every : float
        Seconds between lines.
    """

    def __init__(self, label: str, phases: dict[str, int], chains: int = 1, every: float = 5.0, stream=None):
        self.label, self.phases, self.chains, self.every = label, dict(phases), chains, every
        self.stream = stream or sys.stderr
        self.total = chains * sum(self.phases.values())
        self.done = self._base = 0
        self._start = self._last = time.monotonic()

    def resumed(self, done: int) -> None:
        """A resumed run starts with ``done`` iterations behind it (every chain's, warm-up included):
        the count goes on from there, and the rate and time left are those of this process's iterations."""
        self.done = self._base = int(done)
        self._start = self._last = time.monotonic()

    def __call__(self, kernel, params, stage: str, i: int) -> None:
        """Pyro's ``hook_fn``: one iteration of ``stage`` (``"Warmup"``/``"Sample"``, maybe ``" [chain]"``)."""
        self.step("warm-up" if stage.startswith("Warmup") else "sampling", i + 1)

    def step(self, phase: str, position: int) -> None:
        """One iteration done; ``position`` of the phase's iterations reached in the current chain."""
        self.done += 1
        now = time.monotonic()
        if now - self._last < self.every and self.done < self.total:
            return
        self._last = now
        rate = (self.done - self._base) / max(now - self._start, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        size = self.phases.get(phase, position)
        self.stream.write(f"bnnzoo {self.label}: {phase} {position}/{size} ({100 * position / max(size, 1):.0f}%), "
                          f"{rate:.1f} it/s, about {left:.0f} s left\n")
        self.stream.flush()
