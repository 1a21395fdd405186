r"""The No-U-Turn sampler for C chains as one batch: the chains' trees are built in lockstep.

Pyro's :class:`~pyro.infer.mcmc.NUTS` builds one chain's tree in Python, site by site, and
pays about a millisecond of bookkeeping per leapfrog step whatever the network costs.
:class:`BatchedNUTS` runs the same algorithm (multinomial sampling, the generalized
no-U-turn criterion with the checks across sub-trees; Betancourt 2017, as in Stan) on the
``[C, D]`` layout of the other bnnzoo kernels: every doubling extends all C trees by
:math:`2^j` leapfrog steps as one batched gradient, each chain in its own random direction.
A chain whose tree has stopped (a U-turn, a divergence) is masked and its draw is kept;
the batch stops when every chain has stopped, so one transition costs the longest tree's
gradients. A sub-tree's steps are run one after another and its tree is then formed level by
level (:meth:`NUTSSampler._block`); a sub-tree too large to keep is built recursively, skipping
a second half that no chain needs (:meth:`NUTSSampler._build`).

Warm-up: a step-size search, dual averaging of the NUTS acceptance statistic (the mean over
the tree's states of :math:`\min(1, e^{H_0 - H})`) toward ``target_accept`` (0.8 on a smooth
network, 0.715 on a ReLU-family one, as Pyro's NUTS), and a diagonal mass matrix over Stan's
windows; by default pooled over the chains as ChEES does (one step size on the chains' mean
statistic, the chains' pooled variance), with ``pool_chains=False`` each chain on its own as
Stan, Pyro and NumPyro do. On the demo's network pooling converged where per-chain warm-up
did not (measurements in ``docs/algorithms.md``, "Batched NUTS").

Hoffman and Gelman (2014), "The No-U-Turn sampler", JMLR; Betancourt (2017), "A conceptual
introduction to Hamiltonian Monte Carlo", appendix A.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch

from ..adaptation import chain_statistic, find_step_size, mean_statistic
from ..integrators import kinetic_energy, leapfrog_step
from ..options import flag, integer, option, positive
from .hmc import MAX_ENERGY_ERROR, FixedStepHMC, HMCParams, HMCSampler, HMCState, WarmupOptions, gamma_option

__all__ = ["BatchedNUTS", "BatchedNUTSOptions", "NUTSInfo", "NUTSSampler", "search_chain_step_sizes"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class BatchedNUTSOptions(WarmupOptions):
    """Options of :class:`BatchedNUTS`."""

    step_size: float = option(0.1, "initial leapfrog step size (refined by a search before warm-up)", positive)
    max_tree_depth: int = option(10, "cap on tree doublings (at most 2^depth - 1 leapfrog steps per draw)",
                                 integer(1))
    dual_averaging_gamma: float = gamma_option(0.05, "Stan's")
    pool_chains: bool = option(True, "warm-up pooled over chains: one step size (on the chains' mean "
                               "acceptance) and one mass matrix (their pooled variance), as ChEES", flag)


class _Tree(NamedTuple):
    """C trees (or sub-trees) of the same depth, one per chain, as ``[C]``/``[C, D]`` tensors.

    ``theta``, ``p``, ``grad``: the last state in the direction of building (where a longer tree
    goes on); ``p_begin``/``p_end``: the momenta of the first and last state in that order;
    ``rho``: the sum of the momenta; ``log_weight``: :math:`\\log \\sum e^{H_0 - H}` over the
    states; ``proposal``: ``(theta, value, error)`` of the state sampled from the tree
    (``error`` its :math:`H - H_0`); ``valid``: no U-turn inside and no divergence;
    ``accept_sum``, ``steps``: the acceptance statistic's sum and the leapfrog steps;
    ``max_error``: the largest :math:`|H - H_0|`."""

    theta: Tensor
    p: Tensor
    grad: Tensor
    p_begin: Tensor
    p_end: Tensor
    rho: Tensor
    log_weight: Tensor
    proposal: tuple[Tensor, Tensor, Tensor]
    valid: Tensor
    diverging: Tensor
    accept_sum: Tensor
    steps: Tensor
    max_error: Tensor


class NUTSInfo(NamedTuple):
    """One transition's statistics (:class:`BatchedNUTS` has their definitions) and, not a statistic,
    the batched leapfrog steps computed (the longest tree's, and any unused)."""

    acceptance_rate: Tensor
    diverging: Tensor
    energy: Tensor
    energy_error: Tensor
    max_energy_error: Tensor
    step_size: Tensor
    n_steps: Tensor
    tree_depth: Tensor
    reached_max_tree_depth: Tensor
    leapfrog_steps: int | None = None

    internal = ("leapfrog_steps",)


#: the most elements of the ``[2**depth, C, D]`` states a sub-tree keeps for :meth:`NUTSSampler._block`
#: (two such tensors: 2 x 64 MB in float32); a larger sub-tree is built recursively
BLOCK_ELEMENTS = 2 ** 24


def _where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``a`` where ``mask [C]`` else ``b``, for ``[C]`` and ``[C, D]`` tensors."""
    return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b)


def _uniform_like(x: Tensor, generator: torch.Generator | None) -> Tensor:
    if generator is None:
        return torch.rand_like(x)
    return torch.rand(x.shape, dtype=x.dtype, device=x.device, generator=generator)


class NUTSSampler(HMCSampler):
    r"""The batched No-U-Turn transition (:class:`BatchedNUTS`'s docstring) on a flat potential, on the
    HMC sampler's state, momenta and trajectories: ``params.step_size`` is ``[C]`` (one per chain),
    ``params.inv_mass`` ``[C, D]``. The random numbers of a transition, in order: the momenta, then
    per doubling the directions, the sub-tree's sampling uniforms and the tree's."""

    def __init__(self, potential, runtime, max_tree_depth: int):
        super().__init__(potential, runtime)
        self.max_tree_depth = int(max_tree_depth)

    # ------------------------------------------------------------ the tree
    @staticmethod
    def _criterion(p_a: Tensor, p_b: Tensor, rho: Tensor, inv_mass: Tensor) -> Tensor:
        r"""No U-turn between two states with momenta ``p_a``, ``p_b`` and momentum sum ``rho``:
        :math:`M^{-1}p_a \cdot \rho > 0` and :math:`M^{-1}p_b \cdot \rho > 0`, per chain."""
        rho_sharp = rho * inv_mass
        return ((p_a * rho_sharp).sum(-1) > 0) & ((p_b * rho_sharp).sum(-1) > 0)

    def _leaf(self, walk, theta: Tensor, p: Tensor, grad: Tensor, step: Tensor, energy: Tensor) -> _Tree:
        """One leapfrog step of signed size ``step [C, 1]`` from each chain's edge."""
        walk.batched_steps += 1
        inv_mass = walk.inv_mass
        theta, p, value, grad = walk.step(theta, p, grad, step, inv_mass)
        error = value + kinetic_energy(p, inv_mass) - energy
        error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
        diverging = error > MAX_ENERGY_ERROR
        return _Tree(theta, p, grad, p, p, p, -error, (theta, value, error), ~diverging, diverging,
                     (-error).clamp(max=0.0).exp(), torch.ones_like(error), error.abs())

    def _subtree(self, walk, theta: Tensor, p: Tensor, grad: Tensor, step: Tensor, depth: int, energy: Tensor,
                 alive: Tensor) -> _Tree:
        """A sub-tree of ``2**depth`` steps: :meth:`_block` when its states fit in
        :data:`BLOCK_ELEMENTS`, else :meth:`_build`."""
        if (2 ** depth) * theta.numel() <= BLOCK_ELEMENTS:
            return self._block(walk, theta, p, grad, step, depth, energy)
        return self._build(walk, theta, p, grad, step, depth, energy, alive)

    def _block(self, walk, theta: Tensor, p: Tensor, grad: Tensor, step: Tensor, depth: int,
               energy: Tensor) -> _Tree:
        """The same sub-tree as :meth:`_build`, computed in two passes: the ``2**depth`` leapfrog
        steps one after another (kept as ``[L, C, D]``), then the tree over them level by level,
        all nodes of a level at once (a few tensor operations per level instead of per node).
        Which leaves the recursive build would have computed (a second half is built only after a
        valid first half) is found top-down, so the statistics are the same."""
        n = 2 ** depth
        walk.batched_steps += n
        inv_mass = walk.inv_mass
        criterion = partial(self._criterion, inv_mass=inv_mass)
        thetas, ps, values = [], [], []
        for _ in range(n):
            theta, p, value, grad = walk.step(theta, p, grad, step, inv_mass)
            thetas.append(theta), ps.append(p), values.append(value)
        leaf_theta, leaf_p, value = torch.stack(thetas), torch.stack(ps), torch.stack(values)
        error = value + kinetic_energy(leaf_p, inv_mass) - energy
        error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
        leaf_diverging = error > MAX_ENERGY_ERROR
        # bottom-up: nodes of one level as [nodes, C] / [nodes, C, D]
        valid, log_weight = ~leaf_diverging, -error
        pick = torch.arange(n, device=theta.device).unsqueeze(-1).expand_as(error)
        rho, p_begin, p_end = leaf_p, leaf_p, leaf_p
        first_valid = []
        for _ in range(depth):
            v1, v2 = valid[0::2], valid[1::2]
            w1, w2 = log_weight[0::2], log_weight[1::2]
            r1, r2 = rho[0::2], rho[1::2]
            b1, b2, e1, e2 = p_begin[0::2], p_begin[1::2], p_end[0::2], p_end[1::2]
            log_weight = torch.logaddexp(w1, w2)
            take = _uniform_like(log_weight, walk.generator).log() < w2 - log_weight
            pick = torch.where(take, pick[1::2], pick[0::2])
            rho = r1 + r2
            valid = (v1 & v2 & criterion(b1, e2, rho) & criterion(b1, b2, r1 + b2) & criterion(e1, e2, r2 + e1))
            p_begin, p_end = b1, e2
            first_valid.append(v1)
        # top-down: a node's second half is built only where its first half is valid
        built = torch.ones_like(valid)
        for v1 in reversed(first_valid):
            built = torch.stack((built, built & v1), 1).flatten(0, 1)
        zero = torch.zeros_like(error)
        index = pick[0].view(1, -1, 1).expand(1, *leaf_theta.shape[1:])
        proposal = (leaf_theta.gather(0, index)[0], value.gather(0, pick[:1])[0], error.gather(0, pick[:1])[0])
        return _Tree(theta, p, grad, p_begin[0], p_end[0], rho[0], log_weight[0], proposal, valid[0],
                     (leaf_diverging & built).any(0), torch.where(built, (-error).clamp(max=0.0).exp(), zero).sum(0),
                     built.to(error.dtype).sum(0), torch.where(built, error.abs(), zero).amax(0))

    def _build(self, walk, theta: Tensor, p: Tensor, grad: Tensor, step: Tensor, depth: int, energy: Tensor,
               alive: Tensor) -> _Tree:
        """A sub-tree of ``2**depth`` leapfrog steps from each chain's edge ``(theta, p, grad)``.
        ``alive``: the chains that use it (only for skipping a second half no chain needs)."""
        if depth == 0:
            return self._leaf(walk, theta, p, grad, step, energy)
        first = self._build(walk, theta, p, grad, step, depth - 1, energy, alive)
        go_on = alive & first.valid
        if depth >= 2 and not bool(go_on.any()):  # one host read per large node; no chain needs the rest
            return first
        second = self._build(walk, first.theta, first.p, first.grad, step, depth - 1, energy, go_on)
        log_weight = torch.logaddexp(first.log_weight, second.log_weight)
        u = _uniform_like(log_weight, walk.generator)
        take = u.log() < second.log_weight - log_weight  # uniform sampling within the sub-tree
        proposal = tuple(_where(take, b, a) for a, b in zip(first.proposal, second.proposal))
        rho = first.rho + second.rho
        criterion = partial(self._criterion, inv_mass=walk.inv_mass)
        valid = (first.valid & second.valid & criterion(first.p_begin, second.p_end, rho)
                 & criterion(first.p_begin, second.p_begin, first.rho + second.p_begin)
                 & criterion(first.p_end, second.p_end, second.rho + first.p_end))
        zero = torch.zeros_like(log_weight)
        return _Tree(second.theta, second.p, second.grad, first.p_begin, second.p_end, rho, log_weight, proposal,
                     valid, first.diverging | (go_on & second.diverging),
                     first.accept_sum + torch.where(go_on, second.accept_sum, zero),
                     first.steps + torch.where(go_on, second.steps, zero),
                     torch.where(go_on, torch.maximum(first.max_error, second.max_error), first.max_error))

    # ------------------------------------------------------------ the transition
    def step(self, state: HMCState, params: HMCParams,
             generator: torch.Generator | None = None) -> tuple[HMCState, NUTSInfo]:
        step_fn = self.force.step_fn()
        evaluate = self.force.evaluator(params)
        inv_mass = params.inv_mass
        walk = _Walk(step_fn if step_fn is not None else (
            lambda t, p, g, s, m: leapfrog_step(t, p, g, s, m, evaluate)), inv_mass, generator)
        state = self.current(state, params)
        theta, value, grad = state.position, state.value, state.force
        p = self.momentum(theta, inv_mass, generator)
        energy = value + kinetic_energy(p, inv_mass)
        chains = theta.shape[0]
        zero = torch.zeros_like(energy)
        left = right = (theta, p, grad)
        rho, log_weight = p, zero
        proposal = (theta, value, zero)
        alive = torch.ones_like(energy, dtype=torch.bool)
        accept_sum, steps, max_error = zero, zero, zero
        diverging = torch.zeros_like(alive)
        depth = torch.zeros(chains, dtype=torch.long, device=theta.device)
        step_size = params.step_size
        criterion = partial(self._criterion, inv_mass=inv_mass)
        for j in range(self.max_tree_depth):
            forward = _uniform_like(energy, generator) < 0.5
            start = tuple(_where(forward, r, l) for r, l in zip(right, left))
            step = ((forward.to(energy.dtype) * 2 - 1) * step_size).unsqueeze(-1)
            sub = self._subtree(walk, *start, step, j, energy, alive)
            accept_sum = accept_sum + torch.where(alive, sub.accept_sum, zero)
            steps = steps + torch.where(alive, sub.steps, zero)
            max_error = torch.where(alive, torch.maximum(max_error, sub.max_error), max_error)
            diverging = diverging | (alive & sub.diverging)
            depth = torch.where(alive, j + 1, depth)
            grows = alive & sub.valid
            take = grows & (_uniform_like(energy, generator).log() < sub.log_weight - log_weight)
            proposal = tuple(_where(take, b, a) for a, b in zip(proposal, sub.proposal))
            log_weight = torch.where(grows, torch.logaddexp(log_weight, sub.log_weight), log_weight)
            # the old tree's end far from the new sub-tree and its end next to it
            far = _where(forward, left[1], right[1])
            near = _where(forward, right[1], left[1])
            total = rho + sub.rho
            left_p = _where(forward, left[1], sub.p_end)
            right_p = _where(forward, sub.p_end, right[1])
            no_turn = (criterion(left_p, right_p, total) & criterion(far, sub.p_begin, rho + sub.p_begin)
                       & criterion(near, sub.p_end, sub.rho + near))
            edge = (sub.theta, sub.p, sub.grad)
            right = tuple(_where(grows & forward, e, r) for e, r in zip(edge, right))
            left = tuple(_where(grows & ~forward, e, l) for e, l in zip(edge, left))
            rho = _where(grows, total, rho)
            alive = grows & no_turn
            if not bool(alive.any()):  # one host read per doubling
                break
        theta_out, value_out, error = proposal
        value_out, grad_out = self.force.evaluate(theta_out, params)  # one gradient per draw: cheaper than carrying them
        new = HMCState(theta_out, value_out, grad_out, grad_out, None, state.count + 1)
        prob = accept_sum / steps.clamp(min=1.0)
        info = NUTSInfo(prob, diverging, energy + error, error, max_error, step_size, steps.to(torch.long), depth,
                        alive, walk.batched_steps)
        return new, info


class _Walk:
    """One transition's leapfrog step, inverse mass, generator and count of batched steps."""

    def __init__(self, step, inv_mass: Tensor, generator: torch.Generator | None):
        self.step, self.inv_mass, self.generator = step, inv_mass, generator
        self.batched_steps = 0


def search_chain_step_sizes(sampler: HMCSampler, state: HMCState, params: HMCParams) -> Tensor:
    """Each chain's :func:`~bnnzoo.inference.adaptation.find_step_size` from ``params.step_size [C]``
    on the acceptance of one leapfrog step from its point (the other chains keep theirs meanwhile)."""
    steps = params.step_size.clone()
    for c in range(state.position.shape[0]):
        def one_step(step_size: float, c=c) -> float:
            trial = steps.clone()
            trial[c] = step_size
            tr = sampler.propose(state, params._replace(step_size=trial), 1)[0]
            return float(torch.where(tr.finite[c], (-tr.error[c]).clamp(max=0.0).exp(), 0.0))

        steps[c] = find_step_size(float(steps[c]), one_step)
    return steps


class BatchedNUTS(FixedStepHMC):
    r"""The No-U-Turn sampler for C chains advanced as one batch (module docstring).

    One transition: :math:`p \sim N(0, M)` per chain; then for depth :math:`j = 0, 1, \dots`
    up to ``max_tree_depth - 1`` every chain that has not stopped doubles its tree by
    :math:`2^j` leapfrog steps in a random direction; a new sub-tree's state replaces the
    chain's candidate with probability :math:`\min(1, w_{new}/w_{old})` (biased progressive
    sampling; uniform within sub-trees), with :math:`w = \sum e^{H_0 - H}`. A chain stops
    at a U-turn (:math:`p^\sharp \cdot \rho \le 0` at either end, over the whole tree and
    across its two halves), at a divergence (:math:`H - H_0 > 1000` or not finite: counted,
    and that sub-tree's states are not used), or at the cap.

    Options: :class:`BatchedNUTSOptions`. Per-draw statistics: those of
    :class:`~.hmc.FixedStepHMC` (``acceptance_rate`` is the NUTS statistic, the mean of
    :math:`\min(1, e^{H_0 - H})` over the tree's states; ``n_steps`` per chain) and
    ``tree_depth`` (doublings) and ``reached_max_tree_depth`` (stopped at the cap, not at a
    U-turn).

    Examples
    --------
    >>> from bnnzoo.inference import MCMC
    >>> mcmc = MCMC(BatchedNUTS(model, num_chains=4), num_samples=500, warmup_steps=500)
    >>> mcmc.run(x, y)

    **References**

    * Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. JMLR 15.
    * Betancourt, M. (2017). A conceptual introduction to Hamiltonian Monte Carlo. arXiv:1701.02434.
    """

    Options = BatchedNUTSOptions
    stat_names = FixedStepHMC.stat_names + ("tree_depth", "reached_max_tree_depth")
    target_family = "batched_nuts"
    multi_step_graph = False  # trees grow a step at a time

    def build(self, theta: Tensor):
        """The NUTS sampler with one step size and one diagonal mass per chain; each chain's step-size
        search (with warm-up; their median when pooled); the window adaptation pooled over the chains
        (one step size on their mean acceptance, their pooled variance) or per chain (``pool_chains``)."""
        opts = self.options
        sampler = NUTSSampler(self.potential, partial(getattr, self, "runtime"), opts.max_tree_depth)
        params = HMCParams(torch.full_like(theta[:, 0], opts.step_size), torch.ones_like(theta))
        pooled = opts.pool_chains
        if self.has_warmup and opts.adapt_step_size:
            steps = search_chain_step_sizes(sampler, sampler.init(theta), params)
            params = params._replace(step_size=steps.median().expand_as(steps).clone() if pooled else steps)
        return sampler, self.window_adaptation(mean_statistic if pooled else chain_statistic, pooled=pooled), params
