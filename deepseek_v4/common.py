"""What the store and the compressor share: each compression ratio's geometry, the float
dtype, the engine's PDL request, the tensor checks.

The table of ``docs/spec/deepseek-v4-compressor.md`` lives here once, so that warmup keys,
validation and the kernels' launchers cannot disagree on a width or a block size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from jitkern.kernel.validation import (INDEX_DTYPES, INDEX_DTYPES_BY_NAME, check_strides_below_i32, device_has_pdl,
                                       dtype_name)


@dataclass(frozen=True)
class RatioGeometry:
    """One row of the spec's table: how a compression ratio shapes its states."""

    ratio: int
    overlap: bool  # ratio 4: a token's first half serves the next window
    block_size: int  # rows per block of the paged state cache

    def state_width(self, head_dim: int) -> int:
        """``W``: the width of one half of a state row (``[kv (W) | score + ape (W)]``)."""
        return (2 if self.overlap else 1) * head_dim


RATIOS = {
    4: RatioGeometry(ratio=4, overlap=True, block_size=4),
    128: RatioGeometry(ratio=128, overlap=False, block_size=8),
}

FLOAT_DTYPE = torch.float32


def ratio_geometry(compress_ratio: Any) -> RatioGeometry:
    """The geometry of ``compress_ratio``; anything but 4 or 128 is a ``ValueError``."""
    geometry = RATIOS.get(compress_ratio) if isinstance(compress_ratio, int) else None
    if geometry is None:
        raise ValueError(f"compress_ratio: must be one of {sorted(RATIOS)}, got {compress_ratio!r}")
    return geometry


def index_dtype_names(names: list[str]) -> list[torch.dtype]:
    """Manifest index dtype names -> dtypes; an unknown name is a ``ValueError``."""
    unknown = [name for name in names if name not in INDEX_DTYPES_BY_NAME]
    if unknown:
        raise ValueError(f"index_dtypes: unknown {unknown}; use {sorted(INDEX_DTYPES_BY_NAME)}")
    return [INDEX_DTYPES_BY_NAME[name] for name in names]


def resolve_pdl(pdl_kwargs: dict | None, device: torch.device) -> bool:
    """Whether to launch with programmatic dependent launch.

    ``pdl_kwargs`` is what an engine passes along (``{"launch_pdl": True}`` or empty).
    PDL needs NVIDIA Hopper (sm_90) or newer (``device_has_pdl``); elsewhere (older GPUs,
    AMD, the CPU interpreter) the request is dropped rather than failing, so one engine
    config runs everywhere.
    """
    if pdl_kwargs is not None and not isinstance(pdl_kwargs, dict):
        raise ValueError(f"pdl_kwargs: expected a dict like {{'launch_pdl': True}}, got {type(pdl_kwargs).__name__}")
    if not pdl_kwargs:
        return False
    unknown = set(pdl_kwargs) - {"launch_pdl"}
    if unknown:
        raise ValueError(f"pdl_kwargs: unknown options {sorted(unknown)}; only 'launch_pdl' is accepted")
    launch_pdl = pdl_kwargs.get("launch_pdl", False)
    if not isinstance(launch_pdl, bool):  # bool("no") is True: a string would ask for PDL
        raise ValueError(f"pdl_kwargs: launch_pdl must be True or False, got {launch_pdl!r}")
    return launch_pdl and device_has_pdl(device)


def check_index_tensor(name: str, tensor: torch.Tensor) -> None:
    """A 1-D, contiguous integer tensor of an index dtype (int32 or int64)."""
    _check_tensor(name, tensor)
    if tensor.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name}: dtype must be one of {list(INDEX_DTYPES_BY_NAME)}, got {dtype_name(tensor.dtype)}")
    if tensor.dim() != 1 or (tensor.numel() > 1 and tensor.stride(0) != 1):
        raise ValueError(
            f"{name}: must be a contiguous 1-D tensor, got shape {tuple(tensor.shape)} strides {tensor.stride()}"
        )


def check_float_tensor(name: str, tensor: torch.Tensor, dim: int, written: bool = False) -> None:
    """A float32 tensor of ``dim`` dimensions whose last dimension is contiguous, its strides
    below 2**31 (the kernels keep them i32: their binaries take no larger one); one the
    kernel writes (``written``) with rows apart in memory."""
    _check_tensor(name, tensor)
    if tensor.dtype != FLOAT_DTYPE:
        raise ValueError(f"{name}: dtype must be float32, got {dtype_name(tensor.dtype)}")
    if tensor.dim() != dim:
        raise ValueError(f"{name}: must have {dim} dimensions, got shape {tuple(tensor.shape)}")
    if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"{name}: last dimension must be contiguous, got strides {tensor.stride()}")
    check_strides_below_i32(name, tensor)
    if written:
        _check_rows_apart(name, tensor)


def _check_rows_apart(name: str, tensor: torch.Tensor) -> None:
    """The rows of a tensor a kernel writes (one per index of the dims before the last, whose
    stride is 1) lie apart in memory. Overlapping rows (an expanded tensor's stride 0, a
    stride shorter than a row) would take the writes of several programs, which race."""
    if tensor.numel() == 0:
        return
    reach = tensor.shape[-1]  # elements the dims sorted so far span
    for stride, size in sorted((stride, size) for stride, size in zip(tensor.stride()[:-1], tensor.shape[:-1])
                               if size > 1):
        if stride < reach:
            raise ValueError(f"{name}: rows overlap in memory (strides {tuple(tensor.stride())} for shape "
                             f"{tuple(tensor.shape)}); the kernel writes each row")
        reach += stride * (size - 1)


def _check_tensor(name: str, tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
