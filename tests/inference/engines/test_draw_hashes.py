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


def draws_hash(engine: str) -> str:
    """sha256 of the engine's draws (sites in order, float64 bytes) and per-draw statistics on the
    resume tests' small network, seed 3, one torch thread, no compiling."""
    options = resume_child.settings(engine)
    if "compile" in ENGINES[engine].driver:
        options["compile"] = False
    return digest(run(**options, progress=False, threads=1), stats=True)


def stored() -> dict:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_draws_are_those_stored(engine):
    hashes = stored()
    assert engine in hashes, f"no stored hash for engine {engine!r}: run this file with --write {engine}"
    torch.set_num_threads(1)
    assert draws_hash(engine) == hashes[engine], (
        f"engine {engine!r} draws other values than stored at a fixed seed; if that is intended, "
        f"rewrite its hash (--write {engine}) and say why in the commit")


if __name__ == "__main__":
    torch.set_num_threads(1)
    names = [a for a in sys.argv[1:] if a != "--write"] or sorted(ENGINES)
    hashes = stored()
    for name in names:
        hashes[name] = draws_hash(name)
        print(name, hashes[name])
    if "--write" in sys.argv:
        STORE.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")
