r"""The default target acceptance of the HMC-family engines, from the model's smoothness.

Leapfrog's local energy error is :math:`O(\epsilon^3)` on a smooth potential but
:math:`O(\epsilon)` at every kink it steps across (paper 003, Theorem 3.3): a
ReLU or leaky-ReLU network (or a max-pool) makes the log posterior piecewise
smooth with kinks wherever a unit switches on or off. The efficiency of HMC (accepted
proposals per unit of work, :math:`a\,l` with :math:`l` the scaled step size)
then peaks at a lower acceptance :math:`a`:

* fixed-length HMC (engines ``chees``, ``proximal_hmc``, ``fixed_hmc``): 0.8
  on a smooth network, measured (below); 0.45 on a piecewise-linear one, the maximiser of
  :math:`a\,\Phi^{-1}(1 - a/2)`, with the step size scaling as :math:`d^{-1/2}`
  instead of :math:`d^{-1/4}` (paper 003, Prop. 3.5);
* Pyro's adaptation (engines ``nuts``, ``hmc``, and ``batched_nuts``, which adapts the same
  NUTS statistic): 0.8 on a smooth network, Pyro's
  and Stan's default and the optimum of Betancourt et al.'s (2014) upper bound on
  the cost for a second-order energy error; 0.715 on a piecewise-linear one, the
  same upper-bound optimum for a first-order error (paper 003, App. A.5, Fig. 5).

The theory's smooth optimum, 0.651, maximises :math:`a\sqrt{\Phi^{-1}(1 - a/2)}`
(Beskos et al. 2013) for the *mean* acceptance of one chain. The fixed-length kernels
steer a stricter statistic, the harmonic mean over many chains times the fraction kept
(:func:`~bnnzoo.inference.adaptation.acceptance_statistic`), and a BNN posterior's
acceptance falls off a cliff within a factor 1.2 of the step size. On the cosine MLP
(ChEES, 8, 16 and 32 chains, 3 seeds; ``benchmarks/bench_step_size_sweep.py``,
``docs/algorithms.md``, "The target and the achieved acceptance"), with a step-size loop
that lands (dual averaging's gamma 0.15), 0.8 ended within 0.05 of itself at every chain
count with 0-2 divergent draws a run; 0.651 missed by 0.05-0.07 at 16 and 32 chains,
diverged 1-11 times a run, and at gamma 0.2 left one chain diverging at every draw in
1 of 9 runs. The ESS was about the same (0.8's median smallest ESS 0.66x to 1.2x 0.651's).
So 0.8 is the default for a smooth network. The piecewise-linear 0.45 is paper 003's and
was not re-measured this way.

Pyro's engines keep their convention (0.8 on NUTS's mean acceptance over the
tree is what Pyro and Stan users expect) and move to the paper's counterpart
of it; the fixed-length kernels use the measured 0.8 on a smooth network and the optimum of the
efficiency itself on a piecewise-linear one
(:func:`bnnzoo.diagnostics.theoretical_optimal_acceptance` computes 0.651 and 0.45). A
model that is not a :class:`~bnnzoo.models.BNN` (a plain Pyro model) is taken
as smooth: the previous defaults. Only the network counts: a Laplace prior is
piecewise affine too, but is not part of the rule (``proximal_hmc`` treats it
with its proximal force).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.bnn import BNN
from ..models.spec import BNNSpec, Conv2d

__all__ = ["PIECEWISE_LINEAR", "TARGETS", "TargetAccept", "kinks", "recommend_target_accept", "resolve_target_accept"]

#: activations whose derivative jumps (at 0): the network is piecewise smooth
PIECEWISE_LINEAR = ("relu", "leaky_relu")
#: engines that adapt toward Pyro's convention (bnnzoo's batched NUTS adapts the same statistic);
#: every other HMC-family engine is fixed-length
PYRO_ENGINES = ("nuts", "hmc", "batched_nuts")
FIXED_LENGTH_ENGINES = ("chees", "proximal_hmc", "fixed_hmc")
#: (family, smooth) -> target acceptance
TARGETS = {("fixed_length", True): 0.8, ("fixed_length", False): 0.45,
           ("pyro", True): 0.8, ("pyro", False): 0.715}
_WHY = {("fixed_length", True): "the acceptance statistic (harmonic mean over chains) at which fixed-length HMC "
                                "on a smooth BNN kept off the acceptance cliff and mixed best (measured; "
                                "docs/algorithms.md)",
        ("fixed_length", False): "the optimal acceptance of leapfrog HMC on piecewise-affine log densities "
                                 "(paper 003, Prop. 3.5(c))",
        ("pyro", True): "Pyro's and Stan's default (Betancourt et al. 2014's upper-bound optimum)",
        ("pyro", False): "the upper-bound optimum for a first-order energy error (paper 003, App. A.5), "
                         "the counterpart of Pyro's 0.8"}


@dataclass(frozen=True)
class TargetAccept:
    """A recommended target acceptance, with why.

    Attributes
    ----------
    value : float
    reason : str
        One sentence: what was found in the model and which result gives ``value``.
    smooth : bool
        False when the network has a piecewise-linear part.
    kinks : tuple of str
        The piecewise-linear parts, e.g. ``("layers[0].activation=relu",)``.
    """

    value: float
    reason: str
    smooth: bool
    kinks: tuple[str, ...] = ()

    def __float__(self) -> float:
        return self.value


def _spec_of(model) -> BNNSpec | None:
    """The spec of a BNN, of a spec, or of a potential built on a BNN; None otherwise."""
    if isinstance(model, BNNSpec):
        return model
    if isinstance(model, BNN):
        return model.spec
    inner = getattr(model, "model", None)
    return inner.spec if isinstance(inner, BNN) else None


def kinks(spec: BNNSpec) -> tuple[str, ...]:
    """The layers of ``spec`` that make the network piecewise linear: ReLU-family
    activations and max-pooling."""
    found = []
    for i, layer in enumerate(spec.layers):
        if layer.activation in PIECEWISE_LINEAR:
            found.append(f"layers[{i}].activation={layer.activation}")
        if isinstance(layer, Conv2d) and layer.pool:
            found.append(f"layers[{i}].pool={layer.pool} (max-pool)")
    return tuple(found)


def _family(engine: str | None) -> str:
    if engine is None or engine in FIXED_LENGTH_ENGINES:
        return "fixed_length"
    if engine in PYRO_ENGINES:
        return "pyro"
    raise ValueError(f"engine {engine!r}: no target acceptance for it; choose one of "
                     f"{', '.join(PYRO_ENGINES + FIXED_LENGTH_ENGINES)} (or None: fixed-length HMC)")


def recommend_target_accept(model, engine: str | None = None) -> TargetAccept:
    """The target acceptance for HMC on ``model``, with the reason (see the module table).

    Parameters
    ----------
    model : BNN, BNNSpec, BNNPotential or a Pyro model
        A network with a ReLU/leaky-ReLU activation or a max-pool is
        piecewise linear; any other network is smooth. A plain Pyro model is
        taken as smooth.
    engine : str, optional
        ``"nuts"``/``"hmc"`` (Pyro's adaptation) or ``"chees"``, ``"proximal_hmc"``,
        ``"fixed_hmc"``; None: fixed-length HMC, the paper's setting.

    Returns
    -------
    TargetAccept

    Examples
    --------
    >>> from bnnzoo.models import zoo
    >>> recommend_target_accept(zoo.cosine_mlp(activation="relu")).value
    0.45
    """
    family = _family(engine)
    spec = _spec_of(model)
    found = kinks(spec) if spec is not None else ()
    smooth = not found
    value = TARGETS[family, smooth]
    if spec is None:
        what = "not a BNN (no activations to inspect), taken as smooth"
    elif found:
        what = "piecewise-linear network (" + ", ".join(found) + ")"
    else:
        what = "smooth network (no ReLU-family activation, no max-pool)"
    return TargetAccept(value, f"{what}: {value} is {_WHY[family, smooth]}", smooth, found)


def resolve_target_accept(target_accept: float | None, model, engine: str) -> float:
    """``target_accept`` itself, or the recommendation for ``model`` under ``engine`` when None."""
    if target_accept is None:
        return recommend_target_accept(model, engine).value
    return target_accept
