"""The ensemble warm start (inference/ensemble.py): members, chains ordered by member, bad input refused
by name before anything runs, any Pyro model, SG-MCMC starts, members kept by a checkpoint."""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from bnnzoo.inference import check_run, run
from bnnzoo.inference import ensemble as ens
from bnnzoo.inference.ensemble import EnsembleOptions, fit_member, fit_members, members_cost
from bnnzoo.inference.potential import make_potential
from bnnzoo.models import zoo

FAST = {"num_epochs": 8, "batch_size": 10}


def _model():
    from bnnzoo.models import BNN

    return BNN(zoo.cosine_mlp(hidden=4))


def test_a_member_is_reproducible_and_counts_its_gradients(cosine):
    potential = make_potential(_model(), cosine.x_train, cosine.y_train)
    options = EnsembleOptions(num_epochs=30, batch_size=10, val_fraction=0.2, patience=3)
    a, b = fit_member(potential, options, 7), fit_member(potential, options, 7)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert not np.array_equal(a.theta, fit_member(potential, options, 8).theta)
    # 30 rows: 6 held out, 24 trained on in batches of 10 -> 3 gradients per epoch
    assert a.grad_evals == 3 * a.epochs == len(a.losses) and len(a.val_losses) == a.epochs
    assert a.epochs == 30 or a.epochs == a.best_epoch + 3  # early stopping after patience epochs
    assert a.val_metric == pytest.approx(min(a.val_losses))
    assert members_cost(potential, 2, options) == 2 * 30 * 3
    assert set(a.values) == set(potential.names)


def test_chains_start_at_their_member_in_order_and_reproducibly(cosine):
    kwargs = dict(engine="fixed_hmc", warm_start="ensemble", num_members=3, chains_per_member=2, ensemble=FAST,
                  num_samples=1, warmup_steps=0, step_size=1e-7, num_steps=1, progress=False, seed=3)
    first = run(zoo.cosine_mlp(hidden=4), cosine, **kwargs)
    assert first.num_chains == 6 and len(first.members) == 3 and first.chains_per_member == 2
    for c in range(6):
        for k, member in enumerate(first.members):
            gap = max(float(np.abs(first.samples[n][c, 0] - member.values[n]).max()) for n in member.values)
            if k == c // 2:
                assert gap < 1e-2  # the member's point (+ jitter 1e-3 for its second chain)
            else:
                assert gap > 1e-2
    again = run(zoo.cosine_mlp(hidden=4), cosine, **kwargs)
    for n in first.samples:
        np.testing.assert_array_equal(first.samples[n], again.samples[n])
    assert first.options["warm_start"] == "ensemble" and first.options["ensemble"]["num_epochs"] == 8
    # the InferenceData carries the member of each chain and the members' fits
    from bnnzoo.diagnostics import to_inference_data

    idata = to_inference_data(first, log_likelihood=False, posterior_predictive=False, prior=False)
    assert idata.posterior.coords["member"].values.tolist() == [0, 0, 1, 1, 2, 2]
    assert idata.member_fits["grad_evals"].values.tolist() == [m.grad_evals for m in first.members]


@pytest.mark.parametrize("options, field", [
    ({"num_members": 0}, "num_members"),
    ({"chains_per_member": 0}, "chains_per_member"),
    ({"warm_start": "map"}, "warm_start"),
    ({"num_members": 2, "chains_per_member": 2, "num_chains": 5}, "num_chains=5 contradicts"),
    ({"num_chains": 5, "chains_per_member": 2}, "num_chains=5 is not a multiple"),
    ({"ensemble": {"lr": -1.0}}, "lr"),
    ({"ensemble": {"epochs": 3}}, "ensemble: unknown option(s) epochs"),
    ({"budget": 0}, "budget"),
    ({"warmup_budget": 0.5}, "warmup_budget=0.5: only with budget="),
    ({"budget": 1000, "warmup_budget": 0}, "warmup_budget"),
    ({"budget": 1000, "warmup_budget": 1.5}, "warmup_budget"),
])
def test_bad_warm_starts_are_refused_by_name(options, field):
    with pytest.raises(ValueError) as err:
        check_run("chees", **{"warm_start": "ensemble", **options})
    assert field in str(err.value) and "\n" not in str(err.value)


def test_ensemble_keywords_need_the_ensemble_and_an_mcmc_engine():
    with pytest.raises(ValueError, match="num_members: only with warm_start='ensemble'"):
        check_run("chees", num_members=2)
    with pytest.raises(ValueError, match="engine 'svi' is not an MCMC engine"):
        check_run("svi", warm_start="ensemble")
    # the chain count: K x M, or K from num_chains
    assert ens.check_start(check_run("chees"), None, "ensemble", 3, 2).num_chains == 6
    assert ens.check_start(check_run("chees"), 8, "ensemble", None, 2).num_members == 4


def test_a_budget_the_members_exhaust_is_refused_before_they_run(cosine, monkeypatch):
    monkeypatch.setattr(ens, "fit_member", lambda *a, **k: pytest.fail("a member ran"))
    with pytest.raises(ValueError, match=r"^budget=50: the ensemble members alone may take 120"):
        run(zoo.cosine_mlp(hidden=4), cosine, engine="fixed_hmc", warm_start="ensemble", num_members=2,
            ensemble={"num_epochs": 20, "batch_size": 10, "val_fraction": 0.0}, budget=50, progress=False)


def test_members_of_any_pyro_model_through_its_flat_potential():
    y = torch.tensor([1.0, 2.0, 0.5, 1.5])

    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    potential = make_potential(model, args=(y,))
    members = fit_members(potential, 2, EnsembleOptions(num_epochs=300, lr=0.05), seed=0)
    mode = float(y.sum() / (len(y) + 1))  # the posterior mode of mu
    for m in members:
        assert float(m.values["mu"]) == pytest.approx(mode, abs=1e-3)
        assert m.grad_evals == 300 and math.isnan(m.val_metric)  # full batch: no validation split


def test_sg_kernels_start_from_the_ensemble(cosine):
    result = run(zoo.cosine_mlp(hidden=4), cosine, engine="sgld", warm_start="ensemble", num_members=2,
                 ensemble=FAST, num_samples=5, warmup_steps=3, thin=2, progress=False)
    assert result.num_chains == 2
    assert result.grad_evals["warmup"] == 2 * 3 and result.grad_evals["sampling"] == 2 * 5 * 2


def test_a_stopped_run_keeps_its_finished_members(cosine, tmp_path, monkeypatch):
    kwargs = dict(engine="fixed_hmc", warm_start="ensemble", num_members=2, ensemble=FAST, num_samples=3,
                  warmup_steps=0, step_size=1e-3, num_steps=2, progress=False, checkpoint=tmp_path)
    first = run(zoo.cosine_mlp(hidden=4), cosine, **kwargs)
    assert sorted(p.name for p in (tmp_path / "members").glob("[0-9].pt")) == ["0.pt", "1.pt"]
    for name in ("result.pt", "state.pt"):  # as if stopped after the members
        (tmp_path / name).unlink(missing_ok=True)
    monkeypatch.setattr(ens, "fit_member", lambda *a, **k: pytest.fail("a finished member ran again"))
    again = run(zoo.cosine_mlp(hidden=4), cosine, resume=True, **kwargs)
    np.testing.assert_array_equal(again.members[0].theta, first.members[0].theta)


def test_members_fitted_on_an_executor_are_the_same(cosine):
    from bnnzoo.experiments.executors import InProcess

    potential = make_potential(_model(), cosine.x_train, cosine.y_train)
    options = EnsembleOptions(**FAST)
    here = fit_members(potential, 3, options, seed=5)
    with InProcess() as executor:
        there = fit_members(potential, 3, options, seed=5, executor=executor,
                            done=[None, here[1], None])  # a resumed run: member 1 finished before
    for a, b in zip(here, there):
        np.testing.assert_array_equal(a.theta, b.theta)
