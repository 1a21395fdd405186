"""Argument checks shared by every layer: one place for the rules and the messages.

Each check raises before anything runs, with a message that names the field and
the value. ``error`` builds the exception from ``(field, detail)``: the default
gives a ``ValueError("<field> <detail>")``; model specs pass
:class:`~bnnzoo.models.SpecError` (``"<field>: <detail>"``).

>>> positive("step_size", -1)
Traceback (most recent call last):
...
ValueError: step_size must be a positive number, got -1
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable

import torch

__all__ = ["at_least", "available_devices", "boolean", "count", "device", "finite", "float_dtype", "fraction",
           "in_interval", "integer", "is_real", "one_of", "positive", "probability", "value_error"]

ErrorFactory = Callable[[str, str], Exception]


def value_error(field: str, detail: str) -> ValueError:
    """The default error: ``ValueError("<field> <detail>")``."""
    return ValueError(f"{field} {detail}")


def is_real(value: Any) -> bool:
    """A finite real number (an int or float, numpy's included, never a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def positive(field: str, value: Any, error: ErrorFactory = value_error) -> None:
    """A finite number > 0."""
    if not (is_real(value) and value > 0):
        raise error(field, f"must be a positive number, got {value!r}")


def integer(field: str, value: Any, minimum: int = 1, error: ErrorFactory = value_error,
            maximum: int | None = None) -> None:
    """An integer (numpy's included, never a bool) >= ``minimum`` (and <= ``maximum`` where given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise error(field, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise error(field, f"must be an integer <= {maximum}, got {value!r}")


def count(field: str, value: Any, minimum: int = 1, error: ErrorFactory = value_error, *, got: str = ", got") -> None:
    """An integer (numpy's included, never a bool) >= ``minimum``, worded as a count:
    "must be a positive integer" (``minimum=1``), "must be a non-negative integer"
    (``minimum=0``), else "must be an integer >= minimum". ``got`` joins the value
    (the data layer writes ``"; got"``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise error(field, f"must be {what}{got} {value!r}")


def finite(field: str, value: Any, error: ErrorFactory = value_error) -> None:
    """A finite real number (see :func:`is_real`)."""
    if not is_real(value):
        raise error(field, f"must be a finite number, got {value!r}")


def boolean(field: str, value: Any, error: ErrorFactory = value_error) -> None:
    """``True`` or ``False`` (not 0, 1 or a numpy bool)."""
    if not isinstance(value, bool):
        raise error(field, f"must be True or False, got {value!r}")


def probability(field: str, value: Any, error: ErrorFactory = value_error) -> None:
    """A probability strictly between 0 and 1 (as :func:`fraction`, worded as a probability)."""
    if not (is_real(value) and 0 < value < 1):
        raise error(field, f"must be a probability strictly between 0 and 1, got {value!r}")


def fraction(field: str, value: Any, error: ErrorFactory = value_error) -> None:
    """A number strictly between 0 and 1."""
    if not (is_real(value) and 0 < value < 1):
        raise error(field, f"must be strictly between 0 and 1, got {value!r}")


def in_interval(field: str, value: Any, low: float = 0.0, high: float = math.inf, low_open: bool = False,
                high_open: bool = True, error: ErrorFactory = value_error, *, got: str = ", got") -> None:
    """A finite number in the interval from ``low`` to ``high`` (each end open or closed);
    ``got`` joins the value (the data layer writes ``"; got"``)."""
    ok = is_real(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise error(field, f"must be in {lo}{low}, {high}{hi}{got} {value!r}")


def at_least(field: str, value: Any, low: float, error: ErrorFactory = value_error) -> None:
    """A finite number >= ``low``."""
    if not (is_real(value) and value >= low):
        raise error(field, f"must be a number >= {low}, got {value!r}")


def one_of(field: str, value: Any, choices: Iterable, error: ErrorFactory = value_error) -> None:
    """One of a fixed set of choices (compared by equality; a list is never a choice)."""
    choices = tuple(choices)
    hashable = not isinstance(value, (list, dict, set))
    if not (hashable and value in choices):
        raise error(field, f"{value!r}: choose one of {', '.join(map(str, choices))}")


def float_dtype(field: str, value: Any, error: ErrorFactory = value_error) -> torch.dtype:
    """A torch floating dtype, or its name (``"float64"``), returned as the dtype."""
    dtype = getattr(torch, value, value) if isinstance(value, str) else value
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise error(field, f"must be a torch floating dtype (torch.float32, torch.float64 or its name), got {value!r}")
    if torch.finfo(dtype).bits < 32:
        # a Metropolis test compares two energies of size |U| (a sum over the data) whose
        # difference matters at order 1: float16 resolves 1 in 2^11, bfloat16 1 in 2^8
        raise error(field, f"{value!r} is too coarse for an accept/reject test (a relative precision of "
                           f"{torch.finfo(dtype).eps:.0e}: an energy of 1000 is known to within "
                           f"{1000 * torch.finfo(dtype).eps:.2g}); use float32 or float64")
    return dtype


def available_devices() -> list[str]:
    """The devices bnnzoo can run on here: ``"cpu"`` and each CUDA device as ``"cuda:index"``."""
    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["cpu"] + cuda


def device(field: str, value: Any, error: ErrorFactory = value_error) -> torch.device:
    """A device this machine has, as a ``torch.device`` or its name (``"cpu"``, ``"cuda"``, ``"cuda:1"``):
    returned with its index (``"cuda"``: the current CUDA device), the CPU as ``cpu``."""
    here = ", ".join(available_devices())
    try:
        parsed = torch.device(value) if isinstance(value, (str, torch.device)) else None
    except RuntimeError:
        parsed = None
    if parsed is None:
        raise error(field, f"{value!r} is not a torch device; this machine has: {here}")
    if parsed.type == "cpu":
        return torch.device("cpu")
    if parsed.type != "cuda":
        raise error(field, f"{value!r}: bnnzoo runs on the CPU or a CUDA GPU; this machine has: {here}")
    index = parsed.index
    if index is None and torch.cuda.is_available():
        index = torch.cuda.current_device()
    if f"cuda:{index}" not in here.split(", "):
        raise error(field, f"{value!r} is not available; this machine has: {here}")
    return torch.device("cuda", index)
