"""Pyro's own potential of an arbitrary model on the flat layout (:class:`PyroPotential`),
with the full-data potential and the minibatch estimate of a model that subsamples
its data with ``pyro.plate(..., subsample_size=B)``.

Named ``pyro_model`` so that it does not shadow the ``pyro`` package inside this package.
"""

from __future__ import annotations

import contextvars
import threading
import warnings
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import pyro
import torch
from pyro import poutine
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad
from pyro.poutine.subsample_messenger import SubsampleMessenger, _Subsample
from torch.distributions.transforms import identity_transform

from ...models.l1 import laplace_l1_weight
from ..traced_graphs import TracedGraphs
from .base import FlatPotential, is_identity
from .vectorized import BATCHINGS, disagreement, plate_layout, plate_log_joint, vmap_log_joint

Tensor = torch.Tensor


def _validation_off():
    """Pyro's and torch's argument validation switched off (a context manager)."""
    return pyro.validation_enabled(False)


#: what a distribution's argument validation says about a value outside its support
_OUT_OF_SUPPORT = ("invalid values", "within the support", "Expected parameter")


def _out_of_support(err: ValueError) -> bool:
    text = f"{err} {err.__cause__ or ''}"
    return any(marker in text for marker in _OUT_OF_SUPPORT)


def _first_sentence(err: Exception) -> str:
    """The first sentence of an exception's message (a notice stays one line)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return text.split(". ")[0].rstrip(".")


# ------------------------------------------------------------ subsample plates
#: names of the plates whose size comes from the indices they are conditioned on (this context)
_FREE_PLATES: contextvars.ContextVar[frozenset] = contextvars.ContextVar("bnnzoo_free_plates", default=frozenset())
_PYRO_SUBSAMPLE = SubsampleMessenger.__dict__["_subsample"]  # Pyro's staticmethod
_patch_lock = threading.Lock()
_patch_depth = 0


def _subsample_free(name, size=None, subsample_size=None, subsample=None, *args, **kwargs):
    """Pyro's ``SubsampleMessenger._subsample``, except that a plate named in
    :data:`_FREE_PLATES` forgets its ``subsample_size``: it takes ``len(indices)``
    of the indices it is conditioned on (and scales by ``size / len(indices)``)."""
    if name in _FREE_PLATES.get():
        subsample_size = None
    return _PYRO_SUBSAMPLE.__func__(name, size, subsample_size, subsample, *args, **kwargs)


@contextmanager
def free_subsample_size(names: Iterable[str]) -> Iterator[None]:
    """Inside this context the plates ``names`` ignore their ``subsample_size``.

    Pyro 1.9 refuses a plate conditioned on a number of indices other than its
    ``subsample_size`` ("subsample_size does not match len(subsample)"), and
    ``initialize_model`` refuses any plate with ``subsample_size < size``, even
    conditioned on all its indices. Here the named plates take their minibatch
    size from the indices they are conditioned on, so a model conditioned on
    ``torch.arange(size)`` is the full-data model (scale 1) and one conditioned on
    B rows has Pyro's own N/B scale. Pyro's ``_subsample`` is replaced only while
    some such context is open (re-entrant, one lock); other plates, and every plate
    in another thread or context, behave exactly as in Pyro.
    """
    global _patch_depth
    names = frozenset(names)
    if not names:
        yield
        return
    token = _FREE_PLATES.set(_FREE_PLATES.get() | names)
    with _patch_lock:
        if _patch_depth == 0:
            SubsampleMessenger._subsample = staticmethod(_subsample_free)
        _patch_depth += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                SubsampleMessenger._subsample = _PYRO_SUBSAMPLE
        _FREE_PLATES.reset(token)


def find_subsample_plates(model: Callable, args=(), kwargs=None) -> tuple[dict[str, tuple[int, int]], dict[str, list]]:
    """Subsample plates on one trace of ``model`` (latents drawn from the prior):
    ``({plate: (size, subsample_size)}, {plate: [latent sites inside it]})`` for
    every plate whose ``subsample_size`` is smaller than its size (the plate's
    sample site with a ``_Subsample`` distribution, named like the plate, holds its indices)."""
    # on a forked random stream: finding the plates leaves the caller's draws as they were
    with pyro.validation_enabled(False), torch.no_grad(), torch.random.fork_rng(devices=[]):
        trace = poutine.trace(model).get_trace(*args, **(kwargs or {}))
    plates = {}
    for name, site in trace.nodes.items():
        fn = site.get("fn") if site["type"] == "sample" else None
        if isinstance(fn, _Subsample) and fn.subsample_size is not None and fn.subsample_size < fn.size:
            plates[name] = (int(fn.size), int(fn.subsample_size))
    local: dict[str, list] = {name: [] for name in plates}
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"] or isinstance(site["fn"], _Subsample):
            continue
        for frame in site["cond_indep_stack"]:
            if frame.name in local:
                local[frame.name].append(name)
    return plates, {p: sites for p, sites in local.items() if sites}


# ------------------------------------------------------------ models that cannot start
#: what Pyro's ``initialize_model`` says when no initial point has a finite potential
PYRO_NO_VALID_INIT = "cannot find valid initial params"


def _argument_names(model: Callable, args, kwargs) -> dict[str, object]:
    """``{name: value}`` of the model's arguments (positional ones by their parameter names where
    the signature gives them, else ``args[i]``)."""
    import inspect

    try:
        bound = inspect.signature(model).bind_partial(*args, **kwargs).arguments
        return dict(bound)
    except (TypeError, ValueError):
        return {**{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs}


def _nan_arguments(model: Callable, args, kwargs) -> list[str]:
    """``"argument 'y' (1 of 10 values NaN)"`` for each tensor argument of the model holding a NaN."""
    found = []
    for name, value in _argument_names(model, args, kwargs).items():
        if torch.is_tensor(value) and value.is_floating_point():
            bad = int(torch.isnan(value).sum())
            if bad:
                found.append(f"argument {name!r} ({bad} of {value.numel()} values NaN)")
    return found


def explain_invalid_start(model: Callable, args=(), kwargs=None) -> str:
    """Why a Pyro model has no finite log density at the points tried: the sites whose log density
    is not finite on a trace with its latents drawn from their priors (an observed site: whether its
    value holds a NaN, and which argument of the model does), and the model's tensor arguments that
    hold a NaN."""
    kwargs = kwargs or {}
    sites = []
    try:
        with pyro.validation_enabled(False), torch.no_grad(), torch.random.fork_rng(devices=[]):
            trace = poutine.trace(model).get_trace(*args, **kwargs)
            for name, site in trace.nodes.items():
                if site["type"] != "sample" or isinstance(site["fn"], _Subsample):
                    continue
                log_prob = site["fn"].log_prob(site["value"])
                total = float(log_prob.sum()) if torch.is_tensor(log_prob) else float(log_prob)
                if not torch.isfinite(torch.tensor(total)):
                    kind = ("factor" if type(site["fn"]).__name__ == "Unit" else
                            "observed" if site["is_observed"] else "latent")
                    value = site["value"]
                    held = (", its value holds NaN" if torch.is_tensor(value) and value.is_floating_point()
                            and bool(torch.isnan(value).any()) else "")
                    sites.append(f"site {name!r} ({kind}) has log density {total}{held}")
    except Exception as err:  # the model fails on its prior draws too: say so, with what it said
        sites.append(f"the model fails on a draw from its priors ({type(err).__name__}: {err})")
    nans = _nan_arguments(model, args, kwargs)
    parts = sites + ([f"the data hold NaN: {'; '.join(nans)}"] if nans else [])
    why = "; ".join(parts) if parts else "no site's log density is non-finite at a draw from the priors"
    return f"the model's log density is not finite at any initial point tried: {why}"


def no_continuous_latent(model: Callable, args=(), kwargs=None) -> str:
    """The refusal of a model with no continuous latent site (its discrete ones named)."""
    with pyro.validation_enabled(False), torch.no_grad(), torch.random.fork_rng(devices=[]):
        trace = poutine.trace(model).get_trace(*args, **(kwargs or {}))
    discrete = [f"{name!r} ({type(site['fn']).__name__})" for name, site in trace.nodes.items()
                if site["type"] == "sample" and not site["is_observed"] and not isinstance(site["fn"], _Subsample)]
    if discrete:
        return (f"the model has no continuous latent site to sample: its latent site(s) {', '.join(discrete)} "
                "are discrete, which a gradient-based or flat-layout kernel cannot move; marginalise them "
                "(pyro.infer.config_enumerate with Pyro's NUTS/HMC) or give them a continuous distribution")
    return "the model has no latent site to sample (every sample site is observed)"


@contextmanager
def explained_initialization(model: Callable, args=(), kwargs=None) -> Iterator[None]:
    """Pyro's ``"Model specification seems incorrect - cannot find valid initial params"`` (or, with
    argument validation on, its refusal of a value or parameter outside a support), raised
    inside this block, becomes a ValueError naming the site whose log density is not finite and the
    data field that holds a NaN (:func:`explain_invalid_start`)."""
    try:
        yield
    except ValueError as err:
        # with Pyro's argument validation on, a NaN in the data or a parameter fails at the first
        # trace instead ("Expected value argument ... within the support", "Expected parameter ...")
        if PYRO_NO_VALID_INIT not in str(err) and not _out_of_support(err):
            raise
        raise ValueError(explain_invalid_start(model, args, kwargs)) from err


class PyroPotential(FlatPotential):
    """Pyro's own potential of an arbitrary model, on the flat layout.

    **Chains in one trace.** ``theta`` ``[C, D]`` (C > 1) is evaluated in one trace of the model
    for all chains where the model allows it (:mod:`.vectorized`): first with a chain plate outside
    the model's plates (Pyro's ``vectorize_particles`` idiom), else with ``torch.func.vmap`` over
    the chains. Which one is decided once, at the first ``[C, D]`` call (the initial points): a
    batching is used only if it gives the per-chain loop's value and gradient there (within
    ``sqrt(eps)``); a model that no batching fits (shapes that do not broadcast, data-dependent
    control flow, discrete sites that Pyro enumerates) keeps the per-chain loop, with a one-line
    warning saying why. :attr:`chain_batching` is the choice (``"plate"``, ``"vmap"``, ``"loop"``;
    None before the first call) and :meth:`notes` its note for ``Run.notes["chain_batching"]``;
    ``vectorize=False`` keeps the loop. A later call whose batched trace raises (say, a value a
    distribution with argument validation refuses) is evaluated chain by chain.

    One chain (``[D]`` or ``[1, D]``), :meth:`potential_fn` and Pyro's own kernels use Pyro's
    potential (one trace per chain). At a point
    where it is not defined (a non-finite coordinate, or a value that a
    distribution built with argument validation refuses: priors made before
    ``MCMC.run`` keep the validation setting of their construction) the potential
    is NaN with a NaN gradient, never an exception: the kernel rejects the proposal
    and counts a divergence.

    **Subsample plates.** A model written with Pyro's minibatch idiom,
    ``with pyro.plate("data", N, subsample_size=B) as ind: pyro.sample("obs", ..., obs=y[ind])``,
    is detected on one trace of the model (:func:`find_subsample_plates`:
    :attr:`subsample_plates`). The potential itself (``__call__``,
    :meth:`value_and_grad`, :meth:`potential_fn`: what NUTS, HMC, ChEES, RWMH and
    the SG-MCMC kernels with ``batch_size=None`` use) is the exact full-data one:
    every subsample plate is conditioned on ``torch.arange(N)`` (scale N/N = 1).
    :meth:`minibatch_value_and_grad` conditions the plates on given rows instead,
    and Pyro's plate scales the log likelihood by N/B itself, as in Pyro's SVI.
    The number of rows B is the caller's (the SG-MCMC ``batch_size`` option), not
    the model's ``subsample_size``: ``batch_size`` wins, the model's
    ``subsample_size`` only marks the plate (:func:`free_subsample_size`).
    :attr:`num_data` is the plates' size (None without a subsample plate);
    minibatches need all subsample plates of one size and no latent site inside
    them (:meth:`check_minibatch`).
    """

    def __init__(self, model: Callable, args=(), kwargs=None, vectorize: bool = True, trace: bool = True):
        self._model, self._args, self._kwargs = model, tuple(args), dict(kwargs or {})
        data = [a for a in (*self._args, *self._kwargs.values()) if torch.is_tensor(a)]
        self.device = data[0].device if data else None  # the data's; without data, torch's default
        plates, self._local_latents = find_subsample_plates(model, self._args, self._kwargs)
        #: ``{plate name: (size N, the model's subsample_size)}`` of the model's subsample plates
        self.subsample_plates = plates
        #: what the subsample plates are conditioned on: all indices, or a minibatch's rows
        self._plate_rows = {name: torch.arange(size, device=self.device) for name, (size, _) in plates.items()}
        self._full_model = poutine.condition(model, data=self._plate_rows) if plates else model
        with self._free(), explained_initialization(model, self._args, self._kwargs):
            init, fn, transforms, _ = initialize_model(self._full_model, self._args, self._kwargs)
        if not init:
            raise ValueError(no_continuous_latent(model, self._args, self._kwargs))
        self._fn = fn
        self._transform_order = [n for n in transforms if n in init]  # Pyro's order of the Jacobian terms
        #: how ``[C, D]`` chains are evaluated: "plate", "vmap" or "loop" (None: not decided yet)
        self.chain_batching: str | None = None if vectorize else "loop"
        self._batching_note = None if vectorize else "per-chain loop (vectorize=False)"
        self._layout_cache = None
        #: batched calls whose trace raised after the batching was chosen, evaluated chain by chain instead
        self.unbatched_calls = 0
        #: the batched value and gradient replayed as one graph of operations after a few calls
        #: (:mod:`~bnnzoo.inference.traced_graphs`; traced with argument validation off, which checks
        #: values in Python; ``trace=False``: never)
        self.traced = TracedGraphs(self._chains_value_and_grad, context=_validation_off,
                                   **({} if trace else {"after": 0}))
        self.names = sorted(init)
        self.shapes = {n: tuple(init[n].shape) for n in self.names}
        self.transforms = {n: transforms.get(n, identity_transform) for n in self.names}
        self.initial = {n: v.detach() for n, v in init.items()}
        floating = [v for v in self.initial.values() if v.is_floating_point()]
        if floating:  # where and in which dtype the model's latent values are
            self.device, self.dtype = floating[0].device, floating[0].dtype
        self._layout()

    def __call__(self, theta: Tensor) -> Tensor:
        if theta.dim() > 1 and self._batched(theta):
            try:
                return self._batched_value(theta, self.chain_batching)
            except Exception:  # e.g. a value that a validating distribution refuses: chain by chain
                self.unbatched_calls += 1
        if theta.dim() == 1:
            if not bool(torch.isfinite(theta).all()):
                return theta.new_full((), float("nan"))
            try:
                with self._free():
                    return self._fn(self.unflatten(theta))
            except ValueError as err:
                if not _out_of_support(err):
                    raise
                return theta.new_full((), float("nan"))
        return torch.stack([self(t) for t in theta])

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        if theta.dim() > 1 and self._batched(theta):
            try:
                return self.traced(theta)
            except Exception:  # e.g. a value that a validating distribution refuses: chain by chain
                self.unbatched_calls += 1
        if theta.dim() > 1:
            return self._loop_value_and_grad(theta)
        nan = (theta.new_full((), float("nan")), torch.full_like(theta, float("nan")))
        if not bool(torch.isfinite(theta).all()):
            return nan
        try:
            with self._free():
                grads, value = potential_grad(self._fn, self.unflatten(theta.detach()))
        except ValueError as err:
            if not _out_of_support(err):
                raise
            return nan
        return value.detach(), self.flatten(grads)

    def potential_fn(self, params):
        with self._free():
            return self._fn(params)

    # -------------------------------------------------------- chains in one trace
    def _loop_value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        values, grads = zip(*(self.value_and_grad(t) for t in theta))
        return torch.stack(values), torch.stack(grads)

    def _batched(self, theta: Tensor) -> bool:
        """Whether ``theta`` ``[C, D]`` goes through one batched trace (deciding how at the first call)."""
        if theta.shape[0] < 2:
            return False
        if self.chain_batching is None:
            with torch.enable_grad():  # the first call may come without gradients (initial points)
                self._choose_batching(theta.detach())
        return self.chain_batching not in (None, "loop")

    def _batched_value(self, theta: Tensor, batching: str) -> Tensor:
        """``[C]`` potential of ``theta`` ``[C, D]`` in one trace (differentiable); a non-finite
        row of ``theta`` gives NaN (and touches no other chain)."""
        finite = torch.isfinite(theta).all(-1)
        safe = torch.where(finite[:, None], theta, torch.zeros((), dtype=theta.dtype, device=theta.device))
        unconstrained = self.unflatten(safe)
        values = {n: self.transforms[n].inv(u) for n, u in unconstrained.items()}
        with self._free():
            if batching == "plate":
                log_joint = plate_log_joint(self._full_model, self._args, self._kwargs, values,
                                            self._plate_layout(), self.shapes)
            else:
                log_joint = vmap_log_joint(self._full_model, self._args, self._kwargs, values)
        chains = theta.shape[0]
        for name in self._transform_order:  # Pyro's potential: log joint minus each log |det J|, in its order
            log_det = self.transforms[name].log_abs_det_jacobian(values[name], unconstrained[name])
            log_joint = log_joint - log_det.reshape(chains, -1).sum(-1)
        return torch.where(finite, -log_joint, torch.full_like(log_joint, float("nan")))

    def _batched_value_and_grad(self, theta: Tensor, batching: str) -> tuple[Tensor, Tensor]:
        """``[C]`` values and ``[C, D]`` gradients in one trace; NaN rows where the value is not finite
        (no branch on the values: :attr:`traced` records this function as it runs)."""
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self._batched_value(theta, batching)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        nan = ~torch.isfinite(value)
        grad = torch.where(nan[:, None], torch.full_like(grad, float("nan")), grad)
        return value.detach(), grad

    def _chains_value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`_batched_value_and_grad` with the chosen batching (what :attr:`traced` runs)."""
        return self._batched_value_and_grad(theta, self.chain_batching)

    def _plate_layout(self) -> tuple[int, dict[str, int]]:
        if self._layout_cache is None:
            values = {n: self.transforms[n].inv(u) for n, u in self.initial.items()}
            with self._free(), pyro.validation_enabled(False), torch.no_grad():
                self._layout_cache = plate_layout(self._full_model, self._args, self._kwargs, values)
        return self._layout_cache

    def _enumerated_sites(self) -> list[str]:
        """The latent sites Pyro's potential enumerates (discrete): not in the flat layout."""
        values = {n: self.transforms[n].inv(u) for n, u in self.initial.items()}
        with self._free(), pyro.validation_enabled(False), torch.no_grad(), torch.random.fork_rng(devices=[]):
            trace = poutine.trace(poutine.condition(self._full_model, data=values)).get_trace(
                *self._args, **self._kwargs)
        return [name for name, site in trace.nodes.items() if site["type"] == "sample" and not site["is_observed"]
                and not isinstance(site["fn"], _Subsample)]

    def _choose_batching(self, theta: Tensor) -> None:
        """Set :attr:`chain_batching`: the first of :data:`~.vectorized.BATCHINGS` whose value and
        gradient at ``theta`` ``[C, D]`` are the per-chain loop's, else ``"loop"`` with a warning."""
        chains = theta.shape[0]
        self.chain_batching = "loop"  # while deciding (and for good if nothing fits)
        why = []
        discrete = self._enumerated_sites()
        if discrete:
            why.append(f"its discrete site(s) {', '.join(map(repr, discrete))} are enumerated by Pyro")
        else:
            want_value, want_grad = self._loop_value_and_grad(theta)
            if not bool(torch.isfinite(want_value).any()):  # nothing to compare with: decide at a later call
                self.chain_batching = None
                return
            for batching in BATCHINGS:
                try:
                    value, grad = self._batched_value_and_grad(theta, batching)
                    problem = disagreement(value, grad, want_value, want_grad)
                except Exception as err:  # any failure of the batched trace: this batching does not fit
                    problem = f"{type(err).__name__}: {_first_sentence(err)}"
                if problem is None:
                    self.chain_batching = batching
                    how = "a chain plate outside the model's plates" if batching == "plate" else "torch.func.vmap"
                    self._batching_note = (f"{chains} chains in one trace ({how}; checked against the per-chain "
                                           "loop at the first points)")
                    return
                why.append(f"{batching}: {problem}")
        self._batching_note = f"per-chain loop: the model cannot be vectorized over chains ({'; '.join(why)})"
        warnings.warn(f"PyroPotential: {self._batching_note}", stacklevel=4)

    def notes(self) -> dict:
        """``{"chain_batching": how [C, D] chains were evaluated (and why, for the loop)}`` once decided,
        with the number of batched calls that went chain by chain because their trace raised."""
        if not self._batching_note:
            return {}
        note = self._batching_note
        traced = self.traced.note()
        if traced is not None and self.chain_batching not in (None, "loop"):
            note += f"; {traced}"
        if self.unbatched_calls:
            note += f"; {self.unbatched_calls} call(s) chain by chain where the batched trace raised"
        return {"chain_batching": note}

    # -------------------------------------------------------- minibatches
    def _free(self):
        return free_subsample_size(self.subsample_plates)

    @property
    def num_data(self) -> int | None:
        """N, the size of the model's subsample plates (None without one). Several
        subsample plates of different sizes have no single N: a ValueError naming them."""
        sizes = {size for size, _ in self.subsample_plates.values()}
        if len(sizes) > 1:
            plates = ", ".join(f"{n!r} (size {size})" for n, (size, _) in self.subsample_plates.items())
            raise ValueError(f"the model has subsample plates of different sizes, {plates}: minibatches "
                             "need one data size; give every subsample plate the same size, or drop "
                             "subsample_size from all but one")
        return sizes.pop() if sizes else None

    def check_minibatch(self, batch_size: int, option: str = "batch_size") -> None:
        """Clear errors, before any sampling, when this model cannot give minibatches of ``batch_size`` rows."""
        if not self.subsample_plates:
            raise ValueError(
                f"{option}={batch_size}: the Pyro model has no subsample plate to draw minibatches from; wrap "
                f"its observations in pyro.plate(name, N, subsample_size={batch_size}) (indexing the data with "
                f"the plate's indices), or use {option}=None for the full data")
        num_data = self.num_data  # refuses plates of different sizes
        if self._local_latents:
            where = "; ".join(f"{sites} in plate {p!r}" for p, sites in self._local_latents.items())
            raise ValueError(f"{option}={batch_size}: minibatches of a Pyro model need every latent site outside "
                             f"its subsample plates (a minibatch would change their shapes), found {where}; "
                             f"use {option}=None")
        if batch_size > num_data:
            raise ValueError(f"{option}={batch_size} is larger than the {num_data} training rows")

    @contextmanager
    def _conditioned_on(self, rows: Tensor) -> Iterator[None]:
        """Every subsample plate conditioned on ``rows`` ``[B]`` (then back on all indices)."""
        rows = rows.to(torch.long)
        full = dict(self._plate_rows)
        self._plate_rows.update({name: rows for name in self.subsample_plates})
        try:
            yield
        finally:
            self._plate_rows.update(full)

    def minibatch_value_and_grad(self, theta: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Unbiased minibatch estimate of ``U`` and its gradient: the model with every
        subsample plate conditioned on ``rows`` (Pyro scales the plate's log
        likelihood by N/B), per chain. ``rows``: ``[B]`` (the same rows for every
        chain) or ``[C, B]`` (chain c on ``rows[c]``) for ``theta`` ``[C, D]``;
        ``[B]`` for ``theta`` ``[D]``."""
        self.check_minibatch(rows.shape[-1], "rows")
        if theta.dim() > 1:
            if rows.dim() == 1:
                rows = rows.expand(theta.shape[0], -1)
            if rows.shape[:-1] != theta.shape[:-1]:
                raise ValueError(f"rows {tuple(rows.shape)} do not match theta {tuple(theta.shape)}: "
                                 "give [B] or one row set per chain [C, B]")
            if bool((rows == rows[:1]).all()):  # the same rows for every chain: one batched call
                with self._conditioned_on(rows[0]):
                    return self.value_and_grad(theta)
            values, grads = zip(*(self.minibatch_value_and_grad(t, r) for t, r in zip(theta, rows)))
            return torch.stack(values), torch.stack(grads)
        if rows.dim() != 1:
            raise ValueError(f"rows {tuple(rows.shape)} for one chain: give [B]")
        with self._conditioned_on(rows):
            return self.value_and_grad(theta)

    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        """``[D]`` L1 weights detected on the model's trace: ``1/scale`` (times the
        site's ``poutine.scale``) on latent sites whose distribution is a
        ``Laplace(0, scale)`` (possibly expanded or wrapped in ``Independent``)
        with a scale that depends on no latent value, unmasked, with an identity
        transform; 0 elsewhere. ``spike_and_slab`` is accepted for symmetry with
        :class:`BNNPotential` (plain Pyro models have no spike-and-slab site)."""
        values = {n: self.transforms[n].inv(u).detach().clone().requires_grad_(True)
                  for n, u in self.initial.items()}
        with torch.enable_grad(), pyro.validation_enabled(False), self._free():
            trace = poutine.trace(poutine.condition(self._full_model, data=values)).get_trace(
                *self._args, **self._kwargs)
        parts = []
        for name in self.names:
            site = trace.nodes[name]
            beta = None
            transform = self.transforms[name]  # constrained -> unconstrained: check it and its inverse
            if (is_identity(transform) or is_identity(transform.inv)) and site.get("mask") is None:
                beta = laplace_l1_weight(site["fn"])
            if beta is None:
                parts.append(torch.zeros(self.shapes[name], **self.placement))
                continue
            scale = site.get("scale", 1.0)
            beta = torch.as_tensor(scale, dtype=beta.dtype, device=beta.device) * beta
            parts.append(torch.broadcast_to(beta.detach(), self.shapes[name]))
        placement = self.placement
        return torch.cat([p.reshape(-1).to(**placement) for p in parts]) if parts else torch.zeros(0, **placement)
