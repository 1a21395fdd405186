r"""The predictive scorecard: any run (MCMC, SG-MCMC, SVI, an ensemble alone) scored on held-out
data, and against a reference posterior predictive.

On held-out data (default: the test split), with :math:`S` draws :math:`\theta_s`:

* ``lppd``: the log pointwise predictive density per point,
  :math:`\frac1N\sum_i \log \frac1S \sum_s p(y_i\mid x_i,\theta_s)` (higher is better; ``-nll``);
* ``rmse`` (regression, of the predictive mean) or ``accuracy`` (classification, of the
  posterior-mean class probabilities);
* ``ece``: classification, the expected calibration error of the mean probabilities (10 bins);
  regression, the calibration error of the predictive CDF: with
  :math:`u_i = \frac1S\sum_s \Phi((y_i - \mu_{si})/\sigma_s)` (the PIT), the mean over
  :math:`q \in \{0.05, 0.15, \dots, 0.95\}` of :math:`|\frac1N\sum_i 1[u_i \le q] - q|`;
* ``coverage`` (regression): the share of points inside the central ``level`` (0.9) interval of
  the predictive, :math:`|u_i - 1/2| \le \text{level}/2`.

Against a reference predictive (:class:`PredictiveReference`, e.g. a long run of a gold-standard
sampler, stored as a small ``.npz`` per problem: inputs and predictive class probabilities or
predictive samples):

* classification: ``agreement``, the share of inputs whose most probable class is the
  reference's, and ``tv``, the total variation :math:`\frac1N\sum_i \frac12\sum_k |p_{ik} - p^*_{ik}|`
  (Izmailov et al., ICML 2021, "What are Bayesian neural network posteriors really like?");
* regression: ``w2``, the 1-D Wasserstein-2 distance of the predictive at each input (from
  samples: quantiles at :math:`u_j = (j + 1/2)/J`, :math:`J = 100`) averaged over inputs, and
  ``tv`` of the histograms of both samples on 20 common bins (quantiles of the pooled samples). The
  run's samples are one ``y`` per draw, or, where it has fewer draws than the reference has samples
  (an ensemble alone, a short run), as many as the reference's, its draws taken with replacement.

A predictive equal to the reference gives ``agreement`` 1, ``tv`` 0 and ``w2`` 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr

from .predictive import (_as_numpy, _class_probs, _labels, accuracy, expected_calibration_error, logsumexp,
                         pointwise_log_likelihood, predictive_means, rmse)

__all__ = ["REFERENCE_DIR", "PredictiveReference", "as_reference", "calibration_error_pit", "check_reference",
           "load_reference", "predictive_samples", "reference_from_run", "reference_scores", "save_reference",
           "scorecard", "stored_references", "total_variation", "wasserstein2"]

#: quantile grid of W2 and bins of the regression TV
QUANTILES, BINS = 100, 20


@dataclass
class PredictiveReference:
    """A reference posterior predictive at inputs ``x`` (``[N, ...]``).

    Attributes
    ----------
    problem : str
        The benchmark problem (model and data set) it belongs to.
    task : str
        ``"regression"`` or ``"classification"``.
    x : ndarray
    probs : ndarray, optional
        Classification: ``[N, K]`` predictive class probabilities.
    samples : ndarray, optional
        Regression: ``[S, N]`` draws of ``y`` from the predictive.
    y : ndarray, optional
        The held-out targets at ``x``, when known.
    source : str
        How it was made (engine, chains, draws).
    """

    problem: str
    task: str
    x: np.ndarray
    probs: np.ndarray | None = None
    samples: np.ndarray | None = None
    y: np.ndarray | None = None
    source: str = ""

    def __post_init__(self):
        if self.task not in ("regression", "classification"):
            raise ValueError(f"task: 'regression' or 'classification', got {self.task!r}")
        need = "probs" if self.task == "classification" else "samples"
        if getattr(self, need) is None:
            raise ValueError(f"{need}: a {self.task} reference needs its predictive {need}")


def save_reference(path, reference: PredictiveReference) -> Path:
    """Write ``reference`` as one ``.npz`` file (arrays plus problem, task and source)."""
    path = Path(path)
    arrays = {k: np.asarray(getattr(reference, k)) for k in ("x", "probs", "samples", "y")
              if getattr(reference, k) is not None}
    np.savez_compressed(path, problem=reference.problem, task=reference.task, source=reference.source, **arrays)
    return path


#: where the stored references of the benchmark problems live: ``<problem>.npz``
REFERENCE_DIR = Path(__file__).resolve().parent.parent / "data" / "references"


def stored_references() -> list[str]:
    """The problems whose reference is stored in :data:`REFERENCE_DIR`."""
    return sorted(p.stem for p in REFERENCE_DIR.glob("*.npz")) if REFERENCE_DIR.exists() else []


def load_reference(path_or_problem) -> PredictiveReference:
    """Read a reference written by :func:`save_reference`: a path, or the name of a benchmark problem
    whose reference is stored in :data:`REFERENCE_DIR` (a ``FileNotFoundError`` naming it when there is none)."""
    path = Path(path_or_problem)
    if not path.exists() and path.suffix != ".npz":
        path = REFERENCE_DIR / f"{path_or_problem}.npz"
        if not path.exists():
            stored = stored_references()
            raise FileNotFoundError(f"reference {path_or_problem!r}: no stored reference predictive (stored: "
                                    f"{', '.join(stored) or 'none'}); make one with reference_from_run() and "
                                    f"save_reference()")
    with np.load(path, allow_pickle=False) as f:
        get = lambda k: f[k] if k in f.files else None  # noqa: E731
        return PredictiveReference(problem=str(f["problem"]), task=str(f["task"]), x=f["x"], probs=get("probs"),
                                   samples=get("samples"), y=get("y"), source=str(f["source"]))


def as_reference(reference) -> PredictiveReference | None:
    """``reference`` as a :class:`PredictiveReference`: one already, a stored problem's name or a
    ``.npz`` path (:func:`load_reference`), or None."""
    if reference is None or isinstance(reference, PredictiveReference):
        return reference
    if isinstance(reference, (str, Path)):
        return load_reference(reference)
    stored = ", ".join(stored_references()) or "none stored"
    raise TypeError(f"reference: a PredictiveReference, a problem name ({stored}) or a .npz path; "
                    f"got {type(reference).__name__}")


def check_reference(reference: PredictiveReference, task: str, x_test=None) -> None:
    """A ``ValueError`` naming the reference unless it is for a ``task`` run whose test inputs are
    ``x_test`` (its own inputs: a reference is scored where it was made, never on training rows;
    None: not checked)."""
    if task != reference.task:
        raise ValueError(f"reference {reference.problem!r}: a {reference.task} reference for a {task} run")
    if x_test is None:
        return
    x = _as_numpy(x_test).astype(np.float64)
    ref = np.asarray(reference.x, dtype=np.float64)
    if x.shape != ref.shape or not np.allclose(x, ref, rtol=1e-5, atol=1e-5):
        what = "other values" if x.shape == ref.shape else f"shape {x.shape}"
        raise ValueError(f"reference {reference.problem!r}: made at {ref.shape[0]} inputs of shape {ref.shape}, "
                         f"not the run's test inputs ({what}); a reference belongs to one data split: load the "
                         f"data as it was made ({reference.source})")


def _noise_scale(run, draws: int) -> np.ndarray:
    """``[draws]`` the Gaussian likelihood's sd per draw (learned: sqrt(noise_var))."""
    likelihood = run.model.spec.likelihood
    if "noise_var" in run.samples:
        return np.sqrt(np.asarray(run.samples["noise_var"], dtype=np.float64).reshape(-1))
    return np.full(draws, float(likelihood.noise))


def predictive_samples(run, x=None, num_samples: int | None = None, seed: int = 0) -> np.ndarray:
    """Regression: ``[S, N]`` draws of ``y`` at ``x`` (default: test inputs), one per posterior
    draw (or ``num_samples`` of them, drawn with replacement)."""
    x = run.data.x_test if x is None else x
    mu = predictive_means(run.model, run.samples, x).reshape(-1, len(_as_numpy(x)))
    sigma = _noise_scale(run, mu.shape[0])
    rng = np.random.default_rng(seed)
    pick = np.arange(mu.shape[0]) if num_samples is None else rng.integers(0, mu.shape[0], num_samples)
    return mu[pick] + sigma[pick, None] * rng.standard_normal((len(pick), mu.shape[1]))


def calibration_error_pit(pit, levels: int = 10) -> float:
    """Mean over ``q in {0.05, 0.15, ..., 0.95}`` of ``|share of pit <= q - q|``."""
    pit = np.asarray(pit, dtype=np.float64)
    q = (np.arange(levels) + 0.5) / levels
    return float(np.mean(np.abs((pit[None, :] <= q[:, None]).mean(1) - q)))


def wasserstein2(a, b, quantiles: int = QUANTILES) -> float:
    """Mean over inputs of the 1-D W2 distance of samples ``a [S, N]`` and ``b [S', N]``."""
    u = (np.arange(quantiles) + 0.5) / quantiles
    qa, qb = np.quantile(np.asarray(a, float), u, axis=0), np.quantile(np.asarray(b, float), u, axis=0)
    return float(np.mean(np.sqrt(np.mean((qa - qb) ** 2, axis=0))))


def total_variation(a, b, kind: str = "probs", bins: int = BINS) -> float:
    """``kind="probs"`` (classification: ``a``, ``b`` probabilities ``[N, K]``): mean of
    ``0.5 sum_k |a - b|``. ``kind="samples"`` (regression: samples ``[S, N]``, ``[S', N]``): per input,
    TV of the two histograms on ``bins`` common bins (quantiles of the pooled samples), averaged."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if kind not in ("probs", "samples"):
        raise ValueError(f"kind: 'probs' or 'samples', got {kind!r}")
    if kind == "probs":
        if a.shape != b.shape:
            raise ValueError(f"total_variation: probabilities {a.shape} and {b.shape}")
        return float(np.mean(0.5 * np.abs(a - b).sum(-1)))
    out = []
    for i in range(a.shape[1]):
        pooled = np.concatenate([a[:, i], b[:, i]])
        edges = np.unique(np.quantile(pooled, np.linspace(0, 1, bins + 1)))
        if len(edges) < 2:
            out.append(0.0)
            continue
        ha = np.histogram(np.clip(a[:, i], edges[0], edges[-1]), edges)[0] / len(a)
        hb = np.histogram(np.clip(b[:, i], edges[0], edges[-1]), edges)[0] / len(b)
        out.append(0.5 * float(np.abs(ha - hb).sum()))
    return float(np.mean(out))


def reference_scores(task: str, reference: PredictiveReference, probs=None, samples=None) -> dict[str, float]:
    """``agreement``, ``tv``, ``w2`` of a predictive (``probs [N, K]`` or ``samples [S, N]``) against
    ``reference`` (NaN where the task has none)."""
    if task != reference.task:
        raise ValueError(f"reference: a {reference.task} reference for a {task} run")
    if task == "classification":
        probs = np.asarray(probs, float)
        if probs.shape != reference.probs.shape:
            raise ValueError(f"reference: probabilities {probs.shape} at its inputs, reference {reference.probs.shape}")
        agree = float(np.mean(probs.argmax(-1) == np.asarray(reference.probs).argmax(-1)))
        return {"agreement": agree, "tv": total_variation(probs, reference.probs), "w2": math.nan}
    samples = np.asarray(samples, float)
    if samples.shape[1] != reference.samples.shape[1]:
        raise ValueError(f"reference: {samples.shape[1]} inputs, reference {reference.samples.shape[1]}")
    return {"agreement": math.nan, "tv": total_variation(samples, reference.samples, kind="samples"),
            "w2": wasserstein2(samples, reference.samples)}


def reference_from_run(run, problem: str, x=None, y=None, num_samples: int | None = 1000, seed: int = 0,
                       source: str | None = None) -> PredictiveReference:
    """A :class:`PredictiveReference` from a (long, trusted) run, at ``x`` (default: test inputs)."""
    if x is None:
        x, y = run.data.x_test, run.data.y_test
    task = run.model.task
    source = source or f"{run.engine}: {run.num_chains} chains x {run.num_draws} draws"
    x_np = _as_numpy(x)
    y_np = None if y is None else _as_numpy(y)
    if task == "classification":
        probs = _class_probs(predictive_means(run.model, run.samples, x).mean((0, 1)))
        return PredictiveReference(problem, task, x_np, probs=probs, y=y_np, source=source)
    return PredictiveReference(problem, task, x_np, samples=predictive_samples(run, x, num_samples, seed), y=y_np,
                               source=source)


def scorecard(run, x=None, y=None, reference=None, level: float = 0.9, seed: int = 0) -> dict[str, float]:
    """The scorecard of a run on held-out ``(x, y)`` (default: the test split; with a reference
    that holds targets, its inputs and targets), against ``reference`` when given (module docstring):
    a :class:`PredictiveReference`, the name of a stored problem (``"diabetes"``,
    :func:`stored_references`) or a ``.npz`` path. The reference must be for the run's task and, when
    the run has data, made at its test inputs (:func:`check_reference`).

    Returns
    -------
    dict
        ``lppd``, ``rmse`` or ``accuracy``, ``ece``, ``coverage`` (regression; NaN for
        classification), and with a reference ``agreement``, ``tv``, ``w2``.
    """
    if (x is None) != (y is None):
        raise ValueError("scorecard: give both x and y, or neither")
    reference = as_reference(reference)
    if reference is not None:
        data = getattr(run, "data", None)
        check_reference(reference, run.model.task, None if data is None else data.x_test)
    if x is None:
        if reference is not None and reference.y is not None:
            x, y = reference.x, reference.y
        else:
            x, y = run.data.x_test, run.data.y_test
    model = run.model
    log_lik = pointwise_log_likelihood(model, run.samples, x, y)
    s = log_lik.shape[0] * log_lik.shape[1]
    lppd = float(np.mean(logsumexp(log_lik.reshape(s, -1), axis=0) - math.log(s)))
    means = predictive_means(model, run.samples, x)
    out: dict[str, float] = {"lppd": lppd}
    if model.task == "regression":
        mu = means.reshape(s, -1)
        y_np = _as_numpy(y).reshape(-1).astype(np.float64)
        sigma = _noise_scale(run, s)
        pit = ndtr((y_np[None, :] - mu) / sigma[:, None]).mean(0)
        out.update(rmse=rmse(y_np, mu.mean(0)), ece=calibration_error_pit(pit),
                   coverage=float(np.mean(np.abs(pit - 0.5) <= level / 2)))
    else:
        probs = _class_probs(means.reshape((s,) + means.shape[2:]).mean(0))
        labels = _labels(y, probs.shape[-1], probs.shape[0])
        out.update(accuracy=accuracy(probs, labels), ece=expected_calibration_error(probs, labels),
                   coverage=math.nan)
    if reference is not None:
        if model.task == "classification":
            probs_ref = _class_probs(predictive_means(model, run.samples, reference.x).mean((0, 1)))
            out.update(reference_scores(model.task, reference, probs=probs_ref))
        else:
            # one y per draw, or (fewer draws than the reference has samples: an ensemble alone, a short
            # run) as many as the reference, the draws taken with replacement
            more = None if s >= len(reference.samples) else len(reference.samples)
            out.update(reference_scores(model.task, reference,
                                        samples=predictive_samples(run, reference.x, more, seed=seed)))
    return out

