r"""Optimise, then sample: the ensemble warm start of any MCMC engine.

``run(..., warm_start="ensemble", num_members=K, chains_per_member=M)`` first trains K
*members*, each a MAP point of the flat potential found by minibatch optimisation
(AdamW by default) with a validation split and early stopping, then starts M chains from
each member: C = K M chains, ordered member by member (chain ``c`` belongs to member
``c // M``). This is the recipe of Sommer et al. (ICML 2024, "Connecting the dots: is
mode-connectedness the key to feasible sample-based inference in Bayesian neural
networks?") and of MILE (ICLR 2025, "Microcanonical Langevin ensembles"): a deep
ensemble finds the modes, the sampler explores each.

The loss of a member is the negative log posterior per training point,
:math:`U(\theta)/N`, estimated on minibatches of the training rows
(:math:`\hat U = -\log p(\theta) - \tfrac{N}{B}\sum_{i \in \text{batch}} \log p(y_i\mid\theta)`;
the prior is the regulariser, so AdamW's own weight decay is 0 unless asked for). With
``val_fraction > 0`` a random share of the rows is held out: the validation loss is
:math:`\hat U/N` on them after every epoch, the member keeps the point of its best epoch and
stops ``patience`` epochs after it. A model without minibatches (a Pyro model without a
subsample plate) is fitted on the full data, without validation.

The first chain of a member starts at the member's point; its chains 2..M at that point plus
``jitter`` times a standard normal draw (in the unconstrained space; default 1e-3), so that
they are not identical copies.

Everything here is a pure function of the potential, the options and a seed: the same seed
gives the same members, whatever the order they are fitted in.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import numpy as np
import torch

from .. import validation
from ..results import MemberFit
from .options import Options, choice, integer, interval, option, optional, positive
from .potential import FlatPotential, initial_theta

__all__ = ["WARM_STARTS", "START_KEYS", "EnsembleOptions", "StartPlan", "check_start", "fit_member", "fit_members",
           "initial_points", "member_seeds", "members_cost"]

#: how chains start: from the prior's initial points (uniform in (-r, r)), or from an ensemble of MAP fits
WARM_STARTS = ("prior", "ensemble")
#: run-level keywords of the warm start and the budget (never an engine's option)
START_KEYS = ("warm_start", "num_members", "chains_per_member", "ensemble", "budget", "warmup_budget")
#: the share of a budget (after the members) that warm-up may spend, where warmup_budget is not given
WARMUP_BUDGET = 0.5
#: members when neither num_members nor num_chains says how many
DEFAULT_MEMBERS = 4


@dataclass(frozen=True)
class EnsembleOptions(Options):
    """How the members of an ensemble warm start are trained (``run(..., ensemble={...})``)."""

    optimizer: str = option("adamw", "the members' optimizer: 'adamw', 'adam' or 'sgd' (with momentum)",
                            choice("adamw", "adam", "sgd"))
    lr: float = option(1e-2, "learning rate of the members' optimizer", positive)
    weight_decay: float = option(0.0, "AdamW's decoupled weight decay (0: the prior is the only regulariser)",
                                 interval(0.0))
    momentum: float = option(0.9, "SGD momentum (optimizer='sgd' only)", interval(0.0, 1.0))
    num_epochs: int = option(200, "the most passes over the training rows per member", integer(1))
    batch_size: int | None = option(64, "minibatch rows (None: the full data; at most the training rows)",
                                    optional(integer(1)))
    val_fraction: float = option(0.1, "share of the rows held out for the validation loss and early stopping "
                                 "(0: none, every epoch runs and the last point is kept)",
                                 interval(0.0, 1.0, high_open=True))
    patience: int | None = option(20, "epochs without a better validation loss before a member stops "
                                  "(None: run every epoch, keep the best)", optional(integer(1)))
    init_radius: float = option(1.0, "a member starts uniform in (-r, r) in unconstrained space", positive)
    jitter: float = option(1e-3, "sd of the Gaussian noise added to a member's point for its chains 2..M",
                           interval(0.0))


@dataclass(frozen=True)
class StartPlan:
    """The checked warm start of a run (:func:`check_start`)."""

    warm_start: str = "prior"
    num_members: int = 0
    chains_per_member: int = 1
    options: EnsembleOptions | None = None
    budget: int | None = None
    num_chains: int = 2
    warmup_budget: float = WARMUP_BUDGET

    @property
    def ensemble(self) -> bool:
        return self.warm_start == "ensemble"

    def record(self) -> dict:
        """The plan as run options (for ``Run.options`` and fingerprints)."""
        out: dict = {"warm_start": self.warm_start}
        if self.ensemble:
            out.update(num_members=self.num_members, chains_per_member=self.chains_per_member,
                       ensemble={f.name: getattr(self.options, f.name) for f in fields(EnsembleOptions)})
        if self.budget is not None:
            out.update(budget=self.budget, warmup_budget=self.warmup_budget)
        return out


def check_start(engine, num_chains: int | None, warm_start: str = "prior", num_members: int | None = None,
                chains_per_member: int | None = None, ensemble: dict | None = None,
                budget: int | None = None, warmup_budget: float | None = None) -> StartPlan:
    """Check the warm-start keywords of a run, before anything runs: a :class:`StartPlan`, or a
    ``ValueError`` naming the field and the value.

    The chain count: under ``warm_start="ensemble"`` C = ``num_members * chains_per_member``.
    ``num_chains=None`` takes that C; a given ``num_chains`` must equal it. Where ``num_members``
    is left out it is ``num_chains // chains_per_member`` (``num_chains`` must be a multiple),
    or 4 without ``num_chains``; ``chains_per_member`` defaults to 1. Under ``"prior"``,
    ``num_chains=None`` is 2 and the ensemble keywords are refused. ``warmup_budget`` (only with
    ``budget``): the share of the budget left after the members that warm-up may spend, in (0, 1]
    (:data:`WARMUP_BUDGET` when not given; :mod:`bnnzoo.inference.budget`).
    """
    validation.one_of("warm_start", warm_start, WARM_STARTS)
    if budget is not None:
        validation.integer("budget", budget, 1)
    if warmup_budget is not None:
        if budget is None:
            raise ValueError(f"warmup_budget={warmup_budget!r}: only with budget=")
        validation.in_interval("warmup_budget", warmup_budget, 0.0, 1.0, low_open=True, high_open=False)
    share = WARMUP_BUDGET if warmup_budget is None else float(warmup_budget)
    if warm_start == "prior":
        given = [k for k, v in (("num_members", num_members), ("chains_per_member", chains_per_member),
                                ("ensemble", ensemble)) if v is not None]
        if given:
            raise ValueError(f"{given[0]}: only with warm_start='ensemble' (warm_start={warm_start!r})")
        return StartPlan("prior", budget=budget, num_chains=2 if num_chains is None else num_chains,
                         warmup_budget=share)
    if getattr(engine, "kind", "mcmc") != "mcmc":
        raise ValueError(f"warm_start='ensemble': engine {engine.name!r} is not an MCMC engine (its fits start "
                         f"from their own guides); use warm_start='prior'")
    if chains_per_member is None:
        chains_per_member = 1
    validation.integer("chains_per_member", chains_per_member, 1)
    if num_members is not None:
        validation.integer("num_members", num_members, 1)
    if num_chains is not None:
        validation.integer("num_chains", num_chains, 1)
    if num_members is None:
        if num_chains is None:
            num_members = DEFAULT_MEMBERS
        elif num_chains % chains_per_member:
            raise ValueError(f"num_chains={num_chains} is not a multiple of chains_per_member={chains_per_member}; "
                             f"give num_members, or leave num_chains out")
        else:
            num_members = num_chains // chains_per_member
    chains = num_members * chains_per_member
    if num_chains is not None and num_chains != chains:
        raise ValueError(f"num_chains={num_chains} contradicts num_members={num_members} x chains_per_member="
                         f"{chains_per_member} = {chains}; leave num_chains out or set it to {chains}")
    if ensemble is not None and not isinstance(ensemble, dict):
        raise ValueError(f"ensemble: expected a table of member options, got {ensemble!r}")
    try:
        options = EnsembleOptions.build("ensemble", dict(ensemble or {}))
    except ValueError as err:
        raise ValueError(str(err) if str(err).startswith("ensemble") else f"ensemble.{err}") from None
    return StartPlan("ensemble", num_members, chains_per_member, options, budget, chains, share)


# ------------------------------------------------------------------- fitting
def member_seeds(seed: int, num_members: int) -> list[int]:
    """One 32-bit seed per member from the run's seed (NumPy's ``SeedSequence``: independent streams)."""
    children = np.random.SeedSequence(int(seed)).spawn(num_members)
    return [int(c.generate_state(1)[0]) for c in children]


def _minibatches(potential: FlatPotential) -> int | None:
    """N when ``potential`` gives minibatch gradients, else None (full-batch fits)."""
    n = getattr(potential, "num_data", None)
    if n is None or not hasattr(potential, "minibatch_value_and_grad"):
        return None
    check = getattr(potential, "check_minibatch", None)
    if check is not None:
        try:
            check(1)
        except ValueError:
            return None
    return int(n)


def _split(n: int | None, options: EnsembleOptions) -> tuple[int, int, int]:
    """``(training rows, validation rows, batch size)`` of a member's fit."""
    if n is None:
        return 1, 0, 1
    n_val = int(math.floor(options.val_fraction * n)) if options.val_fraction > 0 else 0
    if n_val >= n:
        n_val = n - 1
    n_fit = n - n_val
    batch = n_fit if options.batch_size is None else min(options.batch_size, n_fit)
    return n_fit, n_val, batch


def members_cost(potential: FlatPotential, num_members: int, options: EnsembleOptions) -> int:
    """The most gradient evaluations the members can take: ``K x num_epochs x batches per epoch``
    (early stopping may take fewer)."""
    n_fit, _, batch = _split(_minibatches(potential), options)
    return num_members * options.num_epochs * math.ceil(n_fit / batch)


def _value(potential: FlatPotential, theta: torch.Tensor, rows: torch.Tensor) -> float:
    """The minibatch estimate of U on ``rows`` (no gradient where the potential can avoid one)."""
    with torch.no_grad():
        if hasattr(potential, "log_prior_and_likelihood"):  # the BNN potential takes rows directly
            return float(potential(theta, rows)[0])
        return float(potential.minibatch_value_and_grad(theta, rows)[0][0])


def fit_member(potential: FlatPotential, options: EnsembleOptions, seed: int) -> MemberFit:
    r"""One member: minimise :math:`U(\theta)/N` from a uniform start (see the module docstring)."""
    where = potential.placement
    device = where["device"] if where["device"] is not None else torch.device("cpu")
    gen = torch.Generator(device=device).manual_seed(int(seed))
    n = _minibatches(potential)
    n_fit, n_val, batch = _split(n, options)
    theta = initial_theta(potential, 1, options.init_radius, generator=gen)
    param = theta.clone().requires_grad_(True)
    if options.optimizer == "sgd":
        opt = torch.optim.SGD([param], lr=options.lr, momentum=options.momentum)
    elif options.optimizer == "adam":
        opt = torch.optim.Adam([param], lr=options.lr)
    else:
        opt = torch.optim.AdamW([param], lr=options.lr, weight_decay=options.weight_decay)
    scale = float(n) if n is not None else 1.0
    rows = torch.randperm(n, generator=gen, device=device) if n is not None else None
    fit_rows, val_rows = (rows[:n_fit], rows[n_fit:]) if rows is not None else (None, None)
    losses, val_losses = [], []
    best, best_theta, best_epoch, grads, epoch = math.inf, param.detach().clone(), 0, 0, 0
    start = time.perf_counter()
    for epoch in range(1, options.num_epochs + 1):
        order = fit_rows[torch.randperm(n_fit, generator=gen, device=device)] if fit_rows is not None else None
        for part in (order.split(batch) if order is not None else (None,)):
            if part is None:
                value, grad = potential.value_and_grad(param.detach())
            else:
                value, grad = potential.minibatch_value_and_grad(param.detach(), part)
            grads += 1
            if not (torch.isfinite(value).all() and torch.isfinite(grad).all()):
                raise FloatingPointError(f"ensemble.lr={options.lr}: a member's loss is not finite at epoch {epoch} "
                                         f"({options.optimizer}); lower ensemble.lr")
            param.grad = grad / scale
            opt.step()
            losses.append(float(value[0]) / scale)
        if n_val:
            val = _value(potential, param.detach(), val_rows) / scale
            val_losses.append(val)
            if val < best:
                best, best_theta, best_epoch = val, param.detach().clone(), epoch
            elif options.patience is not None and epoch - best_epoch >= options.patience:
                break
    wall = time.perf_counter() - start
    if not n_val:
        best_theta, best_epoch = param.detach().clone(), epoch
    values = {k: v[0].detach().cpu().numpy() for k, v in potential.constrain(best_theta).items()}
    return MemberFit(theta=best_theta[0].cpu().numpy(), values=values, losses=np.asarray(losses),
                     val_losses=np.asarray(val_losses), val_metric=best if n_val else math.nan,
                     best_epoch=best_epoch, epochs=epoch, wall_time=wall, grad_evals=grads, seed=int(seed))


def fit_members(potential: FlatPotential, num_members: int, options: EnsembleOptions, seed: int,
                done: Sequence[MemberFit | None] = (), on_member: Callable[[int, MemberFit], None] | None = None,
                executor=None) -> list[MemberFit]:
    """K members (:func:`fit_member`), member ``k`` with the ``k``-th of :func:`member_seeds`.

    ``done``: members already fitted (a resumed run; None where missing), kept as they are;
    ``on_member(k, fit)`` after each new member (a checkpoint saves it there). ``executor``: where the
    missing members are fitted, any object with the study executors' ``map(fn, shared, jobs, started)``
    (``bnnzoo.experiments.InProcess``, ``RayExecutor``: one member per worker); None: one after
    another here. The members do not depend on where they ran."""
    seeds = member_seeds(seed, num_members)
    done = list(done) + [None] * (num_members - len(done))
    todo = [(k, (options, seeds[k])) for k in range(num_members) if done[k] is None]
    if executor is None:
        finished = ((k, fit_member(potential, *args)) for k, args in todo)
    else:
        finished = executor.map(fit_member, (potential,), todo, lambda k: None)
    for k, fit in finished:
        done[k] = fit
        if on_member is not None:
            on_member(k, fit)
    return done


def initial_points(potential: FlatPotential, members: Sequence[MemberFit], chains_per_member: int, jitter: float,
                   seed: int) -> torch.Tensor:
    """The ``[K M, D]`` initial points: member ``c // M`` for chain ``c``; chains 2..M of a member
    with Gaussian noise of sd ``jitter`` added (seeded by ``seed``)."""
    where = potential.placement
    theta = torch.stack([torch.as_tensor(m.theta, **where) for m in members])
    theta = theta.repeat_interleave(chains_per_member, dim=0)
    if chains_per_member > 1 and jitter > 0:
        gen = torch.Generator().manual_seed(int(seed) + 1)  # drawn on the host: the same starts on every device
        noise = torch.randn(theta.shape, generator=gen, dtype=theta.dtype, device="cpu").to(theta.device) * jitter
        first = torch.arange(theta.shape[0], device=theta.device) % chains_per_member == 0
        theta = torch.where(first[:, None], theta, theta + noise)
    return theta
