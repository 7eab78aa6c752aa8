"""Host-side pieces the Step5 update paths (``decode``, ``prefill``, ``prefill_fused``,
``verify``) share: compile-only stand-ins, the strides the public functions fix, the
manifest check, each target's code paths, and the geometry of the summary cache and of
the prefill metadata."""

from __future__ import annotations

from typing import Any

import torch

from jitkern import TritonWarmupTensor, launch_stride, targets
from jitkern.kernel.validation import INDEX_DTYPES_BY_NAME
from step5.ops.validate import check_mean

DIM = 256  # index-head dimension
NUM_WARPS = 1  # DESIGN.md: one warp per region ran at 0.82 of copy bandwidth, 4 warps at 0.48
# ptxas register cap of the prefill summaries (None: ptxas decides). Prefill is a throughput
# kernel: ptxas picks 128 (16 resident programs per SM, the 16 row loads in two batches); 200
# gives one batch but 10 programs per SM. H200, 256K tokens: 74.8 us vs 76.2 us (ptxas
# default), 97.9 us at 96 (``benchmarks/device/profile_step5.py prefill``). Measure it against
# decode's (``step5.ops.decode._DECODE_MAXNREG``).
PREFILL_MAXNREG = 128
_HW_FP8_CAPABILITY = 89  # cvt.rn.satfinite.e4m3x2.f32: Ada (sm_89) and newer

# What the public functions fix (``validate``): index tensors and the ring contiguous, mean's
# inner dimensions dense. A deployment's layout may vary everything else: key, z and mean
# at any element offset, their other strides.
FIXED_STRIDES = frozenset({"ring", "mean.1", "mean.2", "slots", "ring_base", "ring_slots", "owners",
                           "query_start_loc", "seq_lens", "groups", "metadata"})


def row_stand_ins():
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


def mean_stand_in(block_size: int):
    return TritonWarmupTensor(torch.uint8, (16, block_size // 8, 256))


def ring_stand_in():
    return TritonWarmupTensor(torch.bfloat16, (64, 512))


def index_stand_in(dtype_name: str, shape=(16,), varying=(0,)):
    return TritonWarmupTensor(INDEX_DTYPES_BY_NAME[dtype_name], shape, varying=varying)


def check_deployment(*, block_size: int = 8, ring_capacity: int = 7, draft_tokens: int = 0,
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
        unknown = sorted(set(dtypes) - set(INDEX_DTYPES_BY_NAME))
        if unknown:
            raise ValueError(f"{name}: {unknown} not supported; use {sorted(INDEX_DTYPES_BY_NAME)}")


def target_paths(num_warps: int = 1) -> dict[str, Any]:
    """The code-path constexprs of the target being compiled for (``jitkern.targets``), at
    ``num_warps``: ``NVIDIA`` (inline PTX and ptxas-tuned forms: any NVIDIA GPU, not with
    portable paths) and ``HW_FP8`` (the hardware bf16 and OCP fp8 e4m3 conversions: NVIDIA
    sm_89 and newer, not with portable paths, nor where ``hardware_fp8_is_safe`` says no).
    The helpers that take them: ``step5.ops.kernels.summary_math``."""
    target = targets.current()
    return dict(NVIDIA=target.ptx, HW_FP8=target.cuda_at_least(_HW_FP8_CAPABILITY) and hardware_fp8_is_safe(num_warps))


def hardware_fp8_is_safe(num_warps: int) -> bool:
    """Whether a summary kernel at ``num_warps`` may take the hardware fp8 path: not when
    each thread holds exactly one pair of a summary's 256 values (4 warps of 32 threads).

    Triton converts fp32 to e4m3 in pairs (``cvt.rn.satfinite.e4m3x2.f32``, a 16-bit
    result), then splits the pair (``shr.u16``) and widens it to two 16-bit lanes
    (``mov.b32 {lo, hi}``). With a single pair per thread, the ptxas Triton 3.6 ships
    (12.8; 12.9 too) folds that widening into the conversion's merge operand
    (``F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C``) but computes the operand from R1, the
    stack pointer, before the conversion runs: every odd byte of a summary becomes
    ``0x7C | sign`` on the GPU. With 8, 4 or 1 values per thread (1, 2 or 8 warps) the
    code is right, and ptxas 13.0 gets one pair right too. The integer path has no packed
    operation and stores the same bytes at every ``num_warps``. Spec: "Why the Step5
    kernels use one warp"; ``tests/step5/test_warps.py`` checks the SASS.
    """
    return DIM // (32 * num_warps) != 2


def summary_geometry(mean: torch.Tensor) -> tuple[int, int]:
    """(bytes between blocks, tokens per block) of a ``[blocks, block_size // 8, 256]`` uint8 cache."""
    check_mean(mean)
    return mean.stride(0), mean.shape[1] * 8


def prefill_metadata_geometry(tokens: int, rows: int) -> tuple[int, int]:
    """(groups, requests) of ``build_prefill_groups``' metadata for a step of ``tokens``
    tokens: ``tokens // 8 + requests`` group rows, then one row per request."""
    extra = rows - tokens // 8
    if extra < 0 or extra % 2:
        raise ValueError(f"metadata: {rows} rows is not the layout build_prefill_groups makes for {tokens} tokens "
                         "(tokens // 8 + 2 * requests rows)")
    return tokens // 8 + extra // 2, extra // 2
