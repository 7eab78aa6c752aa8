"""The partial-state store: each token's ``[kv | score + ape]`` into the paged state cache.

Tokens of a window that has not closed wait in the cache until the window's last token
arrives (``docs/spec/deepseek-v4-compressor.md``). A program stores a tile of a few
tokens' rows (or a part of one long row: ``store_tiling``); padding tokens (slot -1)
write nothing, and nothing else of the cache is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, launch_stride
from jitkern import public_call
from jitkern import cdiv, kernel_launcher, keys, next_power_of_2
from jitkern.kernel.validation import check_int, first_outside
from deepseek_v4.common import (
    FLOAT_DTYPE,
    INDEX_DTYPES,
    LAYOUTS,
    check_float_tensor,
    check_index_tensor,
    check_same_device,
    dtype_name,
    index_dtype_names,
    layout_of,
    resolve_pdl,
    use_gdc,
)

_INDEX_DTYPES = tuple(INDEX_DTYPES.values())


@triton.jit(
    do_not_specialize=["n_tokens"],  # a runtime size: one binary for all of them
    do_not_specialize_on_alignment=["Positions_ptr", "Slot_ptr"],
)
def _save_partial_states_kernel(
    KV_ptr,
    kv_row_stride,
    Score_ptr,
    score_row_stride,
    Ape_ptr,
    ape_row_stride,
    Positions_ptr,
    State_ptr,
    state_block_stride,
    state_row_stride,
    Slot_ptr,
    n_tokens,
    HEAD_SIZE: tl.constexpr,
    STATE_WIDTH: tl.constexpr,
    COMPRESS_RATIO: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TOKENS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    # For token i with slot s = slot[i] >= 0, row = state[s // BLOCK_SIZE, s % BLOCK_SIZE]:
    #   row[0 : H]                        = kv[i, 0:H]
    #   row[STATE_WIDTH : STATE_WIDTH + H] = score[i, 0:H] + ape[positions[i] % COMPRESS_RATIO, 0:H]
    # Program x * GROUPS + y: tokens x*TOKENS .. x*TOKENS + TOKENS - 1 below n_tokens, columns
    # y*BLOCK_H .. y*BLOCK_H + BLOCK_H - 1 below H (the groups of a token are launch neighbours).
    GROUPS: tl.constexpr = (HEAD_SIZE + BLOCK_H - 1) // BLOCK_H
    if GROUPS == 1:
        first = tl.program_id(0).to(tl.int64) * TOKENS  # 64-bit offsets: caches exceed 2**31 elements
        cols = tl.arange(0, BLOCK_H)
    else:
        first = (tl.program_id(0) // GROUPS).to(tl.int64) * TOKENS
        cols = (tl.program_id(0) % GROUPS) * BLOCK_H + tl.arange(0, BLOCK_H)
    tokens = first + tl.arange(0, TOKENS)
    live = tokens < n_tokens
    col_ok = (cols < HEAD_SIZE)[None, :]
    if USE_GDC:
        # Launched with PDL: wait until the kernel before us has finished writing our
        # inputs; let the next kernel start its prologue (it waits for us the same way).
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    # Every load that needs no other is issued at once: kv and score of padding tokens are
    # read too (their rows exist), so that only ape and the stores wait for slots/positions.
    slot = tl.load(Slot_ptr + tokens, mask=live, other=-1).to(tl.int64)
    position = tl.load(Positions_ptr + tokens, mask=live, other=0)
    read = live[:, None] & col_ok
    kv = tl.load(KV_ptr + tokens[:, None] * kv_row_stride + cols[None, :], mask=read)
    score = tl.load(Score_ptr + tokens[:, None] * score_row_stride + cols[None, :], mask=read)
    write = (slot >= 0)[:, None] & col_ok  # padding tokens (slot -1) write nothing, read no ape
    ape_row = (position % COMPRESS_RATIO) * ape_row_stride
    ape = tl.load(Ape_ptr + ape_row[:, None] + cols[None, :], mask=write)
    row = State_ptr + (slot // BLOCK_SIZE) * state_block_stride + (slot % BLOCK_SIZE) * state_row_stride
    row = row[:, None] + cols[None, :]
    tl.store(row, kv, mask=write)
    tl.store(row + STATE_WIDTH, score + ape, mask=write)


@dataclass(frozen=True)
class StoreTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    tokens: int  # tokens per program: a [tokens, block_h] tile
    block_h: int  # columns per program (a power of two): cdiv(H, block_h) programs per token group
    num_warps: int


def store_tiling(head_size: int) -> StoreTiling:
    """The shipped tiling of a row of ``head_size`` floats, as the H200 sweep chose it
    (``benchmarks/device/sweep_store.py``, device notes 38).

    One warp per program, each moving 256-512 floats of kv and of score: rows of 512 and
    more are split in 512-column groups, rows of 128 are paired (two tokens a program).
    At 64K tokens this gave 0.94 / 0.94 / 0.93 / 0.90 of copy for H = 1024 / 512 / 256 /
    128, where 4 warps and 1024 floats a program gave 0.93 / 0.92 / 0.91 / 0.88.
    """
    block_h = min(512, next_power_of_2(head_size))
    return StoreTiling(tokens=max(1, 256 // block_h), block_h=block_h, num_warps=1)


def _grid(n_tokens: int, head_size: int, tokens: int, block_h: int) -> tuple[int]:
    """One axis: (token group, column group) pairs, the column groups of a token group adjacent."""
    return (cdiv(n_tokens, tokens) * cdiv(head_size, block_h),)


class SavePartialStatesKernel(TritonJitKernel["SavePartialStatesKernel.CompileKey"]):
    name = "deepseek_v4.save_partial_states"
    kernel = _save_partial_states_kernel

    @dataclass(frozen=True)
    class CompileKey:
        head_size: int  # H = kv.shape[-1]
        state_width: int
        compress_ratio: int
        block_size: int
        dtype: str  # kv, score, ape and state_cache (float32; the public function checks)
        positions_dtype: str  # int32 or int64: different binaries
        slot_mapping_dtype: str
        launch_pdl: bool
        # the tiling (store_tiling, from head_size): constexprs and launch option of the binary
        tokens: int
        block_h: int
        num_warps: int

    def dispatch(
        self,
        *,
        head_size: int,
        state_width: int,
        compress_ratio: int,
        block_size: int,
        dtype: torch.dtype,
        positions_dtype: torch.dtype,
        slot_mapping_dtype: torch.dtype,
        launch_pdl: bool = False,
    ) -> CompileKey:
        tiling = store_tiling(head_size)
        return self.CompileKey(
            head_size=head_size,
            state_width=state_width,
            compress_ratio=compress_ratio,
            block_size=block_size,
            dtype=dtype_name(dtype),
            positions_dtype=dtype_name(positions_dtype),
            slot_mapping_dtype=dtype_name(slot_mapping_dtype),
            launch_pdl=launch_pdl,
            tokens=tiling.tokens,
            block_h=tiling.block_h,
            num_warps=tiling.num_warps,
        )

    def get_warmup_keys(
        self,
        *,
        head_dim: int,
        compress_ratio: int,
        index_dtypes: list[str] = ["int32", "int64"],  # noqa: B006 (never mutated)
        launch_pdl: bool = False,
    ) -> list[CompileKey]:
        """The keys of a deployment's layout (spec table), for each index dtype pair.
        ``launch_pdl``: the deployment launches with PDL (Hopper and newer)."""
        layout = LAYOUTS.get(compress_ratio)
        if head_dim <= 0 or layout is None:
            return []
        width = layout.state_width(head_dim)
        rows = keys.product(
            positions_dtype=index_dtype_names(index_dtypes), slot_mapping_dtype=index_dtype_names(index_dtypes)
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(
                head_size=width,
                state_width=width,
                compress_ratio=compress_ratio,
                block_size=layout.block_size,
                dtype=FLOAT_DTYPE,
                launch_pdl=launch_pdl,
                **row,
            ),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        """The deployment's usual layout: ``kv`` and ``score`` views of one ``[tokens, 2H]``
        projection (score at column H: 16-byte aligned when 4H is), a dense cache."""
        dtype = getattr(torch, key.dtype)
        h = key.head_size
        return dict(
            kv=TritonWarmupTensor(dtype, shape=(1, h), strides=(2 * h, 1)),
            score=TritonWarmupTensor(dtype, shape=(1, h), strides=(2 * h, 1), aligned=(4 * h) % 16 == 0),
            ape=TritonWarmupTensor(dtype, shape=(key.compress_ratio, h), varying=()),  # one row a ratio
            positions=TritonWarmupTensor(getattr(torch, key.positions_dtype)),
            state_cache=TritonWarmupTensor(dtype, shape=(1, key.block_size, key.state_width + h)),
            slot_mapping=TritonWarmupTensor(getattr(torch, key.slot_mapping_dtype)),
            block_size=key.block_size,
            state_width=key.state_width,
            compress_ratio=key.compress_ratio,
            launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            HEAD_SIZE=key.head_size,
            STATE_WIDTH=key.state_width,
            COMPRESS_RATIO=key.compress_ratio,
            BLOCK_SIZE=key.block_size,
            TOKENS=key.tokens,
            BLOCK_H=key.block_h,
            USE_GDC=use_gdc(key.launch_pdl),
            num_warps=key.num_warps,
            launch_pdl=key.launch_pdl,
        )

    @kernel_launcher
    def __call__(
        self,
        kv: torch.Tensor,
        score: torch.Tensor,
        ape: torch.Tensor,
        positions: torch.Tensor,
        state_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_size: int,
        state_width: int,
        compress_ratio: int,
        launch_pdl: bool = False,
    ) -> LaunchSpec:
        """Programs over (token groups, column groups). No checks here: it also runs on
        warmup stand-ins."""
        key = self.dispatch(
            head_size=kv.shape[-1],
            state_width=state_width,
            compress_ratio=compress_ratio,
            block_size=block_size,
            dtype=kv.dtype,
            positions_dtype=positions.dtype,
            slot_mapping_dtype=slot_mapping.dtype,
            launch_pdl=launch_pdl,
        )
        tokens = slot_mapping.shape[0]
        return LaunchSpec(
            grid=_grid(tokens, key.head_size, key.tokens, key.block_h),
            kwargs=dict(
                KV_ptr=kv,
                kv_row_stride=launch_stride(kv, 0, usual=2 * kv.shape[1]),  # one token: as its stand-in's
                Score_ptr=score,
                score_row_stride=launch_stride(score, 0, usual=2 * score.shape[1]),
                Ape_ptr=ape,
                ape_row_stride=ape.stride(0),
                Positions_ptr=positions,
                State_ptr=state_cache,
                state_block_stride=launch_stride(state_cache, 0),  # a cache of one block: any stride
                state_row_stride=launch_stride(state_cache, 1),
                Slot_ptr=slot_mapping,
                n_tokens=tokens,
            ),
            key=key,
            result=state_cache,
        )


@public_call
def save_partial_states(
    kv: torch.Tensor,
    score: torch.Tensor,
    ape: torch.Tensor,
    positions: torch.Tensor,
    state_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_size: int,
    state_width: int,
    compress_ratio: int,
    pdl_kwargs: dict | None = None,
) -> None:
    """Store each token's ``[kv | score + ape[position % ratio]]`` row into ``state_cache``.

    ``kv``, ``score``: float32 ``[tokens, H]`` (row strides free: views of one projection
    are fine). A manifest with no layout warms them as views of one ``[tokens, 2H]``
    projection, ``score`` at column H: a ``score`` allocated on its own starts 16-byte
    aligned where that view does not when H % 4 != 0, so it needs
    ``"unaligned": ["score"]`` in the manifest's layout. ``ape``: float32 ``[compress_ratio, >= H]``; ``positions``,
    ``slot_mapping``: int32 or int64 ``[tokens]``, slot -1 = padding; ``state_cache``:
    float32 ``[blocks, block_size, >= state_width + H]``, dims 0 and 1 may be strided (its
    rows apart in memory). Every stride is below 2**31: the binaries keep them i32.
    ``pdl_kwargs``: ``{"launch_pdl": True}`` (a bool) launches with programmatic dependent launch
    where the GPU supports it (sm_90+), and is ignored elsewhere.

    Everything checkable from shapes and dtypes is checked before the launch, without
    reading device memory. Slots and positions are values: they are checked only when
    the tensors are on the CPU (tests, the interpreter), never on a GPU's hot path.
    """
    device = check_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                       compress_ratio)
    launch_pdl = resolve_pdl(pdl_kwargs, device)
    if kv.shape[0]:
        SavePartialStatesKernel()(
            kv,
            score,
            ape,
            positions,
            state_cache,
            slot_mapping,
            block_size,
            state_width,
            compress_ratio,
            launch_pdl=launch_pdl,
        )


def check_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size: int,
                              state_width: int, compress_ratio: int) -> torch.device:
    """``save_partial_states``' argument checks (values too, on the CPU); returns the device."""
    layout_of(compress_ratio)  # 4 or 128; the spec's block size is a warmup default only
    check_float_tensor("kv", kv, 2)
    check_float_tensor("score", score, 2)
    check_float_tensor("ape", ape, 2)
    check_float_tensor("state_cache", state_cache, 3, written=True)
    check_index_tensor("positions", positions, _INDEX_DTYPES)
    check_index_tensor("slot_mapping", slot_mapping, _INDEX_DTYPES)
    device = check_same_device(
        kv=kv, score=score, ape=ape, positions=positions, state_cache=state_cache, slot_mapping=slot_mapping
    )
    tokens, head_size = kv.shape
    if head_size <= 0:
        raise ValueError(f"kv: last dimension must be positive, got shape {tuple(kv.shape)}")
    if tuple(score.shape) != (tokens, head_size):
        raise ValueError(f"score: shape {tuple(score.shape)} does not match kv {tuple(kv.shape)}")
    for name, tensor in (("positions", positions), ("slot_mapping", slot_mapping)):
        if tensor.shape[0] != tokens:
            raise ValueError(f"{name}: {tensor.shape[0]} tokens, kv has {tokens}")
    if ape.shape[0] != compress_ratio or ape.shape[1] < head_size:
        raise ValueError(f"ape: shape {tuple(ape.shape)}, expected [compress_ratio={compress_ratio}, >= {head_size}]")
    check_int("block_size", block_size, minimum=1)
    if state_cache.shape[1] != block_size:
        raise ValueError(f"state_cache: dim 1 is {state_cache.shape[1]}, expected block_size={block_size}")
    check_int("state_width", state_width)
    if not head_size <= state_width:
        raise ValueError(f"state_width: {state_width} is smaller than kv's width {head_size}; halves would overlap")
    if state_cache.shape[2] < state_width + head_size:
        raise ValueError(
            f"state_cache: last dim {state_cache.shape[2]} < state_width + H = {state_width} + {head_size}"
        )
    if device.type == "cpu" and tokens:
        _check_values_on_host(positions, state_cache, slot_mapping, block_size)
    return device


def _check_values_on_host(positions, state_cache, slot_mapping, block_size) -> None:
    """Slot and position checks that need the values: free on the CPU, a sync on a GPU."""
    stored = slot_mapping >= 0  # padding tokens' positions are never read
    if bool(stored.any()) and int(positions[stored].min()) < 0:
        raise ValueError("positions: must be >= 0 (the kernel's % truncates, Python's floors)")
    slots = state_cache.shape[0] * block_size
    if first_outside(slot_mapping, 0, slots, padding=-1) is not None:
        raise ValueError(f"slot_mapping: slots must be -1 (padding) or in [0, {slots})")
