"""Kernel options: one frozen dataclass per kernel, the single source of each option's default.

Every field carries a one-line meaning and an optional check in its metadata
(:func:`option`). A kernel is built as ``Kernel(model, step_size=..., ...)``
(Pyro's keyword style); its keywords are exactly its options dataclass's fields,
defaulted and validated there. The engine layer, ``bnnzoo list`` and the
"unknown option" errors read the same dataclass.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .. import validation

__all__ = ["Options", "choice", "integer", "interval", "option", "optional", "positive", "fraction", "site_names",
           "suggest"]

Check = Callable[[str, Any], None]


def option(default: Any, doc: str, check: Check | None = None):
    """A dataclass field with its default, one line of meaning and a check ``(name, value) -> None``."""
    return field(default=default, metadata={"doc": doc, "check": check})


def optional(check: Check) -> Check:
    """``check``, or nothing for None."""
    return lambda name, value: None if value is None else check(name, value)


def choice(*choices) -> Check:
    return lambda name, value: validation.one_of(name, value, choices)


def integer(minimum: int = 1) -> Check:
    return lambda name, value: validation.integer(name, value, minimum)


def interval(low: float = 0.0, high: float = float("inf"), low_open: bool = False, high_open: bool = True) -> Check:
    """A finite number between ``low`` and ``high`` (see :func:`bnnzoo.validation.in_interval`)."""
    return lambda name, value: validation.in_interval(name, value, low, high, low_open, high_open)


def site_names(name: str, value: Any) -> None:
    """None or a list of site names (strings)."""
    if value is not None and (isinstance(value, str) or not isinstance(value, (list, tuple))
                              or not all(isinstance(s, str) for s in value)):
        raise ValueError(f"{name} must be a list of site names, got {value!r}")


flag = validation.boolean


positive = validation.positive
fraction = validation.fraction


def suggest(name: str, valid) -> str:
    """``"; did you mean 'x'?"`` for the closest valid names, or ``""``."""
    close = difflib.get_close_matches(name, list(valid), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


@dataclass(frozen=True)
class Options:
    """Base of the kernels' options dataclasses: runs each field's check, then :meth:`validate`."""

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                check(f.name, getattr(self, f.name))
        self.validate()

    def validate(self) -> None:
        """Checks across fields (a subclass adds them)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in fields(cls)}

    @classmethod
    def docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in fields(cls)}

    @classmethod
    def build(cls, owner: str, given: dict[str, Any]) -> "Options":
        """The options of ``owner`` from keywords; an unknown keyword is an error naming the closest valid ones."""
        unknown = [k for k in given if k not in cls.names()]
        if unknown:
            hint = suggest(unknown[0], cls.names()) if len(unknown) == 1 else ""
            raise ValueError(f"{owner}: unknown option(s) {', '.join(unknown)}{hint}; "
                             f"valid options: {', '.join(cls.names())}")
        return cls(**given)
