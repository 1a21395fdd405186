"""Tests of bnnzoo.models.l1: the exact L1 part of an elementwise prior (incl. the
spike-and-slab kink) and the L1 weight of a Laplace distribution on a Pyro trace."""

from __future__ import annotations

import subprocess
import sys

import pyro.distributions as dist
import pytest
import torch

from bnnzoo.models import Gaussian, Horseshoe, Laplace, SpikeAndSlab, laplace_l1_weight, prior_l1_weight


def test_prior_l1_weight_is_the_split(float64):
    assert prior_l1_weight(Laplace(0.5)) == 2.0
    assert prior_l1_weight(Gaussian(0.8)) == 0.0
    assert prior_l1_weight(Horseshoe(0.5)) == 0.0
    assert prior_l1_weight(Laplace(0.5), spike_and_slab=True) == 2.0
    assert prior_l1_weight(Gaussian(0.8), spike_and_slab=True) == 0.0


def test_spike_and_slab_kink_is_the_exact_l1_part(float64):
    prior = SpikeAndSlab(v0=0.1, v1=4.0, inclusion_prob=0.3)
    assert prior_l1_weight(prior) == 0.0  # only on request
    beta = prior_l1_weight(prior, spike_and_slab=True)
    assert 0 < beta < 1 / prior.spike_scale
    for eps in (1e-6, 1e-7):  # -log p(w) - beta |w| has slope -> 0 on both sides of 0
        w = torch.tensor([eps, -eps])
        smooth = -prior.log_density(w) - beta * w.abs()
        slope = (smooth - (-prior.log_density(torch.zeros(1)))) / w.abs()
        assert slope.abs().max() < 1e-4
    assert prior_l1_weight(SpikeAndSlab(spike="gaussian"), spike_and_slab=True) == 0.0


def test_laplace_l1_weight_unwraps_expanded_and_independent():
    beta = laplace_l1_weight(dist.Laplace(0.0, 0.5).expand([2, 3]).to_event(2))
    assert torch.all(beta == 2.0)
    scale = torch.tensor([0.25, 0.5])
    torch.testing.assert_close(laplace_l1_weight(dist.Laplace(torch.zeros(2), scale).to_event(1)),
                               torch.tensor([4.0, 2.0]))


def test_laplace_l1_weight_is_none_off_a_constant_centred_laplace():
    assert laplace_l1_weight(dist.Normal(0.0, 1.0)) is None
    assert laplace_l1_weight(dist.Laplace(1.0, 1.0)) is None  # not centred
    s = torch.tensor(0.5, requires_grad=True)
    assert laplace_l1_weight(dist.Laplace(0.0, s)) is None  # scale depends on a latent
    loc = torch.tensor(0.0, requires_grad=True)
    assert laplace_l1_weight(dist.Laplace(loc, 1.0)) is None


@pytest.mark.parametrize("module", ["bnnzoo.models", "bnnzoo.models.l1"])
def test_models_do_not_import_inference(module):
    code = f"import sys, {module}; assert not [m for m in sys.modules if m.startswith('bnnzoo.inference')]"
    subprocess.run([sys.executable, "-c", code], check=True)
