"""Argument checks that kernels' public functions share."""

from __future__ import annotations

from typing import Any

import torch


def check_int(name: str, value: Any, minimum: int | None = None) -> None:
    """``value`` is an int, at least ``minimum`` when given. Not a bool (``True`` would
    pass for 1), nor a float (8.5 would become 8), nor a numpy int: sizes become Triton
    arguments, and another type there is another binary."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")


def check_strides_below_i32(name: str, tensor: torch.Tensor) -> None:
    """Every stride of ``tensor`` is below 2**31. Kernels that keep integers i32
    (``large_ints`` False) have no binary for a larger stride: it would compile an i64 one."""
    if max(tensor.stride(), default=0) >= 2**31:
        raise ValueError(f"{name}: strides {tuple(tensor.stride())} must be below 2**31")


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
