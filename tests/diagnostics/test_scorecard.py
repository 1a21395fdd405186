"""The predictive scorecard (diagnostics/scorecard.py) on cases with known answers."""

import numpy as np
import pytest

from bnnzoo.diagnostics.predictive import predictive_metrics
from bnnzoo.diagnostics.scorecard import (PredictiveReference, calibration_error_pit, load_reference,
                                          reference_from_run, reference_scores, save_reference, scorecard,
                                          total_variation, wasserstein2)


def test_a_predictive_equal_to_the_reference_scores_perfectly():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=20)
    ref = PredictiveReference("toy", "classification", x=np.zeros((20, 1)), probs=probs)
    same = reference_scores("classification", ref, probs=probs)
    assert same["agreement"] == 1.0 and same["tv"] == 0.0 and np.isnan(same["w2"])
    flipped = probs[:, ::-1]
    scores = reference_scores("classification", ref, probs=flipped)
    assert scores["tv"] == pytest.approx(np.mean(0.5 * np.abs(probs - flipped).sum(1)))
    samples = rng.standard_normal((500, 7))
    ref = PredictiveReference("toy", "regression", x=np.zeros((7, 1)), samples=samples)
    same = reference_scores("regression", ref, samples=samples)
    assert same["tv"] == 0.0 and same["w2"] == 0.0 and np.isnan(same["agreement"])
    assert wasserstein2(samples + 0.3, samples) == pytest.approx(0.3)
    assert total_variation(samples + 100.0, samples, kind="samples") == pytest.approx(1.0)
    assert total_variation(probs, flipped) == pytest.approx(scores["tv"])
    with pytest.raises(ValueError, match="a regression reference for a classification run"):
        reference_scores("classification", ref, probs=probs)


def test_calibration_of_uniform_pit_and_coverage():
    assert calibration_error_pit((np.arange(1000) + 0.5) / 1000) == pytest.approx(0.0, abs=1e-3)
    assert calibration_error_pit(np.full(100, 0.5)) == pytest.approx(0.25)


def test_scorecard_of_a_run_against_its_own_reference(rwmh_run, tmp_path):
    card = scorecard(rwmh_run)
    metrics = predictive_metrics(rwmh_run)
    assert card["lppd"] == pytest.approx(-metrics["nll"]) and card["rmse"] == pytest.approx(metrics["rmse"])
    assert 0.0 <= card["coverage"] <= 1.0 and 0.0 <= card["ece"] <= 0.5
    ref = reference_from_run(rwmh_run, "cosine", num_samples=None)  # one y per draw, seed 0: as scorecard draws
    path = save_reference(tmp_path / "cosine.npz", ref)
    loaded = load_reference(path)
    assert loaded.problem == "cosine" and loaded.task == "regression"
    np.testing.assert_array_equal(loaded.samples, ref.samples)
    with pytest.raises(FileNotFoundError, match="reference 'no_such_problem': no stored reference predictive"):
        load_reference("no_such_problem")
    against = scorecard(rwmh_run, reference=loaded)
    assert against["tv"] == 0.0 and against["w2"] == 0.0
    assert against["lppd"] == pytest.approx(card["lppd"])  # the reference's own inputs and targets: the test split


def test_classification_scorecard(bernoulli_run):
    card = scorecard(bernoulli_run)
    metrics = predictive_metrics(bernoulli_run)
    assert card["accuracy"] == pytest.approx(metrics["accuracy"]) and card["ece"] == pytest.approx(metrics["ece"])
    assert card["lppd"] == pytest.approx(-metrics["nll"]) and np.isnan(card["coverage"])
    ref = reference_from_run(bernoulli_run, "binary")
    against = scorecard(bernoulli_run, reference=ref)
    assert against["agreement"] == 1.0 and against["tv"] == pytest.approx(0.0, abs=1e-12)


def test_a_reference_loaded_by_problem_name(bernoulli_run, tmp_path, monkeypatch):
    import importlib

    scorecard_module = importlib.import_module("bnnzoo.diagnostics.scorecard")  # the package exports the function
    monkeypatch.setattr(scorecard_module, "REFERENCE_DIR", tmp_path)
    save_reference(tmp_path / "binary.npz", reference_from_run(bernoulli_run, "binary"))
    assert scorecard_module.stored_references() == ["binary"]
    against = scorecard(bernoulli_run, reference="binary")
    assert against["agreement"] == 1.0 and against["tv"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(FileNotFoundError, match=r"reference 'binry': no stored reference predictive \(stored: binary\)"):
        scorecard(bernoulli_run, reference="binry")
    with pytest.raises(TypeError, match=r"reference: a PredictiveReference, a problem name \(binary\)"):
        scorecard(bernoulli_run, reference=1.0)


def test_a_reference_of_other_inputs_or_task_is_refused(bernoulli_run, rwmh_run):
    ref = reference_from_run(bernoulli_run, "binary")
    with pytest.raises(ValueError, match="reference 'binary': a classification reference for a regression run"):
        scorecard(rwmh_run, reference=ref)
    ref.x = ref.x[:-1]
    ref.probs = ref.probs[:-1]
    with pytest.raises(ValueError, match=r"reference 'binary': made at 24 inputs .* not the run's test inputs"):
        scorecard(bernoulli_run, reference=ref)


@pytest.mark.parametrize("problem, task, width, engine", [("diabetes", "regression", 10, "batched_nuts"),
                                                          ("breast_cancer", "classification", 30, "batched_nuts"),
                                                          ("wine", "classification", 13, "batched_nuts"),
                                                          ("digits", "classification", 64, "mile")])
def test_the_shipped_references_belong_to_their_data_sets(problem, task, width, engine):
    from bnnzoo.data import load

    ref = load_reference(problem)
    data = load(problem)
    assert ref.problem == problem and ref.task == task and ref.source.startswith(f"{engine} on ")
    np.testing.assert_allclose(ref.x, data.x_test.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ref.y, data.y_test.numpy())
    assert ref.x.shape == (data.n_test, width)
    if task == "classification":
        assert ref.probs.shape == (data.n_test, data.num_classes)
        np.testing.assert_allclose(ref.probs.sum(1), 1.0, atol=1e-4)  # float32 probabilities, averaged over the draws
        # the long run predicts better than chance: its most probable class is mostly right
        assert np.mean(ref.probs.argmax(1) == ref.y) > 0.8
    else:
        assert ref.samples.shape[1] == data.n_test and 100 <= ref.samples.shape[0] <= 1000
        # predictive mean against the standardised target: better than predicting 0 (rmse about 1)
        assert np.sqrt(np.mean((ref.samples.mean(0) - ref.y) ** 2)) < 0.9


def test_a_run_of_few_draws_is_scored_with_as_many_samples_as_the_reference(rwmh_run):
    """An ensemble alone has K draws: its regression predictive is sampled as often as the reference's
    (a K-sample histogram against a 400-sample one would measure the sample sizes, not the predictives)."""
    import dataclasses

    ref = reference_from_run(rwmh_run, "cosine", num_samples=400)
    few = dataclasses.replace(rwmh_run, samples={k: v[:1, :4] for k, v in rwmh_run.samples.items()})
    card = scorecard(few, reference=ref)
    from bnnzoo.diagnostics.scorecard import predictive_samples

    drawn = predictive_samples(few, ref.x, 400, seed=0)  # 400 draws of y from the 4-draw mixture
    assert drawn.shape == (400, len(ref.x))
    assert card["w2"] == pytest.approx(wasserstein2(drawn, ref.samples))
    assert card["tv"] == pytest.approx(total_variation(drawn, ref.samples, kind="samples"))
    assert card["tv"] < total_variation(predictive_samples(few, ref.x, seed=0), ref.samples, kind="samples")
