"""ProximalHMC (paper 000): the proximal operators and forces on their own, the
potential's smooth/L1 split, exact posteriors (exp(-|x|) for every force and
lam, a Bayesian lasso against an independent Gibbs sampler), NaN handling,
bad options, and the Pyro driver with vectorized and sequential chains."""

import math
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from torch.distributions.transforms import identity_transform

from bnnzoo.inference import ENGINES, FlatPotential, ProximalHMC, run, split_mcmc
from bnnzoo.inference.potential import BNNPotential, PyroPotential, prior_l1_weight
from bnnzoo.inference.proximal import (
    moreau_envelope_l1,
    moreau_force,
    ns_hmc_force,
    prox_gradient_force,
    prox_of_potential,
    soft_threshold,
)
from bnnzoo.inference.kernels.proximal_hmc import relative_hamiltonian_error
from bnnzoo.models import BNN, BNNSpec, Dense, Gaussian, GaussianLikelihood, Laplace, SpikeAndSlab
from tests.support.targets import (
    assert_moments, assert_moments_agree, assert_nan_region_rejected, bayesian_lasso_gibbs, regression_draws, run_kernel,
)

FORCES = ("moreau", "prox-gradient", "ns-hmc")


class LaplaceTarget(FlatPotential):
    """``exp(-|x|)`` in one dimension (Var = 2, E|x| = 1); NaN above ``upper``."""

    names, shapes, transforms = ["x"], {"x": (1,)}, {"x": identity_transform}

    def __init__(self, upper: float = math.inf):
        self.upper = upper
        self._layout()

    def __call__(self, theta):
        u = theta.abs().sum(-1)
        return torch.where(theta[..., 0] > self.upper, torch.full_like(u, math.nan), u)

    def l1_weights(self, spike_and_slab=False):
        return torch.ones(1)


def sample(potential, num_chains, num_samples, warmup_steps, seed=0, **options):
    return run_kernel(ProximalHMC, potential, num_chains, num_samples, warmup_steps, seed, **options)


# -------------------------------------------------------- pure functions
def test_soft_threshold():
    w = torch.tensor([-3.0, -0.5, 0.0, 0.2, 2.0])
    torch.testing.assert_close(soft_threshold(w, 1.0), torch.tensor([-2.0, 0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(soft_threshold(w, torch.tensor([0, 0, 0, 0, 3.0])),
                               torch.tensor([-3.0, -0.5, 0.0, 0.2, 0.0]))


def test_moreau_force_is_the_gradient_of_the_envelope(float64):
    torch.manual_seed(0)
    w = torch.randn(4, 6) * 0.5
    beta, lam = torch.tensor([0.0, 0.5, 1.0, 2.0, 4.0, 8.0]), 0.1
    w_ = w.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(moreau_envelope_l1(w_, beta, lam).sum(), w_)
    grad_f = torch.randn(4, 6)
    torch.testing.assert_close(moreau_force(w, grad_f, beta, lam), grad_f + grad)
    # away from the band |w| < lam * beta it is the true gradient of f + beta |w|
    far = w.abs() > lam * beta
    torch.testing.assert_close(moreau_force(w, grad_f, beta, lam)[far], (grad_f + beta * w.sign())[far])


def test_prox_gradient_force_matches_its_definition(float64):
    torch.manual_seed(1)
    w, grad_f = torch.randn(5, 7), torch.randn(5, 7) * 3
    beta, lam = torch.rand(7) * 2, torch.rand(7) * 0.5 + 0.05  # lam per coordinate
    naive = (w - soft_threshold(w - lam * grad_f, lam * beta)) / lam
    torch.testing.assert_close(prox_gradient_force(w, grad_f, beta, lam), naive)


def test_ns_hmc_force_prox_of_quadratic_plus_l1(float64):
    """f(z) = a/2 |z|^2: prox_{lam U}(w) = soft_threshold(w, lam beta) / (1 + lam a)."""
    torch.manual_seed(2)
    a, lam = 3.0, 0.2
    w, beta = torch.randn(3, 5) * 2, torch.tensor([0.0, 0.5, 1.0, 2.0, 5.0])
    exact = soft_threshold(w, lam * beta) / (1 + lam * a)
    z, _ = prox_of_potential(w, a * w, lambda y: a * y, beta, lam, num_iter=60)
    torch.testing.assert_close(z, exact, atol=1e-8, rtol=0)
    force = ns_hmc_force(w, a * w, beta, lam, lambda y: a * y, num_iter=60)
    torch.testing.assert_close(force, (w - exact) / lam, atol=1e-6, rtol=0)
    # one iteration is the prox-gradient force; with f = 0 every force is the Moreau force
    torch.testing.assert_close(ns_hmc_force(w, a * w, beta, lam, lambda y: a * y, num_iter=1),
                               prox_gradient_force(w, a * w, beta, lam))
    zero = torch.zeros_like(w)
    for force_fn in (prox_gradient_force, moreau_force):
        torch.testing.assert_close(force_fn(w, zero, beta, lam), moreau_force(w, zero, beta, lam))


def test_relative_hamiltonian_error():
    assert relative_hamiltonian_error(torch.tensor([2.0, -2.0]), torch.tensor([3.0, -2.0])) == 0.25
    assert relative_hamiltonian_error(torch.tensor([1.0]), torch.tensor([math.nan])) == math.inf


# ------------------------------------------------------- smooth/L1 split
def test_bnn_potential_l1_weights_and_smooth_part(float64):
    spec = BNNSpec(layers=[Dense(3, "tanh"), Dense(1)], input_dim=2, prior=Gaussian(1.0),
                   priors={"layers.0.weight": Laplace(0.25), "layers.1.weight": Laplace(2.0)},
                   likelihood=GaussianLikelihood(0.5))
    torch.manual_seed(3)
    x, y = torch.randn(10, 2), torch.randn(10)
    pot = BNNPotential(BNN(spec), x, y)
    beta = pot.l1_weights()
    expected = {"layers.0.weight": 4.0, "layers.0.bias": 0.0, "layers.1.weight": 0.5, "layers.1.bias": 0.0}
    for name, part in pot.unflatten(beta).items():
        assert torch.all(part == expected[name]), name
    theta = torch.randn(4, pot.dim)
    value, grad = pot.smooth_value_and_grad(theta, beta)
    full, full_grad = pot.value_and_grad(theta)
    torch.testing.assert_close(value, full - (beta * theta.abs()).sum(-1))
    torch.testing.assert_close(grad, full_grad - beta * theta.sign())
    # the smooth part has no kink: its gradient at w = 0+ and 0- agree
    sides = []
    for eps in (1e-7, -1e-7):
        t = theta.clone()
        t[:, 0] = eps
        sides.append(pot.smooth_value_and_grad(t, beta)[1][:, 0])
    torch.testing.assert_close(sides[0], sides[1], atol=1e-5, rtol=0)


def test_spike_and_slab_kink_reaches_the_bnn_potential_only_when_asked(float64):
    prior = SpikeAndSlab(v0=0.1, v1=4.0, inclusion_prob=0.3)
    beta = prior_l1_weight(prior, spike_and_slab=True)  # the kink itself: tests/models/test_l1.py
    # a BNN site with this prior gets the kink only when asked
    spec = BNNSpec(layers=[Dense(1, bias=False)], input_dim=3, prior=prior, likelihood=GaussianLikelihood(1.0))
    pot = BNNPotential(BNN(spec), torch.randn(5, 3), torch.randn(5))
    assert torch.all(pot.l1_weights() == 0)
    torch.testing.assert_close(pot.l1_weights(spike_and_slab=True), torch.full((3,), beta))


def test_pyro_model_laplace_sites_are_detected():
    def model(x=None, y=None):
        pyro.sample("a", dist.Laplace(0.0, 0.5).expand([2, 3]).to_event(2))
        pyro.sample("b", dist.Normal(0.0, 1.0))
        pyro.sample("c", dist.Laplace(1.0, 1.0))  # not centred: smooth path
        s = pyro.sample("s", dist.HalfNormal(1.0))
        pyro.sample("d", dist.Laplace(0.0, s))  # scale depends on a latent: smooth path
        with pyro.plate("p", 4):
            pyro.sample("e", dist.Laplace(0.0, 0.25))

    pot = PyroPotential(model)
    beta = pot.unflatten(pot.l1_weights())
    assert torch.all(beta["a"] == 2.0) and torch.all(beta["e"] == 4.0)
    for name in ("b", "c", "d", "s"):
        assert torch.all(beta[name] == 0.0), name


# ----------------------------------------------------- exact posteriors
@pytest.mark.parametrize("force", FORCES)
@pytest.mark.parametrize("lam", [0.01, 0.1, 1.0])
def test_laplace_1d_variance_2_and_mean_abs_1(force, lam, seed=5):
    _, draws = sample(LaplaceTarget(), num_chains=32, num_samples=250, warmup_steps=150, seed=seed,
                      force=force, lam=lam, num_steps=8, step_size=0.5, inner_steps=2)
    x = draws.samples["x"]
    assert_moments(x, np.array([0.0]), np.array([math.sqrt(2.0)]), min_ess=1000)  # Var = 2
    assert_moments(np.abs(x), np.array([1.0]), np.array([1.0]), min_ess=400)  # E|x| = 1 (|x| ~ Exp(1))
    assert draws.sample_stats["diverging"].sum() == 0


def lasso_problem(n=50, p=10, noise=1.0, scale=0.2, bias_scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    w = np.zeros(p)
    w[:3] = [2.0, -1.5, 1.0]
    y = x @ w + 0.3 + noise * rng.normal(size=n)
    spec = BNNSpec(layers=[Dense(1)], input_dim=p, prior=Gaussian(bias_scale),
                   priors={"layers.0.weight": Laplace(scale)}, likelihood=GaussianLikelihood(noise))
    reference = bayesian_lasso_gibbs(x, y, noise, scale, bias_scale, num_chains=100, num_draws=600, seed=seed)
    dtype = torch.get_default_dtype()
    return spec, torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype), reference


LASSO = lasso_problem()


@pytest.mark.parametrize("force, options", [("moreau", {}), ("prox-gradient", {}), ("ns-hmc", {"inner_steps": 3})],
                         ids=FORCES)
def test_bayesian_lasso_matches_gibbs_reference(force, options, seed=1):
    spec, x, y, reference = LASSO
    r = run(spec, (x, y), engine="proximal_hmc", num_samples=150, warmup_steps=200, num_chains=12, seed=seed,
            force=force, num_steps=8, **options)
    assert_moments_agree(regression_draws(r.samples), reference, min_ess=400)
    stats = r.sample_stats
    assert stats["diverging"].sum() == 0
    assert 0.5 < stats["acceptance_rate"].mean() < 0.99


@pytest.mark.slow
def test_bayesian_lasso_matches_long_nuts_run():
    spec, x, y, reference = LASSO
    nuts = run(spec, (x, y), engine="nuts", num_samples=2000, warmup_steps=1000, num_chains=4, seed=3)
    assert_moments_agree(regression_draws(nuts.samples), reference, min_ess=1000)
    phmc = run(spec, (x, y), engine="proximal_hmc", num_samples=1000, warmup_steps=500, num_chains=16, seed=4)
    assert_moments_agree(regression_draws(phmc.samples), regression_draws(nuts.samples), min_ess=1000)


def test_lam_tune_picks_a_factor_from_the_grid():
    spec, x, y, _ = LASSO
    pyro.set_rng_seed(6)
    kernel = ProximalHMC(BNN(spec), num_chains=8, num_steps=8, lam="tune")
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=120, disable_progbar=True)
    mcmc.run(x, y)
    tuning = kernel.diagnostics()["lam_tuning"]
    assert tuning["factor"] in tuning["grid"] and np.all(np.isfinite(tuning["errors"]))
    assert kernel.lam == pytest.approx(tuning["factor"] * kernel.step_size)
    # by hand, on a custom grid, after sampling
    result = kernel.tune_lam(grid=[0.5, 1e3])
    assert result["errors"][0] < result["errors"][1] and result["factor"] == 0.5


# ------------------------------------------------------------- NaN, errors
def test_nan_potential_is_a_rejected_counted_divergence(seed=7):
    kernel, draws = sample(LaplaceTarget(upper=1.0), num_chains=16, num_samples=400, warmup_steps=150, seed=seed,
                           num_steps=8, step_size=0.5)
    diverging = assert_nan_region_rejected(kernel, draws)
    assert np.all(np.isinf(draws.sample_stats["energy_error"][diverging]))
    assert np.all(np.isfinite(draws.sample_stats["lp"]))
    x = draws.samples["x"]
    # still exact: exp(-|x|) truncated to x <= 1
    z = 2 - math.exp(-1)
    mean = -2 * math.exp(-1) / z
    second = (4 - 5 * math.exp(-1)) / z
    assert_moments(x, np.array([mean]), np.array([math.sqrt(second - mean ** 2)]), min_ess=250)


@pytest.mark.parametrize(
    "options, name",
    [
        ({"step_size": 0.0}, "step_size"),
        ({"num_steps": 0}, "num_steps"),
        ({"num_steps": 2.5}, "num_steps"),
        ({"lam": -1.0}, "lam"),
        ({"lam": "auto"}, "lam"),
        ({"force": "subgradient"}, "force"),
        ({"target_accept": 1.0}, "target_accept"),
        ({"step_jitter": 1.0}, "step_jitter"),
        ({"inner_steps": 0}, "inner_steps"),
        ({"sparsity_threshold": 0.0}, "sparsity_threshold"),
        ({"sparsity_sites": "layers.0.weight"}, "sparsity_sites"),
        ({"chain_method": "parallel"}, "chain_method"),
    ],
    ids=["step0", "steps0", "steps-float", "lam-neg", "lam-str", "force", "accept1", "jitter1", "inner0",
         "threshold0", "sites-str", "chain-method"],
)
def test_bad_options_raise_naming_the_option(options, name):
    with pytest.raises(ValueError, match=name):
        ProximalHMC(potential=LaplaceTarget(), **options)
    spec, x, y, _ = LASSO
    with pytest.raises(ValueError, match=name):
        run(spec, (x, y), engine="proximal_hmc", num_samples=5, warmup_steps=5, **options)


def test_unknown_sparsity_site_and_no_l1_part_are_reported():
    spec, x, y, _ = LASSO
    with pytest.raises(ValueError, match="sparsity_sites: unknown site.*'layers.9.weight'"):
        run(spec, (x, y), engine="proximal_hmc", num_samples=5, warmup_steps=5, sparsity_sites=["layers.9.weight"])
    gaussian = BNNSpec(layers=[Dense(1)], input_dim=10, prior=Gaussian(1.0), likelihood=GaussianLikelihood(1.0))
    with pytest.warns(UserWarning, match="no L1"):
        run(gaussian, (x, y), engine="proximal_hmc", num_samples=5, warmup_steps=5, num_chains=2)
    with pytest.raises(ValueError, match="not set up"):
        ProximalHMC(potential=LaplaceTarget()).tune_lam()


# ------------------------------------------------------------- Pyro driver
def test_engine_vectorized_stats_and_sparsity():
    assert "proximal_hmc" in ENGINES
    spec, x, y, _ = LASSO
    r = run(spec, (x, y), engine="proximal_hmc", num_samples=30, warmup_steps=40, num_chains=6, seed=8,
            sparsity_threshold=0.05)
    assert r.samples["layers.0.weight"].shape == (6, 30, 1, 10)
    for name in ProximalHMC.stat_names:
        assert r.sample_stats[name].shape == (6, 30), name
    w = r.samples["layers.0.weight"].reshape(6, 30, -1)
    np.testing.assert_allclose(r.sample_stats["sparsity"], (np.abs(w) < 0.05).mean(-1), atol=1e-6)
    assert np.all(r.sample_stats["n_steps"] == 20)
    step = r.sample_stats["step_size"]
    # jitter 0.2 around one value: every step in [0.8, 1.2] x the frozen step size, and jittered
    assert 1.2 < step.max() / step.min() <= 1.2 / 0.8 + 1e-9
    assert r.options["force"] == "moreau" and r.options["lam"] is None


def test_sequential_chains_and_a_plain_pyro_model():
    spec, x, y, _ = LASSO
    r = run(spec, (x, y), engine="proximal_hmc", num_samples=10, warmup_steps=10, num_chains=2, seed=9,
            chain_method="sequential")
    assert r.num_chains == 2 and r.sample_stats["sparsity"].shape == (2, 10)

    def model(x=None, y=None):  # the kernel calls a plain model with MCMC.run's (x, y)
        pyro.sample("w", dist.Laplace(0.0, 1.0).expand([3]).to_event(1))

    pyro.set_rng_seed(10)
    kernel = ProximalHMC(model, num_chains=2, num_steps=4, chain_method="sequential")
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=20, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the Laplace site is found: no "plain HMC" warning
        mcmc.run()
    assert kernel.diagnostics()["num_l1_coordinates"] == 3
    assert split_mcmc(mcmc).samples["w"].shape == (2, 20, 3)
