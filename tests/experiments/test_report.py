"""write_report(): one NetCDF per run, the table as CSV, figures and report.md, each run's
InferenceData built once by bnnzoo.diagnostics.to_inference_data."""

import arviz as az
import pandas as pd

import bnnzoo.diagnostics
from bnnzoo.experiments import compare, format_table, report, write_report
from bnnzoo.models import zoo


def test_write_report_builds_each_inference_data_once(cosine, tmp_path, monkeypatch):
    engines = ["rwmh", {"kind": "svi", "label": "svi fit", "num_steps": 20}]
    table, runs = compare(zoo.cosine_mlp(hidden=4), cosine, engines=engines, num_samples=20, warmup_steps=20,
                          num_chains=2)
    assert report.to_inference_data is bnnzoo.diagnostics.to_inference_data
    calls = []

    def counting(run, *args, **kwargs):
        calls.append(run)
        return bnnzoo.diagnostics.to_inference_data(run, *args, **kwargs)

    monkeypatch.setattr(report, "to_inference_data", counting)
    path = write_report(table, runs, tmp_path / "out", "A title", "A description.")
    assert [id(r) for r in calls] == [id(r) for r in runs.values()]  # once per run, in order

    out = tmp_path / "out"
    assert path == out / "report.md"
    text = path.read_text()
    assert text.startswith("# A title\n\nA description.\n")
    assert format_table(table) in text and "## How to read this report" in text
    for label in ("rwmh", "svi fit"):
        assert f"## {label}" in text
    back = pd.read_csv(out / "comparison.csv")
    assert list(back["engine"]) == ["rwmh", "svi fit"]
    assert set(az.from_netcdf(str(out / "rwmh.nc")).posterior.data_vars) == set(runs["rwmh"].samples)
    assert (out / "svi_fit.nc").exists()
    # MCMC runs get trace, acceptance and predictive figures; every linked figure exists
    assert "![rwmh trace](rwmh_trace.png)" in text and "![rwmh predictive](rwmh_predictive.png)" in text
    for name in [line.split("(")[-1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (out / name).stat().st_size > 1000
