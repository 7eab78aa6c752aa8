"""Host-side helpers shared by the Step5 update paths (``decode``, ``prefill``, ``verify``):
key fields of the ``[tokens, 1, 256]`` key and z rows, compile-only stand-ins, the key rows
a deployment needs, the manifest check, and ``summary_layout``."""

from __future__ import annotations

from typing import Any

import torch

from jitkern import TritonWarmupTensor, int_representative, is_aligned
from jitkern import keys
from step5.ops._validate import check_mean

_INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}
_NUM_WARPS = 1  # DESIGN.md: one warp per region ran at 0.82 of copy bandwidth, 4 warps at 0.48


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _row_key_fields(key, z, *others) -> dict[str, Any]:
    """Key fields of the ``[tokens, 1, 256]`` inputs: stride classes and 16-byte alignment.

    ``aligned`` covers key, z and the ``others`` (mean, ring): z is often a slice of a
    wider tensor, and an unaligned base forbids 16-byte vector loads, so it is a binary.
    """
    return dict(
        key_stride0=int_representative(key.stride(0)),
        key_stride2=int_representative(key.stride(2)),
        z_stride0=int_representative(z.stride(0)),
        z_stride2=int_representative(z.stride(2)),
        aligned=all(is_aligned(t) for t in (key, z, *others)),
    )


def _row_stand_ins(key_stride0: int, key_stride2: int, z_stride0: int, z_stride2: int, aligned: bool):
    """Stand-in key and z whose strides are the representatives themselves."""
    key = TritonWarmupTensor(torch.bfloat16, (16, 1, 256), (key_stride0, 256, key_stride2), aligned)
    z = TritonWarmupTensor(torch.bfloat16, (16, 1, 256), (z_stride0, 256, z_stride2), aligned)
    return key, z


def _mean_stand_in(block_size: int, mean_stride0: int, aligned: bool):
    return TritonWarmupTensor(torch.uint8, (16, block_size // 8, 256), (mean_stride0, 256, 1), aligned)


def _ring_stand_in(aligned: bool):
    return TritonWarmupTensor(torch.bfloat16, (64, 512), (512, 1), aligned)


def _index(dtype_name: str, shape=(16,)):
    return TritonWarmupTensor(_INDEX_DTYPES[dtype_name], shape)


def _row_rows(row_strides: list[int], element_strides: list[int], unaligned: bool) -> list[dict[str, Any]]:
    """Key rows for the stride classes a deployment's key and z can have."""
    row = sorted({int_representative(s) for s in row_strides})
    element = sorted({int_representative(s) for s in element_strides})
    return keys.product(
        key_stride0=row, key_stride2=element, z_stride0=row, z_stride2=element,
        aligned=[True, False] if unaligned else [True],
    )


def _check_deployment(*, block_size: int = 8, ring_capacity: int = 7, draft_tokens: int = 0,
                      **index_dtypes: list[str]) -> None:
    """A manifest config that describes a real deployment: checked when the manifest loads,
    not when its keys fail to compile."""
    if block_size <= 0 or block_size % 8:
        raise ValueError(f"block_size: {block_size} is not a positive multiple of 8")
    if draft_tokens < 0:
        raise ValueError(f"draft_tokens: {draft_tokens} is negative")
    if ring_capacity < 7 + draft_tokens:
        raise ValueError(f"ring_capacity: {ring_capacity} is less than 7 + {draft_tokens} (draft tokens)")
    for name, dtypes in index_dtypes.items():
        unknown = sorted(set(dtypes) - set(_INDEX_DTYPES))
        if unknown:
            raise ValueError(f"{name}: {unknown} not supported; use {sorted(_INDEX_DTYPES)}")


def summary_layout(mean: torch.Tensor) -> tuple[int, int]:
    """(bytes between blocks, tokens per block) of a ``[blocks, block_size // 8, 256]`` uint8 cache."""
    check_mean(mean)
    return mean.stride(0), mean.shape[1] * 8
