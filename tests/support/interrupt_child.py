"""The runs the interrupt-and-resume tests stop and continue, one per way of running.

``python tests/support/interrupt_child.py WAY OUT [--resume]`` runs

* ``compare``: :func:`~bnnzoo.experiments.compare` of :data:`ENGINES` with ``checkpoint=OUT``;
* ``run``: :func:`~bnnzoo.inference.run` of the last engine with ``checkpoint=OUT``;

saving after every iteration. On Ctrl-C it prints the interrupt's message and the command
that continues (this one with ``--resume``), and exits with status 130. ``bnnzoo run`` (the third
way) reads :data:`RUN_FILE`, the same settings. The test process runs the same runs uninterrupted.
"""

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

COMMON = {"num_chains": 2, "seed": 3}
#: two engines, as the issue's run: a short first one, then the one that is stopped
ENGINES = [{"kind": "rwmh", "num_samples": 5, "warmup_steps": 5},
           {"kind": "chees", "num_samples": 30, "warmup_steps": 30, "compile": False}]
#: (warm-up, draws) of the engine that is stopped
WARMUP, SAMPLES = 30, 30
DATA = {"name": "cosine", "n_train": 20, "n_test": 10}
RUN_FILE = """\
[model]
input_dim = 1
layers = [{units = 3, activation = "tanh"}, {units = 1}]
likelihood = {kind = "gaussian", noise = 0.1}
[data]
name = "cosine"
n_train = 20
n_test = 10
[run]
num_chains = 2
seed = 3
[[engines]]
kind = "rwmh"
num_samples = 5
warmup_steps = 5
[[engines]]
kind = "chees"
num_samples = 30
warmup_steps = 30
compile = false
"""


def spec() -> dict:
    return {"input_dim": 1, "layers": [{"units": 3, "activation": "tanh"}, {"units": 1}],
            "likelihood": {"kind": "gaussian", "noise": 0.1}}


def run_settings() -> dict:
    """``run()``'s arguments for the stopped engine (what ``compare`` gives it too)."""
    options = {k: v for k, v in ENGINES[-1].items() if k != "kind"}
    return {"model_or_spec": spec(), "data": DATA, "engine": ENGINES[-1]["kind"], **COMMON, **options}


if __name__ == "__main__":
    from bnnzoo.experiments import compare
    from bnnzoo.inference import run

    way, out, resume = sys.argv[1], Path(sys.argv[2]), "--resume" in sys.argv
    try:
        if way == "compare":
            compare(spec(), DATA, engines=ENGINES, checkpoint=out, resume=resume, checkpoint_every=1,
                    progress=False, threads=1, **COMMON)
        else:
            run(**run_settings(), checkpoint=out, resume=resume, checkpoint_every=1, progress=False, threads=1)
    except KeyboardInterrupt as stop:
        print(f"{stop}\ncontinue with: {sys.executable} {' '.join(sys.argv[:3])} --resume", file=sys.stderr)
        sys.exit(130)
