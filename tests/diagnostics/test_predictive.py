import math

import numpy as np
import pytest
import torch

from bnnzoo.diagnostics import (
    accuracy,
    expected_calibration_error,
    function_draws,
    gaussian_nll,
    nll,
    predictive_metrics,
    rmse,
)


# ------------------------------------------------------------ pure metrics
def test_rmse_by_hand():
    assert rmse([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 2.0]) == pytest.approx(1.0)  # sqrt(4 / 4)
    with pytest.raises(ValueError, match="shape"):
        rmse([1.0, 2.0], [1.0])


def test_nll_of_one_gaussian_draw():
    y, mu, sigma = np.array([0.0, 1.0, -2.0]), np.array([0.5, 1.0, -1.0]), 0.5
    expected = np.mean(0.5 * ((y - mu) / sigma) ** 2 + math.log(sigma) + 0.5 * math.log(2 * math.pi))
    assert gaussian_nll(y, mu, sigma) == pytest.approx(expected)
    # exact mean: 0.5 * log(2 pi sigma^2)
    assert gaussian_nll(y, y, sigma) == pytest.approx(0.5 * math.log(2 * math.pi * sigma**2))


def test_nll_averages_densities_over_draws_not_log_densities():
    # two draws with p = e^-1 and e^-3 at one point: -log((e^-1 + e^-3) / 2)
    ll = np.array([[-1.0], [-3.0]])
    assert nll(ll) == pytest.approx(-math.log((math.exp(-1) + math.exp(-3)) / 2))
    # chain and draw axes are both draws; points are averaged
    ll3 = np.array([[[-1.0, -2.0]], [[-3.0, -2.0]]])  # [chain=2, draw=1, N=2]
    assert nll(ll3) == pytest.approx(0.5 * (-math.log((math.exp(-1) + math.exp(-3)) / 2) + 2.0))
    # stable for very small densities
    assert nll(np.array([[-1000.0], [-1000.0]])) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="NaN"):
        nll(np.array([[np.nan], [0.0]]))


def test_accuracy():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    assert accuracy(probs, [0, 1, 1, 1]) == pytest.approx(0.75)
    assert accuracy(np.array([0.9, 0.2, 0.6]), [1, 0, 0]) == pytest.approx(2 / 3)  # binary P(y=1)
    with pytest.raises(ValueError, match="labels"):
        accuracy(probs, [0, 1, 2, 1])


def test_ece_of_perfectly_calibrated_predictions_is_zero():
    # confidence 0.75 in bin (0.7, 0.8]: 3 of 4 correct; confidence 0.5 in (0.4, 0.5]: 1 of 2 correct
    probs = np.array([[0.75, 0.25]] * 4 + [[0.5, 0.5]] * 2)
    y = np.array([0, 0, 0, 1, 0, 1])
    assert expected_calibration_error(probs, y) == pytest.approx(0.0, abs=1e-12)


def test_ece_by_hand():
    # all 0.9-confident and all wrong: ECE = 0.9
    assert expected_calibration_error(np.full(5, 0.9), np.zeros(5, int)) == pytest.approx(0.9)
    # bin (0.9, 1.0]: conf 0.95, acc 1 (2 points); bin (0.6, 0.7]: conf 0.7, acc 0 (2 points)
    probs = np.array([[0.05, 0.95], [0.95, 0.05], [0.3, 0.7], [0.7, 0.3]])
    y = np.array([1, 0, 0, 1])
    assert expected_calibration_error(probs, y) == pytest.approx(0.5 * 0.05 + 0.5 * 0.7)
    assert expected_calibration_error(probs, y, n_bins=1) == pytest.approx(abs(0.5 - 0.825))
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error(probs, y, n_bins=0)


# ------------------------------------------------------------- on a run
def test_function_draws_regression_is_f(rwmh_run, cosine):
    fd = function_draws(rwmh_run)
    assert fd.shape == (3, 60, 40)
    np.testing.assert_allclose(fd, rwmh_run.predict(cosine.x_test)[..., 0], rtol=1e-6)
    assert function_draws(rwmh_run, cosine.x_train[:7], chunk_size=11).shape == (3, 60, 7)


def test_predictive_metrics_regression_by_hand(rwmh_run, cosine):
    metrics = predictive_metrics(rwmh_run)
    assert set(metrics) == {"rmse", "nll"}
    f = rwmh_run.predict(cosine.x_test)[..., 0].reshape(-1, 40)
    y = cosine.y_test.numpy()
    assert metrics["rmse"] == pytest.approx(np.sqrt(np.mean((f.mean(0) - y) ** 2)), rel=1e-5)
    ll = torch.distributions.Normal(torch.as_tensor(f, dtype=torch.float64), 0.1).log_prob(
        torch.as_tensor(y, dtype=torch.float64))
    expected = -(torch.logsumexp(ll, 0) - math.log(f.shape[0])).mean().item()
    assert metrics["nll"] == pytest.approx(expected, rel=1e-4)
    train = predictive_metrics(rwmh_run, cosine.x_train, cosine.y_train)
    assert train["rmse"] != metrics["rmse"]
    with pytest.raises(ValueError, match="both x and y"):
        predictive_metrics(rwmh_run, x=cosine.x_train)


def test_classification_metrics_and_function_draws(bernoulli_run):
    data = bernoulli_run.data
    metrics = predictive_metrics(bernoulli_run)
    assert set(metrics) == {"accuracy", "nll", "ece"}
    logits = bernoulli_run.predict(data.x_test)[..., 0]  # [chain, draw, N]
    p1 = 1 / (1 + np.exp(-logits))
    y = data.y_test.numpy()
    mean_p1 = p1.mean((0, 1))
    assert metrics["accuracy"] == pytest.approx(np.mean((mean_p1 > 0.5) == y))
    p_label = np.where(y == 1, p1, 1 - p1).reshape(-1, len(y))
    assert metrics["nll"] == pytest.approx(-np.mean(np.log(p_label.mean(0))), rel=1e-4)
    assert 0 <= metrics["ece"] <= 1

    fd_label = function_draws(bernoulli_run, y=data.y_test)
    np.testing.assert_allclose(fd_label, np.where(y == 1, p1, 1 - p1), rtol=1e-5)
    fd = function_draws(bernoulli_run)  # probability of the ensemble's predicted class
    predicted = (mean_p1 > 0.5).astype(int)
    np.testing.assert_allclose(fd, np.where(predicted == 1, p1, 1 - p1), rtol=1e-5)
    assert (fd.mean((0, 1)) >= 0.5 - 1e-6).all()
