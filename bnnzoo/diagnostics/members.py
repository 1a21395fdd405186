r"""Diagnostics for multimodal posteriors: the members of an ensemble warm start as superchains.

A run started from an ensemble (``warm_start="ensemble"``) has C = K M chains, chain ``c``
from member ``c // M``. The members sit in different modes, which the chains do not leave
in any affordable time, so R-hat across all chains is large even when every mode is well
explored. What is asked instead (Sommer et al., ICML 2024; MILE, ICLR 2025):

* **within-member** split R-hat and bulk ESS (ArviZ), of ``lp`` and of the function draws
  (:func:`~bnnzoo.diagnostics.predictive.function_draws`) at each test input, computed on each
  member's M chains alone: does each mode's chain mix? (For M = 1, the split R-hat of the one chain.)
* **nested R-hat** with the members as superchains (:mod:`.nested_rhat`; M >= 2);
* **function-space R-hat / ESS** over all chains (the across-member numbers), for reference;
* **modes visited**: members are in the same mode when their mean functions at the test inputs
  are close: :math:`d_{kl} = \sqrt{\operatorname{mean}_i (\bar f_{ki} - \bar f_{li})^2 /
  ((s_{ki}^2 + s_{li}^2)/2)} < 2`, with :math:`\bar f_{ki}` and :math:`s_{ki}` the mean and sd
  of member k's draws at input i; the modes are the connected groups of that relation.

The verdict: **converged within modes** when every member's within-member R-hat of ``lp`` and
of every function value is at most :data:`RHAT_WITHIN` (1.05). A run without a warm start is
judged the same way with each chain its own member.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import xarray as xr

from . import _arviz
from ._mixing import ess_rhat, nanmax, nanmin
from .nested_rhat import nested_rhat
from .predictive import function_draws

__all__ = ["MODE_DISTANCE", "RHAT_WITHIN", "add_member_coordinate", "add_members", "idata_member_mixing", "count_modes", "ensemble_run", "member_fits_group",
           "member_index", "member_mixing", "members_verdict", "within_member"]

#: the largest within-member R-hat of a run converged within modes
RHAT_WITHIN = 1.05
#: members whose mean functions are closer than this (in within-member sds) share a mode
MODE_DISTANCE = 2.0


def member_index(num_chains: int, chains_per_member: int) -> np.ndarray:
    """``[C]`` the member of each chain: ``c // chains_per_member``."""
    if chains_per_member < 1 or num_chains % chains_per_member:
        raise ValueError(f"chains_per_member={chains_per_member}: must divide the {num_chains} chains")
    return np.arange(num_chains) // chains_per_member


def within_member(draws, chains_per_member: int) -> tuple[np.ndarray, np.ndarray]:
    """Split R-hat and bulk ESS of ``draws [C, N, ...]`` on each member's chains alone:
    ``(rhat [K, ...], ess [K, ...])``. A member of one chain: that chain's two halves as two
    chains (ArviZ splits each again), since ArviZ gives no R-hat of a single chain."""
    draws = np.asarray(draws, dtype=np.float64)
    member = member_index(draws.shape[0], chains_per_member)
    if chains_per_member == 1:
        half = draws.shape[1] // 2
        pairs = [ess_rhat(np.stack([draws[k, :half], draws[k, half:2 * half]])) for k in range(draws.shape[0])]
        return np.stack([r for _, r in pairs]), np.stack([e for e, _ in pairs])
    pairs = [ess_rhat(draws[member == k]) for k in range(member.max() + 1)]
    return np.stack([r for _, r in pairs]), np.stack([e for e, _ in pairs])


def count_modes(f, chains_per_member: int, distance: float = MODE_DISTANCE) -> tuple[int, np.ndarray]:
    """Modes visited by the members (module docstring): ``(count, [K] mode label per member)``.
    ``f``: function draws ``[C, N, P]`` (or ``[C, N]``: one value per draw)."""
    f = np.asarray(f, dtype=np.float64)
    f = f.reshape(f.shape[:2] + (-1,))
    member = member_index(f.shape[0], chains_per_member)
    k = member.max() + 1
    groups = [f[member == j].reshape(-1, f.shape[2]) for j in range(k)]
    means = np.stack([g.mean(0) for g in groups])
    var = np.stack([g.var(0) for g in groups])
    floor = 1e-12 * max(float(np.abs(means).max()), 1.0) ** 2
    labels = np.arange(k)

    def root(i):
        while labels[i] != i:
            i = labels[i]
        return i

    for a in range(k):
        for b in range(a + 1, k):
            pooled = np.maximum((var[a] + var[b]) / 2, floor)
            if math.sqrt(float(np.mean((means[a] - means[b]) ** 2 / pooled))) < distance:
                labels[root(b)] = root(a)
    roots = np.array([root(i) for i in range(k)])
    _, labels = np.unique(roots, return_inverse=True)
    return int(labels.max() + 1), labels


def members_verdict(rhat_within: float, modes: int, members: int) -> str:
    """The plain-words verdict of a run with ``members`` superchains."""
    where = f"{modes} mode{'s' if modes != 1 else ''} visited by {members} member{'s' if members != 1 else ''}"
    if math.isfinite(rhat_within) and rhat_within <= RHAT_WITHIN:
        return f"converged within modes ({where}; within-member R-hat {rhat_within:.3f} <= {RHAT_WITHIN})"
    shown = f"{rhat_within:.3f}" if math.isfinite(rhat_within) else "not finite"
    return f"not converged within modes ({where}; within-member R-hat {shown}, above {RHAT_WITHIN})"


def _judge(f: np.ndarray, lp: np.ndarray | None, chains_per_member: int) -> dict[str, Any]:
    """The member diagnostics of function draws ``f [C, N, ...]`` and ``lp [C, N]``."""
    out: dict[str, Any] = {"num_members": int(f.shape[0] // chains_per_member), "chains_per_member": chains_per_member}
    rhat_f, ess_f = within_member(f, chains_per_member)
    out["rhat_f_within_max"], out["ess_f_within_min"] = nanmax(rhat_f), nanmin(ess_f)
    ess_all, rhat_all = ess_rhat(f)
    out["rhat_f_across_max"], out["ess_f_min"] = nanmax(rhat_all), nanmin(ess_all)
    superchains = out["num_members"]
    nested = chains_per_member >= 2 and superchains >= 2
    out["nrhat_f_members_max"] = nanmax(nested_rhat(f, superchains)) if nested else math.nan
    if lp is None:
        out.update(rhat_lp_within_max=math.nan, ess_lp_within_min=math.nan, rhat_lp_across=math.nan,
                   nrhat_lp_members=math.nan)
    else:
        rhat_lp, ess_lp = within_member(lp, chains_per_member)
        out["rhat_lp_within_max"], out["ess_lp_within_min"] = nanmax(rhat_lp), nanmin(ess_lp)
        out["rhat_lp_across"] = float(ess_rhat(lp)[1])
        out["nrhat_lp_members"] = float(nested_rhat(lp, superchains)) if nested else math.nan
    out["modes"], labels = count_modes(f, chains_per_member)
    out["mode_of_member"] = labels.tolist()
    worst = nanmax([out["rhat_f_within_max"], out["rhat_lp_within_max"]])
    out["converged_within_modes"] = bool(math.isfinite(worst) and worst <= RHAT_WITHIN)
    out["verdict"] = members_verdict(worst, out["modes"], out["num_members"])
    return out


def member_mixing(run, x=None, chunk_size: int = 256) -> dict[str, Any]:
    """The member diagnostics of a finished run (module docstring), function draws at ``x``
    (default: the test inputs). ``run.chains_per_member`` groups the chains (None: each chain its
    own member). Keys: ``num_members``, ``chains_per_member``, ``rhat_f_within_max``,
    ``ess_f_within_min``, ``rhat_lp_within_max``, ``ess_lp_within_min``, ``rhat_f_across_max``,
    ``ess_f_min``, ``rhat_lp_across``, ``nrhat_f_members_max``, ``nrhat_lp_members`` (NaN for M = 1),
    ``modes``, ``mode_of_member``, ``converged_within_modes`` and ``verdict`` (in words)."""
    per = getattr(run, "chains_per_member", None) or 1
    f = function_draws(run, x, chunk_size=chunk_size)
    lp = (run.sample_stats or {}).get("lp")
    return _judge(f, None if lp is None else np.asarray(lp), per)


def idata_member_mixing(idata) -> dict[str, Any] | None:
    """:func:`member_mixing` from an InferenceData with a ``member`` coordinate and a ``predictions``
    group (``f_mean`` at the test inputs, as :func:`~bnnzoo.diagnostics.to_inference_data` writes);
    None without them."""
    posterior = _arviz.group(idata, "posterior")
    predictions = _arviz.group(idata, "predictions")
    if posterior is None or "member" not in posterior.coords or predictions is None or "f_mean" not in predictions:
        return None
    member = np.asarray(posterior.coords["member"].values)
    per = int(np.sum(member == member[0]))
    f = np.asarray(predictions["f_mean"].values, dtype=np.float64)
    if f.ndim == 4:  # class probabilities: the class of the pooled mean, per input
        cls = f.mean((0, 1)).argmax(-1)
        f = np.take_along_axis(f, cls[None, None, :, None], -1)[..., 0]
    stats = _arviz.group(idata, "sample_stats")
    lp = None if stats is None or "lp" not in stats else np.asarray(stats["lp"].values)
    return _judge(f, lp, per)


def add_member_coordinate(idata, chains_per_member: int) -> None:
    """Give the ``posterior``, ``sample_stats`` (and ``predictions``) groups of ``idata`` a ``member``
    coordinate along ``chain`` (``chain // chains_per_member``), in place."""
    for name in ("posterior", "sample_stats", "predictions", "log_likelihood", "posterior_predictive"):
        group = _arviz.group(idata, name)
        if group is None or "chain" not in group.dims:
            continue
        member = member_index(group.sizes["chain"], chains_per_member)
        _arviz.replace_group(idata, name, group.assign_coords(member=("chain", member)))


def add_members(run, idata) -> None:
    """What an ensemble-started ``run`` adds to its InferenceData, in place: the ``member``
    coordinate (:func:`add_member_coordinate`) and a ``member_fits`` group (:func:`member_fits_group`).
    Nothing for a run without members."""
    per = getattr(run, "chains_per_member", None)
    if not per:
        return
    add_member_coordinate(idata, per)
    if getattr(run, "members", None):
        _arviz.add_group(idata, "member_fits", member_fits_group(run.members))


def member_fits_group(members) -> xr.Dataset:
    """The members' fits (``Run.members``) as a dataset: ``loss (member, step)`` and
    ``val_loss (member, epoch)`` (NaN padded), and per member ``val_metric``, ``best_epoch``,
    ``epochs``, ``wall_time``, ``grad_evals``, ``seed``."""
    k = len(members)

    def padded(name):
        rows = [np.asarray(getattr(m, name), dtype=np.float64) for m in members]
        out = np.full((k, max([len(r) for r in rows] + [0])), np.nan)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return out

    per = {name: ("member", np.asarray([getattr(m, name) for m in members]))
           for name in ("val_metric", "best_epoch", "epochs", "wall_time", "grad_evals", "seed")}
    return xr.Dataset({"loss": (("member", "step"), padded("losses")),
                       "val_loss": (("member", "epoch"), padded("val_losses")), **per},
                      coords={"member": np.arange(k)},
                      attrs={"description": "ensemble warm start: each member's training loss per step, "
                                            "validation loss per epoch, wall time and gradient evaluations"})


def ensemble_run(run):
    """The ensemble alone as a run: one chain whose K draws are the members' points (a uniform
    mixture over the members, a deep ensemble), scoreable like any run
    (:func:`~bnnzoo.diagnostics.scorecard.scorecard`). ``run.members`` must be set."""
    members = getattr(run, "members", None)
    if not members:
        raise ValueError(f"ensemble_run: run of {getattr(run, 'engine', '?')!r} has no ensemble members "
                         f"(warm_start='ensemble')")
    samples = {name: np.stack([np.asarray(m.values[name]) for m in members])[None] for name in members[0].values}
    return dataclasses.replace(run, samples=samples, sample_stats={}, warmup_sample_stats={},
                               engine=f"{run.engine}:ensemble", kind="ensemble",
                               wall_time=float(sum(m.wall_time for m in members)), chains_per_member=None,
                               grad_evals={"members": int(sum(m.grad_evals for m in members)), "warmup": 0,
                                           "sampling": 0, "total": int(sum(m.grad_evals for m in members))})
