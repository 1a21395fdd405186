"""The fast potential of a :class:`~bnnzoo.models.BNN` (:class:`BNNPotential`):
the log density written directly in torch, C chains in one batched pass, the
minibatch estimate, and the smooth/L1 split of the priors."""

from __future__ import annotations

import math
from typing import Mapping

import pyro
import torch
from torch.distributions import biject_to

from ... import validation
from ...models.bnn import BNN
from ...models.l1 import prior_l1_weight
from ...models.priors import Gaussian
from ..compiled_graphs import CompiledGraphs
from ..traced_graphs import TracedGraphs
from .analytic import ACTIVATION_BACKWARD, AnalyticMixin
from .base import FlatPotential, is_identity

Tensor = torch.Tensor


# FlatPotential before the mixin: super() in value_and_grad/leapfrog_step finds
# FlatPotential's methods first, as with no mixin
class BNNPotential(FlatPotential, AnalyticMixin):
    """Fast potential of a :class:`BNN` on data ``(x, y)``.

    Parameters
    ----------
    model : BNN
    x, y : Tensor
        Training inputs and targets (validated beforehand).
    analytic : bool
        Use the hand-written backward pass where the model allows it
        (:meth:`~bnnzoo.inference.potential.analytic.AnalyticMixin._analytic_plan`); False
        forces autograd.
    compile : bool
        Run the full-data :meth:`value_and_grad` and :meth:`leapfrog_step` as
        ``torch.compile`` graphs (inductor fuses the forward, the backward and the
        leapfrog update into one C++ loop nest). Needs the analytic path and a C++
        compiler. The graphs are the runtime's (:attr:`graphs`,
        :class:`~bnnzoo.inference.compiled_graphs.CompiledGraphs`), traced from
        :meth:`graph_value_and_grad`. The first call for each input shape compiles (seconds; about
        10-13 s on a machine with an empty inductor cache; :meth:`value_and_grad`'s first call runs
        eagerly and its second compiles, since a kernel that steps with the leapfrog graph calls it
        once a run), later calls and later potentials
        of the same network reuse the graph (the data are graph inputs, not
        constants); :attr:`compile_seconds` adds up the time of the compiling calls.
        One process holds up to :data:`~bnnzoo.inference.compiled_graphs.RECOMPILE_LIMIT` (128)
        variants of each graph (dynamo's default is 8). Minibatch gradients stay eager (their
        row indices change at every call).
    device : torch.device or str, optional
        Move the data there (None: where ``x`` is). The potential computes where its data are:
        :attr:`device`.
    dtype : torch.dtype, optional
        Cast ``x`` (and floating ``y``) to this dtype (None: ``x``'s); :attr:`dtype`, the dtype of ``theta``.
    """

    def __init__(self, model: BNN, x: Tensor, y: Tensor, analytic: bool = True, compile: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        self.model = model
        if dtype is not None:
            validation.float_dtype("dtype", dtype)
        self.x = model.prepare_input(x).to(device=device, dtype=dtype)
        if dtype is None and self.x.is_floating_point():
            validation.float_dtype("x.dtype", self.x.dtype)  # data in float16 are refused too
        self.device, self.dtype = self.x.device, self.x.dtype
        y = model.observed(y).to(self.device)
        self.y = y.to(self.dtype) if y.is_floating_point() else y
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
        #: the hand-written backward (:func:`~bnnzoo.inference.potential.analytic.dense_value_and_grads`);
        #: False forces autograd
        self.analytic = bool(analytic) and self._plan is not None
        # slow_path (set by the plan): why the gradient runs on autograd, a phrase; None on the analytic path
        if not analytic and self.slow_path is None:
            self.slow_path = "analytic=False"
        #: True when the analytic path has compiled graphs (its likelihood has a graph loss)
        self.compilable = self.analytic and self._graph_loss is not None
        if compile and not self.compilable:
            raise ValueError(
                "compile=True needs the analytic gradient (Dense layers with an activation among "
                f"{', '.join(str(a) for a in ACTIVATION_BACKWARD)}, iid elementwise priors on untransformed "
                "sites, a Gaussian likelihood (fixed or learned noise), Bernoulli or Categorical), which this "
                "model does not have" + ("" if analytic else " (analytic=False)")
                + (f": {self.slow_path}" if self.slow_path and analytic else ""))
        #: True when :meth:`value_and_grad` and :meth:`leapfrog_step` run compiled graphs (set here, or
        #: mid-run by ``compile="auto"``; a compile that fails under it sets it back to False)
        self.compile = bool(compile)
        #: the compiled graphs that run this potential while :attr:`compile` is True, with what compiling
        #: them took (the runtime's :class:`~bnnzoo.inference.compiled_graphs.CompiledGraphs`)
        self.graphs = CompiledGraphs(self)
        #: off the analytic path, the autograd value and gradient replayed as one traced graph of its
        #: operations after a few calls (the runtime's :class:`~bnnzoo.inference.traced_graphs.TracedGraphs`)
        self.traced = TracedGraphs(self._autograd_value_and_grad)

    @property
    def compile_seconds(self) -> float:
        """Seconds spent in the calls that compiled a graph (one per function and input shapes)."""
        return self.graphs.compile_seconds

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
            total = total + self.model.site_distribution(site, values, theta).log_prob(values[site.name])
        return total

    def _prototype_supports(self) -> dict:
        """Each site's support, read off distributions built at a prior draw."""
        values: dict[str, Tensor] = {}
        supports = {}
        with torch.no_grad(), pyro.validation_enabled(False):
            for site in self.model.sites:
                d = self.model.site_distribution(site, values, self.x)
                values[site.name] = d.sample()
                supports[site.name] = d.support
        return supports

    def constrained_values(self, theta: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Constrained values and the summed log|Jacobian| of the transform."""
        values, log_det = {}, theta.new_zeros(theta.shape[:-1])
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

    def potential_fn(self, params: Mapping[str, Tensor]) -> Tensor:
        """Pyro's ``potential_fn``: ``U`` of a dict of unconstrained values. Where the
        analytic gradient exists, Pyro's autograd call (``potential_grad``) gets it from
        :meth:`value_and_grad` through :class:`_AnalyticU` instead of differentiating the
        forward pass."""
        theta = self.flatten(params)
        if self.analytic and theta.requires_grad:
            return _AnalyticU.apply(theta, self)
        return self(theta)

    def gaussian_prior_scale(self) -> Tensor:
        """Per coordinate of ``theta`` ``[D]``: the prior sd where the prior is an iid
        ``N(0, sd^2)`` on an untransformed site (a closed-form KL for a Gaussian
        guide), NaN elsewhere."""
        scale = torch.full((self.dim,), math.nan, **self.placement)
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
        their density at 0 (:func:`~bnnzoo.models.l1.prior_l1_weight`)."""
        weights = torch.zeros(self.dim, **self.placement)
        start = 0
        for site, size in zip(self.model.sites, self.sizes):
            if site.elementwise is not None and is_identity(self._bijections[site.name]):
                weights[start:start + size] = prior_l1_weight(site.elementwise, spike_and_slab)
            start += size
        return weights

    @property
    def graphable(self) -> bool:
        """True when :meth:`leapfrog_step` may be captured as a CUDA graph
        (:mod:`bnnzoo.inference.cuda_graphs`): the analytic gradient reads only the data and
        the priors' fixed constants, and reads nothing on the host."""
        return self.analytic

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U(theta)`` and ``dU/dtheta``: analytic when :attr:`analytic` (compiled when
        :attr:`compile`: :attr:`graphs`), else autograd."""
        if self.compile:
            return self.graphs.value_and_grad(theta.detach())
        if self.analytic:
            return self._analytic_value_and_grad(theta.detach(), self._x, self._target, 1.0)
        return self.traced(theta)

    def _autograd_value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The slow path: autograd through the forward pass (what :attr:`traced` records and replays)."""
        return super().value_and_grad(theta)

    def notes(self) -> dict:
        """``{"gradient_graph": ...}`` once the slow path's gradient was traced or refused (:attr:`traced`)."""
        note = self.traced.note()
        return {**super().notes(), **({"gradient_graph": note} if note else {})}

    def leapfrog_step(self, theta, p, grad, step_size, inv_mass):
        """One leapfrog step; with :attr:`compile`, the update and the gradient as one graph (:attr:`graphs`)."""
        if not self.compile:
            return super().leapfrog_step(theta, p, grad, step_size, inv_mass)
        return self.graphs.leapfrog_step(theta, p, grad, step_size, inv_mass)

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


class _AnalyticU(torch.autograd.Function):
    """``U(theta)`` whose backward is the analytic gradient, computed with the value."""

    @staticmethod
    def forward(ctx, theta: Tensor, potential: BNNPotential) -> Tensor:
        value, grad = potential.value_and_grad(theta.detach())
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        (grad,) = ctx.saved_tensors
        shape = grad_output.shape + (1,) * (grad.dim() - grad_output.dim())
        return grad_output.reshape(shape) * grad, None
