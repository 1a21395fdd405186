"""The shared base of bnnzoo's MCMC kernels.

A kernel subclass writes only its update rule, :meth:`FlatKernel.transition`,
on a ``[C, D]`` tensor of C chains, and names its options dataclass
(:attr:`FlatKernel.Options`). The base owns everything else that the Pyro
``MCMC`` driver needs:

* ``Kernel(model, **options)``: every keyword is a field of the options
  dataclass, defaulted and validated there (``kernel.options``);
* ``setup()`` builds the flat potential from the model and its arguments and
  resets all per-chain state (chains may run one after another on the same
  kernel object), keeping user-supplied ``initial_params``;
* ``sample(params)`` flattens, calls ``transition``, records the step's
  statistics and counts steps to know when warm-up ends (Pyro never calls
  ``end_warmup``);
* ``diagnostics()`` returns ``"divergences"`` and ``"sample_stats"`` (per-draw
  arrays, ``[draws]`` or ``[draws, C]``): the only channel that survives chains
  run in worker processes;
* ``logging()`` feeds the progress bar.

With ``num_chains=C > 1`` the kernel advances C chains as one batch inside one
Pyro chain: every site gets a leading dim of size C, and
:func:`bnnzoo.results.split_mcmc` splits them back into C chains.
"""

from __future__ import annotations

import inspect
import math
from collections import OrderedDict
import dataclasses
from dataclasses import dataclass
from typing import Callable, ClassVar, Mapping

import numpy as np
import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ... import validation
from ..potential import FlatPotential, initial_theta, make_potential, place
from ..options import Options, integer, option, positive

__all__ = ["BaseOptions", "FlatKernel", "metropolis_accept"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class BaseOptions(Options):
    """Options every flat kernel has."""

    num_chains: int = option(1, "chains advanced together as one [C, D] batch", integer(1))
    init_radius: float = option(1.0, "initial points uniform in (-r, r) in unconstrained space", positive)


class FlatKernel(MCMCKernel):
    """Base of bnnzoo kernels on a flat unconstrained vector (see module docstring).

    Parameters
    ----------
    model : callable, optional
        A :class:`~bnnzoo.models.BNN` (fast potential) or any Pyro model; its
        arguments come from ``MCMC.run(*args)``.
    potential : FlatPotential, optional
        Use this potential instead of building one from ``model``.
    device : torch.device or str, optional
        Move the model's arguments (the data) there before building the potential (None: where
        they are); the kernel computes where its potential's data are. A given ``potential``
        must already be there.
    dtype : torch.dtype or str, optional
        Cast the floating arguments to this dtype (None: as they are).
    **options
        The fields of the kernel's :attr:`Options` dataclass (``num_chains``,
        ``init_radius`` and the kernel's own); an unknown name is an error.
    """

    #: the options dataclass: every keyword of the constructor, with its default and check
    Options: ClassVar[type[Options]] = BaseOptions
    #: names of the per-step statistics this kernel records (ArviZ names).
    stat_names: tuple[str, ...] = ("acceptance_rate", "diverging", "lp")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
        params += [inspect.Parameter(n, keyword, default=None) for n in ("potential", "device", "dtype")]
        params += [inspect.Parameter(n, keyword, default=d) for n, d in cls.Options.defaults().items()]
        cls.__signature__ = inspect.Signature(params)  # what help() and IDEs show: the options' defaults

    @classmethod
    def check_chains(cls, options: Options) -> None:
        """Refuse, before sampling, a number of chains the kernel cannot work with (``options.num_chains``)."""

    def set_num_chains(self, num_chains: int) -> None:
        """Advance ``num_chains`` chains as one batch from now on (what ``MCMC(chain_method="vectorized")``
        sets); resets the per-chain state."""
        self.options = dataclasses.replace(self.options, num_chains=num_chains)
        self.num_chains = num_chains
        if not self._user_initial_params:
            self._initial_params = None
        self._reset()

    def __init__(self, model: Callable | None = None, potential: FlatPotential | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype | str | None = None, **options):
        self._init(model, potential, device, dtype, self.Options.build(type(self).__name__, options))

    @classmethod
    def from_options(cls, options: Options, model: Callable | None = None, potential: FlatPotential | None = None,
                     device: torch.device | str | None = None, dtype: torch.dtype | str | None = None) -> "FlatKernel":
        """The kernel with ``options``, an instance of its :attr:`Options` that is already built (and so
        checked): the engine layer builds a run's options once (``RunConfig.options``) and hands the
        object over whole. Otherwise as the constructor."""
        if type(options) is not cls.Options:
            raise TypeError(f"options: expected {cls.__name__}.Options ({cls.Options.__name__}), "
                            f"got {type(options).__name__}")
        kernel = cls.__new__(cls)
        kernel._init(model, potential, device, dtype, options)
        return kernel

    def _init(self, model, potential, device, dtype, options: Options) -> None:
        if model is None and potential is None:
            raise ValueError("give a model or a potential")
        self.options = options
        self.device = None if device is None else validation.device("device", device)
        self.dtype = None if dtype is None else validation.float_dtype("dtype", dtype)
        if potential is not None and (device, dtype) != (None, None):
            raise ValueError(f"device={device!r}, dtype={dtype!r}: a given potential computes where its data are; "
                             f"build it there (BNNPotential(model, x, y, device=..., dtype=...))")
        self.model = model
        self.potential = potential
        self._given_potential = potential is not None
        self.num_chains = self.options.num_chains
        self.init_radius = self.options.init_radius
        self._initial_params: dict[str, Tensor] | None = None
        self._user_initial_params = False
        self.transforms: dict | None = potential.transforms if potential is not None else None
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        """Reset all per-chain state; subclasses extend and call super."""
        self._t = 0
        self._warmup_steps = 0
        self._stats: list[dict[str, np.ndarray]] = []
        self._warmup_stats: list[dict[str, np.ndarray]] = []
        self._divergences: list[int] = []
        self._accept_sum = 0.0
        self._cache: tuple[Tensor, Tensor, Tensor] | None = None  # theta, U, grad U

    @property
    def initial_params(self) -> dict[str, Tensor]:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Mapping[str, Tensor]) -> None:
        self._initial_params = dict(params) if params is not None else None
        self._user_initial_params = params is not None

    @property
    def in_warmup(self) -> bool:
        return self._t < self._warmup_steps

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        self.check_chains(self.options)
        self._reset()
        self._warmup_steps = int(warmup_steps)
        if not self._given_potential:
            args, kwargs = place(args, self.device, self.dtype), place(kwargs, self.device, self.dtype)
            self.potential = make_potential(self.model, *args[:2], args=args, kwargs=kwargs)
        self.transforms = self.potential.transforms
        if not self._user_initial_params:
            theta = self.initial_point()
            self._initial_params = self.unflatten(theta)
        else:  # the user's point, where the potential computes
            self._initial_params = place(self._initial_params, **self.potential.placement)
        self._check_initial_shapes()
        self.prepare(self.flatten(self._initial_params))

    def _check_initial_shapes(self) -> None:
        for name in self.potential.names:
            if name not in self._initial_params:
                raise ValueError(f"initial_params is missing the site {name!r}")
            want = self.potential.shapes[name]
            got = tuple(self._initial_params[name].shape)
            ok = got == want if self.num_chains == 1 else got == (self.num_chains,) + want
            if not ok:
                raise ValueError(f"initial_params[{name!r}] has shape {got}, expected "
                                 f"{want if self.num_chains == 1 else (self.num_chains,) + want}")

    def initial_point(self) -> Tensor:
        """The ``[C, D]`` initial points when the user gives none: uniform in ``(-r, r)``, r the
        :meth:`initial_radius`."""
        return initial_theta(self.potential, self.num_chains, self.initial_radius())

    def initial_radius(self) -> float | Tensor:
        """The radius r of the initial points, uniform in ``(-r, r)``: a number, or ``[D]`` per coordinate."""
        return self.init_radius

    def prepare(self, theta: Tensor) -> None:
        """Hook after setup, with the initial ``[C, D]`` point (e.g. find a step size)."""

    def check_potential(self, potential: FlatPotential) -> None:
        """Clear errors, before any sampling, for what this kernel cannot do on ``potential``."""

    def notes(self) -> dict:
        """Facts about this kernel's draws for the InferenceData attributes (e.g. what ``lp`` is); the
        base gives its potential's (e.g. a Pyro model's ``chain_batching``)."""
        notes = getattr(getattr(self, "potential", None), "notes", None)
        return dict(notes()) if notes is not None else {}

    # ---------------------------------------------------------------- layout
    def flatten(self, params: Mapping[str, Tensor]) -> Tensor:
        """Site dict -> ``[C, D]``."""
        theta = self.potential.flatten(params, batch_ndim=0 if self.num_chains == 1 else 1)
        return theta.reshape(self.num_chains, self.potential.dim)

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """``[C, D]`` -> site dict (no chain dim when C == 1)."""
        return self.potential.unflatten(theta[0] if self.num_chains == 1 else theta)

    def value(self, theta: Tensor) -> Tensor:
        """``U(theta)`` per chain, from the cache when ``theta`` is the current point."""
        if self._cache is not None and self._cache[0] is theta:
            return self._cache[1]
        with torch.no_grad():
            value = self.potential(theta)
        self.remember(theta, value)
        return value

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U`` and ``grad U`` at ``theta``, from the cache when possible."""
        if self._cache is not None and self._cache[0] is theta and self._cache[2] is not None:
            return self._cache[1], self._cache[2]
        value, grad = self.potential.value_and_grad(theta)
        self.remember(theta, value, grad)
        return value, grad

    def remember(self, theta: Tensor, value: Tensor, grad: Tensor | None = None) -> None:
        """Cache ``U`` (and its gradient) at the chain's current point."""
        self._cache = (theta, value, grad)

    # -------------------------------------------------------------- sampling
    def transition(self, theta: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """One MCMC step on ``[C, D]``; returns the new point and per-chain
        statistics (tensors of shape ``[C]``), including ``acceptance_rate``,
        ``diverging`` and ``lp``."""
        raise NotImplementedError

    def sample(self, params: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Pyro's step on a site dict: :meth:`sample_flat` on its ``[C, D]`` point."""
        return self.unflatten(self.sample_flat(self.flatten(params)))

    def sample_flat(self, theta: Tensor) -> Tensor:
        """One iteration on ``[C, D]``: :meth:`transition`, its statistics recorded. bnnzoo's MCMC loop
        calls it with the point the last call returned (the chains' current point, whose potential
        and state the kernel holds); another equal point is taken as that one."""
        cache = self._cache
        if cache is not None and cache[0] is not theta and torch.equal(cache[0], theta):
            theta = cache[0]
        theta_new, stats = self.transition(theta)
        self._record(stats)
        self._t += 1
        return theta_new

    def _record(self, stats: Mapping[str, Tensor]) -> None:
        row = self._host_row(stats)
        if self.in_warmup:
            self._warmup_stats.append(row)
            return
        draw = len(self._stats)
        self._stats.append(row)
        if "acceptance_rate" in row:  # SG-MCMC kernels have no accept step and record none
            self._accept_sum += float(row["acceptance_rate"].mean())
        if "diverging" in row:
            self._divergences.extend([draw] * int(row["diverging"].sum()))

    def _host_row(self, stats: Mapping[str, Tensor | float | bool | int]) -> dict[str, np.ndarray]:
        """One draw's statistics on the host, each ``[C]`` (a scalar per chain) or ``[C, k]`` (a vector
        per chain), floats as float64 (one float dtype for every statistic of every engine, as Pyro's
        NUTS gives). Tensors on a device come over in one transfer (:func:`_on_host`: one
        synchronisation per draw); a Python number is that value for every chain."""
        tensors = _on_host({k: v.detach().reshape(self.num_chains, -1) for k, v in stats.items()
                            if torch.is_tensor(v)})
        row = {}
        for k, v in stats.items():
            if k not in tensors:
                row[k] = np.full(self.num_chains, v, dtype=np.float64 if isinstance(v, float) else None)
                continue
            v = tensors[k].numpy()
            if v.dtype.kind == "f" and v.dtype != np.float64:
                v = v.astype(np.float64)
            row[k] = v[:, 0] if v.shape[1] == 1 else v
        return row

    # ----------------------------------------------------------- reporting
    @staticmethod
    def _stack(rows: list[dict[str, np.ndarray]], squeeze: bool) -> dict[str, np.ndarray]:
        if not rows:
            return {}
        out = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        return {k: v[:, 0] for k, v in out.items()} if squeeze else out

    def diagnostics(self) -> dict:
        """``divergences`` (one draw index per divergent transition),
        ``acceptance rate``, and ``sample_stats``: per-draw arrays of shape
        ``[draws]`` (or ``[draws, C]`` for vectorized chains)."""
        n = max(len(self._stats), 1)
        return {
            "divergences": list(self._divergences),
            "acceptance rate": self._accept_sum / n,
            "sample_stats": self._stack(self._stats, self.num_chains == 1),
            "warmup_sample_stats": self._stack(self._warmup_stats, self.num_chains == 1),
            "num_chains": self.num_chains,
        }

    def logging(self) -> OrderedDict:
        rows = self._stats or self._warmup_stats
        recent = rows[-50:]
        log = OrderedDict()
        if recent and "step_size" in recent[-1]:
            log["step size"] = f"{float(recent[-1]['step_size'].mean()):.2e}"
        if not recent or "acceptance_rate" in recent[-1]:
            acc = float(np.mean([r["acceptance_rate"].mean() for r in recent])) if recent else float("nan")
            log["acc. prob"] = f"{acc:.3f}"
        return log


def _on_host(tensors: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
    """``[C, k]`` tensors on the CPU: from a device in one transfer (:func:`_in_one_transfer`),
    CPU tensors as they are."""
    if not tensors or next(iter(tensors.values())).device.type == "cpu":
        return tensors
    return _in_one_transfer(tensors)


def _in_one_transfer(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``[C, k]`` tensors on the CPU through one float64 block (exact for the integer and boolean
    statistics), each back in its dtype."""
    joined = torch.cat([t.double() for t in tensors.values()], dim=1).cpu()
    parts = torch.split(joined, [t.shape[1] for t in tensors.values()], dim=1)
    return {k: part.to(t.dtype) for (k, t), part in zip(tensors.items(), parts)}


def metropolis_accept(log_ratio: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Metropolis test per chain. A NaN log ratio (a NaN energy) is a rejection
    and a divergence. Returns ``(accepted, acceptance_prob, nan_mask)``."""
    nan = torch.isnan(log_ratio)
    log_ratio = torch.where(nan, torch.full_like(log_ratio, -math.inf), log_ratio)
    prob = log_ratio.clamp(max=0.0).exp()
    u = torch.rand(log_ratio.shape, generator=generator, dtype=log_ratio.dtype, device=log_ratio.device)
    return u < prob, prob, nan
