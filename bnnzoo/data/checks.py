"""Validation of ``(x, y)`` pairs before they reach a model or a sampler."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..validation import count

TASKS = ("regression", "classification")


def check_data(
    x: Any,
    y: Any,
    *,
    task: str,
    input_dim: int | None = None,
    num_classes: int | None = None,
    name: str = "data",
) -> tuple[Tensor, Tensor]:
    """Validate and convert a data set.

    Parameters
    ----------
    x : array-like or Tensor
        Inputs of shape ``[N, d]``; a 1-D ``[N]`` array is accepted only when
        ``input_dim == 1`` and is reshaped to ``[N, 1]``.
    y : array-like or Tensor
        Targets of shape ``[N]`` (or ``[N, 1]``). Class labels may be given as
        floats provided they are integral.
    task : {"regression", "classification"}
    input_dim : int, optional
        Expected number of columns of ``x``.
    num_classes : int, optional
        Labels must lie in ``[0, num_classes)``; without it they must be >= 0.
    name : str
        Prefix of every error message (e.g. ``"train"``).

    Returns
    -------
    x : Tensor
        ``[N, d]`` tensor of ``torch.get_default_dtype()``.
    y : Tensor
        ``[N]`` tensor: default float dtype for regression, int64 for
        classification. Inputs that already conform are returned without a copy.

    Raises
    ------
    ValueError
        With a message naming the problem and the offending value.
    """
    where = f"{name}: "
    if task not in TASKS:
        raise ValueError(f"{where}task must be one of {', '.join(TASKS)}; got {task!r}")
    _check_count(where, "input_dim", input_dim)
    _check_count(where, "num_classes", num_classes)

    x = _as_tensor(x, "x", where)
    y = _as_tensor(y, "y", where)
    x = _check_x(x, input_dim, where)
    y = _check_y_shape(y, where)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{where}x has {x.shape[0]} rows but y has {y.shape[0]}")
    if task == "regression":
        y = y.to(torch.get_default_dtype())
        _check_finite(y, "y", where)
    else:
        y = _check_labels(y, num_classes, where)
    return x, y


def _check_count(where: str, field: str, value: int | None) -> None:
    if value is not None:
        count(field, value, error=lambda f, detail: ValueError(f"{where}{f} {detail}"), got="; got")


def _as_tensor(a: Any, field: str, where: str) -> Tensor:
    """Convert to a tensor, refusing non-numeric or ragged input."""
    if isinstance(a, Tensor):
        if a.is_complex():
            raise ValueError(f"{where}{field} must be real-valued; got dtype {a.dtype}")
        return a
    try:
        arr = np.asarray(a)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"{where}{field} is not a rectangular array: {err}") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{where}{field} must be numeric; got dtype {arr.dtype}")
    if not arr.flags.writeable:  # e.g. pandas copy-on-write views; torch needs writable memory
        arr = arr.copy()
    return torch.as_tensor(arr)


def _check_x(x: Tensor, input_dim: int | None, where: str) -> Tensor:
    if x.ndim == 1:
        if input_dim != 1:
            raise ValueError(
                f"{where}x must be 2-D [N, d]; got shape {tuple(x.shape)} "
                "(1-D x is accepted only with input_dim=1)"
            )
        x = x.reshape(-1, 1)
    elif x.ndim != 2:
        raise ValueError(f"{where}x must be 2-D [N, d]; got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{where}x is empty (shape {tuple(x.shape)})")
    if input_dim is not None and x.shape[1] != input_dim:
        raise ValueError(
            f"{where}x has {x.shape[1]} columns but the model expects input_dim={input_dim}"
        )
    x = x.to(torch.get_default_dtype())
    _check_finite(x, "x", where)
    return x


def _check_y_shape(y: Tensor, where: str) -> Tensor:
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.reshape(-1)
    if y.ndim != 1:
        raise ValueError(f"{where}y must have shape [N] or [N, 1]; got {tuple(y.shape)}")
    if y.shape[0] == 0:
        raise ValueError(f"{where}y is empty (shape {tuple(y.shape)})")
    return y


def _check_finite(t: Tensor, field: str, where: str) -> None:
    if not t.is_floating_point():
        return
    bad = ~torch.isfinite(t)
    count = int(bad.sum())
    if count == 0:
        return
    first = bad.nonzero()[0].tolist()
    loc = f"row {first[0]}" + (f", column {first[1]}" if len(first) > 1 else "")
    noun = "value" if count == 1 else "values"
    raise ValueError(f"{where}{field} has {count} non-finite {noun} (first at {loc})")


def _check_labels(y: Tensor, num_classes: int | None, where: str) -> Tensor:
    if y.is_floating_point():
        _check_finite(y, "y", where)
        frac = y != torch.round(y)
        if bool(frac.any()):
            row = int(frac.nonzero()[0, 0])
            raise ValueError(
                f"{where}labels must be integers; found {y[row].item()!r} (row {row})"
            )
    y = y.to(torch.int64)
    low = y < 0
    high = y >= num_classes if num_classes is not None else torch.zeros_like(low)
    bad = low | high
    if bool(bad.any()):
        values = torch.unique(y[bad]).tolist()
        shown = ", ".join(str(v) for v in values[:5]) + (", ..." if len(values) > 5 else "")
        allowed = f"[0, {num_classes})" if num_classes is not None else "non-negative"
        verb = "in " if num_classes is not None else ""
        raise ValueError(f"{where}labels must be {verb}{allowed}; found {shown}")
    return y


#: a column (or a regression target) whose sd or |mean| is above this, or whose sd is below its
#: inverse, is "far from unit scale": unit-scale priors and the likelihood's noise scale assume
#: roughly standardised data
UNIT_SCALE = 10.0


def scale_warning(x: Tensor, y: Tensor, task: str, name: str = "data") -> str | None:
    """One line when the training data are far from unit scale (:data:`UNIT_SCALE`): a regression
    target, or input columns, with a large mean or a sd far from 1; None otherwise. Constant
    columns are left out (a bias column, a one-hot column that never fires)."""
    parts = []
    if task == "regression" and y.numel() > 1:
        yy = y.detach().double().reshape(-1)
        mean, sd = float(yy.mean()), float(yy.std())
        if sd > UNIT_SCALE or (0 < sd < 1 / UNIT_SCALE) or abs(mean) > UNIT_SCALE:
            parts.append(f"the target has mean {mean:.3g} and sd {sd:.3g}")
    if x.is_floating_point() and x.shape[0] > 1:
        xx = x.detach().double().reshape(x.shape[0], -1)
        mean, sd = xx.mean(0), xx.std(0)
        moving = sd > 0
        wide = moving & ((sd > UNIT_SCALE) | (mean.abs() > UNIT_SCALE) | (sd < 1 / UNIT_SCALE))
        if bool(wide.any()):
            cols = torch.nonzero(wide).reshape(-1).tolist()
            shown = ", ".join(str(c) for c in cols[:5]) + (", ..." if len(cols) > 5 else "")
            parts.append(f"{len(cols)} input column(s) ({shown}) have sd up to {float(sd[wide].max()):.3g} and "
                         f"|mean| up to {float(mean[wide].abs().max()):.3g}")
    if not parts:
        return None
    return (f"{name}: far from unit scale ({'; '.join(parts)}); the priors and the likelihood's noise assume "
            f"roughly standardised data, so expect poor mixing or a misfit: standardise the data (or set the "
            f"prior and noise scales to match)")
