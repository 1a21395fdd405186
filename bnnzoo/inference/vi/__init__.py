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
see :mod:`bnnzoo.inference.vi.optim`), learning rate (``lr`` / ``scale_lr``) and
schedule: adaptive (the default: constant rates until the ELBO settles, then a
geometric decay, stopping once converged; ``num_steps`` is a cap), exponential decay,
or ``ReduceLROnPlateau`` stepped once per epoch, the means' on the epoch's NLL and
the scales' on its KL (``plateau_metric="split"``).

**Convergence** (:mod:`bnnzoo.inference.vi.convergence`): a fit has converged when
its smoothed ELBO has settled (the change of the mean ELBO estimate between its last
two windows of steps, in standard errors) and the mean of fresh gradient estimates at
the fitted guide is zero within noise; a fit that has not converged warns.

Each "chain" of the ``svi`` engine is an independent fit from its own random
start; its posterior draws are iid draws from the fitted guide, exported
exactly like MCMC draws (so R-hat across chains measures how much fits disagree).
Local reparameterisation is not offered: it needs a second forward pass
outside ``BNN.apply`` and a closed-form KL, and would not compose with ``"stl"``.

Modules: :mod:`~bnnzoo.inference.vi.elbo` (KL weights, KL, the estimators),
:mod:`~bnnzoo.inference.vi.options` (:class:`VIOptions`), :mod:`~bnnzoo.inference.vi.fit`
(:func:`fit_mean_field`, :func:`sample_mean_field`), :mod:`~bnnzoo.inference.vi.convergence`
(the convergence tests), :mod:`~bnnzoo.inference.vi.optim` (AdaBound, AMSBound, the
optimizer registry).

References
----------
* J. W. Book (2020), "Training Bayesian neural networks" (paper 002), ch. 2, 5.
* C. Blundell, J. Cornebise, K. Kavukcuoglu, D. Wierstra (2015), "Weight uncertainty in neural networks".
* G. Roeder, Y. Wu, D. Duvenaud (2017), "Sticking the landing".
* M. Hoffman, D. Blei, C. Wang, J. Paisley (2013), "Stochastic variational inference".
"""

from .elbo import (ESTIMATORS, KL_MODES, KL_WEIGHTINGS, ELBOTerms, check_kl_weighting, elbo_terms, gaussian_kl,
                   inverse_softplus, kl_weights, normal_log_prob, num_batches, surrogate_loss)
from .fit import (TRACES, MeanFieldGuide, VIFit, analytic_prior_scale, fit_mean_field, initial_loc,
                  sample_mean_field)
from .optim import (OPTIMIZERS, AdaBound, AMSBound, PyroAdaBound, PyroAMSBound, adabound_bounds, closure_loss,
                    make_optimizer, optimizer_spec)
from .options import INIT_LOCS, PLATEAU_METRICS, SCHEDULES, VIOptions

__all__ = [
    "ESTIMATORS", "KL_MODES", "KL_WEIGHTINGS", "ELBOTerms", "check_kl_weighting", "elbo_terms", "gaussian_kl",
    "inverse_softplus", "kl_weights", "normal_log_prob", "num_batches", "surrogate_loss",
    "TRACES", "MeanFieldGuide", "VIFit", "analytic_prior_scale", "fit_mean_field", "initial_loc",
    "sample_mean_field",
    "OPTIMIZERS", "AdaBound", "AMSBound", "PyroAdaBound", "PyroAMSBound", "adabound_bounds", "closure_loss",
    "make_optimizer", "optimizer_spec",
    "INIT_LOCS", "PLATEAU_METRICS", "SCHEDULES", "VIOptions",
]
