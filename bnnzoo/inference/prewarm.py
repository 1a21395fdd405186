"""Inductor's one-time set-up on a fresh machine, paid by a background process on a free core.

The first ``torch.compile`` on the CPU of a machine pays for what later ones find on disk: inductor's
dry compiles that check the processor's vector instruction sets and the build of its precompiled
C++ header (together about 13 of a cold compile's 23 s on this project's 2-core machine, against 5 s
warm: ``benchmarks/results/first_compile.md``). A run whose ``compile="auto"`` may compile starts,
at most once per machine and torch version, one background process (:func:`main`, at the lowest
priority) that builds a small C++ module as inductor builds a compiled graph's (:func:`build_a_kernel`:
with the C++ wrapper bnnzoo's CPU graphs use, whose precompiled header is not the kernels' one), and
so leaves both on disk (the checks in the run's inductor cache folder, the header in inductor's
folder of headers) while the run takes its first, eager, steps on its own thread. Building the module
directly, not through a compiled function, leaves out the tracing and lowering that would come
before the checks, so the header is there sooner (a cold run's compile about 4.5 s shorter on an
Intel Xeon: ``benchmarks/results/first_compile_kernel.md``). When the run
decides to compile, it finds them there; inductor's file locks make a compile that starts before the
background process is done wait for, or repeat, the same work, never use half of it.

It starts only where it can help and cost nothing: a run on the CPU, a C++ compiler on the PATH, a
core this process's threads leave free (``os.sched_getaffinity`` against torch's thread count),
no marker of a finished set-up (:func:`marker`) and no other set-up under way; ``BNNZOO_PREWARM=0``
turns it off. What a compiled graph computes does not depend on it: the instruction set checked is
the machine's either way, so the draws are the same with and without it. The run's
``Run.notes["compile_prewarm"]`` says whether it started one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from .compilation import cache_dir, compiler_available, one_isa_check, use_persistent_inductor_cache
from .compiled_graphs import cpu_options

__all__ = ["ENV", "marker", "reason_not_to_start", "start"]

#: the environment variable that turns the background set-up off ("0")
ENV = "BNNZOO_PREWARM"
#: seconds after which a set-up that left its lock but no marker is taken for dead
STALE_SECONDS = 600.0

_started: subprocess.Popen | None = None


def marker() -> Path:
    """The file a finished set-up leaves (per torch version and graph wrapper, :func:`build_a_kernel`,
    in bnnzoo's cache folder)."""
    return cache_dir() / "prewarm" / f"done-torch-{torch.__version__}{'-cpp-wrapper' if cpu_options() else ''}"


def _lock() -> Path:
    return marker().with_name(marker().name + ".lock")


def free_cores() -> int:
    """Cores this process may use that torch's threads leave free."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores - torch.get_num_threads()


def reason_not_to_start(device: torch.device | str | None = None) -> str | None:
    """Why no background set-up starts now (None: it may start)."""
    if os.environ.get(ENV, "1") == "0":
        return f"{ENV}=0"
    if torch.device(device or "cpu").type != "cpu":
        return "not a CPU run"
    if _started is not None:
        return "started earlier in this process"
    if marker().exists():
        return "done on this machine earlier"
    lock = _lock()
    if lock.exists() and time.time() - lock.stat().st_mtime < STALE_SECONDS:
        return "under way in another process"
    if free_cores() < 1:
        return "no core free of this run's threads"
    if not compiler_available():
        return "no C++ compiler"
    return None


def start(device: torch.device | str | None = None) -> str:
    """Start the background set-up where :func:`reason_not_to_start` allows; the line for the run's notes."""
    global _started
    reason = reason_not_to_start(device)
    if reason is not None:
        return f"not started ({reason})"
    use_persistent_inductor_cache()  # the child inherits the cache folder the run's compile will use
    lock = _lock()
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        if lock.exists() and time.time() - lock.stat().st_mtime >= STALE_SECONDS:
            lock.unlink(missing_ok=True)  # left by a set-up that died
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return "not started (under way in another process)"
    os.close(fd)
    _started = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    return f"started a background process (pid {_started.pid}) for inductor's one-time set-up"


#: a C++ kernel as inductor writes one for the CPU (``torch/_inductor/codegen/cpp.py``), built where
#: graphs keep inductor's Python wrapper (``BNNZOO_CPP_WRAPPER=0``): its first build on a machine
#: checks the instruction sets and builds the kernels' precompiled header, with a graph's flags
KERNEL = """#include <torch/csrc/inductor/cpp_prefix.h>
extern "C" void kernel(float* out_ptr0)
{
    out_ptr0[0] = 1.0f;
}
"""

#: an empty graph module as inductor's C++ wrapper writes one for the CPU
#: (``torch/_inductor/codegen/cpp_wrapper_cpu.py``), what bnnzoo's CPU graphs are built as
#: (:data:`~bnnzoo.inference.compiled_graphs.CPU_OPTIONS`): its first build checks the instruction
#: sets and builds the wrapper's precompiled header, with a graph's flags (on the CPU inductor
#: resolves the instruction set from the device, not from the code)
WRAPPER = """#include <torch/csrc/inductor/cpp_wrapper/cpu.h>
void inductor_entry_impl(AtenTensorHandle* input_handles, AtenTensorHandle* output_handles) {}
"""


def build_a_kernel() -> None:
    """Build a small module through inductor's code cache as a compiled CPU graph's is built: with
    the C++ wrapper (:data:`WRAPPER`, ``CppWrapperCodeCache.load_pybinding``, what inductor's
    ``cpp_wrapper`` mode calls), or where graphs keep the Python wrapper, one kernel (:data:`KERNEL`,
    ``CppPythonBindingsCodeCache.load_pybinding``, what ``async_compile.cpp_pybinding`` calls): the
    instruction-set checks and the header, without tracing and lowering a graph first."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache, CppWrapperCodeCache

    if cpu_options():
        CppWrapperCodeCache.load_pybinding(["std::vector<AtenTensorHandle>"], WRAPPER, "cpu", num_outputs=0)
    else:
        CppPythonBindingsCodeCache.load_pybinding(["float*"], KERNEL)


def main(nice: int = 19) -> None:
    """The background set-up: at priority ``nice`` (the lowest by default: on a busy machine it waits),
    build a small C++ kernel as inductor builds a graph's (:func:`build_a_kernel`; inductor checks the
    instruction sets and builds its header on the way; where that fails, compile a small function
    instead), then leave the marker (with the outcome: a failed set-up is not tried again) and drop
    the lock."""
    try:
        os.nice(nice)
    except OSError:
        pass
    torch.set_num_threads(1)
    use_persistent_inductor_cache()
    outcome = "done"
    try:
        with one_isa_check("cpu"):  # as the run's compile checks: the same files on disk
            try:
                build_a_kernel()
            except Exception as err:  # inductor's code cache changed: compile a small function instead
                outcome = f"done by a compiled function (the kernel alone failed: {type(err).__name__}: {err})"
                compiled = torch.compile(lambda x: torch.tanh(x @ x.T).sum(-1), dynamic=False,
                                         options=cpu_options())
                compiled(torch.randn(8, 8))
    except Exception as err:  # a machine where compiling fails: the runs' own compiles fall back and say why
        outcome = f"failed ({type(err).__name__}: {err})"
    finally:
        # the marker either way, so that no later run starts the set-up again
        marker().parent.mkdir(parents=True, exist_ok=True)
        marker().write_text(f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S')}: {outcome}\n")
        _lock().unlink(missing_ok=True)


if __name__ == "__main__":
    main()
