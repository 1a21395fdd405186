"""Same seed, same draws, by default: every engine's default configuration gives the same draws in
fresh processes that share one cache folder (``compile="auto"`` decides from the run's inputs, not
from measured time or from what earlier runs recorded)."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "draw_hashes.py"


def test_every_engine_draws_the_same_in_three_fresh_processes(tmp_path):
    env = {**os.environ, "BNNZOO_CACHE": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    children = [subprocess.Popen([sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [child.communicate() for child in children]
    # a third after the first two have finished, with whatever they left in the cache folder
    third = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True)
    outputs.append((third.stdout, third.stderr))
    hashes = []
    for stdout, stderr in outputs:
        assert stdout.strip(), stderr[-2000:]
        hashes.append(json.loads(stdout.strip().splitlines()[-1]))
    from bnnzoo.inference import ENGINES

    assert set(hashes[0]) == set(ENGINES)
    for engine in ENGINES:
        assert hashes[0][engine] == hashes[1][engine] == hashes[2][engine], engine
