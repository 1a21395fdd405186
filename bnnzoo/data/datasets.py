"""The :class:`Dataset` container, the dataset registry and the built-in data sets.

Every loader takes a ``seed`` and draws all its randomness from local generators
(``numpy.random.SeedSequence(seed)``), never from a global RNG: the same seed
gives identical data and different seeds give different data.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..validation import count, in_interval
from .checks import TASKS, check_data

Loader = Callable[..., "Dataset"]

DATASETS: dict[str, Loader] = {}
"""Registry: dataset name -> loader ``f(seed, **kw) -> Dataset``."""


@dataclass(eq=False, repr=False)
class Dataset:
    """A train/test split with its task description.

    Inputs are ``[N, d]`` tensors of ``torch.get_default_dtype()``; targets are
    ``[N]`` tensors, floating for regression and int64 (labels in
    ``[0, num_classes)``) for classification. Fields are validated with
    :func:`check_data` on construction.
    """

    name: str
    task: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(
                f"dataset {self.name!r}: task must be one of {', '.join(TASKS)}; got {self.task!r}"
            )
        if self.task == "classification" and self.num_classes is None:
            raise ValueError(f"dataset {self.name!r}: classification requires num_classes")
        if self.task == "regression" and self.num_classes is not None:
            raise ValueError(
                f"dataset {self.name!r}: num_classes must be None for regression; "
                f"got {self.num_classes!r}"
            )
        kw = dict(task=self.task, num_classes=self.num_classes)
        self.x_train, self.y_train = check_data(
            self.x_train, self.y_train, name=f"{self.name}/train", **kw
        )
        self.x_test, self.y_test = check_data(
            self.x_test, self.y_test, input_dim=self.input_dim, name=f"{self.name}/test", **kw
        )

    @property
    def input_dim(self) -> int:
        """Number of input features ``d``."""
        return int(self.x_train.shape[1])

    @property
    def n_train(self) -> int:
        """Number of training points."""
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test points."""
        return int(self.x_test.shape[0])

    def describe(self) -> str:
        """One-line summary, e.g. ``cosine: regression, 100 train / 100 test, input_dim=1``."""
        classes = f", {self.num_classes} classes" if self.task == "classification" else ""
        return (
            f"{self.name}: {self.task}{classes}, {self.n_train} train / {self.n_test} test, "
            f"input_dim={self.input_dim}"
        )

    def __repr__(self) -> str:
        return f"Dataset({self.describe()})"


def register(name: str) -> Callable[[Loader], Loader]:
    """Decorator adding a loader ``f(seed, **kw) -> Dataset`` to :data:`DATASETS`."""

    def decorator(fn: Loader) -> Loader:
        if name in DATASETS:
            raise ValueError(f"dataset {name!r}: already registered")
        DATASETS[name] = fn
        return fn

    return decorator


def load(name: str, seed: int = 0, **kw: Any) -> Dataset:
    """Load a registered data set.

    Parameters
    ----------
    name : str
        One of ``sorted(DATASETS)``.
    seed : int
        Non-negative seed of all the randomness used (sampling, splits).
    **kw
        Options of that data set (see its loader, e.g. :func:`cosine`).

    Raises
    ------
    ValueError
        Unknown name or keyword (:func:`check_load`), invalid seed or option value.
    """
    return check_load(name, kw)(seed=_check_seed(seed), **kw)


def check_load(name: Any, keywords: Iterable[str] = ()) -> Loader:
    """The loader of data set ``name`` once the name and the ``keywords`` of :func:`load` are
    known ones; else a ``ValueError`` naming the data set and the wrong name or keyword."""
    if not isinstance(name, str) or name not in DATASETS:
        raise ValueError(
            f"dataset {name!r}: unknown name; choose one of {', '.join(sorted(DATASETS))}"
        )
    loader = DATASETS[name]
    valid = [p for p in inspect.signature(loader).parameters if p != "seed"]
    unknown = [k for k in keywords if k not in valid]
    if unknown:
        raise ValueError(
            f"dataset {name!r}: unknown keyword {unknown[0]!r}; "
            f"valid keywords are {', '.join(valid) or '(none)'}"
        )
    return loader


# ----------------------------------------------------------------------------
# argument validation helpers (shared with tabular.py)


def _check_seed(seed: Any) -> int:
    count("seed", seed, minimum=0, got="; got")
    return int(seed)


def _error(dataset: str) -> Callable[[str, str], ValueError]:
    """The error factory of a data set's options: ``"dataset '<name>': <field> <detail>"``."""
    return lambda field, detail: ValueError(f"dataset {dataset!r}: {field} {detail}")


def _positive_int(dataset: str, key: str, value: Any) -> int:
    count(key, value, error=_error(dataset), got="; got")
    return int(value)


def _real(dataset: str, key: str, value: Any, low: float, high: float, closed: str) -> float:
    """Check ``value`` is a real in the interval; ``closed`` in {"both", "left", "neither"}."""
    in_interval(key, value, low, high, low_open=closed == "neither", high_open=closed != "both",
                error=_error(dataset), got="; got")
    return float(value)


def _as_float(a: np.ndarray) -> Tensor:
    return torch.tensor(a, dtype=torch.get_default_dtype())


def _streams(seed: int, n: int = 2) -> list[np.random.Generator]:
    """``n`` independent generators derived from ``seed``."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def _sub_seed(seed: int, index: int) -> int:
    """A 32-bit integer seed for APIs that take ints (scikit-learn), derived from ``seed``."""
    return int(np.random.SeedSequence(seed).generate_state(index + 1)[index])


# ----------------------------------------------------------------------------
# synthetic regression


@register("cosine")
def cosine(seed: int = 0, n_train: int = 100, n_test: int = 100, noise: float = 0.1) -> Dataset:
    """1-D regression ``y = cos(x) + N(0, noise^2)``, ``x ~ U(0, 4)``.

    The toy problem of "HMC on ReLU networks". Train and test sets are drawn
    the same way from independent random streams. ``x`` has shape ``[N, 1]``.
    """
    n_train = _positive_int("cosine", "n_train", n_train)
    n_test = _positive_int("cosine", "n_test", n_test)
    noise = _real("cosine", "noise", noise, 0.0, math.inf, "left")

    def draw(rng: np.random.Generator, n: int) -> tuple[Tensor, Tensor]:
        x = rng.uniform(0.0, 4.0, size=(n, 1))
        y = np.cos(x[:, 0]) + noise * rng.standard_normal(n)
        return _as_float(x), _as_float(y)

    train_rng, test_rng = _streams(seed)
    x_train, y_train = draw(train_rng, n_train)
    x_test, y_test = draw(test_rng, n_test)
    meta = {"function": "cos", "x_range": (0.0, 4.0), "noise": noise, "seed": seed}
    return Dataset("cosine", "regression", x_train, y_train, x_test, y_test, None, meta)


def _ar1_gaussian(rng: np.random.Generator, n: int, p: int, rho: float) -> np.ndarray:
    """Rows ``x ~ N(0, Sigma)`` with ``Sigma_ij = rho^|i-j|``, via an AR(1) recursion.

    With ``x_0 = e_0`` and ``x_j = rho x_{j-1} + sqrt(1 - rho^2) e_j`` (``e`` iid
    N(0, 1)), each ``x_j`` has unit variance and ``cov(x_i, x_j) = rho^|i-j|``
    exactly. This costs O(n p) instead of the O(p^3) Cholesky factorisation.
    """
    e = rng.standard_normal((n, p))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    scale = math.sqrt(1.0 - rho * rho)
    for j in range(1, p):
        x[:, j] = rho * x[:, j - 1] + scale * e[:, j]
    return x


@register("linear_p1000")
def linear_p1000(
    seed: int = 0,
    n_train: int = 100,
    n_test: int = 50,
    p: int = 1000,
    rho: float = 0.6,
    noise_var: float = 3.0,
) -> Dataset:
    """Sparse large-p-small-n linear regression (adaptive empirical Bayes spike-and-slab).

    ``X ~ N(0, Sigma)`` with ``Sigma_ij = rho^|i-j|``, ``beta = (3, 2, 1, 0, ..., 0)``
    and ``y = X beta + N(0, noise_var)``. ``meta["beta"]`` holds the true
    coefficients (a ``[p]`` tensor) and ``meta["support"]`` their non-zero indices.
    """
    n_train = _positive_int("linear_p1000", "n_train", n_train)
    n_test = _positive_int("linear_p1000", "n_test", n_test)
    p = _positive_int("linear_p1000", "p", p)
    if p < 3:
        raise ValueError(f"dataset 'linear_p1000': p must be >= 3 (beta has 3 non-zeros); got {p}")
    rho = _real("linear_p1000", "rho", rho, -1.0, 1.0, "neither")
    noise_var = _real("linear_p1000", "noise_var", noise_var, 0.0, math.inf, "left")
    beta = np.zeros(p)
    beta[:3] = (3.0, 2.0, 1.0)

    def draw(rng: np.random.Generator, n: int) -> tuple[Tensor, Tensor]:
        x = _ar1_gaussian(rng, n, p, rho)
        y = x @ beta + math.sqrt(noise_var) * rng.standard_normal(n)
        return _as_float(x), _as_float(y)

    train_rng, test_rng = _streams(seed)
    x_train, y_train = draw(train_rng, n_train)
    x_test, y_test = draw(test_rng, n_test)
    meta = {
        "beta": _as_float(beta),
        "support": [0, 1, 2],
        "rho": rho,
        "noise_var": noise_var,
        "seed": seed,
    }
    return Dataset("linear_p1000", "regression", x_train, y_train, x_test, y_test, None, meta)


# ----------------------------------------------------------------------------
# group-sparse synthetic problems (paper 004)


def _equicorrelated(rng: np.random.Generator, n: int, p: int) -> np.ndarray:
    """Rows with ``x_j = (z_0 + z_j) / sqrt(2)``, ``z`` iid N(0, 1): unit variances and
    correlation 0.5 between every pair of inputs."""
    z = rng.standard_normal((n, p + 1))
    return (z[:, :1] + z[:, 1:]) / math.sqrt(2.0)


def _tanh_target(x: np.ndarray) -> np.ndarray:
    """``tanh(2 tanh(2 x1 - x2)) + 2 tanh(tanh(x3 - 2 x4)) - tanh(2 x5)`` (1-based inputs)."""
    return (np.tanh(2 * np.tanh(2 * x[:, 0] - x[:, 1])) + 2 * np.tanh(np.tanh(x[:, 2] - 2 * x[:, 3]))
            - np.tanh(2 * x[:, 4]))


def _class_score(x: np.ndarray) -> np.ndarray:
    """``exp(x1) + x2^2 + 5 sin(x3 x4) - 3``; the label is ``score > 0`` (1-based inputs)."""
    return np.exp(x[:, 0]) + x[:, 1] ** 2 + 5 * np.sin(x[:, 2] * x[:, 3]) - 3


def _group_sparse(name: str, seed: int, n_train: int, n_test: int, p: int, noise: float | None) -> Dataset:
    """The two problems of :func:`group_sparse_regression` / :func:`group_sparse_classification`."""
    n_train = _positive_int(name, "n_train", n_train)
    n_test = _positive_int(name, "n_test", n_test)
    p = _positive_int(name, "p", p)
    support = [0, 1, 2, 3, 4] if noise is not None else [0, 1, 2, 3]
    if p < len(support):
        raise ValueError(f"dataset {name!r}: p must be >= {len(support)} (the relevant inputs); got {p}")
    if noise is not None:
        noise = _real(name, "noise", noise, 0.0, math.inf, "left")

    def draw(rng: np.random.Generator, n: int) -> tuple[Tensor, Tensor]:
        x = _equicorrelated(rng, n, p)
        if noise is None:
            return _as_float(x), torch.as_tensor(_class_score(x) > 0, dtype=torch.int64)
        return _as_float(x), _as_float(_tanh_target(x) + noise * rng.standard_normal(n))

    train_rng, test_rng = _streams(seed)
    x_train, y_train = draw(train_rng, n_train)
    x_test, y_test = draw(test_rng, n_test)
    meta = {"support": support, "correlation": 0.5, "seed": seed}
    if noise is None:
        return Dataset(name, "classification", x_train, y_train, x_test, y_test, 2, meta)
    return Dataset(name, "regression", x_train, y_train, x_test, y_test, None, {**meta, "noise": noise})


@register("group_sparse_regression")
def group_sparse_regression(seed: int = 0, n_train: int = 10240, n_test: int = 1024, p: int = 1000,
                            noise: float = 1.0) -> Dataset:
    """Paper 004's sparse nonlinear regression: ``p`` inputs of which the first 5 matter,

    ``y = tanh(2 tanh(2 x1 - x2)) + 2 tanh(tanh(x3 - 2 x4)) - tanh(2 x5) + N(0, noise^2)``,

    with correlated inputs ``x_j = (z_0 + z_j)/sqrt(2)`` (``z`` iid N(0, 1): correlation
    0.5 between every pair). ``meta["support"]`` holds the relevant inputs (0-based).
    """
    return _group_sparse("group_sparse_regression", seed, n_train, n_test, p, noise)


@register("group_sparse_classification")
def group_sparse_classification(seed: int = 0, n_train: int = 10240, n_test: int = 1024,
                                p: int = 1000) -> Dataset:
    """Paper 004's sparse binary classification: the inputs of :func:`group_sparse_regression`
    and the label ``1[exp(x1) + x2^2 + 5 sin(x3 x4) - 3 > 0]`` (the first 4 inputs matter;
    ``meta["support"]``, 0-based)."""
    return _group_sparse("group_sparse_classification", seed, n_train, n_test, p, None)


# ----------------------------------------------------------------------------
# scikit-learn digits


def _check_digit_classes(classes: Sequence[int] | None) -> tuple[int, ...]:
    if classes is None:
        return tuple(range(10))
    try:
        out = tuple(operator.index(c) for c in classes)
    except TypeError:
        raise ValueError(
            f"dataset 'digits': classes must be a sequence of ints; got {classes!r}"
        ) from None
    bad = [c for c in out if not 0 <= c <= 9]
    if bad or len(set(out)) != len(out) or len(out) < 2:
        raise ValueError(
            "dataset 'digits': classes must be >= 2 distinct digits in 0..9; "
            f"got {classes!r}"
        )
    return out


def _stratified_split(
    x: np.ndarray, y: np.ndarray, test_size: float | int, seed: int, what: str, dataset: str = "digits",
    stratify: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    try:
        return train_test_split(x, y, test_size=test_size, stratify=y if stratify else None, random_state=seed)
    except ValueError as err:
        raise ValueError(f"dataset {dataset!r}: cannot split with {what}: {err}") from None


@register("digits")
def digits(
    seed: int = 0,
    test_fraction: float = 0.2,
    n_train: int | None = None,
    classes: Sequence[int] | None = None,
) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, no download).

    Parameters
    ----------
    test_fraction : float
        Fraction held out as a stratified test set.
    n_train : int, optional
        Stratified subsample of the training split (for small runs).
    classes : sequence of int, optional
        Keep only these digits; label ``k`` then stands for digit ``classes[k]``.

    Notes
    -----
    Pixels are standardised with the mean and std of the (possibly subsampled)
    training split; zero-std pixels are divided by 1. ``meta`` holds ``mean``,
    ``std`` (numpy ``[64]``), ``classes`` (digit of each label),
    ``image_shape=(1, 8, 8)`` and ``feature_names``.
    """
    from sklearn.datasets import load_digits

    test_fraction = _real("digits", "test_fraction", test_fraction, 0.0, 1.0, "neither")
    keep = _check_digit_classes(classes)
    bunch = load_digits()
    x, labels = bunch.data.astype(np.float64), bunch.target
    mask = np.isin(labels, keep)
    x = x[mask]
    lookup = np.full(10, -1, dtype=np.int64)
    lookup[list(keep)] = np.arange(len(keep))
    y = lookup[labels[mask]]  # digit keep[k] -> label k

    x_tr, x_te, y_tr, y_te = _stratified_split(
        x, y, test_fraction, _sub_seed(seed, 0), f"test_fraction={test_fraction}"
    )
    if n_train is not None:
        n_train = _positive_int("digits", "n_train", n_train)
        if n_train > len(y_tr):
            raise ValueError(
                f"dataset 'digits': n_train={n_train} exceeds the {len(y_tr)} training images"
            )
        if n_train < len(y_tr):
            x_tr, _, y_tr, _ = _stratified_split(
                x_tr, y_tr, len(y_tr) - n_train, _sub_seed(seed, 1), f"n_train={n_train}"
            )

    mean = x_tr.mean(axis=0)
    std = x_tr.std(axis=0)
    std[std == 0] = 1.0
    meta = {
        "classes": keep,
        "image_shape": (1, 8, 8),
        "mean": mean,
        "std": std,
        "feature_names": list(bunch.feature_names),
        "test_fraction": test_fraction,
        "seed": seed,
    }
    return Dataset(
        "digits",
        "classification",
        _as_float((x_tr - mean) / std),
        torch.as_tensor(y_tr, dtype=torch.int64),
        _as_float((x_te - mean) / std),
        torch.as_tensor(y_te, dtype=torch.int64),
        len(keep),
        meta,
    )


# ----------------------------------------------------------------------------
# scikit-learn's bundled tabular data sets (no download)


def _sklearn_tabular(name: str, bunch, task: str, seed: int, test_fraction: float) -> Dataset:
    """A seeded train/test split of a scikit-learn bunch (stratified for classification), the
    features standardised with the training split's mean and std (and the regression target
    too), the scaling in ``meta``."""
    test_fraction = _real(name, "test_fraction", test_fraction, 0.0, 1.0, "neither")
    x, y = bunch.data.astype(np.float64), bunch.target
    classification = task == "classification"
    x_tr, x_te, y_tr, y_te = _stratified_split(x, y, test_fraction, _sub_seed(seed, 0),
                                               f"test_fraction={test_fraction}", name, stratify=classification)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0
    meta: dict[str, Any] = {"mean": mean, "std": std, "feature_names": [str(f) for f in bunch.feature_names],
                            "test_fraction": test_fraction, "seed": seed}
    x_tr, x_te = _as_float((x_tr - mean) / std), _as_float((x_te - mean) / std)
    if classification:
        meta["class_names"] = [str(c) for c in bunch.target_names]
        num_classes = len(bunch.target_names)
        return Dataset(name, task, x_tr, torch.as_tensor(y_tr, dtype=torch.int64), x_te,
                       torch.as_tensor(y_te, dtype=torch.int64), num_classes, meta)
    y_mean, y_std = float(y_tr.mean()), float(y_tr.std())
    meta.update(y_mean=y_mean, y_std=y_std)
    return Dataset(name, task, x_tr, _as_float((y_tr - y_mean) / y_std), x_te, _as_float((y_te - y_mean) / y_std),
                   None, meta)


@register("diabetes")
def diabetes(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's diabetes regression (442 patients, 10 features, disease progression after a
    year), split at random into train and test (``test_fraction``).

    Features and target are standardised with the training split's mean and std: ``meta`` holds
    ``mean``, ``std`` (numpy ``[10]``), ``y_mean`` and ``y_std`` (a prediction ``y`` is
    ``y * y_std + y_mean`` in the original units) and ``feature_names``.
    """
    from sklearn.datasets import load_diabetes

    return _sklearn_tabular("diabetes", load_diabetes(scaled=False), "regression", seed, test_fraction)


@register("breast_cancer")
def breast_cancer(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's Wisconsin breast-cancer classification (569 tumours, 30 features, 2 classes:
    ``0`` malignant, ``1`` benign), a stratified train/test split (``test_fraction``).

    Features are standardised with the training split's mean and std (``meta``: ``mean``, ``std``,
    ``feature_names``, ``class_names``).
    """
    from sklearn.datasets import load_breast_cancer

    return _sklearn_tabular("breast_cancer", load_breast_cancer(), "classification", seed, test_fraction)


@register("wine")
def wine(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's wine classification (178 wines, 13 chemical features, 3 cultivars), a
    stratified train/test split (``test_fraction``).

    Features are standardised with the training split's mean and std (``meta``: ``mean``, ``std``,
    ``feature_names``, ``class_names``).
    """
    from sklearn.datasets import load_wine

    return _sklearn_tabular("wine", load_wine(), "classification", seed, test_fraction)
