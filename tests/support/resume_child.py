"""The runs the kill-and-resume tests stop and continue: every engine on one small network
with a checkpoint after every iteration.

``python tests/support/resume_child.py OUT ENGINE... [--resume]`` runs each engine with
``run(..., checkpoint=OUT/ENGINE)`` (the finished result lands in ``OUT/ENGINE/result.pt``);
the test process runs the same runs uninterrupted.
"""

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bnnzoo.models import GroupSpikeAndSlab, Laplace, SpikeAndSlab  # noqa: E402
from bnnzoo.models.likelihoods import GaussianLikelihood  # noqa: E402
from bnnzoo.models.spec import BNNSpec, Dense  # noqa: E402

WARMUP, SAMPLES = 8, 8
#: engine -> (options, Pyro chains it runs one after another: its iterations are chains x (warm-up + draws))
ENGINES = {
    "nuts": ({"max_tree_depth": 3}, 2),
    "hmc": ({"num_steps": 3}, 2),
    "rwmh": ({}, 1),
    "chees": ({}, 1),
    "batched_nuts": ({"max_tree_depth": 3}, 1),
    "fixed_hmc": ({}, 1),
    "proximal_hmc": ({}, 1),
    "mclmc": ({}, 1),
    "mams": ({"max_steps": 8}, 1),
    "sgld": ({"step_size": 1e-4}, 1),
    "sghmc": ({}, 1),
    "sgld_sa": ({"step_size": 1e-4}, 1),
    "sghmc_sa": ({}, 1),
    "sghmc_group_ss": ({"cycle_length": 50}, 1),  # the former default at 20 rows: draws 50 iterations apart
    "svi": ({"num_steps": 24}, 2),
}


def iterations(engine: str) -> tuple[int, int]:
    """(chains run one after another, iterations of each): VI counts optimisation steps."""
    options, chains = ENGINES[engine]
    return chains, options.get("num_steps", WARMUP + SAMPLES)


def settings(engine: str) -> dict:
    """``run()``'s arguments for ``engine``."""
    return {"model_or_spec": spec(), "data": {"name": "cosine", "n_train": 20, "n_test": 10}, "engine": engine,
            "num_samples": SAMPLES, "warmup_steps": WARMUP, "num_chains": 2, "seed": 3, **ENGINES[engine][0]}


def spec() -> BNNSpec:
    return BNNSpec(input_dim=1, layers=[Dense(4, "tanh"), Dense(1)], prior=Laplace(1.0),
                   likelihood=GaussianLikelihood(noise=0.1),
                   priors={"layers.0.weight": GroupSpikeAndSlab(), "layers.1.weight": SpikeAndSlab()})


if __name__ == "__main__":
    from bnnzoo.inference import run

    out, engines = Path(sys.argv[1]), [a for a in sys.argv[2:] if not a.startswith("--")]
    for engine in engines:
        run(**settings(engine), checkpoint=out / engine, resume="--resume" in sys.argv, checkpoint_every=1)
