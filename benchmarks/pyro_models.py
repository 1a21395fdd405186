"""Plain Pyro models (not BNNs) shared by the benchmarks and the tests of the batched Pyro potential:
eight schools (non-centred) and a Bayesian logistic regression, written with Pyro's broadcasting
(a chain plate fits it) and with ``x @ w`` (one chain's shapes: ``torch.func.vmap`` fits it)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch

#: the eight schools' standard errors and effects
SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]
Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]


def schools_data(dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(SIGMA, dtype=dtype), torch.tensor(Y, dtype=dtype)


def eight_schools(sigma, y=None):
    """Non-centred eight schools."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", sigma.shape[0]):
        theta_tilde = pyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        pyro.sample("obs", dist.Normal(mu + tau * theta_tilde, sigma), obs=y)


def logistic_broadcasting(x, y=None):
    """Bayesian logistic regression written for Pyro's broadcasting (a chain plate fits it)."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Bernoulli(logits=(x * w).sum(-1) + b), obs=y)


def logistic_matmul(x, y=None):
    """The same with ``x @ w``: one chain's shapes only (vmap fits it, a chain plate does not)."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Bernoulli(logits=x @ w + b), obs=y)
