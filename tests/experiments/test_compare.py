"""compare(): several engines on one model and data, one table; format_table() renders it."""

import math

import numpy as np
import pytest

from bnnzoo.experiments import compare, format_table
from bnnzoo.models import zoo


def test_compare_two_cheap_engines(cosine):
    engines = ("rwmh", {"kind": "svi", "num_steps": 20, "num_samples": 30}, {"kind": "rwmh", "scale": 0.01})
    table, runs = compare(zoo.cosine_mlp(hidden=4), cosine, engines=engines, num_samples=40, warmup_steps=40,
                          num_chains=2)
    assert list(table.index) == ["rwmh", "svi", "rwmh#2"]
    assert list(runs) == ["rwmh", "svi", "rwmh#2"]
    expected = ["engine", "kind", "chains", "draws", "wall_time_s", "rmse", "nll", "acceptance", "divergences",
                "failed", "converged", "ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max", "ess_per_s", "rhat_w_max",
                "ess_w_min"]
    assert list(table.columns) == expected
    assert table.loc["svi", "draws"] == 30 and table.loc["rwmh", "draws"] == 40
    # the run's own verdicts: SG-MCMC chains that failed, SVI fits that converged; NaN where not checked
    assert table[["failed", "converged"]].drop(index="svi").isna().all().all()
    assert math.isnan(table.loc["svi", "failed"]) and table.loc["svi", "converged"] == runs["svi"].vi.converged.sum()
    numeric = table.drop(columns=["engine", "kind", "failed", "converged"])
    assert np.isfinite(numeric.drop(index="svi").to_numpy(float)).all()
    svi = numeric.loc["svi"]
    assert math.isnan(svi["acceptance"]) and math.isnan(svi["divergences"])
    assert np.isfinite(svi.drop(["acceptance", "divergences"]).to_numpy(float)).all()
    assert runs["rwmh"].data is runs["svi"].data and runs["rwmh"].model is runs["rwmh#2"].model
    row = table.loc["rwmh"]
    assert row["ess_per_s"] == pytest.approx(min(row["ess_lp"], row["ess_f_min"]) / row["wall_time_s"])
    assert row["acceptance"] == pytest.approx(runs["rwmh"].sample_stats["acceptance_rate"].mean())
    text = format_table(table)
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert lines[0].startswith("| engine") and "rhat_f_max" in lines[0]
    assert "| svi " in text and "–" in lines[3]


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
    assert table.loc["svi", "converged"] == 0 and math.isnan(table.loc["blown", "converged"])
    assert _verdicts(runs["sound"]) == ["Failed chains: none of 2."]
    assert _verdicts(runs["svi"])[0].startswith("**Not converged**: 0 of 2 fits converged")
    text = write_report(table.loc[["blown"]], {"blown": runs["blown"]}, tmp_path, "Verdicts").read_text()
    assert "**Chain 0 failed** at warm-up iteration" in text and "**Chain 1 failed**" in text
    assert "- **failed**:" in text and "- **converged**:" in text
