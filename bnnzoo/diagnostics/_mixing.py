"""Elementwise mixing statistics shared by :mod:`.summary` and :mod:`.members`: ArviZ's bulk ESS and
R-hat of an array of draws, NaN-skipping extremes, and quieting ArviZ's warnings for the 1-chain and
constant-draw cases whose NaN/inf results the callers handle."""

from __future__ import annotations

import logging
import math
import warnings
from contextlib import contextmanager

import numpy as np

from . import _arviz

__all__ = ["ess_rhat", "nanmax", "nanmin", "quiet"]


@contextmanager
def quiet():
    """ArviZ warns (and numpy divides by zero) for 1-chain runs and constant draws; the
    results are NaN/inf, which the callers handle."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        loggers = [logging.getLogger(name) for name in ("arviz", "arviz_base", "arviz_stats")]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def nanmin(a) -> float:
    a = np.asarray(a, dtype=float).ravel()
    a = a[~np.isnan(a)]
    return float(a.min()) if a.size else math.nan


def nanmax(a) -> float:
    a = np.asarray(a, dtype=float).ravel()
    a = a[~np.isnan(a)]
    return float(a.max()) if a.size else math.nan


def ess_rhat(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ArviZ bulk ESS and rank-normalised R-hat of ``draws [chain, draw, ...]``, elementwise."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim < 2:
        raise ValueError(f"ess_rhat: draws must be [chain, draw, ...], got shape {draws.shape}")
    ds = _arviz.group(_arviz.from_dict({"posterior": {"v": draws}}), "posterior")
    with quiet():
        ess = _arviz.ess(ds, method="bulk")["v"].values
        rhat = _arviz.rhat(ds)["v"].values
    return ess, rhat
