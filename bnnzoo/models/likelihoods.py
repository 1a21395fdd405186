"""Likelihoods: how the network output ``f`` (shape ``[*batch, N, out]``) explains ``y``.

Each likelihood knows the extra latent sites it needs (a learned noise variance),
the task it solves, the number of network outputs it expects, and the
distribution of ``y`` given ``f``, batched over leading (chain) dimensions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, ClassVar, NamedTuple

import torch
from pyro import distributions as dist

from .errors import SpecError, check_positive, from_table
from .priors import Site, Values


Tensor = torch.Tensor


class AnalyticLoss(NamedTuple):
    """A likelihood's negative log density as the analytic gradient path of
    :class:`~bnnzoo.inference.potential.BNNPotential` evaluates it, beside its density.

    ``target(y, units, dtype)``: the labels in the layout of the outputs ``f [*batch, N, k]``;
    ``loss(f, target, scale)``: ``(U [*batch], dU/df)`` of the data, times ``scale``, without
    ``constant`` (added once with the priors'; it may overwrite the fresh tensors it makes);
    ``graph_loss``: the same with its constant, written as a ``torch.compile`` graph fuses it
    best (None: no graph); ``constant``: the part of ``U`` that depends on neither ``f`` nor
    the likelihood's own parameters, for all rows.

    A likelihood with sampled parameters of its own (``num_params`` unconstrained coordinates,
    the last of ``theta``: a learned noise variance) has ``loss(f, target, scale, u)`` with
    ``u [*batch, num_params]``, returning ``(U, dU/df, dU/du)``; its ``U`` holds the parameters'
    prior and log-Jacobian too (neither scaled)."""

    target: Callable[[Tensor, int, torch.dtype], Tensor]
    loss: Callable
    graph_loss: Callable | None
    constant: float = 0.0
    num_params: int = 0


def _column_target(y: Tensor, units: int, dtype: torch.dtype) -> Tensor:
    return y.to(dtype).unsqueeze(-1)  # [N, 1], like f


def _bernoulli_loss(f: Tensor, y: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``-log Bernoulli(y | logits f)`` summed, and ``sigmoid(f) - y``, both times ``scale``."""
    value = torch.nn.functional.binary_cross_entropy_with_logits(f, y.expand_as(f), reduction="none")
    return scale * value.sum((-1, -2)), scale * (torch.sigmoid(f) - y)


def _onehot_target(y: Tensor, units: int, dtype: torch.dtype) -> Tensor:
    return torch.nn.functional.one_hot(y.long(), units).to(dtype)


def _categorical_loss(f: Tensor, onehot: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``-log softmax(f)[y]`` summed, and ``softmax(f) - onehot(y)``, both times ``scale``."""
    logp = torch.log_softmax(f, -1)
    return -scale * (logp * onehot).sum((-1, -2)), scale * (logp.exp() - onehot)


class Likelihood:
    """Base class; subclasses are frozen dataclasses."""

    kind: ClassVar[str] = ""
    task: ClassVar[str] = ""

    def sites(self) -> list[Site]:
        """Extra latent sites (e.g. a learned noise variance); none by default."""
        return []

    def output_units(self) -> int | None:
        """The number of network outputs this likelihood needs (None: one per class, >= 2)."""
        return 1

    def distribution(self, f: torch.Tensor, values: Values) -> dist.Distribution:
        """The distribution of ``y`` (batch shape ``[*batch, N]``) given outputs ``f``."""
        raise NotImplementedError

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """Predictive mean of y given f: the regression value or class probabilities."""
        raise NotImplementedError

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    def analytic(self, num_data: int) -> AnalyticLoss | None:
        """The loss of ``num_data`` rows as the analytic gradient path computes it (None: that
        path does not serve this likelihood; the potential uses autograd)."""
        return None


@dataclass(frozen=True)
class GaussianLikelihood(Likelihood):
    """``y ~ N(f, noise^2)``; ``noise="learned"`` samples the variance
    ``noise_var ~ InverseGamma(noise_prior[0], noise_prior[1])``."""

    noise: float | str = 0.1
    noise_prior: tuple[float, float] = (1.0, 1.0)
    kind: ClassVar[str] = "gaussian"
    task: ClassVar[str] = "regression"

    def __post_init__(self):
        if self.noise != "learned":
            if isinstance(self.noise, str):
                raise SpecError("noise", f"must be a positive number or 'learned', got {self.noise!r}")
            check_positive("noise", self.noise)
        prior = tuple(self.noise_prior) if isinstance(self.noise_prior, (list, tuple)) else ()
        if len(prior) != 2:
            raise SpecError("noise_prior", f"must be [concentration, rate], got {self.noise_prior!r}")
        check_positive("noise_prior[0]", prior[0])
        check_positive("noise_prior[1]", prior[1])
        object.__setattr__(self, "noise_prior", (float(prior[0]), float(prior[1])))

    @property
    def learned(self) -> bool:
        return self.noise == "learned"

    def sites(self):
        if not self.learned:
            return []
        def noise_var(values):  # torch's default dtype and device when built
            return dist.InverseGamma(*(torch.tensor(v, dtype=torch.get_default_dtype()) for v in self.noise_prior))

        return [Site("noise_var", (), noise_var)]

    def scale(self, values: Values, like: torch.Tensor) -> torch.Tensor:
        """Noise standard deviation, shaped to broadcast against ``[*batch, N]``."""
        if self.learned:
            return values["noise_var"].sqrt().unsqueeze(-1)
        return torch.tensor(float(self.noise), dtype=like.dtype, device=like.device)

    def distribution(self, f, values):
        loc = f[..., 0]
        return dist.Normal(loc, self.scale(values, loc))

    def mean(self, f):
        return f[..., 0]

    def analytic(self, num_data):
        """The Gaussian loss with a fixed noise; with ``noise="learned"``, of the unconstrained
        ``u = log(noise_var)`` as well (:meth:`_learned_analytic`)."""
        if self.learned:
            return self._learned_analytic(num_data)
        inv_var = 1.0 / float(self.noise) ** 2
        # N log(noise) + N/2 log(2 pi): the same for a minibatch once scaled by N/B
        constant = num_data * (math.log(float(self.noise)) + 0.5 * math.log(2 * math.pi))

        def loss(f, y, scale):
            """``|f - y|^2 / (2 noise^2)`` summed, times ``scale``, and its gradient."""
            r = f - y
            flat = r.reshape(r.shape[:-2] + (-1,))
            value = torch.linalg.vecdot(flat, flat).mul_(0.5 * scale * inv_var)
            return value, r.mul_(scale * inv_var)

        def graph_loss(f, y, scale):
            r = f - y
            return (0.5 * scale * inv_var) * r.square().sum((-1, -2)) + constant, r * (scale * inv_var)

        return AnalyticLoss(_column_target, loss, graph_loss, constant)

    def _learned_analytic(self, num_data: int) -> AnalyticLoss:
        r"""With :math:`v = e^u` the noise variance, :math:`S = \sum_n (f_n - y_n)^2` over the
        B rows of a call and ``scale`` :math:`s = N/B`:

        .. math::
            U = \tfrac{s}{2} S e^{-u} + (\tfrac{sB}{2} + a) u + b e^{-u} + \text{const},\quad
            \partial U/\partial u = -\tfrac{s}{2} S e^{-u} + \tfrac{sB}{2} + a - b e^{-u},\quad
            \partial U/\partial f_n = s (f_n - y_n) e^{-u}

        (the likelihood, the InverseGamma(a, b) prior of :math:`v` and :math:`-\log|dv/du| = -u`);
        const :math:`= \tfrac{N}{2}\log 2\pi - a\log b + \log\Gamma(a)`."""
        a, b = self.noise_prior
        constant = num_data * 0.5 * math.log(2 * math.pi) - a * math.log(b) + math.lgamma(a)

        def terms(r, squares, scale, u):
            """``U`` without its constant, ``dU/du`` and the factor ``s e^{-u}`` of ``dU/df``."""
            u = u[..., 0]
            precision = torch.exp(-u)
            half_rows = 0.5 * scale * r.shape[-2]
            data = (0.5 * scale) * squares * precision
            value = data + (half_rows + a) * u + b * precision
            grad_u = (half_rows + a) - data - b * precision
            return value, grad_u.unsqueeze(-1), (scale * precision)[..., None, None]

        def loss(f, y, scale, u):
            r = f - y
            flat = r.reshape(r.shape[:-2] + (-1,))
            value, grad_u, factor = terms(r, torch.linalg.vecdot(flat, flat), scale, u)
            return value, r.mul_(factor), grad_u

        def graph_loss(f, y, scale, u):
            r = f - y
            value, grad_u, factor = terms(r, r.square().sum((-1, -2)), scale, u)
            return value + constant, r * factor, grad_u

        return AnalyticLoss(_column_target, loss, graph_loss, constant, num_params=1)

    def to_dict(self):
        d = {"kind": self.kind, "noise": self.noise}
        if self.learned or self.noise_prior != (1.0, 1.0):  # kept by a round trip even where unused
            d["noise_prior"] = list(self.noise_prior)
        return d


@dataclass(frozen=True)
class Bernoulli(Likelihood):
    """Binary labels in {0, 1}; one output, the logit."""

    kind: ClassVar[str] = "bernoulli"
    task: ClassVar[str] = "classification"

    def distribution(self, f, values):
        return dist.Bernoulli(logits=f[..., 0])

    def analytic(self, num_data):
        return AnalyticLoss(_column_target, _bernoulli_loss, _bernoulli_loss)

    def mean(self, f):
        p1 = torch.sigmoid(f[..., 0])
        return torch.stack([1 - p1, p1], -1)


@dataclass(frozen=True)
class Categorical(Likelihood):
    """Labels in {0, ..., K-1}; K outputs, the logits."""

    kind: ClassVar[str] = "categorical"
    task: ClassVar[str] = "classification"

    def output_units(self):
        return None

    def distribution(self, f, values):
        return dist.Categorical(logits=f)

    def analytic(self, num_data):
        return AnalyticLoss(_onehot_target, _categorical_loss, _categorical_loss)

    def mean(self, f):
        return torch.softmax(f, -1)


LIKELIHOODS: dict[str, type[Likelihood]] = {
    cls.kind: cls for cls in (GaussianLikelihood, Bernoulli, Categorical)
}


def likelihood_from_dict(d, field: str = "likelihood") -> Likelihood:
    """Build a likelihood from ``{"kind": ..., **params}`` or a bare kind name."""
    return d if isinstance(d, Likelihood) else from_table(d, field, LIKELIHOODS, "likelihood")
