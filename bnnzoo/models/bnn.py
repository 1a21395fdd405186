"""``BNN``: a Pyro model built from a :class:`BNNSpec`.

The network is written once, as a pure function of a dict of weights
(:meth:`BNN.apply`). Weights may carry one leading batch dimension (one entry
per chain or per posterior draw), so the same code serves the Pyro model, the
fast flat-vector potential of many chains, and posterior prediction.
"""

from __future__ import annotations

import math
from typing import Mapping

import pyro
import torch
import torch.nn.functional as F
from pyro.nn import PyroModule
from pyro.poutine.runtime import get_plates

from .activations import ACTIVATION_FUNCTIONS
from .defaults import tensor_defaults
from .likelihoods import Bernoulli, Likelihood
from .priors import Site
from .spec import BNNSpec, Conv2d, spec_from

OBSERVED = "obs"


def _conv(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, layer: Conv2d) -> torch.Tensor:
    """Convolution for plain (``w: [O, I, k, k]``) or batched weights (``w: [B, O, I, k, k]``).

    Batched weights run as one grouped convolution: the batch is folded into
    the channel dimension.
    """
    if w.dim() == 4:
        return F.conv2d(h, w, b, stride=layer.stride, padding=layer.padding)
    nb, out_ch, in_ch = w.shape[:3]
    if h.dim() == 4:  # the input image is shared by every batch member
        h = h.unsqueeze(0).expand(nb, *h.shape)
    n = h.shape[1]
    folded = h.transpose(0, 1).reshape(n, nb * in_ch, *h.shape[-2:])
    bias = None if b is None else b.reshape(-1)
    out = F.conv2d(folded, w.reshape(nb * out_ch, *w.shape[2:]), bias,
                   stride=layer.stride, padding=layer.padding, groups=nb)
    return out.reshape(n, nb, out_ch, *out.shape[-2:]).transpose(0, 1)


def _max_pool(h: torch.Tensor, size: int) -> torch.Tensor:
    lead = h.shape[:-3]
    pooled = F.max_pool2d(h.reshape(-1, *h.shape[-3:]), size)
    return pooled.reshape(*lead, *pooled.shape[-3:])


class BNN(PyroModule):
    """A Bayesian neural network as a Pyro model: ``model(x, y=None)``.

    Sample sites: every weight and bias (``layers.<i>.weight``,
    ``layers.<i>.bias``), any auxiliary prior sites (horseshoe scales), the
    learned noise variance ``noise_var`` if any, and the observed site ``obs``
    inside the plate ``data``.

    Examples
    --------
    >>> from bnnzoo.models import BNN, BNNSpec, Dense, Laplace
    >>> model = BNN(BNNSpec(layers=[Dense(20, "tanh"), Dense(1)], input_dim=1, prior=Laplace(1.0)))
    >>> f = model(torch.zeros(5, 1))   # a draw from the prior predictive
    """

    def __init__(self, spec: BNNSpec | Mapping | str):
        super().__init__()
        self.spec = spec_from(spec)
        self.param_shapes = self.spec.param_shapes()
        self.sites: list[Site] = [
            site
            for name, shape in self.param_shapes.items()
            for site in self.spec.prior_for(name).sites(name, shape)
        ] + self.likelihood.sites()
        self._fixed: dict[tuple, dict[str, pyro.distributions.Distribution]] = {}
        self._fixed_on(None, torch.get_default_dtype())  # a spec's distributions are built (and checked) now

    def _fixed_on(self, device: torch.device | None, dtype: torch.dtype) -> dict[str, pyro.distributions.Distribution]:
        """The distributions of the sites that depend on no other site, on ``device`` (None: torch's
        default) in ``dtype``: built once per device and dtype, without argument validation
        (samplers may probe NaN values, e.g. in a step-size search, which must come back as a NaN
        density, not an exception)."""
        key = (device, dtype)
        if key not in self._fixed:
            with pyro.validation_enabled(False), tensor_defaults(device, dtype):
                self._fixed[key] = {site.name: site.dist({}) for site in self.sites if not site.parents}
        return self._fixed[key]

    def site_distribution(self, site: Site, values: Mapping[str, torch.Tensor], like: torch.Tensor | None = None):
        """The distribution of ``site`` given the values of its parents, on the device and in the dtype
        of ``like`` (default: of ``values``; without either, torch's defaults)."""
        if site.parents:
            return site.dist(values)
        like = like if like is not None else next(iter(values.values()), None)
        if like is None or not like.is_floating_point():
            return self._fixed_on(None if like is None else like.device, torch.get_default_dtype())[site.name]
        return self._fixed_on(like.device, like.dtype)[site.name]

    # ----------------------------------------------------------- properties
    @property
    def likelihood(self) -> Likelihood:
        return self.spec.likelihood

    @property
    def task(self) -> str:
        return self.likelihood.task

    @property
    def num_params(self) -> int:
        """Number of scalar latent values (weights, biases and auxiliary scales)."""
        return sum(math.prod(site.shape) for site in self.sites)

    # -------------------------------------------------------------- network
    def prepare_input(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` reshaped to ``input_shape`` for convolutional models."""
        if self.spec.input_shape is not None and x.dim() == 2:
            return x.reshape(x.shape[0], *self.spec.input_shape)
        return x

    def apply(self, values: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Network output ``f`` for weights ``values``: ``[N, out]``, or
        ``[B, N, out]`` when every weight has one leading batch dim of size B."""
        h = self.prepare_input(x)
        for i, layer in enumerate(self.spec.layers):
            w = values[f"layers.{i}.weight"]
            b = values.get(f"layers.{i}.bias")
            if isinstance(layer, Conv2d):
                h = ACTIVATION_FUNCTIONS[layer.activation](_conv(h, w, b, layer))
                if layer.pool:
                    h = _max_pool(h, layer.pool)
                continue
            previous = self.spec.layers[i - 1] if i > 0 else None
            if isinstance(previous, Conv2d) or (i == 0 and self.spec.input_shape is not None):
                # a Dense layer flattens an image: a Conv2d's output, or an input_shape input
                h = h.flatten(-3)
            h = torch.matmul(h, w.transpose(-1, -2))
            if b is not None:
                h = h + b.unsqueeze(-2)
            h = ACTIVATION_FUNCTIONS[layer.activation](h)
        return h

    # ------------------------------------------------------------ densities
    def log_prior(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Sum of the log densities of every latent site (batched over leading dims)."""
        return sum(self.site_distribution(site, values).log_prob(values[site.name]) for site in self.sites)

    def observed(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` in the dtype the likelihood's distribution expects."""
        return y.to(torch.get_default_dtype()) if isinstance(self.likelihood, Bernoulli) else y

    def log_likelihood(self, values, x, y, f: torch.Tensor | None = None) -> torch.Tensor:
        """Pointwise log likelihood, shape ``[*batch, N]``."""
        f = self.apply(values, x) if f is None else f
        return self.likelihood.distribution(f, values).log_prob(self.observed(y))

    def log_joint(self, values, x, y) -> torch.Tensor:
        """``log p(values) + log p(y | x, values)``, shape ``[*batch]``."""
        return self.log_prior(values) + self.log_likelihood(values, x, y).sum(-1)

    # ----------------------------------------------------------- the model
    def _outer_batch(self, site: Site, value: torch.Tensor, outer_rank: int) -> torch.Size:
        """The batch shape of ``value`` outside the ``data`` plate.

        Under ``outer_rank`` enclosing plates (dims ``-2 ... -outer_rank-1``, the
        ``data`` plate being dim -1) a latent value drawn by Pyro has the batch
        shape ``[*outer, 1]``: its last batch dim is the data plate's slot. A value
        supplied from outside (``Predictive``'s posterior samples ``[S, *site_shape]``)
        may come without that slot: ``[*outer]``. Without enclosing plates the
        leading dims of a value are batch (chain) dims as they stand.
        """
        batch = value.shape[: value.dim() - len(site.shape)]
        if outer_rank == 0 or len(batch) <= outer_rank:
            return batch
        if len(batch) == outer_rank + 1 and batch[-1] == 1:
            return batch[:-1]
        raise ValueError(
            f"site {site.name!r}: value of shape {tuple(value.shape)} does not fit the site shape "
            f"{site.shape} under {outer_rank} enclosing plate(s): expected [*batch, {site.shape}] "
            f"with at most {outer_rank} batch dims, or [*batch, 1, {site.shape}]")

    def _batched_apply(self, values: Mapping[str, torch.Tensor], x: torch.Tensor,
                       batch: torch.Size) -> torch.Tensor:
        """``apply`` for weights with any batch shapes broadcasting to ``batch``:
        ``[*batch, N, out]`` (the batch is flattened to the one dim ``apply`` takes)."""
        if len(batch) == 0:
            return self.apply(values, x)
        flat = {name: values[name].expand(batch + shape).reshape((-1,) + tuple(shape))
                for name, shape in self.param_shapes.items() if name in values}
        f = self.apply(flat, x)
        return f.reshape(batch + f.shape[1:])

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Sample every latent site, then observe ``y`` in the plate ``data`` (dim -1).

        Batch-safe: under enclosing plates (``Predictive(parallel=True)`` draws S
        samples at once in a plate at dim -2) every latent value carries a batch
        shape ``[*outer, 1]`` (or ``[*outer]`` when supplied as posterior samples);
        the network output is ``[*outer, N, out]``, the likelihood's parameters
        (a learned noise) ``[*outer]``, and ``obs`` has batch shape ``[*outer, N]``.
        Returns the network output ``f``.
        """
        # enclosing plates take dims -2, -3, ...: the data plate is dim -1
        outer_rank = max((-frame.dim - 1 for frame in get_plates() if frame.vectorized), default=0)
        values: dict[str, torch.Tensor] = {}  # laid out as Pyro lays out batch dims: parents' input
        chain: dict[str, torch.Tensor] = {}  # batch dims outside the data plate only
        batches = []
        for site in self.sites:
            value = pyro.sample(site.name, self.site_distribution(site, values, x))
            batch = self._outer_batch(site, value, outer_rank)
            batches.append(batch)
            chain[site.name] = value.reshape(batch + site.shape)
            values[site.name] = value if outer_rank == 0 else value.reshape(batch + (1,) + site.shape)
        f = self._batched_apply(chain, x, torch.broadcast_shapes(*batches))
        with pyro.plate("data", x.shape[0], dim=-1, device=x.device):
            pyro.sample(OBSERVED, self.likelihood.distribution(f, chain),
                        obs=None if y is None else self.observed(y))
        return f
