"""Argument checks of the public Step5 functions.

They read only shapes, strides, dtypes and devices, never tensor values, so they cost
the hot path no device synchronisation. Each failure is a ``ValueError`` naming the
argument, raised before anything is launched.
"""

from __future__ import annotations

import torch

from jitkern.validation import check_int, check_strides_below_i32
from jitkern.validation import same_device as check_same_device  # noqa: F401 - re-exported

INDEX_DTYPES = (torch.int32, torch.int64)
RING_ROW = 512
SIZE_LIMIT = 2**30  # tokens, requests: what the kernels compute from them stays i32 (their binaries)


def _describe(tensor) -> str:
    if not isinstance(tensor, torch.Tensor):
        return type(tensor).__name__
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)} on {tensor.device}"


def check_rows(key, z) -> int:
    """``key`` and ``z``: bf16 ``[tokens, 1, 256]`` (dims 0 and 2 may be strided); returns tokens."""
    for name, tensor in (("key", key), ("z", z)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.bfloat16 or tensor.dim() != 3 \
                or tensor.shape[1:] != (1, 256):
            raise ValueError(f"{name}: expected bfloat16 [tokens, 1, 256], got {_describe(tensor)}")
    if key.shape[0] != z.shape[0]:
        raise ValueError(f"z: {z.shape[0]} tokens, but key has {key.shape[0]}")
    if key.shape[0] >= SIZE_LIMIT:
        raise ValueError(f"key: {key.shape[0]} tokens; at most {SIZE_LIMIT - 1} in one step")
    check_strides_below_i32("key", key)
    check_strides_below_i32("z", z)
    return key.shape[0]


def check_index(name: str, tensor, tokens: int | None, strided: bool = False, counted_by: str = "key") -> None:
    """A 1-D int32/int64 tensor, with ``tokens`` entries (as many as ``counted_by`` has) when
    that is given; contiguous unless ``strided`` (only ``positions`` may be a strided view:
    the kernels take its stride)."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype not in INDEX_DTYPES or tensor.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D int32 or int64 tensor, got {_describe(tensor)}")
    if tokens is not None and tensor.shape[0] != tokens:
        raise ValueError(f"{name}: {tensor.shape[0]} entries, but {counted_by} has {tokens} tokens")
    if tensor.shape[0] >= SIZE_LIMIT or tensor.stride(0) >= 2**31:
        raise ValueError(f"{name}: {tensor.shape[0]} entries of stride {tensor.stride(0)}; at most "
                         f"{SIZE_LIMIT - 1} entries, strides below 2**31")
    if tensor.shape[0] > 1 and (tensor.stride(0) <= 0 if strided else tensor.stride(0) != 1):
        raise ValueError(f"{name}: stride {tensor.stride(0)} not supported; expected "
                         f"{'a positive stride' if strided else 'a contiguous tensor'}")


def check_mean(mean) -> None:
    """``mean``: uint8 ``[blocks, block_size // 8, 256]`` with strides ``(any, 256, 1)``."""
    if not isinstance(mean, torch.Tensor) or mean.dtype != torch.uint8 or mean.dim() != 3 or mean.shape[2] != 256:
        raise ValueError(f"mean: expected uint8 [blocks, block_size // 8, 256], got {_describe(mean)}")
    if mean.shape[1] < 1:
        raise ValueError("mean: a block must hold at least one region (block_size >= 8)")
    if mean.stride(1) != 256 or mean.stride(2) != 1:
        raise ValueError(f"mean: inner strides must be (256, 1), got {tuple(mean.stride())[1:]}")
    if mean.stride(0) >= 2**31:
        raise ValueError(f"mean: block stride {mean.stride(0)} must be below 2**31")


def check_ring(ring, capacity, draft_tokens: int) -> None:
    """``ring``: contiguous bf16 ``[rows, 512]``; ``capacity >= 7 + draft_tokens`` rows per request."""
    if not isinstance(ring, torch.Tensor) or ring.dtype != torch.bfloat16 or ring.dim() != 2 \
            or ring.shape[1] != RING_ROW or ring.stride() != (RING_ROW, 1):
        raise ValueError(f"ring: expected contiguous bfloat16 [rows, 512], got {_describe(ring)}")
    check_int("capacity", capacity)
    if capacity < 7 + draft_tokens:
        raise ValueError(f"capacity: {capacity} ring rows per request is less than 7 + {draft_tokens} (draft tokens)")
    if ring.shape[0] < capacity:
        raise ValueError(f"ring: {ring.shape[0]} rows cannot hold one request of capacity {capacity}")


def check_out(name: str, tensor, dtype: torch.dtype, shape: tuple[int, ...], device: torch.device, layout: str) -> None:
    """A caller's output tensor: ``dtype`` and ``shape`` exactly (``layout`` names the shape
    in the error), contiguous (the kernels write it by row), on the inputs' ``device``."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tuple(tensor.shape) != shape:
        raise ValueError(f"{name}: expected {str(dtype).removeprefix('torch.')} {layout} = {shape}, "
                         f"got {_describe(tensor)}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name}: must be contiguous, got strides {tuple(tensor.stride())}")
    if tensor.device != device:
        raise ValueError(f"{name}: on {tensor.device}, expected {device} like the other inputs")
