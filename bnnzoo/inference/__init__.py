"""How a posterior is found: kernels, potentials, engines."""

from . import vi  # noqa: F401  (registers the "svi" engine)
from .base import DualAveraging, FlatKernel
from .chees import ChEESHMC
from ..results import Draws, split_mcmc
from .engines import ENGINES, Engine, Run, engine, run
from .hmc import HMC, NUTS
from .potential import BNNPotential, FlatPotential, PyroPotential, make_potential
from .rwmh import RandomWalkMH
from .adaptive import SGHMCSA, SGLDSA  # registers "sgld_sa", "sghmc_sa" (and, via sgmcmc, "sgld", "sghmc")
from .sgmcmc import SGHMC, SGLD
from .group_sparse import GroupSparseSGHMC, GroupSparseSGHMCOptimizer  # registers "sghmc_group_ss"
from .proximal_hmc import ProximalHMC  # registers the "proximal_hmc" engine
from .fixed_hmc import FixedStepHMC  # registers the "fixed_hmc" engine
from .tuning import TargetAccept, recommend_target_accept
from .vi.optim import AdaBound, AMSBound, PyroAdaBound, PyroAMSBound
from .vi.fit import MeanFieldGuide, VIFit, fit_mean_field
from .vi.elbo import kl_weights
from .vi.options import VIOptions

__all__ = [
    "BNNPotential", "ChEESHMC", "DualAveraging", "Draws", "ENGINES", "Engine", "FixedStepHMC", "FlatKernel",
    "FlatPotential", "HMC",
    "NUTS", "ProximalHMC", "PyroPotential", "RandomWalkMH", "Run", "engine", "make_potential", "run", "split_mcmc",
    "AdaBound", "AMSBound", "PyroAdaBound", "PyroAMSBound", "MeanFieldGuide", "VIFit", "VIOptions",
    "fit_mean_field", "kl_weights",
    "SGHMC", "SGHMCSA", "SGLD", "SGLDSA", "GroupSparseSGHMC", "GroupSparseSGHMCOptimizer",
    "TargetAccept", "recommend_target_accept",
]
