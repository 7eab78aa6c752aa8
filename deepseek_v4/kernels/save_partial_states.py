"""The Triton kernel of the partial-state store (``deepseek_v4.save_partial_states`` declares and
launches it)."""

import triton
import triton.language as tl


@triton.jit(
    do_not_specialize=["n_tokens"],  # a runtime size: one binary for all of them
    do_not_specialize_on_alignment=["Positions_ptr", "Slot_ptr"],
)
def save_partial_states_kernel(
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
