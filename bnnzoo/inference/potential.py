"""Potential energy ``U(theta) = -log p(theta | data)`` on a flat unconstrained vector.

Every kernel of bnnzoo works on a flat tensor ``theta`` of shape ``[D]`` (one
chain) or ``[C, D]`` (C chains advanced as one batch). This module turns a model
into such a potential:

* :class:`BNNPotential` for :class:`~bnnzoo.models.BNN`: the log density is
  written directly in torch (the network's ``apply`` and the priors'
  distributions), with no Pyro tracing per call. It equals Pyro's potential
  (same unconstrained parametrisation ``biject_to(support)``, same Jacobian
  terms) and evaluates C chains in one batched forward/backward pass. It also
  gives the minibatch estimate ``-log p(theta) - (N/B) sum_{i in batch} log p(y_i|theta)``.
* :class:`PyroPotential` for any other Pyro model: Pyro's own ``potential_fn``
  from ``initialize_model``, one chain at a time.

Both expose the same interface (:class:`FlatPotential`), plus ``potential_fn``,
a dict-in/scalar-out function that Pyro's ``HMC``/``NUTS`` accept.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from typing import Callable, Mapping

import pyro
import torch
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad
from torch.distributions import biject_to
from torch.distributions.transforms import ComposeTransform, IndependentTransform, identity_transform

from ..models.bnn import ACTIVATION_FUNCTIONS, BNN
from ..models.likelihoods import Bernoulli, Categorical, GaussianLikelihood
from ..models.priors import Gaussian
from ..models.spec import Dense
from .integrators import leapfrog_step

Tensor = torch.Tensor


def is_identity(transform) -> bool:
    """True for the identity bijection, also when wrapped as an ``IndependentTransform``
    (what ``biject_to`` gives for the support of a multivariate real event)."""
    while isinstance(transform, IndependentTransform):
        transform = transform.base_transform
    return transform is identity_transform or (
        isinstance(transform, ComposeTransform) and not transform.parts)


class FlatPotential:
    """Shared layout machinery: site names, shapes and transforms, and the
    mapping between a flat vector ``[*, D]`` and a dict of site tensors.

    Subclasses implement :meth:`__call__` (``theta [*, D] -> U [*]``).
    ``transforms[name]`` maps constrained to unconstrained values, as in Pyro.
    """

    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    transforms: dict[str, torch.distributions.Transform]

    def _layout(self) -> None:
        self.sizes = [math.prod(self.shapes[n]) for n in self.names]
        self.dim = sum(self.sizes)

    @property
    def slices(self) -> dict[str, slice]:
        """Each site's index range in the flat vector: ``theta[..., slices[name]]``."""
        ends = itertools.accumulate(self.sizes)
        return {n: slice(end - size, end) for n, size, end in zip(self.names, self.sizes, ends)}

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """Unconstrained site values, each ``[*batch, *shape]``."""
        batch = theta.shape[:-1]
        parts = torch.split(theta, self.sizes, dim=-1)
        return {n: p.reshape(batch + self.shapes[n]) for n, p in zip(self.names, parts)}

    def flatten(self, params: Mapping[str, Tensor], batch_ndim: int = 0) -> Tensor:
        """Inverse of :meth:`unflatten`."""
        flat = [params[n].reshape(params[n].shape[:batch_ndim] + (-1,)) for n in self.names]
        return torch.cat(flat, dim=-1)

    def constrain(self, theta: Tensor) -> dict[str, Tensor]:
        """Constrained site values (what the model sees)."""
        return {n: self.transforms[n].inv(u) for n, u in self.unflatten(theta).items()}

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U(theta)`` and ``dU/dtheta``; chains in a batch are independent."""
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self(theta)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    def leapfrog_step(self, theta: Tensor, p: Tensor, grad: Tensor, step_size: float | Tensor,
                      inv_mass: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One leapfrog step on this potential (:func:`~bnnzoo.inference.integrators.leapfrog_step`)."""
        return leapfrog_step(theta, p, grad, step_size, inv_mass, self.value_and_grad)

    def potential_fn(self, params: Mapping[str, Tensor]) -> Tensor:
        """Pyro's ``potential_fn`` contract: dict of unconstrained values -> scalar."""
        return self(self.flatten(params))

    def __call__(self, theta: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------- smooth / L1 split
    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        r"""``[D]`` weights :math:`\beta` of the exact L1 part of ``U``:
        :math:`U(\theta) = f(\theta) + \sum_d \beta_d |\theta_d|` with ``f`` smooth
        (Lipschitz gradient) near :math:`\theta_d = 0`. Zero where a coordinate has
        no L1 part. The base class knows none (all zeros); subclasses override.
        """
        return torch.zeros(self.dim, dtype=torch.get_default_dtype())

    def smooth_value_and_grad(self, theta: Tensor, l1: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""The smooth part :math:`f = U - \sum_d \beta_d |\theta_d|` and its gradient
        :math:`\nabla U - \beta \odot \operatorname{sign}(\theta)` (``l1`` defaults to
        :meth:`l1_weights`). At :math:`\theta_d = 0` autograd gives
        :math:`\partial |\theta_d| = 0`, so the result is :math:`\nabla f` there too."""
        l1 = self.l1_weights() if l1 is None else l1
        value, grad = self.value_and_grad(theta)
        return value - (l1 * theta.abs()).sum(-1), grad - l1 * torch.sign(theta)


class BNNPotential(FlatPotential):
    """Fast potential of a :class:`BNN` on data ``(x, y)``.

    Parameters
    ----------
    model : BNN
    x, y : Tensor
        Training inputs and targets (validated beforehand).
    analytic : bool
        Use the hand-written backward pass where the model allows it
        (:meth:`_analytic_plan`); False forces autograd.
    compile : bool
        Run the full-data :meth:`value_and_grad` and :meth:`leapfrog_step` as
        ``torch.compile`` graphs (inductor fuses the forward, the backward and the
        leapfrog update into one C++ loop nest). Needs the analytic path and a C++
        compiler. The first call for each input shape compiles (seconds; about 20 s
        on a machine with an empty inductor cache), later calls and later potentials
        of the same network reuse the graph (the data are graph inputs, not
        constants); :attr:`compile_seconds` adds up the time of the compiling calls.
        Past dynamo's recompile limit (8 variants per process by default) calls
        run eagerly, with dynamo's warning. Minibatch gradients stay eager (their
        row indices change at every call).
    """

    def __init__(self, model: BNN, x: Tensor, y: Tensor, analytic: bool = True, compile: bool = False):
        self.model = model
        self.x = model.prepare_input(x)
        self.y = model.observed(y)
        self.num_data = int(x.shape[0])
        self.names = [site.name for site in model.sites]
        self.shapes = {site.name: tuple(site.shape) for site in model.sites}
        self._supports = self._prototype_supports()
        self.transforms = {n: biject_to(s).inv for n, s in self._supports.items()}
        self._bijections = {n: biject_to(s) for n, s in self._supports.items()}
        self._layout()
        self._segments, self._other_sites = self._prior_segments()
        self._plan = self._analytic_plan()
        #: True when :meth:`value_and_grad` and :meth:`minibatch_value_and_grad` use
        #: the hand-written backward (:func:`dense_value_and_grads`); False forces autograd
        self.analytic = bool(analytic) and self._plan is not None
        if compile and not self.analytic:
            raise ValueError(
                "compile=True needs the analytic gradient (Dense layers with an activation among "
                f"{', '.join(str(a) for a in ACTIVATION_BACKWARD)}, iid elementwise priors on untransformed "
                "sites, a Gaussian likelihood with fixed noise, Bernoulli or Categorical), which this model "
                "does not have" + ("" if analytic else " (analytic=False)"))
        #: True when :meth:`value_and_grad` and :meth:`leapfrog_step` run compiled graphs
        self.compile = bool(compile)
        #: seconds spent in the calls that compiled a graph (one per function and input shapes)
        self.compile_seconds = 0.0
        self._compiled_keys: set[tuple] = set()

    def _prior_segments(self):
        """Runs of adjacent unconstrained sites sharing one iid prior: their log
        density is one elementwise op on a slice of ``theta``. Other sites go
        through their distribution objects."""
        segments: list[list] = []  # [start, end, prior]
        others = []
        start = 0
        for site, size in zip(self.model.sites, self.sizes):
            identity = is_identity(self._bijections[site.name])
            if site.elementwise is None or not identity:
                others.append(site)
            elif segments and segments[-1][1] == start and segments[-1][2] == site.elementwise:
                segments[-1][1] = start + size
            else:
                segments.append([start, start + size, site.elementwise])
            start += size
        return [tuple(seg) for seg in segments], others

    def log_prior(self, theta: Tensor, values: Mapping[str, Tensor], skip_gaussian: bool = False) -> Tensor:
        """Log prior density of the constrained ``values`` (``theta`` flat); with
        ``skip_gaussian``, without the coordinates of :meth:`gaussian_prior_scale`."""
        total = 0.0
        for start, end, prior in self._segments:
            if skip_gaussian and isinstance(prior, Gaussian):
                continue
            total = total + prior.log_density(theta[..., start:end]).sum(-1)
        for site in self._other_sites:
            total = total + self.model.site_distribution(site, values).log_prob(values[site.name])
        return total

    def _prototype_supports(self) -> dict:
        """Each site's support, read off distributions built at a prior draw."""
        values: dict[str, Tensor] = {}
        supports = {}
        with torch.no_grad(), pyro.validation_enabled(False):
            for site in self.model.sites:
                d = site.dist(values)
                values[site.name] = d.sample()
                supports[site.name] = d.support
        return supports

    def constrained_values(self, theta: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Constrained values and the summed log|Jacobian| of the transform."""
        values, log_det = {}, torch.zeros(theta.shape[:-1], dtype=theta.dtype)
        for name, u in self.unflatten(theta).items():
            bij = self._bijections[name]
            if is_identity(bij):
                values[name] = u
                continue
            values[name] = x = bij(u)
            jac = bij.log_abs_det_jacobian(u, x)
            log_det = log_det + jac.reshape(jac.shape[: theta.dim() - 1] + (-1,)).sum(-1)
        return values, log_det

    def log_likelihood(self, values, rows: Tensor | None = None) -> Tensor:
        """Summed log likelihood of the data (or of ``rows``, scaled by N/B).

        ``rows`` is ``[B]`` (one minibatch for every chain) or ``[C, B]`` (one
        minibatch per chain)."""
        if rows is None:
            return self.model.log_likelihood(values, self.x, self.y).sum(-1)
        scale = self.num_data / rows.shape[-1]
        return scale * self.model.log_likelihood(values, *self.minibatch(rows)).sum(-1)

    def minibatch(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs and targets of ``rows`` (``[B]`` or ``[C, B]``): ``x[rows], y[rows]``,
        gathered by ``index_select`` (several times faster than advanced indexing)."""
        flat = rows.reshape(-1)
        x = self.x.index_select(0, flat).reshape(rows.shape + self.x.shape[1:])
        return x, self.y.index_select(0, flat).reshape(rows.shape + self.y.shape[1:])

    def __call__(self, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        with pyro.validation_enabled(False):
            values, log_det = self.constrained_values(theta)
            return -(self.log_prior(theta, values) + self.log_likelihood(values, rows) + log_det)

    def gaussian_prior_scale(self) -> Tensor:
        """Per coordinate of ``theta`` ``[D]``: the prior sd where the prior is an iid
        ``N(0, sd^2)`` on an untransformed site (a closed-form KL for a Gaussian
        guide), NaN elsewhere."""
        scale = torch.full((self.dim,), math.nan, dtype=torch.get_default_dtype())
        for start, end, prior in self._segments:
            if isinstance(prior, Gaussian):
                scale[start:end] = prior.scale
        return scale

    def log_prior_and_likelihood(self, theta: Tensor, rows: Tensor | None = None,
                                 skip_gaussian: bool = False) -> tuple[Tensor, Tensor]:
        """``U = -(log_prior + log_lik)`` in two parts, each ``[*batch]``: the log prior
        in unconstrained space (with the log|Jacobian|; ``skip_gaussian`` leaves out
        the coordinates of :meth:`gaussian_prior_scale`) and the log likelihood
        (of ``rows`` scaled by N/B when given)."""
        with pyro.validation_enabled(False):
            values, log_det = self.constrained_values(theta)
            return self.log_prior(theta, values, skip_gaussian) + log_det, self.log_likelihood(values, rows)

    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        """``[D]`` L1 weights from the priors' smooth/L1 split (:meth:`Prior.split`):
        ``1/scale`` on the coordinates of sites with an iid Laplace prior and an
        identity transform, 0 elsewhere. With ``spike_and_slab=True``, sites with a
        Laplace-spike :class:`~bnnzoo.models.SpikeAndSlab` get the exact kink of
        their density at 0 (:func:`prior_l1_weight`)."""
        weights = torch.zeros(self.dim, dtype=torch.get_default_dtype())
        start = 0
        for site, size in zip(self.model.sites, self.sizes):
            if site.elementwise is not None and is_identity(self._bijections[site.name]):
                weights[start:start + size] = prior_l1_weight(site.elementwise, spike_and_slab)
            start += size
        return weights

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U(theta)`` and ``dU/dtheta``: analytic when :attr:`analytic` (compiled when
        :attr:`compile`), else autograd."""
        if self.compile:
            return self._run_compiled("value_and_grad", theta.detach())
        if self.analytic:
            return self._analytic_value_and_grad(theta.detach(), self._x, self._target, 1.0)
        return super().value_and_grad(theta)

    def leapfrog_step(self, theta, p, grad, step_size, inv_mass):
        """One leapfrog step; with :attr:`compile`, the update and the gradient as one graph."""
        if not self.compile:
            return super().leapfrog_step(theta, p, grad, step_size, inv_mass)
        # a tensor: a Python float would be compiled in as a constant, one graph per step size
        step_size = torch.as_tensor(step_size, dtype=theta.dtype)
        return self._run_compiled("leapfrog_step", theta, p, grad, step_size, inv_mass)

    def _run_compiled(self, name: str, *args: Tensor):
        key = (name, *(a.shape for a in args))  # torch.Size is hashable: no copies on the hot path
        if key in self._compiled_keys:
            return _compiled(name)(self, *args)
        start = time.perf_counter()
        try:
            out = _compiled(name)(self, *args)
        except Exception as err:
            raise RuntimeError(f"compile=True: torch.compile of the potential's {name} failed "
                               f"({type(err).__name__}: {err}); run with compile=False") from err
        self.compile_seconds += time.perf_counter() - start
        self._compiled_keys.add(key)
        return out

    def minibatch_value_and_grad(self, theta: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Unbiased minibatch estimate of ``U`` and its gradient (likelihood scaled by N/B)."""
        if self.analytic and (rows.dim() == 1 or rows.shape[:-1] == theta.shape[:-1]):
            flat = rows.reshape(-1)
            x = self._x.index_select(0, flat).reshape(rows.shape + self._x.shape[1:])
            target = self._target.index_select(0, flat).reshape(rows.shape + self._target.shape[1:])
            return self._analytic_value_and_grad(theta.detach(), x, target, self.num_data / rows.shape[-1])
        theta = theta.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self(theta, rows)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    # ------------------------------------------------- analytic gradient
    def _analytic_plan(self):
        """What the analytic path needs, or None when the model does not qualify:
        Dense layers with an activation of :data:`ACTIVATION_BACKWARD`, every site
        under an iid elementwise prior with an identity transform, and a Gaussian
        (fixed noise), Bernoulli or Categorical likelihood."""
        spec, lik = self.model.spec, self.model.likelihood
        if not self._segments or self._other_sites:
            return None
        if not all(isinstance(layer, Dense) and layer.activation in ACTIVATION_BACKWARD for layer in spec.layers):
            return None
        if isinstance(lik, GaussianLikelihood) and not lik.learned:
            kind = "gaussian"
        elif isinstance(lik, (Bernoulli, Categorical)):
            kind = lik.kind
        else:
            return None
        if self.y.dim() != 1 or self.x.shape[0] != self.y.shape[0]:
            return None
        expected = [f"layers.{i}.{p}" for i, layer in enumerate(spec.layers)
                    for p in (("weight", "bias") if layer.bias else ("weight",))]
        if self.names != expected:
            return None
        dtype = torch.get_default_dtype()
        self._x = self.x.reshape(self.num_data, -1)  # a Dense first layer flattens an image input
        if kind == "categorical":
            self._target = torch.nn.functional.one_hot(self.y.long(), spec.layers[-1].units).to(dtype)
        else:
            self._target = self.y.to(dtype).unsqueeze(-1)  # [N, 1], like f
        self._inv_var = 1.0 / float(lik.noise) ** 2 if kind == "gaussian" else 1.0
        # N log(noise) + N/2 log(2 pi): the same for a minibatch once scaled by N/B
        self._lik_const = self.num_data * (math.log(float(lik.noise)) + 0.5 * math.log(2 * math.pi)) \
            if kind == "gaussian" else 0.0
        self._loss = {"gaussian": self._gaussian_loss, "bernoulli": _bernoulli_loss,
                      "categorical": _categorical_loss}[kind]
        self._shapes = [self.shapes[n] for n in self.names]
        self._layers = [(ACTIVATION_FUNCTIONS[layer.activation], ACTIVATION_BACKWARD[layer.activation], layer.bias)
                        for layer in spec.layers]
        return kind

    def _gaussian_loss(self, f: Tensor, y: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        r = f - y
        value = (0.5 * scale * self._inv_var) * r.square().sum((-1, -2)) + self._lik_const
        return value, r * (scale * self._inv_var)

    def _analytic_value_and_grad(self, theta: Tensor, x: Tensor, target: Tensor, scale: float):
        """``U`` and ``dU/dtheta`` with the likelihood of ``(x, target)`` scaled by ``scale``."""
        batch = theta.shape[:-1]
        parts = iter(p.reshape(batch + s) for p, s in zip(torch.split(theta, self.sizes, dim=-1), self._shapes))
        layers = [(next(parts), next(parts) if bias else None, act, back) for act, back, bias in self._layers]
        value, grads = dense_value_and_grads(x, layers, lambda f: self._loss(f, target, scale))
        grad = torch.cat([g.reshape(batch + (-1,)) for g in grads], dim=-1)
        for start, end, prior in self._segments:
            w = theta[..., start:end]
            value = value - prior.log_density(w).sum(-1)
            grad[..., start:end] -= prior.log_density_grad(w)
        return value, grad


def _value_and_grad_graph(potential: BNNPotential, theta: Tensor) -> tuple[Tensor, Tensor]:
    return potential._analytic_value_and_grad(theta, potential._x, potential._target, 1.0)


def _leapfrog_step_graph(potential: BNNPotential, theta, p, grad, step_size, inv_mass):
    return leapfrog_step(theta, p, grad, step_size, inv_mass, lambda t: _value_and_grad_graph(potential, t))


@functools.cache
def _compiled(name: str):
    """The compiled graph functions, made once per process: the potential is an argument,
    so a new potential of the same network (same shapes, priors and likelihood) reuses
    the graph; dynamo's guards recompile when they differ."""
    graph = {"value_and_grad": _value_and_grad_graph, "leapfrog_step": _leapfrog_step_graph}[name]
    return torch.compile(graph, dynamic=False)


#: ``back(g, h)``: ``g * act'(z)`` from the activation's output ``h = act(z)``
#: (None: the identity). relu/leaky_relu use ``h > 0`` (iff ``z > 0``, as autograd);
#: softplus ``sigmoid(z) = 1 - exp(-h)``; leaky_relu has torch's default slope 0.01.
ACTIVATION_BACKWARD = {
    "tanh": lambda g, h: g * (1 - h * h),
    "sigmoid": lambda g, h: g * (h * (1 - h)),
    "relu": lambda g, h: g * (h > 0),
    "leaky_relu": lambda g, h: torch.where(h > 0, g, 0.01 * g),
    "softplus": lambda g, h: g * -torch.expm1(-h),
    "linear": None,
    None: None,
}


def dense_value_and_grads(x: Tensor, layers, loss) -> tuple[Tensor, list[Tensor]]:
    r"""Forward and hand-written backward pass of a Dense network.

    ``layers``: ``(W, b, act, back)`` per layer, ``W [*batch, out, in]``, ``b
    [*batch, out]`` or None, ``back`` from :data:`ACTIVATION_BACKWARD`; ``x [N, in]``
    (or ``[*batch, N, in]``); ``loss(f) -> (U [*batch], dU/df)``. Forward:
    :math:`z_l = h_{l-1} W_l^T + b_l`, :math:`h_l = \mathrm{act}_l(z_l)`, ``f = h_L``.
    Backward, from :math:`\delta_L = \partial U/\partial f \odot \mathrm{act}_L'(z_L)`:

    .. math:: \partial U/\partial W_l = \delta_l^T h_{l-1}, \quad
              \partial U/\partial b_l = 	extstyle\sum_n \delta_{l,n}, \quad
              \delta_{l-1} = (\delta_l W_l) \odot \mathrm{act}_{l-1}'(z_{l-1}).

    Returns ``U`` and the gradients in site order (``W_0, b_0, W_1, ...``, no
    entry for a missing bias).
    """
    hs = [x]
    for w, b, act, _ in layers:
        z = torch.matmul(hs[-1], w.transpose(-1, -2))
        hs.append(act(z if b is None else z + b.unsqueeze(-2)))
    value, delta = loss(hs[-1])
    grads = []
    for i in range(len(layers) - 1, -1, -1):
        w, b, _, back = layers[i]
        if back is not None:
            delta = back(delta, hs[i + 1])
        if b is not None:
            grads.append(delta.sum(-2))
        grads.append(torch.matmul(delta.transpose(-1, -2), hs[i]))
        if i:
            delta = torch.matmul(delta, w)
    grads.reverse()
    return value, grads


def _bernoulli_loss(f: Tensor, y: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``-log Bernoulli(y | logits f)`` summed, and ``sigmoid(f) - y``, both times ``scale``."""
    value = torch.nn.functional.binary_cross_entropy_with_logits(f, y.expand_as(f), reduction="none")
    return scale * value.sum((-1, -2)), scale * (torch.sigmoid(f) - y)


def _categorical_loss(f: Tensor, onehot: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``-log softmax(f)[y]`` summed, and ``softmax(f) - onehot(y)``, both times ``scale``."""
    logp = torch.log_softmax(f, -1)
    return -scale * (logp * onehot).sum((-1, -2)), scale * (logp.exp() - onehot)


class PyroPotential(FlatPotential):
    """Pyro's own potential of an arbitrary model, on the flat layout.

    Slow (one Pyro trace per chain and call) but exact for any model.
    """

    def __init__(self, model: Callable, args=(), kwargs=None):
        init, fn, transforms, _ = initialize_model(model, tuple(args), kwargs or {})
        self._fn = fn
        self._model, self._args, self._kwargs = model, tuple(args), dict(kwargs or {})
        self.names = sorted(init)
        self.shapes = {n: tuple(init[n].shape) for n in self.names}
        self.transforms = {n: transforms.get(n, identity_transform) for n in self.names}
        self.initial = {n: v.detach() for n, v in init.items()}
        self._layout()

    def __call__(self, theta: Tensor) -> Tensor:
        if theta.dim() == 1:
            return self._fn(self.unflatten(theta))
        return torch.stack([self(t) for t in theta])

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        if theta.dim() > 1:
            values, grads = zip(*(self.value_and_grad(t) for t in theta))
            return torch.stack(values), torch.stack(grads)
        grads, value = potential_grad(self._fn, self.unflatten(theta.detach()))
        return value.detach(), self.flatten(grads)

    def potential_fn(self, params):
        return self._fn(params)

    def l1_weights(self, spike_and_slab: bool = False) -> Tensor:
        """``[D]`` L1 weights detected on the model's trace: ``1/scale`` (times the
        site's ``poutine.scale``) on latent sites whose distribution is a
        ``Laplace(0, scale)`` (possibly expanded or wrapped in ``Independent``)
        with a scale that depends on no latent value, unmasked, with an identity
        transform; 0 elsewhere. ``spike_and_slab`` is accepted for symmetry with
        :class:`BNNPotential` (plain Pyro models have no spike-and-slab site)."""
        from pyro import poutine

        values = {n: self.transforms[n].inv(u).detach().clone().requires_grad_(True)
                  for n, u in self.initial.items()}
        with torch.enable_grad(), pyro.validation_enabled(False):
            trace = poutine.trace(poutine.condition(self._model, data=values)).get_trace(
                *self._args, **self._kwargs)
        parts = []
        for name in self.names:
            site = trace.nodes[name]
            beta = None
            transform = self.transforms[name]  # constrained -> unconstrained: check it and its inverse
            if (is_identity(transform) or is_identity(transform.inv)) and site.get("mask") is None:
                beta = laplace_l1_weight(site["fn"])
            if beta is None:
                parts.append(torch.zeros(self.shapes[name]))
                continue
            scale = site.get("scale", 1.0)
            beta = torch.as_tensor(scale, dtype=beta.dtype) * beta
            parts.append(torch.broadcast_to(beta.detach(), self.shapes[name]))
        dtype = torch.get_default_dtype()
        return torch.cat([p.reshape(-1).to(dtype) for p in parts]) if parts else torch.zeros(0, dtype=dtype)


def laplace_l1_weight(distribution) -> Tensor | None:
    """``1/scale`` of a ``Laplace(0, scale)`` (unwrapping ``Independent`` and
    expanded distributions) whose scale is a constant, i.e. carries no gradient
    from the latent values; None for anything else."""
    d = distribution
    while True:
        if isinstance(d, torch.distributions.Independent):
            d = d.base_dist
        elif isinstance(d, pyro.distributions.torch_distribution.ExpandedDistribution):
            d = d.base_dist
        else:
            break
    if not isinstance(d, torch.distributions.Laplace):
        return None
    if d.scale.requires_grad or d.loc.requires_grad or bool((d.loc != 0).any()):
        return None
    return 1.0 / d.scale.detach()


def prior_l1_weight(prior, spike_and_slab: bool = False) -> float:
    r"""The L1 weight of an elementwise prior: ``prior.split()[1]`` (``1/scale`` for
    :class:`~bnnzoo.models.Laplace`, 0 for smooth priors).

    With ``spike_and_slab=True``, a :class:`~bnnzoo.models.SpikeAndSlab` with a
    Laplace spike gets the slope of the kink of :math:`-\log p` at 0,

    .. math:: \beta = \frac{1}{s_0}\,\frac{(1-\delta)\,\mathrm{Lap}(0; s_0)}
              {(1-\delta)\,\mathrm{Lap}(0; s_0) + \delta\, N(0; 0, s_1^2)},

    so that :math:`-\log p(w) - \beta |w|` has equal one-sided derivatives at 0
    (it is :math:`C^1`): the exact L1 part of the mixture.
    """
    l1 = float(prior.split()[1])
    if l1 > 0 or not spike_and_slab:
        return l1
    from ..models.priors import SpikeAndSlab  # local: only this helper needs the class

    if isinstance(prior, SpikeAndSlab) and prior.spike == "laplace":
        s0, s1, delta = prior.spike_scale, prior.slab_scale, prior.inclusion_prob
        spike = (1 - delta) / (2 * s0)
        slab = delta / (math.sqrt(2 * math.pi) * s1)
        return spike / (spike + slab) / s0
    return 0.0


def make_potential(model, x: Tensor | None = None, y: Tensor | None = None, args=(), kwargs=None,
                   compile: bool = False) -> FlatPotential:
    """The fastest exact potential for ``model``: :class:`BNNPotential` for a BNN
    (``compile``: see there), else :class:`PyroPotential` with ``model(*args, **kwargs)``."""
    if isinstance(model, BNN):
        return BNNPotential(model, x, y, compile=compile)
    if compile:
        raise ValueError(f"compile=True needs a BNN model (compiled analytic potential), got {type(model).__name__}")
    return PyroPotential(model, args or (x, y), kwargs)


def initial_theta(potential: FlatPotential, num_chains: int = 1, radius: float = 1.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """Initial points ``[C, D]`` drawn uniformly in ``(-radius, radius)`` in
    unconstrained space (Pyro's ``init_to_uniform``), retried until finite."""
    dtype = torch.get_default_dtype()
    theta = (torch.rand(num_chains, potential.dim, generator=generator, dtype=dtype) * 2 - 1) * radius
    for _ in range(100):
        with torch.no_grad():
            bad = ~torch.isfinite(potential(theta))
        if not bad.any():
            return theta
        fresh = (torch.rand(int(bad.sum()), potential.dim, generator=generator, dtype=dtype) * 2 - 1) * radius
        theta[bad] = fresh
    raise RuntimeError(f"could not find a finite initial point in 100 tries (radius={radius})")
