"""The engine layer reads every option from the kernels' options dataclasses: one default per option."""

import ast
import inspect
import pathlib
from dataclasses import fields

import numpy as np
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.inference import ENGINES, NUTS, VIOptions, run
from bnnzoo.inference.engines.registry import DRIVER_OPTIONS
from bnnzoo.inference.kernels import HMC, ChEESHMC
from bnnzoo.inference.potential import BNNPotential
from bnnzoo.models import BNN, zoo

KERNEL_ENGINES = [name for name, e in ENGINES.items() if e.runner.__name__ == "run_flat_kernel"]
PYRO_ENGINES = {"nuts": NUTS, "hmc": HMC}


@pytest.fixture(scope="module")
def potential():
    data = load("cosine", n_train=20, n_test=10)
    return BNNPotential(BNN(zoo.cosine_mlp(hidden=3)), data.x_train, data.y_train)


def test_every_engine_is_listed_here():
    assert set(ENGINES) == set(KERNEL_ENGINES) | set(PYRO_ENGINES) | {"svi"}


@pytest.mark.parametrize("name", KERNEL_ENGINES)
def test_run_and_the_kernel_use_identical_defaults(name, potential):
    engine = ENGINES[name]
    kernel_options = {k: v for k, v in engine.defaults().items()
                      if k not in engine.driver or k in engine.kernel.Options.names()}
    chains = {"num_chains": 2} if name == "chees" else {}  # the engine's C chains; the rest is defaults
    through_engine = engine.kernel(potential=potential, **kernel_options, **chains)
    direct = engine.kernel(potential=potential, **chains)
    assert through_engine.options == direct.options
    # and the engine's list is exactly the dataclass's (less the run-level num_chains), plus the driver's
    own = [f.name for f in fields(engine.kernel.Options) if f.name != "num_chains"]
    assert set(engine.options()) == set(own) | set(engine.driver)


@pytest.mark.parametrize("name", sorted(PYRO_ENGINES))
def test_pyro_engines_and_their_kernels_use_identical_defaults(name, potential):
    engine, cls = ENGINES[name], PYRO_ENGINES[name]
    opts = engine.options_cls(**engine.defaults())
    through_engine = cls(potential_fn=potential.potential_fn, **opts.pyro_kwargs(None))
    direct = cls(potential_fn=potential.potential_fn)
    for attr in ("step_size", "num_steps", "trajectory_length", "_max_tree_depth", "_adapt_step_size",
                 "_adapt_mass_matrix", "_full_mass"):
        assert getattr(through_engine, attr, None) == getattr(direct, attr, None), attr
    assert through_engine._adapter.target_accept_prob == direct._adapter.target_accept_prob == 0.8


def test_svi_defaults_are_vi_options_defaults():
    assert ENGINES["svi"].defaults() == {f.name: f.default for f in fields(VIOptions)}


def test_the_drifted_defaults_have_one_value_each():
    assert ENGINES["rwmh"].defaults()["scale"] == 0.05
    # set from the data when the kernel starts (docs/algorithms.md, "Data-scaled defaults")
    for name in ("sgld", "sgld_sa", "sghmc", "sghmc_sa"):
        assert ENGINES[name].defaults()["step_size"] == ENGINES[name].defaults()["schedule"] == "auto"
    assert ENGINES["sghmc_group_ss"].defaults()["step_size"] == "auto"
    assert ENGINES["sghmc_group_ss"].defaults()["cycle_length"] == ENGINES["sghmc_group_ss"].defaults()["em_warmup"]
    # the SA sequence: A and B from the data, c the paper's per engine (and the A the rule stretches)
    for name, power, scale in (("sghmc_sa", 0.75, 1.0), ("sgld_sa", 0.7, 10.0)):
        defaults = ENGINES[name].defaults()
        assert (defaults["sa_scale"], defaults["sa_offset"], defaults["sa_power"]) == ("auto", "auto", power)
        assert ENGINES[name].kernel.Options.paper_sa_scale == scale


def test_kernel_signature_and_unknown_keyword_come_from_the_dataclass(potential):
    params = inspect.signature(ChEESHMC).parameters
    assert params["step_size"].default == 0.1 and params["num_chains"].default == 1
    with pytest.raises(ValueError, match=r"ChEESHMC: unknown option\(s\) step_sise; did you mean 'step_size'"):
        ChEESHMC(potential=potential, step_sise=0.1)
    with pytest.raises(ValueError, match="max_leapfrog_steps must be an integer >= 1, got 0"):
        ChEESHMC(potential=potential, max_leapfrog_steps=0)


def test_every_option_has_a_meaning():
    for name, engine in ENGINES.items():
        if name == "svi":
            continue
        missing = [k for k, doc in engine.option_docs().items() if not doc]
        assert not missing, (name, missing)
    assert set(DRIVER_OPTIONS) == {"chain_method", "compile"}


def test_unknown_engine_option_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"engine 'nuts': unknown option\(s\) num_sample; did you mean "
                                         r"'num_samples'"):
        run("cosine_mlp", "cosine", engine="nuts", num_sample=10)
    with pytest.raises(ValueError, match="engine 'chees': num_chains must be >= 2"):
        run("cosine_mlp", "cosine", engine="chees", num_chains=1)
    with pytest.raises(ValueError, match="engine 'proximal_hmc': chain_method 'serial': choose one of"):
        run("cosine_mlp", "cosine", engine="proximal_hmc", chain_method="serial")


def test_no_kernel_module_imports_the_engine_layer():
    root = pathlib.Path(__file__).resolve().parents[3] / "bnnzoo" / "inference" / "kernels"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "engines" not in (node.module or ""), f"{path.name} imports {node.module}"


@pytest.mark.parametrize("engine, options, message", [
    ("nuts", {"target_accept": 1.5}, "target_accept must be strictly between 0 and 1, got 1.5"),
    ("nuts", {"target_accept": -1}, "target_accept must be strictly between 0 and 1, got -1"),
    ("nuts", {"max_tree_depth": 0}, "max_tree_depth must be an integer >= 1, got 0"),
    ("hmc", {"step_size": 0, "adapt_step_size": False}, "step_size must be a positive number, got 0"),
    ("hmc", {"step_size": -0.1}, "step_size must be a positive number, got -0.1"),
    ("hmc", {"num_steps": 0}, "num_steps must be an integer >= 1, got 0"),
    ("hmc", {"trajectory_length": 0.0}, "trajectory_length must be a positive number, got 0.0"),
], ids=["nuts-target-high", "nuts-target-negative", "tree-depth", "hmc-zero-step", "hmc-negative-step",
        "hmc-no-steps", "hmc-no-length"])
def test_pyro_engine_options_are_checked_like_ours(engine, options, message):
    with pytest.raises(ValueError, match=f"engine '{engine}': " + message.replace("(", r"\(")):
        run("cosine_mlp", "cosine", engine=engine, num_samples=1, warmup_steps=1, **options)


def test_run_level_counts_name_their_field():
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got 'zero'"):
        run("cosine_mlp", "cosine", engine="rwmh", seed="zero")


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_runs_in_float64_when_asked(engine):
    """``dtype=torch.float64`` with torch's default left at float32: float64 draws and statistics,
    float32 data cast (and said), and the caller's default dtype untouched."""
    from ...support import resume_child

    settings = {**resume_child.settings(engine), "num_samples": 3, "warmup_steps": 3, "progress": False}
    settings["data"] = load("cosine", n_train=20, n_test=10)  # float32
    assert torch.get_default_dtype() == torch.float32
    result = run(**settings, dtype=torch.float64)
    assert torch.get_default_dtype() == torch.float32
    assert all(v.dtype == np.float64 for v in result.samples.values())
    assert all(v.dtype == np.float64 for v in result.sample_stats.values() if v.dtype.kind == "f")
    assert result.data.x_train.dtype == torch.float64 and result.notes["cast"] == "data torch.float32 -> torch.float64"


@pytest.mark.parametrize("dtype", [torch.int64, "int32", "double precision", 3])
def test_a_dtype_that_is_not_a_float_type_is_named(dtype):
    with pytest.raises(ValueError, match="dtype must be a torch floating dtype"):
        run("cosine_mlp", "cosine", engine="rwmh", dtype=dtype)
