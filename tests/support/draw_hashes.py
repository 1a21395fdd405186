"""Run every engine's default configuration on a tiny model and print one hash of its draws per
engine (JSON): ``tests/inference/test_reproducible.py`` runs this in fresh processes."""

import dataclasses
import hashlib
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from bnnzoo.data import load  # noqa: E402
from bnnzoo.inference import ENGINES, run  # noqa: E402
from bnnzoo.models import GroupSpikeAndSlab, SpikeAndSlab, zoo  # noqa: E402


def digest(result, stats: bool = False) -> str:
    """sha256 of a Run's draws (each site by name, in order, as float64 bytes) and, with ``stats``,
    of its per-draw statistics."""
    h = hashlib.sha256()
    groups = [result.samples] + ([result.sample_stats] if stats else [])
    for group in groups:
        for name in sorted(group):
            h.update(name.encode())
            h.update(np.ascontiguousarray(np.asarray(group[name], dtype=np.float64)).tobytes())
    return h.hexdigest()


def main() -> None:
    warnings.simplefilter("ignore")
    data = load("cosine", n_train=20, n_test=10)
    spec = zoo.cosine_mlp(hidden=3)
    specs = {"sghmc_group_ss": dataclasses.replace(spec, priors={"layers.0.weight": GroupSpikeAndSlab()}),
             "sgld_sa": dataclasses.replace(spec, priors={"layers.0.weight": SpikeAndSlab()})}
    specs["sghmc_sa"] = specs["sgld_sa"]
    out = {}
    for engine in sorted(ENGINES):
        counts = {"num_steps": 300, "anneal_steps": 100} if engine == "svi" else {}  # VI's steps, its count
        result = run(specs.get(engine, spec), data, **counts, engine=engine, num_samples=6, warmup_steps=6, num_chains=2, seed=3,
                     progress=False)
        out[engine] = digest(result)
        if "-v" in sys.argv:
            print(engine, result.wall_time, file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
