"""The Triton kernel of Step5 decode (``step5.ops.decode`` declares and launches it)."""

import triton
import triton.language as tl

from step5.ops.kernels.summary_math import (loads_issued, ring_row, ring_row_after, row_pointers, store_summary,
                                             summarize_region)


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "RingBase"],
)
def update_decode_kernel(
    Key, Z, Slots, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr, HW_FP8: tl.constexpr,
):
    # position p % 8 == 7: summary of ring rows p-7 .. p-1 then this row -> mean[slot]
    # otherwise:           ring[base + p % capacity] = [key | z]
    # The chain of dependent loads is two deep: slot / position / base (and this token's
    # row, alongside) -> the 7 ring rows, all issued before any math; then the region's
    # math with its eight row maxima in parallel (``summarize_region``).
    token = tl.program_id(0).to(tl.int64)
    dim = tl.arange(0, 256)
    slot = tl.load(Slots + token).to(tl.int64)
    position = tl.load(Positions + token * positions_stride).to(tl.int64)
    base = tl.load(RingBase + token).to(tl.int64)
    key_ptr, z_ptr = row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2)
    key = tl.load(key_ptr)
    z = tl.load(z_ptr)
    if (slot >= 0) & (base >= 0) & (position >= 0):
        if position % 8 == 7:
            first = (position - 7) % RING_CAPACITY  # position >= 7 here
            rows = ()  # (key, z) of positions p-7 .. p
            for i in tl.static_range(7):
                row = ring_row_after(Ring, base, first, i, RING_CAPACITY)
                rows += (tl.load(row + dim), tl.load(row + 256 + dim))
            loads_issued(slot.to(tl.int32), NVIDIA)  # all 14 ring loads in flight at once
            num, den = summarize_region(*rows, key, z, NVIDIA=NVIDIA)
            store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
        else:
            row = ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, key)
            tl.store(row + 256 + dim, z)
