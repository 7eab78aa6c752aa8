"""The Triton kernel of the window compressor and the window helpers the fused decode step
shares (``deepseek_v4.compressor`` declares and launches it)."""

import triton
import triton.language as tl


@triton.jit
def window_blocks(table, p, live, COMPRESS_RATIO: tl.constexpr, OVERLAP: tl.constexpr, BLOCK_SIZE: tl.constexpr,
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
def window_columns(
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
    # col0 .. col0 + PROGRAM_D of it, BLOCK_D at a time, from the blocks window_blocks read.
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
    block_cur, block_prev = window_blocks(table, p, True, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, False)
    window_columns(State_ptr, state_block_stride, state_row_stride, block_cur, block_prev, out_row, p, col0,
                   -1, out_row, out_row, out_row, HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE,
                   BLOCK_D, PROGRAM_D, False)


@triton.jit(
    do_not_specialize=["n_tokens", "n_chunks"],  # runtime sizes: one binary for all of them
    do_not_specialize_on_alignment=["BlockTable_ptr", "Positions_ptr", "ReqIdx_ptr"],
)
def compress_windows_kernel(
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
