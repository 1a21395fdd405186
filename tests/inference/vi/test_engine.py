"""The "svi" engine: traces exported like MCMC draws, Monte Carlo KL for non-Gaussian
priors, and the paper-002 example script end to end."""

from bnnzoo.diagnostics import to_inference_data

import numpy as np
import pytest
import torch

from bnnzoo.inference import run
from bnnzoo.models import BNNSpec, Dense, GaussianLikelihood, Horseshoe, Laplace, SpikeAndSlab
from bnnzoo.experiments import compare
from tests.support.targets import linear_regression


@pytest.fixture(autouse=True)
def _float64(float64):
    """Every test here in float64 (the shared fixture of ``tests/conftest.py``)."""


# ---------------------------------------------------------------- the engine
def test_svi_engine_exports_traces_and_appears_in_compare():
    problem = linear_regression(n=60)
    engines = [
        {"kind": "svi", "label": "stl-blundell", "num_steps": 120, "batch_size": 15, "estimator": "stl",
         "kl_weighting": "blundell", "optimizer": "adabound", "schedule": "plateau"},
        {"kind": "svi", "label": "score", "num_steps": 60, "estimator": "score", "num_particles": 4, "lr": 0.05},
    ]
    table, runs = compare(problem.spec, (problem.x, problem.y), engines=engines, num_samples=50, num_chains=2)
    assert list(table.index) == ["stl-blundell", "score"]
    assert np.isfinite(table["rmse"]).all()
    r = runs["stl-blundell"]
    assert r.vi.loss.shape == (2, 120) and r.vi.num_batches == 4
    assert r.vi.guide["loc"].shape == (2, 4)
    idata = to_inference_data(r)
    trace = idata.vi_trace
    for name in ("loss", "elbo", "nll", "kl", "lr_loc", "lr_scale"):
        assert trace[name].dims == ("chain", "step") and trace[name].shape == (2, 120), name
    np.testing.assert_allclose(trace["elbo"].values, -(trace["kl"].values + trace["nll"].values))
    assert idata.posterior["layers.0.weight"].shape == (2, 50, 1, 3)
    assert idata.posterior.attrs["option.estimator"] == "stl"


@pytest.mark.parametrize("prior", [Laplace(1.0), SpikeAndSlab(), Horseshoe(1.0)], ids=["laplace", "ss", "horseshoe"])
def test_non_gaussian_priors_use_monte_carlo_kl(prior):
    problem = linear_regression(n=30)
    spec = BNNSpec(layers=[Dense(1)], input_dim=3, prior=prior, likelihood=GaussianLikelihood(0.5))
    r = run(spec, (problem.x, problem.y), engine="svi", num_samples=20, num_chains=1, num_steps=150, lr=0.05,
            schedule="exponential", lr_decay=0.1)
    kl = r.vi.terms["kl"][0]
    assert np.isfinite(kl).all() and np.isfinite(r.vi.loss).all()
    assert kl[-20:].mean() < kl[:20].mean()
    with pytest.raises(ValueError, match="kl='analytic' needs an iid Gaussian prior.*layers.0.weight"):
        run(spec, (problem.x, problem.y), engine="svi", num_samples=5, num_chains=1, kl="analytic")



def test_paper002_example_runs(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[3] / "examples" / "paper002_vi_practices.py"
    spec = importlib.util.spec_from_file_location("paper002_vi_practices", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.set_default_dtype(torch.float32)  # as a user runs it
    threads = torch.get_num_threads()
    try:
        example.main(["--epochs", "1", "--seeds", "1", "--search", "1", "--jobs", "1", "--only", "kl_weighting",
                      "optimizers", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    summary = (tmp_path / "summary.md").read_text()
    assert "## kl_weighting" in summary and "Blundell (lambda=1/2)" in summary and "| adabound |" in summary
    epochs = __import__("pandas").read_csv(tmp_path / "epochs.csv")
    assert len(epochs) == 4 + 3 and epochs.val_acc.between(0, 1).all()
    assert (tmp_path / "optimizers.png").stat().st_size > 0
