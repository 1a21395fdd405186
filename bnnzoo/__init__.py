"""bnnzoo: a model zoo and inference workbench for Bayesian neural networks on Pyro."""

__version__ = "0.1.0"
