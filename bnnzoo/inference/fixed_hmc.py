r"""HMC with a fixed step size and number of leapfrog steps: no adaptation (paper 003).

The sampler of paper 003's experiments (and of Neal 2011): every transition
draws :math:`p \sim N(0, I)`, runs ``num_steps`` leapfrog steps of size
``step_size`` and accepts with probability :math:`\min(1, e^{-\Delta H})`.
Nothing is tuned, so the acceptance rate measures the integrator on the
target: what :func:`bnnzoo.diagnostics.acceptance.acceptance_sweep` tabulates.
"""

from __future__ import annotations

from ..results import Draws
from .base import check_positive_int, check_positive_option
from .chees import ChEESHMC
from .engines import engine, run_mcmc, with_compile_time
from .potential import make_potential

__all__ = ["FixedStepHMC"]


class FixedStepHMC(ChEESHMC):
    r"""Leapfrog HMC with a fixed step size :math:`\epsilon`, ``num_steps`` :math:`L`
    and unit mass, for C chains advanced as one batch.

    One transition per chain:

    .. math::
        p \sim N(0, I),\quad (\theta', p') = \Phi_\epsilon^L(\theta, p),\quad
        \theta \leftarrow \theta' \text{ with probability } \min(1, e^{-(H(\theta', p') - H(\theta, p))})

    with :math:`\Phi_\epsilon` one leapfrog step and :math:`H = U + \tfrac12 p^\top p`.
    A NaN/inf energy, or an energy error above 1000, is a rejected divergence.
    It is :class:`~bnnzoo.inference.chees.ChEESHMC` with every adaptation off and
    an un-jittered trajectory; warm-up steps are plain burn-in.

    Parameters
    ----------
    model, potential, num_chains, init_radius
        See :class:`~bnnzoo.inference.base.FlatKernel`.
    step_size : float
        Leapfrog step size :math:`\epsilon`.
    num_steps : int
        Leapfrog steps :math:`L` per transition (travel time :math:`T = \epsilon L`).

    Per-draw statistics: those of :class:`~bnnzoo.inference.chees.ChEESHMC`
    (``acceptance_rate`` is :math:`\min(1, e^{-\Delta H})`, ``energy_error`` is
    :math:`\Delta H`).

    Examples
    --------
    >>> from pyro.infer import MCMC
    >>> kernel = FixedStepHMC(model, step_size=1e-3, num_steps=200, num_chains=5)
    >>> MCMC(kernel, num_samples=2000, warmup_steps=100).run(x, y)

    **References**

    * Neal, R. M. (2011). MCMC using Hamiltonian dynamics. Handbook of MCMC.
    * Paper 003: Hamiltonian Monte Carlo on ReLU neural networks is inefficient.
    """

    def __init__(self, model=None, potential=None, step_size: float = 1e-3, num_steps: int = 100,
                 num_chains: int = 1, init_radius: float = 1.0):
        check_positive_option("step_size", step_size)
        check_positive_int("num_steps", num_steps)
        self.num_steps = num_steps
        super().__init__(model, potential, step_size=step_size, target_accept=0.5,  # unused: nothing adapts
                         trajectory_length=step_size * num_steps, adapt_step_size=False,
                         adapt_mass_matrix=False, adapt_trajectory=False, max_leapfrog_steps=num_steps,
                         num_chains=num_chains, init_radius=init_radius)

    def _num_steps(self) -> int:
        return self.num_steps

    def _clip_trajectory_length(self) -> None:
        self.trajectory_length = self.num_steps * self.step_size


@engine("fixed_hmc")
def fixed_hmc(model, x, y, num_samples, warmup_steps, num_chains, progress, step_size: float = 1e-3,
              num_steps: int = 100, init_radius: float = 1.0, compile: bool = False) -> Draws:
    """HMC with a fixed step size and number of leapfrog steps, no adaptation; all chains as one batch
    (``compile``: as for ``chees``)."""
    potential = make_potential(model, x, y, compile=compile)
    kernel = FixedStepHMC(potential=potential, step_size=step_size, num_steps=num_steps,
                          num_chains=num_chains, init_radius=init_radius)
    return with_compile_time(
        run_mcmc(kernel, potential, x, y, num_samples, warmup_steps, num_chains, progress, vectorized=True),
        potential)
