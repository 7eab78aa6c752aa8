"""A fused-MoE grouped GEMM: each token's rows times the weights of the experts it is routed to.

``c[m, j, :] = (a[m, :] @ b[topk_ids[m, j]].T) * topk_weights[m, j]`` (the weight only when
given), accumulated in float32, for activations ``a [M, K]`` and expert weights
``b [E, N, K]``. The module keeps four things apart:

- the ``@triton.jit`` body: one program per tile of ``BLOCK_M`` sorted (token, slot) pairs
  by ``BLOCK_N`` columns, all pairs of a tile routed to one expert;
- the host-side sorting (``sort_by_expert``): torch work that groups the pairs by expert
  and pads each group to a multiple of ``BLOCK_M``, with no sync and no Python loop;
- the kernel class (``GroupedGemmKernel``) and its tile table (``tile_for``);
- the public function ``grouped_gemm``, which validates and launches.

The reference, written from the formula above, is ``jitkern.examples.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, launch_stride
from jitkern import public_call
from jitkern import cdiv, kernel_launcher, keys
from jitkern.kernel.validation import check_strides_below_i32, check_values_in, same_device

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


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


# --- tiles: chosen from the batch size alone --------------------------------------------


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


# (first batch size, tile): a batch of M tokens takes the last row whose first size is <= M. A
# small batch gives each expert few pairs: a small BLOCK_M wastes less on padding. An untuned
# default for every GPU (M <= 16, <= 64, more); a later issue tunes it per GPU.
TILES = (
    (1, Tile(block_m=16, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4)),
    (17, Tile(block_m=32, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4)),
    (65, Tile(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4)),
)


def tile_for(tokens: int) -> Tile:
    """The tile of a batch of ``tokens`` tokens (``TILES``; no tokens: the first)."""
    return [tile for first, tile in TILES if first <= max(tokens, 1)][-1]


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


class GroupedGemmKernel(TritonJitKernel["GroupedGemmKernel.CompileKey"]):
    name = "jitkern.example.grouped_gemm"
    kernel = _grouped_gemm_kernel
    # N and K are runtime arguments whose value the key names: one binary per key. Unpinned,
    # each would be warmed as 1, a multiple of 16 and other (9 binaries a key); unspecialised,
    # the loads of B would lose the multiple-of-16 row starts that vectorise them.
    pinned_by_key = frozenset({"N", "K"})
    fixed_strides = frozenset({"a.1", "b.2", "out", "topk_weights"})  # grouped_gemm requires these dense

    @dataclass(frozen=True)
    class CompileKey:
        dtype: str  # a, b and out
        n: int  # b.shape[1], pinned
        k: int  # a.shape[1], pinned
        top_k: int
        mul_routed_weight: bool
        block_m: int  # the tile (tile_for, from the batch size)
        block_n: int
        block_k: int
        group_m: int
        num_warps: int
        num_stages: int

    def dispatch(self, *, dtype, tokens: int, n: int, k: int, top_k: int, mul_routed_weight: bool) -> CompileKey:
        return self.CompileKey(str(dtype).removeprefix("torch."), n, k, top_k, mul_routed_weight,
                               **vars(tile_for(tokens)))

    def get_warmup_keys(self, *, n: int, k: int, top_k: int, max_tokens: int,
                        dtypes: list[str] = ["bfloat16"],  # noqa: B006 (never mutated)
                        mul_routed_weight: list[bool] = [False, True]) -> list[CompileKey]:  # noqa: B006
        """Every batch size 1..``max_tokens`` of one expert shape (``b [E, n, k]``, any E): the
        smallest batch of each tile up to ``max_tokens`` stands for the others of its tile."""
        unknown = sorted(set(dtypes) - set(_DTYPES))
        if unknown:
            raise ValueError(f"dtypes: {unknown} not supported; use {sorted(_DTYPES)}")
        if min(n, k, top_k, max_tokens) < 1 or n * k >= 2**31 or max_tokens * top_k >= 2**31:
            raise ValueError("n, k, top_k, max_tokens: must be positive, n * k and max_tokens * top_k below 2**31 "
                             "(grouped_gemm refuses larger)")
        rows = keys.product(dtype=[_DTYPES[name] for name in dtypes],
                            tokens=[first for first, _ in TILES if first <= max_tokens],
                            mul_routed_weight=mul_routed_weight)
        return keys.unique_keys(lambda **row: self.dispatch(n=n, k=k, top_k=top_k, **row), rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        dtype = _DTYPES[key.dtype]
        tokens = next(first for first, tile in TILES if vars(tile).items() <= vars(key).items())  # its tile's first
        experts, pairs = key.top_k, tokens * key.top_k  # any number of experts: the binary does not depend on it
        capacity = padded_capacity(pairs, experts, key.block_m)
        return dict(
            a=TritonWarmupTensor(dtype, (tokens, key.k)),
            b=TritonWarmupTensor(dtype, (experts, key.n, key.k), varying=()),
            out=TritonWarmupTensor(dtype, (tokens, key.top_k, key.n)),
            sorted_ids=TritonWarmupTensor(torch.int32, (capacity,)),
            block_experts=TritonWarmupTensor(torch.int32, (capacity // key.block_m,)),
            num_used=TritonWarmupTensor(torch.int32, (1,), varying=()),
            topk_weights=TritonWarmupTensor(torch.float32, (tokens, key.top_k)) if key.mul_routed_weight else None,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(TOP_K=key.top_k, MUL_ROUTED_WEIGHT=key.mul_routed_weight, BLOCK_M=key.block_m,
                    BLOCK_N=key.block_n, BLOCK_K=key.block_k, GROUP_M=key.group_m, num_warps=key.num_warps,
                    num_stages=key.num_stages)

    @kernel_launcher
    def __call__(self, a, b, out, sorted_ids, block_experts, num_used, topk_weights) -> LaunchSpec:
        """One program per (block of sorted ids, column tile). No checks: runs on stand-ins too."""
        tokens, k = a.shape
        top_k, n = out.shape[1], out.shape[2]
        key = self.dispatch(dtype=a.dtype, tokens=tokens, n=n, k=k, top_k=top_k,
                            mul_routed_weight=topk_weights is not None)
        return LaunchSpec(
            grid=(block_experts.shape[0] * cdiv(n, key.block_n),),
            kwargs=dict(A=a, B=b, C=out, TopkWeights=topk_weights, SortedIds=sorted_ids, BlockExperts=block_experts,
                        NumUsed=num_used, N=n, K=k, num_pairs=tokens * top_k, a_row_stride=launch_stride(a, 0),
                        b_expert_stride=launch_stride(b, 0), b_row_stride=launch_stride(b, 1)),
            key=key,
            result=out,
        )


# --- the public function -----------------------------------------------------------------


@public_call
def grouped_gemm(a: torch.Tensor, b: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``c [M, top_k, N]``: ``c[m, j] = a[m] @ b[topk_ids[m, j]].T``, times ``topk_weights[m, j]``
    when given, accumulated in float32.

    ``a``: float16 or bfloat16 ``[M, K]``, rows dense (any row stride); ``b``: ``[E, N, K]`` of
    a's dtype, K dense; ``topk_ids``: int32 or int64 ``[M, top_k]``, values in ``[0, E)`` (checked
    on the CPU only: on a GPU it would sync); ``topk_weights``: float32 ``[M, top_k]``, dense;
    ``out``: a dense ``[M, top_k, N]`` tensor of a's dtype to write. Strides below 2**31.

    The host-side sorting is torch work whose three results the launch takes; a
    ``torch_step`` returns one tensor, so ``public_call`` does not plan this function and
    every call runs in full.
    """
    _check(a, b, topk_ids, topk_weights, out)
    tokens, top_k, n = a.shape[0], topk_ids.shape[1], b.shape[1]
    c = out if out is not None else torch.empty((tokens, top_k, n), dtype=a.dtype, device=a.device)
    if tokens:
        blocks = sort_by_expert(topk_ids, b.shape[0], tile_for(tokens).block_m)
        GroupedGemmKernel()(a, b, c, *blocks, topk_weights)
    return c


def _check(a, b, topk_ids, topk_weights, out) -> None:
    """``grouped_gemm``'s argument checks: shapes, dtypes, strides, devices (ids' values on the CPU)."""
    for name, tensor, dims in (("a", a, 2), ("b", b, 3), ("topk_ids", topk_ids, 2),
                               ("topk_weights", topk_weights, 2), ("out", out, 3)):
        optional = tensor is None and name in ("topk_weights", "out")
        if not optional and not (isinstance(tensor, torch.Tensor) and tensor.dim() == dims):
            raise ValueError(f"{name}: expected a {dims}-D torch.Tensor, got {_describe(tensor)}")
    if a.dtype not in _DTYPES.values():
        raise ValueError(f"a: dtype {a.dtype} not supported; use float16 or bfloat16")
    (tokens, k), (experts, n, _), top_k = a.shape, b.shape, topk_ids.shape[1]
    if b.dtype != a.dtype or b.shape[2] != k or experts == 0 or n == 0 or k == 0:
        raise ValueError(f"b: expected {a.dtype} [E, N, K={k}] with E, N, K > 0, got {_describe(b)}")
    if topk_ids.dtype not in (torch.int32, torch.int64) or topk_ids.shape[0] != tokens or top_k == 0:
        raise ValueError(f"topk_ids: expected int32 or int64 [M={tokens}, top_k > 0], got {_describe(topk_ids)}")
    if topk_weights is not None and (topk_weights.dtype != torch.float32 or topk_weights.shape != topk_ids.shape
                                     or not topk_weights.is_contiguous()):
        raise ValueError(f"topk_weights: expected dense float32 {list(topk_ids.shape)}, got {_describe(topk_weights)}")
    if out is not None and (out.dtype != a.dtype or out.shape != (tokens, top_k, n) or not out.is_contiguous()):
        raise ValueError(f"out: expected dense {a.dtype} [{tokens}, {top_k}, {n}], got {_describe(out)}")
    for name, tensor in (("a", a), ("b", b)):
        if tensor.stride(-1) != 1 and k > 1:
            raise ValueError(f"{name}: K must be dense (stride 1), got strides {tuple(tensor.stride())}")
        check_strides_below_i32(name, tensor)
    if padded_capacity(tokens * top_k, experts, tile_for(tokens).block_m) >= 2**31:
        raise ValueError(f"topk_ids: {tokens} x {top_k} pairs; the padded pairs must stay below 2**31")
    given = {name: t for name, t in (("topk_weights", topk_weights), ("out", out)) if t is not None}
    if same_device(a=a, b=b, topk_ids=topk_ids, **given).type == "cpu":
        check_values_in("topk_ids", topk_ids.reshape(-1), 0, experts)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)} strides {list(value.stride())} on {value.device}"
    return type(value).__name__
