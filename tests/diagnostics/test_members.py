"""Members as superchains (diagnostics/members.py): within-member R-hat on a two-mode toy, modes visited,
the verdict from an InferenceData, the ensemble alone as a run."""

import numpy as np
import pytest

from bnnzoo.diagnostics import _arviz
from bnnzoo.diagnostics.members import (count_modes, ensemble_run, idata_member_mixing, member_index,
                                        within_member)
from bnnzoo.diagnostics.scorecard import scorecard
from bnnzoo.results import MemberFit


def _two_modes(draws=400, seed=0):
    """4 chains, 2 per member: member 0 around +3, member 1 around -3, at 5 inputs."""
    rng = np.random.default_rng(seed)
    centre = np.array([3.0, 3.0, -3.0, -3.0])[:, None, None]
    return centre + rng.standard_normal((4, draws, 5))


def test_within_member_rhat_is_near_one_where_the_modes_differ():
    f = _two_modes()
    rhat, ess = within_member(f, chains_per_member=2)
    assert rhat.shape == (2, 5) and np.all(rhat < 1.02) and np.all(ess > 300)
    across = _arviz.rhat(_arviz.group(_arviz.from_dict({"posterior": {"f": f}}), "posterior"))["f"].values
    assert np.all(across > 1.5)
    assert count_modes(f, 2)[0] == 2 and count_modes(f, 2)[1].tolist() == [0, 1]
    same = np.random.default_rng(1).standard_normal((4, 400, 5))
    assert count_modes(same, 2)[0] == 1 and count_modes(same, 1)[0] == 1
    assert member_index(6, 3).tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="chains_per_member=4"):
        member_index(6, 4)


def test_within_member_rhat_of_one_chain_per_member_is_its_split_rhat():
    rng = np.random.default_rng(3)
    mixed = rng.standard_normal((2, 400, 3))
    rhat, ess = within_member(mixed, chains_per_member=1)
    assert rhat.shape == (2, 3) and np.all(rhat < 1.02) and np.all(ess > 300)
    drifting = mixed + np.linspace(0.0, 6.0, 400)[None, :, None]  # each chain's halves disagree
    assert np.all(within_member(drifting, chains_per_member=1)[0] > 1.5)


def test_the_verdict_from_an_inference_data_with_members():
    f = _two_modes()
    lp = np.random.default_rng(2).standard_normal((4, 400)) + np.array([0.0, 0.0, 5.0, 5.0])[:, None]
    idata = _arviz.from_dict({"posterior": {"w": f[..., 0]}, "sample_stats": {"lp": lp}, "predictions": {"f_mean": f}})
    posterior = _arviz.group(idata, "posterior")
    _arviz.replace_group(idata, "posterior", posterior.assign_coords(member=("chain", np.array([0, 0, 1, 1]))))
    judged = idata_member_mixing(idata)
    assert judged["converged_within_modes"] and judged["modes"] == 2 and judged["num_members"] == 2
    assert judged["verdict"].startswith("converged within modes (2 modes visited by 2 members")
    assert judged["rhat_lp_across"] > 1.5 and judged["nrhat_f_members_max"] > 1.1
    stuck = f.copy()
    stuck[1] += 2.0  # the second chain of member 0 elsewhere: member 0 did not mix
    predictions = _arviz.group(idata, "predictions")
    predictions["f_mean"].values[:] = stuck
    _arviz.replace_group(idata, "predictions", predictions)
    assert idata_member_mixing(idata)["verdict"].startswith("not converged within modes")


def test_the_ensemble_alone_is_a_scoreable_run(rwmh_run):
    values = {k: v[0, -1] for k, v in rwmh_run.samples.items()}
    members = [MemberFit(theta=np.zeros(1), values=values, grad_evals=10, wall_time=0.5),
               MemberFit(theta=np.zeros(1), values={k: v[1, -1] for k, v in rwmh_run.samples.items()}, grad_evals=12)]
    import dataclasses

    alone = ensemble_run(dataclasses.replace(rwmh_run, members=members, chains_per_member=1))
    assert alone.num_chains == 1 and alone.num_draws == 2 and alone.grad_evals["total"] == 22
    np.testing.assert_array_equal(alone.samples["layers.0.weight"][0, 0], values["layers.0.weight"])
    card = scorecard(alone)
    assert set(card) == {"lppd", "rmse", "ece", "coverage"} and np.isfinite(list(card.values())).all()
    with pytest.raises(ValueError, match="has no ensemble members"):
        ensemble_run(rwmh_run)
