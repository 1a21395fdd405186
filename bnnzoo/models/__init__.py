"""What a model is: priors, likelihoods, the declarative spec and the Pyro model."""

from . import zoo
from .bnn import BNN
from .errors import SpecError
from .l1 import laplace_l1_weight, prior_l1_weight
from .likelihoods import LIKELIHOODS, Bernoulli, Categorical, GaussianLikelihood, Likelihood
from .priors import PRIORS, Gaussian, GroupSpikeAndSlab, Horseshoe, Laplace, Prior, SpikeAndSlab
from .spec import ACTIVATIONS, BNNSpec, Conv2d, Dense, load_spec, spec_from

__all__ = [
    "ACTIVATIONS", "BNN", "BNNSpec", "Bernoulli", "Categorical", "Conv2d", "Dense", "Gaussian",
    "GaussianLikelihood", "GroupSpikeAndSlab", "Horseshoe", "LIKELIHOODS", "Laplace", "Likelihood",
    "PRIORS", "Prior", "SpecError", "SpikeAndSlab", "laplace_l1_weight", "load_spec", "prior_l1_weight",
    "spec_from", "zoo",
]
