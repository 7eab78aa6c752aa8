"""The Triton kernels of Step5 prefill in three launches (``step5.ops.prefill`` declares and
launches them): the step's closing tokens listed, one program per closed region, the rows of
regions still open stored."""

import triton
import triton.language as tl

from step5.ops.kernels.summary_math import loads_issued, region_row, row_pointers, store_summary, summarize_region


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "n_requests", "positions_stride", "fill_rows"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def build_prefill_groups_kernel(
    Slots, Positions, Owners, QueryStartLoc, Groups, n_tokens, n_groups, n_requests, positions_stride, fill_rows,
    BLOCK: tl.constexpr, FILL_ROWS: tl.constexpr,
):
    # Token i of request r = owners[i] closes a region when positions[i] % 8 == 7. Its group is
    #   g = i // 8 + r   (distinct: a request has one closing token in 8 consecutive tokens, and
    #                     the requests' tokens come in request order; g < tokens // 8 + requests)
    # and holds [i, slots[i], max(0, 7 - (i - qsl[r]))]: the last field counts the rows read
    # from the ring. Row n_groups + r, written by request r's first token, is
    #   [max(qsl[r], qsl[r+1] - 7), qsl[r+1], 0]: the only tokens of r whose row the ring may
    # have to store (an open region has at most 7 rows), for the ring write.
    # Two levels of loads: slots, positions, owners -> qsl[r], qsl[r+1]. Every other row is
    # -1: launched as one program (fill_rows > 0), the kernel writes -1 to its first
    # fill_rows rows itself, before a barrier, so that the entries land last; else torch did.
    if fill_rows > 0:  # fill_rows <= FILL_ROWS
        rows = tl.arange(0, FILL_ROWS)
        row, none = Groups + rows * 3, tl.full((FILL_ROWS,), -1, tl.int32)
        tl.store(row, none, mask=rows < fill_rows)
        tl.store(row + 1, none, mask=rows < fill_rows)
        tl.store(row + 2, none, mask=rows < fill_rows)
        tl.debug_barrier()
    tokens = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = tokens < n_tokens
    slots = tl.load(Slots + tokens, mask=valid, other=-1)
    positions = tl.load(Positions + tokens.to(tl.int64) * positions_stride, mask=valid, other=0)
    owners = tl.load(Owners + tokens, mask=valid, other=-1).to(tl.int64)
    known = valid & (owners >= 0) & (owners < n_requests)  # padding tokens may carry any owner
    start = tl.load(QueryStartLoc + owners, mask=known, other=0).to(tl.int64)
    end = tl.load(QueryStartLoc + owners + 1, mask=known, other=0).to(tl.int64)
    group = tokens // 8 + owners
    closing = known & (slots >= 0) & (positions >= 0) & (positions % 8 == 7) & (group < n_groups)
    ring_rows = tl.maximum(7 - (tokens - start), 0)
    row = Groups + group * 3
    tl.store(row, tokens.to(tl.int32), mask=closing)
    tl.store(row + 1, slots.to(tl.int32), mask=closing)
    tl.store(row + 2, ring_rows.to(tl.int32), mask=closing)
    first = known & (tokens == start)
    row = Groups + (n_groups + owners) * 3
    tl.store(row, tl.maximum(start, end - 7).to(tl.int32), mask=first)
    tl.store(row + 1, end.to(tl.int32), mask=first)
    tl.store(row + 2, tl.zeros_like(end).to(tl.int32), mask=first)


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Groups", "Positions", "RingBase"],
)
def prefill_summary_kernel(
    Key, Z, Groups, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr, HW_FP8: tl.constexpr,
):
    # group [t, slot, n]: the region closed by token t at position p has rows p-7 .. p;
    # row i comes from ring[base + (p-7+i) % capacity] when i < n, else from token t-7+i.
    # mean[slot] = fp8(bf16(online softmax of the 8 rows, in position order)), when base >= 0.
    # One level of index loads (the group row) before the 16 row loads, which are all
    # issued before any math. n == 0 (every region of a long chunk but its first) takes
    # the 8 rows straight from key/z, with base read alongside them; n > 0 also needs
    # base and p to address the ring, and picks each row's pointer (not its data).
    # (The first branch tests token and n together: ptxas moves a load used only past a
    # branch below that branch, which would make the group row two dependent loads.)
    group = Groups + tl.program_id(0).to(tl.int64) * 3
    token = tl.load(group).to(tl.int64)
    slot = tl.load(group + 1).to(tl.int64)
    ring_rows = tl.load(group + 2)
    dim = tl.arange(0, 256)
    strides = (key_stride0, key_stride2, z_stride0, z_stride2)
    if (token >= 0) & (ring_rows == 0):
        base = tl.load(RingBase + token)
        key_ptr, z_ptr = row_pointers(Key, Z, token - 7, dim, *strides)
        rows = ()  # (key, z) of tokens t-7 .. t
        for i in tl.static_range(8):
            rows += (tl.load(key_ptr + i * key_stride0), tl.load(z_ptr + i * z_stride0))
        loads_issued(ring_rows, NVIDIA)
        num, den = summarize_region(*rows, NVIDIA=NVIDIA)
        if base >= 0:
            store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
    elif token >= 0:
        base = tl.load(RingBase + token).to(tl.int64)
        position = tl.load(Positions + token * positions_stride).to(tl.int64)
        if base >= 0:
            first = (position - 7) % RING_CAPACITY  # p % 8 == 7, so p >= 7
            rows = ()  # (key, z) of positions p-7 .. p
            for i in tl.static_range(8):
                rows += region_row(Key, Z, Ring, token, base, first, i, ring_rows, dim, *strides, RING_CAPACITY,
                                   NVIDIA)
            loads_issued(ring_rows, NVIDIA)
            num, den = summarize_region(*rows, NVIDIA=NVIDIA)
            store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)


@triton.jit(do_not_specialize=["n_groups"], do_not_specialize_on_alignment=["Metadata", "RingSlots"])
def write_ring_kernel(
    Key, Z, Metadata, RingSlots, Ring, key_stride0, key_stride2, z_stride0, z_stride2, n_groups,
):
    # One program per request r: metadata row n_groups + r = [lo, hi, 0] (-1: no tokens) names
    # the at most 7 tokens that may have a row to store; ring[ring_slots[i]] = [key[i] | z[i]]
    # for those with ring_slots[i] >= 0. The step's other tokens all have ring_slots == -1
    # (spec: only rows of regions still open at the end of the step are stored).
    row = Metadata + (n_groups + tl.program_id(0).to(tl.int64)) * 3
    lo = tl.load(row)
    hi = tl.load(row + 1)
    if (lo >= 0) & (hi > lo):
        tokens = lo.to(tl.int64) + tl.arange(0, 8)
        present = tokens < hi
        rows = tl.load(RingSlots + tokens, mask=present, other=-1).to(tl.int64)
        keep = (rows >= 0)[:, None]
        dim = tl.arange(0, 256)[None, :]
        key_ptr, z_ptr = row_pointers(Key, Z, tokens[:, None], dim, key_stride0, key_stride2, z_stride0, z_stride2)
        key = tl.load(key_ptr, mask=present[:, None])  # alongside ring_slots, not after
        z = tl.load(z_ptr, mask=present[:, None])
        target = Ring + rows[:, None] * 512
        tl.store(target + dim, key, mask=keep)
        tl.store(target + 256 + dim, z, mask=keep)
