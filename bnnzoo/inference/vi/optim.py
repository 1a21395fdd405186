r"""Optimizers not in torch: AdaBound and AMSBound, and the optimizer registry of the SVI engine.

AdaBound (Luo, Xiong, Liu and Sun 2019) is Adam whose per-coordinate step
size is clipped into a band that closes on a final, SGD-like learning rate.
With :math:`g_t` the gradient (plus ``weight_decay * w``),

.. math::

    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
    v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2 \quad(\text{AMSBound: } \hat v_t = \max(\hat v_{t-1}, v_t)) \\
    \eta_t &= \operatorname{clip}\!\Big(\frac{\alpha \sqrt{1-\beta_2^t}/(1-\beta_1^t)}{\sqrt{v_t} + \epsilon},\;
              \eta_l(t),\; \eta_u(t)\Big), \qquad w_t = w_{t-1} - \eta_t\, m_t \\
    \eta_l(t) &= \alpha^*\Big(1 - \frac{1}{\gamma t + 1}\Big), \qquad
    \eta_u(t) = \alpha^*\Big(1 + \frac{1}{\gamma t}\Big)

Early on (:math:`\gamma t \ll 1`) the band is :math:`[0, \infty)` and the update
is Adam's; late (:math:`\gamma t \gg 1`) every coordinate's step is
:math:`\alpha^*`, i.e. SGD with momentum on the moving average :math:`m_t`.
As in the authors' implementation, the final rate follows any learning-rate
schedule: :math:`\alpha^* = \texttt{final\_lr} \cdot \texttt{lr} / \texttt{lr}_0`.
(Paper 002's appendix C writes the band with :math:`1-\beta_2` in place of
:math:`\gamma`; we keep the original paper's separate ``gamma``.)

Both are ordinary ``torch.optim.Optimizer`` subclasses, so Pyro users wrap them
like any torch optimizer: ``pyro.optim.PyroOptim(AdaBound, {"lr": 1e-3})``, or
:func:`PyroAdaBound` / :func:`PyroAMSBound`.

References
----------
* L. Luo, Y. Xiong, Y. Liu, X. Sun (2019), "Adaptive gradient methods with
  dynamic bound of learning rate", ICLR 2019, arXiv:1902.09843.
* J. W. Book (2020), "Training Bayesian neural networks" (paper 002), sec. 4.4, 5.3, app. C.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Iterable, Mapping

import torch
from pyro.optim import PyroOptim

from ...validation import in_interval

Tensor = torch.Tensor


def adabound_bounds(final_lr: float, gamma: float, step: int) -> tuple[float, float]:
    r"""The clipping band :math:`(\eta_l(t), \eta_u(t))` of AdaBound at step ``t >= 1``."""
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step!r}")
    return final_lr * (1.0 - 1.0 / (gamma * step + 1.0)), final_lr * (1.0 + 1.0 / (gamma * step))


def closure_loss(closure) -> Tensor | None:
    """The loss of an optimizer's ``step(closure)``: ``closure()`` with gradients on, or None."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class AdaBound(torch.optim.Optimizer):
    """AdaBound: Adam early, SGD (rate ``final_lr``) late, by clipping Adam's step size.

    :param params: parameters or parameter groups.
    :param lr: Adam's learning rate :math:`\\alpha` (the early phase).
    :param betas: :math:`(\\beta_1, \\beta_2)` of the moving averages.
    :param final_lr: the SGD rate :math:`\\alpha^*` the band closes on.
    :param gamma: convergence speed of the band (about ``1/gamma`` steps to close).
    :param eps: added to :math:`\\sqrt{v_t}`.
    :param weight_decay: L2 penalty added to the gradient.
    :param amsbound: use the running maximum of :math:`v_t` (AMSBound).

    **References** Luo et al. (2019), arXiv:1902.09843.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 final_lr: float = 0.1, gamma: float = 1e-3, eps: float = 1e-8, weight_decay: float = 0.0,
                 amsbound: bool = False):
        in_interval("lr", lr, low_open=True)
        in_interval("final_lr", final_lr, low_open=True)
        in_interval("gamma", gamma, low_open=True)
        in_interval("eps", eps)
        in_interval("weight_decay", weight_decay)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        in_interval("betas[0]", betas[0], 0.0, 1.0)
        in_interval("betas[1]", betas[1], 0.0, 1.0)
        defaults = dict(lr=lr, betas=tuple(betas), final_lr=final_lr, gamma=gamma, eps=eps,
                        weight_decay=weight_decay, amsbound=bool(amsbound))
        super().__init__(params, defaults)
        for group in self.param_groups:
            group.setdefault("base_lr", group["lr"])

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient."""
        loss = closure_loss(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            final_lr = group["final_lr"] * group["lr"] / group["base_lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("AdaBound does not support sparse gradients")
                if group["weight_decay"]:
                    grad = grad.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    if group["amsbound"]:
                        state["max_exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["amsbound"]:
                    torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
                    denom = state["max_exp_avg_sq"].sqrt().add_(group["eps"])
                else:
                    denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                lower, upper = adabound_bounds(final_lr, group["gamma"], t)
                rate = torch.full_like(denom, step_size).div_(denom).clamp_(lower, upper)
                p.sub_(rate.mul_(exp_avg))
        return loss


class AMSBound(AdaBound):
    """AdaBound with AMSGrad's running maximum of the second moment (Luo et al. 2019)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 final_lr: float = 0.1, gamma: float = 1e-3, eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr, betas, final_lr, gamma, eps, weight_decay, amsbound=True)


def PyroAdaBound(optim_args: Mapping[str, Any], clip_args: Mapping[str, Any] | None = None) -> PyroOptim:
    """:class:`AdaBound` for ``pyro.infer.SVI`` (like ``pyro.optim.Adam``)."""
    return PyroOptim(AdaBound, dict(optim_args), clip_args)


def PyroAMSBound(optim_args: Mapping[str, Any], clip_args: Mapping[str, Any] | None = None) -> PyroOptim:
    """:class:`AMSBound` for ``pyro.infer.SVI``."""
    return PyroOptim(AMSBound, dict(optim_args), clip_args)


# ------------------------------------------------------------- the registry
#: optimizers the "svi" engine knows by name: (class, fixed keyword arguments)
OPTIMIZERS: dict[str, tuple[type, dict[str, Any]]] = {
    "sgd": (torch.optim.SGD, {}),
    "adam": (torch.optim.Adam, {}),
    "amsgrad": (torch.optim.Adam, {"amsgrad": True}),
    "radam": (torch.optim.RAdam, {}),
    "rmsprop": (torch.optim.RMSprop, {}),
    "adabound": (AdaBound, {}),
    "amsbound": (AMSBound, {}),
}


def optimizer_spec(spec, field: str = "optimizer") -> tuple[str, dict[str, Any]]:
    """``(name, options)`` of an optimizer given as a name (``"adam"``) or a table
    (``{"kind": "sgd", "momentum": 0.9}``); unknown names or options raise ValueError."""
    if isinstance(spec, str):
        name, options = spec, {}
    elif isinstance(spec, Mapping):
        options = dict(spec)
        name = options.pop("kind", None)
        if not isinstance(name, str):
            raise ValueError(f"{field}: a table needs a 'kind' (an optimizer name), got {dict(spec)!r}")
    else:
        raise ValueError(f"{field}: expected an optimizer name or a table {{kind = ..., ...}}, got {spec!r}")
    if name not in OPTIMIZERS:
        raise ValueError(f"{field} {name!r}: unknown optimizer; choose one of {', '.join(OPTIMIZERS)}")
    cls, fixed = OPTIMIZERS[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters
               if p not in ("self", "params", "lr") and p not in fixed]
    unknown = sorted(set(options) - set(allowed))
    if "lr" in options:
        raise ValueError(f"{field}: give the learning rate as lr= / scale_lr=, not inside the optimizer table")
    if unknown:
        raise ValueError(f"{field} {name!r}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(allowed)}")
    return name, options


def make_optimizer(spec, params: Iterable[Tensor], lr: float, field: str = "optimizer") -> torch.optim.Optimizer:
    """Build the optimizer ``spec`` (see :func:`optimizer_spec`) on ``params`` with rate ``lr``."""
    name, options = optimizer_spec(spec, field)
    cls, fixed = OPTIMIZERS[name]
    try:
        return cls(params, lr=lr, **fixed, **options)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field} {name!r}: {err}") from None
