"""The isokinetic kinetic-energy change in float32: the form bnnzoo computes against the form it
computed before 2026-11-28 (the paper's, as written), and what the difference does to ``mams``.

:func:`bnnzoo.inference.isokinetic.velocity_update_at_rate` returns, per velocity substep,
:math:`\\Delta K = (d - 1)(\\delta - \\log 2 + \\log(1 + u \\cdot e + (1 - u \\cdot e)\\zeta^2))`.
Written so (``former`` below), float32 rounds a number near :math:`\\log 2` and multiplies the
rounding by :math:`d - 1`; bnnzoo now computes the same quantity as
:math:`(d - 1)(\\delta + \\operatorname{log1p}(\\frac{1 - u \\cdot e}{2}\\operatorname{expm1}(-2\\delta)))`,
whose rounding is relative to :math:`\\delta`.

Two parts:

* ``substeps`` (any machine, seconds): each form's error in float32 against float64, per substep,
  at the digits network's dimension (26 122), over force norms and step sizes;
* ``--runs`` (meant for a GPU; minutes there): ``mams`` on ``digits_mlp`` with 4 members x 2 chains,
  600 000 gradients, seed 1 (``bench_posteriors.py``'s settings for that row), once with each form
  (``--forms``), scored as ``bench_posteriors`` scores a row, with each chain's acceptance rate,
  median absolute energy error, tuned step size and L, and its log density at the first and last draw.

Usage: ``python benchmarks/bench_kinetic_precision.py [--runs] [--forms stable former] [--device cuda]
[--budget 600000] [--seed 1] [--name kinetic_precision] [--retable]``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import PROBLEMS, RESULTS, add_device_argument, machine, markdown_table, notes_text, write_results  # noqa: E402

from bnnzoo.inference import isokinetic  # noqa: E402

DIGITS_DIM = 26_122
STABLE = isokinetic.velocity_update_at_rate


def former(u, force, rate):
    """The velocity update with the kinetic change as bnnzoo computed it before 2026-11-28 (the velocity
    is the same in both forms)."""
    new, _ = STABLE(u, force, rate)
    norm = torch.linalg.vector_norm(force, dim=-1, keepdim=True).clamp_min(torch.finfo(force.dtype).tiny)
    ue, delta = (u * force).sum(-1, keepdim=True) / norm, norm * rate
    zeta = torch.exp(-delta)
    kinetic = (delta - math.log(2.0) + torch.log(1 + ue + (1 - ue) * zeta * zeta)) * (u.shape[-1] - 1)
    return new, kinetic.squeeze(-1)


FORMS = {"stable": STABLE, "former": former}


def substep_rows(dim: int = DIGITS_DIM, chains: int = 64, seed: int = 0) -> list[dict]:
    """Each form's largest float32 error over ``chains`` random (velocity, force) pairs, against the
    stable form in float64, per force norm and step size."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for norm in (10.0, 100.0, 1000.0, 10000.0):
        for step in (0.01, 0.1, 1.0):
            u = torch.randn(chains, dim, generator=generator, dtype=torch.float64)
            u = u / u.norm(dim=-1, keepdim=True)
            force = torch.randn(chains, dim, generator=generator, dtype=torch.float64)
            force = force / force.norm(dim=-1, keepdim=True) * norm + 0.3 * norm * u
            rate = step / (dim - 1)
            _, exact = STABLE(u, force, rate)
            row = {"force_norm": norm, "step_size": step, "kinetic_f64_median": float(exact.median())}
            for name, form in FORMS.items():
                _, k32 = form(u.float(), force.float(), rate)
                row[f"error_{name}"] = float((k32.double() - exact).abs().max())
            rows.append(row)
    return rows


def mams_row(form: str, args) -> dict:
    """``mams`` on digits as ``bench_posteriors`` runs it, with the kinetic change in ``form``."""
    import bench_posteriors as bp

    from bnnzoo.data.datasets import load
    from bnnzoo.inference import run

    isokinetic.velocity_update_at_rate = FORMS[form]
    try:
        chains = args.members * args.chains
        result = run(PROBLEMS["digits"], load("digits", seed=0), engine="mams", warm_start="ensemble",
                     num_members=args.members, chains_per_member=args.chains, num_samples=args.budget // chains + 1,
                     warmup_steps=300, seed=args.seed, progress=False, threads=1, budget=args.budget,
                     device=args.device)
    finally:
        isokinetic.velocity_update_at_rate = STABLE
    row = bp.score_row(result, None, "digits", f"bnnzoo mams ({form})", args.seed, result.wall_time,
                       result.grad_evals, args.chains)
    stats = {k: np.asarray(v) for k, v in result.sample_stats.items()}
    lp = stats["lp"]
    step_size, L = (stats[k].reshape(result.num_chains, -1)[:, 0] for k in ("step_size", "L"))
    row.update(
        acceptance_by_chain=stats["acceptance_rate"].mean(axis=1).round(4).tolist(),
        abs_energy_error_by_chain=np.median(np.abs(stats["energy_error"]), axis=1).round(4).tolist(),
        step_size=float(np.median(step_size)), L=float(np.median(L)),
        n_steps=float(np.median(stats["n_steps"])), lp_first=lp[:, 0].round(1).tolist(),
        lp_last=lp[:, -1].round(1).tolist())
    row["abs_energy_error_median"] = float(np.median(row["abs_energy_error_by_chain"]))  # the chains' medians' median
    return row


def report(payload: dict) -> str:
    """The markdown of a results file: the substeps' table, the runs' (where there are runs), the notes."""
    table = "Per substep, float32 against float64 (d = 26 122, 64 chains; largest absolute error):\n\n"
    table += markdown_table(payload["substeps"], ["force_norm", "step_size", "kinetic_f64_median", "error_former",
                                                  "error_stable"])
    if payload["runs"]:
        first = payload["runs"][0]
        table += (f"\n\n`mams` on digits_mlp, {first['chains']} chains (members x chains per member), "
                  f"float32, seed {first['seed']}, on {payload['machine']['device']}:\n\n")
        table += markdown_table(payload["runs"], ["method", "lppd", "accuracy", "rhat_f_within", "abs_energy_error_median",
                                                  "step_size", "L", "n_steps", "draws", "grad_total", "wall_s"])
    return table + notes_text(payload)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", action="store_true", help="also run mams on digits with each form")
    parser.add_argument("--forms", nargs="+", choices=sorted(FORMS), default=["stable", "former"])
    parser.add_argument("--budget", type=int, default=600_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--chains", type=int, default=2, help="chains per member")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="kinetic_precision")
    add_device_argument(parser)
    parser.add_argument("--retable", action="store_true", help="rewrite the markdown from the JSON, run nothing")
    args = parser.parse_args(argv)
    if args.retable:
        payload = json.loads((args.out / f"{args.name}.json").read_text())
        write_results(args.name, payload, report(payload), out=args.out)
        return payload
    payload = {"name": args.name, "machine": machine(args.device), "substeps": substep_rows(), "runs": []}
    if args.runs:
        for form in args.forms:
            payload["runs"].append(mams_row(form, args))
            print(form, payload["runs"][-1], flush=True)
    write_results(args.name, payload, report(payload), out=args.out)
    return payload


if __name__ == "__main__":
    main()
