"""Compile-only stand-ins: values that Triton specialises exactly like real ones.

Triton picks a binary from each tensor argument's dtype and whether its address is a
multiple of 16, and from each integer argument's type (i32 / i64 / u64) and whether it
equals 1 or is a multiple of 16. The stand-ins here carry exactly that, and no memory.
"""

from __future__ import annotations

from typing import Sequence

import torch

_UNALIGNED_ADDRESS = 8  # not a multiple of 16, yet a multiple of every element size up to 8


class TritonWarmupTensor:
    """A tensor with no memory: a dtype, a shape, strides and an alignment.

    ``data_ptr()`` is 0 (a multiple of 16) when ``aligned``, else an address that is not.
    """

    def __init__(
        self,
        dtype: torch.dtype,
        shape: Sequence[int] = (1,),
        strides: Sequence[int] | None = None,
        aligned: bool = True,
    ):
        self.dtype = dtype
        self.shape = torch.Size(shape)
        self._strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape)
        if len(self._strides) != len(self.shape):
            raise ValueError(f"strides {self._strides} do not match shape {tuple(self.shape)}")
        self.aligned = aligned
        self.device = torch.device("meta")

    def data_ptr(self) -> int:
        return 0 if self.aligned else _UNALIGNED_ADDRESS

    def stride(self, dim: int | None = None):
        return self._strides if dim is None else self._strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return self.shape.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        alignment = "aligned" if self.aligned else "unaligned"
        return f"TritonWarmupTensor({self.dtype}, shape={tuple(self.shape)}, strides={self._strides}, {alignment})"


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


_I32 = range(-(2**31), 2**31)
_I64_BASE, _U64_BASE = 2**32, 2**63


def int_representative(value: int) -> int:
    """The representative of ``value``'s Triton specialisation class.

    Triton 3.6 treats an integer argument as a constant when it equals 1, and otherwise
    compiles one binary per (type, divisible by 16) pair, the type being i32, i64 or u64
    by range. Two integers with the same representative share a binary.
    """
    value = int(value)
    if value == 1:
        return 1
    divisible = value % 16 == 0
    if value in _I32:
        base = 0
    elif value < _U64_BASE:
        base = _I64_BASE
    else:
        base = _U64_BASE
    return base + (16 if divisible else 17)


def is_aligned(tensor) -> bool:
    """Whether Triton will treat the tensor's address as 16-byte aligned."""
    return tensor.data_ptr() % 16 == 0
