"""When has a mean-field fit converged: the window test on the ELBO, the fresh-gradient
stationarity test, the adaptive schedule's cycles, and the default options on a Bayesian
linear regression whose mean-field optimum is known in closed form (its means are the
exact posterior means, its sds ``1 / sqrt(diag(precision))``)."""

import json
import math
import warnings

import numpy as np
import pytest
import torch

from bnnzoo.diagnostics import chain_table, run_checks, summary, to_inference_data
from bnnzoo.experiments.report import _verdicts
from bnnzoo.inference import VIOptions, fit_mean_field, run
from bnnzoo.inference.vi.convergence import elbo_change, fit_spread, stationarity, window_steps
from bnnzoo.inference.vi.fit import _AdaptiveSchedule
from tests.inference.vi.conjugate import ConjugateNormal
from tests.support.targets import linear_regression


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


# 5 inputs + a bias, N(0, 1) prior, known noise 0.5, 40 rows; coefficients up to 4.6, so the
# means must travel far from their start in (-1, 1). The old defaults (2000 steps, rate decayed
# to 10%) leave them up to 0.38 (4.5 mean-field sds) off, and two fits apart by more.
PROBLEM = linear_regression(n=40, p=5, coef_scale=3.0)


def _errors(r):
    """``[chain, 6]``: guide mean minus exact posterior mean, in mean-field sds."""
    return (r.vi.guide["loc"] - PROBLEM.mean) / PROBLEM.mean_field_sd


# ------------------------------------------------------------------ the tests' pieces
def test_window_test_by_hand():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.0, 2.0, 50), rng.normal(1.0, 2.0, 50)
    change, last = elbo_change(np.concatenate([rng.normal(size=30), a, b]), 50)
    assert change == pytest.approx((b.mean() - a.mean()) / math.sqrt(a.var(ddof=1) / 50 + b.var(ddof=1) / 50))
    assert last == pytest.approx(b.mean())
    # NaN: fewer than two windows, windows under 10 steps, or no finite estimates
    assert math.isnan(elbo_change(np.zeros(99), 50)[0]) and math.isnan(elbo_change(np.ones(18), 9)[0])
    assert math.isnan(elbo_change(np.full(40, np.nan), 20)[0])
    assert elbo_change(np.ones(40), 20)[0] == 0.0  # a constant trace has settled
    # windows are whole epochs, at most half the steps taken
    assert window_steps(200, 7) == 203 and window_steps(200, 7, 300) == 147 and window_steps(200, 1, 15) == 7


def test_stationarity_statistic_by_hand():
    rng = np.random.default_rng(1)
    k, d = 200, 40

    def statistic(g):
        return stationarity(g.sum(0), (g ** 2).sum(0), len(g))

    g = rng.normal(size=(k, d))
    t2 = (g.mean(0) / (g.std(0, ddof=1) / math.sqrt(k))) ** 2
    nu = k - 1
    want = (t2.sum() - d * nu / (nu - 2)) / math.sqrt(d * 2 * nu ** 2 * (nu - 1) / ((nu - 2) ** 2 * (nu - 4)))
    assert statistic(g) == pytest.approx(want)
    # about N(0, 1) where the mean gradient is zero: over 200 replicates, mean ~0 and sd ~1
    null = np.array([statistic(rng.normal(size=(k, d))) for _ in range(200)])
    assert abs(null.mean()) < 0.3 and 0.7 < null.std() < 1.3
    # a mean of 0.3 noise sds in one coordinate of 4 gives t ~ 0.3 sqrt(200) = 4.2 and
    # z ~ (4.2^2 - 1) / sqrt(4 Var[t^2]) = 5.9 > 3; among 40 the same offset is within noise (z ~ 1.9):
    # z measures the total squared offset, the ELBO gap of a quadratic, against its noise
    g4 = rng.normal(size=(k, 4))
    g4[:, 0] += 0.3
    assert statistic(g4) > 3
    g[:, 0] += 0.3
    assert statistic(g) < 3
    g[:, :10] += 0.3
    assert statistic(g) > 10
    assert math.isnan(stationarity(np.zeros(3), np.zeros(3), 5))


def test_spread_by_hand():
    loc = np.array([[0.0, 1.0], [0.3, 1.0], [0.0, 2.0]])
    scale = np.array([[1.0, 0.5], [1.0, 0.5], [1.0, 0.5]])
    elbo, means = fit_spread(np.array([-10.0, -12.5, -11.0]), loc, scale)
    assert elbo == 2.5 and means == pytest.approx(2.0)  # chains 0 and 2: |1 - 2| / 0.5
    assert all(math.isnan(v) for v in fit_spread(np.array([1.0]), loc[:1], scale[:1]))


class _Stationarity:
    """A stand-in for the fresh-gradient test: the values given, one per call."""

    def __init__(self, *values):
        self.values, self.calls = list(values), 0

    def __call__(self):
        self.calls += 1
        return self.values.pop(0)


def test_adaptive_schedule_searches_anneals_and_searches_again_when_not_stationary():
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.Adam([param], lr=0.1)
    opts = VIOptions(num_steps=400, window=20, anneal_steps=50, lr_decay=0.01)
    schedule = _AdaptiveSchedule(opts, [optimizer], window=20, num_batches=1)
    flat = np.random.default_rng(2).normal(size=400)  # a settled ELBO from the start
    stationary = _Stationarity(10.0, 0.0)
    rates, stop = [], None
    for done in range(1, 401):
        if schedule.step(done, flat, stationary):
            stop = done
            break
        rates.append(optimizer.param_groups[0]["lr"])
    # rates[i] is the rate of step i + 1. Search: two windows of 20 steps at the start rate; then
    # a geometric decay to 1% over 50 steps, judged when it ends, after step 90
    decay = 0.1 * 0.01 ** (np.arange(1, 50) / 50)
    assert rates[:40] == [0.1] * 40
    np.testing.assert_allclose(rates[40:89], decay)
    # settled but not stationary (10 > 3): back to the start rate, a new search, a new decay
    assert rates[89:130] == [0.1] * 41
    np.testing.assert_allclose(rates[130:], decay)
    assert stop == 90 + 40 + 50 and stationary.calls == 2  # stationary (0 <= 3): stop


def test_adaptive_schedule_on_a_conjugate_model():
    potential = ConjugateNormal(num_data=50, dim=3)
    torch.manual_seed(0)
    fit = fit_mean_field(potential, window=50, anneal_steps=400)
    lr = fit.trace["lr_loc"]
    search = int(np.argmax(lr < 0.01)) - 1  # steps at the start rate: two windows at least
    assert search >= 100 and np.all(lr[:search + 1] == 0.01)
    np.testing.assert_allclose(lr[search + 1:], 0.01 * 0.001 ** (np.arange(1, len(lr) - search) / 400))
    # settled and stationary at the end of the decay: stopped there, long before the cap
    assert fit.converged and fit.num_steps == search + 400 == len(fit.trace["elbo"])
    mean, sd = potential.posterior()
    # the final rate 1e-5 leaves Adam's fluctuation at about sqrt(1e-5 / (2 sd)) = 0.01 sd
    torch.testing.assert_close(fit.guide.loc, mean, atol=0.1 * sd.min().item(), rtol=0)


# ------------------------------------------------------------------ the defaults
def test_default_options_reach_the_exact_posterior_means():
    # Two independent fits with the default options. The tolerance, 0.1 mean-field sd, is a
    # KL(q || optimum) of 0.005 nats per coordinate; what the defaults leave is Adam's fluctuation
    # at the final rate (1e-5) and the lag of the 3000-step decay, about 0.02 sd per coordinate
    # (measured over 5 seeds), so 12 coordinates stay inside with room to spare.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a converged fit does not warn
        r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="svi", num_samples=10, num_chains=2, seed=0)
    errors = _errors(r)
    assert np.abs(errors).max() < 0.1, errors
    # the sds too: within 10% is a KL of at most 0.01 nats per coordinate
    np.testing.assert_allclose(r.vi.guide["scale"], np.broadcast_to(PROBLEM.mean_field_sd, (2, 6)), rtol=0.1)
    vi = r.vi
    assert vi.converged.tolist() == [True, True]
    assert np.all(np.abs(vi.relative_change) <= 3) and np.all(vi.stationarity <= 3)
    assert np.all(vi.num_steps < VIOptions().num_steps)  # stopped by the convergence test, before the cap
    assert vi.spread_loc < 0.2 and vi.gradient_draws == 200 and vi.window == 200
    assert vi.loss.shape == (2, vi.num_steps.max())


@pytest.mark.parametrize("options", [
    {"num_steps": 200},
    {"num_steps": 2000, "schedule": "exponential", "lr_decay": 0.1},  # the defaults before
], ids=["short", "old-defaults"])
def test_a_fit_stopped_too_early_is_flagged_and_warns(options):
    with pytest.warns(UserWarning, match=r"svi: 1 of 1 fit did not converge: .*raise num_steps \(now "
                                         f"{options['num_steps']}\\)"):
        r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="svi", num_samples=10, num_chains=1, seed=0,
                **options)
    assert np.abs(_errors(r)).max() > 1.0  # more than a posterior sd away
    vi = r.vi
    assert vi.converged.tolist() == [False]
    assert not (abs(vi.relative_change[0]) <= 3 and vi.stationarity[0] <= 3)


def test_a_decayed_rate_does_not_fool_the_test():
    # the rate decays to 1e-5 within 2000 steps: the ELBO stops moving far from the optimum,
    # and only the fresh gradients tell
    with pytest.warns(UserWarning, match="not at a stationary point"):
        r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="svi", num_samples=10, num_chains=1, seed=0,
                num_steps=2000, schedule="exponential")
    assert abs(r.vi.relative_change[0]) <= 3 and r.vi.stationarity[0] > 100
    assert np.abs(_errors(r)).max() > 5.0


# ------------------------------------------------------------- where it shows up
def test_convergence_reaches_inference_data_summary_and_report():
    with pytest.warns(UserWarning, match="did not converge"):
        r = run(PROBLEM.spec, (PROBLEM.x, PROBLEM.y), engine="svi", num_samples=20, num_chains=2, seed=1,
                num_steps=200)
    attrs = to_inference_data(r, prior=False).posterior.attrs
    assert json.loads(attrs["converged"]) == [False, False]
    np.testing.assert_allclose(json.loads(attrs["relative_change"]), r.vi.relative_change)
    assert attrs["convergence_window"] == 100 and attrs["convergence_tolerance"] == 3.0
    assert attrs["spread_loc"] == pytest.approx(r.vi.spread_loc) and "standard errors" in attrs["convergence"]
    checks = run_checks(r)
    assert checks["converged"] == [False, False] and checks["num_steps_taken"] == [200, 200]
    assert summary(r).attrs["converged"] == [False, False]
    assert chain_table(r)["converged"].tolist() == [False, False] and chain_table(r)["failed"].isna().all()
    lines = _verdicts(r)
    assert lines[0].startswith("**Not converged**: 0 of 2 fits converged") and "Spread across fits" in lines[1]
