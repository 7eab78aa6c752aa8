"""Host-side helpers shared by the Step5 update paths (``decode``, ``prefill``, ``verify``):
compile-only stand-ins, the layouts the public functions fix, the manifest check, and
``summary_layout``."""

from __future__ import annotations

import torch

from jitkern import TritonWarmupTensor, launch_stride
from step5.ops._validate import check_mean

_INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}
_NUM_WARPS = 1  # DESIGN.md: one warp per region ran at 0.82 of copy bandwidth, 4 warps at 0.48


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# What the public functions fix (``_validate``): index tensors and the ring contiguous, mean's
# inner dimensions dense. A deployment's layout may vary everything else: key, z and mean
# at any element offset, their other strides.
FIXED_STRIDES = frozenset({"ring", "mean.1", "mean.2", "slots", "ring_base", "ring_slots", "owners",
                           "query_start_loc", "seq_lens", "groups", "metadata"})


def _row_stand_ins():
    """Stand-in key and z: contiguous bf16 ``[tokens, 1, 256]`` rows."""
    return TritonWarmupTensor(torch.bfloat16, (16, 1, 256)), TritonWarmupTensor(torch.bfloat16, (16, 1, 256))


def stride_kwargs(key=None, z=None, positions=None, mean=None) -> dict[str, int]:
    """The strides a launch passes for the tensors given, each leading one as
    ``jitkern.launch_stride`` gives it: a step of one token, or a cache of one block,
    passes the stride a dense tensor of its rows has (torch's contiguity ignores the
    stride of a dimension of size 1), so it takes the binary of its stand-in."""
    strides = {}
    for name, rows in (("key", key), ("z", z)):
        if rows is not None:
            strides.update({f"{name}_stride0": launch_stride(rows, 0), f"{name}_stride2": rows.stride(2)})
    if positions is not None:
        strides["positions_stride"] = launch_stride(positions, 0)
    if mean is not None:
        strides["mean_stride0"] = launch_stride(mean, 0)
    return strides


def _mean_stand_in(block_size: int):
    return TritonWarmupTensor(torch.uint8, (16, block_size // 8, 256))


def _ring_stand_in():
    return TritonWarmupTensor(torch.bfloat16, (64, 512))


def _index(dtype_name: str, shape=(16,), varying=(0,)):
    return TritonWarmupTensor(_INDEX_DTYPES[dtype_name], shape, varying=varying)


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
