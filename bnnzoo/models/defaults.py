"""torch's default dtype and device within a block: what tensors made from numbers take
(the constants of a prior's distribution, a run's tensors)."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

__all__ = ["default_dtype", "tensor_defaults"]


@contextmanager
def default_dtype(dtype: torch.dtype | None):
    """torch's default dtype is ``dtype`` within the block (None: unchanged), restored afterwards."""
    before = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextmanager
def tensor_defaults(device: torch.device | None, dtype: torch.dtype | None):
    """torch's default device and dtype within the block (None: unchanged)."""
    with default_dtype(dtype), torch.device(device) if device is not None else nullcontext():
        yield
