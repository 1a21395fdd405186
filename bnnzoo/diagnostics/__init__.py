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
from .members import ensemble_run, member_mixing
from .scorecard import PredictiveReference, load_reference, reference_from_run, save_reference, scorecard
from .summary import (cap_hits, chain_table, ess_rhat, mixing, never_moved, run_checks, run_diagnostics, sampling_time,
                      sparsity, summary)
from .theory import optimal_acceptance, theoretical_efficiency, theoretical_optimal_acceptance

__all__ = [
    "ARVIZ_1", "from_netcdf", "groups",
    "optimal_acceptance", "theoretical_efficiency", "theoretical_optimal_acceptance",
    "PredictiveReference", "ensemble_run", "load_reference", "member_mixing", "reference_from_run", "save_reference",
    "scorecard",
    "accuracy", "cap_hits", "chain_table", "ess_rhat", "expected_calibration_error", "function_draws",
    "gaussian_log_lik", "gaussian_nll", "map_draws", "mixing", "never_moved", "nll", "plot_acceptance",
    "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy", "plot_predictive_band",
    "plot_rank", "plot_trace", "pointwise_log_likelihood", "posterior_dataset",
    "predictive_means", "predictive_metrics", "rmse", "run_checks", "run_diagnostics", "sampling_time", "site_dims", "sparsity", "summary",
    "to_inference_data",
]

_PLOTS = ("plot_acceptance", "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy",
          "plot_predictive_band", "plot_rank", "plot_trace")


def __getattr__(name):  # plots import matplotlib.pyplot: only when first asked for
    if name in _PLOTS:
        from . import plots

        return getattr(plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
