"""Every engine's draws at a fixed seed, eagerly, against hashes stored in
``draw_hashes.json``: a restructure that keeps behaviour keeps them bit for bit.

An engine whose draws change on purpose gets its hash rewritten, and the commit says why:
``python tests/inference/engines/test_draw_hashes.py --write`` (all engines) or
``... --write ENGINE ...``.

Bits depend on the processor as well as on the code: the same wheel of torch runs other kernels
(MKL's, torch's vectorized ones) on another vendor's or another instruction set's processor, and a
chain's draws move with the last bit of a matrix product. So the hashes are stored per
:func:`numerics` (the CPU's vendor and torch's CPU capability): the set written on an Intel
processor with AVX-512 did not hold on an AMD one with AVX-512 (2026-11-28; every gradient-based
full-batch engine differed, the SG-MCMC engines, random-walk Metropolis and batched NUTS at its
defaults did not). A machine whose numerics have no stored set skips, naming them; ``--write`` on it
adds its set. A change made on purpose can be rewritten only on the processor at hand: the other
processors' hashes of the engines it changed are replaced by ``"stale: <why>"``, and those engines skip
there, saying why, until ``--write`` runs on such a processor.
"""

import json
import platform
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bnnzoo.inference import ENGINES, run  # noqa: E402
from tests.support import resume_child  # noqa: E402
from tests.support.draw_hashes import digest  # noqa: E402

STORE = Path(__file__).with_name("draw_hashes.json")


#: warm-ups long enough for the mass windows and the components around them (ChEES's trajectory
#: length, proximal HMC's lambda search, per-chain NUTS): ``name -> (engine, run() overrides)``
VARIANTS = {
    "chees@warmup160": ("chees", {"warmup_steps": 160}),
    "chees@warmup160-late-T": ("chees", {"warmup_steps": 160, "mass_schedule": "late", "trajectory_length": 0.5}),
    "chees@warmup160-stan": ("chees", {"warmup_steps": 160, "mass_schedule": "stan", "hold_trajectory": False}),
    "proximal_hmc@warmup160-tune": ("proximal_hmc", {"warmup_steps": 160, "lam": "tune"}),
    "batched_nuts@warmup160-per-chain": ("batched_nuts", {"warmup_steps": 160, "pool_chains": False}),
    "batched_nuts@warmup160": ("batched_nuts", {"warmup_steps": 160}),
    "fixed_hmc@warmup160": ("fixed_hmc", {"warmup_steps": 160}),
}


def draws_hash(name: str) -> str:
    """sha256 of the engine's draws (sites in order, float64 bytes) and per-draw statistics on the
    resume tests' small network, seed 3, one torch thread, no compiling (``name``: an engine or a
    :data:`VARIANTS` entry)."""
    engine, overrides = VARIANTS.get(name, (name, {}))
    options = {**resume_child.settings(engine), **overrides}
    if "compile" in ENGINES[engine].driver:
        options["compile"] = False
    return digest(run(**options, progress=False, threads=1), stats=True)


def numerics() -> str:
    """The processor as the draws' bits see it: its vendor (``/proc/cpuinfo``'s ``vendor_id``, else
    the platform's processor string) and torch's CPU capability (``AVX512``, ``AVX2``, ...)."""
    vendor = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"


def every_stored() -> dict:
    """The stored hashes of every processor, by :func:`numerics`."""
    return json.loads(STORE.read_text()) if STORE.exists() else {}


def stored(key: str | None = None) -> dict:
    """The hashes stored for ``key`` (None: this machine's :func:`numerics`)."""
    return every_stored().get(numerics() if key is None else key, {})


@pytest.mark.parametrize("engine", sorted(ENGINES) + sorted(VARIANTS))
def test_draws_are_those_stored(engine):
    hashes = stored()
    if not hashes:
        pytest.skip(f"no hashes stored for this processor ({numerics()}): run this file with --write on it")
    assert engine in hashes, f"no stored hash for engine {engine!r}: run this file with --write {engine}"
    if hashes[engine].startswith("stale:"):
        pytest.skip(f"{engine}'s hash for this processor ({numerics()}) is {hashes[engine]}; rewrite it here with --write {engine}")
    torch.set_num_threads(1)
    assert draws_hash(engine) == hashes[engine], (
        f"engine {engine!r} draws other values than stored at a fixed seed; if that is intended, "
        f"rewrite its hash (--write {engine}) and say why in the commit")


if __name__ == "__main__":
    torch.set_num_threads(1)
    names = [a for a in sys.argv[1:] if a != "--write"] or sorted(ENGINES) + sorted(VARIANTS)
    before = stored()
    hashes = dict(before)
    for name in names:
        hashes[name] = draws_hash(name)
        print(numerics(), name, hashes[name])
    if "--write" in sys.argv:
        every = every_stored()
        every[numerics()] = dict(sorted(hashes.items()))
        changed = [n for n in names if n in before and before[n] != hashes[n]]  # changed on purpose here
        for key, others in every.items():
            for name in changed:
                if key != numerics() and name in others and not others[name].startswith("stale:"):
                    others[name] = f"stale: its draws were changed on purpose and rewritten on {numerics()}"
        STORE.write_text(json.dumps(dict(sorted(every.items())), indent=1) + "\n")
