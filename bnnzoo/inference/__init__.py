"""How a posterior is found: kernels, potentials, engines."""

from . import vi  # noqa: F401  (registers the "svi" engine)
from .base import DualAveraging, FlatKernel
from .chees import ChEESHMC
from ..draws import Draws, split_mcmc
from .engines import ENGINES, Engine, Run, engine, run
from .hmc import HMC, NUTS
from .potential import BNNPotential, FlatPotential, PyroPotential, make_potential
from .rwmh import RandomWalkMH

__all__ = [
    "BNNPotential", "ChEESHMC", "DualAveraging", "Draws", "ENGINES", "Engine", "FlatKernel", "FlatPotential", "HMC",
    "NUTS", "PyroPotential", "RandomWalkMH", "Run", "engine", "make_potential", "run", "split_mcmc",
]
