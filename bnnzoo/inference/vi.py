r"""Variational inference with a mean-field Normal guide on the flat unconstrained parameters.

The guide is :math:`q_\phi(\theta) = N(\mu, \operatorname{diag}\sigma^2)`,
:math:`\sigma = \operatorname{softplus}(\rho)`, :math:`\phi = (\mu, \rho)`, over the
same unconstrained vector the MCMC kernels sample (Pyro's ``AutoNormal``
family, written on the flat potential so no Pyro trace runs per step). The
negative ELBO splits into the prior KL and the expected negative log likelihood,

.. math:: -\mathrm{ELBO}(\phi) = \mathrm{KL}(q_\phi \,\|\, p) + E_q[-\log p(y \mid \theta)],

with the prior taken in unconstrained space (its log|Jacobian| included), so the
KL equals the KL of the constrained sites.

**KL.** Where the prior is an iid :math:`N(0, s^2)` on an untransformed site the
KL is in closed form, :math:`\log(s/\sigma) + (\sigma^2 + \mu^2)/(2s^2) - 1/2`
(``kl="analytic"`` / ``"auto"``); elsewhere (Laplace, spike-and-slab, horseshoe,
noise variance) it is the Monte Carlo estimate :math:`\log q(\theta) - \log p(\theta)`
at the sampled :math:`\theta` (``kl="mc"`` uses it everywhere).

**Minibatches and KL reweighting** (paper 002 eq. 2.1.7; Blundell et al. 2015).
An epoch is a random partition of the N training points into
:math:`M = \lceil N/B \rceil` nearly equal batches :math:`B_1..B_M`. Step i of an
epoch descends

.. math:: L_i(\phi) = \frac{1}{N}\Big[\, M\pi_i\, \mathrm{KL}(q_\phi\|p)
          + \frac{N}{|B_i|}\, E_q\big[-\textstyle\sum_{n\in B_i}\log p(y_n\mid\theta)\big]\Big].

The bracket is the thesis' per-minibatch loss :math:`\pi_i \mathrm{KL} + \mathrm{NLL}_{B_i}`
multiplied by M, so its scale does not depend on the batch size; the 1/N makes
learning rates per datum, as for deep-learning losses (Adam is invariant to it).
Over an epoch the bracket averages to :math:`(\sum_i \pi_i)\,\mathrm{KL} + E_q[\mathrm{NLL}]`:

* ``"uniform"``: :math:`\pi_i = 1/M`; every step is an unbiased estimate of the
  negative ELBO (Hoffman et al. 2013). The default, and the only scheme with
  minibatches whose every step targets the ELBO.
* ``"blundell"``: :math:`\pi_i = 2^{M-i}/(2^M-1)`: early batches of an epoch
  are KL-driven, late ones data-driven; the weights sum to 1 per epoch.
* a number :math:`\lambda > 0`: :math:`\pi_i = \lambda^i/\sum_k \lambda^k`
  (thesis eq. 5.2.1; :math:`\lambda = 1/2` is Blundell's, 1 uniform, 2 the reverse).
* ``"none"``: :math:`\pi_i = 1`: the full KL is added to every minibatch's loss,
  so per epoch the KL counts M times (the objective is :math:`M\,\mathrm{KL} + \mathrm{NLL}`).

Full-batch training (``batch_size=None``) has M = 1 and every scheme is :math:`\pi_1 = 1`.

**Gradient estimators** (thesis sec. 2.2 and 5.1), with :math:`\theta = \mu + \sigma\epsilon`:

* ``"reparam"``: the total derivative of the reparameterised loss (path
  derivative plus the score term :math:`\nabla_\phi \log q_\phi(\theta)` of the
  Monte Carlo :math:`\log q`; Kingma and Welling 2014).
* ``"stl"``: sticking the landing (Roeder, Wu and Duvenaud 2017): the
  variational parameters are detached inside :math:`\log q` only, so the
  zero-mean score term is dropped; the gradient vanishes identically when
  :math:`q` equals the posterior. It acts on the Monte Carlo :math:`\log q`:
  its default KL is ``"mc"`` (with a closed-form KL there is nothing to drop).
* ``"score"``: the score-function (REINFORCE) estimator
  :math:`E_q[(f(\theta) - b)\nabla_\phi \log q_\phi(\theta)]` of the same loss
  (Ranganath, Gerrish and Blei 2014), with a baseline b: leave-one-out over the
  particles, or a running mean of past losses with one particle.

**Parameter groups** (thesis sec. 5.4): the means and the :math:`\rho`'s have
their own optimizer (``optimizer`` / ``scale_optimizer``: SGD, Adam, AdaBound...,
see :mod:`bnnzoo.inference.optim`), learning rate (``lr`` / ``scale_lr``) and
schedule: exponential decay, or ``ReduceLROnPlateau`` stepped once per epoch,
the means' on the epoch's NLL and the scales' on its KL (``plateau_metric="split"``).

Each "chain" of the ``svi`` engine is an independent fit from its own random
start; its posterior draws are iid draws from the fitted guide, exported
exactly like MCMC draws (so R-hat across chains measures how much fits disagree).
Local reparameterisation is not offered: it needs a second forward pass
outside ``BNN.apply`` and a closed-form KL, and would not compose with ``"stl"``.

References
----------
* J. W. Book (2020), "Training Bayesian neural networks" (paper 002), ch. 2, 5.
* C. Blundell, J. Cornebise, K. Kavukcuoglu, D. Wierstra (2015), "Weight uncertainty in neural networks".
* G. Roeder, Y. Wu, D. Duvenaud (2017), "Sticking the landing".
* M. Hoffman, D. Blei, C. Wang, J. Paisley (2013), "Stochastic variational inference".
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..results import Draws, VITrace
from ..validation import positive as check_positive_option
from .optim import make_optimizer, optimizer_spec
from .potential import FlatPotential, initial_theta, make_potential

Tensor = torch.Tensor

KL_WEIGHTINGS = ("uniform", "blundell", "none")
ESTIMATORS = ("reparam", "stl", "score")
KL_MODES = ("auto", "analytic", "mc")
SCHEDULES = ("exponential", "plateau", "constant")
PLATEAU_METRICS = ("split", "elbo")
INIT_LOCS = ("uniform", "kaiming")
TRACES = ("loss", "elbo", "nll", "kl", "lr_loc", "lr_scale")

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_WEIGHT = re.compile(r"^layers\.(\d+)\.(weight|bias)$")


# ------------------------------------------------------------ pure functions
def inverse_softplus(x: float) -> float:
    """``rho`` with ``softplus(rho) = x`` (``x > 0``)."""
    return x + math.log(-math.expm1(-x))


def num_batches(num_data: int, batch_size: int | None) -> int:
    """Minibatches per epoch, ``M = ceil(N / B)`` (1 for full-batch training)."""
    return 1 if batch_size is None or batch_size >= num_data else -(-num_data // batch_size)


def kl_weights(num_batches: int, scheme: str | float = "uniform") -> Tensor:
    r"""KL weights :math:`\pi_1..\pi_M` of the minibatches of one epoch (float64).

    ``"uniform"``: :math:`1/M`; ``"blundell"``: :math:`2^{M-i}/(2^M-1)`;
    a number :math:`\lambda > 0`: :math:`\lambda^i/\sum_{k=1}^M\lambda^k`;
    ``"none"``: 1 each. All but ``"none"`` sum to 1.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, numbers.Integral) or num_batches < 1:
        raise ValueError(f"num_batches must be a positive integer, got {num_batches!r}")
    check_kl_weighting(scheme)
    i = torch.arange(1, num_batches + 1, dtype=torch.float64)
    if scheme == "none":
        return torch.ones(num_batches, dtype=torch.float64)
    if scheme == "uniform":
        return torch.full((num_batches,), 1.0 / num_batches, dtype=torch.float64)
    lam = 0.5 if scheme == "blundell" else float(scheme)
    return torch.softmax(i * math.log(lam), 0)  # lambda^i / sum_k lambda^k, without overflow


def check_kl_weighting(scheme) -> None:
    """Raise a clear ValueError unless ``scheme`` is a known name or a positive number."""
    if isinstance(scheme, str):
        if scheme in KL_WEIGHTINGS:
            return
    elif (isinstance(scheme, numbers.Real) and not isinstance(scheme, bool) and math.isfinite(scheme)
          and scheme > 0):
        return
    raise ValueError(f"kl_weighting {scheme!r}: choose one of {', '.join(KL_WEIGHTINGS)}, "
                     "or a positive number lambda (pi_i proportional to lambda^i)")


def gaussian_kl(loc: Tensor, scale: Tensor, prior_scale: Tensor | float) -> Tensor:
    r"""Elementwise closed-form KL of a Gaussian guide to a centred Gaussian prior:

    .. math:: \mathrm{KL}(N(\mu, \sigma^2) \,\|\, N(0, s^2)) = \log(s/\sigma) + (\sigma^2 + \mu^2)/(2s^2) - 1/2
    """
    prior_scale = torch.as_tensor(prior_scale, dtype=loc.dtype)
    return torch.log(prior_scale / scale) + (scale ** 2 + loc ** 2) / (2 * prior_scale ** 2) - 0.5


def normal_log_prob(theta: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """Elementwise ``log N(theta; loc, scale^2)``."""
    return -0.5 * ((theta - loc) / scale) ** 2 - torch.log(scale) - _HALF_LOG_2PI


@dataclass
class ELBOTerms:
    """Per-particle pieces of the negative ELBO at draws ``theta = loc + scale * eps``.

    Attributes
    ----------
    kl_analytic : Tensor
        Scalar: closed-form KL of the Gaussian-prior coordinates (0 if none).
    kl_mc : Tensor
        ``[P]``: ``log q - log p`` of the other coordinates at each draw.
    nll : Tensor
        ``[P]``: negative log likelihood (of a minibatch scaled by N/B).
    log_q : Tensor or None
        ``[P]``: ``log q_phi(theta)`` of every coordinate with ``theta`` held
        fixed (score-function estimator only).
    """

    kl_analytic: Tensor
    kl_mc: Tensor
    nll: Tensor
    log_q: Tensor | None = None

    @property
    def kl(self) -> Tensor:
        """``[P]``: the KL estimate at each draw."""
        return self.kl_analytic + self.kl_mc


def elbo_terms(loc: Tensor, rho: Tensor, eps: Tensor, log_density: Callable[[Tensor], tuple[Tensor, Tensor]],
               estimator: str = "reparam", prior_scale: Tensor | None = None) -> ELBOTerms:
    r"""The KL and NLL estimates, wired so that autograd gives ``estimator``'s gradient.

    Parameters
    ----------
    loc, rho : Tensor ``[D]``
        Guide parameters, :math:`\sigma = \operatorname{softplus}(\rho)`.
    eps : Tensor ``[P, D]``
        Standard normal noise; :math:`\theta = \mu + \sigma\epsilon`.
    log_density : callable
        ``theta [P, D] -> (log_prior, log_lik)``, each ``[P]``; ``log_prior``
        covers only the coordinates where ``prior_scale`` is NaN.
    estimator : {"reparam", "stl", "score"}
        ``"stl"`` detaches ``loc`` and ``rho`` inside :math:`\log q`; ``"score"``
        detaches :math:`\theta` and returns :math:`\log q_\phi(\theta)` for REINFORCE.
    prior_scale : Tensor ``[D]``, optional
        Prior sd of the coordinates with a closed-form KL, NaN elsewhere; None: no closed form.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r}: choose one of {', '.join(ESTIMATORS)}")
    scale = F.softplus(rho)
    theta = loc + scale * eps
    if estimator == "score":
        theta = theta.detach()
    q_loc, q_scale = (loc.detach(), scale.detach()) if estimator == "stl" else (loc, scale)
    analytic = None if prior_scale is None else torch.isfinite(prior_scale)
    if analytic is not None and bool(analytic.all()) and estimator != "score":
        kl_analytic = gaussian_kl(loc, scale, prior_scale).sum()  # nothing left to Monte Carlo
        log_q, log_q_mc = None, torch.zeros(theta.shape[:-1], dtype=theta.dtype)
    else:
        log_q = normal_log_prob(theta, q_loc, q_scale)
        if analytic is not None and bool(analytic.any()):
            kl_analytic = gaussian_kl(loc[analytic], scale[analytic], prior_scale[analytic]).sum()
            log_q_mc = log_q[..., ~analytic].sum(-1)
        else:
            kl_analytic = torch.zeros((), dtype=loc.dtype)
            log_q_mc = log_q.sum(-1)
    log_prior, log_lik = log_density(theta)
    return ELBOTerms(kl_analytic, log_q_mc - log_prior, -log_lik,
                     log_q.sum(-1) if estimator == "score" else None)


def surrogate_loss(terms: ELBOTerms, kl_weight: float = 1.0, estimator: str = "reparam",
                   baseline: float | Tensor | str = 0.0) -> Tensor:
    r"""A scalar whose gradient is the estimator's estimate of :math:`\nabla_\phi E_q[w\,\mathrm{KL} + \mathrm{NLL}]`.

    ``"reparam"`` / ``"stl"``: the particle mean of ``w * kl + nll`` (built by
    :func:`elbo_terms`). ``"score"``: :math:`w\,\mathrm{KL}_\text{analytic} +
    \operatorname{mean}_p[(f_p - b_p)\log q_\phi(\theta_p)]` with
    :math:`f = w\,\mathrm{KL}_\text{mc} + \mathrm{NLL}` held constant; ``baseline``
    is a number, or ``"loo"`` (each particle's baseline is the mean of the others).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r}: choose one of {', '.join(ESTIMATORS)}")
    if estimator != "score":
        return (kl_weight * terms.kl + terms.nll).mean()
    if terms.log_q is None:
        raise ValueError("surrogate_loss: the score estimator needs terms built with estimator='score'")
    f = (kl_weight * terms.kl_mc + terms.nll).detach()
    if isinstance(baseline, str):
        if baseline != "loo":
            raise ValueError(f"baseline {baseline!r}: give a number or 'loo'")
        if f.numel() < 2:
            raise ValueError("baseline 'loo' needs num_particles >= 2")
        baseline = (f.sum() - f) / (f.numel() - 1)
    return kl_weight * terms.kl_analytic + ((f - baseline) * terms.log_q).mean()


# ------------------------------------------------------------------ options
def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _choose(name: str, value, choices) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} {value!r}: choose one of {', '.join(choices)}")


@dataclass(frozen=True)
class VIOptions:
    """Every option of a mean-field fit, validated on construction (see the module docstring).

    Parameters
    ----------
    num_steps : int
        Optimisation steps (an epoch is ``ceil(N / batch_size)`` steps).
    lr, scale_lr : float
        Learning rates of the means and of the rho's (``scale_lr=None``: ``lr``).
    optimizer, scale_optimizer : str or dict
        ``"adam"``, ``"sgd"``, ``"adabound"``... or ``{"kind": "sgd", "momentum": 0.9}``;
        ``scale_optimizer=None``: the same as ``optimizer``.
    schedule : {"exponential", "plateau", "constant"}
        ``exponential``: both rates decay geometrically to ``lr_decay`` times their
        start over ``num_steps``. ``plateau``: ``ReduceLROnPlateau`` (``plateau_factor``,
        ``plateau_patience`` epochs) per group, stepped each epoch on the epoch's NLL
        (means) and KL (scales) (``plateau_metric="split"``) or on the -ELBO (``"elbo"``).
    batch_size : int, optional
        Minibatch size; None: full batch.
    kl_weighting : {"uniform", "blundell", "none"} or float
        See :func:`kl_weights`.
    estimator : {"reparam", "stl", "score"}
    kl : {"auto", "analytic", "mc"}, optional
        None: ``"mc"`` for ``stl``, ``"auto"`` otherwise.
    num_particles : int
        Draws of theta per step.
    init_scale, init_rho : float
        Initial guide sd; ``init_rho`` (if given) sets ``sigma = softplus(init_rho)`` instead.
    init_loc : {"uniform", "kaiming"}
        Initial means: uniform in ``(-init_radius, init_radius)``, or Kaiming-uniform
        ``U(+-sqrt(6 / fan_in))`` for layer weights, 0 for biases (BNN only).
    score_baseline : bool
        Use a baseline with the score-function estimator.
    """

    num_steps: int = 2000
    lr: float = 0.01
    scale_lr: float | None = None
    optimizer: Any = "adam"
    scale_optimizer: Any = None
    schedule: str = "exponential"
    lr_decay: float = 0.1
    plateau_factor: float = 0.1
    plateau_patience: int = 1
    plateau_metric: str = "split"
    batch_size: int | None = None
    kl_weighting: Any = "uniform"
    estimator: str = "reparam"
    kl: str | None = None
    num_particles: int = 1
    init_scale: float = 0.05
    init_rho: float | None = None
    init_loc: str = "uniform"
    init_radius: float = 1.0
    score_baseline: bool = True

    def __post_init__(self):
        for name in ("lr", "lr_decay", "init_scale", "init_radius"):
            check_positive_option(name, getattr(self, name))
        if self.scale_lr is not None:
            check_positive_option("scale_lr", self.scale_lr)
        _check_int("num_steps", self.num_steps, 1)
        _check_int("num_particles", self.num_particles, 1)
        if self.batch_size is not None:
            _check_int("batch_size", self.batch_size, 1)
        _check_int("plateau_patience", self.plateau_patience, 0)
        if (isinstance(self.plateau_factor, bool) or not isinstance(self.plateau_factor, numbers.Real)
                or not 0 < self.plateau_factor < 1):
            raise ValueError(f"plateau_factor must be strictly between 0 and 1, got {self.plateau_factor!r}")
        _choose("schedule", self.schedule, SCHEDULES)
        _choose("plateau_metric", self.plateau_metric, PLATEAU_METRICS)
        _choose("estimator", self.estimator, ESTIMATORS)
        _choose("init_loc", self.init_loc, INIT_LOCS)
        check_kl_weighting(self.kl_weighting)
        if self.kl is not None:
            _choose("kl", self.kl, KL_MODES)
        if self.estimator == "stl" and self.kl == "analytic":
            raise ValueError("estimator 'stl' acts on the Monte Carlo log q; with kl='analytic' it would equal "
                             "'reparam': use kl='mc' (the default for stl) or kl='auto'")
        if self.init_rho is not None and (isinstance(self.init_rho, bool) or not isinstance(self.init_rho, numbers.Real)
                                          or not math.isfinite(self.init_rho)):
            raise ValueError(f"init_rho must be a finite number, got {self.init_rho!r}")
        if not isinstance(self.score_baseline, bool):
            raise ValueError(f"score_baseline must be True or False, got {self.score_baseline!r}")
        optimizer_spec(self.optimizer, "optimizer")
        optimizer_spec(self.scale_optimizer if self.scale_optimizer is not None else self.optimizer,
                       "scale_optimizer")

    @property
    def kl_mode(self) -> str:
        """The KL mode in force (resolving ``kl=None``)."""
        return self.kl or ("mc" if self.estimator == "stl" else "auto")

    @property
    def initial_scale(self) -> float:
        return F.softplus(torch.tensor(float(self.init_rho))).item() if self.init_rho is not None else self.init_scale

    @property
    def initial_rho(self) -> float:
        return float(self.init_rho) if self.init_rho is not None else inverse_softplus(self.init_scale)


# -------------------------------------------------------------- the fitter
@dataclass
class MeanFieldGuide:
    """``N(loc, diag(scale^2))`` on the flat unconstrained vector ``[D]``."""

    loc: Tensor
    scale: Tensor

    def sample(self, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """``[num_samples, D]`` iid draws."""
        eps = torch.randn(num_samples, self.loc.numel(), dtype=self.loc.dtype, generator=generator)
        return self.loc + self.scale * eps

    def kl(self, prior_scale: Tensor | float) -> Tensor:
        """Closed-form KL to an iid ``N(0, prior_scale^2)`` prior."""
        return gaussian_kl(self.loc, self.scale, prior_scale).sum()


@dataclass
class VIFit:
    """A fitted guide and its optimisation history.

    Attributes
    ----------
    guide : MeanFieldGuide
    trace : dict of ndarray ``[num_steps]``
        Per step: ``loss`` (the bracket of L_i in nats, NaN where the step was
        skipped), ``elbo`` (``-(kl + nll)``: unbiased whatever the weighting),
        ``nll``, ``kl``, ``lr_loc``, ``lr_scale`` (the rates the step used).
    epochs : dict of ndarray ``[num_epochs]``
        Means over each completed epoch of ``loss``, ``elbo``, ``nll``, ``kl``;
        ``lr_loc``, ``lr_scale`` at the epoch's end.
    num_batches : int
    kl_weights : ndarray ``[num_batches]``
        pi_i of the scheme.
    """

    guide: MeanFieldGuide
    trace: dict[str, np.ndarray]
    epochs: dict[str, np.ndarray]
    num_batches: int
    kl_weights: np.ndarray

    @property
    def skipped_steps(self) -> int:
        return int(np.isnan(self.trace["loss"]).sum())


def analytic_prior_scale(potential, kl_mode: str) -> Tensor | None:
    """Prior sd per coordinate where the KL is taken in closed form (NaN elsewhere),
    or None when nothing is; ``kl_mode="analytic"`` insists on every coordinate."""
    if kl_mode == "mc":
        return None
    scale_of = getattr(potential, "gaussian_prior_scale", None)
    scale = scale_of() if scale_of is not None else torch.full((potential.dim,), math.nan)
    if kl_mode == "analytic" and not bool(torch.isfinite(scale).all()):
        raise ValueError(f"kl='analytic' needs an iid Gaussian prior on every unconstrained coordinate; "
                         f"not so for {', '.join(_sites_without_closed_form(potential, scale))}: use kl='auto' "
                         "(closed form where possible, Monte Carlo elsewhere) or kl='mc'")
    return scale if bool(torch.isfinite(scale).any()) else None


def _sites_without_closed_form(potential, scale: Tensor) -> list[str]:
    names = getattr(potential, "names", None) or ["theta"]
    sizes = getattr(potential, "sizes", None) or [potential.dim]
    parts = torch.split(scale, sizes)
    return [n for n, p in zip(names, parts) if not bool(torch.isfinite(p).all())]


def initial_loc(potential: FlatPotential, init_loc: str = "uniform", init_radius: float = 1.0) -> Tensor:
    """Initial means ``[D]``: uniform in ``(-init_radius, init_radius)`` (retried until the
    potential is finite), or Kaiming-uniform for BNN layer weights (zero biases)."""
    if init_loc == "uniform":
        return initial_theta(potential, 1, init_radius)[0]
    model = getattr(potential, "model", None)
    if model is None or not hasattr(model, "param_shapes"):
        raise ValueError("init_loc 'kaiming' needs a BNN potential (it reads the layers' fan-in)")
    loc = initial_theta(potential, 1, init_radius)[0]
    parts = dict(zip(potential.names, torch.split(loc, potential.sizes)))
    for name, part in parts.items():
        match = _WEIGHT.match(name)
        if not match:
            continue
        if match.group(2) == "bias":
            part.zero_()
        else:
            fan_in = math.prod(potential.shapes[name][1:])
            bound = math.sqrt(6.0 / fan_in)
            part.uniform_(-bound, bound)
    with torch.no_grad():
        if not bool(torch.isfinite(potential(loc[None])).all()):
            raise RuntimeError("init_loc 'kaiming': the potential is not finite at the initial means")
    return loc


def _schedulers(opts: VIOptions, optimizers):
    if opts.schedule == "exponential":
        gamma = opts.lr_decay ** (1.0 / opts.num_steps)
        return [torch.optim.lr_scheduler.ExponentialLR(o, gamma=gamma) for o in optimizers]
    if opts.schedule == "plateau":
        return [torch.optim.lr_scheduler.ReduceLROnPlateau(o, mode="min", factor=opts.plateau_factor,
                                                           patience=opts.plateau_patience) for o in optimizers]
    return []


def fit_mean_field(potential, options: VIOptions | None = None, *,
                   callback: Callable[[int, MeanFieldGuide, dict], Any] | None = None, **kwargs) -> VIFit:
    """Fit the mean-field guide (see the module docstring for the objective).

    Parameters
    ----------
    potential : BNNPotential, or any object with ``dim``, ``num_data``,
        ``log_prior_and_likelihood(theta, rows, skip_gaussian)``, ``gaussian_prior_scale()``
        and ``__call__`` (the potential, used to find a finite start).
    options : VIOptions, optional
        ``**kwargs`` build one (or override fields of ``options``).
    callback : callable, optional
        ``callback(epoch, guide, summary)`` after every completed epoch, with a
        snapshot of the guide and the epoch's means (``loss, elbo, nll, kl, lr_loc, lr_scale``).

    Returns
    -------
    VIFit

    A step whose loss or gradient is not finite is skipped (no update; its
    ``loss`` recorded as NaN).
    """
    opts = replace(options, **kwargs) if options is not None else VIOptions(**kwargs)
    if not hasattr(potential, "log_prior_and_likelihood"):
        raise TypeError(f"fit_mean_field needs a potential with log_prior_and_likelihood (a BNNPotential), "
                        f"got {type(potential).__name__}")
    n = int(potential.num_data)
    m = num_batches(n, opts.batch_size)
    pi = kl_weights(m, opts.kl_weighting)
    prior_scale = analytic_prior_scale(potential, opts.kl_mode)
    skip_gaussian = prior_scale is not None
    loc = initial_loc(potential, opts.init_loc, opts.init_radius).clone().requires_grad_(True)
    rho = torch.full_like(loc, opts.initial_rho).requires_grad_(True)
    if prior_scale is not None:
        prior_scale = prior_scale.to(loc.dtype)
    opt_loc = make_optimizer(opts.optimizer, [loc], opts.lr, "optimizer")
    opt_rho = make_optimizer(opts.scale_optimizer if opts.scale_optimizer is not None else opts.optimizer,
                             [rho], opts.scale_lr or opts.lr, "scale_optimizer")
    optimizers = (opt_loc, opt_rho)
    schedulers = _schedulers(opts, optimizers)
    weights = (m * pi).tolist()  # M pi_i: the KL weight of step i in full-data units
    trace = {k: np.full(opts.num_steps, np.nan) for k in TRACES}
    epochs: dict[str, list] = {k: [] for k in TRACES}
    score = opts.estimator == "score"
    loo = score and opts.score_baseline and opts.num_particles > 1
    ema = None  # running mean of past losses: the score estimator's baseline with one particle
    batches: list = [None]
    for step in range(opts.num_steps):
        epoch, i = divmod(step, m)
        if i == 0 and m > 1:
            batches = list(torch.tensor_split(torch.randperm(n), m))
        rows = batches[i]
        eps = torch.randn(opts.num_particles, loc.numel(), dtype=loc.dtype)
        terms = elbo_terms(loc, rho, eps,
                           lambda theta: potential.log_prior_and_likelihood(theta, rows, skip_gaussian),
                           opts.estimator, prior_scale)
        w = weights[i]
        surrogate = surrogate_loss(terms, w, opts.estimator, "loo" if loo else (ema or 0.0))
        for o in optimizers:
            o.zero_grad()
        (surrogate / n).backward()
        loss = float((w * terms.kl + terms.nll).mean().detach())
        finite = math.isfinite(loss) and all(bool(torch.isfinite(p.grad).all()) for p in (loc, rho))
        trace["lr_loc"][step] = opt_loc.param_groups[0]["lr"]
        trace["lr_scale"][step] = opt_rho.param_groups[0]["lr"]
        if finite:
            for o in optimizers:
                o.step()
            trace["loss"][step] = loss
        kl, nll = float(terms.kl.mean().detach()), float(terms.nll.mean().detach())
        trace["kl"][step], trace["nll"][step], trace["elbo"][step] = kl, nll, -(kl + nll)
        if score and opts.score_baseline and not loo and finite:
            f = float((w * terms.kl_mc + terms.nll).mean().detach())
            ema = f if ema is None else 0.9 * ema + 0.1 * f
        if opts.schedule == "exponential":
            for s in schedulers:
                s.step()
        if i == m - 1:
            summary = _epoch_summary(trace, step + 1 - m, step + 1, optimizers)
            for k, v in summary.items():
                epochs[k].append(v)
            if opts.schedule == "plateau":
                _plateau_step(schedulers, summary, opts.plateau_metric)
            if callback is not None:
                callback(epoch, MeanFieldGuide(loc.detach().clone(), F.softplus(rho).detach().clone()), summary)
    guide = MeanFieldGuide(loc.detach(), F.softplus(rho).detach())
    return VIFit(guide, trace, {k: np.asarray(v, dtype=float) for k, v in epochs.items()}, m, pi.numpy())


def _epoch_summary(trace, start: int, end: int, optimizers) -> dict[str, float]:
    summary = {}
    for k in ("loss", "elbo", "nll", "kl"):
        part = trace[k][start:end]
        summary[k] = float(np.mean(part[np.isfinite(part)])) if np.isfinite(part).any() else math.nan
    summary["lr_loc"] = optimizers[0].param_groups[0]["lr"]
    summary["lr_scale"] = optimizers[1].param_groups[0]["lr"]
    return summary


def _plateau_step(schedulers, summary: dict[str, float], metric: str) -> None:
    """Means on the epoch's NLL and scales on its KL (``split``), or both on the -ELBO."""
    metrics = (summary["nll"], summary["kl"]) if metric == "split" else (-summary["elbo"],) * 2
    for scheduler, value in zip(schedulers, metrics):
        if math.isfinite(value):
            scheduler.step(value)


# ------------------------------------------------------------------ engine
def sample_mean_field(potential, options: VIOptions, num_samples: int, num_chains: int) -> Draws:
    """One independent mean-field fit per chain, then ``num_samples`` draws from each guide."""
    opts = options
    analytic_prior_scale(potential, opts.kl_mode)  # fail before fitting on a bad kl=
    fits = [fit_mean_field(potential, opts) for _ in range(num_chains)]
    theta = torch.stack([f.guide.sample(num_samples) for f in fits])  # [chain, draw, D]
    with torch.no_grad():
        samples = {k: v.numpy() for k, v in potential.constrain(theta).items()}
        lp = -potential(theta.reshape(-1, potential.dim)).reshape(num_chains, num_samples).numpy()
    trace = {k: np.stack([f.trace[k] for f in fits]) for k in TRACES}
    vi = VITrace(loss=trace["loss"], terms={k: v for k, v in trace.items() if k != "loss"},
                 guide={"loc": torch.stack([f.guide.loc for f in fits]).numpy(),
                        "scale": torch.stack([f.guide.scale for f in fits]).numpy()},
                 num_batches=fits[0].num_batches, skipped_steps=np.array([f.skipped_steps for f in fits]))
    return Draws(samples, {"lp": lp}, vi=vi)
