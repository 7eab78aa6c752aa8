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


def first_outside(values: torch.Tensor, low: int, high: int | None = None, *, padding: int | None = None,
                  where: torch.Tensor | None = None) -> int | None:
    """The position of the first of ``values`` (1-D) outside ``[low, high)`` (``high`` None:
    no upper bound), not counting ``padding`` entries nor those ``where`` is False; None when
    there is none. It reads the values: call it for CPU tensors only (on a GPU, a device sync)."""
    values = values.long()  # an int32 tensor compared with 2**31 would wrap the bound
    bad = values < low
    if high is not None:
        bad |= values >= high
    if padding is not None:
        bad &= values != padding
    if where is not None:
        bad &= where
    hits = bad.nonzero()
    return int(hits[0, 0]) if len(hits) else None


def check_values_in(name: str, values: torch.Tensor, low: int, high: int | None = None, *,
                    padding: int | None = None, where: torch.Tensor | None = None, note: str = "") -> None:
    """Index values the kernels address memory with are in ``[low, high)`` (or ``padding``),
    where ``where`` holds; else one ``ValueError`` naming the first bad entry and the range.
    CPU tensors only (``first_outside``)."""
    at = first_outside(values, low, high, padding=padding, where=where)
    if at is None:
        return
    valid = f"in [{low}, {high})" if high is not None else f">= {low}"
    if padding is not None:
        valid = f"{padding} (padding) or {valid}"
    raise ValueError(f"{name}: {name}[{at}] = {int(values[at])}; expected {valid}{note}")
