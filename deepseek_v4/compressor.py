"""The window compressor: each closed window's rows -> one float32 compressed entry.

A token at position ``p`` with ``(p + 1) % ratio == 0`` closes a window; its entry is,
per dimension, a softmax over the window's rows of ``score + ape`` weighting ``kv``
(``docs/spec/deepseek-v4-compressor.md``). The rows are read from the paged state cache that
``save_partial_states`` wrote, through the request's block table. Tokens that close no
window leave their output row untouched.

Two launch shapes, one ``@triton.jit`` function (``SCAN`` picks):

- ratio 4 (``SCAN == 1``): one program per token, the whole head per program. One token
  in four closes a window and a window reads only 8 short rows, so idle programs are
  cheap and the kernel runs near copy bandwidth.
- ratio 128 (``SCAN == 128``): one token in 128 closes a window, but a window reads 128
  rows. A program per token would leave 127 of 128 programs idle, each holding the
  registers and warps the busy ones need, so instead each program scans a *chunk* of
  up to ``SCAN`` tokens (one vectorised load of their positions and requests) and
  handles the closing tokens it finds, one after the other; and the head is split into
  groups of ``PROGRAM_D`` columns, a program each, so the 128 rows of one window are
  read by several programs at once.

  Chunk ``c`` of ``n_chunks`` holds the tokens ``c, c + n_chunks, c + 2 n_chunks, ...``
  with ``n_chunks`` odd: window ends, which come every 128 tokens in a prefill, fall in
  different chunks (128 is invertible modulo an odd number), and so do the tokens of a
  run of decodes that all close a window at once (a batch in lockstep); contiguous
  chunks would put those in one program, one after the other. ``n_chunks`` is a
  runtime argument (not specialised: no extra binaries) picked on the host from the
  token count alone: about ``tokens / 128`` when that still leaves ``_MIN_PROGRAMS``
  programs, more chunks (of fewer tokens) for small batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, launch_stride
from jitkern import public_call
from jitkern import cdiv, kernel_launcher, keys
from deepseek_v4._compressor_host import _tiling, check_compress_windows
from deepseek_v4.common import FLOAT_DTYPE, LAYOUTS, dtype_name, index_dtype_names, layout_of, resolve_pdl, use_gdc

# Ratio 128: the tokens a program scans (at most SCAN) are the largest power of two that
# still leaves at least this many programs (chunks x column groups); see _chunk.
_MIN_PROGRAMS = 512


@triton.jit
def _window_blocks(table, p, live, COMPRESS_RATIO: tl.constexpr, OVERLAP: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                   MASKED: tl.constexpr):
    # The cache blocks of the rows of the window closed at position p (int64): the current
    # window's R rows, and at ratio 4 the previous window's (0 where below position 0).
    # MASKED: read only if live (a scalar: the fused step loads them before knowing whether
    # a window closes); else live is ignored.
    j = tl.arange(0, COMPRESS_RATIO)
    q_cur = p - COMPRESS_RATIO + 1 + j  # all >= 0 when a window closes: p + 1 >= R
    if MASKED:
        block_cur = tl.load(table + q_cur // BLOCK_SIZE, mask=live & (q_cur >= 0), other=0).to(tl.int64)
    else:
        block_cur = tl.load(table + q_cur // BLOCK_SIZE).to(tl.int64)
    if OVERLAP:
        q_prev = q_cur - COMPRESS_RATIO
        valid_prev = q_prev >= 0
        if MASKED:
            valid_prev = valid_prev & live
        block_prev = tl.load(table + q_prev // BLOCK_SIZE, mask=valid_prev, other=0).to(tl.int64)
    else:
        block_prev = block_cur  # unused
    return block_cur, block_prev


@triton.jit
def _window_columns(
    State_ptr,
    state_block_stride,
    state_row_stride,
    block_cur,
    block_prev,
    out_row,
    p,
    col0,
    own_row,
    own_kv,
    own_score,
    own_ape,
    HEAD_DIM: tl.constexpr,
    STATE_WIDTH: tl.constexpr,
    COMPRESS_RATIO: tl.constexpr,
    OVERLAP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PROGRAM_D: tl.constexpr,
    OWN: tl.constexpr,
):
    # The entry of the window closed at position p (int64, p + 1 >= R), columns
    # col0 .. col0 + PROGRAM_D of it, BLOCK_D at a time, from the blocks _window_blocks read.
    # OWN (the fused decode step): a window row whose cache offset is own_row (the row this
    # launch stores for the closing token; -1: none) takes its values from the token's
    # inputs instead, kv from own_kv and score + ape from own_score and own_ape (row
    # pointers), as the store computes them: the same bits, without waiting for the store.
    # Every tile is loaded, masked and reduced exactly as without OWN (its read of that row
    # is replaced), so each column's sums run in the same order (the tiles' layouts, and so
    # the reductions, follow from the loads).
    j = tl.arange(0, COMPRESS_RATIO)
    q_cur = p - COMPRESS_RATIO + 1 + j  # all >= 0: p + 1 >= R
    rows_cur = block_cur * state_block_stride + (q_cur % BLOCK_SIZE) * state_row_stride
    if OWN:
        own_cur = rows_cur == own_row
    if OVERLAP:
        q_prev = q_cur - COMPRESS_RATIO
        valid_prev = q_prev >= 0
        rows_prev = block_prev * state_block_stride + (q_prev % BLOCK_SIZE) * state_row_stride
        if OWN:
            own_prev = valid_prev & (rows_prev == own_row)
        CUR_COL: tl.constexpr = HEAD_DIM
    else:
        CUR_COL: tl.constexpr = 0

    for d0 in range(0, PROGRAM_D, BLOCK_D):
        d = col0 + d0 + tl.arange(0, BLOCK_D)
        if OWN:  # issued first, so that they are in flight with the tiles' loads
            kv_own = tl.load(own_kv + CUR_COL + d, mask=d < HEAD_DIM, other=0.0)
            s_own = (tl.load(own_score + CUR_COL + d, mask=d < HEAD_DIM, other=0.0)
                     + tl.load(own_ape + CUR_COL + d, mask=d < HEAD_DIM, other=0.0))
            if OVERLAP:
                kv_own_prev = tl.load(own_kv + d, mask=d < HEAD_DIM, other=0.0)
                s_own_prev = (tl.load(own_score + d, mask=d < HEAD_DIM, other=0.0)
                              + tl.load(own_ape + d, mask=d < HEAD_DIM, other=0.0))
        d_mask = (d < HEAD_DIM)[None, :]
        cur = State_ptr + rows_cur[:, None] + CUR_COL + d[None, :]
        s_cur = tl.load(cur + STATE_WIDTH, mask=d_mask, other=0.0)
        kv_cur = tl.load(cur, mask=d_mask, other=0.0)
        if OWN:
            s_cur = tl.where(own_cur[:, None], s_own[None, :], s_cur)
            kv_cur = tl.where(own_cur[:, None], kv_own[None, :], kv_cur)
        m = tl.max(s_cur, axis=0)
        if OVERLAP:
            prev = State_ptr + rows_prev[:, None] + d[None, :]
            prev_mask = valid_prev[:, None] & d_mask
            s_prev = tl.load(prev + STATE_WIDTH, mask=prev_mask, other=float("-inf"))
            kv_prev = tl.load(prev, mask=prev_mask, other=0.0)
            if OWN:
                s_prev = tl.where(own_prev[:, None], s_own_prev[None, :], s_prev)
                kv_prev = tl.where(own_prev[:, None], kv_own_prev[None, :], kv_prev)
            m = tl.maximum(m, tl.max(s_prev, axis=0))
        e_cur = tl.exp(s_cur - m[None, :])
        num = tl.sum(e_cur * kv_cur, axis=0)
        den = tl.sum(e_cur, axis=0)
        if OVERLAP:
            e_prev = tl.exp(s_prev - m[None, :])  # exp(-inf) = 0: rows before position 0
            num += tl.sum(e_prev * kv_prev, axis=0)
            den += tl.sum(e_prev, axis=0)
        tl.store(out_row + d, num / den, mask=d < HEAD_DIM)


@triton.jit
def _window_entry(
    State_ptr,
    state_block_stride,
    state_row_stride,
    table,
    out_row,
    p,
    col0,
    HEAD_DIM: tl.constexpr,
    STATE_WIDTH: tl.constexpr,
    COMPRESS_RATIO: tl.constexpr,
    OVERLAP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PROGRAM_D: tl.constexpr,
):
    # The entry of the window closed at position p (int64, p + 1 >= R), columns
    # col0 .. col0 + PROGRAM_D of it, BLOCK_D at a time; table: the request's block table row.
    block_cur, block_prev = _window_blocks(table, p, True, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, False)
    _window_columns(State_ptr, state_block_stride, state_row_stride, block_cur, block_prev, out_row, p, col0,
                    -1, out_row, out_row, out_row, HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE,
                    BLOCK_D, PROGRAM_D, False)


@triton.jit(
    do_not_specialize=["n_tokens", "n_chunks"],  # runtime sizes: one binary for all of them
    do_not_specialize_on_alignment=["BlockTable_ptr", "Positions_ptr", "ReqIdx_ptr"],
)
def _compress_windows_kernel(
    State_ptr,
    state_block_stride,
    state_row_stride,
    BlockTable_ptr,
    block_table_row_stride,
    Positions_ptr,
    ReqIdx_ptr,
    Out_ptr,
    out_row_stride,
    n_tokens,
    n_chunks,
    HEAD_DIM: tl.constexpr,
    STATE_WIDTH: tl.constexpr,
    COMPRESS_RATIO: tl.constexpr,
    OVERLAP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PROGRAM_D: tl.constexpr,
    SCAN: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    # Token i at position p, (p + 1) % R == 0, request r; row(q) = state row of slot
    #   block_table[r, q // BLOCK_SIZE] * BLOCK_SIZE + q % BLOCK_SIZE, laid out [kv (W) | s (W)]:
    #   current rows  q = p-R+1 .. p,   columns c = (HEAD_DIM if OVERLAP else 0) + d
    #   previous rows q = p-2R+1 .. p-R (OVERLAP only), columns c = d, weight 0 where q < 0
    #   out[i, d] = sum_q exp(s_q[c] - m[d]) * kv_q[c] / sum_q exp(s_q[c] - m[d]),  m[d] = max_q s_q[c]
    # Program x * GROUPS + y: the tokens x + k * n_chunks, k < SCAN, below n_tokens (token x
    # when SCAN == 1), columns y*PROGRAM_D .. y*PROGRAM_D + PROGRAM_D - 1 of their entries.
    # The column groups of a chunk are neighbours in launch order, so they run together
    # and read each state row whole (and the chunk's positions once from DRAM).
    if USE_GDC:
        # Launched with PDL: the store before us must have finished writing the rows.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    GROUPS: tl.constexpr = (HEAD_DIM + PROGRAM_D - 1) // PROGRAM_D
    if GROUPS == 1:
        program = tl.program_id(0)
        col0 = 0
    else:
        program = tl.program_id(0) // GROUPS
        col0 = (tl.program_id(0) % GROUPS) * PROGRAM_D
    if SCAN == 1:
        token = program.to(tl.int64)
        p = tl.load(Positions_ptr + token).to(tl.int64)
        if (p + 1) % COMPRESS_RATIO != 0:
            return
        table = BlockTable_ptr + tl.load(ReqIdx_ptr + token).to(tl.int64) * block_table_row_stride
        _window_entry(State_ptr, state_block_stride, state_row_stride, table, Out_ptr + token * out_row_stride,
                      p, col0, HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, BLOCK_D, PROGRAM_D)
    else:
        lanes = tl.arange(0, SCAN)
        tokens = program.to(tl.int64) + lanes.to(tl.int64) * n_chunks
        live = tokens < n_tokens  # n_chunks * SCAN >= n_tokens: every token is in a chunk
        # Both loads at once (requests of tokens closing no window are read and ignored).
        positions = tl.load(Positions_ptr + tokens, mask=live, other=0).to(tl.int64)
        requests = tl.load(ReqIdx_ptr + tokens, mask=live, other=0).to(tl.int64)
        closing = live & ((positions + 1) % COMPRESS_RATIO == 0)
        # The closing lanes in increasing order; SCAN when none is left.
        lane = tl.min(tl.where(closing, lanes, SCAN), axis=0)
        while lane < SCAN:
            pick = lanes == lane
            p = tl.sum(tl.where(pick, positions, 0), axis=0)
            r = tl.sum(tl.where(pick, requests, 0), axis=0)
            _window_entry(State_ptr, state_block_stride, state_row_stride, BlockTable_ptr + r * block_table_row_stride,
                          Out_ptr + (program + lane.to(tl.int64) * n_chunks) * out_row_stride, p, col0,
                          HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, BLOCK_D, PROGRAM_D)
            lane = tl.min(tl.where(closing & (lanes > lane), lanes, SCAN), axis=0)




def _chunk(tokens: int, head_dim: int, scan: int, program_d: int, min_programs: int | None = None) -> int:
    """Tokens per program: the largest power of two <= ``scan`` leaving ``min_programs``
    (default ``_MIN_PROGRAMS``) programs, or 1. Host arithmetic on the shape only (no
    sync, graph-capturable)."""
    min_programs = _MIN_PROGRAMS if min_programs is None else min_programs
    chunk = 1
    column_groups = cdiv(head_dim, program_d)
    while chunk < scan and cdiv(tokens, 2 * chunk) * column_groups >= min_programs:
        chunk *= 2
    return chunk


def _n_chunks(tokens: int, chunk: int) -> int:
    """Chunks of at most ``chunk`` tokens: an odd number (see the module docstring), or
    ``tokens`` when ``chunk == 1`` (a program per token)."""
    n_chunks = cdiv(tokens, chunk)
    return n_chunks if chunk == 1 or n_chunks % 2 else n_chunks + 1


def _grid(n_chunks: int, head_dim: int, program_d: int) -> tuple[int]:
    """One axis: (chunk, column group) pairs, the groups of a chunk next to each other."""
    return (n_chunks * cdiv(head_dim, program_d),)


class CompressWindowsKernel(TritonJitKernel["CompressWindowsKernel.CompileKey"]):
    name = "deepseek_v4.compress_windows"
    compile_cost = 0.25  # seconds a key on our CPU machine
    kernel = _compress_windows_kernel

    @dataclass(frozen=True)
    class CompileKey:
        compress_ratio: int
        head_dim: int
        block_size: int
        dtype: str  # state_cache and out (float32; the public function checks)
        block_table_dtype: str  # int32
        positions_dtype: str  # int32 or int64: different binaries
        req_indices_dtype: str
        launch_pdl: bool
        # the tiling (_tiling): constexprs and launch option of the binary
        scan: int
        block_d: int
        program_d: int
        num_warps: int

    def dispatch(
        self,
        *,
        compress_ratio: int,
        head_dim: int,
        block_size: int,
        dtype: torch.dtype,
        block_table_dtype: torch.dtype,
        positions_dtype: torch.dtype,
        req_indices_dtype: torch.dtype,
        launch_pdl: bool = False,
    ) -> CompileKey:
        tiling = _tiling(compress_ratio, head_dim)
        return self.CompileKey(
            compress_ratio=compress_ratio,
            head_dim=head_dim,
            block_size=block_size,
            dtype=dtype_name(dtype),
            block_table_dtype=dtype_name(block_table_dtype),
            positions_dtype=dtype_name(positions_dtype),
            req_indices_dtype=dtype_name(req_indices_dtype),
            launch_pdl=launch_pdl,
            scan=tiling.scan,
            block_d=tiling.block_d,
            program_d=tiling.program_d,
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
        """The keys of a deployment's layout (spec table), for each index dtype pair."""
        layout = LAYOUTS.get(compress_ratio)
        if head_dim <= 0 or layout is None:
            return []
        dtypes = index_dtype_names(index_dtypes)
        rows = keys.product(positions_dtype=dtypes, req_indices_dtype=dtypes)
        return keys.unique_keys(
            lambda **row: self.dispatch(
                compress_ratio=compress_ratio,
                head_dim=head_dim,
                block_size=layout.block_size,
                dtype=FLOAT_DTYPE,
                block_table_dtype=torch.int32,
                launch_pdl=launch_pdl,
                **row,
            ),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        """A dense cache ``[blocks, block_size, 2W]``, ``out`` ``[tokens, head_dim]`` as allocated
        (16-byte aligned: Triton specialises on where a tensor starts, not on where its rows
        do), and a block table whose rows hold ``max_blocks`` entries, which varies with the
        deployment's context length."""
        dtype = getattr(torch, key.dtype)
        width = layout_of(key.compress_ratio).state_width(key.head_dim)
        return dict(
            state_cache=TritonWarmupTensor(dtype, shape=(1, key.block_size, 2 * width)),
            block_table=TritonWarmupTensor(getattr(torch, key.block_table_dtype), shape=(1, 16), varying=(0, 1)),
            positions=TritonWarmupTensor(getattr(torch, key.positions_dtype)),
            req_indices=TritonWarmupTensor(getattr(torch, key.req_indices_dtype)),
            out=TritonWarmupTensor(dtype, shape=(1, key.head_dim)),
            compress_ratio=key.compress_ratio,
            head_dim=key.head_dim,
            block_size=key.block_size,
            launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        layout = layout_of(key.compress_ratio)
        return dict(
            HEAD_DIM=key.head_dim,
            STATE_WIDTH=layout.state_width(key.head_dim),
            COMPRESS_RATIO=key.compress_ratio,
            OVERLAP=layout.overlap,
            BLOCK_SIZE=key.block_size,
            BLOCK_D=key.block_d,
            PROGRAM_D=key.program_d,
            SCAN=key.scan,
            USE_GDC=use_gdc(key.launch_pdl),
            num_warps=key.num_warps,
            launch_pdl=key.launch_pdl,
        )

    @kernel_launcher
    def __call__(
        self,
        state_cache: torch.Tensor,
        block_table: torch.Tensor,
        positions: torch.Tensor,
        req_indices: torch.Tensor,
        out: torch.Tensor,
        compress_ratio: int,
        head_dim: int,
        block_size: int,
        launch_pdl: bool = False,
    ) -> LaunchSpec:
        """Programs over (token chunks, column groups); at ratio 4 one per token and the
        whole head. No checks here: it also runs on warmup stand-ins."""
        key = self.dispatch(
            compress_ratio=compress_ratio,
            head_dim=head_dim,
            block_size=block_size,
            dtype=state_cache.dtype,
            block_table_dtype=block_table.dtype,
            positions_dtype=positions.dtype,
            req_indices_dtype=req_indices.dtype,
            launch_pdl=launch_pdl,
        )
        tokens = positions.shape[0]
        n_chunks = _n_chunks(tokens, 1 if key.scan == 1 else _chunk(tokens, head_dim, key.scan, key.program_d))
        return LaunchSpec(
            grid=_grid(n_chunks, head_dim, key.program_d),
            kwargs=dict(
                State_ptr=state_cache,
                state_block_stride=launch_stride(state_cache, 0),  # a cache of one block: any stride
                state_row_stride=launch_stride(state_cache, 1),
                BlockTable_ptr=block_table,
                block_table_row_stride=launch_stride(block_table, 0),
                Positions_ptr=positions,
                ReqIdx_ptr=req_indices,
                Out_ptr=out,
                out_row_stride=launch_stride(out, 0),  # one token: any stride
                n_tokens=tokens,
                n_chunks=n_chunks,
            ),
            key=key,
            result=out,
        )


@public_call
def compress_windows(
    state_cache: torch.Tensor,
    block_table: torch.Tensor,
    positions: torch.Tensor,
    req_indices: torch.Tensor,
    out: torch.Tensor,
    compress_ratio: int,
    head_dim: int,
    block_size: int,
    pdl_kwargs: dict | None = None,
    max_position: int | None = None,
) -> torch.Tensor:
    """Write the compressed entry of every window closed by a token into ``out[token]``.

    ``state_cache``: float32 ``[blocks, block_size, >= 2W]`` as ``save_partial_states``
    wrote it (``W = 2 * head_dim`` at ratio 4, ``head_dim`` at ratio 128);
    ``block_table``: int32 ``[requests, max_blocks]``; ``positions``, ``req_indices``:
    int32 or int64 ``[tokens]``; ``out``: float32 ``[tokens, >= head_dim]``, its rows apart
    in memory. Every stride is below 2**31: the binaries keep them i32. Rows of tokens
    that close no window are left untouched. Runs after this step's store.

    A block table too short for a position needs the positions' values. On the CPU they
    are checked; on a GPU reading them would synchronise, so instead pass
    ``max_position`` (an upper bound the engine knows, e.g. ``max_model_len - 1``) and
    it is checked against ``block_table``'s width without touching the device.
    """
    device = check_compress_windows(state_cache, block_table, positions, req_indices, out, compress_ratio, head_dim,
                                    block_size, max_position)
    launch_pdl = resolve_pdl(pdl_kwargs, device)
    tokens = positions.shape[0]
    if tokens:
        CompressWindowsKernel()(
            state_cache,
            block_table,
            positions,
            req_indices,
            out,
            compress_ratio,
            head_dim,
            block_size,
            launch_pdl=launch_pdl,
        )
    return out

