"""Priors on network weights.

Every prior is a small frozen dataclass. It knows

* the Pyro sample sites it needs for a weight tensor of a given shape
  (:meth:`Prior.sites`): one site for most priors, three for the horseshoe
  (global scale, local scales, weight);
* its split into a smooth part and an L1 weight (:meth:`Prior.split`), which
  proximal kernels use: ``-log p(w) = -log p_smooth(w) + l1 * ||w||_1 + const``.

Each site's distribution is a function of the values of the sites before it, so
the Pyro model and the fast flat-vector potential build *the same*
distribution objects; values may carry leading batch (chain) dimensions.

References
----------
* Spike-and-slab Gaussian-Laplace: Deng, Zhang, Liang and Lin (2019), "An adaptive
  empirical Bayesian method for sparse deep learning", eq. (4).
* Group spike-and-slab: one indicator per group of weights (paper 004).
* Horseshoe: Carvalho, Polson and Scott (2010).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Callable, ClassVar, Mapping

import torch
from pyro import distributions as dist
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from .errors import SpecError, check_positive, check_probability, choose, from_table

Values = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Site:
    """One latent sample site: its name, its (event) shape, and its distribution
    as a function of the values of the sites it depends on (``parents``,
    declared before it). A site without parents has a fixed distribution,
    built once."""

    name: str
    shape: tuple[int, ...]
    dist: Callable[[Values], dist.Distribution]
    parents: tuple[str, ...] = ()
    #: set when the site's density is a product of iid terms ``prior.log_density(w_i)``
    elementwise: "Prior | None" = None


def _event(d: dist.Distribution, shape: tuple[int, ...]) -> dist.Distribution:
    """Expand an elementwise distribution to ``shape`` and make it one event."""
    return d.expand(torch.Size(shape)).to_event(len(shape))


def _const(value: float) -> torch.Tensor:
    return torch.tensor(float(value), dtype=torch.get_default_dtype())


class Prior:
    """Base class of weight priors (see the module docstring)."""

    kind: ClassVar[str] = ""

    #: True when the prior is iid over the weights with density :meth:`log_density`
    elementwise: ClassVar[bool] = False

    def sites(self, name: str, shape: tuple[int, ...]) -> list[Site]:
        """The sample sites for a weight called ``name`` with ``shape``; the last is the weight."""
        return [Site(name, tuple(shape), lambda values: self.distribution(shape),
                     elementwise=self if self.elementwise else None)]

    def log_density(self, w: torch.Tensor) -> torch.Tensor:
        """Elementwise log density (only for ``elementwise`` priors): a fast path
        that must equal ``distribution`` term by term."""
        raise NotImplementedError

    def log_density_grad(self, w: torch.Tensor) -> torch.Tensor:
        """Elementwise ``d log_density(w) / dw`` (only for ``elementwise`` priors),
        equal to what autograd gives for :meth:`log_density` (at a kink, its subgradient)."""
        raise NotImplementedError

    def distribution(self, shape: tuple[int, ...]) -> dist.Distribution:
        """The distribution of a whole weight tensor, one event of ``shape``."""
        raise NotImplementedError

    def check_shape(self, shape: tuple[int, ...]) -> None:
        """Raise a :class:`SpecError` if this prior cannot apply to a weight of ``shape``."""

    def split(self) -> tuple["Prior | None", float]:
        """``(smooth_part, l1)``: ``-log p(w) = -log smooth(w) + l1 * ||w||_1 + const``.

        ``smooth_part`` is None when nothing smooth remains (pure Laplace).
        """
        return self, 0.0

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class Gaussian(Prior):
    """Independent ``N(0, scale^2)`` on every weight."""

    scale: float = 1.0
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self):
        check_positive("scale", self.scale)

    elementwise: ClassVar[bool] = True

    def distribution(self, shape):
        return _event(dist.Normal(_const(0.0), _const(self.scale)), shape)

    def log_density(self, w):
        return _gaussian_log_density(w, self.scale)

    def log_density_grad(self, w):
        return w * (-1.0 / self.scale ** 2)


@dataclass(frozen=True)
class Laplace(Prior):
    """Independent ``Laplace(0, scale)`` on every weight: an L1 penalty with weight 1/scale."""

    scale: float = 1.0
    kind: ClassVar[str] = "laplace"

    def __post_init__(self):
        check_positive("scale", self.scale)

    elementwise: ClassVar[bool] = True

    def distribution(self, shape):
        return _event(dist.Laplace(_const(0.0), _const(self.scale)), shape)

    def log_density(self, w):
        return _laplace_log_density(w, self.scale)

    def log_density_grad(self, w):
        return torch.sign(w) * (-1.0 / self.scale)  # sign(0) = 0, autograd's subgradient of |w|

    def split(self):
        return None, 1.0 / self.scale


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _log(x):
    """``log`` of a number (numpy's scalars included) or a tensor."""
    return math.log(x) if isinstance(x, numbers.Real) else torch.log(x)


def _gaussian_log_density(w, scale):
    return -0.5 * (w / scale) ** 2 - _log(scale) - _HALF_LOG_2PI


def _laplace_log_density(w, scale):
    return -w.abs() / scale - _log(2 * scale)


def spike_slab_log_density(w, spike: str, spike_scale, slab_scale, inclusion_prob) -> torch.Tensor:
    r"""Elementwise :math:`\log[(1-\delta)\,\text{spike}(w) + \delta\,N(w; 0, s_1^2)]`."""
    spike_lp = (_laplace_log_density if spike == "laplace" else _gaussian_log_density)(w, spike_scale)
    return torch.logaddexp(_log(1 - inclusion_prob) + spike_lp,
                           _log(inclusion_prob) + _gaussian_log_density(w, slab_scale))


def spike_slab_log_density_grad(w, spike: str, spike_scale, slab_scale, inclusion_prob) -> torch.Tensor:
    r"""Elementwise derivative of :func:`spike_slab_log_density`: the components'
    gradients weighted by their responsibilities, :math:`(1-r)\,\partial\log\text{spike}
    + r\,\partial\log N(w; 0, s_1^2)` with :math:`r = P(\text{slab} \mid w)`."""
    if spike == "laplace":
        spike_lp, spike_grad = _laplace_log_density(w, spike_scale), torch.sign(w) * (-1.0 / spike_scale)
    else:
        spike_lp, spike_grad = _gaussian_log_density(w, spike_scale), w * (-1.0 / spike_scale ** 2)
    slab = torch.sigmoid(_log(inclusion_prob) + _gaussian_log_density(w, slab_scale)
                         - _log(1 - inclusion_prob) - spike_lp)
    return torch.lerp(spike_grad, w * (-1.0 / slab_scale ** 2), slab)


class SpikeSlabMixture(TorchDistribution):
    r"""Elementwise two-component mixture with the indicator marginalised:

    .. math:: p(w) = (1-\delta)\,\text{spike}(w) + \delta\, N(w; 0, s_1^2)

    where the spike is ``Laplace(0, s_0)`` or ``N(0, s_0^2)``.
    """

    arg_constraints = {}
    support = constraints.real
    has_rsample = False

    def __init__(self, spike: str, spike_scale, slab_scale, inclusion_prob, validate_args=None):
        self.spike_kind = spike
        self.spike_scale = torch.as_tensor(spike_scale, dtype=torch.get_default_dtype())
        self.slab_scale = torch.as_tensor(slab_scale, dtype=torch.get_default_dtype())
        self.inclusion_prob = torch.as_tensor(inclusion_prob, dtype=torch.get_default_dtype())
        batch_shape = torch.broadcast_shapes(
            self.spike_scale.shape, self.slab_scale.shape, self.inclusion_prob.shape
        )
        super().__init__(batch_shape, torch.Size(), validate_args=validate_args)

    def _components(self):
        zero = self.slab_scale.new_zeros(())
        spike_cls = dist.Laplace if self.spike_kind == "laplace" else dist.Normal
        return spike_cls(zero, self.spike_scale), dist.Normal(zero, self.slab_scale)

    def expand(self, batch_shape, _instance=None):
        shape = torch.Size(batch_shape)
        return SpikeSlabMixture(
            self.spike_kind,
            self.spike_scale.expand(shape),
            self.slab_scale.expand(shape),
            self.inclusion_prob.expand(shape),
        )

    def log_prob(self, value):
        return spike_slab_log_density(value, self.spike_kind, self.spike_scale, self.slab_scale,
                                      self.inclusion_prob)

    def inclusion_posterior(self, value):
        """P(gamma = 1 | w): the posterior probability that ``w`` is in the slab."""
        spike, slab = self._components()
        a = torch.log(self.inclusion_prob) + slab.log_prob(value)
        b = torch.log1p(-self.inclusion_prob) + spike.log_prob(value)
        return torch.sigmoid(a - b)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        spike, slab = self._components()
        with torch.no_grad():
            gamma = torch.rand(shape, dtype=self.inclusion_prob.dtype, device=self.inclusion_prob.device) \
                < self.inclusion_prob.expand(shape)
            return torch.where(gamma, slab.sample(sample_shape), spike.sample(sample_shape))


@dataclass(frozen=True)
class SpikeAndSlab(Prior):
    r"""Spike-and-slab prior with the indicator marginalised (paper 001, eq. 4):

    .. math:: w \sim (1-\delta)\,\text{Laplace}(0, \sigma v_0) + \delta\, N(0, \sigma^2 v_1)

    ``spike="gaussian"`` uses ``N(0, sigma^2 v0)`` as the spike instead.
    ``inclusion_prob`` is delta. The SA kernels adapt sigma, delta and the
    inclusion probabilities; NUTS and SVI use this density as it stands.
    """

    v0: float = 0.1
    v1: float = 10.0
    sigma: float = 1.0
    inclusion_prob: float = 0.5
    spike: str = "laplace"
    kind: ClassVar[str] = "spike_and_slab"

    def __post_init__(self):
        check_positive("v0", self.v0)
        check_positive("v1", self.v1)
        check_positive("sigma", self.sigma)
        check_probability("inclusion_prob", self.inclusion_prob)
        if self.spike not in ("laplace", "gaussian"):
            raise choose("spike", self.spike, ("laplace", "gaussian"))

    @property
    def spike_scale(self) -> float:
        """Laplace scale ``sigma v0``, or Gaussian sd ``sigma sqrt(v0)``."""
        return self.sigma * (self.v0 if self.spike == "laplace" else math.sqrt(self.v0))

    @property
    def slab_scale(self) -> float:
        """Slab standard deviation ``sigma sqrt(v1)``."""
        return self.sigma * math.sqrt(self.v1)

    elementwise: ClassVar[bool] = True

    def distribution(self, shape):
        mix = SpikeSlabMixture(self.spike, self.spike_scale, self.slab_scale, self.inclusion_prob)
        return _event(mix, shape)

    def log_density(self, w):
        return spike_slab_log_density(w, self.spike, self.spike_scale, self.slab_scale, self.inclusion_prob)

    def log_density_grad(self, w):
        return spike_slab_log_density_grad(w, self.spike, self.spike_scale, self.slab_scale, self.inclusion_prob)


GROUPINGS = ("auto", "input", "output", "kernel")


def group_dims(shape: tuple[int, ...], group: str) -> tuple[int, ...]:
    """The dims (negative, counted from the end) that lie *within* one group.

    Dense weights are ``[out, in]``; Conv2d weights ``[out, in, kh, kw]``.
    ``auto`` means input columns for Dense and kernels for Conv2d; a 1-D tensor
    (a bias) has one group per element.
    """
    rank = len(shape)
    if rank <= 1:
        return ()
    if group == "auto":
        group = "input" if rank == 2 else "kernel"
    table = {
        (2, "input"): (0,),
        (2, "output"): (1,),
        (4, "kernel"): (2, 3),
        (4, "input"): (0, 2, 3),
        (4, "output"): (1, 2, 3),
    }
    if (rank, group) not in table:
        raise SpecError("group", f"grouping {group!r} does not apply to a weight of shape {tuple(shape)}")
    return tuple(d - rank for d in table[(rank, group)])


class GroupSpikeSlab(TorchDistribution):
    r"""One spike-and-slab indicator per group of weights, marginalised:

    .. math:: p(w_g) = \pi \prod_i N(w_{gi}; 0, s_1^2) + (1-\pi) \prod_i N(w_{gi}; 0, s_0^2)

    The event is the whole weight tensor; ``within`` are the event dims that lie
    inside one group.
    """

    arg_constraints = {}
    support = constraints.real
    has_rsample = False

    def __init__(self, shape, within, spike_scale, slab_scale, inclusion_prob, validate_args=None):
        self._zero = torch.zeros(())  # the dtype and device of its draws: torch's defaults when built
        self.within = tuple(within)
        self.spike_scale = float(spike_scale)
        self.slab_scale = float(slab_scale)
        self.inclusion_prob = float(inclusion_prob)
        super().__init__(torch.Size(), torch.Size(shape), validate_args=validate_args)

    def group_log_probs(self, value):
        """Per-group ``(log pi + log slab, log(1-pi) + log spike)``, shape ``[*batch, *groups]``."""
        zero = value.new_zeros(())
        slab = dist.Normal(zero, self.slab_scale).log_prob(value)
        spike = dist.Normal(zero, self.spike_scale).log_prob(value)
        if self.within:
            slab, spike = slab.sum(self.within), spike.sum(self.within)
        return math.log(self.inclusion_prob) + slab, math.log1p(-self.inclusion_prob) + spike

    def log_prob(self, value):
        slab, spike = self.group_log_probs(value)
        per_group = torch.logaddexp(slab, spike)
        n_group_dims = len(self.event_shape) - len(self.within)
        return per_group.reshape(per_group.shape[: per_group.dim() - n_group_dims] + (-1,)).sum(-1)

    def inclusion_posterior(self, value):
        """P(group is in the slab | w), one value per group."""
        slab, spike = self.group_log_probs(value)
        return torch.sigmoid(slab - spike)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            gamma_shape = list(shape)
            for d in self.within:
                gamma_shape[d] = 1
            like = {"dtype": self._zero.dtype, "device": self._zero.device}
            gamma = torch.rand(gamma_shape, **like) < self.inclusion_prob
            scale = torch.where(gamma, self.slab_scale, self.spike_scale)
            return torch.randn(shape, **like) * scale


@dataclass(frozen=True)
class GroupSpikeAndSlab(Prior):
    """Group spike-and-slab Gaussian prior (paper 004): one marginalised
    indicator per group; groups are input columns of a Dense weight and kernels
    of a Conv2d weight by default (``group="auto"``), or ``"input"`` /
    ``"output"`` units, or ``"kernel"``."""

    slab_scale: float = 1.0
    spike_scale: float = 0.01
    inclusion_prob: float = 0.5
    group: str = "auto"
    kind: ClassVar[str] = "group_spike_and_slab"

    def __post_init__(self):
        check_positive("slab_scale", self.slab_scale)
        check_positive("spike_scale", self.spike_scale)
        check_probability("inclusion_prob", self.inclusion_prob)
        if self.group not in GROUPINGS:
            raise choose("group", self.group, GROUPINGS, "grouping")

    def check_shape(self, shape):
        group_dims(shape, self.group)

    def distribution(self, shape):
        return GroupSpikeSlab(
            shape, group_dims(shape, self.group), self.spike_scale, self.slab_scale, self.inclusion_prob
        )


def _expand_to(scalar: torch.Tensor, rank: int) -> torch.Tensor:
    """Append ``rank`` singleton dims so a per-chain scalar broadcasts over a weight."""
    return scalar.reshape(scalar.shape + (1,) * rank)


@dataclass(frozen=True)
class Horseshoe(Prior):
    r"""Horseshoe prior: :math:`w_i \sim N(0, \tau^2 \lambda_i^2)`,
    :math:`\lambda_i \sim C^+(0, 1)`, :math:`\tau \sim C^+(0, \text{global\_scale})`.

    Adds the sites ``<name>.global_scale`` and ``<name>.local_scale``.
    """

    global_scale: float = 1.0
    kind: ClassVar[str] = "horseshoe"

    def __post_init__(self):
        check_positive("global_scale", self.global_scale)

    def sites(self, name, shape):
        shape = tuple(shape)
        g, loc = f"{name}.global_scale", f"{name}.local_scale"

        def weight(values):
            scale = _expand_to(values[g], len(shape)) * values[loc]
            return dist.Normal(torch.zeros_like(scale), scale).to_event(len(shape))

        return [
            Site(g, (), lambda values: dist.HalfCauchy(_const(self.global_scale))),
            Site(loc, shape, lambda values: _event(dist.HalfCauchy(_const(1.0)), shape)),
            Site(name, shape, weight, parents=(g, loc)),
        ]


PRIORS: dict[str, type[Prior]] = {
    cls.kind: cls for cls in (Gaussian, Laplace, SpikeAndSlab, GroupSpikeAndSlab, Horseshoe)
}


def prior_from_dict(d, field: str = "prior") -> Prior:
    """Build a prior from ``{"kind": ..., **params}`` or a bare kind name."""
    return d if isinstance(d, Prior) else from_table(d, field, PRIORS, "prior")
