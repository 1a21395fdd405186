"""ArviZ in the tests, one set of calls under ArviZ 0.2x and 1.x: ``from tests.support import arviz_calls as az``.

The statistics and I/O come from :mod:`bnnzoo.diagnostics._arviz`; ArviZ's own plots (which the
export must feed) are ``arviz.plot_*`` under 0.2x and their ``arviz_plots`` counterparts under 1.x.
"""

from __future__ import annotations

from types import SimpleNamespace

from bnnzoo.diagnostics._arviz import (  # noqa: F401  (re-exported for the tests)
    ARVIZ_1,
    ARVIZ_VERSION,
    bfmi,
    diagnose,
    elpd_loo,
    ess,
    from_netcdf,
    group,
    groups,
    mcse,
    rhat,
    summary,
)
from bnnzoo.diagnostics import _arviz

if ARVIZ_1:
    import arviz_base as _base
    import arviz_plots as _plots
else:
    import arviz as _base

    _plots = _base


def from_dict(**kwargs):
    """ArviZ 0.2x's keyword form on either version: ``from_dict(posterior={...}, sample_stats={...},
    posterior_attrs={...})``."""
    group_attrs = {k[: -len("_attrs")]: kwargs.pop(k) for k in list(kwargs) if k.endswith("_attrs")}
    return _arviz.from_dict(kwargs, group_attrs=group_attrs)


def convert_to_dataset(array):
    """An array ``[chain, draw, ...]`` as a posterior Dataset with variable ``x``."""
    return _base.convert_to_dataset(array)


#: ArviZ 1.x's PSIS refuses, where ArviZ 0.2x warns, draws too few (a tail of S / 5 < 5 draws) or constant
DEGENERATE_DRAWS = ("n_draws_tail must be at least 5", "All tail values are the same")


def loo(idata):
    """PSIS-LOO; ``.elpd_loo`` as in ArviZ 0.2x. NaN where ArviZ 1.x refuses too few or constant
    draws (:data:`DEGENERATE_DRAWS`), as ArviZ 0.2x gives a warning and no usable number there."""
    try:
        return SimpleNamespace(elpd_loo=elpd_loo(idata))
    except ValueError as err:
        if not (ARVIZ_1 and any(m in str(err) for m in DEGENERATE_DRAWS)):
            raise
        return SimpleNamespace(elpd_loo=float("nan"))


def plot_trace(idata):
    return _plots.plot_trace_dist(idata, backend="matplotlib") if ARVIZ_1 else _plots.plot_trace(idata)


def plot_energy(idata):
    return _plots.plot_energy(idata, backend="matplotlib") if ARVIZ_1 else _plots.plot_energy(idata)


def plot_ppc(idata, group: str = "posterior"):
    """Predictive checks of the ``posterior`` or ``prior`` predictive draws against the observed data."""
    if ARVIZ_1:
        return _plots.plot_ppc_dist(idata, group=f"{group}_predictive", backend="matplotlib")
    return _plots.plot_ppc(idata, group=group)


def plot_prior_posterior(idata):
    """Prior against posterior (ArviZ 0.2x: ``plot_dist_comparison``)."""
    if ARVIZ_1:
        return _plots.plot_prior_posterior(idata, backend="matplotlib")
    return _plots.plot_dist_comparison(idata)
