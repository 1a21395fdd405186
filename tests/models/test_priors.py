"""Tests of bnnzoo.models.priors: every log density against its closed form
(written here independently with numpy/scipy), batching, split(), sampling,
inclusion posteriors and parameter validation."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from bnnzoo.models import PRIORS, Gaussian, GroupSpikeAndSlab, Horseshoe, Laplace, SpecError, SpikeAndSlab
from bnnzoo.models.priors import prior_from_dict

DENSE = (4, 3)  # [out, in]
CONV = (3, 2, 3, 3)  # [out, in, kh, kw]
BIAS = (4,)


def np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def mixed_weights(shape, seed=0) -> torch.Tensor:
    """Weights with both small (spike-like) and large (slab-like) entries."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.where(torch.rand(shape, generator=g) < 0.5, 0.05, 2.0)
    return torch.randn(shape, generator=g) * scale


def site_log_prob(prior, shape, values, name="w") -> torch.Tensor:
    """Sum of the log densities of all of ``prior``'s sites for a weight ``name``."""
    return sum(site.dist(values).log_prob(values[site.name]) for site in prior.sites(name, shape))


def prior_draw(prior, shape, chains=None, name="w") -> dict[str, torch.Tensor]:
    """Draw every site of ``prior`` in order (``chains`` independent draws if given)."""
    values: dict[str, torch.Tensor] = {}
    for site in prior.sites(name, shape):
        d = site.dist(values)
        n = () if chains is None or len(d.batch_shape) else (chains,)
        values[site.name] = d.sample(n)
    return values


# ----------------------------------------------------------------------------
# closed forms, written independently of the package


def np_laplace(w, b):
    return -np.log(2 * b) - np.abs(w) / b


def np_half_cauchy(x, s):
    return np.log(2.0) - np.log(np.pi * s) - np.log1p((x / s) ** 2)


def np_spike_and_slab(w, v0, v1, sigma, delta, spike):
    if spike == "laplace":
        log_spike = np_laplace(w, sigma * v0)
    else:
        log_spike = stats.norm.logpdf(w, 0.0, sigma * math.sqrt(v0))
    log_slab = stats.norm.logpdf(w, 0.0, sigma * math.sqrt(v1))
    return np.logaddexp(np.log1p(-delta) + log_spike, np.log(delta) + log_slab)


def groups_of(w: np.ndarray, group: str) -> list[np.ndarray]:
    """The groups of ``w``, enumerated by explicit loops."""
    if w.ndim == 1:
        return [w[i : i + 1] for i in range(w.shape[0])]
    if w.ndim == 2:
        if group in ("auto", "input"):
            return [w[:, j] for j in range(w.shape[1])]  # input columns
        if group == "output":
            return [w[i, :] for i in range(w.shape[0])]  # output rows
    if w.ndim == 4:
        if group in ("auto", "kernel"):
            return [w[o, i] for o in range(w.shape[0]) for i in range(w.shape[1])]
        if group == "input":
            return [w[:, i] for i in range(w.shape[1])]
        if group == "output":
            return [w[o] for o in range(w.shape[0])]
    raise AssertionError(f"no grouping {group} for rank {w.ndim}")


def np_group_terms(w, group, slab, spike, pi):
    """Per group: (log pi + sum log N(w; 0, slab), log(1-pi) + sum log N(w; 0, spike))."""
    a, b = [], []
    for g in groups_of(w, group):
        a.append(math.log(pi) + stats.norm.logpdf(g, 0.0, slab).sum())
        b.append(math.log1p(-pi) + stats.norm.logpdf(g, 0.0, spike).sum())
    return np.array(a), np.array(b)


def np_group_spike_and_slab(w, group, slab, spike, pi):
    a, b = np_group_terms(w, group, slab, spike, pi)
    return np.logaddexp(a, b).sum()


# ----------------------------------------------------------------------------
# log densities against closed forms


@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_gaussian_log_prob(float64, shape, scale):
    w = mixed_weights(shape)
    lp = Gaussian(scale).distribution(shape).log_prob(w)
    assert lp.shape == ()
    np.testing.assert_allclose(float(lp), stats.norm.logpdf(np64(w), 0.0, scale).sum(), rtol=1e-10)


@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_laplace_log_prob(float64, shape, scale):
    w = mixed_weights(shape)
    lp = Laplace(scale).distribution(shape).log_prob(w)
    np.testing.assert_allclose(float(lp), np_laplace(np64(w), scale).sum(), rtol=1e-10)
    np.testing.assert_allclose(float(lp), stats.laplace.logpdf(np64(w), 0.0, scale).sum(), rtol=1e-10)


SPIKE_AND_SLABS = [
    SpikeAndSlab(),
    SpikeAndSlab(v0=0.02, v1=4.0, sigma=0.5, inclusion_prob=0.2),
    SpikeAndSlab(v0=0.01, v1=2.0, sigma=2.0, inclusion_prob=0.7, spike="gaussian"),
    SpikeAndSlab(spike="gaussian"),
]


@pytest.mark.parametrize("prior", SPIKE_AND_SLABS, ids=lambda p: f"{p.spike}-v0={p.v0}-d={p.inclusion_prob}")
@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
def test_spike_and_slab_log_prob(float64, prior, shape):
    w = mixed_weights(shape)
    lp = prior.distribution(shape).log_prob(w)
    expected = np_spike_and_slab(np64(w), prior.v0, prior.v1, prior.sigma, prior.inclusion_prob, prior.spike)
    np.testing.assert_allclose(float(lp), expected.sum(), rtol=1e-10)


def test_spike_and_slab_scales():
    p = SpikeAndSlab(v0=0.04, v1=9.0, sigma=0.5)
    assert p.spike_scale == pytest.approx(0.5 * 0.04)  # Laplace scale sigma * v0
    assert p.slab_scale == pytest.approx(0.5 * 3.0)  # slab sd sigma * sqrt(v1)
    g = SpikeAndSlab(v0=0.04, v1=9.0, sigma=0.5, spike="gaussian")
    assert g.spike_scale == pytest.approx(0.5 * 0.2)  # Gaussian sd sigma * sqrt(v0)


def test_spike_and_slab_is_a_normalised_density(float64):
    """The marginal density integrates to one."""
    for prior in SPIKE_AND_SLABS:
        d = prior.distribution((1,))
        density = lambda w: float(d.log_prob(torch.tensor([w])).exp())  # noqa: E731
        halves = [integrate.quad(density, a, b, limit=200)[0] for a, b in [(-np.inf, 0), (0, np.inf)]]
        assert sum(halves) == pytest.approx(1.0, abs=1e-7)


GROUP_CASES = [
    (DENSE, "auto"),
    (DENSE, "input"),
    (DENSE, "output"),
    (CONV, "auto"),
    (CONV, "kernel"),
    (CONV, "input"),
    (CONV, "output"),
    (BIAS, "auto"),
    (BIAS, "input"),
]


@pytest.mark.parametrize("shape, group", GROUP_CASES, ids=[f"{len(s)}d-{g}" for s, g in GROUP_CASES])
@pytest.mark.parametrize("pi", [0.5, 0.1])
def test_group_spike_and_slab_log_prob(float64, shape, group, pi):
    prior = GroupSpikeAndSlab(slab_scale=1.5, spike_scale=0.1, inclusion_prob=pi, group=group)
    w = mixed_weights(shape)
    lp = prior.distribution(shape).log_prob(w)
    assert lp.shape == ()
    expected = np_group_spike_and_slab(np64(w), group, 1.5, 0.1, pi)
    np.testing.assert_allclose(float(lp), expected, rtol=1e-10)


def test_group_spike_and_slab_groups_are_columns_of_dense_weights(float64):
    """Moving mass within a column does not change the log density if the
    column's sum of squares is kept; moving it across columns does."""
    prior = GroupSpikeAndSlab(slab_scale=1.0, spike_scale=0.1)
    d = prior.distribution((2, 2))
    a = torch.tensor([[0.3, 0.0], [0.4, 0.0]])
    same_column = torch.tensor([[0.5, 0.0], [0.0, 0.0]])
    other_column = torch.tensor([[0.3, 0.4], [0.0, 0.0]])
    assert float(d.log_prob(a)) == pytest.approx(float(d.log_prob(same_column)), abs=1e-12)
    assert abs(float(d.log_prob(a)) - float(d.log_prob(other_column))) > 1e-3


@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
@pytest.mark.parametrize("global_scale", [1.0, 0.1])
def test_horseshoe_log_prob(float64, shape, global_scale):
    prior = Horseshoe(global_scale)
    sites = prior.sites("w", shape)
    assert [s.name for s in sites] == ["w.global_scale", "w.local_scale", "w"]
    assert [s.shape for s in sites] == [(), shape, shape]
    g = torch.Generator().manual_seed(1)
    values = {
        "w.global_scale": torch.tensor(0.7),
        "w.local_scale": torch.randn(shape, generator=g).mul(0.5).exp(),
        "w": torch.randn(shape, generator=g) * 0.5,
    }
    tau, lam, w = (np64(values[k]) for k in ("w.global_scale", "w.local_scale", "w"))
    per_site = [float(s.dist(values).log_prob(values[s.name])) for s in sites]
    np.testing.assert_allclose(per_site[0], np_half_cauchy(tau, global_scale), rtol=1e-10)
    np.testing.assert_allclose(per_site[1], np_half_cauchy(lam, 1.0).sum(), rtol=1e-10)
    # the weight given its scales: N(0, (tau * lambda)^2)
    np.testing.assert_allclose(per_site[2], stats.norm.logpdf(w, 0.0, tau * lam).sum(), rtol=1e-10)


def test_float32_default_dtype():
    """With torch's default float32 the densities still match to float32 accuracy."""
    assert torch.get_default_dtype() == torch.float32
    w = mixed_weights(DENSE)
    for prior in [Gaussian(), Laplace(0.5), SpikeAndSlab(), GroupSpikeAndSlab()]:
        lp = prior.distribution(DENSE).log_prob(w)
        assert lp.dtype == torch.float32
        lp64 = None
        torch.set_default_dtype(torch.float64)
        try:
            lp64 = prior.distribution(DENSE).log_prob(w.double())
        finally:
            torch.set_default_dtype(torch.float32)
        assert float(lp) == pytest.approx(float(lp64), rel=1e-5)


# ----------------------------------------------------------------------------
# batching: a leading chain dim gives per-chain results

ALL_PRIORS = [
    Gaussian(0.5),
    Laplace(0.3),
    SpikeAndSlab(),
    SpikeAndSlab(spike="gaussian", inclusion_prob=0.3),
    GroupSpikeAndSlab(),
    GroupSpikeAndSlab(group="output", inclusion_prob=0.2),
    Horseshoe(0.5),
]
PRIOR_IDS = ["gaussian", "laplace", "ss-laplace", "ss-gaussian", "group-auto", "group-output", "horseshoe"]


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=PRIOR_IDS)
@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
def test_batched_values_give_per_chain_log_probs(float64, prior, shape):
    torch.manual_seed(2)
    chains = 3
    values = prior_draw(prior, shape, chains=chains)
    for site in prior.sites("w", shape):
        assert values[site.name].shape == (chains, *site.shape)
    batched = site_log_prob(prior, shape, values)
    assert batched.shape == (chains,)
    for c in range(chains):
        single = site_log_prob(prior, shape, {k: v[c] for k, v in values.items()})
        assert single.shape == ()
        assert float(batched[c]) == pytest.approx(float(single), rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------
# split()


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=PRIOR_IDS)
def test_split(prior):
    smooth, l1 = prior.split()
    if isinstance(prior, Laplace):
        assert smooth is None
        assert l1 == pytest.approx(1.0 / prior.scale)
    else:
        assert smooth is prior
        assert l1 == 0.0


@pytest.mark.parametrize("scale", [0.25, 1.0, 3.0])
def test_laplace_split_is_the_density_up_to_a_constant(float64, scale):
    """-log p(w) = l1 * ||w||_1 + const for the Laplace prior."""
    prior = Laplace(scale)
    smooth, l1 = prior.split()
    assert smooth is None
    d = prior.distribution(DENSE)
    w1, w2 = mixed_weights(DENSE, 0), mixed_weights(DENSE, 1)
    lhs = -d.log_prob(w1) + d.log_prob(w2)
    rhs = l1 * (w1.abs().sum() - w2.abs().sum())
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-10)


# ----------------------------------------------------------------------------
# sampling


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=PRIOR_IDS)
@pytest.mark.parametrize("shape", [DENSE, CONV, BIAS], ids=["dense", "conv", "bias"])
def test_sample_shapes(prior, shape):
    torch.manual_seed(3)
    values = prior_draw(prior, shape)
    for site in prior.sites("w", shape):
        assert values[site.name].shape == site.shape
        assert torch.isfinite(values[site.name]).all()
    if not isinstance(prior, Horseshoe):
        d = prior.distribution(shape)
        assert d.event_shape == shape and d.batch_shape == ()
        assert d.sample().shape == shape
        assert d.sample((5,)).shape == (5, *shape)
        assert d.sample((2, 5)).shape == (2, 5, *shape)
    else:
        assert values["w.global_scale"] > 0 and (values["w.local_scale"] > 0).all()


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_gaussian_and_laplace_sample_spread(scale):
    """Sample spread matches the prior: sd for the Gaussian, mean |w| for the Laplace."""
    torch.manual_seed(4)
    n = 200 * 500
    w = Gaussian(scale).distribution((200, 500)).sample().double()
    assert abs(float(w.std()) - scale) < 5 * scale / math.sqrt(2 * n)
    w = Laplace(scale).distribution((200, 500)).sample().double()
    assert abs(float(w.abs().mean()) - scale) < 5 * scale / math.sqrt(n)  # |w| ~ Exponential(1/scale)


def _prob_abs_above(t, kind, scale):
    """P(|w| > t) for w ~ Laplace(0, scale) or N(0, scale^2)."""
    if kind == "laplace":
        return math.exp(-t / scale)
    return 2 * stats.norm.sf(t / scale)


@pytest.mark.parametrize("spike", ["laplace", "gaussian"])
@pytest.mark.parametrize("delta", [0.5, 0.2, 0.85])
def test_spike_and_slab_sample_fraction_in_slab(spike, delta):
    """A tiny spike (scale 1e-7) and a wide slab (sd 10) are separated by the
    threshold t = 1e-5; the fraction of |w| > t matches
    delta * P(|slab| > t) + (1 - delta) * P(|spike| > t) within 4 binomial
    standard errors, and each part has its component's spread."""
    torch.manual_seed(5)
    v0 = 1e-7 if spike == "laplace" else 1e-14  # spike scale sigma v0, or sd sigma sqrt(v0)
    prior = SpikeAndSlab(v0=v0, v1=100.0, sigma=1.0, inclusion_prob=delta, spike=spike)
    assert prior.spike_scale == pytest.approx(1e-7)
    shape = (400, 500)
    w = prior.distribution(shape).sample().double()
    t = 1e-5
    p = delta * _prob_abs_above(t, "gaussian", prior.slab_scale) + (1 - delta) * _prob_abs_above(
        t, spike, prior.spike_scale
    )
    assert abs(p - delta) < 1e-5  # the threshold separates the components
    n = w.numel()
    frac = float((w.abs() > t).double().mean())
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n)
    # the spike part: mean |w| = b, sd b (Laplace) or s sqrt(2/pi), s sqrt(1 - 2/pi) (Gaussian)
    small = w[w.abs() <= t].abs()
    s0 = prior.spike_scale
    if spike == "laplace":
        mean_abs, sd_abs = s0, s0
    else:
        mean_abs, sd_abs = s0 * math.sqrt(2 / math.pi), s0 * math.sqrt(1 - 2 / math.pi)
    assert abs(float(small.mean()) - mean_abs) < 5 * sd_abs / math.sqrt(small.numel())
    # the slab part: sd sigma sqrt(v1)
    big = w[w.abs() > t]
    assert abs(float(big.std()) - prior.slab_scale) < 5 * prior.slab_scale / math.sqrt(2 * big.numel())


@pytest.mark.parametrize(
    "shape, group, n_groups",
    [((20, 4000), "auto", 4000), ((20, 4000), "output", 20), ((40, 50, 3, 3), "kernel", 2000)],
)
def test_group_spike_and_slab_sample_whole_groups(shape, group, n_groups):
    """Every group is drawn wholly from the slab or wholly from the spike, and
    the fraction of slab groups matches inclusion_prob."""
    torch.manual_seed(6)
    pi = 0.3
    prior = GroupSpikeAndSlab(slab_scale=10.0, spike_scale=1e-8, inclusion_prob=pi, group=group)
    w = prior.distribution(shape).sample().double()
    assert w.shape == shape
    # spike values (sd 1e-8) are all below 1e-7; slab values (sd 10) all above
    # (P(|N(0, 10^2)| < 1e-7) = 8e-9 per value)
    big = np64((w.abs() > 1e-7).double())
    per_group = np.array([g.mean() for g in groups_of(big, group)])
    assert len(per_group) == n_groups
    assert np.isin(per_group, [0.0, 1.0]).all()  # no group is mixed
    frac = float(per_group.mean())
    assert abs(frac - pi) < 4 * math.sqrt(pi * (1 - pi) / n_groups)


# ----------------------------------------------------------------------------
# inclusion posterior


@pytest.mark.parametrize("prior", SPIKE_AND_SLABS, ids=lambda p: f"{p.spike}-v0={p.v0}-d={p.inclusion_prob}")
def test_spike_and_slab_inclusion_posterior(float64, prior):
    w = mixed_weights(DENSE)
    post = prior.distribution(DENSE).base_dist.inclusion_posterior(w)
    assert post.shape == DENSE
    x = np64(w)
    delta = prior.inclusion_prob
    slab = delta * stats.norm.pdf(x, 0.0, prior.sigma * math.sqrt(prior.v1))
    if prior.spike == "laplace":
        spike = (1 - delta) * stats.laplace.pdf(x, 0.0, prior.sigma * prior.v0)
    else:
        spike = (1 - delta) * stats.norm.pdf(x, 0.0, prior.sigma * math.sqrt(prior.v0))
    np.testing.assert_allclose(np64(post), slab / (slab + spike), rtol=1e-9, atol=1e-300)
    # at 0 the spike wins, far out the slab does
    ends = prior.distribution((2,)).base_dist.inclusion_posterior(torch.tensor([0.0, 8.0]))
    assert float(ends[0]) < 0.5 < float(ends[1])
    assert float(ends[1]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("shape, group", GROUP_CASES, ids=[f"{len(s)}d-{g}" for s, g in GROUP_CASES])
def test_group_inclusion_posterior(float64, shape, group):
    prior = GroupSpikeAndSlab(slab_scale=1.5, spike_scale=0.1, inclusion_prob=0.4, group=group)
    w = mixed_weights(shape)
    post = prior.distribution(shape).inclusion_posterior(w)
    a, b = np_group_terms(np64(w), group, 1.5, 0.1, 0.4)
    np.testing.assert_allclose(np64(post).reshape(-1), 1 / (1 + np.exp(b - a)), rtol=1e-9)
    # batched: one row per chain
    wb = torch.stack([w, 0.01 * w, 10 * w])
    postb = prior.distribution(shape).inclusion_posterior(wb)
    assert postb.shape == (3, *post.shape)
    torch.testing.assert_close(postb[0], post)
    assert float(postb[1].max()) < float(postb[2].min())  # smaller weights, less inclusion


# ----------------------------------------------------------------------------
# building from dicts and validation


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=PRIOR_IDS)
def test_to_dict_round_trip(prior):
    d = prior.to_dict()
    assert d["kind"] == prior.kind
    assert prior_from_dict(d) == prior
    assert prior_from_dict(d).to_dict() == d


def test_from_bare_kind_name():
    assert prior_from_dict("laplace") == Laplace()
    assert prior_from_dict("spike_and_slab") == SpikeAndSlab()
    assert prior_from_dict(Horseshoe(2.0)) == Horseshoe(2.0)
    assert sorted(PRIORS) == ["gaussian", "group_spike_and_slab", "horseshoe", "laplace", "spike_and_slab"]


@pytest.mark.parametrize(
    "d, field, value",
    [
        ({"kind": "laplace", "scale": -1}, "prior.scale", "-1"),
        ({"kind": "gaussian", "scale": 0}, "prior.scale", "0"),
        ({"kind": "gaussian", "scale": float("nan")}, "prior.scale", "nan"),
        ({"kind": "gaussian", "scale": "1"}, "prior.scale", "'1'"),
        ({"kind": "spike_and_slab", "v0": -0.1}, "prior.v0", "-0.1"),
        ({"kind": "spike_and_slab", "v1": 0.0}, "prior.v1", "0.0"),
        ({"kind": "spike_and_slab", "sigma": float("inf")}, "prior.sigma", "inf"),
        ({"kind": "spike_and_slab", "inclusion_prob": 1.0}, "prior.inclusion_prob", "1.0"),
        ({"kind": "spike_and_slab", "inclusion_prob": 0}, "prior.inclusion_prob", "0"),
        ({"kind": "spike_and_slab", "inclusion_prob": True}, "prior.inclusion_prob", "True"),
        ({"kind": "spike_and_slab", "spike": "cauchy"}, "prior.spike", "'cauchy'"),
        ({"kind": "group_spike_and_slab", "slab_scale": -2}, "prior.slab_scale", "-2"),
        ({"kind": "group_spike_and_slab", "spike_scale": True}, "prior.spike_scale", "True"),
        ({"kind": "group_spike_and_slab", "inclusion_prob": 1.5}, "prior.inclusion_prob", "1.5"),
        ({"kind": "group_spike_and_slab", "group": "rows"}, "prior.group", "'rows'"),
        ({"kind": "horseshoe", "global_scale": -1.0}, "prior.global_scale", "-1.0"),
    ],
)
def test_invalid_parameter_names_field_and_value(d, field, value):
    with pytest.raises(SpecError) as info:
        prior_from_dict(d)
    assert info.value.field == field
    msg = str(info.value)
    assert msg.startswith(field + ":")
    assert value in msg


def test_invalid_parameter_messages():
    with pytest.raises(SpecError, match=re.escape("prior.scale: must be a positive number, got -1")):
        prior_from_dict({"kind": "laplace", "scale": -1})
    with pytest.raises(SpecError, match=re.escape("prior.spike: unknown value 'cauchy'; choose one of gaussian, laplace")):
        prior_from_dict({"kind": "spike_and_slab", "spike": "cauchy"})
    with pytest.raises(SpecError, match=re.escape("choose one of auto, input, kernel, output")):
        prior_from_dict({"kind": "group_spike_and_slab", "group": "rows"})
    with pytest.raises(SpecError, match=re.escape("strictly between 0 and 1, got 1.0")):
        SpikeAndSlab(inclusion_prob=1.0)
    # the direct constructor names the bare field
    with pytest.raises(SpecError) as info:
        Laplace(scale=-1)
    assert info.value.field == "scale"


def test_unknown_kind_lists_the_choices():
    msg = "prior.kind: unknown prior 'cauchy'; choose one of gaussian, group_spike_and_slab, horseshoe, laplace, spike_and_slab"
    with pytest.raises(SpecError, match=re.escape(msg)):
        prior_from_dict({"kind": "cauchy"})
    with pytest.raises(SpecError, match=re.escape("prior.kind: unknown prior 'cauchy'")):
        prior_from_dict("cauchy")
    with pytest.raises(SpecError, match=re.escape("prior.kind: unknown prior None")):
        prior_from_dict({"scale": 1.0})


def test_unknown_parameter_and_bad_table():
    with pytest.raises(SpecError, match=re.escape("prior.scal: unknown parameter of laplace 'scal'; choose one of scale")):
        prior_from_dict({"kind": "laplace", "scal": 1.0})
    with pytest.raises(SpecError, match=re.escape("prior: expected a table with a 'kind', got 3")):
        prior_from_dict(3)
    with pytest.raises(SpecError, match=re.escape("priors.layers.0.weight.v0: must be a positive number")):
        prior_from_dict({"kind": "spike_and_slab", "v0": -1}, "priors.layers.0.weight")


@pytest.mark.parametrize("shape, group", [(DENSE, "kernel"), (CONV, "nonsense")])
def test_group_that_does_not_fit_the_shape(shape, group):
    if group == "nonsense":
        with pytest.raises(SpecError, match="unknown grouping 'nonsense'"):
            GroupSpikeAndSlab(group=group)
        return
    prior = GroupSpikeAndSlab(group=group)
    with pytest.raises(SpecError, match=re.escape("grouping 'kernel' does not apply to a weight of shape (4, 3)")):
        prior.check_shape(shape)
    with pytest.raises(SpecError, match="does not apply"):
        prior.distribution(shape)
    prior.check_shape(BIAS)  # a bias has one group per element under any grouping
