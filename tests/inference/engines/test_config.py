"""The typed run configuration: built and checked once at the edge, frozen, passed down whole."""

import dataclasses
import pickle

import numpy as np
import pytest
import torch

from bnnzoo.data import load
from bnnzoo.experiments import Cell, Study, compare, grid_cells
from bnnzoo.inference import ENGINES, RunConfig, RandomWalkMH, run, run_config, run_settings
from bnnzoo.inference.engines import config as config_module
from bnnzoo.inference.engines import driver
from bnnzoo.inference.engines.registry import Engine
from bnnzoo.inference.kernels.base import FlatKernel
from bnnzoo.models import BNN, zoo

SPEC = zoo.cosine_mlp(hidden=3)
SMALL = {"num_samples": 6, "warmup_steps": 6, "num_chains": 2, "seed": 1, "progress": False, "threads": 1}


@pytest.fixture(scope="module")
def data():
    return load("cosine", n_train=20, n_test=10)


def test_the_config_is_frozen():
    config = run_config("chees", num_samples=100, num_chains=4, target_accept=0.7)
    for obj, field, value in ((config, "num_samples", 3), (config.options, "target_accept", 0.9),
                              (config.settings, "threads", 2), (config.start, "num_chains", 8)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, value)
    assert isinstance(config.arguments, tuple) and isinstance(config.driver, tuple)
    # a study sends it to its workers (Ray) as it is
    ensemble = run_config("rwmh", warm_start="ensemble", num_members=2, ensemble={"lr": 0.1}, device="cpu")
    for one in (config, ensemble):
        assert pickle.loads(pickle.dumps(one)) == one
    # what the kernel is built from: the typed options of its dataclass, the chains it holds
    assert type(config.options) is ENGINES["chees"].kernel.Options
    assert (config.options.target_accept, config.options.num_chains, config.num_chains) == (0.7, 4, 4)
    assert config.driver_options == {"compile": "auto"} and config.settings.threads == "auto"
    # chains one after another: the kernel holds one
    sequential = run_config("proximal_hmc", num_chains=3, chain_method="sequential")
    assert (sequential.options.num_chains, sequential.options.chain_method) == (1, "sequential")


@pytest.mark.parametrize("engine, options", [
    ("rwmh", {"scale": 0.03}),
    ("chees", {"compile": False}),  # target_accept recommended for the model, recorded
    ("svi", {"num_steps": 10}),
    ("rwmh", {"warm_start": "ensemble", "num_members": 2, "ensemble": {"num_epochs": 2}}),
], ids=["rwmh", "chees", "svi", "rwmh-ensemble"])
def test_the_config_gives_the_runs_options_and_draws(engine, options, data):
    direct = run(SPEC, data, engine=engine, **SMALL, **options)
    config = run_config(engine, **SMALL, **options)
    through = run(SPEC, data, engine=config)
    assert through.options == direct.options
    for site in direct.samples:
        np.testing.assert_array_equal(through.samples[site], direct.samples[site])
    # the record is the config's, with the model's recommended target_accept where the engine leaves it to it
    assert config.for_model(BNN(SPEC))[0].record() == direct.options
    # and a run's options build the same config again
    again = run_config(engine, **direct.options, progress=False, threads=1)
    assert again.record() == direct.options and again.options == config.for_model(BNN(SPEC))[0].options


@pytest.mark.parametrize("keywords, message", [
    ({"engine": "nust"}, "engine 'nust': unknown engine; choose one of"),
    ({"engine": "nuts", "num_sample": 10}, r"engine 'nuts': unknown option\(s\) num_sample; did you mean"),
    ({"engine": "chees", "num_chains": 1}, "engine 'chees': num_chains must be >= 2"),
    ({"engine": "proximal_hmc", "chain_method": "serial"}, "engine 'proximal_hmc': chain_method 'serial'"),
    ({"engine": "rwmh", "num_samples": 0}, "num_samples"),
    ({"engine": "rwmh", "seed": -1}, "seed"),
    ({"engine": "rwmh", "budget": 100}, "budget: engine 'rwmh' takes no gradients"),
    ({"engine": "rwmh", "num_members": 2}, r"num_members: only with warm_start='ensemble'"),
    ({"engine": "rwmh", "threads": 0}, "threads must be 'auto', None or an integer >= 1, got 0"),
    ({"engine": "rwmh", "resume": True}, "resume=True: give the checkpoint folder"),
    ({"engine": "rwmh", "checkpoint_every": 0}, "checkpoint_every"),
    ({"engine": "rwmh", "dtype": "float16"}, "dtype"),
    ({"engine": "rwmh", "device": "tpu"}, "device"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_fails_in_run_config_with_runs_errors(keywords, message):
    with pytest.raises(ValueError, match=message) as built:
        run_config(**keywords)
    with pytest.raises(ValueError, match=message) as ran:
        run("cosine_mlp", "cosine", **keywords)
    assert str(built.value) == str(ran.value) and "\n" not in str(built.value)


def test_a_config_goes_to_run_whole(data):
    config = run_config("rwmh", **SMALL)
    with pytest.raises(ValueError, match="num_samples: engine= is a RunConfig"):
        run(SPEC, data, engine=config, num_samples=10)
    with pytest.raises(ValueError, match="scale: engine= is a RunConfig"):
        run(SPEC, data, engine=config, scale=0.1)
    with pytest.raises(ValueError, match="config: a run of engine 'rwmh', not 'mams'"):
        ENGINES["mams"].run(BNN(SPEC), data.x_train, data.y_train, config)
    with pytest.raises(TypeError, match="options: expected RandomWalkMH.Options"):
        RandomWalkMH.from_options(run_config("mams").options, model=BNN(SPEC))


def test_the_kernel_and_the_fit_get_the_configs_options_object(data, monkeypatch):
    received = []
    original = FlatKernel.from_options.__func__
    monkeypatch.setattr(FlatKernel, "from_options", classmethod(
        lambda cls, options, **kw: received.append(options) or original(cls, options, **kw)))
    fit = driver.sample_mean_field
    monkeypatch.setattr(driver, "sample_mean_field",
                        lambda p, options, *a: received.append(options) or fit(p, options, *a))
    for engine, options in (("rwmh", {}), ("svi", {"num_steps": 10})):
        config = run_config(engine, **SMALL, **options)
        run(SPEC, data, engine=config)
        assert received[-1] is config.options


class Counter:
    """Calls of the run's checks: the engine's typed options and the warm start."""

    def __init__(self, monkeypatch):
        self.configure, self.start = 0, 0
        configure, check_start = Engine.configure, config_module.check_start

        def counted_configure(engine, *args, **kwargs):
            self.configure += 1
            return configure(engine, *args, **kwargs)

        def counted_start(*args, **kwargs):
            self.start += 1
            return check_start(*args, **kwargs)

        monkeypatch.setattr(Engine, "configure", counted_configure)
        monkeypatch.setattr(config_module, "check_start", counted_start)


def test_a_comparison_checks_each_engine_once(data, monkeypatch, tmp_path):
    count = Counter(monkeypatch)
    table, runs = compare(SPEC, data, engines=("rwmh", {"kind": "svi", "num_steps": 10}), num_samples=6,
                          warmup_steps=6, seed=1, progress=False, threads=1, checkpoint=tmp_path / "cmp")
    assert list(runs) == ["rwmh", "svi"] and len(table) == 2
    assert (count.configure, count.start) == (2, 2)
    # again: the finished engines are loaded from their checkpoints, checked once more at this edge only
    compare(SPEC, data, engines=("rwmh", {"kind": "svi", "num_steps": 10}), num_samples=6, warmup_steps=6,
            seed=1, progress=False, threads=1, checkpoint=tmp_path / "cmp")
    assert (count.configure, count.start) == (4, 4)


def test_a_sweep_checks_each_cell_once_and_keeps_its_fingerprint(data, monkeypatch):
    count = Counter(monkeypatch)
    cells = grid_cells(["rwmh"], {"rwmh": {"scale": [0.02, 0.04]}}, seeds=[0, 1], common={"num_samples": 6})
    assert count.configure == 4 and all(isinstance(c.config, RunConfig) for c in cells)
    study = Study(cells, data, SPEC, row=lambda cell, result: {})
    assert count.configure == 4
    # the cells' records are their options as given: a study built from unchecked cells has the same fingerprints
    plain = Study([dataclasses.replace(c, config=None) for c in cells], data, SPEC, row=lambda cell, result: {})
    assert count.configure == 8 and plain.prints == study.prints
    assert all(run_config(c.engine, **c.options) == c.config for c in cells)


def test_settings_are_checked_once_for_a_study(data):
    settings = run_settings(threads=2, dtype="float64", checkpoint_seconds=5.0)
    assert (settings.threads, settings.dtype, settings.checkpoint_seconds) == (2, torch.float64, 5.0)
    config = run_config("rwmh").with_settings(settings)
    assert config.settings is settings and config.options == run_config("rwmh").options
    with pytest.raises(TypeError, match="settings: expected RunSettings"):
        run_config("rwmh").with_settings({"threads": 2})
    with pytest.raises(ValueError, match="checkpoint_seconds"):
        Study([Cell("a", "rwmh")], data, SPEC, row=lambda cell, result: {}, checkpoint_seconds=-1)
