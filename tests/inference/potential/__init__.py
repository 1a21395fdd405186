"""Tests of bnnzoo.inference.potential, one module per module of the package."""
