"""Studies on Ray (a local Ray with 2 workers): every cell's draws and row equal to those of the
same cell run in this process. Marked ``ray`` (``make test-ray``); skipped without Ray."""

from tests.support import arviz_calls as az
import numpy as np
import pandas as pd
import pytest

from bnnzoo.cli import main
from bnnzoo.experiments import RayExecutor, acceptance_sweep, compare, sweep
from bnnzoo.models import zoo

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

MODEL = zoo.cosine_mlp(hidden=3)
COUNTS = {"num_samples": 12, "warmup_steps": 12, "num_chains": 2}
#: columns that time the run (and what is ranked by time)
TIMED = ["wall_time_s", "ess_per_s", "rank", "note"]


@pytest.fixture(scope="module")
def ray2():
    """One local Ray with 2 workers for the module (each study re-enters it)."""
    with RayExecutor(workers=2) as executor:
        yield executor


def test_a_sweep_on_ray_gives_the_cells_of_a_sweep_in_process(cosine, tmp_path, ray2, capsys):
    grid = {"fixed_hmc": {"step_size": [0.01, 0.03], "num_steps": 4}, "svi": {"num_steps": 20}}
    args = (MODEL, cosine, ["fixed_hmc", "rwmh", "svi"], grid, [0, 1])
    here = sweep(*args, out=tmp_path / "here", progress=False, **COUNTS)
    there = sweep(*args, out=tmp_path / "ray", executor=ray2, **COUNTS)
    assert "running: " in capsys.readouterr().err
    pd.testing.assert_frame_equal(here.drop(columns=TIMED), there.drop(columns=TIMED))
    for path in sorted((tmp_path / "here").glob("*.nc")):
        a, b = az.from_netcdf(str(path)), az.from_netcdf(str(tmp_path / "ray" / path.name))
        for group in ("posterior", "sample_stats", "log_likelihood", "posterior_predictive"):
            if group in az.groups(a):
                assert a[group].equals(b[group]), (path.name, group)
    assert len(list((tmp_path / "ray").glob("*.nc"))) == len(here) == 8


def test_two_cells_run_side_by_side(cosine, ray2, capsys):
    acceptance_sweep(MODEL, cosine, [0.01], [3, 4], num_samples=5, warmup_steps=2, num_chains=2, executor=ray2)
    assert "running: step_size=0.01 num_steps=3, step_size=0.01 num_steps=4" in \
        capsys.readouterr().err


def test_compare_and_acceptance_sweep_on_ray(cosine, ray2):
    engines = ["rwmh", {"kind": "chees", "num_chains": 4}]
    table, runs = compare(MODEL, cosine, engines=engines, progress=False, **COUNTS)
    on_ray, ray_runs = compare(MODEL, cosine, engines=engines, progress=False, executor=ray2, **COUNTS)
    pd.testing.assert_frame_equal(table.drop(columns=TIMED), on_ray.drop(columns=TIMED))
    for label, result in runs.items():
        np.testing.assert_array_equal(result.samples["layers.0.weight"], ray_runs[label].samples["layers.0.weight"])
    assert ray_runs["rwmh"].model is ray_runs["chees"].model  # the study's model and data, given back
    sweep_args = (MODEL, cosine, [0.01, 0.02], [3])
    here = acceptance_sweep(*sweep_args, num_samples=5, warmup_steps=2, num_chains=2, progress=False)
    there = acceptance_sweep(*sweep_args, num_samples=5, warmup_steps=2, num_chains=2, executor=ray2)
    pd.testing.assert_frame_equal(here.drop(columns="wall_time"), there.drop(columns="wall_time"))


def test_the_sweep_command_on_ray(tmp_path, ray2, capsys):
    from tests.test_cli import SWEEP_FILE

    grid = tmp_path / "grid.toml"
    grid.write_text(SWEEP_FILE)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "here"), "--no-progress"]) == 0
    assert main(["sweep", str(grid), "--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    here, there = pd.read_csv(tmp_path / "here" / "sweep.csv"), pd.read_csv(tmp_path / "ray" / "sweep.csv")
    pd.testing.assert_frame_equal(here.drop(columns=TIMED), there.drop(columns=TIMED))


def test_a_cell_whose_worker_is_killed_runs_again_from_its_checkpoint_and_the_others_are_kept(cosine, tmp_path,
                                                                                              ray2):
    """SIGKILL to the Ray worker in the middle of a cell's sampling: Ray runs the cell again, which
    continues from the cell's checkpoint (its second segment) and gives the draws of the cell run in
    this process; the other cells run once."""
    import json
    import os
    import re
    import signal
    import threading
    import time

    from bnnzoo.inference import run

    counts = {"num_samples": 150, "warmup_steps": 150, "num_chains": 2}
    out, killed = tmp_path / "ray", []
    folder = out / "checkpoints" / "rwmh_seed_1"

    def kill_its_worker():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                holder = re.match(r"process (\d+) ", (folder / ".lock").read_text())
                progress = json.loads((folder / "progress.json").read_text())
            except (OSError, ValueError):
                holder = progress = None
            if holder and progress and not progress.get("finished") and progress.get("iteration", 0) >= 50:
                os.kill(int(holder.group(1)), signal.SIGKILL)
                killed.append(progress["iteration"])
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=kill_its_worker, daemon=True)
    watcher.start()
    table = sweep(MODEL, cosine, ["rwmh"], seeds=[0, 1, 2], out=out, executor=ray2, checkpoint_every=1, **counts)
    watcher.join(timeout=1)
    assert killed and len(table) == 3
    for seed in range(3):
        idata = az.from_netcdf(str(out / f"rwmh_seed_{seed}.nc"))
        want = run(MODEL, cosine, engine="rwmh", seed=seed, progress=False, **counts)
        np.testing.assert_array_equal(idata.posterior["layers.0.weight"].values, want.samples["layers.0.weight"])
        resumed = idata.posterior.attrs.get("resumed", "")
        assert resumed.startswith(f"continued from chain 0, iteration ") and "2 segments" in resumed \
            if seed == 1 else not resumed, (seed, resumed)
