"""The SVI toolkit: KL weights, closed-form vs Monte Carlo KL, the three gradient
estimators (same expectation; STL exact at the optimum of a conjugate model),
minibatch objectives with known optima, the engine's options, traces and errors."""

from bnnzoo.diagnostics import to_inference_data
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnnzoo.inference import VIOptions, fit_mean_field, kl_weights, run
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.inference.vi import (MeanFieldGuide, elbo_terms, gaussian_kl, initial_loc, inverse_softplus,
                                 num_batches, surrogate_loss)
from bnnzoo.models import (BNN, BNNSpec, Categorical, Dense, Gaussian, GaussianLikelihood, Horseshoe, Laplace,
                           SpikeAndSlab)
from bnnzoo.models.spec import Conv2d
from bnnzoo.experiments import compare
from tests.support.targets import linear_regression

DT = torch.float64


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


def _normal_log_prob(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


class ConjugateNormal:
    """``theta ~ N(0, s0^2 I_D)``, ``y_n ~ N(theta, noise^2 I_D)``: the posterior is
    a diagonal Gaussian, so the mean-field optimum is the exact posterior."""

    def __init__(self, num_data=50, dim=3, noise=1.0, prior_scale=1.0, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = 1.0 + noise * torch.randn(num_data, dim, generator=g, dtype=DT)
        self.noise, self.prior_scale = noise, prior_scale
        self.num_data, self.dim = num_data, dim

    def gaussian_prior_scale(self):
        return torch.full((self.dim,), self.prior_scale, dtype=DT)

    def log_prior_and_likelihood(self, theta, rows=None, skip_gaussian=False):
        prior = torch.zeros(theta.shape[:-1], dtype=DT) if skip_gaussian else \
            _normal_log_prob(theta, 0.0, self.prior_scale).sum(-1)
        y = self.y if rows is None else self.y[rows]
        lik = _normal_log_prob(y, theta.unsqueeze(-2), self.noise).sum((-1, -2))
        return prior, lik * self.num_data / y.shape[0]

    def __call__(self, theta):
        prior, lik = self.log_prior_and_likelihood(theta)
        return -(prior + lik)

    def posterior(self, kl_weight=1.0):
        """Mean and sd of the optimum of ``w KL + NLL`` (the posterior when w = 1): the
        tempered ``q ~ (p^w L)^(1/w)``, mean of the prior^w posterior, variance x w."""
        precision = kl_weight / self.prior_scale ** 2 + self.num_data / self.noise ** 2
        return self.y.sum(0) / self.noise ** 2 / precision, torch.full((self.dim,), (kl_weight / precision) ** 0.5)

    def neg_elbo(self, loc, rho):
        """Closed-form KL + E_q[NLL]."""
        scale = F.softplus(rho)
        nll = (((self.y - loc) ** 2).sum(0) + self.num_data * scale ** 2) / (2 * self.noise ** 2)
        const = self.num_data * (math.log(self.noise) + 0.5 * math.log(2 * math.pi))
        return gaussian_kl(loc, scale, self.prior_scale).sum() + nll.sum() + self.dim * const


def _gradient(potential, loc, rho, eps, estimator, kl, baseline=0.0):
    loc = loc.clone().requires_grad_(True)
    rho = rho.clone().requires_grad_(True)
    prior_scale = None if kl == "mc" else potential.gaussian_prior_scale()
    terms = elbo_terms(loc, rho, eps, lambda t: potential.log_prior_and_likelihood(t, None, prior_scale is not None),
                       estimator, prior_scale)
    surrogate_loss(terms, 1.0, estimator, baseline).backward()
    return torch.cat([loc.grad, rho.grad])


# ---------------------------------------------------------------- KL weights
@pytest.mark.parametrize("m", [1, 2, 7, 64, 3000])
@pytest.mark.parametrize("scheme", ["uniform", "blundell", 2.0, 0.3, 1.0])
def test_kl_weights_sum_to_one_per_epoch(m, scheme):
    pi = kl_weights(m, scheme)
    assert pi.shape == (m,) and torch.isfinite(pi).all() and (pi >= 0).all()
    assert pi.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_kl_weight_formulas():
    m = 6
    i = torch.arange(1, m + 1, dtype=DT)
    torch.testing.assert_close(kl_weights(m, "blundell"), 2.0 ** (m - i) / (2.0 ** m - 1))
    torch.testing.assert_close(kl_weights(m, 0.5), kl_weights(m, "blundell"))
    torch.testing.assert_close(kl_weights(m, 1.0), kl_weights(m, "uniform"))
    torch.testing.assert_close(kl_weights(m, 2.0), kl_weights(m, "blundell").flip(0))
    torch.testing.assert_close(kl_weights(m, "none"), torch.ones(m, dtype=DT))
    assert kl_weights(1, "none").item() == kl_weights(1, "blundell").item() == 1.0
    assert num_batches(100, None) == num_batches(100, 100) == num_batches(100, 500) == 1
    assert num_batches(100, 30) == 4


@pytest.mark.parametrize("scheme", ["blundel", -1.0, 0.0, True, math.nan, None])
def test_kl_weights_bad_scheme(scheme):
    with pytest.raises(ValueError, match="kl_weighting .*choose one of uniform, blundell, none"):
        kl_weights(5, scheme)


# ---------------------------------------------------------------- KL
def test_gaussian_kl_matches_torch():
    loc, scale = torch.tensor([0.3, -1.2, 2.0]), torch.tensor([0.1, 1.5, 0.7])
    exact = torch.distributions.kl_divergence(torch.distributions.Normal(loc, scale),
                                              torch.distributions.Normal(0.0, 0.8))
    torch.testing.assert_close(gaussian_kl(loc, scale, 0.8), exact)


def _small_bnn(prior, priors=None, likelihood=None):
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(1)], input_dim=2, prior=prior, priors=priors or {},
                   likelihood=likelihood or GaussianLikelihood(0.5))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=g)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(30, generator=g)
    return BNNPotential(BNN(spec), x, y)


def test_analytic_and_monte_carlo_kl_agree_for_gaussian_priors():
    potential = _small_bnn(Gaussian(0.7), priors={"layers.1": Gaussian(2.0)})
    scale = potential.gaussian_prior_scale()
    assert torch.isfinite(scale).all() and set(scale.unique().tolist()) == {0.7, 2.0}
    g = torch.Generator().manual_seed(2)
    loc = torch.randn(potential.dim, generator=g)
    rho = torch.randn(potential.dim, generator=g) - 1

    def kl_only(theta, skip):
        prior, _ = potential.log_prior_and_likelihood(theta, None, skip)
        return prior, torch.zeros_like(prior)

    analytic = elbo_terms(loc, rho, torch.zeros(1, potential.dim), lambda t: kl_only(t, True), "reparam", scale)
    assert analytic.kl_mc.abs().max().item() < 1e-12  # nothing left to Monte Carlo
    batches, grads_mc = [], []
    for _ in range(10):
        l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
        mc = elbo_terms(l, r, torch.randn(4000, potential.dim, generator=g), lambda t: kl_only(t, False), "reparam")
        assert mc.kl_analytic.item() == 0.0
        mc.kl.mean().backward()
        batches.append(mc.kl.mean().item())
        grads_mc.append(torch.cat([l.grad, r.grad]))
    est, se = np.mean(batches), np.std(batches, ddof=1) / math.sqrt(len(batches))
    assert abs(est - analytic.kl.item()) < 5 * se
    # ... and so do their gradients
    l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
    gaussian_kl(l, F.softplus(r), scale).sum().backward()
    exact = torch.cat([l.grad, r.grad])
    grads_mc = torch.stack(grads_mc)
    se = grads_mc.std(0) / math.sqrt(len(grads_mc))
    assert ((grads_mc.mean(0) - exact).abs() <= 5 * se + 1e-9).all()


def test_monte_carlo_kl_includes_the_jacobian_of_constrained_sites():
    # per draw, kl + nll must equal log q(theta) + U(theta) exactly (kl="mc"), for a
    # horseshoe (positive scale sites) and a learned noise variance
    potential = _small_bnn(Gaussian(1.0), priors={"layers.0.weight": Horseshoe(0.5)},
                           likelihood=GaussianLikelihood("learned"))
    scale = potential.gaussian_prior_scale()
    assert torch.isnan(scale).any() and torch.isfinite(scale).any()
    g = torch.Generator().manual_seed(3)
    loc = 0.3 * torch.randn(potential.dim, generator=g)
    rho = torch.full((potential.dim,), inverse_softplus(0.2))
    eps = torch.randn(5, potential.dim, generator=g)
    terms = elbo_terms(loc, rho, eps, lambda t: potential.log_prior_and_likelihood(t), "reparam")
    theta = loc + F.softplus(rho) * eps
    log_q = torch.distributions.Normal(loc, F.softplus(rho)).log_prob(theta).sum(-1)
    torch.testing.assert_close(terms.kl + terms.nll, log_q + potential(theta))
    # the closed form on the Gaussian part changes the estimate, not its expectation
    auto = [elbo_terms(loc, rho, torch.randn(2000, potential.dim, generator=g),
                       lambda t: potential.log_prior_and_likelihood(t, None, True), "reparam", scale)
            for _ in range(8)]
    mc = [elbo_terms(loc, rho, torch.randn(2000, potential.dim, generator=g),
                     lambda t: potential.log_prior_and_likelihood(t), "reparam") for _ in range(8)]
    a = np.array([t.kl.mean().item() for t in auto])
    b = np.array([t.kl.mean().item() for t in mc])
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert abs(a.mean() - b.mean()) < 5 * se


# ---------------------------------------------------------------- estimators
@pytest.mark.parametrize(
    "estimator, kl, particles, baseline",
    [("reparam", "mc", 2000, 0.0), ("reparam", "auto", 2000, 0.0), ("stl", "mc", 2000, 0.0),
     ("score", "mc", 20000, "loo"), ("score", "auto", 20000, "loo")],
    ids=["reparam-mc", "reparam-analytic", "stl", "score-mc", "score-analytic"],
)
def test_estimators_are_unbiased(estimator, kl, particles, baseline):
    potential = ConjugateNormal(num_data=20)
    loc = torch.tensor([0.2, -0.5, 1.5])
    rho = torch.tensor([-1.0, 0.0, -2.0])
    l, r = loc.clone().requires_grad_(True), rho.clone().requires_grad_(True)
    potential.neg_elbo(l, r).backward()
    exact = torch.cat([l.grad, r.grad])
    g = torch.Generator().manual_seed(4)
    grads = torch.stack([_gradient(potential, loc, rho, torch.randn(particles, 3, generator=g), estimator, kl,
                                   baseline) for _ in range(10)])
    se = grads.std(0) / math.sqrt(len(grads))
    assert ((grads.mean(0) - exact).abs() < 5 * se + 1e-8).all(), (grads.mean(0), exact, se)


def test_stl_has_zero_variance_at_the_optimum_of_a_conjugate_model():
    potential = ConjugateNormal()
    mean, sd = potential.posterior()
    loc, rho = mean, torch.log(torch.expm1(sd))  # q = the exact posterior
    g = torch.Generator().manual_seed(5)
    eps = [torch.randn(1, 3, generator=g) for _ in range(200)]
    grads = {(est, kl): torch.stack([_gradient(potential, loc, rho, e, est, kl) for e in eps])
             for est, kl in [("stl", "mc"), ("reparam", "mc"), ("reparam", "auto")]}
    for key, gr in grads.items():  # all unbiased: zero mean at the optimum
        assert (gr.mean(0).abs() < 5 * gr.std(0) / math.sqrt(len(gr)) + 1e-9).all(), key
    assert grads["stl", "mc"].abs().max().item() < 1e-9  # exactly zero, draw by draw
    for key in [("reparam", "mc"), ("reparam", "auto")]:
        assert (grads[key].var(0)[:3] > 1.0).all(), key  # the means' gradients are noisy


# ---------------------------------------------------------------- fits
@pytest.mark.parametrize("scheme, kl_weight", [("uniform", 1.0), ("none", 5.0)], ids=["uniform", "none"])
def test_minibatch_fit_reaches_the_optimum_of_its_objective(scheme, kl_weight):
    # uniform weights: the exact posterior; "none": the full KL in each of the M = 5
    # minibatches, i.e. the optimum of 5 KL + NLL (prior^5, and the entropy x 5 too)
    potential = ConjugateNormal(num_data=100, prior_scale=0.2)
    torch.manual_seed(0)
    fit = fit_mean_field(potential, num_steps=1000, lr=0.1, lr_decay=0.01, batch_size=20, kl_weighting=scheme,
                         estimator="stl", num_particles=4)
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
    fit = fit_mean_field(potential, num_steps=50, lr=0.1, lr_decay=0.01, init_rho=-10.0, scale_lr=1e-9)
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


# ---------------------------------------------------------------- the engine
def test_svi_engine_exports_traces_and_appears_in_compare():
    problem = linear_regression(n=60)
    engines = [
        {"kind": "svi", "label": "stl-blundell", "num_steps": 120, "batch_size": 15, "estimator": "stl",
         "kl_weighting": "blundell", "optimizer": "adabound", "schedule": "plateau"},
        {"kind": "svi", "label": "score", "num_steps": 60, "estimator": "score", "num_particles": 4, "lr": 0.05},
    ]
    table, runs = compare(problem.spec, (problem.x, problem.y), engines=engines, num_samples=50, num_chains=2)
    assert list(table.index) == ["stl-blundell", "score"]
    assert np.isfinite(table["rmse"]).all()
    r = runs["stl-blundell"]
    assert r.vi.loss.shape == (2, 120) and r.vi.num_batches == 4
    assert r.vi.guide["loc"].shape == (2, 4)
    idata = to_inference_data(r)
    trace = idata.vi_trace
    for name in ("loss", "elbo", "nll", "kl", "lr_loc", "lr_scale"):
        assert trace[name].dims == ("chain", "step") and trace[name].shape == (2, 120), name
    np.testing.assert_allclose(trace["elbo"].values, -(trace["kl"].values + trace["nll"].values))
    assert idata.posterior["layers.0.weight"].shape == (2, 50, 1, 3)
    assert idata.posterior.attrs["option.estimator"] == "stl"


@pytest.mark.parametrize("prior", [Laplace(1.0), SpikeAndSlab(), Horseshoe(1.0)], ids=["laplace", "ss", "horseshoe"])
def test_non_gaussian_priors_use_monte_carlo_kl(prior):
    problem = linear_regression(n=30)
    spec = BNNSpec(layers=[Dense(1)], input_dim=3, prior=prior, likelihood=GaussianLikelihood(0.5))
    r = run(spec, (problem.x, problem.y), engine="svi", num_samples=20, num_chains=1, num_steps=150, lr=0.05)
    kl = r.vi.terms["kl"][0]
    assert np.isfinite(kl).all() and np.isfinite(r.vi.loss).all()
    assert kl[-20:].mean() < kl[:20].mean()
    with pytest.raises(ValueError, match="kl='analytic' needs an iid Gaussian prior.*layers.0.weight"):
        run(spec, (problem.x, problem.y), engine="svi", num_samples=5, num_chains=1, kl="analytic")


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("estimator", "stll", "estimator 'stll': choose one of reparam, stl, score"),
        ("kl_weighting", "blundel", "kl_weighting 'blundel': choose one of uniform, blundell, none"),
        ("kl_weighting", -2.0, "or a positive number lambda"),
        ("kl", "exact", "kl 'exact': choose one of auto, analytic, mc"),
        ("optimizer", "adamw", "optimizer 'adamw': unknown optimizer"),
        ("scale_optimizer", {"kind": "sgd", "momentun": 0.9}, "scale_optimizer 'sgd': unknown option"),
        ("schedule", "cosine", "schedule 'cosine': choose one of exponential, plateau, constant"),
        ("plateau_factor", 1.5, "plateau_factor must be strictly between 0 and 1"),
        ("plateau_metric", "loss", "plateau_metric 'loss': choose one of split, elbo"),
        ("batch_size", 0, "batch_size must be an integer >= 1"),
        ("num_particles", 1.5, "num_particles must be an integer >= 1"),
        ("scale_lr", -1e-3, "scale_lr must be a positive number"),
        ("init_rho", math.inf, "init_rho must be a finite number"),
        ("init_loc", "xavier", "init_loc 'xavier': choose one of uniform, kaiming"),
        ("score_baseline", "yes", "score_baseline must be True or False"),
    ],
)
def test_bad_options_fail_before_fitting(option, value, message):
    problem = linear_regression(n=10)
    with pytest.raises(ValueError, match=message):
        run(problem.spec, (problem.x, problem.y), engine="svi", num_samples=5, num_chains=1, **{option: value})


def test_stl_with_analytic_kl_is_refused():
    with pytest.raises(ValueError, match="estimator 'stl' acts on the Monte Carlo log q"):
        VIOptions(estimator="stl", kl="analytic")
    with pytest.raises(ValueError, match="baseline 'loo' needs num_particles >= 2"):
        potential = ConjugateNormal()
        _gradient(potential, torch.zeros(3), torch.zeros(3), torch.randn(1, 3), "score", "mc", "loo")


def test_paper002_example_runs(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "paper002_vi_practices.py"
    spec = importlib.util.spec_from_file_location("paper002_vi_practices", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.set_default_dtype(torch.float32)  # as a user runs it
    threads = torch.get_num_threads()
    try:
        example.main(["--epochs", "1", "--seeds", "1", "--search", "1", "--jobs", "1", "--only", "kl_weighting",
                      "optimizers", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    summary = (tmp_path / "summary.md").read_text()
    assert "## kl_weighting" in summary and "Blundell (lambda=1/2)" in summary and "| adabound |" in summary
    epochs = __import__("pandas").read_csv(tmp_path / "epochs.csv")
    assert len(epochs) == 4 + 3 and epochs.val_acc.between(0, 1).all()
    assert (tmp_path / "optimizers.png").stat().st_size > 0
