"""Microseconds per potential value-and-gradient: Pyro vs bnnzoo's fast path (vs NumPyro).

Two networks: the cosine MLP (1-50-1 tanh, 100 points, Gaussian likelihood)
and a digits MLP (64-128-128-10, 1000 points, categorical likelihood), N(0, 1)
priors. For each: Pyro's ``potential_fn`` (one trace per call), Pyro with
``jit_compile=True``, bnnzoo's fast path for 1 chain and for 8/32/128 chains
(reported per chain), the same with ``compile=True`` (``torch.compile``; the
seconds its compiling calls took are reported alone), and NumPyro's jitted
gradient when jax/numpyro are installed (``pip install -e .[bench]``). All in
one run, so ratios are fair.

Usage: ``python benchmarks/bench_gradient.py [--quick] [--no-compile] [--device cuda]``; writes
``benchmarks/results/gradient.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from pyro.infer.mcmc.util import initialize_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_device_argument, machine, markdown_table, time_call, write_results  # noqa: E402
import numpyro_models as npm  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference.potential import BNNPotential, PyroPotential, initial_theta  # noqa: E402
from bnnzoo.models import BNN, zoo  # noqa: E402

CHAINS = (8, 32, 128)


def problems():
    cos = load("cosine", seed=0)
    digits = load("digits", seed=0, n_train=1000)
    return {
        "cosine MLP 1-50-1": (zoo.cosine_mlp(hidden=50), cos, [1, 50, 1], "tanh", "gaussian"),
        "digits MLP 64-128-128-10": (zoo.digits_mlp(hidden=128), digits, [64, 128, 128, 10], "relu", "categorical"),
    }


def pyro_jit_call(model, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        init, fn, _, _ = initialize_model(model, (x, y), jit_compile=True, skip_jit_warnings=True)
    params = {k: v.detach() for k, v in init.items()}

    def call():
        z = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        value = fn(z)
        torch.autograd.grad(value, list(z.values()))
        return value

    return call


def measure(name, spec, data, widths, activation, likelihood, min_time, compile=True, device="cpu"):
    model = BNN(spec)
    x, y = data.x_train.to(device), data.y_train.to(device)
    fast = BNNPotential(model, x, y)
    slow = PyroPotential(model, (x, y))
    theta = initial_theta(fast, 1)[0]
    rows = []
    row = {"model": name, "D": fast.dim, "N": int(x.shape[0])}
    row["pyro_us"] = 1e6 * time_call(lambda: slow.value_and_grad(slow.flatten(fast.unflatten(theta))), min_time)
    row["pyro_jit_us"] = 1e6 * time_call(pyro_jit_call(model, x, y), min_time)
    row["fast_1_us"] = 1e6 * time_call(lambda: fast.value_and_grad(theta), min_time)
    for c in CHAINS:
        batch = initial_theta(fast, c)
        row[f"fast_{c}_us_per_chain"] = 1e6 * time_call(lambda: fast.value_and_grad(batch), min_time) / c
    if compile:
        compiled = BNNPotential(model, x, y, compile=True)
        row["compiled_1_us"] = 1e6 * time_call(lambda: compiled.value_and_grad(theta), min_time)
        for c in CHAINS:
            batch = initial_theta(compiled, c)
            row[f"compiled_{c}_us_per_chain"] = 1e6 * time_call(lambda: compiled.value_and_grad(batch), min_time) / c
        row["compile_s"] = compiled.compile_seconds
    if npm.AVAILABLE:
        nmodel, _ = npm.mlp_model(widths, activation, likelihood)
        xh, yh = data.x_train.numpy(), data.y_train.numpy()  # NumPyro on its own default device
        yj = npm.as_jax(yh) if likelihood == "gaussian" else npm.as_jax(yh).astype("int32")
        row["numpyro_us"] = 1e6 * time_call(npm.value_and_grad_fn(nmodel, npm.as_jax(xh), yj), min_time)
    row["speedup_fast_vs_pyro"] = row["pyro_us"] / row["fast_1_us"]
    if "numpyro_us" in row:
        row["fast_32_vs_numpyro"] = row["fast_32_us_per_chain"] / row["numpyro_us"]
        if compile:
            row["compiled_32_vs_numpyro"] = row["compiled_32_us_per_chain"] / row["numpyro_us"]
    rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile=True rows")
    add_device_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    min_time = 0.3 if args.quick else 1.5
    rows = []
    for name, (spec, data, widths, act, lik) in problems().items():
        rows += measure(name, spec, data, widths, act, lik, min_time, compile=not args.no_compile,
                        device=args.device)
        print(rows[-1], flush=True)
    columns = ["model", "D", "N", "pyro_us", "pyro_jit_us", "fast_1_us"] + \
        [f"fast_{c}_us_per_chain" for c in CHAINS] + ["compiled_1_us"] + \
        [f"compiled_{c}_us_per_chain" for c in CHAINS] + \
        ["compile_s", "numpyro_us", "speedup_fast_vs_pyro", "fast_32_vs_numpyro", "compiled_32_vs_numpyro"]
    table = markdown_table(rows, columns)
    payload = {"machine": machine(args.device), "rows": rows, "numpyro": npm.AVAILABLE}
    js, md = write_results("gradient", payload, table)
    print(table)
    print(f"wrote {js} and {md}")


if __name__ == "__main__":
    main()
