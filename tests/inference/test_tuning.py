"""Default target acceptance by activation: the rule, and the engines and kernels that follow it."""

import pytest
from tests.support.targets import gaussian_target

from bnnzoo.data import load
from bnnzoo.inference import BNNPotential, ChEESHMC, ProximalHMC, recommend_target_accept, run
from bnnzoo.inference.tuning import TARGETS
from bnnzoo.models import BNN, BNNSpec, Dense, Laplace, zoo


@pytest.mark.parametrize("activation, smooth", [
    ("relu", False), ("leaky_relu", False),
    ("tanh", True), ("sigmoid", True), ("softplus", True), ("gelu", True), ("linear", True),
])
def test_rule_by_activation(activation, smooth):
    spec = zoo.cosine_mlp(hidden=3, activation=activation)
    fixed, pyro = recommend_target_accept(spec), recommend_target_accept(spec, "nuts")
    assert fixed.smooth is pyro.smooth is smooth
    assert (fixed.value, pyro.value) == ((0.8, 0.8) if smooth else (0.45, 0.715))
    assert ("piecewise-linear" in fixed.reason) is not smooth and str(fixed.value) in fixed.reason
    assert float(fixed) == fixed.value


def test_rule_finds_every_kink_and_reads_any_model_form():
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(4, "leaky_relu"), Dense(1)], input_dim=2)
    rec = recommend_target_accept(BNN(spec), "chees")
    assert rec.value == 0.45 and rec.kinks == ("layers[1].activation=leaky_relu",)
    assert "layers[1].activation=leaky_relu" in rec.reason
    cnn = recommend_target_accept(zoo.laplace_cnn(), "hmc")
    assert cnn.value == 0.715 and "layers[0].pool=2 (max-pool)" in cnn.kinks
    data = load("cosine", n_train=10, n_test=5)
    relu = BNN(zoo.cosine_mlp(hidden=3, activation="relu"))
    assert recommend_target_accept(BNNPotential(relu, data.x_train, data.y_train)).value == 0.45


def test_plain_pyro_models_keep_the_smooth_defaults():
    def model(x=None):
        return None

    for engine, value in (("nuts", 0.8), ("hmc", 0.8), ("chees", 0.8), ("proximal_hmc", 0.8)):
        rec = recommend_target_accept(model, engine)
        assert rec.value == value and rec.smooth and "not a BNN" in rec.reason
    assert ChEESHMC(potential=gaussian_target([0.0], [[1.0]])).target_accept == 0.8


def test_unknown_engine():
    with pytest.raises(ValueError, match="engine 'rwmh': no target acceptance for it; choose one of nuts, hmc"):
        recommend_target_accept(zoo.cosine_mlp(), "rwmh")


def test_kernels_default_to_the_recommendation_and_keep_explicit_values():
    relu = BNN(zoo.cosine_mlp(hidden=3, activation="relu"))
    assert ChEESHMC(relu).target_accept == 0.45
    assert ChEESHMC(BNN(zoo.cosine_mlp(hidden=3))).target_accept == 0.8
    assert ChEESHMC(relu, target_accept=0.9).target_accept == 0.9
    assert ProximalHMC(relu).target_accept == 0.45
    assert ProximalHMC(relu, target_accept=0.7).target_accept == 0.7
    with pytest.raises(ValueError, match="target_accept must be strictly between 0 and 1"):
        ChEESHMC(relu, target_accept=1.0)


@pytest.mark.parametrize("engine, activation, expected", [
    ("nuts", "relu", 0.715), ("nuts", "tanh", 0.8), ("hmc", "leaky_relu", 0.715),
    ("chees", "relu", 0.45), ("proximal_hmc", "tanh", 0.8),
])
def test_runs_record_the_value_used(engine, activation, expected):
    spec = BNNSpec(layers=[Dense(3, activation), Dense(1)], input_dim=1, prior=Laplace(1.0))
    options = {"max_tree_depth": 2} if engine == "nuts" else {"num_steps": 2} if engine in ("hmc", "proximal_hmc") \
        else {"max_leapfrog_steps": 4}
    data = load("cosine", n_train=10, n_test=5)
    r = run(spec, data, engine=engine, num_samples=3, warmup_steps=3, num_chains=2, **options)
    assert r.options["target_accept"] == expected
    assert str(expected) in r.notes["target_accept_reason"]
    explicit = run(spec, data, engine=engine, num_samples=3, warmup_steps=3, num_chains=2, target_accept=0.9,
                   **options)
    assert explicit.options["target_accept"] == 0.9
    assert "target_accept_reason" not in explicit.notes


def test_rule_values_are_the_efficiency_optima_except_the_measured_smooth_one():
    from bnnzoo.diagnostics.theory import theoretical_optimal_acceptance

    # the smooth fixed-length default was measured (module docstring): above the theory's 0.651,
    # which is the optimum of one chain's mean acceptance, not of the harmonic mean over chains
    assert TARGETS["fixed_length", True] == 0.8 > theoretical_optimal_acceptance(True)
    assert TARGETS["fixed_length", False] == pytest.approx(theoretical_optimal_acceptance(False), abs=5e-3)
