"""Declarative model specification: layers, priors, likelihood.

A :class:`BNNSpec` is plain data. It converts to and from a dict (and so TOML)
without loss: ``BNNSpec.from_dict(spec.to_dict()) == spec``. Every check runs
when the spec is built, and a wrong spec raises :class:`SpecError` naming the
field and the value.
"""

from __future__ import annotations

import math
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Mapping

from ..validation import boolean, integer
from .activations import ACTIVATIONS
from .errors import SpecError, choose
from .likelihoods import GaussianLikelihood, Likelihood, likelihood_from_dict
from .priors import Gaussian, Prior, prior_from_dict



def _check_int(name: str, value: Any, minimum: int = 1) -> None:
    integer(name, value, minimum, error=SpecError)


def _check_bias(value: Any) -> None:
    boolean("bias", value, error=SpecError)


def _check_activation(value: Any) -> None:
    if value is not None and value not in ACTIVATIONS:
        raise choose("activation", value, ACTIVATIONS, "activation")


@dataclass(frozen=True)
class Dense:
    """Fully connected layer ``h -> act(h W^T + b)``; weight shape ``[units, in]``."""

    units: int
    activation: str | None = None
    bias: bool = True
    kind: ClassVar[str] = "dense"

    def __post_init__(self):
        _check_int("units", self.units)
        _check_activation(self.activation)
        _check_bias(self.bias)


@dataclass(frozen=True)
class Conv2d:
    """2-D convolution, then the activation, then an optional ``pool x pool``
    max-pool. Weight shape ``[channels, in_channels, kernel_size, kernel_size]``.
    A Dense layer after a Conv2d flattens its input."""

    channels: int
    kernel_size: int = 3
    stride: int = 1
    padding: int = 0
    activation: str | None = None
    pool: int | None = None
    bias: bool = True
    kind: ClassVar[str] = "conv2d"

    def __post_init__(self):
        _check_int("channels", self.channels)
        _check_int("kernel_size", self.kernel_size)
        _check_int("stride", self.stride)
        _check_int("padding", self.padding, minimum=0)
        _check_activation(self.activation)
        if self.pool is not None:
            _check_int("pool", self.pool)
        _check_bias(self.bias)

    def output_shape(self, shape: tuple[int, int, int]) -> tuple[int, int, int]:
        """``(C, H, W)`` after convolution and pooling of an input ``shape``."""
        _, h, w = shape
        size = lambda n: (n + 2 * self.padding - self.kernel_size) // self.stride + 1  # noqa: E731
        h, w = size(h), size(w)
        if self.pool:
            h, w = h // self.pool, w // self.pool
        return (self.channels, h, w)


Layer = Dense | Conv2d
LAYERS: dict[str, type] = {"dense": Dense, "conv2d": Conv2d}


def _layer_from_dict(d: Any, index: int) -> Layer:
    where = f"layers[{index}]"
    if isinstance(d, (Dense, Conv2d)):
        return d
    if not isinstance(d, Mapping):
        raise SpecError(where, f"expected a table such as {{units = 50}}, got {d!r}")
    d = dict(d)
    kind = d.pop("kind", "conv2d" if "channels" in d else "dense")
    if not isinstance(kind, str) or kind not in LAYERS:
        raise choose(f"{where}.kind", kind, LAYERS, "layer kind")
    cls = LAYERS[kind]
    valid = {f.name for f in fields(cls)}
    for key in d:
        if key not in valid:
            raise choose(f"{where}.{key}", key, valid, f"field of a {kind} layer")
    required = "units" if cls is Dense else "channels"
    if required not in d:
        raise SpecError(f"{where}.{required}", f"missing: a {kind} layer needs {required}")
    try:
        return cls(**d)
    except SpecError as e:
        raise e.within(where) from None


def _layer_to_dict(layer: Layer) -> dict:
    d: dict[str, Any] = {} if isinstance(layer, Dense) else {"kind": layer.kind}
    for f in fields(layer):
        value = getattr(layer, f.name)
        if value is not None:
            d[f.name] = value
    return d


@dataclass
class BNNSpec:
    """A Bayesian neural network: layers, priors and likelihood.

    Parameters
    ----------
    layers : sequence of Dense / Conv2d
        The last layer's units must match the likelihood (1 for Gaussian and
        Bernoulli, ``num_classes`` for Categorical).
    input_dim : int
        Width of a row of ``x``. For convolutional models give ``input_shape``
        ``(C, H, W)`` instead (rows of ``x`` are reshaped to it).
    prior : Prior
        Default prior of every weight and bias.
    priors : dict
        Per-site overrides, keyed ``"layers.<i>.weight"``, ``"layers.<i>.bias"``
        or ``"layers.<i>"`` (both).
    likelihood : Likelihood
    num_classes : int, optional
        For Categorical likelihoods; defaults to the last layer's units.
    """

    layers: tuple = ()
    input_dim: int | None = None
    input_shape: tuple[int, int, int] | None = None
    prior: Prior = field(default_factory=Gaussian)
    priors: dict[str, Prior] = field(default_factory=dict)
    likelihood: Likelihood = field(default_factory=GaussianLikelihood)
    name: str | None = None

    KEYS: ClassVar[tuple[str, ...]] = (
        "layers", "input_dim", "input_shape", "prior", "priors", "likelihood", "name",
    )

    def __post_init__(self):
        self.layers = tuple(_layer_from_dict(layer, i) for i, layer in enumerate(self.layers))
        self.prior = prior_from_dict(self.prior, "prior")
        if not isinstance(self.priors, Mapping):
            raise SpecError("priors", f"must be a table of site = prior, e.g. {{'layers.0.weight' = 'laplace'}}, "
                                      f"got {self.priors!r}")
        self.priors = {
            str(k): prior_from_dict(v, f"priors.{k}") for k, v in dict(self.priors).items()
        }
        self.likelihood = likelihood_from_dict(self.likelihood, "likelihood")
        if self.input_shape is not None:
            if not isinstance(self.input_shape, (list, tuple)):
                raise SpecError("input_shape", f"must be [channels, height, width], got {self.input_shape!r}")
            self.input_shape = tuple(self.input_shape)
        if self.name is not None and not isinstance(self.name, str):
            raise SpecError("name", f"must be a string, got {self.name!r}")
        self._check()

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        if not self.layers:
            raise SpecError("layers", "a model needs at least one layer")
        self._check_input()
        shapes = self.param_shapes()  # raises on layers that do not fit
        for key in self.priors:
            if key not in shapes and key not in self._layer_keys():
                raise choose(f"priors.{key}", key, list(shapes) + self._layer_keys(), "site")
        for site, shape in shapes.items():
            try:
                self.prior_for(site).check_shape(shape)
            except SpecError as e:
                key = site if site in self.priors else site.rsplit(".", 1)[0]
                field = e.within(f"priors.{key}" if key in self.priors else "prior").field
                raise SpecError(field, f"{e.detail} ({site})") from None
        if not self._last_is_dense():
            raise SpecError(f"layers[{len(self.layers) - 1}]", "the last layer must be dense")
        units = self.likelihood.output_units()
        last = self.layers[-1].units
        if units is None and last < 2:
            raise SpecError(
                f"layers[{len(self.layers) - 1}].units",
                f"a categorical likelihood needs >= 2 outputs (one per class), got {last}",
            )
        if units is not None and last != units:
            raise SpecError(
                f"layers[{len(self.layers) - 1}].units",
                f"a {self.likelihood.kind} likelihood needs {units} output unit(s), got {last}",
            )

    def _check_input(self) -> None:
        has_conv = any(isinstance(layer, Conv2d) for layer in self.layers)
        if self.input_shape is not None:
            if len(self.input_shape) != 3:
                raise SpecError("input_shape", f"must be [channels, height, width], got {list(self.input_shape)}")
            for i, n in enumerate(self.input_shape):
                _check_int(f"input_shape[{i}]", n)
            if self.input_dim is not None and self.input_dim != math.prod(self.input_shape):
                raise SpecError(
                    "input_dim",
                    f"{self.input_dim} does not match input_shape {list(self.input_shape)} "
                    f"({math.prod(self.input_shape)} values)",
                )
        elif has_conv:
            raise SpecError("input_shape", "a model with Conv2d layers needs input_shape = [C, H, W]")
        elif self.input_dim is None:
            raise SpecError("input_dim", "missing: give the number of input features")
        else:
            _check_int("input_dim", self.input_dim)

    def _last_is_dense(self) -> bool:
        return isinstance(self.layers[-1], Dense)

    def _layer_keys(self) -> list[str]:
        return [f"layers.{i}" for i in range(len(self.layers))]

    # ------------------------------------------------------------- structure
    @property
    def num_inputs(self) -> int:
        """Number of input features per row of ``x``."""
        return math.prod(self.input_shape) if self.input_shape else int(self.input_dim)

    @property
    def num_classes(self) -> int | None:
        if self.likelihood.task != "classification":
            return None
        return 2 if self.layers[-1].units == 1 else self.layers[-1].units

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every weight and bias, in layer order (``layers.<i>.weight``, ``.bias``)."""
        shapes: dict[str, tuple[int, ...]] = {}
        feature: Any = self.input_shape if self.input_shape else (self.input_dim,)
        for i, layer in enumerate(self.layers):
            where = f"layers[{i}]"
            if isinstance(layer, Conv2d):
                if len(feature) != 3:
                    raise SpecError(where, "a Conv2d layer cannot follow a Dense layer")
                weight = (layer.channels, feature[0], layer.kernel_size, layer.kernel_size)
                feature = layer.output_shape(feature)
                if min(feature[1:]) < 1:
                    raise SpecError(where, f"the image shrinks to nothing ({list(feature)}); use padding or fewer pools")
            else:
                weight = (layer.units, math.prod(feature))
                feature = (layer.units,)
            shapes[f"layers.{i}.weight"] = weight
            if layer.bias:
                shapes[f"layers.{i}.bias"] = (weight[0],)
        return shapes

    def prior_for(self, site: str) -> Prior:
        """The prior of one weight or bias: its own override, its layer's, or the default."""
        layer = site.rsplit(".", 1)[0]
        return self.priors.get(site) or self.priors.get(layer) or self.prior

    # ------------------------------------------------------------ conversion
    def to_dict(self) -> dict:
        d: dict[str, Any] = {"layers": [_layer_to_dict(layer) for layer in self.layers]}
        if self.input_dim is not None:
            d["input_dim"] = self.input_dim
        if self.input_shape is not None:
            d["input_shape"] = list(self.input_shape)
        d["prior"] = self.prior.to_dict()
        if self.priors:
            d["priors"] = {k: v.to_dict() for k, v in self.priors.items()}
        d["likelihood"] = self.likelihood.to_dict()
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "BNNSpec":
        if not isinstance(d, Mapping):
            raise SpecError("model", f"expected a table, got {d!r}")
        for key in d:
            if key not in cls.KEYS:
                raise choose(key, key, cls.KEYS, "model field")
        if "layers" not in d:
            raise SpecError("layers", "missing: list the layers, e.g. [{units = 50, activation = 'tanh'}, {units = 1}]")
        if not isinstance(d["layers"], (list, tuple)):
            raise SpecError("layers", f"must be a list of layer tables, got {d['layers']!r}")
        return cls(**dict(d))


def read_toml(path: str | Path, what: str = "spec file") -> dict:
    """A TOML file as a dict; a missing file or bad TOML is a one-line error naming the path."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    with path.open("rb") as fh:
        try:
            return tomllib.load(fh)
        except tomllib.TOMLDecodeError as e:
            raise SpecError(str(path), f"not valid TOML: {e}") from None


def load_spec(path: str | Path) -> BNNSpec:
    """Read the ``[model]`` table of a TOML file (or the whole file if it has none)."""
    doc = read_toml(path)
    return BNNSpec.from_dict(doc.get("model", doc))


def spec_from(obj: Any) -> BNNSpec:
    """A :class:`BNNSpec` from a spec, a dict, or a TOML path."""
    if isinstance(obj, BNNSpec):
        return obj
    if isinstance(obj, Mapping):
        return BNNSpec.from_dict(obj)
    if isinstance(obj, (str, Path)) and str(obj).endswith(".toml"):
        return load_spec(obj)
    raise TypeError(f"cannot build a model spec from {type(obj).__name__} {obj!r}")
