r"""Predictive performance of a run: RMSE, NLL, accuracy, calibration (ECE).

The metric functions are pure functions on NumPy arrays. The run-level helpers
(:func:`map_draws`, :func:`pointwise_log_likelihood`, :func:`function_draws`,
:func:`predictive_metrics`) evaluate the run's network for every posterior draw,
in chunks of draws so that memory stays bounded.

Test negative log predictive density (the "NLL" of the BNN literature):

.. math::
    \mathrm{NLL} = -\frac{1}{N}\sum_{i=1}^N \log \frac{1}{S}\sum_{s=1}^S p(y_i \mid x_i, \theta_s)

computed with ``logsumexp`` over the S draws.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import torch

ArrayLike = Any


# ------------------------------------------------------------ pure metrics
def _as_numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if torch.is_tensor(a) else np.asarray(a)


def logsumexp(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Numerically stable ``log(sum(exp(a), axis))``; ``-inf`` where every term is ``-inf``."""
    a = np.asarray(a, dtype=np.float64)
    peak = np.max(a, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - peak), axis=axis)) + np.squeeze(peak, axis=axis)
    return out


def rmse(y: ArrayLike, mean: ArrayLike) -> float:
    """Root mean squared error of the predictive mean: ``sqrt(mean((y - mean)^2))``."""
    y, mean = _as_numpy(y).astype(np.float64), _as_numpy(mean).astype(np.float64)
    if y.shape != mean.shape:
        raise ValueError(f"rmse: y has shape {y.shape} but mean has shape {mean.shape}")
    return float(np.sqrt(np.mean((y - mean) ** 2)))


def nll(log_lik: ArrayLike) -> float:
    """Negative log predictive density per point from pointwise log likelihoods.

    Parameters
    ----------
    log_lik : array ``[..., N]``
        ``log p(y_i | theta_s)``; every leading axis (e.g. ``chain, draw``) is a draw.

    Returns
    -------
    float
        ``-mean_i log mean_s p(y_i | theta_s)``.
    """
    ll = _as_numpy(log_lik).astype(np.float64)
    if ll.ndim < 2:
        raise ValueError(f"nll: log_lik needs shape [draws..., N], got {ll.shape}")
    ll = ll.reshape(-1, ll.shape[-1])
    if np.isnan(ll).any():
        raise ValueError("nll: log_lik contains NaN")
    lppd = logsumexp(ll, axis=0) - np.log(ll.shape[0])
    return float(-np.mean(lppd))


def gaussian_log_lik(y: ArrayLike, mean: ArrayLike, scale: ArrayLike) -> np.ndarray:
    """Pointwise ``log N(y | mean, scale^2)``, broadcast (``mean``: ``[..., N]``)."""
    y, mean = _as_numpy(y).astype(np.float64), _as_numpy(mean).astype(np.float64)
    scale = _as_numpy(scale).astype(np.float64)
    if np.any(scale <= 0):
        raise ValueError("gaussian_nll: scale must be positive")
    z = (y - mean) / scale
    return -0.5 * z**2 - np.log(scale) - 0.5 * np.log(2 * np.pi)


def gaussian_nll(y: ArrayLike, mean: ArrayLike, scale: ArrayLike) -> float:
    """Test NLL of a Gaussian likelihood given per-draw means ``[draws..., N]`` and noise
    ``scale`` (a scalar, or broadcastable to ``mean``)."""
    mean = _as_numpy(mean)
    if mean.ndim == 1:
        mean = mean[None]
    return nll(gaussian_log_lik(y, mean, scale))


def _class_probs(probs: ArrayLike) -> np.ndarray:
    """``[N, K]`` class probabilities; a ``[N]`` array is ``P(y = 1)`` of a binary task."""
    p = _as_numpy(probs).astype(np.float64)
    if p.ndim == 1:
        p = np.stack([1 - p, p], -1)
    if p.ndim != 2:
        raise ValueError(f"probs must have shape [N, K] (or [N] for binary), got {p.shape}")
    return p


def _labels(y: ArrayLike, num_classes: int, n: int) -> np.ndarray:
    y = _as_numpy(y)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    labels = y.astype(np.int64)
    if np.any(labels != y) or np.any(labels < 0) or np.any(labels >= num_classes):
        raise ValueError(f"y must hold integer labels in [0, {num_classes}), got values {np.unique(y)[:10]}")
    return labels


def accuracy(probs: ArrayLike, y: ArrayLike) -> float:
    """Fraction of points whose most probable class (``argmax`` of ``probs [N, K]``) is ``y``."""
    p = _class_probs(probs)
    labels = _labels(y, p.shape[1], p.shape[0])
    return float(np.mean(p.argmax(-1) == labels))


def expected_calibration_error(probs: ArrayLike, y: ArrayLike, n_bins: int = 10) -> float:
    r"""Expected calibration error (Guo et al. 2017, "On calibration of modern neural networks").

    Points are binned by confidence :math:`c_i = \max_k p_{ik}` into ``n_bins``
    equal-width bins :math:`(b/B, (b+1)/B]`, then

    .. math::
        \mathrm{ECE} = \sum_b \frac{|B_b|}{N}\,\bigl|\mathrm{acc}(B_b) - \mathrm{conf}(B_b)\bigr|.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    p = _class_probs(probs)
    labels = _labels(y, p.shape[1], p.shape[0])
    confidence = p.max(-1)
    correct = (p.argmax(-1) == labels).astype(np.float64)
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    ece = 0.0
    for b in np.unique(bins):
        member = bins == b
        ece += member.mean() * abs(correct[member].mean() - confidence[member].mean())
    return float(ece)


# ------------------------------------------------------ per-draw evaluation
def _as_input(x) -> torch.Tensor:
    return torch.as_tensor(_as_numpy(x), dtype=torch.get_default_dtype())


def flat_values(samples: Mapping[str, np.ndarray], chunk: slice) -> dict[str, torch.Tensor]:
    """A slice of the draws ``[chain, draw, ...]`` flattened to ``[B, ...]`` tensors."""
    dtype = torch.get_default_dtype()
    out = {}
    for name, v in samples.items():
        flat = v.reshape((-1,) + v.shape[2:])[chunk]
        out[name] = torch.as_tensor(np.ascontiguousarray(flat), dtype=dtype)
    return out


def map_draws(model, samples: Mapping[str, np.ndarray], x,
              fn: Callable[[dict, torch.Tensor], torch.Tensor], chunk_size: int = 256) -> np.ndarray:
    """``fn(values, f)`` for every draw, where ``f = model.apply(values, x)``; ``[chain, draw, ...]``.

    ``values`` holds a chunk of at most ``chunk_size`` draws (one leading batch dim),
    ``fn`` returns a tensor with that leading batch dim.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    first = next(iter(samples.values()))
    chains, draws = first.shape[:2]
    x = _as_input(x)
    parts = []
    with torch.no_grad():
        for start in range(0, chains * draws, chunk_size):
            values = flat_values(samples, slice(start, start + chunk_size))
            parts.append(_as_numpy(fn(values, model.apply(values, x))))
    out = np.concatenate(parts)
    return out.reshape((chains, draws) + out.shape[1:])


def pointwise_log_likelihood(model, samples: Mapping[str, np.ndarray], x, y, chunk_size: int = 256) -> np.ndarray:
    """``log p(y_i | x_i, theta)`` of a BNN for every draw: ``[chain, draw, N]``."""
    y = torch.as_tensor(_as_numpy(y))
    return map_draws(model, samples, x, lambda v, f: model.log_likelihood(v, None, y, f=f), chunk_size)


def predictive_means(model, samples: Mapping[str, np.ndarray], x, chunk_size: int = 256) -> np.ndarray:
    """``E[y | x, theta]`` per draw: ``[chain, draw, N]`` (regression) or class
    probabilities ``[chain, draw, N, K]`` (classification)."""
    return map_draws(model, samples, x, lambda v, f: model.likelihood.mean(f), chunk_size)


def function_draws(run, x=None, y=None, chunk_size: int = 256) -> np.ndarray:
    """The identifiable per-draw predictive quantity at inputs ``x``: ``[chain, draw, N]``.

    Weights of a neural network are not identifiable (permutations, sign flips),
    so mixing is judged in function space:

    * regression: the predictive mean ``E[y | x_i, theta]`` (the likelihood's mean of ``f``);
    * classification: the probability ``p(y = k_i | x_i, theta)`` of one class per point:
      the label ``y_i`` when ``y`` is given, otherwise the class predicted by the
      posterior-mean ensemble, ``k_i = argmax_k mean_theta p(k | x_i, theta)``
      (label-free, so it works on any inputs).

    ``x`` defaults to the run's test inputs.
    """
    model = run.model
    x = run.data.x_test if x is None else x
    return function_scalars(predictive_means(model, run.samples, x, chunk_size), model.task, y)


def function_scalars(means: np.ndarray, task: str, y=None) -> np.ndarray:
    """:func:`function_draws` from the likelihood's means ``[chain, draw, N(, K)]`` (a run's, or the
    ``predictions`` group ``f_mean`` of its InferenceData)."""
    if task == "regression":
        return means
    if y is None:
        cls = means.mean((0, 1)).argmax(-1)
    else:
        cls = _labels(y, means.shape[-1], means.shape[2])
    return np.take_along_axis(means, cls[None, None, :, None], -1)[..., 0]


def predictive_metrics(run, x=None, y=None, chunk_size: int = 256) -> dict[str, float]:
    """Test metrics of a run under its own likelihood (default: the test split).

    Returns
    -------
    dict
        regression: ``rmse`` (of the posterior predictive mean) and ``nll``;
        classification: ``accuracy``, ``nll`` and ``ece`` (of the posterior-mean
        class probabilities).
    """
    if (x is None) != (y is None):
        raise ValueError("predictive_metrics: give both x and y, or neither (test split)")
    if x is None:
        x, y = run.data.x_test, run.data.y_test
    model = run.model
    log_lik = pointwise_log_likelihood(model, run.samples, x, y, chunk_size)
    means = predictive_means(model, run.samples, x, chunk_size).mean((0, 1))
    out = {}
    if model.task == "regression":
        out["rmse"] = rmse(y, means)
    else:
        out["accuracy"] = accuracy(means, y)
    out["nll"] = nll(log_lik)
    if model.task != "regression":
        out["ece"] = expected_calibration_error(means, y)
    return out
