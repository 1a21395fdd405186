import dataclasses
import math

from tests.support import arviz_calls as az
import numpy as np
import pytest

from bnnzoo.diagnostics import chain_table, mixing, sparsity, summary, to_inference_data


def test_summary_extends_az_summary(rwmh_run):
    idata = to_inference_data(rwmh_run)
    table = summary(idata)
    base = az.summary(idata)
    assert list(table.index) == list(base.index) + ["lp"]
    assert {"ess_bulk_per_s", "ess_tail_per_s", "sparsity", "r_hat", "ess_bulk"} <= set(table.columns)
    np.testing.assert_allclose(table.loc[base.index, "mean"], base["mean"])
    np.testing.assert_allclose(table["ess_bulk_per_s"], table["ess_bulk"] / rwmh_run.wall_time)
    lp = az.summary(idata, group="sample_stats", var_names=["lp"], round_to="none")
    assert table.loc["lp", "ess_bulk"] == pytest.approx(lp.loc["lp", "ess_bulk"], rel=1e-6)  # unrounded
    assert table.loc["lp", "r_hat"] == pytest.approx(lp.loc["lp", "r_hat"], rel=1e-6)
    w = rwmh_run.samples["layers.1.weight"][:, :, 0, 2]
    assert table.loc["layers.1.weight[0, 2]", "sparsity"] == pytest.approx(np.mean(np.abs(w) < 1e-2))
    acc = rwmh_run.sample_stats["acceptance_rate"].mean(1)
    np.testing.assert_allclose(table.attrs["acceptance_rate"], acc, rtol=1e-6)
    assert table.attrs["divergences"] == [0, 0, 0]
    # the run-level numbers are columns too, the same in every row
    np.testing.assert_allclose(table["acceptance"], rwmh_run.sample_stats["acceptance_rate"].mean(), rtol=1e-6)
    assert (table["divergences"] == 0).all()
    assert table.attrs["sampling_time"] == pytest.approx(rwmh_run.wall_time)
    # a Run is accepted directly, and var_names restrict the rows
    only = summary(rwmh_run, var_names=["layers.1.bias"], include_lp=False)
    assert list(only.index) == ["layers.1.bias[0]"]


def test_sparsity_by_hand():
    w = np.array([0.0, 0.005, -0.2, 3.0]).reshape(1, 1, 4) * np.ones((2, 3, 1))
    w[1, :, 2] = 0.001  # chain 1 has 3 small values of 4
    idata = az.from_dict(posterior={"layers.0.weight": w, "layers.0.bias": np.zeros((2, 3))})
    assert sparsity(idata) == pytest.approx((2 * 3 + 3 * 3) / (2 * 3 * 4))  # biases are not weights
    np.testing.assert_allclose(sparsity(idata, by_chain=True), [0.5, 0.75])
    assert sparsity(idata, threshold=1e-3) == pytest.approx((3 + 3) / 24)
    table = chain_table(idata)
    np.testing.assert_allclose(table["sparsity"], [0.5, 0.75])
    assert table["acceptance_rate"].isna().all()  # no sample stats: NaN, not an error


def test_chain_table_nuts(nuts_run):
    table = chain_table(nuts_run)
    assert len(table) == 2
    np.testing.assert_allclose(table["n_steps"], nuts_run.sample_stats["n_steps"].mean(1))
    np.testing.assert_allclose(table["divergences"], nuts_run.sample_stats["diverging"].sum(1))
    np.testing.assert_allclose(table["lp_mean"], nuts_run.sample_stats["lp"].mean(1))
    totals = summary(nuts_run, var_names=["layers.1.bias"])
    assert (totals["divergences"] == nuts_run.sample_stats["diverging"].sum()).all()
    np.testing.assert_allclose(totals["acceptance"], nuts_run.sample_stats["acceptance_rate"].mean(), rtol=1e-6)


def test_mixing_uses_arviz(rwmh_run):
    mix = mixing(rwmh_run)
    assert set(mix) == {"ess_f_min", "rhat_f_max", "ess_lp", "rhat_lp", "ess_w_min", "rhat_w_max", "nrhat_lp",
                        "nrhat_f_max"}
    lp = az.from_dict(posterior={"lp": rwmh_run.sample_stats["lp"]}).posterior
    assert mix["ess_lp"] == pytest.approx(float(az.ess(lp)["lp"]))
    assert mix["rhat_lp"] == pytest.approx(float(az.rhat(lp)["lp"]))
    from bnnzoo.diagnostics import function_draws

    f = az.from_dict(posterior={"f": function_draws(rwmh_run)}).posterior
    assert mix["ess_f_min"] == pytest.approx(float(az.ess(f)["f"].min()))
    assert mix["rhat_f_max"] == pytest.approx(float(az.rhat(f)["f"].max()))
    nested = {"nrhat_lp", "nrhat_f_max"}  # NaN: too few chains for 4 superchains of 2
    assert all(math.isfinite(v) for k, v in mix.items() if k not in nested)
    assert rwmh_run.num_chains < 8 and all(math.isnan(mix[k]) for k in nested)


def test_mixing_one_chain_and_constant_draws(rwmh_run):
    one = dataclasses.replace(
        rwmh_run,
        samples={k: v[:1] for k, v in rwmh_run.samples.items()},
        sample_stats={k: v[:1] for k, v in rwmh_run.sample_stats.items()},
    )
    mix = mixing(one)
    assert math.isnan(mix["rhat_f_max"]) and math.isnan(mix["rhat_lp"])
    assert mix["ess_f_min"] > 0
    stuck = dataclasses.replace(
        rwmh_run,
        samples={k: np.broadcast_to(v[:1, :1], v.shape).copy() for k, v in rwmh_run.samples.items()},
        sample_stats={"lp": np.zeros((3, 60))},
    )
    mix = mixing(stuck)  # zero variance everywhere: no crash, R-hat undefined
    assert math.isnan(mix["rhat_f_max"]) and math.isnan(mix["rhat_lp"]) and math.isnan(mix["rhat_w_max"])
    table = summary(stuck, include_lp=True)
    assert len(table) == 17
    assert table["acceptance"].isna().all() and table["divergences"].isna().all()  # not recorded: NaN


def test_cap_hits_per_chain_and_in_total(cosine):
    from bnnzoo.diagnostics import cap_hits
    from bnnzoo.inference import run
    from bnnzoo.models import zoo

    # a tree of depth 1 (one leapfrog step) stops at the cap on almost every draw
    nuts = run(zoo.cosine_mlp(hidden=3), cosine, engine="nuts", num_samples=10, warmup_steps=10, num_chains=2,
               max_tree_depth=1)
    flags = nuts.sample_stats["reached_max_tree_depth"].astype(bool)
    assert flags.sum() > 0
    idata = to_inference_data(nuts, log_likelihood=False, posterior_predictive=False)
    chains = chain_table(idata)
    assert list(chains["cap_hits"]) == list(flags.sum(1))
    table = summary(idata)
    assert table.attrs["cap_hits"] == flags.sum() and (table["cap_hits"] == flags.sum()).all()
    caps = table.attrs["cap"]
    assert caps == cap_hits(nuts)  # from the Run or from its InferenceData
    assert (caps["option"], caps["cap"], caps["max_gradients"]) == ("max_tree_depth", 1, 1)
    assert caps["hits"] == flags.sum() and caps["draws"] == 20 and caps["fraction"] == pytest.approx(flags.mean())


def test_cap_hits_of_chees_and_of_engines_without_a_cap(rwmh_run):
    from bnnzoo.diagnostics import cap_hits

    posterior = {"w": np.zeros((2, 5))}
    capped = np.array([[True, True, False, False, False], [False] * 5])
    options = '{"max_leapfrog_steps": 40}'
    idata = az.from_dict(posterior=posterior, sample_stats={"reached_max_steps": capped},
                         posterior_attrs={"options": options})
    caps = cap_hits(idata)
    assert (caps["option"], caps["cap"], caps["max_gradients"], caps["per_chain"]) == ("max_leapfrog_steps", 40,
                                                                                        40, [2, 0])
    assert list(chain_table(idata)["cap_hits"]) == [2, 0]
    assert cap_hits(rwmh_run) is None
    assert chain_table(rwmh_run)["cap_hits"].isna().all()
    table = summary(rwmh_run)
    assert math.isnan(table.attrs["cap_hits"]) and table["cap_hits"].isna().all() and table.attrs["cap"] is None


def stuck(run, chain=1):
    """``run`` with chain ``chain`` held at a start whose log density is not finite: every draw its
    first, lp -inf, every proposal rejected and counted as a divergence (what RWMH does there)."""
    samples = {k: v.copy() for k, v in run.samples.items()}
    for v in samples.values():
        v[chain] = v[chain, :1]
    stats = {k: np.array(v, dtype=float if k != "diverging" else bool) for k, v in run.sample_stats.items()}
    stats["lp"][chain] = -np.inf
    stats["acceptance_rate"][chain] = 0.0
    stats["diverging"][chain] = True
    return dataclasses.replace(run, samples=samples, sample_stats=stats)


def test_a_chain_that_never_moved_is_named_everywhere(rwmh_run):
    from bnnzoo.diagnostics import never_moved, run_diagnostics

    bad = stuck(rwmh_run)
    found = never_moved(bad)
    assert [c["chain"] for c in found] == [1]
    assert found[0]["message"].startswith("chain 1 never moved: its log density is not finite at the start "
                                          "(lp -inf at all 60 draws")
    assert "likely cause" in found[0]["message"]
    assert never_moved(rwmh_run) == []
    assert summary(bad).attrs["never_moved"] == [found[0]["message"]]
    assert list(chain_table(bad)["moved"]) == [True, False, True]
    # the same from the run and from its InferenceData (what inspect reads)
    assert [c["message"] for c in run_diagnostics(to_inference_data(bad))["never_moved"]] == [found[0]["message"]]


def test_run_diagnostics_are_the_same_from_the_run_and_its_inference_data(rwmh_run):
    from bnnzoo.diagnostics import run_diagnostics

    from_run, from_idata = run_diagnostics(rwmh_run), run_diagnostics(to_inference_data(rwmh_run))
    for key in ("ess_lp", "rhat_lp", "ess_f_min", "rhat_f_max", "acceptance", "divergences"):
        assert from_run[key] == pytest.approx(from_idata[key], rel=1e-6), key
    table = summary(rwmh_run)
    assert table.loc["lp", "r_hat"] == pytest.approx(from_run["rhat_lp"], rel=1e-12)  # unrounded
    assert mixing(rwmh_run)["rhat_lp"] == from_run["rhat_lp"]


def test_the_trace_says_which_chain_it_could_not_draw(rwmh_run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bnnzoo.diagnostics import plot_trace

    fig = plot_trace(stuck(rwmh_run))
    assert fig.axes[0].get_title(loc="left") == "lp (chain 1 not drawn: never finite)"
    plt.close(fig)
