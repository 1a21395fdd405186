"""Shared pieces of the benchmark scripts: models, timing, results files."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

RESULTS = Path(__file__).resolve().parent / "results"

#: the posterior benchmark's problems: data set (and stored reference) -> zoo network
PROBLEMS = {"diabetes": "diabetes_mlp", "breast_cancer": "breast_cancer_mlp", "wine": "wine_mlp",
            "digits": "digits_mlp"}


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device``: where bnnzoo computes (``cpu``, ``cuda``, ``cuda:N``; default cpu), checked at once."""
    from bnnzoo.validation import device

    def checked(text: str) -> torch.device:
        try:
            return device("--device", text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parser.add_argument("--device", type=checked, default=torch.device("cpu"),
                        help="where bnnzoo computes: cpu, cuda or cuda:N (default cpu)")


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing on a CPU-only run): a timer must not stop before it."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def machine(device: torch.device | str = "cpu") -> dict:
    """What the numbers were measured on (``device``: where bnnzoo computed)."""
    device = torch.device(device)
    info = {
        "device": str(device),
        "date": datetime.date.today().isoformat(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        if names:
            info["processor"] = names[0]
    except OSError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def time_call(fn: Callable[[], object], min_time: float = 0.5, repeats: int = 5) -> float:
    """Median seconds per call over ``repeats`` batches, each lasting at least ``min_time``
    (GPU work included: each batch ends when the device has finished)."""
    fn()
    fn()
    n = 1
    while True:
        synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / repeats or n > 1_000_000:
            break
        n *= 2
    batches = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        synchronize()
        batches.append((time.perf_counter() - start) / n)
    return statistics.median(batches)


def write_results(name: str, payload: dict, table: str, out: Path = RESULTS) -> tuple[Path, Path]:
    """``<out>/<name>.json`` and ``<out>/<name>.md`` (the table plus the machine; ``out``: ``results/``)."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / f"{name}.json", out / f"{name}.md"
    js.write_text(json.dumps(payload, indent=2, default=str))
    m = payload["machine"]
    gpu = f", bnnzoo on {m['device']} ({m['gpu']})" if "gpu" in m else ""
    md.write_text(f"{table}\n\nMeasured {m['date']} on {m['processor']} ({m['cpus']} CPUs){gpu}, "
                  f"Python {m['python']}, torch {m['torch']} (the script's intra-op threads: "
                  f"{m['torch_threads']}; runs with threads=\"auto\" choose their own).\n")
    return js, md


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return "–" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def alternate(rounds: int, measure: Callable[[str], object]) -> dict[str, list]:
    """``measure("old")`` and ``measure("new")`` ``rounds`` times each, in alternating order (old,
    new, new, old, ...) so that both trees of an A/B see the same machine load: ``{"old": [...],
    "new": [...]}``."""
    runs = {"old": [], "new": []}
    for i in range(rounds):
        for which in ("old", "new") if i % 2 == 0 else ("new", "old"):
            runs[which].append(measure(which))
            print(f"round {i + 1}/{rounds} {which}: {runs[which][-1]}", flush=True)
    return runs


def alternate_against(root: Path, against: str, rounds: int, measure: Callable[[Path], object]) -> tuple[str, dict]:
    """:func:`alternate` of ``measure(tree)`` on ``root`` ("new") and on the commit ``against`` ("old"),
    checked out into a temporary git worktree for the run: ``(the commit's short name, runs)``."""
    rev = subprocess.run(["git", "rev-parse", "--short", against], cwd=root, capture_output=True,
                         text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), rev], cwd=root, check=True)
        try:
            return rev, alternate(rounds, lambda which: measure(old if which == "old" else root))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=root, check=False)


def against_report(runs: dict, metrics, rev: str, unit: str, rounds: int, load_start) -> tuple[list[dict], str, dict]:
    """The rows (each metric's medians, in microseconds, and the median ratio new/old), the markdown
    table with the load before and after, and the load, of an :func:`alternate_against` run."""
    rows = []
    for metric in metrics:
        old_s, new_s, ratio = paired_medians([r[metric] for r in runs["old"]], [r[metric] for r in runs["new"]])
        rows.append({"metric": f"{metric} ({unit})", f"old {rev}": old_s * 1e6, "new": new_s * 1e6,
                     "median new/old": ratio})
    table = markdown_table(rows, ["metric", f"old {rev}", "new", "median new/old"])
    load = {"start": load_start, "end": os.getloadavg()}
    start, end = (", ".join(f"{x:.1f}" for x in load[k]) for k in ("start", "end"))
    table += (f"\n\n{rounds} alternating rounds; the machine's load average (1, 5, 15 min) was {start} "
              f"at the start, {end} at the end.")
    return rows, table, load


def paired_medians(old: list[float], new: list[float]) -> tuple[float, float, float]:
    """The median of each tree's measurements and the median of the round-by-round ratios new/old."""
    return statistics.median(old), statistics.median(new), statistics.median(n / o for o, n in zip(old, new))


#: ``XLA_FLAGS`` asking XLA for one thread, as torch runs with one; set before JAX makes its CPU client.
#: It does not hold XLA's large matrix products to one core: :func:`one_core` does
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


@contextlib.contextmanager
def one_core(enabled: bool = True):
    """Run the block with this process on one core, the first it may use, and restore its cores after;
    yields what was done, in words, for the results (``enabled`` False: nothing, for a smoke run).

    XLA's CPU client runs a large matrix product on every core whatever ``XLA_FLAGS`` says: with
    ``--xla_cpu_multi_thread_eigen=false`` a jitted product at the digits MLP's shapes used 1.85 cores'
    time (jax 0.10, 2 cores). A comparison of torch on one thread with JAX is one core each only with
    the process pinned. Threads and processes started inside the block (XLA's pool, the C++ compiler
    inductor runs) inherit the core; enter it before JAX's first computation."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield "all cores (not pinned)"
        return
    cores = os.sched_getaffinity(0)
    core = min(cores)
    os.sched_setaffinity(0, {core})
    try:
        yield f"one core (the process pinned to core {core}, XLA's threads and the compilers with it)"
    finally:
        os.sched_setaffinity(0, cores)


def fresh_machine_env(folder: Path, tree: Path | None = None) -> dict[str, str]:
    """This process's environment for a measuring process that starts as on a fresh machine: every
    cache under the empty ``folder`` (bnnzoo's compile record ``$BNNZOO_CACHE``, inductor's cache
    ``$TORCHINDUCTOR_CACHE_DIR``, and ``$TMPDIR``, where inductor keeps its precompiled C++ headers),
    and ``tree`` (default: this checkout) first on ``$PYTHONPATH``. A second process given the same
    environment finds what the first left (warm)."""
    folder = Path(folder)
    tree = Path(tree) if tree is not None else Path(__file__).resolve().parents[1]
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(BNNZOO_CACHE=str(folder / "cache"), TORCHINDUCTOR_CACHE_DIR=str(folder / "cache" / "inductor"),
               TMPDIR=str(folder / "tmp"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")])))
    return env


def notes_text(payload: dict) -> str:
    """A results file's notes (``payload["notes"]``) as the paragraphs ending its markdown."""
    return "".join(f"\n\nNote: {note}" for note in payload.get("notes", []))


def probe_json(command: list[str], tree: Path, env: dict[str, str]):
    """Run a measuring process in ``tree`` and return what it printed as JSON on its last line."""
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"probe failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def leapfrog_steps_args(potential, chains: int) -> tuple:
    """The arguments after the potential of one call of bnnzoo's four-step leapfrog graph
    (``compiled_graphs.GRAPHS["leapfrog_steps"]``) for ``chains`` chains: initial points at seed 0,
    their gradient, random momenta, a unit mass, steps of 1e-3 and open energy bounds."""
    import pyro

    from bnnzoo.inference.compiled_graphs import unroll_step_sizes
    from bnnzoo.inference.potential import initial_theta

    pyro.set_rng_seed(0)
    theta = initial_theta(potential, chains)
    _, grad = potential.analytic_value_and_grad(theta)
    p, inv_mass = torch.randn_like(theta), torch.ones(theta.shape[-1])
    high, low = torch.full((chains,), -1e30), torch.full((chains,), 1e30)
    return theta, p, grad, unroll_step_sizes(1e-3, theta), inv_mass, high, low
