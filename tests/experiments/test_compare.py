"""compare(): several engines on one model and data, one table; format_table() renders it."""

import math

import numpy as np
import pytest

from bnnzoo.experiments import compare, format_table
from bnnzoo.experiments.compare import _rank, verdict
from bnnzoo.models import zoo


def test_compare_two_cheap_engines(cosine):
    engines = ("rwmh", {"kind": "svi", "num_steps": 20, "num_samples": 30}, {"kind": "rwmh", "scale": 0.01})
    table, runs = compare(zoo.cosine_mlp(hidden=4), cosine, engines=engines, num_samples=40, warmup_steps=40,
                          num_chains=2)
    assert list(table.index) == ["rwmh", "svi", "rwmh#2"]
    assert list(runs) == ["rwmh", "svi", "rwmh#2"]
    expected = ["engine", "kind", "chains", "draws", "wall_time_s", "rmse", "nll", "ece", "coverage", "acceptance", "target_accept",
                "divergences", "failed", "elbo", "ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max", "ess_per_s",
                "converged", "rank", "note", "nrhat_lp", "nrhat_f_max", "rhat_w_max", "ess_w_min", "members", "modes",
                "rhat_lp_within", "rhat_f_within", "grad_members", "grad_warmup", "grad_sampling", "grad_total"]
    assert list(table.columns) == expected
    assert table.loc["svi", "draws"] == 30 and table.loc["rwmh", "draws"] == 40
    # SVI is reported as VI: its fits' convergence and ELBO, no R-hat/ESS of its guide draws, no rank
    svi = table.loc["svi"]
    assert svi["converged"] == bool(runs["svi"].vi.converged.all()) and svi["note"].startswith("VI: ")
    assert svi["elbo"] == pytest.approx(np.nanmean(runs["svi"].vi.final_elbo))
    assert all(math.isnan(svi[k]) for k in ("ess_lp", "rhat_lp", "ess_per_s", "rank", "acceptance", "failed"))
    # 40 draws x 2 chains of RWMH cannot reach ESS 100: flagged with the reason, not ranked
    for label in ("rwmh", "rwmh#2"):
        assert not table.loc[label, "converged"] and math.isnan(table.loc[label, "rank"])
        assert "ess_lp" in table.loc[label, "note"] and "< 100" in table.loc[label, "note"]
    numeric = table.drop(index="svi").drop(columns=["engine", "kind", "failed", "elbo", "target_accept",
                                                    "converged", "rank", "note", "nrhat_lp", "nrhat_f_max",
                                                    "modes", "rhat_lp_within", "rhat_f_within"])
    assert (table.loc[["rwmh", "rwmh#2"], "grad_total"] == 0).all()  # random-walk Metropolis takes no gradients
    assert table[["nrhat_lp", "nrhat_f_max"]].isna().all().all()  # 2 chains: too few for 4 superchains
    assert np.isfinite(numeric.to_numpy(float)).all()
    assert runs["rwmh"].data is runs["svi"].data and runs["rwmh"].model is runs["rwmh#2"].model
    row = table.loc["rwmh"]
    assert row["ess_per_s"] == pytest.approx(min(row["ess_lp"], row["ess_f_min"]) / row["wall_time_s"])
    assert row["acceptance"] == pytest.approx(runs["rwmh"].sample_stats["acceptance_rate"].mean())
    text = format_table(table)
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert lines[0].startswith("| engine") and "rhat_f_max" in lines[0]
    assert "| svi " in text and "–" in lines[3]
    assert f"({table.loc['rwmh', 'ess_per_s']:.2f})" in lines[2]  # unranked: in parentheses


def test_compare_classification_columns_and_labels(bernoulli_run):
    data = bernoulli_run.data
    table, runs = compare(bernoulli_run.model, data, engines=[{"kind": "rwmh", "label": "short"}],
                          num_samples=20, warmup_steps=20, num_chains=2)
    assert {"accuracy", "ece", "nll"} <= set(table.columns) and "rmse" not in table.columns
    assert list(runs) == ["short"] and table.loc["short", "kind"] == "rwmh"
    assert 0 <= table.loc["short", "accuracy"] <= 1
    with pytest.raises(ValueError, match="kind"):
        compare(bernoulli_run.model, data, engines=[{"scale": 0.1}])


def test_failed_chains_and_unconverged_fits_in_the_table_and_report(cosine, tmp_path):
    from bnnzoo.experiments import write_report
    from bnnzoo.experiments.report import _verdicts

    engines = [{"kind": "sgld", "label": "blown", "step_size": 10.0}, {"kind": "sgld", "label": "sound"},
               {"kind": "svi", "num_steps": 50}]
    with pytest.warns(UserWarning) as caught:
        table, runs = compare(zoo.cosine_mlp(hidden=4), cosine, engines=engines, num_samples=10, warmup_steps=10,
                              num_chains=2)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("SGLD: 2 of 2 chain(s) failed") for m in messages)
    assert any(m.startswith("svi: 2 of 2 fits did not converge") for m in messages)
    assert table.loc["blown", "failed"] == 2 and table.loc["sound", "failed"] == 0
    assert not table.loc["svi", "converged"] and not table.loc["blown", "converged"]
    assert "2 failed chain(s)" in table.loc["blown", "note"]
    sound = _verdicts(runs["sound"])
    assert sound[0] == "Failed chains: none of 2." and sound[1].startswith("Gradient evaluations: members 0, warmup 20,")
    assert _verdicts(runs["svi"])[0].startswith("**Not converged**: 0 of 2 fits converged")
    text = write_report(table.loc[["blown"]], {"blown": runs["blown"]}, tmp_path, "Verdicts").read_text()
    assert "**Chain 0 failed** at warm-up iteration" in text and "**Chain 1 failed**" in text
    assert "- **failed**:" in text and "- **converged, rank, note**:" in text


def _mcmc_row(label, ess_per_s, rhat=1.0, ess=500.0, divergences=0, failed=float("nan")):
    row = {"engine": label, "kind": "x", "chains": 4, "draws": 250, "_mcmc": True, "ess_per_s": ess_per_s,
           "rhat_lp": rhat, "rhat_f_max": rhat, "ess_lp": ess, "ess_f_min": ess, "divergences": divergences,
           "failed": failed, "rank": float("nan"), "note": ""}
    reasons = verdict(row)
    row.update(converged=not reasons, note="; ".join(reasons))
    return row




@pytest.mark.parametrize("kwargs, reason", [
    ({"rhat": 1.2}, "rhat_lp 1.2 > 1.05"),
    ({"ess": 35.0}, "ess_lp 35 < 100"),
    ({"divergences": 11}, "11 divergences > 1% of draws"),
    ({"failed": 1}, "1 failed chain(s)"),
    ({"rhat": float("nan")}, "rhat_lp not finite"),
])
def test_the_convergence_rule_names_each_reason(kwargs, reason):
    row = _mcmc_row("a", 1.0, **kwargs)
    assert not row["converged"] and reason in row["note"]


def test_only_converged_rows_are_ranked_and_the_best_has_rhat_below_1_01():
    rows = [_mcmc_row("fast_unconverged", 9.0, rhat=1.3), _mcmc_row("listed", 5.0, rhat=1.03),
            _mcmc_row("best", 2.0, rhat=1.005), _mcmc_row("slow", 1.0)]
    _rank(rows)
    ranks = {r["engine"]: r["rank"] for r in rows}
    assert math.isnan(ranks["fast_unconverged"]) and [ranks[k] for k in ("listed", "best", "slow")] == [1, 2, 3]
    assert [r["engine"] for r in rows if r["note"] == "best"] == ["best"]


@pytest.mark.parametrize("problem", ["classification", "regression"])
def test_compare_against_a_reference_equal_to_its_predictive(problem, bernoulli_run, cosine):
    from bnnzoo.diagnostics.scorecard import PredictiveReference, reference_from_run

    model, data = (bernoulli_run.model, bernoulli_run.data) if problem == "classification" else \
        (zoo.cosine_mlp(hidden=4), cosine)
    settings = dict(engines=["rwmh"], num_samples=20, warmup_steps=20, num_chains=2, seed=3, progress=False)
    _, runs = compare(model, data, **settings)
    # the same engine, seed and data give the same draws: their predictive is the reference's
    ref = reference_from_run(runs["rwmh"], "toy", num_samples=None)
    table, _ = compare(model, data, reference=ref, **settings)
    row = table.loc["rwmh"]
    assert row["lppd"] == pytest.approx(-row["nll"])
    if problem == "classification":
        assert row["agreement"] == 1.0 and row["tv"] == pytest.approx(0.0, abs=1e-12)
        assert list(table.columns[5:10]) == ["accuracy", "ece", "nll", "lppd", "agreement"]
    else:
        assert row["w2"] == 0.0 and row["tv"] == 0.0
        assert list(table.columns[5:12]) == ["rmse", "nll", "ece", "coverage", "lppd", "w2", "tv"]
    assert "| lppd" in format_table(table) or " lppd " in format_table(table)
    # a reference of other inputs, another task, a name with no stored file: refused before any engine runs
    elsewhere = PredictiveReference("elsewhere", ref.task, x=data.x_train.numpy(), probs=ref.probs,
                                    samples=ref.samples)
    with pytest.raises(ValueError, match="reference 'elsewhere': made at .* not the run's test inputs"):
        compare(model, data, reference=elsewhere, **settings)
    other = "regression" if problem == "classification" else "classification"
    wrong = PredictiveReference("wrong", other, x=ref.x, probs=np.full((len(ref.x), 2), 0.5),
                                samples=np.zeros((5, len(ref.x))))
    with pytest.raises(ValueError, match=f"reference 'wrong': a {other} reference for a {problem} run"):
        compare(model, data, reference=wrong, **settings)
    with pytest.raises(FileNotFoundError, match="reference 'no_such_problem': no stored reference predictive"):
        compare(model, data, reference="no_such_problem", **settings)
    with pytest.raises(TypeError, match="reference: a PredictiveReference, a problem name"):
        compare(model, data, reference=3, **settings)
