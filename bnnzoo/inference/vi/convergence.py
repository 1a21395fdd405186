r"""Has a mean-field fit converged? Two tests on each fit, and the spread across fits.

**1. The ELBO has settled** (the window test). Let :math:`e_1, \dots, e_T` be a fit's
per-step ELBO estimates (the ``elbo`` trace: :math:`-(\mathrm{KL} + \mathrm{NLL})` at
the step's draws and minibatch, an unbiased estimate of the ELBO of the step's guide;
skipped steps left out). With windows of W steps, :math:`A = (e_{T-2W+1}, \dots, e_{T-W})`
and :math:`B = (e_{T-W+1}, \dots, e_T)`, the **relative change** of the smoothed ELBO
over the last window is the change of the window means in standard errors of that change,

.. math:: r = \frac{\bar e_B - \bar e_A}{\sqrt{s_A^2/|A| + s_B^2/|B|}}

(:math:`s^2` the sample variances; :math:`r > 0`: still improving). W is ``window``
(200) rounded up to whole epochs, and at most half the steps taken (whole epochs);
windows of fewer than :data:`MIN_WINDOW` steps cannot be judged (:math:`r` NaN).

**2. The guide is stationary.** A settled ELBO is not enough: once the learning rate
has decayed, the ELBO stops changing wherever the guide happens to be. So K fresh
estimates :math:`g^{(1..K)}` of the gradient of the loss in :math:`(\mu, \rho)` are
drawn at the fitted guide (K = ``window`` rounded up to whole epochs, at most the
steps taken; with the steps' estimator, particles, minibatches and KL weights; only
when test 1 has passed, as a fit that fails it has not converged anyway), and with :math:`t_j = \bar g_j /
(s_j/\sqrt K)` the t-statistic of coordinate j's mean (:math:`D' = 2D` of them),

.. math:: z = \frac{\sum_j t_j^2 - D'\,E[t^2]}{\sqrt{D'\,\mathrm{Var}[t^2]}},\qquad
          E[t^2] = \frac{\nu}{\nu - 2},\ \mathrm{Var}[t^2] = \frac{2\nu^2(\nu - 1)}{(\nu - 2)^2(\nu - 4)},\ \nu = K - 1,

the moments of a squared Student t: about N(0, 1) where the expected gradient is
zero. Near an optimum of a quadratic, :math:`t_j \approx \sqrt K\,\delta_j` with
:math:`\delta_j` the offset in guide sds, so with K = 200 offsets of about
:math:`0.2` sd in a few coordinates, or smaller ones spread over many, are seen.

A fit has **converged** when :math:`|r| \le` ``tolerance`` and :math:`z \le` ``tolerance`` (3).

**Spread across fits** (two or more independent fits of one run):
``spread_elbo`` :math:`= \max_{c,c'}|\bar e_{B,c} - \bar e_{B,c'}|` in nats, and
``spread_loc`` :math:`= \max_{c,c',i}|\mu_{c,i} - \mu_{c',i}|\big/\sqrt{(\sigma_{c,i}^2 + \sigma_{c',i}^2)/2}`,
the largest disagreement of the guide means in units of the guide sd. Network
weights are not identifiable (hidden units permute), so for a network
``spread_loc`` is large even when every fit converged; it does not enter ``converged``.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

__all__ = ["MIN_WINDOW", "converged", "elbo_change", "fit_spread", "not_converged_message", "stationarity",
           "window_steps"]

#: the fewest steps per window (and fresh gradients) the tests judge
MIN_WINDOW = 10


def window_steps(window: int, num_batches: int, num_steps: int | None = None) -> int:
    """The window W in steps: ``window`` rounded up to whole epochs of ``num_batches`` steps,
    and, given ``num_steps``, at most half of them (whole epochs; 0 when not even one)."""
    w = -(-int(window) // num_batches) * num_batches
    if num_steps is not None:
        w = min(w, (num_steps // 2) // num_batches * num_batches)
    return w


def elbo_change(elbo: np.ndarray, window: int) -> tuple[float, float]:
    """``(relative_change, smoothed ELBO)`` of a per-step ELBO trace over its last two windows of
    ``window`` steps (module docstring, test 1): the change of the window means in standard
    errors, and the last window's mean. NaN where the windows are shorter than :data:`MIN_WINDOW`
    steps or hold fewer than two finite estimates each."""
    elbo = np.asarray(elbo, dtype=float)
    if window < MIN_WINDOW or elbo.size < 2 * window:
        return math.nan, math.nan
    a, b = elbo[elbo.size - 2 * window:elbo.size - window], elbo[elbo.size - window:]
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan
    change = float(b.mean() - a.mean())
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    if se == 0.0:
        return (0.0 if change == 0.0 else math.copysign(math.inf, change)), float(b.mean())
    return change / se, float(b.mean())


def stationarity(total: np.ndarray, squares: np.ndarray, count: int) -> float:
    """The statistic z of test 2 (module docstring) from the sums ``total`` and ``squares`` of
    ``count`` fresh gradient estimates (``[D']`` each); NaN for fewer than :data:`MIN_WINDOW`.
    A coordinate with no variance counts 0 if its mean is 0, else infinity."""
    if count < MIN_WINDOW:
        return math.nan
    total, squares = np.asarray(total, dtype=float), np.asarray(squares, dtype=float)
    mean = total / count
    var = np.maximum(squares - count * mean ** 2, 0.0) / (count - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(var > 0, mean ** 2 / (var / count), np.where(mean == 0, 0.0, np.inf))
    nu = count - 1
    if nu <= 4:
        return math.nan
    e_t2 = nu / (nu - 2)
    var_t2 = 2 * nu ** 2 * (nu - 1) / ((nu - 2) ** 2 * (nu - 4))
    return float((t2.sum() - t2.size * e_t2) / math.sqrt(t2.size * var_t2))


def converged(relative_change: float, stationarity: float, tolerance: float) -> bool:
    """Both tests pass: ``|relative_change| <= tolerance`` and ``stationarity <= tolerance`` (NaN fails)."""
    return bool(abs(relative_change) <= tolerance and stationarity <= tolerance)


def fit_spread(final_elbo: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> tuple[float, float]:
    """``(spread_elbo, spread_loc)`` of C fits (module docstring): ``final_elbo [C]``, guide
    ``loc, scale [C, D]``; NaN for one fit."""
    final_elbo, loc, scale = np.asarray(final_elbo, float), np.asarray(loc, float), np.asarray(scale, float)
    if final_elbo.size < 2:
        return math.nan, math.nan
    pairs = list(combinations(range(final_elbo.size), 2))
    elbo = max(abs(final_elbo[i] - final_elbo[j]) for i, j in pairs)
    means = max(float(np.max(np.abs(loc[i] - loc[j]) / np.sqrt(0.5 * (scale[i] ** 2 + scale[j] ** 2))))
                for i, j in pairs)
    return float(elbo), means


def not_converged_message(engine: str, relative_change: np.ndarray, stationarity: np.ndarray, window: int,
                          gradient_draws: int, tolerance: float, num_steps: int) -> str:
    """The one-line warning for fits that have not converged (``[C]`` arrays; NaN: too few steps)."""
    change, stat = np.asarray(relative_change, dtype=float), np.asarray(stationarity, dtype=float)
    bad = ~np.array([converged(r, z, tolerance) for r, z in zip(change, stat)])
    fits = f"{int(bad.sum())} of {change.size} fit{'s' if change.size > 1 else ''}"
    unsettled = bad & ~(np.abs(change) <= tolerance) & ~np.isnan(change)
    moving = bad & ~(stat <= tolerance) & ~np.isnan(stat)
    if unsettled.any():
        worst = change[unsettled][np.argmax(np.abs(change[unsettled]))]
        why = (f"the smoothed ELBO changed by {worst:+.3g} standard errors between the last two windows of "
               f"{window} steps (tolerance {tolerance:g})")
    elif moving.any():
        why = (f"the guide is not at a stationary point: the mean of {gradient_draws} fresh gradient estimates "
               f"gives a stationarity statistic of {stat[moving].max():.3g} (tolerance {tolerance:g})")
    else:
        why = f"{num_steps} steps are too few to judge (two windows of at least {MIN_WINDOW} steps)"
    return f"{engine}: {fits} did not converge: {why}; raise num_steps (now {num_steps})"
