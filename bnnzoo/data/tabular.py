"""The ``csv`` loader: a user's tabular data set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .checks import TASKS
from .datasets import Dataset, _as_float, _real, register

MAX_INFERRED_CLASSES = 20
"""An integer-valued target with at most this many distinct values is a class label."""


def _fail(message: str) -> ValueError:
    return ValueError(f"dataset 'csv': {message}")


def _read(path: str | Path, target: str) -> pd.DataFrame:
    """Read ``path``; check the target exists and there is at least one row and feature."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"dataset 'csv': file not found: '{path}'")
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise _fail(f"'{path}' is empty") from None
    if target not in df.columns:
        available = ", ".join(repr(str(c)) for c in df.columns)
        raise _fail(
            f"target column {target!r} not found in '{path}'; available columns: {available}"
        )
    if len(df) == 0:
        raise _fail(f"'{path}' has a header but no data rows")
    if len(df.columns) < 2:
        raise _fail(f"'{path}' has no feature columns besides the target {target!r}")
    return df


def _check_columns(df: pd.DataFrame, target: str, path: str | Path) -> None:
    """Features must be numeric; no column may hold NaN/missing or infinite values."""
    for col in df.columns:
        if col != target and not pd.api.types.is_numeric_dtype(df[col]):
            raise _fail(
                f"column {str(col)!r} in '{path}' is not numeric (dtype {df[col].dtype}); "
                "encode it as numbers or drop it"
            )
    bad = {}
    for col in df.columns:
        count = int(df[col].isna().sum())
        if pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col]):
            count += int(np.isinf(df[col].to_numpy(dtype=np.float64, na_value=0.0)).sum())
        if count:
            bad[str(col)] = count
    if bad:
        listed = ", ".join(f"{c!r} ({n} row{'s' if n > 1 else ''})" for c, n in bad.items())
        raise _fail(f"'{path}' has NaN/missing or infinite values in column(s) {listed}")


def _is_integral(t: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(t) or pd.api.types.is_integer_dtype(t):
        return True
    if pd.api.types.is_float_dtype(t):
        v = t.to_numpy(dtype=np.float64)
        return bool(np.all(v == np.round(v)))
    return False


def _infer_task(t: pd.Series, target: str, task: str | None) -> str:
    numeric = pd.api.types.is_numeric_dtype(t)
    if task is None:
        if not numeric:
            return "classification"
        small = t.nunique() <= MAX_INFERRED_CLASSES
        return "classification" if _is_integral(t) and small else "regression"
    if task not in TASKS:
        raise _fail(f"task must be None or one of {', '.join(TASKS)}; got {task!r}")
    if task == "regression" and not numeric:
        raise _fail(
            f"target column {target!r} is not numeric (dtype {t.dtype}); cannot regress on it"
        )
    return task


@register("csv")
def csv(
    seed: int = 0,
    path: str | Path | None = None,
    target: str = "y",
    test_path: str | Path | None = None,
    test_fraction: float = 0.2,
    task: str | None = None,
) -> Dataset:
    """Load a CSV file with a header; every column except ``target`` is an input.

    Parameters
    ----------
    path : str or Path
        Training file (or the whole data set when ``test_path`` is None).
    target : str
        Name of the target column.
    test_path : str or Path, optional
        Test file with the same columns. Without it, a random fraction
        ``test_fraction`` of ``path`` (at least one row) is held out using ``seed``.
    task : {"regression", "classification"}, optional
        Inferred when None: a non-numeric target, or an integer-valued one with
        at most 20 distinct values, is classification; anything else regression.

    Notes
    -----
    Class labels are the indices of the sorted distinct target values (of both
    files); ``meta["classes"][k]`` is the original value of label ``k``.
    ``meta["feature_names"]`` lists the input columns in order.
    """
    if path is None:
        raise _fail("path is required, e.g. load('csv', path='train.csv', target='y')")
    test_fraction = _real("csv", "test_fraction", test_fraction, 0.0, 1.0, "neither")
    train = _read(path, target)
    _check_columns(train, target, path)
    features = [c for c in train.columns if c != target]
    if test_path is not None:
        test = _read(test_path, target)
        missing = [str(c) for c in train.columns if c not in test.columns]
        if missing:
            listed = ", ".join(map(repr, missing))
            raise _fail(f"'{test_path}' lacks column(s) {listed} of '{path}'")
        test = test[list(train.columns)]
        _check_columns(test, target, test_path)
    else:
        train, test = _split(train, test_fraction, seed)

    task = _infer_task(pd.concat([train[target], test[target]]), target, task)
    meta = {
        "path": str(path),
        "test_path": None if test_path is None else str(test_path),
        "target": target,
        "feature_names": [str(c) for c in features],
        "seed": seed,
    }
    if task == "classification":
        classes, y_train, y_test = _encode_labels(train[target], test[target])
        meta["classes"] = classes
        num_classes: int | None = len(classes)
    else:
        y_train, y_test = (_as_float(d[target].to_numpy(dtype=np.float64)) for d in (train, test))
        num_classes = None
    x_train, x_test = (_as_float(d[features].to_numpy(dtype=np.float64)) for d in (train, test))
    return Dataset("csv", task, x_train, y_train, x_test, y_test, num_classes, meta)


def _split(df: pd.DataFrame, test_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random train/test split of the rows with ``numpy.random.default_rng(seed)``."""
    n = len(df)
    if n < 2:
        raise _fail(f"need at least 2 rows to split into train and test; got {n}")
    n_test = min(max(round(test_fraction * n), 1), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return df.iloc[perm[n_test:]], df.iloc[perm[:n_test]]


def _encode_labels(
    train: pd.Series, test: pd.Series
) -> tuple[list, torch.Tensor, torch.Tensor]:
    """Map the sorted distinct target values to 0..K-1."""
    both = pd.concat([train, test])
    if pd.api.types.is_float_dtype(both) and _is_integral(both):
        train, test, both = (s.astype(np.int64) for s in (train, test, both))
    try:
        classes = sorted(pd.unique(both).tolist())
    except TypeError:
        name = str(train.name)
        raise _fail(f"target column {name!r} mixes types (e.g. numbers and text)") from None
    codes = [pd.Categorical(s, categories=classes).codes.astype(np.int64) for s in (train, test)]
    return classes, torch.as_tensor(codes[0]), torch.as_tensor(codes[1])
