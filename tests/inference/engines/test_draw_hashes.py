"""Every engine's draws at a fixed seed, eagerly, against hashes stored in
``draw_hashes.json``: a restructure that keeps behaviour keeps them bit for bit.

An engine whose draws change on purpose gets its hash rewritten, and the commit says why:
``python tests/inference/engines/test_draw_hashes.py --write`` (all engines) or
``... --write ENGINE ...``.
"""

import json
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


def stored() -> dict:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


@pytest.mark.parametrize("engine", sorted(ENGINES) + sorted(VARIANTS))
def test_draws_are_those_stored(engine):
    hashes = stored()
    assert engine in hashes, f"no stored hash for engine {engine!r}: run this file with --write {engine}"
    torch.set_num_threads(1)
    assert draws_hash(engine) == hashes[engine], (
        f"engine {engine!r} draws other values than stored at a fixed seed; if that is intended, "
        f"rewrite its hash (--write {engine}) and say why in the commit")


if __name__ == "__main__":
    torch.set_num_threads(1)
    names = [a for a in sys.argv[1:] if a != "--write"] or sorted(ENGINES) + sorted(VARIANTS)
    hashes = stored()
    for name in names:
        hashes[name] = draws_hash(name)
        print(name, hashes[name])
    if "--write" in sys.argv:
        STORE.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")
