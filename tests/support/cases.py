"""The prior and likelihood cases shared by the model and potential tests, and the
skip marker of the tests that need ``torch.compile``."""

import os
import shutil

import pytest

from bnnzoo.models import (
    Bernoulli,
    Categorical,
    Gaussian,
    GaussianLikelihood,
    GroupSpikeAndSlab,
    Horseshoe,
    Laplace,
    SpikeAndSlab,
)

PRIORS = {
    "gaussian": Gaussian(0.8),
    "laplace": Laplace(0.5),
    "spike_and_slab": SpikeAndSlab(v0=0.05, v1=4.0, inclusion_prob=0.3),
    "spike_and_slab_gaussian": SpikeAndSlab(spike="gaussian"),
    "group_spike_and_slab": GroupSpikeAndSlab(slab_scale=1.0, spike_scale=0.1),
    "horseshoe": Horseshoe(0.5),
}
#: likelihood and the number of output units it needs
LIKELIHOODS = {
    "gaussian": (GaussianLikelihood(0.3), 1),
    "gaussian_learned": (GaussianLikelihood("learned", (2.0, 0.5)), 1),
    "bernoulli": (Bernoulli(), 1),
    "categorical": (Categorical(), 3),
}

#: ``torch.compile`` (inductor on CPU) builds C++: skip where there is no compiler
needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None, reason="torch.compile needs a C++ compiler")
