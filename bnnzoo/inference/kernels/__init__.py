"""One MCMC algorithm per module: each holds its ``MCMCKernel`` and its options dataclass."""

from .base import BaseOptions, FlatKernel, metropolis_accept
from .chees import ChEESHMC, ChEESOptions
from .group_sparse import GroupSparseSGHMC, GroupSparseSGHMCOptions
from .hmc import AdaptiveHMC, AdaptiveHMCOptions, FixedStepHMC, HMCOptions, WarmupOptions
from .mams import MAMS, MAMSOptions
from .mclmc import MCLMC, MCLMCOptions
from .nuts import BatchedNUTS, BatchedNUTSOptions
from .proximal_hmc import ProximalHMC, ProximalOptions
from .pyro_hmc import HMC, NUTS, NUTSOptions
from .rwmh import RandomWalkMH, RWMHOptions
from .sghmc import SGHMC, SGHMCOptions
from .sgld import SGLD
from .sgmcmc import SGLDOptions, SGMCMCKernel, SGMCMCOptions
from .transition import TransitionKernel
from .spike_slab_sa import SGHMCSA, SGHMCSAOptions, SGLDSA, SGLDSAOptions

__all__ = ["AdaptiveHMC", "AdaptiveHMCOptions", "BaseOptions", "BatchedNUTS", "BatchedNUTSOptions", "ChEESHMC", "ChEESOptions", "FixedStepHMC", "FlatKernel",
           "GroupSparseSGHMC", "GroupSparseSGHMCOptions", "HMC", "HMCOptions", "MAMS", "MAMSOptions", "MCLMC",
           "MCLMCOptions", "NUTS", "NUTSOptions",
           "ProximalHMC", "ProximalOptions", "RWMHOptions", "RandomWalkMH", "SGHMC", "SGHMCOptions", "SGHMCSA",
           "SGHMCSAOptions", "SGLD", "SGLDOptions", "SGLDSA", "SGLDSAOptions", "SGMCMCKernel", "SGMCMCOptions",
           "TransitionKernel", "WarmupOptions", "metropolis_accept"]
