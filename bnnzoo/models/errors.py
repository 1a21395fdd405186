"""The one error type of model specifications."""

from __future__ import annotations

from typing import Any, Iterable

from ..validation import positive, probability


class SpecError(ValueError):
    """A model specification that cannot be built.

    The message always names the offending field (a dotted path such as
    ``layers[1].activation``) and the offending value, and where the value must
    come from a fixed set, lists the valid choices.
    """

    def __init__(self, field: str, detail: str):
        self.field = field
        self.detail = detail
        super().__init__(f"{field}: {detail}")

    def within(self, prefix: str) -> "SpecError":
        """The same error with its field placed under ``prefix``."""
        return SpecError(f"{prefix}.{self.field}" if self.field else prefix, self.detail)


def choose(field: str, value: Any, choices: Iterable[str], what: str = "value") -> SpecError:
    """A :class:`SpecError` for a value outside a fixed set of choices."""
    options = ", ".join(sorted(str(c) for c in choices))
    return SpecError(field, f"unknown {what} {value!r}; choose one of {options}")


def check_positive(field: str, value: Any) -> None:
    """Raise a :class:`SpecError` unless ``value`` is a finite number > 0."""
    positive(field, value, error=SpecError)


def check_probability(field: str, value: Any) -> None:
    """Raise a :class:`SpecError` unless ``0 < value < 1``."""
    probability(field, value, error=SpecError)


def from_table(d: Any, field: str, registry: dict, what: str):
    """Build one of ``registry``'s dataclasses from ``{"kind": ..., **params}``
    or a bare kind name, naming ``field`` in every error."""
    from collections.abc import Mapping
    from dataclasses import fields

    if isinstance(d, str):
        d = {"kind": d}
    if not isinstance(d, Mapping):
        raise SpecError(field, f"expected a table with a 'kind', got {d!r}")
    d = dict(d)
    kind = d.pop("kind", None)
    if not isinstance(kind, str) or kind not in registry:
        raise choose(f"{field}.kind", kind, registry, what)
    cls = registry[kind]
    valid = {f.name for f in fields(cls)}
    for key in d:
        if key not in valid:
            raise choose(f"{field}.{key}", key, valid or ["(none)"], f"parameter of {kind}")
    d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    try:
        return cls(**d)
    except SpecError as e:
        raise e.within(field) from None
