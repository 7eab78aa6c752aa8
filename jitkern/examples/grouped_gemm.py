"""A fused-MoE grouped GEMM: each token's rows times the weights of the experts it is routed to.

``c[m, j, :] = (a[m, :] @ b[topk_ids[m, j]].T) * topk_weights[m, j]`` (the weight only when
given), accumulated in float32, for activations ``a [M, K]`` and expert weights
``b [E, N, K]``. The module keeps four things apart:

- the ``@triton.jit`` body: one program per tile of ``BLOCK_M`` sorted (token, slot) pairs
  by ``BLOCK_N`` columns, all pairs of a tile routed to one expert;
- the host-side sorting (``sort_by_expert``): torch work that groups the pairs by expert
  and pads each group to a multiple of ``BLOCK_M``, with no sync and no Python loop;
- the kernel class (``GroupedGemmKernel``) and its tuning space (tiles per batch bucket);
- the public function ``grouped_gemm``, which validates and launches.

The reference, written from the formula above, is ``jitkern.examples.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from jitkern import (Arg, Arguments, Buckets, Config, LaunchSpec, Tensor, TritonJitKernel, TuningSpace, Within, cdiv,
                     computed, dtype_of, is_faking, kernel_launcher, launch_stride, public_call, size_of, tuned)
from jitkern.kernel.validation import INDEX_DTYPES

@triton.jit(
    do_not_specialize=["num_pairs"],  # M * top_k changes every batch: one binary for all
    do_not_specialize_on_alignment=["TopkWeights", "SortedIds", "BlockExperts", "NumUsed"],  # gathers
)
def _grouped_gemm_kernel(
    A, B, C, TopkWeights, SortedIds, BlockExperts, NumUsed,
    N, K, num_pairs, a_row_stride, b_expert_stride, b_row_stride,
    TOP_K: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Pair p = token * TOP_K + slot; SortedIds holds pairs grouped by expert, each group padded
    # with the id num_pairs to a multiple of BLOCK_M, so a block of BLOCK_M ids has one expert,
    # BlockExperts[block]. Program (block, column tile): C[p, cols] = A[p // TOP_K] @ B[e, cols].T
    # for each p of the block below num_pairs (C viewed [num_pairs, N]); padding reads and writes
    # nothing. Programs go GROUP_M blocks down a column tile before the next (B's tile stays in L2).
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    blocks_m = tl.num_programs(0) // tiles_n
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_here = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_here
    pid_n = (pid % group) // rows_here
    if pid_m * BLOCK_M >= tl.load(NumUsed):  # past the padded groups: nothing to do
        return
    ids = tl.load(SortedIds + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    live = ids < num_pairs
    expert = tl.load(BlockExperts + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = A + (ids // TOP_K).to(tl.int64)[:, None] * a_row_stride + ks[None, :]
    b_ptrs = B + expert * b_expert_stride + cols.to(tl.int64)[None, :] * b_row_stride + ks[:, None]  # [K, N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = ks < K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=live[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(TopkWeights + ids, mask=live, other=0.0)[:, None]
    c_ptrs = C + ids.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=live[:, None] & col_ok[None, :])


# --- tiles: tuned per GPU, chosen per batch size ------------------------------------------


BATCHES = Buckets((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096))  # a batch of M tokens: the last <= M
TILES = [dict(block_size_m=m, block_size_n=n, block_size_k=64, group_size_m=8, num_warps=warps, num_stages=stages)
         for m in (16, 32, 64) for n, warps, stages in ((64, 4, 4), (128, 4, 3), (128, 8, 3))]  # the candidates
LARGEST_BLOCK_M = max(tile["block_size_m"] for tile in TILES)


def default_tile(batch: int) -> dict[str, int]:
    """A batch bucket's tile where no table names one: a small batch gives each expert few
    pairs, and a small BLOCK_M wastes less on padding (16 rows below 32 tokens, 32 below 64)."""
    return TILES[0 if batch < 32 else 3 if batch < 64 else 6]


def tuning_inputs(key: Any, device: Any, *, experts: int, batch: int) -> dict[str, Any]:
    """What ``tune`` times a candidate ``key`` on: ``batch`` tokens routed at random to
    ``experts`` experts, sorted for the key's BLOCK_M."""
    dtype = getattr(torch, key.dtype)
    ids = torch.rand(batch, experts, device=device).argsort(dim=1)[:, : key.top_k]
    return dict(a=torch.randn(batch, key.k, dtype=dtype, device=device),
                b=(torch.randn(experts, key.n, key.k, device=device) * key.k**-0.5).to(dtype),
                out=torch.empty(batch, key.top_k, key.n, dtype=dtype, device=device),
                topk_weights=torch.rand(batch, key.top_k, device=device) if key.mul_routed_weight else None,
                **sort_by_expert(ids, experts, key.block_size_m)._asdict())


# --- the host-side sorting ---------------------------------------------------------------


class ExpertBlocks(NamedTuple):
    """The pairs grouped by expert, as the kernel reads them (all int32, on the ids' device)."""

    sorted_ids: torch.Tensor  # [capacity]: pair ids token * top_k + slot, grouped by expert; padding: num_pairs
    block_experts: torch.Tensor  # [capacity // block_m]: the expert of each block of ids; -1 past the used ones
    num_used: torch.Tensor  # [1]: the ids in use, the padded groups' total (a tensor: reading it would sync)


def padded_capacity(pairs: int, experts: int, block_m: int) -> int:
    """Room for the padded groups of any routing of ``pairs`` pairs: each of at most
    ``min(experts, pairs)`` non-empty groups adds at most ``block_m - 1`` padding ids, and
    the total is a multiple of ``block_m``. The grid is sized by it, with no sync."""
    return (pairs + min(experts, pairs) * (block_m - 1)) // block_m * block_m


def sort_by_expert(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertBlocks:
    """Group the pairs of ``topk_ids [M, top_k]`` (values in ``[0, num_experts)``) by expert,
    pair order kept within a group, each group padded to a multiple of ``block_m``.

    A stable argsort orders the pairs by expert; a scatter-add counts each expert's pairs
    (``torch.bincount`` would sync on CUDA to size its result); cumulative sums give each
    group's start, unpadded and padded, so the pair at sorted position ``i`` goes to
    ``padded_start[e] + i - start[e]``; a block's expert is the number of padded groups
    ending at or before its first id (``searchsorted``). Every size is known from shapes.
    """
    flat = topk_ids.reshape(-1).long()
    pairs, device = flat.numel(), flat.device
    order = torch.argsort(flat, stable=True)
    expert = flat[order]
    counts = torch.zeros(num_experts, dtype=torch.long, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    shift = (padded_end - padded) - (torch.cumsum(counts, 0) - counts)  # padded start - start, per expert
    capacity = padded_capacity(pairs, num_experts, block_m)
    sorted_ids = torch.full((capacity,), pairs, dtype=torch.int32, device=device)
    sorted_ids[torch.arange(pairs, device=device) + shift[expert]] = order.to(torch.int32)
    block_start = torch.arange(0, capacity, block_m, device=device)
    num_used = padded_end[-1:]
    block_experts = torch.where(block_start < num_used, torch.searchsorted(padded_end, block_start, right=True), -1)
    return ExpertBlocks(sorted_ids, block_experts.to(torch.int32), num_used.to(torch.int32))


# --- the kernel class --------------------------------------------------------------------


SIZE = range(1, 2**31)
ARGUMENTS = Arguments(a=Arg("M K", (torch.float16, torch.bfloat16), strides="_ 1"), b=Arg("E N K", "a", strides="_ _ 1"),
                      topk_ids=Arg("M top_k", INDEX_DTYPES, values=Within(0, "E")),
                      out=Arg("M top_k N", "a", contiguous=True, optional=True),
                      topk_weights=Arg("M top_k", torch.float32, contiguous=True, optional=True),
                      sizes=dict(E=SIZE, N=SIZE, K=SIZE, top_k=SIZE))


def _size(name: str) -> Config:
    return Config(name, int, choices=SIZE)


DTYPES = Config("dtypes", list[str], default=["bfloat16"], choices=("float16", "bfloat16"))
MAX_TOKENS = Config("max_tokens", int, choices=SIZE, expand=BATCHES.upto)  # every bucket up to it is tuned
STAND_IN_TOKENS = 16  # any batch: the binary is the same for all
TUNING = TuningSpace(TILES, default=default_tile, inputs=tuning_inputs, by=dict(  # selected as in vLLM's files
    experts=size_of("b", 0, warm=_size("experts")), batch=computed(lambda a: BATCHES.of(a.shape[0]), warm=MAX_TOKENS)))


class GroupedGemmKernel(TritonJitKernel):
    name = "jitkern.example.grouped_gemm"
    kernel = _grouped_gemm_kernel
    arguments = ARGUMENTS  # a and out's stand-ins, the strides grouped_gemm fixes
    pinned_by_key = frozenset({"N", "K"})
    tuning = TUNING

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("a", warm=DTYPES)  # a, b and out
        n: int = size_of("b", 1, warm=_size("n"))  # pinned: one class
        k: int = size_of("a", 1, warm=_size("k"))
        top_k: int = size_of("out", 1, constexpr="TOP_K", warm=_size("top_k"))
        mul_routed_weight: bool = computed(lambda topk_weights: topk_weights is not None,
                                           constexpr="MUL_ROUTED_WEIGHT", warm=[False, True])
        block_size_m: int = tuned(constexpr="BLOCK_M")
        block_size_n: int = tuned(constexpr="BLOCK_N")
        block_size_k: int = tuned(constexpr="BLOCK_K")
        group_size_m: int = tuned(constexpr="GROUP_M")
        num_warps: int = tuned(option="num_warps")
        num_stages: int = tuned(option="num_stages")

    stand_ins = dict(  # b of top_k experts, E not drawn (at E = 1 a strided b could pass 2**31 as its expert stride)
        b=Tensor(("top_k", "n", "k"), "dtype", varying=()), sorted_ids=Tensor((lambda key: _capacity(key),), torch.int32),
        block_experts=Tensor((lambda key: _capacity(key) // key.block_size_m,), torch.int32),
        num_used=Tensor((1,), torch.int32, varying=()),
        topk_weights=lambda key: Tensor((STAND_IN_TOKENS, "top_k"), torch.float32) if key.mul_routed_weight else None)

    @kernel_launcher
    def __call__(self, compile_key, a, b, out, sorted_ids, block_experts, num_used, topk_weights) -> LaunchSpec:
        """One program per (block of sorted ids, column tile). No checks: runs on stand-ins too."""
        (tokens, k), n = a.shape, out.shape[2]
        return LaunchSpec(
            grid=(block_experts.shape[0] * cdiv(n, compile_key.block_size_n),),
            kwargs=dict(A=a, B=b, C=out, TopkWeights=topk_weights, SortedIds=sorted_ids, BlockExperts=block_experts,
                        NumUsed=num_used, N=n, K=k, num_pairs=tokens * out.shape[1], a_row_stride=launch_stride(a, 0),
                        b_expert_stride=launch_stride(b, 0), b_row_stride=launch_stride(b, 1)),
            result=out)


def _capacity(key: Any) -> int:
    return padded_capacity(STAND_IN_TOKENS * key.top_k, key.top_k, key.block_size_m)


# --- the public function -----------------------------------------------------------------


@public_call(op="jitkern_examples::grouped_gemm", mutates=["out"], returns="out")
def grouped_gemm(a: torch.Tensor, b: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``c [M, top_k, N]``: ``c[m, j] = a[m] @ b[topk_ids[m, j]].T``, times ``topk_weights[m, j]``
    when given, accumulated in float32; the arguments as ``ARGUMENTS`` declares them. Every
    call runs in full: the sorting's three results are torch work no ``torch_step`` (one
    tensor each) returns, so ``public_call`` plans none."""
    checked = ARGUMENTS.check(locals())
    tokens, top_k, n = checked.M, checked.top_k, checked.N
    if padded_capacity(tokens * top_k, checked.E, LARGEST_BLOCK_M) >= 2**31:
        raise ValueError(f"topk_ids: {tokens} x {top_k} pairs; the padded pairs must stay below 2**31")
    c = out if out is not None else torch.empty((tokens, top_k, n), dtype=a.dtype, device=a.device)
    if tokens and not is_faking():  # a fake call (shapes only) needs no tile, nor a sort
        kernel = GroupedGemmKernel()
        block_m = kernel.key_for(a=a, b=b, out=c, topk_weights=topk_weights).block_size_m  # of the tile it launches
        kernel(a, b, c, *sort_by_expert(topk_ids, b.shape[0], block_m), topk_weights)
    return c
