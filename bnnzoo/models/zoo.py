"""Named models from the papers: ``zoo.get("cosine_mlp")`` returns a fresh :class:`BNNSpec`."""

from __future__ import annotations

from typing import Callable

from .errors import choose
from .likelihoods import Bernoulli, Categorical, GaussianLikelihood
from .priors import Gaussian, GroupSpikeAndSlab, Laplace, SpikeAndSlab
from .spec import BNNSpec, Conv2d, Dense

ZOO: dict[str, Callable[..., BNNSpec]] = {}


def register(fn: Callable[..., BNNSpec]) -> Callable[..., BNNSpec]:
    ZOO[fn.__name__] = fn
    return fn


@register
def cosine_mlp(hidden: int = 50, activation: str = "tanh", prior=None, noise: float = 0.1) -> BNNSpec:
    """1-hidden-layer MLP on the cosine data (paper 003: 50 units, N(0,1) prior, noise 0.1)."""
    return BNNSpec(
        layers=[Dense(hidden, activation), Dense(1)], input_dim=1,
        prior=prior or Gaussian(1.0), likelihood=GaussianLikelihood(noise), name="cosine_mlp",
    )


@register
def laplace_cnn(channels: int = 8, scale: float = 1.0, num_classes: int = 10) -> BNNSpec:
    """Small CNN for 8x8 digits with a Laplace prior (paper 000): conv, pool, conv, pool, dense."""
    return BNNSpec(
        layers=[
            Conv2d(channels, 3, padding=1, activation="relu", pool=2),
            Conv2d(channels, 3, padding=1, activation="relu", pool=2),
            Dense(num_classes),
        ],
        input_shape=(1, 8, 8), prior=Laplace(scale), likelihood=Categorical(), name="laplace_cnn",
    )


@register
def sparse_linear(p: int = 1000, v0: float = 0.1, v1: float = 10.0) -> BNNSpec:
    """Linear regression with a spike-and-slab prior (paper 001, large p small n)."""
    return BNNSpec(
        layers=[Dense(1, bias=False)], input_dim=p,
        prior=SpikeAndSlab(v0=v0, v1=v1), likelihood=GaussianLikelihood("learned", (0.5, 0.5)),
        name="sparse_linear",
    )


@register
def digits_mlp(hidden: int = 128, activation: str = "relu", prior=None) -> BNNSpec:
    """64-h-h-10 MLP for scikit-learn digits."""
    return BNNSpec(
        layers=[Dense(hidden, activation), Dense(hidden, activation), Dense(10)], input_dim=64,
        prior=prior or Gaussian(1.0), likelihood=Categorical(), name="digits_mlp",
    )


@register
def diabetes_mlp(hidden: int = 32, activation: str = "tanh", prior=None, noise: float = 0.7) -> BNNSpec:
    """10-h-1 MLP for scikit-learn's diabetes regression (standardised target). The noise sd is
    fixed: 0.7, about the residual sd of a linear fit on the standardised target (R^2 near 0.5)."""
    return BNNSpec(
        layers=[Dense(hidden, activation), Dense(1)], input_dim=10,
        prior=prior or Gaussian(1.0), likelihood=GaussianLikelihood(noise), name="diabetes_mlp",
    )


@register
def breast_cancer_mlp(hidden: int = 16, activation: str = "tanh", prior=None) -> BNNSpec:
    """30-h-1 MLP with a Bernoulli likelihood for scikit-learn's breast-cancer classification."""
    return BNNSpec(
        layers=[Dense(hidden, activation), Dense(1)], input_dim=30,
        prior=prior or Gaussian(1.0), likelihood=Bernoulli(), name="breast_cancer_mlp",
    )


@register
def wine_mlp(hidden: int = 16, activation: str = "tanh", prior=None) -> BNNSpec:
    """13-h-3 MLP for scikit-learn's wine classification (3 cultivars)."""
    return BNNSpec(
        layers=[Dense(hidden, activation), Dense(3)], input_dim=13,
        prior=prior or Gaussian(1.0), likelihood=Categorical(), name="wine_mlp",
    )


@register
def group_sparse_mlp(p: int = 1000) -> BNNSpec:
    """1000-5-3-1 ReLU network with a group spike-and-slab prior on input columns (paper 004)."""
    return BNNSpec(
        layers=[Dense(5, "relu"), Dense(3, "relu"), Dense(1)], input_dim=p,
        prior=Gaussian(1.0), priors={"layers.0.weight": GroupSpikeAndSlab()},
        likelihood=GaussianLikelihood(1.0), name="group_sparse_mlp",
    )


def get(name: str, **kw) -> BNNSpec:
    """A fresh spec of the named zoo model."""
    if name not in ZOO:
        raise choose("model", name, ZOO, "zoo model")
    return ZOO[name](**kw)
