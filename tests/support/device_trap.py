"""A trap for tensors created off the data's device, on a machine with only a CPU.

Inside :class:`StrayTensors` torch's default device is ``meta``: a factory call
(``torch.zeros``, ``rand``, ``full``, ``tensor``, ``arange``, ...) that names no
``device`` makes a meta tensor, and the trap records where it was called from.
A run whose data are on the CPU must then create every tensor with the data's
device (``device=x.device``, ``*_like``, ``new_*``): on a GPU the same call would
have made a CPU tensor beside CUDA data. A meta tensor cannot meet a CPU tensor
in an op nor be read, so a stray also stops the run; :attr:`StrayTensors.strays`
says where it was made. A deliberate ``with torch.device(...)`` block inside the
trap is honoured (it takes the trap's place until it ends).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
from torch.utils._device import DeviceContext, _device_constructors

TORCH = str(Path(torch.__file__).parent)
#: factories that keep a tensor argument on its device (outside the trap): no new tensor is made
_COPIES = {torch.as_tensor, torch.asarray}


def _caller() -> str:
    """``file:line in function`` of the first frame outside torch and this module."""
    for frame in reversed(traceback.extract_stack(sys._getframe(2))):
        if not frame.filename.startswith(TORCH) and frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "?"


class StrayTensors(DeviceContext):
    """``with StrayTensors() as trap: ...``: factory calls without ``device`` make meta tensors and are
    listed in :attr:`strays` (``file:line in function`` of each call)."""

    def __init__(self):
        super().__init__("meta")
        self.strays: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _COPIES and args and torch.is_tensor(args[0]):  # a tensor stays where it is
            return func(*args, **kwargs)
        if func in _device_constructors() and kwargs.get("device") is None:
            self.strays.append(f"torch.{func.__name__} at {_caller()}")
        return super().__torch_function__(func, types, args, kwargs)

    def __enter__(self):
        super().__enter__()
        return self

    def report(self) -> str:
        """The strays, one line each, the repeated ones once."""
        return "\n".join(dict.fromkeys(self.strays))
