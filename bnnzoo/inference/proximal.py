r"""Proximal operators and the leapfrog forces of proximal HMC, as pure functions on tensors.

Target :math:`U(w) = f(w) + \sum_d \beta_d |w_d|` with ``f`` smooth (the
negative log likelihood plus every smooth prior term) and :math:`\beta` the
per-coordinate L1 weights (``1/scale`` of a Laplace prior, 0 where there is no
L1 part). ``w``, ``grad_f`` are ``[C, D]``; ``beta`` is ``[D]`` (or broadcastable);
``lam`` is the Moreau-envelope parameter :math:`\lambda > 0`.

* :func:`soft_threshold`: :math:`\operatorname{prox}_{t|\cdot|}(w) = \operatorname{sign}(w)\max(|w| - t, 0)`.
* :func:`moreau_force`: :math:`\nabla f(w) + \operatorname{clip}(w/\lambda, -\beta, \beta)`, the
  gradient of :math:`f` plus that of the Moreau envelope of the L1 term
  (Pereyra 2016; Chaari et al. 2016).
* :func:`prox_gradient_force`: :math:`(w - \operatorname{prox}_{\lambda\beta|\cdot|}(w - \lambda \nabla f(w)))/\lambda`,
  the "plug and play" rule of paper 000 (one forward-backward step).
* :func:`ns_hmc_force`: :math:`(w - \operatorname{prox}_{\lambda U}(w))/\lambda`, the gradient
  of the Moreau envelope of the whole ``U`` (ns-HMC, Chaari et al. 2016), with the
  prox computed by a fixed number of proximal-gradient iterations (:func:`prox_of_potential`).

Any of them is a deterministic function of the position only, so a leapfrog
driven by it is still volume preserving and reversible: HMC with a Metropolis
test on the *true* energy is exact whichever force (and whichever ``lam``) is used.

**References**

* Chaari, Tourneret, Chaux and Batatia (2016). A Hamiltonian Monte Carlo method
  for non-smooth energy sampling. IEEE Trans. Signal Processing 64(21).
* Pereyra (2016). Proximal Markov chain Monte Carlo algorithms. Statistics and Computing 26.
* Beck and Teboulle (2009). A fast iterative shrinkage-thresholding algorithm
  for linear inverse problems. SIAM J. Imaging Sciences 2(1) (why we do not use it:
  :func:`prox_of_potential`).
"""

from __future__ import annotations

from typing import Callable

import torch

Tensor = torch.Tensor
GradFn = Callable[[Tensor], Tensor]


def soft_threshold(w: Tensor, t: Tensor | float) -> Tensor:
    r"""The proximity operator of :math:`t\,|\cdot|`: :math:`\operatorname{sign}(w)\max(|w| - t, 0)` (elementwise)."""
    return torch.sign(w) * torch.clamp(w.abs() - t, min=0.0)


def l1_norm(w: Tensor, beta: Tensor) -> Tensor:
    r""":math:`\sum_d \beta_d |w_d|` per chain: ``[C, D] -> [C]``."""
    return (beta * w.abs()).sum(-1)


def moreau_force(w: Tensor, grad_f: Tensor, beta: Tensor, lam: float | Tensor) -> Tensor:
    r"""Leapfrog force of proximal HMC:

    .. math:: F(w) = \nabla f(w) + \frac{w - \operatorname{prox}_{\lambda\beta|\cdot|}(w)}{\lambda}
              = \nabla f(w) + \operatorname{clip}(w/\lambda, -\beta, \beta).

    Equal to :math:`\nabla U` wherever :math:`|w_d| \ge \lambda\beta_d`; linear
    through 0 inside that band.
    """
    beta = torch.as_tensor(beta, dtype=w.dtype, device=w.device)
    return grad_f + torch.maximum(torch.minimum(w / lam, beta), -beta)


def prox_gradient_force(w: Tensor, grad_f: Tensor, beta: Tensor, lam: float | Tensor) -> Tensor:
    r"""Forward-backward ("plug and play", paper 000) force:

    .. math:: F(w) = \frac{w - \operatorname{prox}_{\lambda\beta|\cdot|}(w - \lambda\nabla f(w))}{\lambda}
              = \begin{cases} \nabla f(w) + \beta \operatorname{sign}(z) & |z| > \lambda\beta \\
                              w / \lambda & \text{otherwise} \end{cases}
              ,\quad z = w - \lambda \nabla f(w),

    written in the second form, which has no cancellation when :math:`\lambda` is small.
    """
    beta = torch.as_tensor(beta, dtype=w.dtype, device=w.device)
    z = w - lam * grad_f
    outside = z.abs() > lam * beta
    return torch.where(outside, grad_f + beta * torch.sign(z), w / lam)


def prox_of_potential(w: Tensor, grad_f: Tensor, smooth_grad: GradFn, beta: Tensor, lam: float | Tensor,
                      num_iter: int) -> tuple[Tensor, Tensor]:
    r"""``num_iter`` proximal-gradient iterations for :math:`\operatorname{prox}_{\lambda U}(w) =
    \arg\min_z f(z) + \beta\|z\|_1 + \|z - w\|^2 / (2\lambda)`.

    A forward-backward step of size :math:`\lambda` on the smooth part
    :math:`f(z) + \|z-w\|^2/(2\lambda)` is the fixed-point iteration

    .. math:: z_k = \operatorname{prox}_{\lambda\beta|\cdot|}(w - \lambda \nabla f(z_{k-1})),\quad z_0 = w,

    a contraction with rate :math:`\lambda\,\mathrm{Lip}(\nabla f)` when that is
    below 1 (the prox is non-expansive), so a few iterations suffice for the
    small :math:`\lambda` HMC uses. Why not FISTA (Beck and Teboulle 2009): the
    subproblem is :math:`(1 + \lambda L)`-conditioned, where momentum gains
    nothing, and FISTA's momentum at this step size diverges as soon as
    :math:`\lambda L` is not small; the safe FISTA step :math:`\lambda/(1+\lambda L)` needs
    :math:`L`, which is unknown. ``lam`` may be per coordinate (``[D]``).

    A fixed iteration count keeps the result a deterministic function of ``w``
    alone, chain by chain (needed for a reversible leapfrog).

    Returns ``(z, grad_last)``: the last iterate and the gradient that produced
    it, :math:`z = \operatorname{prox}_{\lambda\beta|\cdot|}(w - \lambda \nabla f(z_{k-1}))`;
    ``num_iter - 1`` gradient evaluations (``grad_f`` is :math:`\nabla f(w)`).
    """
    beta = torch.as_tensor(beta, dtype=w.dtype, device=w.device)
    grad_last = grad_f
    z = soft_threshold(w - lam * grad_last, lam * beta)
    for _ in range(num_iter - 1):
        grad_last = smooth_grad(z)
        z = soft_threshold(w - lam * grad_last, lam * beta)
    return z, grad_last


def ns_hmc_force(w: Tensor, grad_f: Tensor, beta: Tensor, lam: float | Tensor, smooth_grad: GradFn,
                 num_iter: int = 5) -> Tensor:
    r"""ns-HMC force, the gradient of the Moreau envelope of the whole ``U``:

    .. math:: F(w) = \frac{w - \operatorname{prox}_{\lambda U}(w)}{\lambda},

    with the prox from :func:`prox_of_potential` (``num_iter`` iterations,
    ``num_iter - 1`` extra gradient evaluations of ``f``; ``num_iter = 1`` is
    :func:`prox_gradient_force`). Written as the prox-gradient force at the
    gradient of the last iterate, which is the same number without cancellation.
    """
    _, grad_last = prox_of_potential(w, grad_f, smooth_grad, beta, lam, num_iter)
    return prox_gradient_force(w, grad_last, beta, lam)


def moreau_envelope_l1(w: Tensor, beta: Tensor, lam: float) -> Tensor:
    r"""Moreau envelope of :math:`\beta|\cdot|` per chain (the Huber function):
    :math:`\sum_d \min_z \beta_d|z| + (z - w_d)^2/(2\lambda)`. Its gradient is the
    L1 part of :func:`moreau_force`."""
    beta = torch.as_tensor(beta, dtype=w.dtype, device=w.device)
    z = soft_threshold(w, lam * beta)
    return (beta * z.abs() + (z - w) ** 2 / (2 * lam)).sum(-1)
