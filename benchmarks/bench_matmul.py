"""GFLOP/s of the digits MLP's matrix products: torch's batched products against XLA's, one thread.

At the digits MLP's size (64-128-128-10, 26k parameters) the products are most of a full-data
gradient, so their speed sets how fast any sampler's gradient can be. This script times the
products of one batched gradient with 8 chains on the 1437 training rows of
``load("digits", seed=0)``, each as one batched call (torch ``bmm``, and with the bias
``baddbmm``; XLA ``jax.jit`` of ``jnp.matmul`` on the same shapes, when jax is installed:
``pip install -e .[bench]``):

* ``forward 64->128`` and ``forward 128->128``: ``h W^T (+ b)``, ``[C, N, in] x [C, in, out]``;
* ``weight gradient 128x128``: ``delta^T h``, ``[C, out, N] x [C, N, in]``, ``delta^T`` a transposed
  view of ``delta [C, N, out]`` as in bnnzoo's eager gradient;
* ``propagation 128->128``: ``delta W``, ``[C, N, out] x [C, out, in]``;
* ``one matrix 11496x128 @ 128x128``: the same multiply-adds as the 128->128 forward product in one
  unbatched product.

One intra-op thread for torch and ``XLA_FLAGS`` for one XLA thread, the process pinned to one core
(:func:`common.one_core`: XLA's products use every core otherwise; ``--all-cores`` leaves it unpinned,
to see that); the median of 7 timing windows each.
Usage: ``python benchmarks/bench_matmul.py [--all-cores]``; writes ``benchmarks/results/matmul.{json,md}``
(``--all-cores``: ``matmul_all_cores.{json,md}``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import XLA_ONE_THREAD, machine, markdown_table, one_core, time_call, write_results  # noqa: E402

os.environ.setdefault("XLA_FLAGS", XLA_ONE_THREAD)  # JAX is imported later, in jax_call

CHAINS, ROWS = 8, 1437


def shapes():
    """``(name, a's shape, b's shape, bias or None, a stored transposed)`` of each product."""
    c, n = CHAINS, ROWS
    return [("forward 64->128", (c, n, 64), (c, 64, 128), (c, 1, 128), False),
            ("forward 128->128", (c, n, 128), (c, 128, 128), (c, 1, 128), False),
            ("weight gradient 128x128", (c, 128, n), (c, n, 128), None, True),
            ("propagation 128->128", (c, n, 128), (c, 128, 128), None, False),
            ("one matrix 11496x128 @ 128x128", (c * n, 128), (128, 128), None, False)]


def flops(a, b) -> float:
    """Floating-point operations of ``a @ b`` (a multiply and an add each)."""
    batch = a[0] if len(a) == 3 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def torch_call(a_shape, b_shape, bias_shape, transposed):
    g = torch.Generator().manual_seed(0)
    if transposed:  # delta^T: a transposed view of delta, as the gradient has it
        a = torch.randn(a_shape[0], a_shape[2], a_shape[1], generator=g).transpose(1, 2)
    else:
        a = torch.randn(a_shape, generator=g)
    b = torch.randn(b_shape, generator=g)
    if len(a_shape) == 2:
        return lambda: torch.mm(a, b)
    if bias_shape is None:
        return lambda: torch.bmm(a, b)
    bias = torch.randn(bias_shape, generator=g)
    return lambda: torch.baddbmm(bias, a, b)


def jax_call(a_shape, b_shape, bias_shape, transposed):  # XLA chooses its own layouts: transposed unused
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    key_a, key_b, key_c = jax.random.split(jax.random.PRNGKey(0), 3)
    a, b = jax.random.normal(key_a, a_shape), jax.random.normal(key_b, b_shape)
    if bias_shape is None:
        f = jax.jit(jnp.matmul)
        return lambda: f(a, b).block_until_ready()
    bias = jax.random.normal(key_c, bias_shape)
    f = jax.jit(lambda a, b, bias: jnp.matmul(a, b) + bias)
    return lambda: f(a, b, bias).block_until_ready()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-cores", action="store_true", help="do not pin the process to one core")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with one_core(not args.all_cores) as cores:
        measure(cores, "matmul_all_cores" if args.all_cores else "matmul")


def measure(cores: str, name: str) -> None:
    """Time each product in torch and XLA; write the results as ``name``."""
    rows = []
    for product, a, b, bias, transposed in shapes():
        row = {"product": product, "GFLOP": flops(a, b) / 1e9}
        for lib, make in (("torch", torch_call), ("xla", jax_call)):
            call = make(a, b, bias, transposed)
            row[f"{lib}_ms"] = None if call is None else time_call(call, min_time=0.2, repeats=7) * 1e3
            row[f"{lib}_gflop_s"] = None if call is None else row["GFLOP"] / row[f"{lib}_ms"] * 1e3
        row["xla_over_torch"] = None if row["xla_ms"] is None else row["torch_ms"] / row["xla_ms"]
        rows.append(row)
        print(row, flush=True)
    blas = next((line.strip().lstrip("- ") for line in torch.__config__.show().splitlines() if "Math Kernel" in line), "unknown")
    table = markdown_table(rows, ["product", "GFLOP", "torch_ms", "torch_gflop_s", "xla_ms", "xla_gflop_s",
                                  "xla_over_torch"])
    table += (f"\n\n{CHAINS} chains, {ROWS} rows, float32, one torch thread and XLA_FLAGS for one XLA thread; torch's products: "
              f"{blas}; {cores}. xla_over_torch: torch's time over XLA's.")
    payload = {"machine": machine(), "rows": rows, "settings": {"chains": CHAINS, "rows": ROWS, "threads": 1,
                                                                 "torch_blas": blas, "cores": cores}}
    write_results(name, payload, table)
    print(table)


if __name__ == "__main__":
    main()
