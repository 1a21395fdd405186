"""Plain Pyro models (not built by bnnzoo) shared by the kernel tests."""

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule, PyroSample


class Net(PyroModule):
    """A 1-hidden-layer tanh network with PyroSample priors, a HalfNormal noise scale and a plate."""

    def __init__(self, hidden=6):
        super().__init__()
        self.fc1 = PyroModule[torch.nn.Linear](1, hidden)
        self.fc1.weight = PyroSample(dist.Normal(0.0, 1.0).expand([hidden, 1]).to_event(2))
        self.fc1.bias = PyroSample(dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
        self.fc2 = PyroModule[torch.nn.Linear](hidden, 1)
        self.fc2.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, hidden]).to_event(2))
        self.fc2.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

    def forward(self, x, y=None):
        sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
        mu = self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(mu, sigma), obs=y)
        return mu
