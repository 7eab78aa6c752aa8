"""Argument checks that kernels' public functions share."""

from __future__ import annotations

import torch


def same_device(**tensors: torch.Tensor) -> torch.device:
    """The one device of all ``tensors`` (named as the function's parameters).

    The error names the tensor that is elsewhere: the expected device is the one most of
    them are on (in a tie, the first named's), so one stray argument is the one blamed.
    """
    devices = [tensor.device for tensor in tensors.values()]
    if devices.count(devices[0]) == len(devices):
        return devices[0]
    expected = max(devices, key=devices.count)  # max keeps the first of equal counts
    for name, tensor in tensors.items():
        if tensor.device != expected:
            raise ValueError(f"{name}: on {tensor.device}, expected {expected} like the other inputs")
    return expected
