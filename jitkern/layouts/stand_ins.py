"""Compile-only stand-ins: tensors that Triton specialises exactly like real ones.

Triton's binder reads a tensor argument's dtype and address (whether it is a multiple of
16) and nothing else; a stand-in carries those, a shape and strides for ``__call__`` to
read, and no memory. ``jitkern.layouts.specialisation`` varies them per layout.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

_UNALIGNED_ADDRESS = 8  # not a multiple of 16, yet a multiple of every element size up to 8


class TritonWarmupTensor:
    """A tensor with no memory: a dtype, a shape, strides and an alignment.

    ``data_ptr()`` is 0 (a multiple of 16) when ``aligned``, else an address that is not.
    ``varying``: the dimensions whose size changes from launch to launch (tokens,
    requests, blocks; by default the leading one). A contiguous tensor's stride over a
    varying dimension varies too, and jitkern warms every class it can take.
    """

    def __init__(
        self,
        dtype: torch.dtype,
        shape: Sequence[int] = (1,),
        strides: Sequence[int] | None = None,
        aligned: bool = True,
        name: str | None = None,
        varying: Sequence[int] = (0,),
        storage_bytes: int | None = None,
    ):
        self.dtype = dtype
        self.shape = torch.Size(shape)
        self._strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        if len(self._strides) != len(self.shape):
            raise ValueError(f"strides {self._strides} do not match shape {tuple(self.shape)}")
        self.aligned = aligned
        self.name = name
        self.varying = tuple(dim % len(self.shape) for dim in varying) if self.shape else ()
        self.storage_bytes = storage_bytes
        self.device = torch.device("meta")

    def named(self, name: str) -> "TritonWarmupTensor":
        """This stand-in as the ``__call__`` argument ``name``: its strides then say whose they are."""
        return TritonWarmupTensor(self.dtype, self.shape, self._strides, self.aligned, name, self.varying,
                                  self.storage_bytes)

    def is_contiguous(self) -> bool:
        return self._strides == contiguous_strides(self.shape)

    def stride_varies(self, dim: int) -> bool:
        """Whether the stride of ``dim`` changes with the sizes: the tensor is contiguous and
        a later dimension varies."""
        return self.is_contiguous() and any(later > dim for later in self.varying)

    def stride_of_sixteens(self, dim: int) -> bool:
        """Whether the stride of ``dim`` stays a multiple of 16 whatever the varying sizes:
        the tensor is contiguous and its later fixed sizes multiply to one (``[T, heads,
        128]``: ``heads * 128``), so a stride that varies takes that class alone."""
        fixed = math.prod(size for later, size in enumerate(self.shape) if later > dim and later not in self.varying)
        return self.is_contiguous() and fixed % 16 == 0

    def data_ptr(self) -> int:
        return 0 if self.aligned else _UNALIGNED_ADDRESS

    def ptr_range(self) -> int:
        """Bytes of the storage behind the tensor: ``storage_bytes``, else those its shape
        and strides reach. Triton's AMD backend compiles another binary for a tensor
        whose storage spans more than 2 GiB (it reads a real tensor's storage size)."""
        if self.storage_bytes is not None:
            return self.storage_bytes
        if 0 in self.shape:
            return 0
        reach = sum((size - 1) * abs(stride) for size, stride in zip(self.shape, self._strides))
        return (1 + reach) * self.element_size()

    def stride(self, dim: int | None = None):
        if dim is None:
            return tuple(self.stride(d) for d in range(len(self._strides)))
        if self.name is None:
            return self._strides[dim]
        dim = dim % len(self._strides)
        return TracedStride(self._strides[dim], self.name, dim)

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


class TracedStride(int):
    """A named stand-in's stride: an int that remembers its tensor and dimension, so
    that jitkern can tell which runtime argument of a ``LaunchSpec`` it became."""

    tensor: str
    dim: int

    def __new__(cls, value: int, tensor: str, dim: int):
        traced = super().__new__(cls, value)
        traced.tensor, traced.dim = tensor, dim
        return traced


def contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def launch_stride(tensor: Any, dim: int, usual: int | None = None) -> int:
    """The stride a launcher passes for ``dim``: ``tensor.stride(dim)``, but for a dimension
    of size 1, or a tensor of no elements, the stride of the kernel's usual layout there:
    ``usual`` when its stand-in has one of its own (a view of a wider tensor), else the
    stride a dense layout of the later dimensions gives.

    Any stride addresses a dimension of size 1 alike (and no element at all), and torch
    calls such a tensor contiguous whatever the stride is (a one-row slice of a wider
    tensor is contiguous; a transpose leaves a 1 there), so a public function lets any
    value by. Passed as it is, it would pick a binary by a value that means nothing
    (``jitkern.testing.coverage`` draws such strides); normalised, the launch takes its
    stand-in's binary. A named stand-in's stride is kept as it is: jitkern traces it to
    the runtime argument it becomes, to warm the classes its layout gives it.

    A later dimension of a stride large enough to make that product 2**31 or more (no
    multi-row launch could pass it: public functions keep strides below 2**31) gives the
    stride of a dense tensor of the later sizes instead, an i32 as a stand-in's is."""
    dim %= tensor.dim()
    stride = tensor.stride(dim)
    if isinstance(stride, TracedStride) or tensor.shape[dim] != 1 and tensor.numel():
        return stride
    if usual is not None:
        return usual
    if dim == tensor.dim() - 1:
        return 1
    dense = launch_stride(tensor, dim + 1) * max(tensor.shape[dim + 1], 1)
    return dense if dense < 2**31 else math.prod(max(size, 1) for size in tensor.shape[dim + 1:])
