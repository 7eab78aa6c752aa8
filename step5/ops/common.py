"""What the Step5 update paths share: the manifest's parameters and their check, the
summary kernels' key fields and cache stand-in, each target's code paths, the launch
strides, and the geometry of the summary cache and of the prefill metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from jitkern import Config, Tensor, TritonJitKernel, argument, computed, launch_stride, targets
from jitkern.kernel.validation import INDEX_DTYPES_BY_NAME
from step5.ops.validate import CACHE, SIZE_LIMIT

DIM = 256  # index-head dimension
NUM_WARPS = 1  # one warp per region is fastest (spec, "Why the Step5 kernels use one warp")
PREFILL_MAXNREG = 128  # ptxas register cap of the prefill summaries (spec, "Register caps")
_HW_FP8_CAPABILITY = 89  # cvt.rn.satfinite.e4m3x2.f32: Ada (sm_89) and newer

# The parameters of a manifest's Step5 config (``check_deployment`` checks them together).
BLOCK_SIZE = Config("block_size", int, check=lambda size: None if size > 0 and size % 8 == 0 else
                    f"{size} is not a positive multiple of 8")
RING_CAPACITY = Config("ring_capacity", int)
DRAFT_TOKENS = Config("draft_tokens", int, choices=range(2**31), expand=lambda draft_tokens: [1 + draft_tokens])  # q = 1 + k
PDL_CHOICES = Config("launch_pdl", list[bool], default=[False, True])


def index_dtypes(name: str, default: str) -> Config:
    """A config parameter listing index dtypes by name (``["int32", "int64"]``)."""
    return Config(name, list[str], default=[default], choices=tuple(INDEX_DTYPES_BY_NAME))


SLOT_DTYPES = index_dtypes("slot_dtypes", "int64")
POSITION_DTYPES = index_dtypes("position_dtypes", "int64")
OWNER_DTYPES = index_dtypes("owner_dtypes", "int32")
QUERY_START_LOC_DTYPES = index_dtypes("query_start_loc_dtypes", "int32")
SEQ_LENS_DTYPES = index_dtypes("seq_lens_dtypes", "int32")
RING_INDEX_DTYPES = index_dtypes("ring_index_dtypes", "int32")


def stride_kwargs(**tensors: torch.Tensor) -> dict[str, int]:
    """The strides a launch passes for ``tensors`` (key, z, positions, mean), each leading one
    as ``jitkern.launch_stride`` gives it: a step of one token, or a cache of one block,
    passes the stride a dense tensor of its rows has (torch's contiguity ignores the
    stride of a dimension of size 1), so it takes the binary of its stand-in."""
    strides = {}
    for name, tensor in tensors.items():
        strides[f"{name}_stride" if name == "positions" else f"{name}_stride0"] = launch_stride(tensor, 0)
        if name in ("key", "z"):  # [tokens, 1, 256] rows: their columns' stride too
            strides[f"{name}_stride2"] = tensor.stride(2)
    return strides


def check_deployment(*, ring_capacity: int = 7, draft_tokens: int = 0, **others: Any) -> None:
    """What a manifest's Step5 parameters must say together (each kernel's ``check_config``),
    checked when the manifest loads, not when its keys fail to compile; each ``Config``
    checks its own values (a block of whole regions, ``draft_tokens >= 0``, index dtypes)."""
    if ring_capacity < 7 + draft_tokens:
        raise ValueError(f"ring_capacity: {ring_capacity} is less than 7 + {draft_tokens} (draft tokens)")


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
    each thread holds exactly one pair of a summary's 256 values (4 warps), where the ptxas
    Triton 3.6 ships miscompiles the pair's conversion (spec, "Why the Step5 kernels use
    one warp"; ``tests/step5/test_warps.py`` checks the SASS)."""
    return DIM // (32 * num_warps) != 2


def summary_geometry(mean: torch.Tensor) -> tuple[int, int]:
    """(bytes between blocks, tokens per block) of a ``[blocks, block_size // 8, 256]`` uint8 cache."""
    CACHE.check(dict(mean=mean))
    return mean.stride(0), mean.shape[1] * 8


def prefill_metadata_geometry(tokens: int, rows: int) -> tuple[int, int]:
    """(groups, requests) of ``build_prefill_groups``' metadata for a step of ``tokens``
    tokens: ``tokens // 8 + requests`` group rows, then one row per request."""
    extra = rows - tokens // 8
    if extra < 0 or extra % 2:
        raise ValueError(f"metadata: {rows} rows is not the layout build_prefill_groups makes for {tokens} tokens "
                         "(tokens // 8 + 2 * requests rows)")
    return tokens // 8 + extra // 2, extra // 2


class Step5Kernel(TritonJitKernel):
    """What every Step5 kernel shares: sizes below ``SIZE_LIMIT`` (its arithmetic stays
    i32) and the check of a manifest's config as a whole."""

    size_limit = SIZE_LIMIT
    check_config = check_deployment


@dataclass(frozen=True, kw_only=True)
class SummaryKey:
    """The first key fields of every summary kernel: the cache's block size, the ring's capacity."""

    block_size: int = computed(lambda mean: mean.shape[1] * 8, constexpr="BLOCK_SIZE", warm=BLOCK_SIZE)
    ring_capacity: int = argument("capacity", constexpr="RING_CAPACITY", warm=RING_CAPACITY)


class SummaryKernel(Step5Kernel):
    """A kernel writing summaries: fp32 operations in the spec's order (no fused
    multiply-add), its target's code paths, and a ptxas register cap, or none; a summary
    cache of its key's block size (the stand-in ``arguments`` cannot size)."""

    maxnreg: ClassVar[int | None] = None
    stand_ins = dict(mean=Tensor((16, lambda key: key.block_size // 8, 256), torch.uint8))

    def constants(self, key: Any) -> dict[str, Any]:
        cap = {} if self.maxnreg is None else {"maxnreg": self.maxnreg}
        return {**super().constants(key), "enable_fp_fusion": False, **cap, **target_paths(key.num_warps)}
