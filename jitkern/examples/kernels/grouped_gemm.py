"""The fused-MoE grouped GEMM's Triton body, and the host-side sorting that lays out what it reads
(``jitkern.examples.grouped_gemm`` declares and launches it).

``c[m, j, :] = (a[m, :] @ b[topk_ids[m, j]].T) * topk_weights[m, j]`` (the weight only when
given), accumulated in float32, for activations ``a [M, K]`` and expert weights
``b [E, N, K]``. One program per tile of ``BLOCK_SIZE_M`` sorted (token, slot) pairs by ``BLOCK_SIZE_N``
columns, all pairs of a tile routed to one expert; ``sort_by_expert`` groups the pairs by
expert and pads each group to a multiple of ``BLOCK_SIZE_M``, with no sync and no Python loop.
The reference, written from the formula above, is ``jitkern.examples.reference``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl


@triton.jit(
    do_not_specialize=["num_pairs"],  # M * top_k changes every batch: one binary for all
    do_not_specialize_on_alignment=["TopkWeights", "SortedIds", "BlockExperts", "NumUsed"],  # gathers
)
def grouped_gemm_kernel(
    A, B, C, TopkWeights, SortedIds, BlockExperts, NumUsed,
    N, K, num_pairs, a_row_stride, b_expert_stride, b_row_stride,
    TOP_K: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
):
    # Pair p = token * TOP_K + slot; SortedIds holds pairs grouped by expert, each group padded
    # with the id num_pairs to a multiple of BLOCK_SIZE_M, so a block of BLOCK_SIZE_M ids has one expert,
    # BlockExperts[block]. Program (block, column tile): C[p, cols] = A[p // TOP_K] @ B[e, cols].T
    # for each p of the block below num_pairs (C viewed [num_pairs, N]); padding reads and writes
    # nothing. Programs go GROUP_SIZE_M blocks down a column tile before the next (B's tile stays in L2).
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    blocks_m = tl.num_programs(0) // tiles_n
    group = GROUP_SIZE_M * tiles_n
    first_m = (pid // group) * GROUP_SIZE_M
    rows_here = tl.minimum(blocks_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % group) % rows_here
    pid_n = (pid % group) // rows_here
    if pid_m * BLOCK_SIZE_M >= tl.load(NumUsed):  # past the padded groups: nothing to do
        return
    ids = tl.load(SortedIds + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M))
    live = ids < num_pairs
    expert = tl.load(BlockExperts + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = A + (ids // TOP_K).to(tl.int64)[:, None] * a_row_stride + ks[None, :]
    b_ptrs = B + expert * b_expert_stride + cols.to(tl.int64)[None, :] * b_row_stride + ks[:, None]  # [K, N]
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_ok = ks < K - step * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=live[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K
        b_ptrs += BLOCK_SIZE_K
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(TopkWeights + ids, mask=live, other=0.0)[:, None]
    c_ptrs = C + ids.to(tl.int64)[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=live[:, None] & col_ok[None, :])


class ExpertBlocks(NamedTuple):
    """The pairs grouped by expert, as the kernel reads them (all int32, on the ids' device)."""

    sorted_ids: torch.Tensor  # [capacity]: pair ids token * top_k + slot, grouped by expert; padding: num_pairs
    block_experts: torch.Tensor  # [capacity // block_m]: the expert of each block of ids; -1 past the used ones
    num_used: torch.Tensor  # [1]: the ids in use, the padded groups' total (a tensor: reading it would sync)


def padded_capacity(pairs: int, experts: int, block_m: int) -> int:
    """Room for the padded groups of any routing of ``pairs`` pairs: each of at most
    ``min(experts, pairs)`` non-empty groups adds at most ``block_m - 1`` padding ids, and
    the total is a multiple of ``block_m``. The grid is sized by it, with no sync. The ids
    are int32: a ValueError naming ``topk_ids`` from 2**31 on."""
    capacity = (pairs + min(experts, pairs) * (block_m - 1)) // block_m * block_m
    if capacity >= 2**31:
        raise ValueError(f"topk_ids: {pairs} pairs, padded to {capacity} sorted ids for {experts} experts; "
                         "the sorted ids are int32, so they must stay below 2**31")
    return capacity


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
