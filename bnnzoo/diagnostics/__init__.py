"""How a run is judged: ArviZ export, summaries and mixing, predictive metrics, plots.

This package never imports an inference kernel at import time: it reads a
:class:`~bnnzoo.inference.Run` (duck-typed) or a finished ``pyro.infer.MCMC``
(through :func:`bnnzoo.results.split_mcmc`). The acceptance experiments of
:mod:`.acceptance` run the ``fixed_hmc`` engine, importing it inside the call.
"""

from .acceptance import (
    EfficiencyCurve,
    acceptance_sweep,
    efficiency_curve,
    size_sweep,
    theoretical_efficiency,
    theoretical_optimal_acceptance,
)
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
from .summary import chain_table, ess_rhat, mixing, sampling_time, sparsity, summary

__all__ = [
    "EfficiencyCurve", "acceptance_sweep", "efficiency_curve", "size_sweep", "theoretical_efficiency",
    "theoretical_optimal_acceptance",
    "accuracy", "chain_table", "ess_rhat", "expected_calibration_error", "function_draws",
    "gaussian_log_lik", "gaussian_nll", "map_draws", "mixing", "nll", "plot_acceptance",
    "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy", "plot_predictive_band",
    "plot_rank", "plot_trace", "pointwise_log_likelihood", "posterior_dataset",
    "predictive_means", "predictive_metrics", "rmse", "sampling_time", "site_dims", "sparsity", "summary",
    "to_inference_data",
]

_PLOTS = ("plot_acceptance", "plot_acceptance_sweep", "plot_acceptance_vs_size", "plot_efficiency", "plot_energy",
          "plot_predictive_band", "plot_rank", "plot_trace")


def __getattr__(name):  # plots import matplotlib.pyplot: only when first asked for
    if name in _PLOTS:
        from . import plots

        return getattr(plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
