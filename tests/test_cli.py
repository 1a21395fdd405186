"""The `bnnzoo` command at tiny sizes."""

import dataclasses
import subprocess
import sys
import textwrap

from tests.support import arviz_calls as az
import pandas as pd
import pytest

from bnnzoo.cli import main
from bnnzoo.inference import ENGINES

RUN_FILE = textwrap.dedent("""\
    [model]
    input_dim = 1
    layers = [{units = 5, activation = "tanh"}, {units = 1}]
    prior = {kind = "laplace", scale = 1.0}
    likelihood = {kind = "gaussian", noise = 0.1}
    [model.priors."layers.0.weight"]
    kind = "spike_and_slab"
    [data]
    name = "cosine"
    n_train = 30
    [run]
    num_chains = 2
    seed = 3
    [[engines]]
    kind = "nuts"
    num_samples = 15
    warmup_steps = 15
    max_tree_depth = 3
    [[engines]]
    kind = "rwmh"
    num_samples = 50
    warmup_steps = 50
    """)


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--quick", "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_the_full_demo_shows_converged_chees_and_nuts_rows(tmp_path):
    """What the demo's text tells the reader to conclude (about 3 minutes on 2 cores)."""
    assert main(["demo", "--out", str(tmp_path), "--no-progress"]) == 0
    table = pd.read_csv(tmp_path / "comparison.csv").set_index("engine")
    assert table.loc[["chees", "batched_nuts"], "converged"].astype(bool).all()
    assert set(table.loc[["chees", "batched_nuts"], "rank"]) == {1, 2}
    assert not table.drop(index=["chees", "batched_nuts"])["converged"].astype(bool).any()


def test_demo_writes_report_runs_and_table(demo_out):
    report = (demo_out / "report.md").read_text()
    table = pd.read_csv(demo_out / "comparison.csv")
    assert list(table["engine"]) == ["chees", "batched_nuts", "hmc", "rwmh", "svi"]
    assert list(table["chains"]) == [4, 4, 2, 2, 2]
    for engine in table["engine"]:
        assert (demo_out / f"{engine}.nc").exists()
        assert f"## {engine}" in report
    assert (demo_out / "hmc_energy.png").exists() and (demo_out / "hmc_predictive.png").exists()
    assert "How to read this report" in report
    hmc = az.from_netcdf(str(demo_out / "hmc.nc"))
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(az.groups(hmc))
    assert hmc.posterior.sizes["chain"] == 2


def test_inspect_prints_a_summary_and_the_run_diagnostics(demo_out, capsys):
    assert main(["inspect", str(demo_out / "batched_nuts.nc")]) == 0
    out = capsys.readouterr().out
    assert "groups" in out and "layers.0.weight" in out and "r_hat" in out
    stats = az.from_netcdf(str(demo_out / "batched_nuts.nc")).sample_stats
    acceptance = float(stats["acceptance_rate"].mean())
    assert f"acceptance: {acceptance:.3f} mean (target 0.9); per chain " in out
    assert f"divergences: {int(stats['diverging'].sum())}; per chain " in out
    assert "step size: per chain " in out and "lp: R-hat " in out
    # the numbers of the report's table, computed by the same function; run-level lines before weight rows
    row = pd.read_csv(demo_out / "comparison.csv").set_index("engine").loc["batched_nuts"]
    assert f"lp: R-hat {row['rhat_lp']:.3f}, ESS bulk {row['ess_lp']:.0f}" in out
    assert f"function space (predictive mean at the test inputs): R-hat max {row['rhat_f_max']:.3f}" in out
    assert out.index("run diagnostics:") < out.index("function space") < out.index("weight-space rows")
    assert out.index("weight-space rows") < out.index("layers.0.weight")
    assert "options:\n" in out and "  max_tree_depth = 4\n" in out
    assert "  target_accept = 0.9\n" in out  # given by the demo, so no recommendation note
    assert main(["inspect", str(demo_out / "hmc.nc")]) == 0
    assert "notes:\n  target_accept_reason: smooth network" in capsys.readouterr().out
    assert main(["inspect", str(demo_out / "svi.nc")]) == 0
    out = capsys.readouterr().out
    assert "acceptance:" not in out and "divergences:" not in out  # VI records neither
    assert "  guide: mean-field Normal" in out


def test_run_reads_a_hand_written_toml(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(RUN_FILE)
    assert main(["run", str(spec), "--out", str(tmp_path / "res"), "--no-progress"]) == 0
    table = pd.read_csv(tmp_path / "res" / "comparison.csv")
    assert list(table["engine"]) == ["nuts", "rwmh"]
    assert list(table["chains"]) == [2, 2]
    assert (tmp_path / "res" / "rwmh.nc").exists()
    # without a description: a summary of the run file, then the file's own text at the top of the report
    report = (tmp_path / "res" / "report.md").read_text()
    head = report.split("## Comparison")[0]
    assert "on data `cosine` (n_train = 30); engines: nuts, rwmh; num_chains = 2, seed = 3." in head
    assert f"```toml\n{RUN_FILE.rstrip()}\n```" in head


def test_run_file_description(tmp_path):
    from bnnzoo.cli import read_run_file

    spec = tmp_path / "spec.toml"
    spec.write_text('description = "Laplace prior, two engines."\n' + RUN_FILE)
    plan = read_run_file(spec)
    assert plan["description"] == "Laplace prior, two engines." and plan["text"] == spec.read_text()
    spec.write_text("description = 3\n" + RUN_FILE)
    with pytest.raises(ValueError, match="description: expected a string, got 3"):
        read_run_file(spec)


def test_list_names_every_registry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("spike_and_slab", "horseshoe", "categorical", "nuts", "rwmh", "svi", "cosine",
                 "linear_p1000", "digits", "csv", "cosine_mlp"):
        assert word in out


def test_list_gives_every_prior_with_its_parameters_and_first_sentence(capsys):
    from bnnzoo.models import PRIORS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # descriptions are wrapped
    for kind, cls in PRIORS.items():
        params = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        assert f"{kind} {cls.__name__}({params}) " in flat
    for markup in ("``", ":math:", ":class:", ":func:", "\\"):
        assert markup not in out
    # whole first sentences, formulas as text: not cut at "eq. 4", a display formula, or a paragraph break
    assert "Spike-and-slab prior with the indicator marginalised (paper 001, eq. 4): w ~ (1-delta) Laplace(0, " \
           "sigma v_0) + delta N(0, sigma^2 v_1). " in flat
    assert "Horseshoe prior: w_i ~ N(0, tau^2 lambda_i^2), lambda_i ~ C^+(0, 1), tau ~ C^+(0, global_scale). " \
           in flat
    assert "inputs of which the first 5 matter, y = tanh(2 tanh(2 x1 - x2))" in flat
    assert "(z iid N(0, 1): correlation 0.5 between every pair). group_sparse_classification" in flat


@pytest.mark.parametrize("engine", list(ENGINES))
def test_list_engine_gives_every_option_with_its_default_and_meaning(engine, capsys):
    assert main(["list", engine]) == 0
    out = capsys.readouterr().out
    for name, default in ENGINES[engine].defaults().items():
        line = next(line for line in out.splitlines() if line.startswith(f"  {name} = {default!r}"))
        assert len(line.split(": ", 1)[-1]) > 3 and ": " in line, line  # a meaning after the default
    if engine == "proximal_hmc":
        assert "lam = None: Moreau parameter" in out


@pytest.mark.parametrize(
    "content, message",
    [
        (RUN_FILE.replace('activation = "tanh"', 'activation = "rleu"'),
         "layers[0].activation: unknown activation 'rleu'; choose one of"),
        (RUN_FILE.replace('kind = "rwmh"', 'kind = "rwhm"'), "engine 'rwhm': unknown engine"),
        (RUN_FILE.replace('name = "cosine"', 'name = "cosin"'), "dataset 'cosin'"),
        ("[model\n", "not valid TOML"),
        (RUN_FILE.replace("seed = 3", 'seed = "zero"'), "[run] seed must be an integer >= 0, got 'zero'"),
        (RUN_FILE.replace('kind = "rwmh"\nnum_samples', 'kind = "rwmh"\nnum_sample'),
         "engines[1] (rwmh): engine 'rwmh': unknown option(s) num_sample; did you mean 'num_samples'?"),
        (RUN_FILE.replace("max_tree_depth = 3", "target_accept = 1.5"),
         "engines[0] (nuts): engine 'nuts': target_accept must be strictly between 0 and 1, got 1.5"),
        (RUN_FILE.replace("max_tree_depth = 3", "max_tree_depth = 0"),
         "engines[0] (nuts): engine 'nuts': max_tree_depth must be an integer >= 1, got 0"),
    ],
    ids=["activation", "engine", "dataset", "toml", "seed", "second-engine-typo", "nuts-target", "tree-depth"],
)
def test_errors_are_one_line_and_exit_nonzero(tmp_path, content, message):
    spec = tmp_path / "bad.toml"
    spec.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "bnnzoo.cli", "run", str(spec), "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bnnzoo: error:"), proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.nc"))  # refused before any engine ran


TINY_MODEL_AND_DATA = """\
[model]
input_dim = 1
layers = [{units = 3, activation = "tanh"}, {units = 1}]
[data]
name = "cosine"
n_train = 20
"""
CTRL_C_RUN = TINY_MODEL_AND_DATA + """\
[run]
num_chains = 2
[[engines]]
kind = "rwmh"
num_samples = 20
warmup_steps = 20
[[engines]]
kind = "chees"
num_samples = 400
warmup_steps = 100
"""


def test_ctrl_c_keeps_the_finished_engine_and_a_report_and_resume_finishes(tmp_path):
    """Ctrl-C while the second engine runs: the first engine's NetCDF and a report of it stay,
    the message says how to go on, and ``--resume`` finishes without running the first again."""
    import os
    import signal
    import time

    spec, out = tmp_path / "run.toml", tmp_path / "out"
    spec.write_text(CTRL_C_RUN)
    argv = [sys.executable, "-m", "bnnzoo.cli", "run", str(spec), "--out", str(out), "--no-progress",
            "--checkpoint-every", "5"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (out / "checkpoints" / "chees" / "progress.json").exists():  # no clock: a slow machine waits
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 130, err
    assert f"--out {out} --resume" in err and "1 finished engine(s)" in err
    assert az.from_netcdf(str(out / "rwmh.nc")).posterior.sizes["draw"] == 20
    assert "(interrupted)" in (out / "report.md").read_text() and not (out / "chees.nc").exists()
    assert (out / "checkpoints" / "chees" / "state.pt").exists()
    finished = os.path.getmtime(out / "checkpoints" / "rwmh" / "result.pt")
    proc = subprocess.run(argv + ["--resume"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert az.from_netcdf(str(out / "chees.nc")).posterior.sizes["draw"] == 400
    assert os.path.getmtime(out / "checkpoints" / "rwmh" / "result.pt") == finished  # not run again


def test_run_file_dtype(tmp_path):
    """``[run] dtype = "float64"``: the runs are float64; a non-float dtype is named before anything runs."""
    spec = tmp_path / "run.toml"
    spec.write_text(CTRL_C_RUN.replace("num_chains = 2", 'num_chains = 2\ndtype = "float64"')
                    .replace("num_samples = 400", "num_samples = 5").replace("warmup_steps = 100", "warmup_steps = 5"))
    assert main(["run", str(spec), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert az.from_netcdf(str(tmp_path / "out" / "chees.nc")).posterior["layers.0.weight"].dtype == "float64"
    spec.write_text(CTRL_C_RUN.replace("num_chains = 2", 'num_chains = 2\ndtype = "int64"'))
    proc = subprocess.run([sys.executable, "-m", "bnnzoo.cli", "run", str(spec), "--out", str(tmp_path / "o2")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "[run] dtype must be a torch floating dtype" in proc.stderr
    assert not (tmp_path / "o2").exists()


def test_run_file_float16_is_refused_before_anything_runs(tmp_path, capsys):
    spec = tmp_path / "run.toml"
    spec.write_text(CTRL_C_RUN.replace("num_chains = 2", 'num_chains = 2\ndtype = "float16"'))
    assert main(["run", str(spec), "--out", str(tmp_path / "out")]) == 1
    assert "bnnzoo: error: [run] dtype 'float16' is too coarse for an accept/reject test" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, message", [
    (None, "run file not found"),
    ("[model]\ninput_dim = 1\n[data]\nname = 'cosine'\n[[engines]]\nkind =\n", "not valid TOML"),
    ("[model]\ninput_dim = 1\n[data]\nname = 'cosine'\n[runn]\nseed = 1\n", "unknown table(s) runn"),
    ("[model]\ninput_dim = 1\n[data]\nname = 'cosine'\n", "add at least one [[engines]] table"),
    ("[model]\ninput_dim = 1\n[[engines]]\nkind = 'rwmh'\n", "[data]: missing"),
])
def test_a_run_file_mistake_is_reported_before_torch_is_imported(tmp_path, text, message):
    """The file's own checks come before the heavy imports (seconds, tens on a loaded machine)."""
    spec = tmp_path / "run.toml"
    if text is not None:
        spec.write_text(text)
    code = ("import sys; from bnnzoo.cli import main; rc = main(['run', sys.argv[1]]); "
            "print(rc, 'torch' in sys.modules, 'pyro' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True)
    assert proc.stdout.split() == ["1", "False", "False"], proc.stderr
    assert message in proc.stderr


def test_run_file_device_and_the_device_option(tmp_path, capsys):
    """``[run] device`` and ``--device`` (which wins): the device is in every run's attributes; a device
    this machine lacks is named, with where it was given, before anything runs."""
    import torch

    tiny = CTRL_C_RUN.replace("num_samples = 400", "num_samples = 5").replace("warmup_steps = 100", "warmup_steps = 5")
    spec = tmp_path / "run.toml"
    spec.write_text(tiny.replace("num_chains = 2", 'num_chains = 2\ndevice = "cpu"'))
    assert main(["run", str(spec), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert az.from_netcdf(str(tmp_path / "out" / "rwmh.nc")).posterior.attrs["device"] == "cpu"
    spec.write_text(tiny.replace("num_chains = 2", 'num_chains = 2\ndevice = "cuda:7"'))
    assert main(["run", str(spec), "--out", str(tmp_path / "o2"), "--no-progress"]) == 1
    assert "bnnzoo: error: [run] device 'cuda:7' is not available; this machine has: cpu" in capsys.readouterr().err
    assert main(["run", str(spec), "--out", str(tmp_path / "o3"), "--device", "tpu"]) == 1
    assert "bnnzoo: error: --device 'tpu' is not a torch device" in capsys.readouterr().err
    assert main(["demo", "--quick", "--out", str(tmp_path / "o4"), "--device", "nonsense"]) == 1
    assert "bnnzoo: error: --device 'nonsense' is not a torch device" in capsys.readouterr().err
    assert not any((tmp_path / o).exists() for o in ("o2", "o3", "o4"))
    if not torch.cuda.is_available():  # the file says cuda:7, the option wins
        assert main(["run", str(spec), "--out", str(tmp_path / "o5"), "--no-progress", "--device", "cpu"]) == 0


SWEEP_FILE = TINY_MODEL_AND_DATA + """\
[run]
num_samples = 10
warmup_steps = 10
num_chains = 2
[sweep]
engines = ["fixed_hmc", "rwmh"]
seeds = [0, 1]
[sweep.grid.fixed_hmc]
step_size = [0.01, 0.02]
num_steps = 3
"""


def test_sweep_runs_a_grid_file_and_running_it_again_skips_its_cells(tmp_path, capsys):
    import os

    grid, out = tmp_path / "grid.toml", tmp_path / "out"
    grid.write_text(SWEEP_FILE)
    assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 0
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.engine) == ["fixed_hmc step_size=0.01 num_steps=3 seed=0",
                                  "fixed_hmc step_size=0.01 num_steps=3 seed=1",
                                  "fixed_hmc step_size=0.02 num_steps=3 seed=0",
                                  "fixed_hmc step_size=0.02 num_steps=3 seed=1", "rwmh seed=0", "rwmh seed=1"]
    assert list(table.columns[:5]) == ["engine", "kind", "seed", "step_size", "num_steps"]
    printed = capsys.readouterr().out
    assert "| fixed_hmc step_size=0.02 num_steps=3 seed=1 |" in printed and "sweep.csv (every column)" in printed
    runs = sorted(out.glob("*.nc"))
    assert len(runs) == 6 and az.from_netcdf(str(runs[0])).posterior.sizes["chain"] == 2
    written = {p: os.path.getmtime(p) for p in runs}
    assert main(["sweep", str(grid), "--out", str(out)]) == 0
    assert "6/6 cells done (6 in an earlier run)" in capsys.readouterr().err
    assert {p: os.path.getmtime(p) for p in runs} == written  # no cell ran again


def test_a_killed_sweep_loses_only_its_running_cells(tmp_path):
    """SIGKILL once a cell has finished: a second run keeps the finished cells and runs the others."""
    import os
    import signal
    import time

    grid, out = tmp_path / "grid.toml", tmp_path / "out"
    slow = SWEEP_FILE.split("[sweep]")[0].replace("= 10", "= 500")  # a second or two per cell
    grid.write_text(slow + '[sweep]\nengines = ["rwmh"]\nseeds = [0, 1, 2]\n')
    argv = [sys.executable, "-m", "bnnzoo.cli", "sweep", str(grid), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not list(out.glob("cells/*.json")):  # no clock: a slow machine waits
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    finished = {p: os.path.getmtime(p) for p in out.glob("*.nc")}
    assert 1 <= len(finished) < 3, finished
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert list(pd.read_csv(out / "sweep.csv").seed) == [0, 1, 2]
    assert all(os.path.getmtime(p) == mtime for p, mtime in finished.items())  # kept, not run again


@pytest.mark.parametrize("content, argv, message", [
    (SWEEP_FILE.replace("num_steps = 3", "num_step = 3"), [],
     "sweep.grid.fixed_hmc.num_step: not an option of engine 'fixed_hmc'; did you mean 'num_steps'"),
    (SWEEP_FILE.replace("step_size = [0.01, 0.02]", "step_size = [0.01, 0]"), [],
     "sweep.grid.fixed_hmc (step_size = 0, num_steps = 3): engine 'fixed_hmc': step_size must be a positive "
     "number, got 0"),
    (SWEEP_FILE.replace('"rwmh"]', '"rwhm"]'), [], "sweep.engines[1]: unknown engine 'rwhm'; did you mean 'rwmh'?"),
    (SWEEP_FILE.replace("seeds = [0, 1]", "seed = [0, 1]"), [], "[sweep]: unknown key(s) seed; expected engines"),
    (SWEEP_FILE.replace("num_chains = 2", "num_chains = 2\nseed = 4"), [],
     "[run] seed = 4 and [sweep] seeds = [0, 1]: give the seeds once, in [sweep] seeds"),
    (SWEEP_FILE, ["--ray", "127.0.0.1:1"], "ray address '127.0.0.1:1': cannot reach 127.0.0.1:1"),
    (SWEEP_FILE, ["--ray", "cluster"], "ray address 'cluster': expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT'"),
    (SWEEP_FILE, ["--workers", "2"], "--workers 2: give --ray too"),
], ids=["grid-key", "grid-value", "engine", "sweep-key", "seed-twice", "unreachable", "address", "workers"])
def test_sweep_errors_are_one_line_before_any_cell_runs(tmp_path, capsys, content, argv, message):
    grid = tmp_path / "grid.toml"
    grid.write_text(content)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bnnzoo: error: ") and message in err[0], err
    assert not list(tmp_path.glob("out/*.nc"))


def test_version(capsys):
    import bnnzoo

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"bnnzoo {bnnzoo.__version__}"


def test_running_a_folder_again_continues_it_as_a_sweep_does_and_fresh_starts_afresh(tmp_path, capsys):
    """One rule for bnnzoo run and bnnzoo sweep: the same command again keeps the finished engines
    (with or without --resume); --fresh runs them afresh and says which finished ones it drops."""
    import os

    spec, out = tmp_path / "run.toml", tmp_path / "out"
    spec.write_text(TINY_MODEL_AND_DATA + '[[engines]]\nkind = "rwmh"\nnum_samples = 5\nwarmup_steps = 5\n')
    argv = ["run", str(spec), "--out", str(out)]
    assert main(argv + ["--no-progress"]) == 0
    written = os.path.getmtime(out / "checkpoints" / "rwmh" / "result.pt")
    capsys.readouterr()
    assert main(argv) == 0 and main(argv + ["--resume"]) == 0
    assert os.path.getmtime(out / "checkpoints" / "rwmh" / "result.pt") == written  # not run again
    with pytest.warns(UserWarning, match=r"compare: starting afresh \(resume=False, --fresh\): 1 finished "
                                         r"cell\(s\) in .* run again \(rwmh\)"):
        assert main(argv + ["--fresh"]) == 0
    assert os.path.getmtime(out / "checkpoints" / "rwmh" / "result.pt") != written
    assert main(argv + ["--fresh", "--resume"]) == 1
    assert "--resume and --fresh: give one" in capsys.readouterr().err


def test_run_files_take_the_ensemble_warm_start_and_refuse_bad_members(tmp_path):
    from bnnzoo.cli import read_run_file

    text = """
[model]
input_dim = 1
layers = [{units = 4, activation = "tanh"}, {units = 1}]
[data]
name = "cosine"
[[engines]]
kind = "fixed_hmc"
warm_start = "ensemble"
num_members = NUM
chains_per_member = 2
budget = 100000
ensemble = {num_epochs = 5, optimizer = "adam"}
"""
    path = tmp_path / "run.toml"
    path.write_text(text.replace("NUM", "3"))
    plan = read_run_file(path)
    assert plan["engines"][0]["ensemble"] == {"num_epochs": 5, "optimizer": "adam"}
    path.write_text(text.replace("NUM", "0"))
    with pytest.raises(ValueError, match=r"^engines\[0\] \(fixed_hmc\): num_members"):
        read_run_file(path)
    path.write_text(text.replace("NUM", "3").replace('"adam"', '"lbfgs"'))
    with pytest.raises(ValueError, match=r"ensemble.optimizer"):
        read_run_file(path)
