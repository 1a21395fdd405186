"""The device contract: every tensor a run creates lives on its data's device, the host reads a
transition's numbers once per draw, and a device this machine lacks is named before anything runs.

Without a GPU, :class:`~tests.support.device_trap.StrayTensors` catches what a GPU run would
trip on: torch's default device is ``meta`` while the data stay on the CPU, so a tensor made
without the data's device is listed (and cannot meet the data). Tests marked ``gpu`` run every
engine on CUDA; they are skipped where ``torch.cuda.is_available()`` is False.
"""

import importlib
import re

import numpy as np
import pytest
import torch
from pyro.infer import MCMC
from torch.overrides import TorchFunctionMode

from bnnzoo.data import Dataset, load
from bnnzoo.experiments import compare
from bnnzoo.inference import ENGINES, FixedStepHMC, run
from bnnzoo.inference.engines.driver import _available_memory
from bnnzoo.inference.kernels import HMC, ChEESHMC, ProximalHMC, RandomWalkMH
from bnnzoo.inference.potential import BNNPotential, initial_theta
from bnnzoo.models import BNN, BNNSpec, Categorical, Dense, Gaussian, GaussianLikelihood, Horseshoe, zoo

from ..support import resume_child
from ..support.device_trap import StrayTensors

run_module = importlib.import_module("bnnzoo.inference.engines.run")  # the package's ``run`` is the function
DATA = load("cosine", n_train=20, n_test=10)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _horseshoe() -> BNN:
    """Sites with parents, a constrained prior and a learned noise: the autograd path."""
    return BNN(BNNSpec(input_dim=1, layers=[Dense(4, "relu"), Dense(1)], prior=Gaussian(1.0),
                       priors={"layers.0.weight": Horseshoe()}, likelihood=GaussianLikelihood(noise="learned")))


def _categorical() -> tuple[BNN, Dataset]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 2, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    spec = BNNSpec(input_dim=2, layers=[Dense(3, "tanh"), Dense(3)], prior=Gaussian(1.0), likelihood=Categorical())
    return BNN(spec), Dataset("three", "classification", x, y, x, y, num_classes=3)


def settings(engine: str, **changes) -> dict:
    """A tiny run of ``engine`` (the kill-and-resume tests' network), its model built beforehand."""
    out = {**resume_child.settings(engine), "num_samples": 3, "warmup_steps": 3, "progress": False, "data": DATA}
    out["model_or_spec"] = BNN(out["model_or_spec"])
    return {**out, **changes}


def run_trapped(**options):
    """``run(**options)`` inside :class:`StrayTensors`; fails naming every tensor made off the data's device."""
    with StrayTensors() as trap:
        try:
            result = run(**options)
        except Exception as err:
            raise AssertionError(f"the run stopped ({type(err).__name__}: {err}); tensors made off the "
                                 f"data's device:\n{trap.report()}") from err
    assert not trap.strays, "tensors made off the data's device:\n" + trap.report()
    return result


# --------------------------------------------------------------- no stray tensor
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_makes_its_tensors_on_the_data_device(engine):
    result = run_trapped(**settings(engine))
    assert result.notes["device"] == "cpu" and "cast" not in result.notes
    assert all(np.isfinite(v).all() for v in result.samples.values())


CATEGORICAL = _categorical()
#: the paths the engines' defaults do not take
VARIANTS = {
    "sgld-minibatch-pruning": ("sgld", {"batch_size": 8, "prune": 0.5}),
    "sghmc-shared-minibatch-running-noise": ("sghmc", {"batch_size": 8, "shared_minibatch": True,
                                                       "noise_estimate": "running"}),
    "sgld_sa-minibatch": ("sgld_sa", {"batch_size": 8}),
    "sghmc_group_ss-minibatch": ("sghmc_group_ss", {"batch_size": 8}),
    "nuts-pyro-model": ("nuts", {"fast": False}),
    "hmc-pyro-model": ("hmc", {"fast": False}),
    "proximal_hmc-sequential-tuned-lam": ("proximal_hmc", {"chain_method": "sequential", "lam": "tune"}),
    "svi-minibatch-mc-kl": ("svi", {"batch_size": 8, "kl": "mc"}),
    "chees-horseshoe": ("chees", {"model_or_spec": _horseshoe()}),
    "nuts-horseshoe": ("nuts", {"model_or_spec": _horseshoe()}),
    "svi-horseshoe": ("svi", {"model_or_spec": _horseshoe()}),
    "rwmh-categorical": ("rwmh", {"model_or_spec": CATEGORICAL[0], "data": CATEGORICAL[1]}),
    "fixed_hmc-categorical": ("fixed_hmc", {"model_or_spec": CATEGORICAL[0], "data": CATEGORICAL[1]}),
    # optimise, then sample: members fitted on the data's device, a budget counted while the chains run
    "mams-ensemble-budget": ("mams", {"warm_start": "ensemble", "num_members": 1, "chains_per_member": 2,
                                      "num_samples": 40, "warmup_steps": 20, "budget": 3000}),
    "mclmc-ensemble": ("mclmc", {"warm_start": "ensemble", "num_members": 2, "chains_per_member": 1}),
    "sgld-ensemble": ("sgld", {"warm_start": "ensemble", "num_members": 2, "chains_per_member": 1}),
}


@pytest.mark.parametrize("engine, changes", VARIANTS.values(), ids=VARIANTS)
def test_minibatches_pyro_models_priors_and_likelihoods_keep_the_data_device(engine, changes):
    run_trapped(**settings(engine, **changes))


@pytest.mark.parametrize("engine", ["chees", "nuts", "sgld", "svi"])
def test_checkpointed_runs_keep_the_data_device(engine, tmp_path):
    run_trapped(**settings(engine), checkpoint=tmp_path / engine, checkpoint_every=2)


def test_the_trap_names_a_tensor_made_without_the_data_device(monkeypatch):
    transition = RandomWalkMH.transition

    def stray(self, theta):
        return transition(self, theta + torch.zeros(theta.shape[-1]))  # no device: the CPU beside CUDA data

    monkeypatch.setattr(RandomWalkMH, "transition", stray)
    with pytest.raises(AssertionError, match=r"torch\.zeros at .*test_device\.py:\d+ in stray"):
        run_trapped(**settings("rwmh"))


# ------------------------------------------------------ host reads per draw
class HostReads(TorchFunctionMode):
    """Counts the reads of tensor values by the host (each one a synchronisation on a GPU)."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.__bool__,
             torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


def _reads_per_draw(kernel, draws: int = 3) -> float:
    kernel.setup(0)
    params = kernel.initial_params
    kernel.sample(params)  # first draw: caches
    with HostReads() as reads:
        for _ in range(draws):
            params = kernel.sample(params)
    return reads.count / draws


@pytest.mark.parametrize("kernel, steps", [
    (FixedStepHMC, "num_steps"), (ProximalHMC, "num_steps"), (HMC, "num_steps")],
    ids=["fixed_hmc", "proximal_hmc", "pyro_hmc"])
def test_the_host_reads_a_transition_once_per_draw_not_per_leapfrog_step(kernel, steps):
    potential = BNNPotential(BNN(resume_child.spec()), DATA.x_train, DATA.y_train)
    theta = initial_theta(potential, 1)

    def build(num_steps):
        if kernel is HMC:
            hmc = kernel(potential_fn=potential.potential_fn, num_steps=num_steps, adapt_step_size=False,
                         adapt_mass_matrix=False, step_size=1e-3)
            hmc.initial_params = potential.unflatten(theta[0])
            return hmc
        return kernel(potential=potential, num_chains=1, step_size=1e-3, **{steps: num_steps})

    assert _reads_per_draw(build(4)) == _reads_per_draw(build(16))


def test_chees_reads_a_transition_once_per_draw():
    potential = BNNPotential(BNN(resume_child.spec()), DATA.x_train, DATA.y_train)
    short = ChEESHMC(potential=potential, num_chains=4, trajectory_length=0.004, step_size=1e-3)
    long = ChEESHMC(potential=potential, num_chains=4, trajectory_length=0.04, step_size=1e-3)
    assert _reads_per_draw(short) == _reads_per_draw(long)


def test_statistics_cross_to_the_host_in_one_block_with_their_dtypes():
    from bnnzoo.inference.kernels.base import _in_one_transfer

    stats = {"acceptance_rate": torch.rand(4, 1), "diverging": torch.tensor([[True], [False], [True], [False]]),
             "n_steps": torch.tensor([[3], [2 ** 40], [0], [7]]), "inclusion": torch.rand(4, 3, dtype=torch.float64)}
    host = _in_one_transfer(stats)
    assert list(host) == list(stats)
    for name, value in stats.items():
        assert host[name].dtype == value.dtype and torch.equal(host[name], value), name


# ------------------------------------------------------------- the keywords
@pytest.mark.parametrize("value", ["cuda:7", "tpu", "nonsense", "meta", 3]
                         + ([] if torch.cuda.is_available() else ["cuda"]))
def test_a_device_this_machine_lacks_is_named_before_anything_runs(value, monkeypatch):
    monkeypatch.setattr(run_module, "_run", lambda *args: pytest.fail("the run started"))
    with pytest.raises(ValueError, match=re.escape(f"device {value!r}") + ".*this machine has: cpu"):
        run("cosine_mlp", "cosine", engine="rwmh", device=value)
    with pytest.raises(ValueError, match=re.escape(f"device {value!r}")):
        compare("cosine_mlp", "cosine", engines=["rwmh"], device=value)


def test_a_run_says_where_it_ran_and_hands_back_host_data():
    result = run(zoo.cosine_mlp(hidden=3), DATA, engine="rwmh", num_samples=3, warmup_steps=3, progress=False,
                 device="cpu")
    assert result.notes["device"] == "cpu" and "cast" not in result.notes
    assert result.data.x_train.device.type == "cpu"


def test_bnn_potential_moves_and_casts_its_data():
    model = BNN(zoo.cosine_mlp(hidden=3))
    potential = BNNPotential(model, DATA.x_train, DATA.y_train, device="cpu", dtype=torch.float64)
    assert (potential.device.type, potential.dtype) == ("cpu", torch.float64)
    assert potential.x.dtype == potential.y.dtype == torch.float64
    theta = initial_theta(potential, 2)
    value, grad = potential.value_and_grad(theta)
    assert theta.dtype == value.dtype == grad.dtype == torch.float64
    assert potential.l1_weights().dtype == potential.gaussian_prior_scale().dtype == torch.float64


def test_a_kernel_moves_and_casts_the_data_it_is_given():
    kernel = FixedStepHMC(BNN(zoo.cosine_mlp(hidden=3)), device="cpu", dtype="float64", step_size=1e-3, num_steps=2)
    mcmc = MCMC(kernel, num_samples=3, warmup_steps=1, disable_progbar=True)
    mcmc.run(DATA.x_train, DATA.y_train)  # float32
    assert kernel.potential.dtype == torch.float64
    assert all(v.dtype == torch.float64 for v in mcmc.get_samples().values())
    potential = BNNPotential(BNN(zoo.cosine_mlp(hidden=3)), DATA.x_train, DATA.y_train)
    with pytest.raises(ValueError, match="a given potential computes where its data are"):
        FixedStepHMC(potential=potential, device="cpu")
    with pytest.raises(ValueError, match="device 'tpu' is not a torch device"):
        FixedStepHMC(BNN(zoo.cosine_mlp(hidden=3)), device="tpu")


# ---------------------------------------------------------------------- GPU
@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_runs_on_cuda(engine):
    result = run(**settings(engine), device="cuda")
    assert result.notes["device"] == f"cuda:{torch.cuda.current_device()}"
    assert result.notes["cast"] == f"data cpu -> cuda:{torch.cuda.current_device()}"
    assert result.data.x_train.device.type == "cpu"  # a Run is on the host
    assert all(np.isfinite(v).all() for v in result.samples.values())


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("engine, changes", VARIANTS.values(), ids=VARIANTS)
def test_every_path_runs_on_cuda(engine, changes):
    run(**settings(engine, **changes), device="cuda")


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_runs_on_cuda_in_float64(engine):
    result = run(**settings(engine), device="cuda", dtype=torch.float64)
    assert all(v.dtype == np.float64 for v in result.samples.values())


@pytest.mark.gpu
@GPU
def test_the_memory_check_reads_the_gpu():
    free, _ = torch.cuda.mem_get_info()
    assert 0 < _available_memory("cuda") <= free * 1.1
    with pytest.raises(ValueError, match=r"num_chains=10000000.*GiB available on cuda"):
        run(zoo.cosine_mlp(), DATA, engine="chees", num_chains=10_000_000, device="cuda")


@pytest.mark.gpu
@GPU
def test_a_kernel_under_pyro_runs_where_its_data_are():
    x, y = DATA.x_train.cuda(), DATA.y_train.cuda()
    kernel = ChEESHMC(BNN(zoo.cosine_mlp(hidden=3)), num_chains=4)
    mcmc = MCMC(kernel, num_samples=3, warmup_steps=3, disable_progbar=True)
    mcmc.run(x, y)
    assert all(v.device.type == "cuda" for v in mcmc.get_samples().values())
