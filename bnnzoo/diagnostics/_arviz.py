"""ArviZ 0.2x and ArviZ 1.x behind one interface.

ArviZ 1.x splits ArviZ into ``arviz_base`` (conversion, ``from_dict`` returning an
``xarray.DataTree``), ``arviz_stats`` (``summary``, ``ess``, ``rhat``, ``bfmi``, ``loo``,
``diagnose``) and ``arviz_plots``; ArviZ 0.2x has all of them in ``arviz`` and keeps the groups
in an ``arviz.InferenceData``. Both hold one ``xarray.Dataset``-like node per group
(``idata.posterior``, ``idata.sample_stats``, ...), so the rest of :mod:`bnnzoo.diagnostics`
reads either the same way; what differs is here and nowhere else:

* building: :func:`from_dict` (group name -> variables, dims, attributes per group and for
  the whole object) and :func:`add_group` (a ready ``xarray.Dataset``, e.g. ``vi_trace``);
* reading: :func:`groups` (group names without ``/``), :func:`group` (one group as an
  ``xarray.Dataset``), :func:`from_netcdf`;
* statistics: :func:`summary`, :func:`ess`, :func:`rhat`, :func:`mcse`, :func:`bfmi`,
  :func:`elpd_loo` and, on ArviZ 1.x only, :func:`diagnose`.

A NetCDF file written under either version opens under the other: both write one NetCDF
group per ArviZ group.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, Mapping

import xarray as xr


def _major(package: str) -> int:
    try:
        return int(version(package).split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


#: the installed ArviZ's version string
ARVIZ_VERSION = version("arviz")
#: True under ArviZ 1.x (``arviz_base``/``arviz_stats``, DataTree), False under ArviZ 0.2x (InferenceData)
ARVIZ_1 = _major("arviz") >= 1

if ARVIZ_1:
    import arviz_base as _base
    import arviz_stats as _stats

    InferenceData = xr.DataTree
else:
    import arviz as _base

    _stats = _base
    InferenceData = _base.InferenceData

#: attributes ArviZ itself writes on every group it builds (the others are the run's)
ARVIZ_ATTRS = ("created_at", "arviz_version", "creation_library", "creation_library_version",
               "creation_library_language", "sample_dims")


# ------------------------------------------------------------------ build
def from_dict(groups: Mapping[str, Mapping[str, Any]], *, dims: Mapping[str, list[str]] | None = None,
              attrs: Mapping[str, Any] | None = None,
              group_attrs: Mapping[str, Mapping[str, Any]] | None = None):
    """InferenceData (0.2x) or DataTree (1.x) of ``{group: {variable: array}}``.

    Parameters
    ----------
    groups : mapping
        ArviZ group names (``posterior``, ``sample_stats``, ``warmup_sample_stats``,
        ``log_likelihood``, ``observed_data``, ``predictions``, ...) to their variables; the
        sampled groups are ``(chain, draw, ...)``, the ``*_data`` groups have no sample dims.
    dims : mapping, optional
        Variable name -> names of its dims after ``chain, draw`` (used for ``predictions`` too).
    attrs : mapping, optional
        Attributes of the whole object (the DataTree's root; InferenceData's ``attrs``).
    group_attrs : mapping, optional
        Group name -> its attributes (groups not built are ignored).
    """
    groups = {k: dict(v) for k, v in groups.items()}
    dims = dict(dims or {})
    group_attrs = {k: dict(v) for k, v in (group_attrs or {}).items() if k in groups}
    warmup = any(k.startswith("warmup_") for k in groups)
    if ARVIZ_1:
        return _base.from_dict(groups, dims=dims, pred_dims=dims, save_warmup=warmup,
                               attrs={"/": dict(attrs or {}), **group_attrs})
    return _base.from_dict(**groups, dims=dims, pred_dims=dims, save_warmup=warmup, attrs=dict(attrs or {}),
                           **{f"{k}_attrs": v for k, v in group_attrs.items()})


def add_group(idata, name: str, dataset: xr.Dataset):
    """Add ``dataset`` as group ``name`` (in place) and return ``idata``."""
    if ARVIZ_1:
        idata[name] = xr.DataTree(dataset)
    else:
        idata.add_groups({name: dataset})
    return idata


def replace_group(idata, name: str, dataset: xr.Dataset):
    """Put ``dataset`` in place of group ``name`` (in place, its attributes kept) and return ``idata``."""
    if ARVIZ_1:
        idata[name] = xr.DataTree(dataset)
    else:
        setattr(idata, name, dataset)
    return idata


# ------------------------------------------------------------------ read
def is_inference_data(obj) -> bool:
    """An ArviZ object with groups: InferenceData (0.2x) or DataTree (1.x)."""
    return isinstance(obj, (xr.DataTree,) + (() if ARVIZ_1 else (InferenceData,)))


def groups(idata) -> list[str]:
    """Names of the groups of an InferenceData or a DataTree (``["posterior", ...]``)."""
    if isinstance(idata, xr.DataTree):
        return [str(k) for k in idata.children]
    return list(idata.groups())


def group(idata, name: str) -> xr.Dataset | None:
    """Group ``name`` as an ``xarray.Dataset``; None when the object has no such group."""
    if name not in groups(idata):
        return None
    node = idata[name] if isinstance(idata, xr.DataTree) else getattr(idata, name)
    return node.to_dataset() if isinstance(node, xr.DataTree) else node


def from_netcdf(path):
    """Open a NetCDF file of either ArviZ version (InferenceData under 0.2x, DataTree under 1.x).
    Under 1.x the data are read into memory and the file is closed, so it can be written again."""
    if ARVIZ_1:
        with xr.open_datatree(str(path)) as tree:
            return tree.load()
    return _base.from_netcdf(str(path))


def to_netcdf(idata, path) -> None:
    """Write ``idata`` to ``path`` (one NetCDF group per ArviZ group)."""
    idata.to_netcdf(str(path))


# ------------------------------------------------------------------ statistics
def summary(data, var_names=None, *, group: str = "posterior", **kwargs):
    """ArviZ's summary table (``arviz.summary`` / ``arviz_stats.summary``): one row per scalar,
    ``mean``, ``sd``, a credible interval, ``ess_bulk``, ``ess_tail``, ``r_hat``, ``mcse_*``."""
    return _stats.summary(data, var_names=var_names, group=group, **kwargs)


def ess(data, method: str = "bulk"):
    """ArviZ's ESS of a Dataset (a Dataset) or of an array ``[chain, draw]`` (a number)."""
    return _stats.ess(data, method=method)


def rhat(data, method: str = "rank"):
    """ArviZ's R-hat (``rank``: rank-normalised split R-hat; ``split``: split R-hat)."""
    return _stats.rhat(data, method=method)


def mcse(data, method: str = "mean"):
    """ArviZ's Monte Carlo standard error."""
    return _stats.mcse(data, method=method)


def bfmi(energy):
    """E-BFMI per chain of ``energy [chain, draw]`` (an array) or of the ``energy`` statistic of an
    InferenceData / DataTree."""
    if hasattr(energy, "sample_stats"):
        energy = group(energy, "sample_stats")["energy"].values
    return _stats.bfmi(energy)


def elpd_loo(idata) -> float:
    """PSIS-LOO expected log pointwise predictive density (``arviz.loo``)."""
    result = _stats.loo(idata)
    return float(result.elpd if ARVIZ_1 else result.elpd_loo)


def diagnose(idata) -> dict:
    """ArviZ 1.x's ``arviz_stats.diagnose``: divergences, E-BFMI, ESS and R-hat checks, as a dict
    (nothing printed).

    Raises
    ------
    NotImplementedError
        Under ArviZ 0.2x, which has no ``diagnose``.
    """
    if not ARVIZ_1:
        raise NotImplementedError(f"diagnose needs ArviZ 1.x (arviz_stats); ArviZ {ARVIZ_VERSION} is installed")
    _, found = _stats.diagnose(idata, show_diagnostics=False, return_diagnostics=True)
    return found
