"""map_fit: full-batch proximal SGD is ISTA and finds the lasso solution with
its exact zeros; Adam and SGD decrease the loss; bad options are refused."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso

from bnnzoo.inference.map_fit import map_fit
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.models import BNN, BNNSpec, Dense, Gaussian, GaussianLikelihood, Laplace


def lasso_potential(n=50, p=10, scale=0.02, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    w = np.zeros(p)
    w[:3] = [2.0, -1.5, 1.0]
    y = x @ w + 0.3 + rng.normal(size=n)
    spec = BNNSpec(layers=[Dense(1)], input_dim=p, prior=Gaussian(1e4),  # an (almost) flat bias prior
                   priors={"layers.0.weight": Laplace(scale)}, likelihood=GaussianLikelihood(1.0))
    dtype = torch.get_default_dtype()
    return BNNPotential(BNN(spec), torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)), x, y


@pytest.fixture(scope="module")
def lasso_map():
    potential, x, y = lasso_potential()
    torch.manual_seed(0)
    fit = map_fit(potential, "prox-sgd", lr=0.2, num_epochs=1500, batch_size=len(y), init_radius=0.1)
    return potential, x, y, fit


def test_full_batch_prox_sgd_is_the_lasso_with_exact_zeros(lasso_map):
    # U/N = ||y - x w - b||^2 / (2N) + (1/scale) ||w||_1 / N: sklearn's Lasso with alpha = 1/(scale N)
    potential, x, y, fit = lasso_map
    w = fit.theta[:10].numpy()
    ref = Lasso(alpha=1 / (0.02 * len(y)), tol=1e-12, max_iter=100_000).fit(x, y)
    np.testing.assert_allclose(w, ref.coef_, atol=1e-4)
    assert float(fit.theta[10]) == pytest.approx(ref.intercept_, abs=1e-4)
    np.testing.assert_array_equal(w == 0, ref.coef_ == 0)
    assert 0 < (w == 0).sum() < 10


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("sgd", 0.05)])
def test_adam_and_sgd_decrease_the_loss_and_call_back(lasso_map, optimizer, lr):
    potential, _, _, best = lasso_map
    optimum = float(potential(best.theta[None]))
    torch.manual_seed(1)
    seen = []
    fit = map_fit(potential, optimizer, lr=lr, num_epochs=30, batch_size=10,
                  callback=lambda epoch, theta: seen.append(epoch) or float(potential(theta[None])))
    assert seen == list(range(31)) and len(fit.history) == 31
    assert fit.history[-1] - optimum < 0.05 * (fit.history[0] - optimum)
    assert len(fit.losses) == 30 * 5 and fit.wall_time > 0
    assert (fit.theta == 0).sum() == 0  # the subgradient gives no exact zeros


@pytest.mark.parametrize("options, name", [({"optimizer": "lbfgs"}, "optimizer"), ({"lr": 0.0}, "lr"),
                                           ({"num_epochs": 0}, "num_epochs"), ({"batch_size": 1.5}, "batch_size")])
def test_bad_options(options, name):
    potential, _, _ = lasso_potential()
    with pytest.raises(ValueError, match=name):
        map_fit(potential, **options)
