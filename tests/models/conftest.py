"""Fixtures shared by the model tests."""

import pytest
import torch


@pytest.fixture
def float64():
    """Run a test with float64 as torch's default dtype (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
