"""How a finished run is judged: ArviZ export, summaries and mixing, predictive metrics,
plots, and the theory of HMC acceptance.

This package never imports :mod:`bnnzoo.inference`, not even inside a function: it
reads a :class:`~bnnzoo.results.Run` (duck-typed) or a finished ``pyro.infer.MCMC``
(through :func:`bnnzoo.results.split_mcmc`). Studies that run engines (comparisons,
acceptance sweeps, efficiency curves, reports) live in :mod:`bnnzoo.experiments`.
"""

from ._arviz import ARVIZ_1, from_netcdf, groups
from .arviz import posterior_dataset, site_dims, to_inference_data
from .predictive import (
    accuracy,
    expected_calibration_error,
    function_draws,
    gaussian_log_lik,
    gaussian_nll,
    map_draws,
    nll,
    pointwise_log_likelihood,
    predictive_means,
    predictive_metrics,
    rmse,
)
from .summary import cap_hits, chain_table, ess_rhat, mixing, run_checks, sampling_time, sparsity, summary
from .theory import optimal_acceptance, theoretical_efficiency, theoretical_optimal_acceptance

__all__ = [
    "ARVIZ_1", "from_netcdf", "groups",
    "optimal_acceptance", "theoretical_efficiency", "theoretical_optimal_acceptance",
    "accuracy", "cap_hits", "chain_table", "ess_rhat", "expected_calibration_error", "function_draws",
    "gaussian_log_lik", "gaussian_nll", "map_draws", "mixing", "nll", "plot_acceptance",
    "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy", "plot_predictive_band",
    "plot_rank", "plot_trace", "pointwise_log_likelihood", "posterior_dataset",
    "predictive_means", "predictive_metrics", "rmse", "run_checks", "sampling_time", "site_dims", "sparsity", "summary",
    "to_inference_data",
]

_PLOTS = ("plot_acceptance", "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy",
          "plot_predictive_band", "plot_rank", "plot_trace")


def __getattr__(name):  # plots import matplotlib.pyplot: only when first asked for
    if name in _PLOTS:
        from . import plots

        return getattr(plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
