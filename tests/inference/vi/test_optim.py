"""AdaBound / AMSBound against their definition (Luo et al. 2019): Adam while the
band is open, SGD with momentum once it has closed, exact clipping in between;
usable through pyro.optim; the optimizer registry of the svi engine."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal

from bnnzoo.inference.vi.optim import (AdaBound, AMSBound, PyroAdaBound, adabound_bounds, make_optimizer,
                                       optimizer_spec)

DT = torch.float64


def _gradients(steps: int, dim: int = 4, seed: int = 0) -> list[torch.Tensor]:
    """A fixed stream of gradients whose magnitudes vary over three orders."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(dim, generator=g, dtype=DT) * 10.0 ** torch.randint(-1, 2, (dim,), generator=g)
            for _ in range(steps)]


def _trajectory(optimizer_cls, grads, **kw) -> list[torch.Tensor]:
    p = torch.zeros(grads[0].shape, dtype=DT, requires_grad=True)
    opt = optimizer_cls([p], **kw)
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append(p.detach().clone())
    return out


def test_bounds_open_then_close_on_final_lr():
    lo, hi = adabound_bounds(0.1, 1e-3, 1)
    assert lo == pytest.approx(0.1 * (1 - 1 / 1.001)) and hi == pytest.approx(0.1 * 1001)
    steps = [1, 10, 100, 10**4, 10**6, 10**9]
    bands = [adabound_bounds(0.1, 1e-3, t) for t in steps]
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(bands, bands[1:]))  # the band narrows
    assert bands[-1] == pytest.approx((0.1, 0.1), rel=1e-5)
    with pytest.raises(ValueError, match="step must be >= 1"):
        adabound_bounds(0.1, 1e-3, 0)


@pytest.mark.parametrize("ams", [False, True], ids=["adabound-vs-adam", "amsbound-vs-amsgrad"])
def test_early_phase_is_adam(ams):
    # gamma -> 0: the band is [~0, ~inf), so every step is Adam's (eps = 0 in both:
    # torch adds eps after the bias correction, AdaBound before it).
    grads = _gradients(60)
    ours = _trajectory(AMSBound if ams else AdaBound, grads, lr=0.01, gamma=1e-14, eps=0.0)
    adam = _trajectory(torch.optim.Adam, grads, lr=0.01, eps=0.0, amsgrad=ams)
    for a, b in zip(ours, adam):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_late_phase_is_sgd_with_momentum_at_final_lr():
    # gamma large: from step 1 the band is final_lr (1 +- 1e-9),
    # so w_t = w_{t-1} - final_lr * m_t with m_t the moving average of the gradients.
    grads = _gradients(40)
    ours = _trajectory(AdaBound, grads, lr=0.5, final_lr=0.03, gamma=1e9, betas=(0.8, 0.999))
    w, m = torch.zeros(4, dtype=DT), torch.zeros(4, dtype=DT)
    for g, got in zip(grads, ours):
        m = 0.8 * m + 0.2 * g
        w = w - 0.03 * m
        torch.testing.assert_close(got, w, rtol=2e-6, atol=1e-12)


def test_step_size_is_clipped_to_the_band():
    # step 1, gamma = 1e-3, final_lr = 0.1: band [0.1 (1 - 1/1.001), 100.1]. Adam's
    # per-coordinate rate lr / ((1 - b1)(|g| + eps')) is 1e4 for |g| = 1e-6 (clipped
    # to the top), 1e-2 for |g| = 1 (inside), 1e-5 for |g| = 1e3 (clipped to the bottom).
    g = torch.tensor([1e-6, -1.0, 1e3], dtype=DT)
    p = torch.zeros(3, dtype=DT, requires_grad=True)
    opt = AdaBound([p], lr=1e-3, final_lr=0.1, gamma=1e-3, eps=0.0)
    p.grad = g.clone()
    opt.step()
    lo, hi = adabound_bounds(0.1, 1e-3, 1)
    m = 0.1 * g  # (1 - beta1) g
    expected = -torch.tensor([hi, 1e-3 / (0.1 * 1.0), lo], dtype=DT) * m
    torch.testing.assert_close(p.detach(), expected, rtol=1e-9, atol=0.0)
    assert p.detach()[1].item() == pytest.approx(1e-3)  # Adam's first step: lr * sign(-g)


def test_final_lr_follows_a_learning_rate_schedule():
    # as in the authors' code, final_lr scales with lr / initial lr
    p = torch.zeros(1, dtype=DT, requires_grad=True)
    opt = AdaBound([p], lr=0.2, final_lr=0.05, gamma=1e6)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    p.grad = torch.ones(1, dtype=DT)
    opt.step()
    sched.step()
    before = p.detach().clone()
    p.grad = torch.ones(1, dtype=DT)
    opt.step()
    m2 = 0.9 * 0.1 + 0.1  # moving average after two unit gradients
    assert (p.detach() - before).item() == pytest.approx(-0.025 * m2, rel=1e-5)


def test_adabound_through_pyro_optim_fits_a_conjugate_model():
    # mu ~ N(0, 1), y_i ~ N(mu, 1): posterior N(sum y / (n + 1), 1 / (n + 1))
    y = torch.tensor([0.9, 1.4, 1.1, 0.6, 1.5, 1.2, 0.8, 1.3])

    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    guide = AutoNormal(model)
    svi = SVI(model, guide, PyroAdaBound({"lr": 0.05, "final_lr": 0.005, "gamma": 0.05}),
              loss=Trace_ELBO(num_particles=16, vectorize_particles=True))
    for _ in range(400):
        svi.step(y)
    loc = pyro.param("AutoNormal.locs.mu").item()
    scale = pyro.param("AutoNormal.scales.mu").item()
    assert loc == pytest.approx(y.sum().item() / 9, abs=0.05)
    assert scale == pytest.approx(1 / 3, rel=0.15)
    pyro.clear_param_store()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"lr": -1.0}, "lr must be in"),
        ({"final_lr": 0.0}, "final_lr must be in"),
        ({"gamma": 0.0}, "gamma must be in"),
        ({"betas": (1.0, 0.999)}, r"betas\[0\] must be in"),
        ({"betas": 0.9}, "betas must be a pair"),
        ({"eps": -1e-8}, "eps must be in"),
    ],
)
def test_bad_arguments(kw, message):
    with pytest.raises(ValueError, match=message):
        AdaBound([torch.zeros(1, requires_grad=True)], **kw)


def test_registry_builds_and_refuses():
    p = torch.zeros(2, requires_grad=True)
    sgd = make_optimizer({"kind": "sgd", "momentum": 0.9}, [p], 0.1)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["momentum"] == 0.9
    assert make_optimizer("amsgrad", [p], 0.1).param_groups[0]["amsgrad"] is True
    assert isinstance(make_optimizer("amsbound", [p], 0.1), AMSBound)
    assert optimizer_spec({"kind": "adabound", "final_lr": 0.01}) == ("adabound", {"final_lr": 0.01})
    with pytest.raises(ValueError, match="optimizer 'adamax': unknown optimizer; choose one of sgd, adam"):
        optimizer_spec("adamax")
    with pytest.raises(ValueError, match="unknown option.*momentun"):
        optimizer_spec({"kind": "sgd", "momentun": 0.9})
    with pytest.raises(ValueError, match="needs a 'kind'"):
        optimizer_spec({"momentum": 0.9})
    with pytest.raises(ValueError, match="not inside the optimizer table"):
        optimizer_spec({"kind": "sgd", "lr": 0.1})
    with pytest.raises(ValueError, match="optimizer 'sgd'.*momentum"):
        make_optimizer({"kind": "sgd", "momentum": -1.0}, [p], 0.1)
    assert math.isfinite(sgd.param_groups[0]["lr"])
