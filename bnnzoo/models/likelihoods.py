"""Likelihoods: how the network output ``f`` (shape ``[*batch, N, out]``) explains ``y``.

Each likelihood knows the extra latent sites it needs (a learned noise variance),
the task it solves, the number of network outputs it expects, and the
distribution of ``y`` given ``f``, batched over leading (chain) dimensions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import torch
from pyro import distributions as dist

from .errors import SpecError, check_positive, from_table
from .priors import Site, Values


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

    def mean(self, f):
        return torch.softmax(f, -1)


LIKELIHOODS: dict[str, type[Likelihood]] = {
    cls.kind: cls for cls in (GaussianLikelihood, Bernoulli, Categorical)
}


def likelihood_from_dict(d, field: str = "likelihood") -> Likelihood:
    """Build a likelihood from ``{"kind": ..., **params}`` or a bare kind name."""
    return d if isinstance(d, Likelihood) else from_table(d, field, LIKELIHOODS, "likelihood")
