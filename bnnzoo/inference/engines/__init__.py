"""The engine layer: the registry of engines (options read from the kernels' dataclasses),
the typed run configuration (checked once, at the edge), ``run()`` and the drivers. No kernel
imports this package."""

from .config import COUNTS, RunConfig, RunSettings, run_config, run_settings
from .driver import check_memory, run_flat_kernel, run_pyro_hmc, run_vi
from .registry import DRIVER_OPTIONS, ENGINES, RUN_ARGUMENTS, Engine, register
from .run import check_run, resolve, run

__all__ = ["COUNTS", "DRIVER_OPTIONS", "ENGINES", "Engine", "RUN_ARGUMENTS", "RunConfig", "RunSettings", "check_memory",
           "check_run", "register", "resolve", "run", "run_config", "run_flat_kernel", "run_pyro_hmc", "run_settings",
           "run_vi"]
