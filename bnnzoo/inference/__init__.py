"""How a posterior is found: potentials, pure update rules, kernels, VI and the engine layer.

* :mod:`.potential`: ``U(theta)`` on a flat unconstrained vector (BNN fast path, Pyro fallback);
* :mod:`.integrators`, :mod:`.proximal`, :mod:`.adaptation`, :mod:`.sgmcmc`,
  :mod:`.stochastic_approximation`, :mod:`.group_em`: the update rules, pure;
* :mod:`.kernels`: one ``MCMCKernel`` per algorithm, each with its options dataclass;
* :mod:`.vi`: mean-field variational inference;
* :mod:`.mcmc`: ``MCMC``, Pyro's driver with ``chain_method="vectorized"``;
* :mod:`.engines`: the registry, the typed run configuration (``run_config``), ``run()`` and the drivers;
* :mod:`.recipes`: published pipelines as ``run()`` keywords (MILE).
"""

from ..results import Draws, Run, split_mcmc
from .adaptation import DualAveraging
from .engines import ENGINES, Engine, RunConfig, RunSettings, check_run, run, run_config, run_settings
from .group_em import GroupSparseOptions, GroupSparseSGHMCOptimizer
from .kernels import (
    HMC, MAMS, MCLMC, NUTS, SGHMC, SGHMCSA, SGLD, SGLDSA, BatchedNUTS, ChEESHMC, FixedStepHMC, FlatKernel, GroupSparseSGHMC, ProximalHMC,
    RandomWalkMH,
)
from . import recipes
from .mcmc import MCMC
from .potential import BNNPotential, FlatPotential, PyroPotential, make_potential
from .tuning import TargetAccept, recommend_target_accept
from .vi import AdaBound, AMSBound, MeanFieldGuide, PyroAdaBound, PyroAMSBound, VIFit, VIOptions, fit_mean_field, kl_weights

__all__ = [
    "BNNPotential", "BatchedNUTS", "ChEESHMC", "DualAveraging", "Draws", "ENGINES", "Engine", "FixedStepHMC", "FlatKernel",
    "FlatPotential", "HMC", "MAMS", "MCLMC", "MCMC",
    "NUTS", "ProximalHMC", "PyroPotential", "RandomWalkMH", "Run", "RunConfig", "RunSettings", "check_run",
    "make_potential", "run", "run_config", "run_settings", "split_mcmc",
    "AdaBound", "AMSBound", "PyroAdaBound", "PyroAMSBound", "MeanFieldGuide", "VIFit", "VIOptions",
    "fit_mean_field", "kl_weights",
    "SGHMC", "SGHMCSA", "SGLD", "SGLDSA", "GroupSparseOptions", "GroupSparseSGHMC", "GroupSparseSGHMCOptimizer",
    "TargetAccept", "recommend_target_accept", "recipes",
]
