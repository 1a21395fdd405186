"""Tests of bnnzoo.models.spec and zoo: validation messages, dict/TOML round
trips, load_spec on DESIGN.md's TOML example, and every zoo model."""

from __future__ import annotations

import re

import pyro
import pytest
import torch
from pyro import poutine

from bnnzoo.models import (
    ACTIVATIONS,
    BNN,
    Bernoulli,
    BNNSpec,
    Categorical,
    Conv2d,
    Dense,
    Gaussian,
    GaussianLikelihood,
    GroupSpikeAndSlab,
    Horseshoe,
    Laplace,
    SpecError,
    SpikeAndSlab,
    load_spec,
    spec_from,
    zoo,
)


def raises(msg: str):
    """``pytest.raises(SpecError)`` matching ``msg`` literally."""
    return pytest.raises(SpecError, match=re.escape(msg))


def mlp(**kw) -> dict:
    d = {"layers": [{"units": 5, "activation": "tanh"}, {"units": 1}], "input_dim": 2}
    d.update(kw)
    return d


# ----------------------------------------------------------------------------
# validation


def test_unknown_activation():
    choices = ", ".join(sorted(ACTIVATIONS))
    msg = f"layers[1].activation: unknown activation 'rleu'; choose one of {choices}"
    with raises(msg) as info:
        BNNSpec.from_dict(mlp(layers=[{"units": 5, "activation": "tanh"}, {"units": 1, "activation": "rleu"}]))
    assert info.value.field == "layers[1].activation"
    assert "gelu, leaky_relu, linear, relu, sigmoid, softplus, tanh" in msg
    with raises("layers[0].activation: unknown activation 'tanhh'"):
        BNNSpec(layers=[{"channels": 2, "activation": "tanhh"}, Dense(1)], input_shape=(1, 4, 4))
    with raises("activation: unknown activation 'rleu'"):
        Dense(3, activation="rleu")


def test_missing_units_and_channels():
    with raises("layers[0].units: missing: a dense layer needs units"):
        BNNSpec.from_dict(mlp(layers=[{"activation": "tanh"}, {"units": 1}]))
    with raises("layers[0].channels: missing: a conv2d layer needs channels"):
        BNNSpec.from_dict({"layers": [{"kind": "conv2d", "kernel_size": 3}, {"units": 1}], "input_shape": [1, 4, 4]})


@pytest.mark.parametrize(
    "layer, msg",
    [
        ({"units": 0}, "layers[0].units: must be an integer >= 1, got 0"),
        ({"units": 2.5}, "layers[0].units: must be an integer >= 1, got 2.5"),
        ({"units": True}, "layers[0].units: must be an integer >= 1, got True"),
        ({"units": 3, "activaton": "tanh"}, "layers[0].activaton: unknown field of a dense layer 'activaton'; "
         "choose one of activation, bias, units"),
        ({"kind": "lstm", "units": 3}, "layers[0].kind: unknown layer kind 'lstm'; choose one of conv2d, dense"),
        ("dense", "layers[0]: expected a table such as {units = 50}, got 'dense'"),
    ],
)
def test_bad_layer(layer, msg):
    with raises(msg):
        BNNSpec.from_dict(mlp(layers=[layer, {"units": 1}]))


@pytest.mark.parametrize(
    "layer, msg",
    [
        ({"channels": 2, "kernel_size": 0}, "layers[0].kernel_size: must be an integer >= 1, got 0"),
        ({"channels": 2, "stride": -1}, "layers[0].stride: must be an integer >= 1, got -1"),
        ({"channels": 2, "padding": -1}, "layers[0].padding: must be an integer >= 0, got -1"),
        ({"channels": 2, "pool": 0}, "layers[0].pool: must be an integer >= 1, got 0"),
    ],
)
def test_bad_conv_layer(layer, msg):
    with raises(msg):
        BNNSpec(layers=[layer, Dense(1)], input_shape=(1, 8, 8))


@pytest.mark.parametrize(
    "likelihood, units, msg",
    [
        (GaussianLikelihood(0.1), 2, "layers[1].units: a gaussian likelihood needs 1 output unit(s), got 2"),
        (GaussianLikelihood("learned"), 3, "layers[1].units: a gaussian likelihood needs 1 output unit(s), got 3"),
        (Bernoulli(), 2, "layers[1].units: a bernoulli likelihood needs 1 output unit(s), got 2"),
        (Categorical(), 1, "layers[1].units: a categorical likelihood needs >= 2 outputs (one per class), got 1"),
    ],
    ids=["gaussian", "gaussian-learned", "bernoulli", "categorical"],
)
def test_wrong_output_units(likelihood, units, msg):
    with raises(msg):
        BNNSpec(layers=[Dense(4, "tanh"), Dense(units)], input_dim=2, likelihood=likelihood)


@pytest.mark.parametrize("likelihood, units", [(GaussianLikelihood(), 1), (Bernoulli(), 1), (Categorical(), 2),
                                               (Categorical(), 7)])
def test_right_output_units(likelihood, units):
    spec = BNNSpec(layers=[Dense(4, "tanh"), Dense(units)], input_dim=2, likelihood=likelihood)
    expected = None if likelihood.task == "regression" else max(2, units)
    assert spec.num_classes == expected


def test_conv_without_input_shape():
    with raises("input_shape: a model with Conv2d layers needs input_shape = [C, H, W]"):
        BNNSpec(layers=[Conv2d(4), Dense(1)], input_dim=64)


def test_conv_after_dense():
    with raises("layers[1]: a Conv2d layer cannot follow a Dense layer"):
        BNNSpec(layers=[Dense(16), Conv2d(4), Dense(1)], input_shape=(1, 8, 8))


def test_last_layer_must_be_dense():
    with raises("layers[0]: the last layer must be dense"):
        BNNSpec(layers=[Conv2d(1)], input_shape=(1, 8, 8))


@pytest.mark.parametrize(
    "layers, where",
    [
        ([Conv2d(2, kernel_size=5), Dense(1)], "layers[0]"),  # 4x4 image, 5x5 kernel
        ([Conv2d(2, pool=2), Conv2d(2, pool=2), Dense(1)], "layers[1]"),  # 4 -> 2 -> 1 -> 0
        ([Conv2d(2, padding=1, pool=2), Conv2d(2, padding=1, pool=2), Conv2d(2, padding=1, pool=2), Dense(1)],
         "layers[2]"),  # 4 -> 2 -> 1 -> 0
    ],
)
def test_image_shrinking_to_nothing(layers, where):
    with raises(f"{where}: the image shrinks to nothing"):
        BNNSpec(layers=layers, input_shape=(1, 4, 4))


def test_input_checks():
    with raises("input_dim: missing: give the number of input features"):
        BNNSpec(layers=[Dense(1)])
    with raises("input_dim: must be an integer >= 1, got 0"):
        BNNSpec(layers=[Dense(1)], input_dim=0)
    with raises("input_shape: must be [channels, height, width], got [8, 8]"):
        BNNSpec(layers=[Dense(1)], input_shape=(8, 8))
    with raises("input_shape[1]: must be an integer >= 1, got 0"):
        BNNSpec(layers=[Dense(1)], input_shape=(1, 0, 8))
    with raises("input_dim: 63 does not match input_shape [1, 8, 8] (64 values)"):
        BNNSpec(layers=[Conv2d(2), Dense(1)], input_shape=(1, 8, 8), input_dim=63)
    with raises("layers: a model needs at least one layer"):
        BNNSpec(layers=[], input_dim=1)


def test_unknown_per_site_override_key():
    with raises("priors.layers.2.weight: unknown site 'layers.2.weight'; choose one of layers.0, layers.0.bias, "
                "layers.0.weight, layers.1, layers.1.bias, layers.1.weight"):
        BNNSpec.from_dict(mlp(priors={"layers.2.weight": {"kind": "laplace"}}))
    with raises("priors.layers.1.bias: unknown site 'layers.1.bias'"):
        BNNSpec(layers=[Dense(4), Dense(1, bias=False)], input_dim=2, priors={"layers.1.bias": Laplace()})


def test_bad_override_parameter_names_the_site():
    with raises("priors.layers.0.weight.scale: must be a positive number, got 0"):
        BNNSpec.from_dict(mlp(priors={"layers.0.weight": {"kind": "laplace", "scale": 0}}))
    with raises("priors.layers.0.kind: unknown prior 'cauchy'"):
        BNNSpec.from_dict(mlp(priors={"layers.0": "cauchy"}))


def test_group_prior_that_does_not_fit_a_weight():
    with raises("prior.group: grouping 'kernel' does not apply to a weight of shape (5, 2) (layers.0.weight)"):
        BNNSpec.from_dict(mlp(prior={"kind": "group_spike_and_slab", "group": "kernel"}))
    with raises("priors.layers.1.weight.group: grouping 'kernel' does not apply"):
        BNNSpec.from_dict(mlp(priors={"layers.1.weight": {"kind": "group_spike_and_slab", "group": "kernel"}}))
    with raises("priors.layers.0.group: grouping 'kernel' does not apply"):
        BNNSpec.from_dict(mlp(priors={"layers.0": {"kind": "group_spike_and_slab", "group": "kernel"}}))
    # kernels of a conv layer and one group per bias element are fine
    BNNSpec(layers=[Conv2d(2), Dense(1)], input_shape=(1, 4, 4),
            priors={"layers.0": GroupSpikeAndSlab(group="kernel")})


def test_unknown_top_level_key():
    with raises("hidden: unknown model field 'hidden'; choose one of input_dim, input_shape, layers, likelihood, "
                "name, prior, priors"):
        BNNSpec.from_dict(mlp(hidden=3))
    with raises("layers: missing: list the layers"):
        BNNSpec.from_dict({"input_dim": 1})
    with raises("layers: must be a list of layer tables, got 3"):
        BNNSpec.from_dict({"layers": 3, "input_dim": 1})
    with raises("model: expected a table, got [1, 2]"):
        BNNSpec.from_dict([1, 2])


@pytest.mark.parametrize(
    "likelihood, msg",
    [
        ({"kind": "poisson"}, "likelihood.kind: unknown likelihood 'poisson'; choose one of bernoulli, categorical, "
         "gaussian"),
        ({"kind": "gaussian", "noise": "lerned"}, "likelihood.noise: must be a positive number or 'learned', "
         "got 'lerned'"),
        ({"kind": "gaussian", "noise": -0.1}, "likelihood.noise: must be a positive number, got -0.1"),
        ({"kind": "gaussian", "noise": "learned", "noise_prior": [1.0]}, "likelihood.noise_prior: must be "
         "[concentration, rate], got (1.0,)"),
        ({"kind": "gaussian", "noise": "learned", "noise_prior": [1.0, 0.0]}, "likelihood.noise_prior[1]: must be "
         "a positive number, got 0.0"),
        ({"kind": "bernoulli", "noise": 0.1}, "likelihood.noise: unknown parameter of bernoulli 'noise'"),
    ],
)
def test_bad_likelihood(likelihood, msg):
    with raises(msg):
        BNNSpec.from_dict(mlp(likelihood=likelihood))


# ----------------------------------------------------------------------------
# structure


def test_param_shapes_dense_and_conv():
    spec = BNNSpec(layers=[Dense(5, "tanh"), Dense(3, "relu"), Dense(1, bias=False)], input_dim=7)
    assert spec.param_shapes() == {
        "layers.0.weight": (5, 7), "layers.0.bias": (5,),
        "layers.1.weight": (3, 5), "layers.1.bias": (3,),
        "layers.2.weight": (1, 3),
    }
    assert spec.num_inputs == 7
    cnn = zoo.get("laplace_cnn")
    assert cnn.param_shapes() == {
        "layers.0.weight": (8, 1, 3, 3), "layers.0.bias": (8,),  # 8x8 -> 8x8 -> pool 4x4
        "layers.1.weight": (8, 8, 3, 3), "layers.1.bias": (8,),  # 4x4 -> 4x4 -> pool 2x2
        "layers.2.weight": (10, 32), "layers.2.bias": (10,),
    }
    assert cnn.num_inputs == 64 and cnn.num_classes == 10
    strided = BNNSpec(layers=[Conv2d(3, kernel_size=3, stride=2), Dense(1)], input_shape=(2, 9, 7))
    assert strided.param_shapes()["layers.1.weight"] == (1, 3 * 4 * 3)


def test_prior_for_override_order():
    ss, lap, hs = SpikeAndSlab(), Laplace(0.5), Horseshoe()
    spec = BNNSpec(
        layers=[Dense(4), Dense(3), Dense(1)], input_dim=2, prior=Gaussian(2.0),
        priors={"layers.0": lap, "layers.0.bias": ss, "layers.2.weight": hs},
    )
    assert spec.prior_for("layers.0.weight") == lap  # the layer's override
    assert spec.prior_for("layers.0.bias") == ss  # the site's own override wins
    assert spec.prior_for("layers.1.weight") == Gaussian(2.0)  # the default
    assert spec.prior_for("layers.2.weight") == hs
    assert spec.prior_for("layers.2.bias") == Gaussian(2.0)


# ----------------------------------------------------------------------------
# round trips

ROUND_TRIP_SPECS = {
    "dense": lambda: BNNSpec(layers=[Dense(50, "tanh"), Dense(1)], input_dim=1),
    "design": lambda: BNNSpec(
        layers=[Dense(50, activation="tanh"), Dense(1)], input_dim=1, prior=Laplace(scale=1.0),
        priors={"layers.0.weight": SpikeAndSlab()}, likelihood=GaussianLikelihood(noise=0.1),
    ),
    "conv": lambda: BNNSpec(
        layers=[Conv2d(4, 3, padding=1, activation="relu", pool=2), Conv2d(6, 2, stride=2, bias=False),
                Dense(8, "gelu"), Dense(3)],
        input_shape=(2, 8, 8), prior=Laplace(0.7), likelihood=Categorical(), name="small_cnn",
    ),
    "per-site": lambda: BNNSpec(
        layers=[Dense(6, "softplus"), Dense(4, "leaky_relu", bias=False), Dense(1)], input_dim=3,
        prior=Gaussian(0.5),
        priors={"layers.0.weight": GroupSpikeAndSlab(2.0, 0.05, 0.3, "output"), "layers.1": Horseshoe(0.2),
                "layers.2.bias": Laplace(3.0)},
        likelihood=Bernoulli(),
    ),
    "learned-noise": lambda: BNNSpec(
        layers=[Dense(1, bias=False)], input_dim=20, prior=SpikeAndSlab(0.01, 4.0, 0.5, 0.1, "gaussian"),
        likelihood=GaussianLikelihood("learned", (0.5, 2.0)),
    ),
    "every-prior": lambda: BNNSpec(
        layers=[Dense(4, "sigmoid"), Dense(4, "linear"), Dense(4), Dense(2)], input_dim=3,
        prior=SpikeAndSlab(), likelihood=Categorical(),
        priors={"layers.0.weight": Gaussian(1.5), "layers.0.bias": Laplace(0.1), "layers.1": GroupSpikeAndSlab(),
                "layers.2.weight": Horseshoe(2.0), "layers.3.weight": SpikeAndSlab(spike="gaussian")},
    ),
    "input-shape-mlp": lambda: BNNSpec(layers=[Dense(3, "relu"), Dense(1)], input_shape=(1, 2, 2), input_dim=4),
}
ROUND_TRIP_SPECS.update({name: (lambda name=name: zoo.get(name)) for name in zoo.ZOO})


def _no_none(obj) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _no_none(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_no_none(v) for v in obj)
    return obj is not None and isinstance(obj, (str, int, float, bool))


@pytest.mark.parametrize("name", list(ROUND_TRIP_SPECS))
def test_dict_round_trip(name):
    spec = ROUND_TRIP_SPECS[name]()
    d = spec.to_dict()
    again = BNNSpec.from_dict(d)
    assert again == spec
    assert again.to_dict() == d
    assert _no_none(d)  # only TOML types: tables, arrays, strings, numbers, booleans
    assert BNNSpec.from_dict(d).param_shapes() == spec.param_shapes()


def test_to_dict_content():
    d = ROUND_TRIP_SPECS["design"]().to_dict()
    assert d == {
        "layers": [{"units": 50, "activation": "tanh", "bias": True}, {"units": 1, "bias": True}],
        "input_dim": 1,
        "prior": {"kind": "laplace", "scale": 1.0},
        "priors": {"layers.0.weight": {"kind": "spike_and_slab", "v0": 0.1, "v1": 10.0, "sigma": 1.0,
                                       "inclusion_prob": 0.5, "spike": "laplace"}},
        "likelihood": {"kind": "gaussian", "noise": 0.1},
    }
    learned = ROUND_TRIP_SPECS["learned-noise"]().to_dict()["likelihood"]
    assert learned == {"kind": "gaussian", "noise": "learned", "noise_prior": [0.5, 2.0]}
    conv = ROUND_TRIP_SPECS["conv"]().to_dict()
    assert conv["layers"][0] == {"kind": "conv2d", "channels": 4, "kernel_size": 3, "stride": 1, "padding": 1,
                                 "activation": "relu", "pool": 2, "bias": True}
    assert conv["input_shape"] == [2, 8, 8] and conv["name"] == "small_cnn"


# ----------------------------------------------------------------------------
# TOML

DESIGN_TOML = '''\
[model]
input_dim = 1
layers = [{units = 50, activation = "tanh"}, {units = 1}]
prior = {kind = "laplace", scale = 1.0}
likelihood = {kind = "gaussian", noise = 0.1}
[model.priors."layers.0.weight"]
kind = "spike_and_slab"
[data]
name = "cosine"          # a built-in dataset, or {path = "train.csv", target = "y"}
[[engines]]
kind = "nuts"
num_samples = 500
[[engines]]
kind = "proximal_hmc"
step_size = 0.002
'''


def test_load_spec_design_example(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(DESIGN_TOML)
    spec = load_spec(path)
    assert spec == ROUND_TRIP_SPECS["design"]()
    assert spec.layers == (Dense(50, "tanh"), Dense(1))
    assert spec.prior == Laplace(1.0)
    assert spec.priors == {"layers.0.weight": SpikeAndSlab()}
    assert spec.likelihood == GaussianLikelihood(0.1)
    assert spec.prior_for("layers.0.weight") == SpikeAndSlab()
    assert spec.prior_for("layers.0.bias") == Laplace(1.0)
    assert load_spec(str(path)) == spec
    assert spec_from(str(path)) == spec and spec_from(path) == spec
    model = BNN(path)
    assert model.spec == spec


def test_load_spec_without_model_table_and_errors(tmp_path):
    path = tmp_path / "bare.toml"
    path.write_text('input_dim = 3\nlayers = [{units = 2}]\nlikelihood = "categorical"\n')
    spec = load_spec(path)
    assert spec == BNNSpec(layers=[Dense(2)], input_dim=3, likelihood=Categorical())
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\ninput_dim = 1\n")
    with pytest.raises(SpecError, match=re.escape(f"{bad}: not valid TOML")):
        load_spec(bad)
    with pytest.raises(FileNotFoundError, match="spec file not found"):
        load_spec(tmp_path / "missing.toml")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[model]\ninput_dim = 1\nlayers = [{units = 5, activation = "rleu"}, {units = 1}]\n')
    with raises("layers[0].activation: unknown activation 'rleu'"):
        load_spec(wrong)


def test_spec_from():
    spec = ROUND_TRIP_SPECS["dense"]()
    assert spec_from(spec) is spec
    assert spec_from(spec.to_dict()) == spec
    with pytest.raises(TypeError, match="cannot build a model spec from int 3"):
        spec_from(3)


# ----------------------------------------------------------------------------
# zoo


def test_zoo_registry():
    assert sorted(zoo.ZOO) == ["breast_cancer_mlp", "cosine_mlp", "diabetes_mlp", "digits_mlp", "group_sparse_mlp",
                               "laplace_cnn", "sparse_linear", "wine_mlp"]
    with raises("model: unknown zoo model 'cosine'; choose one of breast_cancer_mlp, cosine_mlp, diabetes_mlp, "
                "digits_mlp, group_sparse_mlp, laplace_cnn, sparse_linear, wine_mlp"):
        zoo.get("cosine")
    assert zoo.get("cosine_mlp") is not zoo.get("cosine_mlp")  # a fresh spec each time
    small = zoo.get("cosine_mlp", hidden=7, activation="relu")
    assert small.param_shapes()["layers.0.weight"] == (7, 1) and small.layers[0].activation == "relu"
    assert zoo.get("sparse_linear", p=30).param_shapes() == {"layers.0.weight": (1, 30)}


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_zoo_model_prior_predictive(name):
    pyro.set_rng_seed(0)
    spec = zoo.get(name)
    assert spec.name == name
    model = BNN(spec)
    n = 6
    x = torch.randn(n, spec.num_inputs)
    trace = poutine.trace(model).get_trace(x)
    f = trace.nodes["_RETURN"]["value"]
    out = spec.layers[-1].units
    assert f.shape == (n, out)
    assert torch.isfinite(f).all()
    obs = trace.nodes["obs"]["value"]
    assert obs.shape == (n,)
    if isinstance(spec.likelihood, Categorical):
        assert ((obs >= 0) & (obs < out)).all()
    for site_name, shape in spec.param_shapes().items():
        assert trace.nodes[site_name]["value"].shape == shape
    trace.compute_log_prob()
    assert torch.isfinite(trace.log_prob_sum())
