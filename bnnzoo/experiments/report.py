"""Write a comparison to a folder: one NetCDF per run, the table as CSV, and a
markdown report with figures."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path
from typing import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..diagnostics import cap_hits, never_moved, plots, to_inference_data  # noqa: E402
from ..inference.checkpoint import write_atomic  # noqa: E402
from ..diagnostics.members import member_mixing  # noqa: E402
from .compare import format_table  # noqa: E402
from .study import safe_label  # noqa: E402

READING_GUIDE = """\
## How to read this report

- **rmse / accuracy, nll, ece, coverage**: test-set error of the posterior predictive
  (nll: negative log predictive density per test point, the negative LPPD, lower is better;
  ece: expected calibration error, for regression that of the predictive CDF at the targets;
  coverage: share of regression targets inside the central 90% predictive interval).
- **ess_f_min, rhat_f_max**: mixing measured in *function space*: the smallest
  effective sample size and the largest R-hat of the predictive mean at the test
  inputs. This is the headline: network weights are not identifiable
  (hidden units can be permuted and sign-flipped), so weight-space R-hat is
  inflated even when predictions have converged.
- **ess_lp, rhat_lp**: the same for the log joint density `lp`.
- **ess_per_s**: min(ess_lp, ess_f_min) per second of wall time; in parentheses
  when the row has not converged, because such a number ranks nothing.
- **converged, rank, note**: an MCMC row is converged when R-hat of lp and of f is
  at most 1.05, ESS of both is at least 100, divergences are at most 1% of the draws
  and no chain failed; `note` gives the reasons when it is not. Only converged rows
  are ranked by ESS/s; `best` marks the first of them with R-hat at most 1.01. A VI
  row is converged when every fit converged (the smoothed ELBO settled: the mean ELBO
  of the last window of steps within 3 standard errors of that of the window before,
  and the mean of fresh gradient estimates at the fitted guide zero within noise); its
  draws come from the guide, so it has no R-hat or ESS and no rank, and `elbo` is its
  final ELBO. A fit that has not converged stopped too early: raise num_steps.
- **nrhat_lp, nrhat_f_max**: nested R-hat (Margossian et al. 2022) over 4
  superchains of consecutive chains, for runs of 8 chains or more: many short chains
  (ChEES) cannot show split R-hat's within-chain forgetting, but superchains that agree
  can; look for values below 1.01.
- **rhat_w_max, ess_w_min**: weight-space diagnostics, for reference only.
- **members, modes, rhat_lp_within, rhat_f_within**: a run started from an ensemble
  (`warm_start="ensemble"`) has `members` superchains; chains started from different members
  sit in different modes, so R-hat across all chains is large however well each mode mixed.
  Such a row is judged *within modes*: the largest split R-hat of lp and of f over each
  member's chains alone (at most 1.05: "converged within modes"). `modes` counts the modes the
  members visited (members whose mean predictions differ by less than 2 within-member sds share one).
- **grad_members, grad_warmup, grad_sampling, grad_total**: gradient evaluations of each stage
  (one per gradient call of one chain, full-batch or minibatch; the members: epochs x batches),
  so engines can be compared at equal cost (`budget=`).
- **acceptance, target_accept, divergences**: mean acceptance probability beside
  the engine's target, and the number of divergent transitions (NaN energies count
  as divergences) after warm-up.
- **cap hits** (a line under a run's heading; `cap_hits` in `summary()` and `chain_table()`):
  draws whose trajectory stopped at the engine's cap instead of where the sampler
  wanted. A NUTS draw costs at most 2^max_tree_depth - 1 leapfrog steps (gradients),
  reached when the tree hits max_tree_depth before a U-turn; a ChEES draw costs at most
  max_leapfrog_steps, reached when the adapted trajectory length is held at that cap.
  Many hits mean every draw pays the full cost and the trajectory is shorter than the
  sampler asks for: raise the cap, or read ESS per gradient with that in mind.
- **never moved** (a line under a run's heading, and the row's `note`): a chain whose every
  draw is its start. Where its log density is not finite there, every proposal is rejected
  and counted as a divergence (so "N divergences" can be one stuck chain); its draws are not
  posterior draws.
- **failed**: SG-MCMC chains whose iterates blew up (left the finite numbers,
  grew past 1e6 times their initial radius, or froze where the potential is not
  finite); their draws are not posterior draws. Empty for engines that do not check.

Figures, per run, in function space (weights are not identifiable, so none shows a weight):
- **trace**: `lp` and the network output f at three test inputs (10%, 50% and 90% of the
  test set, named by test index and x), at most 8 chains overlaid (the title says which),
  beside a histogram of every chain pooled.
- **rank**: the same scalars, every draw ranked over all chains; one heat-map row per
  chain, coloured by its rank counts over the counts of chains that agree (white is 1).
  A chain that has not mixed is a red/blue row; each panel gives the scalar's R-hat.
- **energy** (HMC-type engines): marginal energy and energy transitions, chains pooled
  (similar widths: the momentum resampling explores the energy), and E-BFMI per chain
  (below 0.3: poor).
- **acceptance**: acceptance over draws and the step size (RWMH: its proposal scale),
  warm-up at negative draws; beyond 8 chains the median and the 10-90% band over chains.
"""


def _save(fig, path: Path) -> str:
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path.name


def _figures(label: str, run, idata, out: Path) -> list[str]:
    """Figures of one run; a figure that does not apply (no energy) is skipped and said so."""
    lines = []
    try:  # lp and f at a few test inputs, computed once for the trace and the rank plot
        scalars = plots.function_space(run)
    except ValueError as err:
        scalars = None
        lines.append(f"({label} trace and rank figures not drawn: {err})")
    makers = []
    if scalars is not None:
        makers += [("trace", lambda: plots.plot_trace(scalars)), ("rank", lambda: plots.plot_rank(scalars))]
    if "energy" in run.sample_stats:
        makers.append(("energy", lambda: plots.plot_energy(idata)))
    if "acceptance_rate" in run.sample_stats:
        makers.append(("acceptance", lambda: plots.plot_acceptance(idata)))
    if run.model.task == "regression" and run.model.spec.num_inputs == 1:
        makers.append(("predictive", lambda: plots.plot_predictive_band(run)))
    for kind, make in makers:
        try:
            figure = make()
        except ValueError as err:  # e.g. a density of draws that never moved: say so, keep the report
            plt.close("all")
            lines.append(f"({label} {kind} figure not drawn: {err})")
            continue
        name = _save(figure, out / f"{safe_label(label)}_{kind}.png")
        lines.append(f"![{label} {kind}]({name})")
    return lines


#: how the report names the engines whose trajectories have a cap
_CAPPED_ENGINES = {"nuts": "NUTS", "chees": "ChEES"}


def cap_line(run) -> str | None:
    """One sentence when the run's trajectories stopped at the engine's cap (NUTS
    ``max_tree_depth``, ChEES ``max_leapfrog_steps``; MAMS ``max_steps``, from its
    ``trajectory_cap`` note); None when they never did or the engine has no cap."""
    caps = cap_hits(run)
    if caps is None:  # no per-draw flag: MAMS says in a note where its tuned L passes max_steps
        words = (getattr(run, "notes", None) or {}).get("trajectory_cap")
        return f"{run.engine}: {words}." if words else None
    if caps["hits"] == 0:
        return None
    engine = _CAPPED_ENGINES.get(str(run.engine), str(run.engine))
    option, cap = caps["option"], caps["cap"]
    share = "<1%" if caps["fraction"] < 0.005 else f"{caps['fraction']:.0%}"
    chains = len(caps["per_chain"])
    where = (f"per chain {', '.join(map(str, caps['per_chain']))}" if chains <= 16
             else f"on {sum(h > 0 for h in caps['per_chain'])} of {chains} chains")
    at = f"{option}={cap}" if cap is not None else f"its {option}"
    if option == "max_tree_depth":
        cost = (f"the draws cost 2^{cap} - 1 = {caps['max_gradients']} gradients each" if cap is not None
                else "the draws cost 2^max_tree_depth - 1 gradients each")
        advice = "raise max_tree_depth or expect a shorter effective trajectory"
    else:
        cost = (f"the trajectory length is held at its cap, so the draws cost {cap} gradients each"
                if cap is not None else "the trajectory length is held at its cap")
        advice = "raise max_leapfrog_steps or expect a shorter trajectory than the adaptation asks for"
    return (f"{engine} reached {at} on {share} of draws ({caps['hits']} of {caps['draws']}; {where}): "
            f"{cost}; {advice}.")


def _verdicts(run) -> list[str]:
    """Lines on the run's own checks: chains that never moved, trajectories at their cap, failed
    SG-MCMC chains, SVI fits that did not converge."""
    lines = [f"**Chain {c['chain']} never moved**: {c['message'].split(': ', 1)[1]}." for c in never_moved(run)]
    capped = cap_line(run)
    if capped is not None:
        lines.append(f"**Cap hits**: {capped}")
    notes = getattr(run, "notes", None) or {}
    failed = notes.get("failed")
    if failed is not None:
        bad = [(c, at) for c, (f, at) in enumerate(zip(failed, notes.get("failed_at") or [None] * len(failed))) if f]
        if not bad:
            lines.append(f"Failed chains: none of {len(failed)}.")
        for c, at in bad:
            where = "" if not at else (f" at {'warm-up' if at['phase'] == 'warmup' else 'sampling'} iteration "
                                       f"{at['iteration']} (draw {at['draw']}): {at['reason']}")
            lines.append(f"**Chain {c} failed**{where}; its draws are not posterior draws.")
    lines += member_lines(run)
    vi = getattr(run, "vi", None)
    if vi is not None and getattr(vi, "converged", None) is not None:
        changes = ", ".join(f"{r:+.2f}" for r in vi.relative_change)
        stationarity = ", ".join(f"{z:.2f}" for z in vi.stationarity) if vi.stationarity is not None else "–"
        verdict = "Converged" if bool(vi.converged.all()) else "**Not converged**"
        lines.append(f"{verdict}: {int(vi.converged.sum())} of {len(vi.converged)} fits converged (change of the "
                     f"smoothed ELBO over the last {vi.window} steps: {changes} standard errors; stationarity of "
                     f"the guide: {stationarity}; tolerance {vi.tolerance:g}; steps taken: "
                     f"{', '.join(str(int(n)) for n in vi.num_steps)}).")
        if len(vi.converged) > 1:
            lines.append(f"Spread across fits: ELBO {vi.spread_elbo:.3g} nats, guide means up to "
                         f"{vi.spread_loc:.3g} guide sds (network weights are not identifiable).")
    return lines


def member_lines(run) -> list[str]:
    """Lines on an ensemble warm start (its members' fits and the verdict within modes) and on the
    gradient evaluations of each stage."""
    lines = []
    members = getattr(run, "members", None)
    if members:
        fits = "; ".join(f"member {k}: {m.epochs} epochs (best {m.best_epoch}), validation loss {m.val_metric:.4g}, "
                         f"final training loss {m.losses[-1]:.4g}, {m.wall_time:.2f} s, {m.grad_evals} gradients"
                         for k, m in enumerate(members))
        lines.append(f"**Ensemble warm start**: {len(members)} members x {run.chains_per_member} chains each. {fits}.")
        judged = member_mixing(run)
        lines.append(f"**Modes**: {judged['verdict']}; R-hat across all chains: lp {judged['rhat_lp_across']:.3f}, "
                     f"f {judged['rhat_f_across_max']:.3f}; nested R-hat over members: f "
                     f"{judged['nrhat_f_members_max']:.3f}.")
    evals = getattr(run, "grad_evals", None)
    if evals:
        budget = (getattr(run, "notes", None) or {}).get("budget")
        spent = ", ".join(f"{k} {v}" for k, v in evals.items())
        lines.append(f"Gradient evaluations: {spent}" + (f" ({_budget_words(budget)})." if budget else "."))
    return lines


def write_report(table: pd.DataFrame, runs: Mapping[str, object], out: str | Path, title: str,
                 description: str = "") -> Path:
    """Write ``<label>.nc`` per run, ``comparison.csv``, figures and ``report.md`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "comparison.csv", index=False)
    lines = [f"# {title}", "", description, "",
             f"Generated {datetime.datetime.now():%Y-%m-%d %H:%M} on {platform.machine()} "
             f"({platform.python_implementation()} {platform.python_version()}).", "",
             "## Comparison", "", format_table(table), ""]
    for label, run in runs.items():
        idata = to_inference_data(run)
        write_atomic(out / f"{safe_label(label)}.nc", lambda tmp: idata.to_netcdf(str(tmp)))  # never half a file
        lines += [f"## {label}", "",
                  f"{run.num_chains} chains x {run.num_draws} draws, {run.wall_time:.1f} s. "
                  f"Options: `{run.options}`", ""]
        verdicts = _verdicts(run)
        lines += verdicts + ([""] if verdicts else [])
        lines += _figures(label, run, idata, out) + [""]
    lines.append(READING_GUIDE)
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _budget_words(note: dict) -> str:
    """``Run.notes["budget"]`` in words: the budget, where it ended warm-up, the draws it cut."""
    words = [f"budget {note['budget']}"]
    if "warmup_planned" in note:
        words.append(f"warm-up planned to the {note['warmup_planned']} iterations its share pays for")
    if "warmup_ended_at" in note:
        words.append(f"warm-up ended at its share after {note['warmup_ended_at']} iterations")
    cut = note["draws_dropped"] + note.get("draws_not_run", 0)
    words.append(f"{cut} draws past it dropped or not run")
    return "; ".join(words)
