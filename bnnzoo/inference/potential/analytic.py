"""The analytic gradient of a Dense BNN, eagerly and as a ``torch.compile`` graph traces it.

* :func:`dense_value_and_grads`: forward and hand-written backward pass of a
  Dense network, with the activations' derivatives from their table
  (:data:`~bnnzoo.models.activations.ACTIVATION_TABLE`) and the loss each likelihood carries
  (:meth:`~bnnzoo.models.likelihoods.Likelihood.analytic`); :func:`_dense_feature_major`, the same
  in the layout a graph is fastest in;
* :class:`AnalyticMixin`: the part of :class:`~bnnzoo.inference.potential.BNNPotential`
  that uses them (whether the model qualifies, and the value and gradient on a flat ``theta``,
  in either formulation).

Mathematics only: the graphs are compiled, cached and run by the runtime layer
(:mod:`bnnzoo.inference.compiled_graphs`), which traces
:meth:`AnalyticMixin.graph_value_and_grad`.
"""

from __future__ import annotations

import math
import numbers

import torch

from ...models.activations import ACTIVATION_FUNCTIONS, ACTIVATION_TABLE
from ...models.priors import Gaussian
from ...models.spec import Dense

Tensor = torch.Tensor


#: ``back(g, h)``: ``g * act'(z)`` from the activation's output ``h = act(z)`` (None: the
#: identity), for the activations the analytic path serves (:data:`~bnnzoo.models.activations.ACTIVATION_TABLE`)
ACTIVATION_BACKWARD = {name: a.backward for name, a in ACTIVATION_TABLE.items() if a.analytic}


def _is_exp(bijection) -> bool:
    """True when ``bijection`` is ``v = exp(u)`` with ``log|dv/du| = u`` (torch's ``biject_to`` of a
    positive support: an exp and an affine map by 0 and 1), checked at a few points in float64."""
    u = torch.tensor([-1.3, 0.0, 0.7], dtype=torch.float64)
    try:
        v = bijection(u)
        return bool(torch.equal(v, u.exp()) and torch.allclose(bijection.log_abs_det_jacobian(u, v), u,
                                                                rtol=0, atol=1e-12))
    except Exception:
        return False


def _activation(name):
    """The analytic path's activation ``name``: in place where it has an in-place form."""
    row = ACTIVATION_TABLE[name]
    return row.in_place or row.forward


def _eager_backward(name):
    """The derivative of activation ``name`` on the analytic path: in place where it has an in-place
    form (the path's ``delta`` is a fresh tensor of its own)."""
    row = ACTIVATION_TABLE[name]
    return row.in_place_backward or row.backward


def _graph_backward(name):
    """The derivative of activation ``name`` as a ``torch.compile`` graph traces it."""
    row = ACTIVATION_TABLE[name]
    return row.graph_backward or row.backward


def dense_value_and_grads(x: Tensor, layers, loss) -> tuple[Tensor, list[Tensor]]:
    r"""Forward and hand-written backward pass of a Dense network.

    ``layers``: ``(W, b, act, back)`` per layer, ``W [*batch, out, in]``, ``b
    [*batch, out]`` or None, ``back`` from :data:`ACTIVATION_BACKWARD`; ``x [N, in]``
    (or ``[*batch, N, in]``); ``loss(f) -> (U [*batch], dU/df)``. Forward:
    :math:`z_l = h_{l-1} W_l^T + b_l`, :math:`h_l = \mathrm{act}_l(z_l)`, ``f = h_L``.
    Backward, from :math:`\delta_L = \partial U/\partial f \odot \mathrm{act}_L'(z_L)`:

    .. math:: \partial U/\partial W_l = \delta_l^T h_{l-1}, \quad
              \partial U/\partial b_l = \textstyle\sum_n \delta_{l,n}, \quad
              \delta_{l-1} = (\delta_l W_l) \odot \mathrm{act}_{l-1}'(z_{l-1}).

    ``act`` may overwrite its argument (an activation's in-place form). Returns ``U`` and the
    gradients in site order (``W_0, b_0, W_1, ...``, no entry for a missing bias).
    """
    batch = layers[0][0].shape[:-2]
    flat = [(w.reshape((-1,) + w.shape[-2:]), None if b is None else b.reshape(-1, 1, b.shape[-1]), act, back)
            for w, b, act, back in layers]
    h = x if x.dim() == 2 else x.reshape((-1,) + x.shape[-2:])
    value, grads = _dense_batched(h, flat, lambda f: loss(f.reshape(batch + f.shape[1:])))
    return value, [g.reshape(batch + g.shape[1:]) for g in grads]


def _dense_batched(x: Tensor, layers, loss) -> tuple[Tensor, list[Tensor]]:
    """:func:`dense_value_and_grads` on one batch dimension ``C``: ``W [C, out, in]``, ``b [C, 1, out]``
    or None, ``x [N, in]`` or ``[C, N, in]``; ``loss(f [C, N, out])`` may return ``dU/df`` of any
    shape with ``f``'s elements. The bias gradients are ``[C, out]``.

    Eagerly each product is one op (:func:`_layer_product`): a small network's step is bound by
    the ops it dispatches, and this path runs few. A ``torch.compile`` graph is written
    feature-major instead (:func:`_dense_feature_major`)."""
    hs = [x.expand((layers[0][0].shape[0],) + x.shape) if x.dim() == 2 else x]
    for w, b, act, _ in layers:
        hs.append(act(_layer_product(hs[-1], w, b)))
    f = hs[-1]
    value, delta = loss(f)
    return value, _backward(hs, layers, delta.reshape(f.shape), 1, _weight_grad, _propagate)


def _layer_product(h: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """``h [C, N, in]`` times ``W [C, out, in]`` transposed, plus ``b [C, 1, out]``: ``z [C, N, out]``,
    eagerly in one op. Mostly one ``bmm`` (with the bias, ``baddbmm``); the library's batched
    product is slow at the two edges a regression or binary network has, so there it is written
    otherwise (the gradients of the cosine MLP and of the suite's diabetes and breast-cancer
    networks, before and after: ``benchmarks/results/hot_path_edges.md``):

    * one input (the cosine MLP's first layer): an outer product, as one broadcast multiply-add
      (``addcmul``);
    * one output (the last layer of a regression or a binary classifier): ``[C, N, in]`` by
      ``[C, in, 1]`` is a matrix-vector product per chain, slower than ``W h^T``, ``[C, 1, in]`` by
      ``[C, in, N]``, whose ``[C, 1, N]`` has the memory of ``[C, N, 1]``."""
    if w.shape[-1] == 1:
        wt = w.transpose(-1, -2)
        return h * wt if b is None else torch.addcmul(b, h, wt)
    if w.shape[-2] == 1:
        ht = h.transpose(-1, -2)
        z = torch.bmm(w, ht) if b is None else torch.baddbmm(b, w, ht)
        return z.view(h.shape[0], h.shape[1], 1)
    wt = w.transpose(-1, -2)
    return torch.bmm(h, wt) if b is None else torch.baddbmm(b, h, wt)


def _weight_grad(delta: Tensor, h: Tensor) -> Tensor:
    """``delta [C, N, out]`` transposed times ``h [C, N, in]``: ``[C, out, in]`` (with one input, the
    sum over the points of ``delta h``: as a product it is the slow edge :func:`_layer_product` names)."""
    if h.shape[-1] == 1:
        return (delta * h).sum(1).unsqueeze(-1)
    return torch.bmm(delta.transpose(1, 2), h)


def _propagate(delta: Tensor, w: Tensor) -> Tensor:
    """``delta [C, N, out]`` times ``W [C, out, in]``: the layer input's ``delta [C, N, in]`` (with one
    output, an outer product: one broadcast multiply)."""
    return delta * w if w.shape[-2] == 1 else torch.bmm(delta, w)


def _backward(hs, layers, delta, points_dim, weight_grad, propagate) -> list[Tensor]:
    """The backward pass of :func:`dense_value_and_grads` in either layout: ``hs`` the layers' inputs
    and outputs, ``delta`` ``dU/df``, ``points_dim`` the dimension of the data points (a bias
    gradient sums over it), ``weight_grad(delta, h)`` and ``propagate(delta, W)`` the layout's products."""
    grads = []
    for i in range(len(layers) - 1, -1, -1):
        w, b, _, back = layers[i]
        if back is not None:
            delta = back(delta, hs[i + 1])
        if b is not None:
            grads.append(delta.sum(points_dim))
        grads.append(weight_grad(delta, hs[i]))
        if i:
            delta = propagate(delta, w)
    grads.reverse()
    return grads


def _dense_feature_major(x: Tensor, layers, loss) -> tuple[Tensor, list[Tensor]]:
    """:func:`_dense_batched` as a ``torch.compile`` graph computes it: each layer's activations
    are ``[C, units, N]``, the data points the contiguous dimension, and the products are
    ``matmul`` on the unexpanded ``x`` with the bias a separate add, which inductor fuses into
    its loops (with ``bmm`` it calls the library's kernel for each, and the cosine MLP's compiled
    step took 1.35x as long).

    Inductor vectorizes a loop nest along its contiguous dimension. Laid out ``[C, N, units]``, that
    is the hidden units: 50 of them are three AVX-512 vectors and a masked tail of two, which costs
    about as much as a full vector. Along the data points the tail is a smaller part (100 points:
    six vectors and four), and the first layer's weight gradient becomes a contiguous sum over the
    points. A first layer of one input has its weight gradient written as that sum: as a product
    it is a matrix-vector product, which inductor leaves to the library, splitting the graph's
    loops (and its first compile took about a second longer). One call of the cosine MLP's compiled
    leapfrog step took 0.84 / 0.77 / 0.71 of the time of the ``[C, N, units]`` layout with 8 / 16 /
    32 chains on one thread, 0.98 / 0.94 / 0.75 on two (``benchmarks/bench_hot_path.py --compiled``,
    ``benchmarks/results/hot_path_compiled.md``).
    """
    hs = [x.transpose(-1, -2)]  # [in, N] or [C, in, N]
    for w, b, act, _ in layers:
        z = torch.matmul(w, hs[-1])
        hs.append(act(z if b is None else z + b.transpose(1, 2)))
    f = hs[-1].transpose(1, 2)
    value, delta = loss(f)
    return value, _backward(hs, layers, delta.reshape(f.shape).transpose(1, 2), 2, _feature_major_weight_grad,
                            _feature_major_propagate)


def _feature_major_weight_grad(delta: Tensor, h: Tensor) -> Tensor:
    """``delta [C, out, N]`` times ``h [in, N]`` (or ``[C, in, N]``) transposed: ``[C, out, in]``; with one
    input, a sum over the points (why: :func:`_dense_feature_major`)."""
    if h.shape[-2] == 1:
        return (delta * h).sum(-1, keepdim=True)
    return torch.matmul(delta, h.transpose(-1, -2))


def _feature_major_propagate(delta: Tensor, w: Tensor) -> Tensor:
    """``W [C, out, in]`` transposed times ``delta [C, out, N]``: the layer input's ``delta [C, in, N]``."""
    return torch.matmul(w.transpose(1, 2), delta)


class AnalyticMixin:
    """The analytic path of :class:`~bnnzoo.inference.potential.BNNPotential`
    (its methods use the potential's model, data, layout and prior segments):
    :meth:`_analytic_plan` decides whether the model qualifies and prepares what
    the path needs, :meth:`_analytic_value_and_grad` evaluates it (on the full data:
    :meth:`analytic_value_and_grad`, and :meth:`graph_value_and_grad`, the function the runtime
    compiles)."""

    def _analytic_plan(self):
        """What the analytic path needs, or None when the model does not qualify (then
        :attr:`slow_path` says why, in a phrase): Dense layers with an activation of
        :data:`ACTIVATION_BACKWARD`, every site under an iid elementwise prior with an identity
        transform, and a likelihood with an analytic loss (a Gaussian, its noise fixed or a
        learned variance, Bernoulli or Categorical)."""
        self.slow_path = self._off_the_analytic_path()
        if self.slow_path is not None:
            return None
        spec, lik = self.model.spec, self.model.likelihood
        analytic = lik.analytic(self.num_data)
        self._x = self.x.reshape(self.num_data, -1)  # a Dense first layer flattens an image input
        self._target = analytic.target(self.y, spec.layers[-1].units, self.dtype)
        lik_const = analytic.constant
        # a Gaussian prior's U is w^2 / (2 s^2) plus a constant: one dot product, and the
        # constants of every such segment and of the likelihood added once
        self._prior_terms, self._constant = [], lik_const
        for start, end, prior in self._segments:
            if isinstance(prior, Gaussian) and isinstance(prior.scale, numbers.Real):
                precision = 1.0 / float(prior.scale) ** 2
                self._prior_terms.append((start, end, prior, precision))
                self._constant += (end - start) * (math.log(float(prior.scale)) + 0.5 * math.log(2 * math.pi))
            else:
                self._prior_terms.append((start, end, prior, None))
        self._loss, self._graph_loss = analytic.loss, analytic.graph_loss
        self._own_params = analytic.num_params
        self._shapes = [self.shapes[n] for n in self.names]
        self._flat_shape_cache: dict[int, list[tuple[int, ...]]] = {}
        self._layers = [(_activation(layer.activation), _eager_backward(layer.activation), layer.bias)
                        for layer in spec.layers]
        self._graph_layers = [(ACTIVATION_FUNCTIONS[layer.activation], _graph_backward(layer.activation), layer.bias)
                              for layer in spec.layers]
        return lik.kind

    def _off_the_analytic_path(self) -> str | None:
        """Why the model has no analytic gradient (the first reason found), or None."""
        spec, lik = self.model.spec, self.model.likelihood
        for i, layer in enumerate(spec.layers):
            if not isinstance(layer, Dense):
                return f"layer {i} is a {type(layer).__name__} (the analytic gradient covers Dense layers)"
            if layer.activation not in ACTIVATION_BACKWARD:
                return f"layer {i}'s activation {layer.activation!r} has no analytic derivative"
        own = [site.name for site in lik.sites()]  # the likelihood's own sites (a learned noise)
        for site in self._other_sites:
            if site.name not in own:
                prior = type(site.elementwise).__name__ if site.elementwise is not None else "a hierarchical prior"
                return (f"site {site.name!r} ({prior}) is not under an iid elementwise prior on an "
                        f"untransformed site")
        if not self._segments:
            return "no site is under an iid elementwise prior"
        if not all(_is_exp(self._bijections[name]) for name in own):
            return f"the likelihood's sites {own} are not positive variances on a log scale"
        analytic = lik.analytic(self.num_data)
        if analytic is None or analytic.num_params != sum(self.sizes[self.names.index(n)] for n in own):
            return f"the {type(lik).__name__} likelihood has no analytic loss"
        if self.y.dim() != 1 or self.x.shape[0] != self.y.shape[0]:
            return f"targets of shape {tuple(self.y.shape)} (the analytic loss takes one target per row)"
        expected = [f"layers.{i}.{p}" for i, layer in enumerate(spec.layers)
                    for p in (("weight", "bias") if layer.bias else ("weight",))]
        if self.names != expected + own:
            return f"sites {self.names} are not the network's weights in order"
        return None

    def _analytic_value_and_grad(self, theta: Tensor, x: Tensor, target: Tensor, scale: float,
                                 graph: bool = False):
        """``U`` and ``dU/dtheta`` with the likelihood of ``(x, target)`` scaled by ``scale``
        (``x [N, in]``, or ``[*batch, N, in]`` with ``theta [*batch, D]``); ``graph``: the
        formulation for a ``torch.compile`` graph (:func:`_dense_feature_major`)."""
        batch = theta.shape[:-1]
        flat = theta if theta.dim() == 2 else theta.reshape(-1, theta.shape[-1])
        chains = flat.shape[0]
        if x.dim() > 3:
            x, target = x.reshape((chains,) + x.shape[-2:]), target.reshape((chains,) + target.shape[-2:])
        parts = iter(part.view(shape) for part, shape in zip(torch.split(flat, self.sizes, dim=-1),
                                                            self._flat_shapes(chains)))
        layers = [(next(parts), next(parts) if bias else None, act, back)
                  for act, back, bias in (self._graph_layers if graph else self._layers)]
        loss = self._graph_loss if graph else self._loss
        dense = _dense_feature_major if graph else _dense_batched
        own = self._own_params
        if own:  # the likelihood's own parameters, the last coordinates: U and dU/du with the loss
            u, own_grad = flat[:, -own:], []

            def data_loss(f):
                value, grad_f, grad_u = loss(f, target, scale, u)
                own_grad.append(grad_u)
                return value, grad_f
        else:
            def data_loss(f):
                return loss(f, target, scale)
        value, grads = dense(x, layers, data_loss)
        grad = torch.cat([g.view(chains, -1) for g in grads] + (own_grad if own else []), dim=-1)
        for start, end, prior, precision in self._prior_terms:
            if precision is None or graph:  # through the prior's density (in a graph: as inductor fuses best)
                w = flat[:, start:end]
                value = value - prior.log_density(w).sum(-1)
                grad[:, start:end] -= prior.log_density_grad(w)
            else:  # Gaussian: U += w^2 / (2 s^2) (its constant is in self._constant), grad += w / s^2
                whole = start == 0 and end == flat.shape[-1]
                w = flat if whole else flat[:, start:end]
                value = value.add(torch.linalg.vecdot(w, w), alpha=0.5 * precision)
                (grad if whole else grad[:, start:end]).add_(w, alpha=precision)
        if self._constant and not graph:  # a graph's loss and priors carry their own constants
            value = value + self._constant
        return (value, grad) if theta.dim() == 2 else (value.reshape(batch), grad.reshape(theta.shape))

    def analytic_value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U`` and ``dU/dtheta`` on the full data, eagerly."""
        return self._analytic_value_and_grad(theta, self._x, self._target, 1.0)

    def graph_value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``U`` and ``dU/dtheta`` on the full data in the formulation a ``torch.compile`` graph traces
        (:func:`_dense_feature_major`): what :mod:`bnnzoo.inference.compiled_graphs` compiles."""
        return self._analytic_value_and_grad(theta, self._x, self._target, 1.0, graph=True)

    def _flat_shapes(self, chains: int) -> list[tuple[int, ...]]:
        """Each site's shape with the chains in front, a bias as ``[C, 1, out]`` (what ``baddbmm`` adds)."""
        shapes = self._flat_shape_cache.get(chains)
        if shapes is None:
            shapes = self._flat_shape_cache[chains] = [(chains,) + (s if len(s) == 2 else (1,) + s)
                                                       for s in self._shapes]
        return shapes
