"""The fused-MoE grouped GEMM as a jitkern kernel: its key, its tiles (tuned per GPU, chosen
per batch size) and its public function, which validates, sorts and launches. The formula,
the Triton body and the sorting: ``jitkern.examples.kernels.grouped_gemm``."""

from __future__ import annotations

import torch

from jitkern import (INDEX_DTYPES, Arg, Arguments, Buckets, Config, LaunchSpec, Tensor, TritonJitKernel, TuningSpace,
                     Within, cdiv, computed, dtype_of, is_faking, kernel_launcher, launch_stride, public_call, size_of)
from jitkern.examples.kernels.grouped_gemm import grouped_gemm_kernel, sort_by_expert

BATCHES = Buckets((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))  # a batch of M tokens: the last <= M
TILES = [dict(BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=warps, num_stages=stages)
         for m in (16, 32, 64) for n, warps, stages in ((64, 4, 4), (128, 4, 3), (128, 8, 3))]  # the tuned fields


def default_tile(batch: int) -> dict[str, int]:
    """Where no table names a tile: small batches give each expert few pairs, padded less in small blocks."""
    return TILES[0 if batch < 32 else 3 if batch < 64 else 6]


SIZE = range(1, 2**31)
ARGUMENTS = Arguments(a=Arg("M K", (torch.float16, torch.bfloat16), strides="_ 1"), b=Arg("E N K", "a", strides="_ _ 1"),
                      topk_ids=Arg("M top_k", INDEX_DTYPES, values=Within(0, "E")),
                      out=Arg("M top_k N", "a", contiguous=True, optional=True),
                      topk_weights=Arg("M top_k", torch.float32, contiguous=True, optional=True),
                      sizes=dict(E=SIZE, N=SIZE, K=SIZE, top_k=SIZE))


DTYPES = Config("dtypes", list[str], default=["bfloat16"], choices=("float16", "bfloat16"))


@public_call(op="jitkern_examples::grouped_gemm", mutates=["out"], returns="out")
def grouped_gemm(a: torch.Tensor, b: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``c [M, top_k, N]``, as ``ARGUMENTS`` and the kernel module's formula say. Every call runs in full:
    ``public_call`` plans no ``torch_step``, which returns one tensor, for the sorting's three."""
    checked = ARGUMENTS.check(locals())
    c = out if out is not None else a.new_empty((checked.M, checked.top_k, checked.N))
    if checked.M and not is_faking():  # a fake call (shapes only) needs no tile, nor a sort
        kernel = GroupedGemmKernel()
        block_m = kernel.key_for(a=a, b=b, out=c, topk_weights=topk_weights).BLOCK_SIZE_M  # of the tile it launches
        kernel(a, b, c, *sort_by_expert(topk_ids, b.shape[0], block_m), topk_weights)
    return c


class GroupedGemmKernel(TritonJitKernel):
    name = "jitkern.example.grouped_gemm"
    kernel = grouped_gemm_kernel
    arguments = ARGUMENTS  # a and out's stand-ins, the strides grouped_gemm fixes
    pinned_by_key = frozenset({"N", "K"})
    tuning = TuningSpace(TILES, default=default_tile, calls=grouped_gemm, by=dict(  # selected as in vLLM's files
        experts=size_of("b", 0, warm="experts"), batch=size_of("a", 0, buckets=BATCHES, warm="max_tokens")))

    class CompileKey:
        dtype: str = dtype_of("a", warm=DTYPES)  # a, b and out
        n: int = size_of("b", 1, warm="n")  # pinned: one class
        k: int = size_of("a", 1, warm="k")
        top_k: int = size_of("out", 1, constexpr="TOP_K", warm="top_k")
        mul_routed_weight: bool = computed(lambda topk_weights: topk_weights is not None,
                                           constexpr="MUL_ROUTED_WEIGHT", warm=[False, True])

    stand_ins = dict(b=Tensor((2, "n", "k"), "dtype"),  # two experts: small enough for the CPU tests to allocate
                     sorted_ids=Tensor(dtype=torch.int32), block_experts=Tensor(dtype=torch.int32),
                     num_used=Tensor((1,), torch.int32, varying=()))

    @kernel_launcher
    def __call__(self, compile_key, a, b, out, sorted_ids, block_experts, num_used, topk_weights) -> LaunchSpec:
        """One program per (block of sorted ids, column tile). No checks: runs on stand-ins too."""
        (tokens, k), n = a.shape, out.shape[2]
        return LaunchSpec(
            grid=(block_experts.shape[0] * cdiv(n, compile_key.BLOCK_SIZE_N),),
            kwargs=dict(A=a, B=b, C=out, TopkWeights=topk_weights, SortedIds=sorted_ids, BlockExperts=block_experts,
                        NumUsed=num_used, N=n, K=k, num_pairs=tokens * out.shape[1], a_row_stride=launch_stride(a, 0),
                        b_expert_stride=launch_stride(b, 0), b_row_stride=launch_stride(b, 1)),
            result=out)
