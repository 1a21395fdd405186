"""Every script in examples/ at its ``--smoke`` size: it runs, and its tables hold sane numbers."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def run_example(script: str, out: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--smoke", "--out", str(out), *args],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def finite(column: pd.Series) -> bool:
    return bool(column.map(lambda v: math.isfinite(float(v))).all())


def test_paper000(tmp_path):
    run_example("paper000_proximal_hmc.py", tmp_path)
    table = pd.read_csv(tmp_path / "table.csv").set_index("method")
    assert list(table.index) == ["proximal_hmc", "rwmh", "nuts", "adam", "sgd", "prox-sgd", "ensemble",
                                 "phmc_ensemble"]
    assert finite(table.test_accuracy) and finite(table.test_nll) and finite(table.wall_time_s)
    assert table.ece.between(0, 1).all()
    mcmc = table[table.kind == "mcmc"]
    assert mcmc.acceptance.between(0, 1).all() and (mcmc.divergences >= 0).all()
    assert (table.drop("rwmh").test_accuracy > 0.2).all()  # 10 classes: chance is 0.1; RWMH needs far more draws
    # optimise, then sample: 2 members x 2 chains, judged within each member in function space
    ens = table.loc["phmc_ensemble"]
    assert ens.kind == "mcmc" and ens.chains == 4 and table.loc["ensemble", "chains"] == 2
    assert math.isfinite(ens.rhat_f_within) and ens.rhat_f_within > 0.9 and mcmc.modes.between(1, 2).all()
    assert ens.wall_time_s > table.loc["ensemble", "wall_time_s"]  # the members' time is part of the run's
    assert table.loc["prox-sgd", "exact_zero_frac"] > 0  # soft-thresholding gives exact zeros
    assert {"curves.csv", "curves.png", "table.md"} <= {p.name for p in tmp_path.iterdir()}


def test_paper001(tmp_path):
    run_example("paper001_sgld_sa.py", tmp_path, "--workers", "1")
    regression = pd.read_csv(tmp_path / "regression.csv")
    assert len(regression) == 12 and finite(regression.mae) and finite(regression.mse)
    classification = pd.read_csv(tmp_path / "classification.csv")
    assert len(classification) == 2 * 5 and classification.accuracy.between(0, 1).all()
    assert (classification[classification.method == "Adam (Vanilla)"].accuracy > 0.2).all()
    assert finite(classification.nll) and classification.ece.between(0, 1).all()
    # optimise, then sample: 2 members x 2 SGHMC-SA chains, and the members alone, per seed
    by = classification.set_index(["method", "seed"])
    ensemble_start, alone = by.loc["SGHMC-SA, ensemble start"], by.loc["Ensemble (members alone)"]
    assert (ensemble_start.chains == 4).all() and (alone.chains == 2).all()
    assert (ensemble_start.accuracy > 0.2).all() and (alone.accuracy > 0.2).all()  # chance is 0.1
    # judged within each member (inf, not NaN, where 5 draws leave a saturated class probability constant)
    assert (ensemble_start.rhat_within > 0.9).all() and ensemble_start.modes.between(1, 2).all()
    assert ensemble_start.verdict.str.contains("within modes").all()
    assert {"coefficients.png", "adversarial.png", "timing.json"} <= {p.name for p in tmp_path.iterdir()}


def test_paper002(tmp_path):
    run_example("paper002_vi_practices.py", tmp_path, "--jobs", "1")
    summary = pd.read_csv(tmp_path / "summary.csv").set_index(["study", "config"])
    assert set(summary.index.get_level_values("study")) == {"estimators", "kl_weighting", "optimizers", "lr_ratio",
                                                            "plateau"}
    assert finite(summary.kl) and finite(summary.train_nll)
    assert summary.loc[("estimators", "reparam, closed-form KL"), "val_acc"] > 0.2


def test_paper003(tmp_path):
    run_example("paper003_relu_hmc.py", tmp_path)
    table = pd.read_csv(tmp_path / "table.csv")
    assert len(table) == 3 * 5 and table.acceptance.between(0, 1).all()
    # sigmoid at the smallest step accepts nearly everything, even in a few transitions (paper: 0.994)
    smallest = table[(table.activation == "sigmoid") & (table.step_size == table.step_size.min())]
    assert (smallest.acceptance > 0.8).all()
    assert pd.read_csv(tmp_path / "efficiency.csv").acceptance.between(0, 1).all()
    assert len(pd.read_csv(tmp_path / "size.csv")) == 3 * 4


def test_paper004(tmp_path):
    run_example("paper004_group_sparse.py", tmp_path)
    for task in ("regression", "classification"):
        table = pd.read_csv(tmp_path / f"{task}.csv")
        assert list(table.method) == ["sghmc_group_ss", "SGHMC-SA", "SGHMC"]
        assert finite(table.error) and table.sparsity.between(0, 1).all()
        assert (table.relevant_kept <= table.relevant).all()
    classification = pd.read_csv(tmp_path / "classification.csv")
    assert classification.error.between(0, 1).all()  # accuracy


def test_robustness_sparse(tmp_path):
    run_example("robustness_sparse.py", tmp_path)
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert set(runs.problem) == {"paper001 regression (sgld_sa)", "paper004 regression (sghmc_group_ss)",
                                 "paper004 classification (sghmc_group_ss)"}
    assert (runs.groupby("problem").seed.nunique() == 2).all()
    assert finite(runs.error) and finite(runs.seconds)
    assert (runs.relevant_kept <= runs.relevant).all() and (runs.irrelevant_kept <= runs.irrelevant).all()
    assert runs.auto.str.contains("step_size|cycle_length").all()  # the values the "auto" rules gave
    assert "| problem | N | noise |" in (tmp_path / "table.md").read_text()
