"""Fixtures shared by every test folder; helpers live in ``tests/support``."""

import warnings

import pytest
import torch

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="num_chains=.*available_cpu")
warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")


@pytest.fixture
def float64():
    """Run a test with float64 as torch's default dtype (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
