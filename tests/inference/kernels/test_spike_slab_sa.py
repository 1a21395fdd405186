"""SGLD-SA / SGHMC-SA (paper 001): the stochastic-approximation updates as pure
functions (against closed forms, the prior module and brute-force maximisation),
the kernels' force, variable selection on a sparse linear model, statistics and
the InferenceData export, and bad options."""

from bnnzoo.diagnostics import to_inference_data
import math

import numpy as np
import pyro
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.inference import SGHMCSA, SGLDSA, BNNPotential, run
from bnnzoo.inference.stochastic_approximation import (SpikeSlabState, delta_target, inclusion_probability, sa_update, sa_weight,
                                       sigma_root, spike_slab_force)
from bnnzoo.models import (BNN, BNNSpec, Categorical, Dense, Gaussian, GaussianLikelihood, SpikeAndSlab)
from bnnzoo.models.priors import SpikeSlabMixture


# ------------------------------------------------------------ pure pieces
def test_inclusion_probability_is_the_mixture_posterior():
    beta = torch.linspace(-3, 3, 41).reshape(1, -1).repeat(2, 1)
    sigma, delta = torch.tensor([1.0, 0.5]), torch.tensor([0.5, 0.01])
    rho = inclusion_probability(beta, sigma, delta, v0=0.1, v1=10.0)
    for c in range(2):
        s, d = float(sigma[c]), float(delta[c])
        want = SpikeSlabMixture("laplace", s * 0.1, s * math.sqrt(10.0), d).inclusion_posterior(beta[c])
        torch.testing.assert_close(rho[c], want)


def test_sigma_root_maximises_the_q_function():
    # -R_a log s - R_b / s - R_c / (2 s^2) is maximised at the positive root (paper 001, eq. 14)
    r_a, r_b, r_c = torch.tensor(120.0), torch.tensor(35.0), torch.tensor(80.0)
    s = float(sigma_root(r_a, r_b, r_c))
    assert float(r_a) * s * s - float(r_b) * s - float(r_c) == pytest.approx(0.0, abs=1e-3)
    grid = np.linspace(0.05, 5, 100001)
    q = -120 * np.log(grid) - 35 / grid - 80 / (2 * grid**2)
    assert s == pytest.approx(grid[q.argmax()], abs=1e-4)


def test_delta_target_maximises_its_objective():
    rho = torch.rand(1, 30)
    a, b = 2.0, 30.0
    d = float(delta_target(rho, a, b)[0])
    total = float(rho.sum())
    grid = np.linspace(1e-4, 1 - 1e-4, 200001)
    q = (total + a - 1) * np.log(grid) + (30 - total + b - 1) * np.log1p(-grid)
    assert d == pytest.approx(grid[q.argmax()], abs=1e-4)
    assert d == pytest.approx((total + a - 1) / (a + b + 30 - 2))


def test_spike_slab_force_is_the_gradient_of_the_sa_penalty():
    beta = torch.randn(3, 7, requires_grad=True)
    k0, k1, sigma = torch.rand(3, 7) * 9, torch.rand(3, 7), torch.tensor([0.5, 1.0, 2.0])
    penalty = (k0 * beta.abs() / sigma[:, None] + k1 * beta**2 / (2 * sigma[:, None] ** 2)).sum()
    (grad,) = torch.autograd.grad(penalty, beta)
    torch.testing.assert_close(spike_slab_force(beta.detach(), k0, k1, sigma), grad)


def test_sa_weight():
    assert sa_weight(1) == pytest.approx(10 * 1001 ** -0.7)  # the paper's regression setting
    assert sa_weight(1, scale=1.0, offset=0.0, power=0.7, maximum=0.5) == 0.5


def _state(num_chains, sizes, sigma=1.0, delta=0.3):
    return SpikeSlabState.initial(num_chains, sizes, [0.1] * len(sizes), [10.0] * len(sizes),
                                  [sigma] * len(sizes), [delta] * len(sizes))


def test_sa_update_em_step_is_the_closed_form():
    torch.manual_seed(0)
    betas = [torch.randn(2, 5), torch.randn(2, 3)]
    old = _state(2, [5, 3])
    new = sa_update(old, betas, 1.0, [0.1, 0.1], [10.0, 10.0], a=1.0, b=[5.0, 3.0], nu=1.0, lam=1.0,
                    shared_sigma=False)
    for layer, (beta, p) in enumerate(zip(betas, (5, 3))):
        rho = inclusion_probability(beta, old.sigma[:, layer], old.delta[:, layer], 0.1, 10.0)
        torch.testing.assert_close(new.rho[layer], rho)
        torch.testing.assert_close(new.kappa0[layer], (1 - rho) / 0.1)
        torch.testing.assert_close(new.kappa1[layer], rho / 10.0)
        r_b = (new.kappa0[layer] * beta.abs()).sum(-1)
        r_c = (new.kappa1[layer] * beta**2).sum(-1) + 1.0
        torch.testing.assert_close(new.sigma[:, layer], sigma_root(torch.tensor(p + 3.0), r_b, r_c))
        torch.testing.assert_close(new.delta[:, layer], (rho.sum(-1) + 0.0) / (1 + p + p - 2))
    # shared sigma: one root over both layers
    shared = sa_update(old, betas, 1.0, [0.1, 0.1], [10.0, 10.0], 1.0, [5.0, 3.0], 1.0, 1.0, shared_sigma=True)
    r_b = sum((k * b.abs()).sum(-1) for k, b in zip(shared.kappa0, betas))
    r_c = sum((k * b**2).sum(-1) for k, b in zip(shared.kappa1, betas)) + 1.0
    torch.testing.assert_close(shared.sigma[:, 0], sigma_root(torch.tensor(8 + 3.0), r_b, r_c))
    torch.testing.assert_close(shared.sigma[:, 1], shared.sigma[:, 0])


def test_sa_update_regression_and_averaging():
    torch.manual_seed(1)
    betas = [torch.randn(2, 6)]
    old = _state(2, [6], sigma=2.0)
    rss = torch.tensor([40.0, 90.0])
    em = sa_update(old, betas, 1.0, [0.1], [10.0], 1.0, [6.0], nu=1.0, lam=1.0, shared_sigma=True,
                   num_data=50, scaled_rss=rss)
    r_b = (em.kappa0[0] * betas[0].abs()).sum(-1)
    r_c = rss + (em.kappa1[0] * betas[0] ** 2).sum(-1) + 1.0
    torch.testing.assert_close(em.sigma[:, 0], sigma_root(torch.tensor(50 + 6 + 1.0), r_b, r_c))
    # omega = 0 keeps everything; 0 < omega < 1 interpolates (x <- (1 - w) x + w x~, rho first)
    frozen = sa_update(old, betas, 0.0, [0.1], [10.0], 1.0, [6.0], 1.0, 1.0, True, 50, rss)
    torch.testing.assert_close(frozen.sigma, old.sigma)
    torch.testing.assert_close(frozen.rho[0], old.rho[0])
    half = sa_update(old, betas, 0.5, [0.1], [10.0], 1.0, [6.0], 1.0, 1.0, True, 50, rss)
    torch.testing.assert_close(half.rho[0], 0.5 * old.rho[0] + 0.5 * em.rho[0])
    torch.testing.assert_close(half.kappa1[0], 0.5 * old.kappa1[0] + 0.5 * half.rho[0] / 10.0)


# ---------------------------------------------------------- kernel force
def _regression_spec(p=5, learned=True):
    return BNNSpec(layers=[Dense(1)], input_dim=p, prior=Gaussian(2.0),
                   priors={"layers.0.weight": SpikeAndSlab(v0=0.1, v1=10.0, sigma=1.5, inclusion_prob=0.3)},
                   likelihood=GaussianLikelihood("learned" if learned else 0.7))


@pytest.mark.parametrize("learned", [True, False], ids=["learned_noise", "fixed_noise"])
def test_force_is_likelihood_plus_sa_prior(learned):
    torch.manual_seed(0)
    x, y = torch.randn(30, 5), torch.randn(30)
    potential = BNNPotential(BNN(_regression_spec(learned=learned)), x, y)
    kernel = SGLDSA(potential=potential)
    kernel.setup(0)
    theta = torch.randn(1, potential.dim)
    value, grad, _ = kernel.sampler.force(kernel.state, theta, None, iteration=1)  # the first: no SA step yet
    s, rho = 1.5, 0.3
    k0, k1 = (1 - rho) / 0.1, rho / 10.0
    t = theta.clone().requires_grad_(True)
    w, b = t[0, :5], t[0, 5]
    resid = y - (x @ w + b)
    noise_var = s**2 if learned else 0.7**2
    u = (resid**2).sum() / (2 * noise_var) + (k0 * w.abs() / s + k1 * w**2 / (2 * s**2)).sum() + b**2 / (2 * 4.0)
    (want,) = torch.autograd.grad(u, t)
    if learned:
        want[0, -1] = 0.0  # noise_var is pinned to sigma^2, not sampled
    torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-4)
    assert torch.isfinite(value).all()


# ------------------------------------------------- variable selection
def test_sparse_linear_model_selects_the_true_coefficients():
    data = load("linear_p1000", seed=0, p=100, rho=0.0, noise_var=1.0)  # beta = (3, 2, 1, 0, ..., 0)
    spec = BNNSpec(layers=[Dense(1, bias=False)], input_dim=100, prior=SpikeAndSlab(v0=0.1, v1=10.0),
                   likelihood=GaussianLikelihood("learned"))
    r = run(spec, data, engine="sgld_sa", num_samples=250, warmup_steps=0, num_chains=2, seed=0, step_size=1e-3,
            batch_size=50, thin=10, init_radius=0.1)
    rho = r.inclusion_prob["layers.0.weight"][:, 0]  # [chain, p]
    assert rho.shape == (2, 100)
    assert (rho[:, :3] > 0.8).all(), rho[:, :3]
    assert (rho[:, 3:] < 0.05).all(), rho[:, 3:].max()
    beta = r.samples["layers.0.weight"][:, 125:, 0].mean((0, 1))
    np.testing.assert_allclose(beta[:3], [3, 2, 1], atol=0.5)
    assert np.abs(beta[3:]).max() < 0.3


# ---------------------------------------------- statistics and export
@pytest.fixture(scope="module")
def sa_run():
    torch.manual_seed(0)
    x = torch.randn(40, 6)
    y = x[:, 0] * 2 + 0.3 * torch.randn(40)
    spec = BNNSpec(layers=[Dense(3, "tanh"), Dense(1)], input_dim=6, prior=Gaussian(1.0),
                   priors={"layers.0.weight": SpikeAndSlab(sigma=1.0)}, likelihood=GaussianLikelihood("learned"))
    return run(spec, (x, y), engine="sgld_sa", num_samples=30, warmup_steps=20, num_chains=2, seed=1,
               step_size=1e-3, batch_size=10, thin=2)


def test_sa_statistics(sa_run):
    stats = sa_run.sample_stats
    for name in ("sigma[layers.0.weight]", "delta[layers.0.weight]", "inclusion_prob_mean", "sparsity",
                 "sa_step_size", "lp", "step_size", "temperature", "diverging"):
        assert stats[name].shape == (2, 30), name
        assert np.isfinite(stats[name]).all(), name
    assert "acceptance_rate" not in stats
    assert (stats["sparsity"] == 0).all()  # no pruning
    # the noise variance is the SA's sigma^2 (pinned, not sampled)
    np.testing.assert_allclose(sa_run.samples["noise_var"], stats["sigma[layers.0.weight]"] ** 2, rtol=1e-5)
    omega = stats["sa_step_size"]
    assert np.all(np.diff(omega, axis=1) < 0) and np.all(omega < 10 * 1000 ** -0.7)
    assert sa_run.notes["failed"] == [False, False]  # checked like every SG-MCMC run


def test_inclusion_probabilities_in_inference_data(sa_run, tmp_path):
    rho = sa_run.inclusion_prob["layers.0.weight"]
    assert rho.shape == (2, 3, 6) and ((rho >= 0) & (rho <= 1)).all()
    idata = to_inference_data(sa_run)
    group = idata.inclusion_prob["layers.0.weight"]
    assert group.dims == ("chain", "layers.0.weight_out", "layers.0.weight_in")
    np.testing.assert_allclose(group.values, rho)
    assert "minibatch" in idata.sample_stats.attrs["lp_estimate"]
    assert "sigma[layers.0.weight]" in idata.sample_stats
    path = tmp_path / "sa.nc"
    idata.to_netcdf(str(path))
    from tests.support import arviz_calls as az

    back = az.from_netcdf(str(path))
    np.testing.assert_allclose(back.inclusion_prob["layers.0.weight"].values, rho)
    np.testing.assert_allclose(back.sample_stats["delta[layers.0.weight]"].values,
                               sa_run.sample_stats["delta[layers.0.weight]"])


def test_em_mode_and_sghmc_sa_on_classification():
    # two sparse layers with their own sigma (classification), SGHMC-SA in EM mode
    data = load("digits", seed=0, n_train=200, classes=(0, 1, 2))
    spec = BNNSpec(layers=[Dense(8, "relu"), Dense(3)], input_dim=64, prior=SpikeAndSlab(v0=0.05, v1=1.0),
                   likelihood=Categorical())
    r = run(spec, data, engine="sghmc_sa", num_samples=20, warmup_steps=10, num_chains=2, seed=0, mode="em",
            step_size=1e-4, batch_size=50)
    stats = r.sample_stats
    assert (stats["sa_step_size"] == 1.0).all()
    sigmas = [stats[f"sigma[layers.{i}.{kind}]"] for i in (0, 1) for kind in ("weight", "bias")]
    assert len({float(s[0, -1]) for s in sigmas}) == 4  # one sigma per sparse site
    assert set(r.inclusion_prob) == {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                               "layers.1.bias"}
    assert not stats["diverging"].any()
    shared = run(spec, data, engine="sgld_sa", num_samples=5, warmup_steps=5, num_chains=1, seed=0,
                 shared_sigma=True, step_size=1e-4, batch_size=50)
    values = {float(shared.sample_stats[f"sigma[layers.{i}.weight]"][0, -1]) for i in (0, 1)}
    assert len(values) == 1


# ------------------------------------------------------------ bad options
def test_model_without_spike_and_slab_is_refused():
    spec = BNNSpec(layers=[Dense(1)], input_dim=3, prior=Gaussian(1.0), likelihood=GaussianLikelihood(0.5))
    with pytest.raises(ValueError, match="needs at least one weight with a SpikeAndSlab prior"):
        run(spec, (torch.randn(10, 3), torch.randn(10)), engine="sgld_sa", num_samples=2, warmup_steps=0)


@pytest.mark.parametrize("spec_kw, options, message", [
    ({"prior": SpikeAndSlab(spike="gaussian")}, {}, "spike='gaussian'"),
    ({}, {"mode": "gibbs"}, "mode 'gibbs'"),
    ({}, {"shared_sigma": False}, "shared_sigma=False"),
    ({}, {"sa_max": 2.0}, "sa_max must be in"),
    ({}, {"beta_a": 0.0}, "beta_a must be a positive number"),
    ({}, {"step_size": 0.0}, "step_size must be a positive number"),
    ({}, {"batch_size": 11}, "batch_size=11 is larger than the 10 training rows"),
], ids=["gaussian_spike", "mode", "shared_sigma", "sa_max", "beta_a", "step_size", "batch_size"])
def test_bad_sa_options(spec_kw, options, message):
    spec = BNNSpec(**{"layers": [Dense(1)], "input_dim": 3, "prior": SpikeAndSlab(),
                      "likelihood": GaussianLikelihood("learned"), **spec_kw})
    with pytest.raises(ValueError, match=message):
        run(spec, (torch.randn(10, 3), torch.randn(10)), engine="sgld_sa", num_samples=2, warmup_steps=0, **options)


def test_sghmc_sa_kernel_is_a_pyro_kernel():
    from pyro.infer import MCMC

    pyro.set_rng_seed(0)
    x, y = torch.randn(20, 5), torch.randn(20)
    kernel = SGHMCSA(BNN(_regression_spec()), step_size=1e-4, batch_size=5, num_chains=3)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=5, disable_progbar=True)
    mcmc.run(x, y)
    assert mcmc.get_samples()["layers.0.weight"].shape == (10, 3, 1, 5)
    assert kernel.hyper.rho[0].shape == (3, 5)
    assert kernel.diagnostics()["final_state"]["inclusion_prob"]["layers.0.weight"].shape == (3, 1, 5)


@pytest.mark.slow
def test_paper_regression_sa_beats_em():
    # paper 001, Table 1 setting v0 = 0.01, sigma_init = 1 (10^4 iterations instead of 5 * 10^5)
    data = load("linear_p1000", seed=0)
    spec = BNNSpec(layers=[Dense(1, bias=False)], input_dim=1000,
                   prior=SpikeAndSlab(v0=0.01, v1=10.0, sigma=1.0, inclusion_prob=0.5),
                   likelihood=GaussianLikelihood("learned"))
    mse = {}
    for mode in ("sa", "em"):
        r = run(spec, data, engine="sgld_sa", mode=mode, num_samples=1000, warmup_steps=2000, num_chains=1, seed=0,
                step_size=1e-3, schedule="polynomial", batch_size=50, thin=8, init_radius=0.1)
        prediction = r.predict(data.x_test)[..., 0].mean((0, 1))
        mse[mode] = float(((prediction - data.y_test.numpy()) ** 2).mean())
        if mode == "sa":
            rho = r.inclusion_prob["layers.0.weight"][0, 0]
            assert rho[0] > 0.9 and rho[1] > 0.9 and (rho[3:] < 0.5).all()  # beta_3 = 1 may be missed
    assert mse["sa"] < 6.0 < mse["em"], mse
