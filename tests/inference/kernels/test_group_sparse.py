"""Group spike-and-slab SGHMC (paper 004): the update rule and the E-step as pure
functions, hard pruning, the kernel and the optimizer giving the same updates,
variable selection on a small synthetic problem, draws at cycle ends, statistics
and the InferenceData export, divergences and bad options."""

from bnnzoo.diagnostics import to_inference_data
import math

import numpy as np
import pytest
import torch

from bnnzoo.diagnostics import summary
from bnnzoo.inference import BNNPotential, GroupSparseSGHMC, GroupSparseSGHMCOptimizer, run
from bnnzoo.inference.group_em import e_step, em_due, group_sparse_sghmc_update
from bnnzoo.models import BNN, BNNSpec, Dense, Gaussian, GaussianLikelihood, GroupSpikeAndSlab
from tests.support import arviz_calls as az


def _spec(p=6, hidden=None, group="auto"):
    layers = [Dense(hidden, "relu"), Dense(1)] if hidden else [Dense(1, bias=False)]
    return BNNSpec(layers=layers, input_dim=p, prior=Gaussian(1.0),
                   priors={"layers.0.weight": GroupSpikeAndSlab(group=group)}, likelihood=GaussianLikelihood(0.5))


def _iterate(kernel, theta):
    """One SG-MCMC iteration of the kernel's sampler from ``theta`` (the rest of its state as it is),
    kept as the kernel's state: ``(theta', U, diverging)``."""
    kernel.state, value, bad = kernel.sampler.iterate(kernel.state._replace(position=theta))
    return kernel.state.position, value, bad


def _kernel(p=6, n=32, seed=0, **options):
    torch.manual_seed(seed)
    x = torch.randn(n, p)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(n)
    model = BNN(_spec(p))
    kernel = GroupSparseSGHMC(potential=BNNPotential(model, x, y), **options)
    kernel.setup(0)
    return kernel, model, x, y


# ------------------------------------------------------------ pure pieces
def test_update_rule_is_the_papers_formula():
    torch.manual_seed(0)
    w, m, rho, xi, g, xi_new = (torch.randn(3, 4) for _ in range(6))
    decay, c2, t, n, eta, b1, b2 = 0.3, 0.04, 0.1, 50, 0.2, 0.1, 0.9
    out = group_sparse_sghmc_update(w, m, rho, xi, g, decay, c2, t, n, eta, b1, b2, new_noise=xi_new)
    c = math.sqrt(c2)
    tau = torch.sigmoid(rho)
    want_rho = rho - eta * (t**2 * c**3 * decay * tau + t * c**1.5 * xi * g - 1 / (tau * n))
    want_m = b1 * m - c**2 * b2 * (g + decay * w) + math.sqrt(2 + 2 * b1**2) * c**1.5 * t * xi_new
    want_w = w + torch.sigmoid(want_rho) * want_m
    for got, want in zip(out, (want_w, want_m, want_rho, xi_new)):
        torch.testing.assert_close(got, want)


def test_e_step_switches_decay_at_the_thresholds():
    # input columns (groups of a [out, in] weight) with mean w^2 of 5e-4, 5e-3, 1e-2 (the soft threshold) and 0.1
    power = torch.tensor([5e-4, 5e-3, 1e-2, 0.1])
    w = power.sqrt().expand(3, 4).clone()
    keep = torch.ones(3, 4, dtype=torch.bool)
    decay, keep = e_step(w, (-2,), keep, soft_threshold=1e-2, hard_threshold=1e-3, slab_decay=5e-4, spike_decay=0.1)
    torch.testing.assert_close(decay[0], torch.tensor([0.1, 0.1, 5e-4, 5e-4]))
    assert keep.tolist() == [[False, True, True, True]] * 3
    # the soft mask is re-decided every time, the hard one only grows
    decay, keep = e_step(10 * w, (-2,), keep, 1e-2, 1e-3, 5e-4, 0.1)
    torch.testing.assert_close(decay[0], torch.tensor([5e-4, 5e-4, 5e-4, 5e-4]))
    assert keep.tolist() == [[False, True, True, True]] * 3
    # output groups of the same weight, and no groups (each weight alone)
    decay, _ = e_step(w, (-1,), torch.ones(3, 4, dtype=torch.bool), 1e-2, 1e-3, 5e-4, 0.1)
    assert torch.all(decay == 5e-4)  # every row has mean w^2 = 0.0289
    decay, _ = e_step(w, (), torch.ones(3, 4, dtype=torch.bool), 1e-2, 1e-3, 5e-4, 0.1)
    torch.testing.assert_close(decay[0], torch.tensor([0.1, 0.1, 5e-4, 5e-4]))


def test_em_schedule():
    due = [k for k in range(1, 40) if em_due(k, every=5, warmup=2)]
    assert due == [11, 16, 21, 26, 31, 36]
    assert em_due(1, 1, 0) and em_due(2, 1, 0)


# ------------------------------------------------------------ pruning
def test_hard_pruned_weights_stay_zero_and_get_no_updates():
    # prune_patience=1: prune at the first E-step that finds a group below the threshold (the guard is tested below)
    kernel, _, _, _ = _kernel(em_warmup=0, em_every=1, step_size=0.05, schedule="constant", prune_patience=1)
    theta = torch.full((1, 6), 0.5)
    theta[0, [2, 4]] = 0.01  # mean w^2 = 1e-4 < hard_threshold: pruned by the first E-step
    theta[0, :2] = torch.tensor([1.0, -0.5])  # y = x_0 - 0.5 x_1
    theta = _iterate(kernel, theta)[0]
    pruned = torch.tensor([False, False, True, False, True, False])
    assert (theta[0, pruned] == 0).all() and (theta[0, ~pruned] != 0).all()
    momentum, rho = (a[0, pruned].clone() for a in kernel.state.aux[:2])
    for _ in range(20):
        theta = _iterate(kernel, theta)[0]
        assert (theta[0, pruned] == 0).all()
        torch.testing.assert_close(kernel.state.aux[0][0, pruned], momentum, rtol=0, atol=0)
        torch.testing.assert_close(kernel.state.aux[1][0, pruned], rho, rtol=0, atol=0)
    keep = kernel.em_state.keep
    assert not keep[0, pruned].any() and keep[0, :2].all()  # y depends on inputs 0 and 1
    assert (kernel.em_state.decay[0, :2] == 5e-4).all()  # in the slab


def test_optimizer_and_kernel_give_identical_updates():
    options = dict(em_warmup=1, em_every=2, soft_threshold=0.05, hard_threshold=0.02, spike_decay=0.3,
                   init_momentum=0.01, rho_lr=0.5, prune_patience=2)
    kernel, model, x, y = _kernel(step_size=0.05, schedule="constant", **options)
    start = torch.tensor([[0.8, -0.6, 0.2, 0.1, -0.05, 0.3]])  # groups in the slab, the spike, and pruned later
    weight = start.reshape(1, 6).clone().requires_grad_(True)
    optimizer = GroupSparseSGHMCOptimizer([weight], num_data=32, lr=0.05, group="input", **options)
    theta = start.clone()
    for k in range(8):
        torch.manual_seed(100 + k)
        theta = _iterate(kernel, theta)[0]
        torch.manual_seed(100 + k)
        loss = -model.log_likelihood({"layers.0.weight": weight}, x, y).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.testing.assert_close(weight.detach(), theta, rtol=1e-5, atol=1e-6)
    state = optimizer.state[weight]
    torch.testing.assert_close(state["momentum"], kernel.state.aux[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state["rho"], kernel.state.aux[1], rtol=1e-5, atol=1e-6)
    assert torch.equal(state["keep"], kernel.em_state.keep) and not state["keep"].all()
    assert torch.equal(state["decay"], kernel.em_state.decay)


def test_optimizer_trains_a_torch_module():
    torch.manual_seed(0)
    x = torch.randn(256, 12)
    y = (x[:, :2].sum(-1, keepdim=True)).tanh()
    net = torch.nn.Sequential(torch.nn.Linear(12, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    optimizer = GroupSparseSGHMCOptimizer([{"params": [net[0].weight], "group": "input"},
                                           {"params": [net[0].bias, net[2].weight, net[2].bias], "group": None}],
                                          num_data=256, lr=0.1, em_warmup=20, em_every=4)
    before = torch.nn.functional.mse_loss(net(x), y).item()
    for _ in range(600):
        rows = torch.randint(0, 256, (64,))
        loss = torch.nn.functional.mse_loss(net(x[rows]), y[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert torch.nn.functional.mse_loss(net(x), y).item() < 0.5 * before
    kept = optimizer.state[net[0].weight]["keep"][0]
    assert kept[:2].all() and (net[0].weight[:, ~kept] == 0).all()


# ------------------------------------------------------- variable selection
def test_relevant_input_groups_survive_and_irrelevant_ones_are_pruned():
    # 30 inputs, of which the first 3 matter
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 30, generator=generator)
    y = 2 * torch.tanh(x[:, 0]) - 1.5 * x[:, 1] + x[:, 2] + 0.3 * torch.randn(1024, generator=generator)
    spec = BNNSpec(layers=[Dense(5, "relu"), Dense(1)], input_dim=30, prior=Gaussian(1.0),
                   priors={"layers.0.weight": GroupSpikeAndSlab()}, likelihood=GaussianLikelihood(0.5))
    r = run(spec, (x, y), engine="sghmc_group_ss", num_samples=1, warmup_steps=1200, num_chains=2, seed=0,
            batch_size=256, cycle_length=400, step_size=0.1, em_warmup=100, init_radius=0.1, spike_decay=0.5,
            soft_threshold=0.02)
    kept = r.pruning_mask["layers.0.weight"][:, 0, :]  # [chain, input]
    assert kept[:, :3].all(), kept[:, :3]
    assert not kept[:, 3:].any(), np.flatnonzero(kept[:, 3:])
    w = r.samples["layers.0.weight"][:, -1]
    assert (w[:, :, 3:] == 0).all() and (w[:, :, :3] != 0).any(1).all()
    for name in ("active_groups[layers.0.weight]", "slab_groups[layers.0.weight]"):
        assert r.sample_stats[name][:, -1].tolist() == [3.0, 3.0]
    np.testing.assert_allclose(r.sample_stats["sparsity"][:, -1], 27 / 30)


# ------------------------------------------------------ draws and export
@pytest.fixture(scope="module")
def small_run():
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x[:, 0] + 0.3 * torch.randn(64)
    return run(_spec(8, hidden=3), (x, y), engine="sghmc_group_ss", num_samples=4, warmup_steps=7, num_chains=2,
               seed=0, batch_size=16, cycle_length=10, em_warmup=1, init_radius=0.3, step_size=1e-2)


def test_draws_are_cycle_ends(small_run):
    stats = small_run.sample_stats
    smallest = 0.5 * 1e-2 * (math.cos(math.pi * 9 / 10) + 1)  # the schedule at the last step of a cycle
    np.testing.assert_allclose(stats["step_size"], smallest, rtol=1e-5)
    np.testing.assert_allclose(stats["temperature"], 64 ** -0.5, rtol=1e-5)
    for name in ("lp", "sparsity", "active_groups[layers.0.weight]", "slab_groups[layers.0.weight]", "diverging"):
        assert stats[name].shape == (2, 4), name
        assert np.isfinite(stats[name]).all(), name
    assert (stats["active_groups[layers.0.weight]"] <= 8).all()
    assert (stats["slab_groups[layers.0.weight]"] <= stats["active_groups[layers.0.weight]"]).all()


def test_inference_data_summary_and_prediction(small_run):
    idata = to_inference_data(small_run)
    assert idata.posterior["layers.0.weight"].shape == (2, 4, 3, 8)
    for name in ("step_size", "sparsity", "active_groups[layers.0.weight]", "lp", "diverging"):
        assert name in idata.sample_stats, name
    assert idata.sample_stats.attrs["engine"] == "sghmc_group_ss"
    assert "cycle" in idata.sample_stats.attrs["iterations_per_draw"]
    assert "log_likelihood" in az.groups(idata)
    table = summary(small_run)
    assert np.isfinite(table.loc["layers.1.bias[0]", "mean"])
    assert small_run.notes["failed"] == table.attrs["failed"] == [False, False]
    assert small_run.predict(torch.randn(5, 8)).shape == (2, 4, 5, 1)
    assert small_run.pruning_mask["layers.0.weight"].shape == (2, 3, 8)


def test_non_finite_step_is_a_rejected_counted_divergence():
    kernel, _, _, _ = _kernel(num_chains=2, step_size=0.05, schedule="constant")
    theta = torch.full((2, 6), 0.3)
    real_force = kernel.sampler.force

    def force(state, theta, rows, iteration, last=True):
        value, grad, components = real_force(state, theta, rows, iteration, last)
        grad[1, 0] = math.nan
        return value, grad, components

    kernel.sampler.force = force
    new, _, bad = _iterate(kernel, theta)
    assert bad.tolist() == [False, True]
    assert torch.equal(new[1], theta[1]) and not torch.equal(new[0], theta[0])
    assert all(torch.isfinite(a).all() for a in kernel.state.aux)


def test_fan_in_initialisation():
    kernel, _, _, _ = _kernel(p=6)
    weight = kernel.initial_params["layers.0.weight"]
    assert weight.shape == (1, 6) and weight.abs().max() < 1 / math.sqrt(6) and weight.abs().max() > 0


# ------------------------------------------------------------ bad options
@pytest.mark.parametrize("options, message", [
    ({"momentum": 1.5}, r"momentum must be in \[0, 1\], got 1.5"),
    ({"grad_scale": 0.0}, "grad_scale must be in"),
    ({"rho_lr": -1.0}, "rho_lr must be a positive number"),
    ({"temperature": 0.0}, "temperature must be a positive number"),
    ({"spike_decay": -0.1}, "spike_decay must be a number >= 0 or 'prior'"),
    ({"slab_decay": "prio"}, "slab_decay must be a number >= 0 or 'prior', got 'prio'"),
    ({"hard_threshold": math.nan}, "hard_threshold must be a number >= 0"),
    ({"em_warmup": -1}, "em_warmup must be an integer >= 0"),
    ({"em_every": 0}, "em_every must be a positive integer"),
    ({"step_size": 0.0}, "step_size must be a positive number"),
    ({"schedule": "cosine"}, "schedule 'cosine'"),
    ({"thin": 0}, "thin must be an integer"),
], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_bad_options_are_refused_before_sampling(options, message):
    x, y = torch.randn(10, 6), torch.randn(10)
    with pytest.raises(ValueError, match=message):
        run(_spec(), (x, y), engine="sghmc_group_ss", num_samples=2, warmup_steps=0, **options)


def test_model_without_group_prior_and_prior_decays():
    x, y = torch.randn(10, 3), torch.randn(10)
    plain = BNNSpec(layers=[Dense(1)], input_dim=3, prior=Gaussian(1.0), likelihood=GaussianLikelihood(0.5))
    with pytest.raises(ValueError, match="needs at least one weight with a GroupSpikeAndSlab prior"):
        run(plain, (x, y), engine="sghmc_group_ss", num_samples=2, warmup_steps=0)
    # "prior": decays from the model, 1/(N s^2)
    spec = BNNSpec(layers=[Dense(2), Dense(1)], input_dim=3, prior=Gaussian(2.0), likelihood=GaussianLikelihood(0.5),
                   priors={"layers.0.weight": GroupSpikeAndSlab(slab_scale=0.5, spike_scale=0.1)})
    kernel = GroupSparseSGHMC(potential=BNNPotential(BNN(spec), x, y), decay="prior", slab_decay="prior",
                              spike_decay="prior", schedule="constant")
    kernel.setup(0)
    torch.testing.assert_close(kernel.em_state.decay[0, :6], torch.full((6,), 1 / (10 * 0.25)))
    torch.testing.assert_close(kernel.em_state.decay[0, 6:], torch.full((5,), 1 / (10 * 4.0)))
    assert kernel.em.spike == [pytest.approx(1 / (10 * 0.01))]
    with pytest.raises(ValueError, match="the optimizer knows no prior"):
        GroupSparseSGHMCOptimizer([torch.zeros(2, 3, requires_grad=True)], num_data=10, decay="prior")
    with pytest.raises(ValueError, match="num_data must be a positive integer"):
        GroupSparseSGHMCOptimizer([torch.zeros(2, 3, requires_grad=True)], num_data=0)


@pytest.mark.parametrize("group, index, groups", [
    ("output", (1,), 4),          # a filter: weight[1, :, :, :]
    ("input", (slice(None), 1), 2),  # an input channel: weight[:, 1, :, :]
    ("kernel", (2, 0), 8),        # one kernel: weight[2, 0, :, :]
])
def test_conv_groups_are_pruned_whole(group, index, groups):
    from bnnzoo.models import Conv2d

    torch.manual_seed(0)
    spec = BNNSpec(layers=[Conv2d(4, 3, activation="relu"), Dense(1)], input_shape=(2, 5, 5),
                   prior=Gaussian(1.0), priors={"layers.0.weight": GroupSpikeAndSlab(group=group)},
                   likelihood=GaussianLikelihood(0.5))
    x, y = torch.randn(16, 2, 5, 5), torch.randn(16)
    potential = BNNPotential(BNN(spec), x, y)
    # the paper's thresholds (at 16 rows the auto rule raises them to the no-signal level 1/(2 N d_0) = 0.31)
    kernel = GroupSparseSGHMC(potential=potential, em_warmup=0, em_every=1, step_size=1e-4, schedule="constant",
                              prune_patience=1, soft_threshold=1e-2, hard_threshold=1e-3)
    kernel.setup(0)
    theta = torch.full((1, potential.dim), 0.5)
    where = potential.slices["layers.0.weight"]
    weight = theta[0, where].view(4, 2, 3, 3)  # a view: writes go to theta
    weight[index] = 0.01  # mean w^2 = 1e-4 < hard_threshold
    theta = _iterate(kernel, theta)[0]
    weight = theta[0, where].view(4, 2, 3, 3)
    pruned = torch.zeros(4, 2, 3, 3, dtype=torch.bool)
    pruned[index] = True
    assert (weight[pruned] == 0).all() and (weight[~pruned] != 0).all()
    assert float(kernel.sampler.draw_stats(kernel.state)["active_groups[layers.0.weight]"][0]) == groups - 1


# ------------------------------------------------ pruned groups that still carry signal
def test_pruned_score_test_is_calibrated_under_no_signal_and_finds_signal():
    """Hotelling's test on batch sums: exact for Gaussian sums, so under no signal the p-values are uniform
    (also with the weights of a group correlated, as a column's weights are); a mean pull is found; a group
    whose sums are all zero (dead units) is not tested."""
    from bnnzoo.inference.group_em import SCORE_LEVEL, pruned_score_test

    generator = torch.Generator().manual_seed(0)
    k, groups, p = 64, 4000, 4
    shared = torch.randn(k, groups, 1, generator=generator)
    null = shared + 0.5 * torch.randn(k, groups, p, generator=generator)  # correlated within a group
    p_value = pruned_score_test(null)[1]
    for level in (0.01, 0.05, 0.5):
        rate = float((p_value < level).double().mean())
        assert abs(rate - level) < 4 * math.sqrt(level * (1 - level) / groups), (level, rate)
    pulled = null[:, :10] + 1.0  # every batch pulled the same way by about one batch sd
    assert (pruned_score_test(pulled)[1] < SCORE_LEVEL / 1000).all()  # found among 1000 pruned groups
    statistic, p_value = pruned_score_test(torch.zeros(k, 3, p))
    assert statistic.tolist() == [0.0] * 3 and p_value.tolist() == [1.0] * 3


def _pruned_at_the_start(x, y, pruned):
    """A group-sparse kernel whose first iteration prunes the input columns ``pruned``; its end-of-run notes."""
    potential = BNNPotential(BNN(_spec(x.shape[1], hidden=3)), x, y)
    kernel = GroupSparseSGHMC(potential=potential, em_warmup=0, em_every=1, step_size=1e-4, schedule="constant",
                              prune_patience=1, soft_threshold=1e-2, hard_threshold=1e-3, init_radius="auto")
    kernel.setup(0)
    theta = kernel.initial_point()
    weight = theta[0, potential.slices["layers.0.weight"]].view(3, x.shape[1])  # a view: writes go to theta
    weight[:, pruned] = 0.01  # below the hard threshold
    _iterate(kernel, theta)
    kept = kernel.final_state()["pruning_mask"]["layers.0.weight"][0].any(0)
    assert np.flatnonzero(~kept).tolist() == sorted(pruned)
    return kernel


def test_a_pruned_input_with_an_effect_is_named_at_the_end():
    """An input that matters, pruned at the first E-step, is found by the end-of-run check (warning and
    ``pruned_with_signal``); an irrelevant input pruned the same way is not."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(1024, 6, generator=generator)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(1024, generator=generator)
    kernel = _pruned_at_the_start(x, y, [0, 5])
    with pytest.warns(UserWarning, match=r"layers.0.weight: pruned group\(s\) that the data still pull away from "
                                         r"zero at the end \(chain 0: group\(s\) 0;"):
        notes = kernel.notes()
    assert notes["pruned_with_signal"] == {"layers.0.weight": [[0]]}


def test_an_irrelevant_input_correlated_with_a_kept_one_is_not_named():
    """Input 5 is input 0 plus noise and has no effect of its own; the start's network fits nothing, so the
    residual moves with input 0 and with input 5 through it. The check scores the part of each pruned input
    that the kept inputs do not explain: input 5 is not named, the pruned relevant input 1 is."""
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(1024, 6, generator=generator)
    x[:, 5] = x[:, 0] + 0.5 * torch.randn(1024, generator=generator)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(1024, generator=generator)
    kernel = _pruned_at_the_start(x, y, [1, 5])
    with pytest.warns(UserWarning, match=r"\(chain 0: group\(s\) 1;"):
        notes = kernel.notes()
    assert notes["pruned_with_signal"] == {"layers.0.weight": [[1]]}
