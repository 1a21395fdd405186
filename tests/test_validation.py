"""bnnzoo.validation: every check accepts what it should, refuses the rest (bools,
NaN and inf included) with a message naming the field and the value, and builds
its error with the given factory."""

import math
import re

import numpy as np
import pytest
import torch

from bnnzoo import validation as v
from bnnzoo.models import SpecError

NON_FINITE = [math.nan, math.inf, -math.inf, np.float64("nan")]
NOT_NUMBERS = [True, False, None, "1", [1], 1 + 0j]


def _refuses(check, *args, message, **kw):
    with pytest.raises(ValueError, match=re.escape(message)):
        check(*args, **kw)


def test_value_error_and_is_real():
    err = v.value_error("step_size", "must be big")
    assert type(err) is ValueError and str(err) == "step_size must be big"
    for x in [0, -3, 2.5, np.int64(4), np.float32(0.5), np.float64(-1e300)]:
        assert v.is_real(x), x
    for x in NON_FINITE + NOT_NUMBERS + [np.bool_(True)]:
        assert not v.is_real(x), x


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("x", [1, 0.5, 1e-300, np.int64(3), np.float32(2.0)])
def test_positive_accepts(x):
    v.positive("lr", x)


@pytest.mark.parametrize("x", [0, 0.0, -1, -1e-9, np.int64(0)] + NON_FINITE + NOT_NUMBERS)
def test_positive_refuses(x):
    _refuses(v.positive, "lr", x, message=f"lr must be a positive number, got {x!r}")


@pytest.mark.parametrize("x", [0, -2, 3.5, np.float64(1e10), np.int32(-1)])
def test_finite_accepts(x):
    v.finite("init_rho", x)


@pytest.mark.parametrize("x", NON_FINITE + NOT_NUMBERS)
def test_finite_refuses(x):
    _refuses(v.finite, "init_rho", x, message=f"init_rho must be a finite number, got {x!r}")


@pytest.mark.parametrize("check, wording", [(v.fraction, "must be strictly between 0 and 1"),
                                            (v.probability, "must be a probability strictly between 0 and 1")])
def test_fraction_and_probability(check, wording):
    for x in [0.5, 1e-12, 1 - 1e-12, np.float32(0.25)]:
        check("p", x)
    for x in [0, 1, 0.0, 1.0, -0.1, 1.5, np.int64(1)] + NON_FINITE + NOT_NUMBERS:
        _refuses(check, "p", x, message=f"p {wording}, got {x!r}")


def test_in_interval():
    v.in_interval("eps", 0.0)  # default [0.0, inf)
    v.in_interval("eps", np.int64(7))
    v.in_interval("beta", 0.0, 0.0, 1.0)
    v.in_interval("rho", 1.0, -1.0, 1.0, high_open=False)
    _refuses(v.in_interval, "eps", -1e-8, message="eps must be in [0.0, inf), got -1e-08")
    _refuses(v.in_interval, "lr", 0.0, low_open=True, message="lr must be in (0.0, inf), got 0.0")
    _refuses(v.in_interval, "beta", 1.0, 0.0, 1.0, message="beta must be in [0.0, 1.0), got 1.0")
    _refuses(v.in_interval, "rho", -1.0, -1.0, 1.0, low_open=True, high_open=False,
             message="rho must be in (-1.0, 1.0], got -1.0")
    for x in NON_FINITE + NOT_NUMBERS:
        _refuses(v.in_interval, "eps", x, message=f"eps must be in [0.0, inf), got {x!r}")
    _refuses(v.in_interval, "noise", -0.1, got="; got", message="noise must be in [0.0, inf); got -0.1")


# ------------------------------------------------------------------ integers
@pytest.mark.parametrize("x", [1, 5, np.int64(2), np.int8(1), np.uint16(9)])
def test_integer_accepts(x):
    v.integer("units", x)


@pytest.mark.parametrize("x", [0, -1, np.int64(0), 1.0, 2.5, "3", True, False, None, math.nan, math.inf])
def test_integer_refuses(x):
    _refuses(v.integer, "units", x, message=f"units must be an integer >= 1, got {x!r}")


def test_integer_minimum():
    v.integer("padding", 0, minimum=0)
    _refuses(v.integer, "padding", -1, minimum=0, message="padding must be an integer >= 0, got -1")
    _refuses(v.integer, "n", 2, minimum=3, message="n must be an integer >= 3, got 2")
    v.integer("seed", 2**32 - 1, minimum=0, maximum=2**32 - 1)
    _refuses(v.integer, "seed", 2**32, minimum=0, maximum=2**32 - 1,
             message="seed must be an integer <= 4294967295, got 4294967296")


@pytest.mark.parametrize("x", [1, 7, np.int64(3), np.uint8(1)])
def test_count_accepts(x):
    v.count("n_train", x)
    v.count("seed", x, minimum=0)


@pytest.mark.parametrize("x", [0, -1, np.int64(0), 1.0, "2", True, False, None, math.nan, math.inf])
def test_count_refuses(x):
    _refuses(v.count, "n_train", x, message=f"n_train must be a positive integer, got {x!r}")


def test_count_wording():
    v.count("seed", 0, minimum=0)
    v.count("seed", np.int32(0), minimum=0)
    _refuses(v.count, "seed", -1, minimum=0, message="seed must be a non-negative integer, got -1")
    _refuses(v.count, "seed", True, minimum=0, message="seed must be a non-negative integer, got True")
    _refuses(v.count, "p", 2, minimum=3, message="p must be an integer >= 3, got 2")
    _refuses(v.count, "n_test", 0, got="; got", message="n_test must be a positive integer; got 0")


# ------------------------------------------------------------------ others
def test_boolean():
    v.boolean("score_baseline", True)
    v.boolean("score_baseline", False)
    for x in [1, 0, "yes", None, np.bool_(True), 1.0]:
        _refuses(v.boolean, "score_baseline", x, message=f"score_baseline must be True or False, got {x!r}")


def test_one_of():
    v.one_of("schedule", "plateau", ("exponential", "plateau"))
    v.one_of("schedule", "plateau", iter(["plateau"]))  # any iterable of choices
    v.one_of("k", 2, (1, 2, 3))
    for x in ["cosine", "", None, ["plateau"], {"plateau": 1}, {"plateau"}, 1]:
        _refuses(v.one_of, "schedule", x, ("exponential", "plateau"),
                 message=f"schedule {x!r}: choose one of exponential, plateau")


# ------------------------------------------------------------------ error factories
@pytest.mark.parametrize(
    "check, args, kw, detail",
    [
        (v.positive, (-1,), {}, "must be a positive number, got -1"),
        (v.integer, (0,), {}, "must be an integer >= 1, got 0"),
        (v.count, (0,), {}, "must be a positive integer, got 0"),
        (v.finite, (math.nan,), {}, "must be a finite number, got nan"),
        (v.boolean, (0,), {}, "must be True or False, got 0"),
        (v.fraction, (1.0,), {}, "must be strictly between 0 and 1, got 1.0"),
        (v.probability, (1.0,), {}, "must be a probability strictly between 0 and 1, got 1.0"),
        (v.in_interval, (-1.0,), {}, "must be in [0.0, inf), got -1.0"),
        (v.one_of, ("c", ("a", "b")), {}, "'c': choose one of a, b"),
    ],
)
def test_every_check_builds_its_error_with_the_factory(check, args, kw, detail):
    with pytest.raises(SpecError) as info:
        check("layers[0].units", *args, error=SpecError, **kw)
    assert info.value.field == "layers[0].units" and info.value.detail == detail
    assert str(info.value) == f"layers[0].units: {detail}"
    seen = []

    class Custom(Exception):
        pass

    def factory(field, detail):
        seen.append((field, detail))
        return Custom(f"<{field}|{detail}>")

    with pytest.raises(Custom, match=re.escape(f"<x|{detail}>")):
        check("x", *args, error=factory, **kw)
    assert seen == [("x", detail)]


def test_at_least_accepts_the_bound_and_names_field_and_value():
    from bnnzoo import validation

    validation.at_least("sa_offset", 0, 0)
    validation.at_least("sa_offset", np.float32(2.5), 0)
    for bad in (-1e-9, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match=r"sa_offset must be a number >= 0, got "):
            validation.at_least("sa_offset", bad, 0)


# ------------------------------------------------------------ devices and dtypes
@pytest.mark.parametrize("x, want", [("cpu", "cpu"), ("cpu:0", "cpu"), (torch.device("cpu"), "cpu")])
def test_device_accepts_the_cpu(x, want):
    assert v.device("device", x) == torch.device(want)


@pytest.mark.parametrize("x, detail", [
    ("tpu", "is not a torch device"), ("nonsense", "is not a torch device"), (3, "is not a torch device"),
    (None, "is not a torch device"), ("meta", "bnnzoo runs on the CPU or a CUDA GPU"),
    ("mps", "bnnzoo runs on the CPU or a CUDA GPU"), ("cuda:7", "is not available"),
], ids=["tpu", "nonsense", "int", "none", "meta", "mps", "cuda-7"])
def test_device_refuses_what_this_machine_lacks(x, detail):
    _refuses(v.device, "device", x, message=f"device {x!r}: {detail}" if detail.startswith("bnnzoo") else
             f"device {x!r} {detail}; this machine has: {', '.join(v.available_devices())}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA has it")
def test_device_refuses_cuda_without_a_gpu():
    assert v.available_devices() == ["cpu"]
    _refuses(v.device, "--device", "cuda", message="--device 'cuda' is not available; this machine has: cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_device_gives_cuda_its_index():
    assert v.device("device", "cuda") == torch.device("cuda", torch.cuda.current_device())


@pytest.mark.parametrize("x, want", [("float64", torch.float64), (torch.float32, torch.float32),
                                     ("float32", torch.float32)])
def test_float_dtype_accepts_a_dtype_or_its_name(x, want):
    assert v.float_dtype("dtype", x) is want


@pytest.mark.parametrize("x", [torch.int64, "int32", "double precision", 3, None])
def test_float_dtype_refuses_the_rest(x):
    _refuses(v.float_dtype, "dtype", x,
             message=f"dtype must be a torch floating dtype (torch.float32, torch.float64 or its name), got {x!r}")


@pytest.mark.parametrize("dtype", ["float16", torch.bfloat16])
def test_a_dtype_too_coarse_for_an_accept_reject_test_is_refused(dtype):
    from bnnzoo.inference import run
    from bnnzoo.inference.kernels import RandomWalkMH
    from bnnzoo.inference.potential import BNNPotential
    from bnnzoo.models import BNN, zoo

    with pytest.raises(ValueError, match=rf"dtype {dtype!r} is too coarse for an accept/reject test .*use float32 "
                                         "or float64"):
        run("cosine_mlp", "cosine", engine="rwmh", num_samples=2, warmup_steps=2, dtype=dtype, progress=False)
    with pytest.raises(ValueError, match="too coarse"):
        RandomWalkMH(BNN(zoo.cosine_mlp(hidden=2)), dtype=dtype)
    with pytest.raises(ValueError, match=r"x.dtype torch.float16 is too coarse"):
        BNNPotential(BNN(zoo.cosine_mlp(hidden=2)), torch.zeros(5, 1, dtype=torch.float16), torch.zeros(5))
