"""The Triton kernel of Step5 verify (``step5.ops.verify`` declares and launches it)."""

import triton
import triton.language as tl

from step5.ops.kernels.summary_math import (loads_issued, region_row, ring_row, row_pointers, store_summary,
                                             summarize_region)


@triton.jit(
    do_not_specialize=["n_tokens"],
    do_not_specialize_on_alignment=["Slots", "QueryStartLoc", "SeqLens", "RingBase"],
)
def update_verify_kernel(
    Key, Z, Slots, QueryStartLoc, SeqLens, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, n_tokens, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, Q: tl.constexpr, NVIDIA: tl.constexpr,
    HW_FP8: tl.constexpr,
):
    # token j of request r: index qsl[r] + j, position p = seq_lens[r] - Q + j.
    # First the tokens that close a region (p % 8 == 7: j0, j0 + 8, ... below Q): summary of
    #   rows p-7 .. p (those before seq_lens[r] - Q from the ring, the rest from this step)
    #   -> mean[slot]. Then every other token: ring[base + p % capacity] = row. So every
    #   ring read of the request precedes its ring writes, which may reuse the rows read.
    # One closing block per 8 tokens, not one per token, keeps the kernel small: Triton's
    # Coalesce pass takes time growing faster than the kernel's loads and stores (on our CPU
    # machine, MLIR_ENABLE_TIMING=1: 1.4 s for the 76 of a closing path per token, 0.3 s
    # for these 33).
    request = tl.program_id(0)
    first = tl.load(QueryStartLoc + request).to(tl.int64)
    first_position = tl.load(SeqLens + request).to(tl.int64) - Q
    base = tl.load(RingBase + first, mask=first < n_tokens, other=-1).to(tl.int64)
    dim = tl.arange(0, 256)
    strides = (key_stride0, key_stride2, z_stride0, z_stride2)
    first_closing = ((7 - first_position) % 8 + 8) % 8  # the j with position % 8 == 7
    for block in tl.static_range((Q + 7) // 8):
        j = first_closing + 8 * block
        token = first + j
        position = first_position + j
        closes = (j < Q) & (token < n_tokens)
        slot = tl.load(Slots + token, mask=closes, other=-1).to(tl.int64)
        if closes & (slot >= 0) & (base >= 0) & (position >= 0):
            ring_first = (position - 7) % RING_CAPACITY  # position >= 7 here
            rows = ()  # (key, z) of positions p-7 .. p; those before this step (7 - j) from the ring
            for i in tl.static_range(7):
                rows += region_row(Key, Z, Ring, token, base, ring_first, i, 7 - j, dim, *strides,
                                   RING_CAPACITY, NVIDIA)
            key_ptr, z_ptr = row_pointers(Key, Z, token, dim, *strides)
            rows += (tl.load(key_ptr), tl.load(z_ptr))
            loads_issued(slot.to(tl.int32), NVIDIA)  # all 16 row loads in flight at once
            num, den = summarize_region(*rows, NVIDIA=NVIDIA)
            store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
    for j in tl.static_range(Q):
        token = first + j
        position = first_position + j
        slot = tl.load(Slots + token, mask=token < n_tokens, other=-1).to(tl.int64)
        if (slot >= 0) & (base >= 0) & (position >= 0) & (position % 8 != 7):
            key_ptr, z_ptr = row_pointers(Key, Z, token, dim, *strides)
            row = ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, tl.load(key_ptr))
            tl.store(row + 256 + dim, tl.load(z_ptr))
