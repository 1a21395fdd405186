"""Mean-field fits: minibatch objectives with known optima, per-group learning rates
and schedules, initial scales and means; independent fits per chain and their draws."""

import math

import numpy as np
import pytest
import torch

from bnnzoo.inference import VIOptions, fit_mean_field
from bnnzoo.inference.potential import BNNPotential, make_potential
from bnnzoo.inference.vi import MeanFieldGuide, initial_loc, sample_mean_field
from bnnzoo.models import BNN, BNNSpec, Categorical, Dense
from bnnzoo.models.spec import Conv2d
from tests.inference.vi.conjugate import ConjugateNormal
from tests.support.targets import linear_regression


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


@pytest.mark.parametrize("scheme, kl_weight", [("uniform", 1.0), ("none", 5.0)], ids=["uniform", "none"])
def test_minibatch_fit_reaches_the_optimum_of_its_objective(scheme, kl_weight):
    # uniform weights: the exact posterior; "none": the full KL in each of the M = 5
    # minibatches, i.e. the optimum of 5 KL + NLL (prior^5, and the entropy x 5 too)
    potential = ConjugateNormal(num_data=100, prior_scale=0.2)
    torch.manual_seed(0)
    fit = fit_mean_field(potential, num_steps=1000, lr=0.1, lr_decay=0.01, schedule="exponential", batch_size=20,
                         kl_weighting=scheme, estimator="stl", num_particles=4)
    mean, sd = potential.posterior(kl_weight)
    other_mean, _ = potential.posterior(6.0 - kl_weight)
    assert fit.num_batches == 5 and fit.epochs["elbo"].shape == (200,)
    torch.testing.assert_close(fit.guide.loc, mean, atol=0.05 * sd.min().item(), rtol=0)
    torch.testing.assert_close(fit.guide.scale, sd, rtol=0.08, atol=0)
    assert (fit.guide.loc - other_mean).abs().min() > 0.25  # the two objectives are told apart


def test_per_group_learning_rates_and_plateau_schedules():
    potential = ConjugateNormal(num_data=40)
    torch.manual_seed(1)
    seen = []
    fit = fit_mean_field(potential, num_steps=400, lr=0.05, scale_lr=0.005, optimizer={"kind": "sgd", "momentum": 0.5},
                         scale_optimizer="adabound", schedule="plateau", plateau_patience=0, batch_size=10,
                         callback=lambda epoch, guide, summary: seen.append((epoch, guide, summary)))
    assert [e for e, _, _ in seen] == list(range(100))
    assert isinstance(seen[-1][1], MeanFieldGuide) and set(seen[-1][2]) >= {"nll", "kl", "elbo", "lr_loc"}
    lr_loc, lr_scale = fit.trace["lr_loc"], fit.trace["lr_scale"]
    assert lr_loc[0] == 0.05 and lr_scale[0] == 0.005
    # plateau steps only at epoch ends: rates are constant within an epoch, and each decays on its own
    assert np.all(lr_loc.reshape(100, 4) == lr_loc.reshape(100, 4)[:, :1])
    assert lr_loc[-1] < 0.05 and lr_scale[-1] < 0.005
    assert not np.array_equal(lr_loc / 0.05, lr_scale / 0.005)
    np.testing.assert_allclose(fit.trace["elbo"], -(fit.trace["kl"] + fit.trace["nll"]))
    np.testing.assert_allclose(fit.epochs["nll"], fit.trace["nll"].reshape(100, 4).mean(1))


def test_exponential_decay_and_initial_scale():
    potential = ConjugateNormal()
    fit = fit_mean_field(potential, num_steps=50, lr=0.1, lr_decay=0.01, init_rho=-10.0, scale_lr=1e-9,
                         schedule="exponential")
    assert fit.trace["lr_loc"][0] == 0.1 and fit.trace["lr_loc"][-1] == pytest.approx(0.1 * 0.01 ** (49 / 50))
    torch.testing.assert_close(fit.guide.scale, torch.full((3,), math.log1p(math.exp(-10.0))), rtol=1e-5, atol=0)
    assert VIOptions(init_scale=0.3).initial_scale == pytest.approx(0.3)


def test_kaiming_initial_means():
    spec = BNNSpec(layers=[Conv2d(3, 3, padding=1, activation="relu", pool=2), Dense(5, "relu"), Dense(3)],
                   input_shape=(1, 4, 4), likelihood=Categorical())
    potential = BNNPotential(BNN(spec), torch.randn(6, 16), torch.tensor([0, 1, 2, 0, 1, 2]))
    torch.manual_seed(2)
    parts = potential.unflatten(initial_loc(potential, "kaiming"))
    for name, fan_in in [("layers.0.weight", 9), ("layers.1.weight", 12), ("layers.2.weight", 5)]:
        bound = math.sqrt(6 / fan_in)
        assert parts[name].abs().max() <= bound and parts[name].abs().max() > 0.5 * bound
    assert all(parts[f"layers.{i}.bias"].abs().max() == 0 for i in range(3))



def test_sample_mean_field_fits_each_chain_and_draws_from_its_guide():
    problem = linear_regression(n=30)
    potential = make_potential(BNN(problem.spec), problem.x, problem.y)
    torch.manual_seed(3)
    draws = sample_mean_field(potential, VIOptions(num_steps=40, lr=0.05), num_samples=7, num_chains=2)
    assert draws.sample_stats["lp"].shape == (2, 7) and np.isfinite(draws.sample_stats["lp"]).all()
    assert draws.vi.loss.shape == (2, 40) and draws.vi.num_batches == 1
    assert set(draws.vi.terms) == {"elbo", "nll", "kl", "lr_loc", "lr_scale"}
    assert draws.vi.guide["loc"].shape == draws.vi.guide["scale"].shape == (2, potential.dim)
    assert not np.allclose(draws.vi.guide["loc"][0], draws.vi.guide["loc"][1])  # independent fits
    for name, value in draws.samples.items():
        assert value.shape[:2] == (2, 7), name
