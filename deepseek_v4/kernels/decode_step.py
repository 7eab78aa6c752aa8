"""The Triton kernel of the fused decode step (``deepseek_v4.decode_step`` declares and launches
it): the store's writes, then each closing window's entry with the compressor's own code."""

import triton
import triton.language as tl

from deepseek_v4.kernels.compressor import window_blocks, window_columns


@triton.jit(
    # Only the store's reads and writes gain from specialising (vector loads of kv and score);
    # the table's stride, the entry's row (written by one token in R) and the sizes get no
    # binaries of their own.
    do_not_specialize=["block_table_row_stride", "out_row_stride", "n_tokens", "n_chunks"],
    do_not_specialize_on_alignment=["Positions_ptr", "Slot_ptr", "BlockTable_ptr", "ReqIdx_ptr", "Out_ptr"],
)
def decode_step_kernel(
    KV_ptr,
    kv_row_stride,
    Score_ptr,
    score_row_stride,
    Ape_ptr,
    ape_row_stride,
    Positions_ptr,
    Slot_ptr,
    State_ptr,
    state_block_stride,
    state_row_stride,
    BlockTable_ptr,
    block_table_row_stride,
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
    # Program x * GROUPS + g: entry columns d in [g*PROGRAM_D, (g+1)*PROGRAM_D) of the tokens
    # x + k * n_chunks, k < SCAN, below n_tokens (token x when SCAN == 1). For each token t:
    # 1. slot[t] >= 0: row = state row of the slot; for each half h (2 at ratio 4, else 1),
    #    c = h*HEAD_DIM + d: row[c] = kv[t, c], row[STATE_WIDTH + c] = score[t, c] + ape[p % R, c].
    # 2. (p + 1) % R == 0: out[t, d] = the window entry, exactly as compress_windows_kernel
    #    (the same tiles, loads and reductions), except that the window row the store
    #    writes in this launch (the token's own) comes from the token's inputs, not the cache.
    # The loads that need nothing come first (positions, slots, requests, kv, score),
    # then those that need them (ape; the closing token's block table entries), then the
    # stores, then the window's rows: three dependent rounds to memory for a closing token,
    # two for the others, and no barrier.
    if USE_GDC:
        # Launched with PDL: wait for the kernel before us; let the next one start its prologue.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    GROUPS: tl.constexpr = (HEAD_DIM + PROGRAM_D - 1) // PROGRAM_D
    HALVES: tl.constexpr = STATE_WIDTH // HEAD_DIM
    if GROUPS == 1:
        program = tl.program_id(0)
        col0 = 0
    else:
        program = tl.program_id(0) // GROUPS
        col0 = (tl.program_id(0) % GROUPS) * PROGRAM_D
    d = col0 + tl.arange(0, PROGRAM_D)
    if SCAN == 1:
        token = program.to(tl.int64)  # 64-bit offsets: caches exceed 2**31 elements
        p = tl.load(Positions_ptr + token).to(tl.int64)
        slot = tl.load(Slot_ptr + token).to(tl.int64)
        request = tl.load(ReqIdx_ptr + token).to(tl.int64)
        col_ok = d < HEAD_DIM
        # kv and score of padding tokens are read too (their rows exist), as the store does.
        kv0 = tl.load(KV_ptr + token * kv_row_stride + d, mask=col_ok)
        score0 = tl.load(Score_ptr + token * score_row_stride + d, mask=col_ok)
        if HALVES == 2:
            kv1 = tl.load(KV_ptr + token * kv_row_stride + HEAD_DIM + d, mask=col_ok)
            score1 = tl.load(Score_ptr + token * score_row_stride + HEAD_DIM + d, mask=col_ok)
        closing = (p + 1) % COMPRESS_RATIO == 0  # like compress_windows, whatever the slot
        table = BlockTable_ptr + request * block_table_row_stride
        block_cur, block_prev = window_blocks(table, p, closing, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, True)
        write = col_ok & (slot >= 0)  # padding tokens (slot -1) store nothing, read no ape
        ape = Ape_ptr + (p % COMPRESS_RATIO) * ape_row_stride
        ape0 = tl.load(ape + d, mask=write)
        if HALVES == 2:
            ape1 = tl.load(ape + HEAD_DIM + d, mask=write)
        own_row = (slot // BLOCK_SIZE) * state_block_stride + (slot % BLOCK_SIZE) * state_row_stride
        row = State_ptr + own_row
        tl.store(row + d, kv0, mask=write)
        tl.store(row + STATE_WIDTH + d, score0 + ape0, mask=write)
        if HALVES == 2:
            tl.store(row + HEAD_DIM + d, kv1, mask=write)
            tl.store(row + STATE_WIDTH + HEAD_DIM + d, score1 + ape1, mask=write)
        if closing:
            window_columns(State_ptr, state_block_stride, state_row_stride, block_cur, block_prev,
                           Out_ptr + token * out_row_stride, p, col0, tl.where(slot >= 0, own_row, -1),
                           KV_ptr + token * kv_row_stride, Score_ptr + token * score_row_stride, ape,
                           HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, BLOCK_D, PROGRAM_D, True)
    else:
        lanes = tl.arange(0, SCAN)
        tokens = program.to(tl.int64) + lanes.to(tl.int64) * n_chunks
        live = tokens < n_tokens  # n_chunks * SCAN >= n_tokens: every token is in a chunk
        positions = tl.load(Positions_ptr + tokens, mask=live, other=0).to(tl.int64)
        slots = tl.load(Slot_ptr + tokens, mask=live, other=-1).to(tl.int64)
        requests = tl.load(ReqIdx_ptr + tokens, mask=live, other=0).to(tl.int64)
        col_ok = (d < HEAD_DIM)[None, :]
        read = live[:, None] & col_ok
        kv_at = KV_ptr + tokens[:, None] * kv_row_stride + d[None, :]
        score_at = Score_ptr + tokens[:, None] * score_row_stride + d[None, :]
        kv0 = tl.load(kv_at, mask=read)
        score0 = tl.load(score_at, mask=read)
        if HALVES == 2:
            kv1 = tl.load(kv_at + HEAD_DIM, mask=read)
            score1 = tl.load(score_at + HEAD_DIM, mask=read)
        closing = live & ((positions + 1) % COMPRESS_RATIO == 0)
        # The closing lanes in increasing order (SCAN when none is left); the first one's
        # block table entries are read with ape, before the stores.
        lane = tl.min(tl.where(closing, lanes, SCAN), axis=0)
        pick = lanes == lane
        p = tl.sum(tl.where(pick, positions, 0), axis=0)
        request = tl.sum(tl.where(pick, requests, 0), axis=0)
        block_cur, block_prev = window_blocks(BlockTable_ptr + request * block_table_row_stride, p, lane < SCAN,
                                              COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, True)
        write = (slots >= 0)[:, None] & col_ok
        ape_at = Ape_ptr + ((positions % COMPRESS_RATIO) * ape_row_stride)[:, None] + d[None, :]
        ape0 = tl.load(ape_at, mask=write)
        if HALVES == 2:
            ape1 = tl.load(ape_at + HEAD_DIM, mask=write)
        own_rows = (slots // BLOCK_SIZE) * state_block_stride + (slots % BLOCK_SIZE) * state_row_stride
        rows = State_ptr + own_rows[:, None] + d[None, :]
        tl.store(rows, kv0, mask=write)
        tl.store(rows + STATE_WIDTH, score0 + ape0, mask=write)
        if HALVES == 2:
            tl.store(rows + HEAD_DIM, kv1, mask=write)
            tl.store(rows + STATE_WIDTH + HEAD_DIM, score1 + ape1, mask=write)
        while lane < SCAN:
            token = program.to(tl.int64) + lane.to(tl.int64) * n_chunks
            own_slot = tl.sum(tl.where(pick, slots, 0), axis=0)
            own_row = tl.where(own_slot >= 0, tl.sum(tl.where(pick, own_rows, 0), axis=0), -1)  # -1: padding
            # The next closing lane's table entries are read while this window's rows are.
            lane_next = tl.min(tl.where(closing & (lanes > lane), lanes, SCAN), axis=0)
            pick = lanes == lane_next
            p_next = tl.sum(tl.where(pick, positions, 0), axis=0)
            request = tl.sum(tl.where(pick, requests, 0), axis=0)
            next_cur, next_prev = window_blocks(BlockTable_ptr + request * block_table_row_stride, p_next,
                                                lane_next < SCAN, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, True)
            window_columns(State_ptr, state_block_stride, state_row_stride, block_cur, block_prev,
                           Out_ptr + token * out_row_stride, p, col0, own_row,
                           KV_ptr + token * kv_row_stride, Score_ptr + token * score_row_stride,
                           Ape_ptr + (p % COMPRESS_RATIO) * ape_row_stride,
                           HEAD_DIM, STATE_WIDTH, COMPRESS_RATIO, OVERLAP, BLOCK_SIZE, BLOCK_D, PROGRAM_D, True)
            lane = lane_next
            p = p_next
            block_cur = next_cur
            block_prev = next_prev
