"""write_report(): one NetCDF per run, the table as CSV, figures and report.md, each run's
InferenceData built once by bnnzoo.diagnostics.to_inference_data."""

from tests.support import arviz_calls as az
import numpy as np
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


def test_report_says_when_nuts_hit_its_tree_depth_and_draws_function_space_figures(cosine, tmp_path):
    table, runs = compare(zoo.cosine_mlp(hidden=3), cosine, engines=[{"kind": "nuts", "max_tree_depth": 1}],
                          num_samples=10, warmup_steps=10, num_chains=2)
    hits = runs["nuts"].sample_stats["reached_max_tree_depth"]
    text = write_report(table, runs, tmp_path, "Caps").read_text()
    line = next(line for line in text.splitlines() if "Cap hits" in line)
    assert (f"NUTS reached max_tree_depth=1 on {hits.mean():.0%} of draws ({hits.sum()} of 20; per chain "
            f"{hits.sum(1)[0]}, {hits.sum(1)[1]}): the draws cost 2^1 - 1 = 1 gradients each; raise "
            "max_tree_depth or expect a shorter effective trajectory.") in line
    assert "2^max_tree_depth - 1" in text and "max_leapfrog_steps" in text  # the reading guide's cost bounds
    for kind in ("trace", "rank", "energy", "acceptance"):
        assert f"![nuts {kind}](nuts_{kind}.png)" in text and (tmp_path / f"nuts_{kind}.png").stat().st_size > 1000


def test_cap_line_of_chees_and_none_without_hits(rwmh_run):
    from bnnzoo.experiments.report import cap_line
    from bnnzoo.results import Run

    stats = {"reached_max_steps": np.array([[True, False, False, False]] * 20)}
    chees = Run(samples={"w": np.zeros((20, 4))}, sample_stats=stats, engine="chees",
                options={"max_leapfrog_steps": 50})
    assert cap_line(chees) == ("ChEES reached max_leapfrog_steps=50 on 25% of draws (20 of 80; on 20 of 20 chains): "
                               "the trajectory length is held at its cap, so the draws cost 50 gradients each; "
                               "raise max_leapfrog_steps or expect a shorter trajectory than the adaptation asks for.")
    assert cap_line(rwmh_run) is None


def test_a_chain_that_never_moved_is_named_in_the_report_the_table_and_inspect(rwmh_run, tmp_path, capsys):
    from bnnzoo.cli import main
    from bnnzoo.experiments.compare import _row
    from tests.diagnostics.test_summary import stuck

    bad = stuck(rwmh_run)
    path = write_report(pd.DataFrame([{"engine": "rwmh"}]), {"rwmh": bad}, tmp_path, "t")
    text = path.read_text()
    assert "**Chain 1 never moved**: its log density is not finite at the start" in text
    assert "chain 1 never moved (log density not finite at its start)" in _row("rwmh", "rwmh", bad)["note"]
    assert main(["inspect", str(tmp_path / "rwmh.nc")]) == 0
    out = capsys.readouterr().out
    assert "  chain 1 never moved: its log density is not finite at the start" in out
