"""The Triton kernels of Step5 prefill in two launches (``step5.ops.prefill_fused`` declares
and launches them): the filled build, then the summaries and ring writes in one launch."""

import triton
import triton.language as tl

from step5.ops.kernels.summary_math import (loads_issued, max_combine, region_row, row_pointers, store_summary,
                                             summarize_region)


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "n_requests", "positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def build_prefill_groups_filled_kernel(
    Slots, Positions, Owners, QueryStartLoc, Groups, n_tokens, n_groups, n_requests, positions_stride,
    ROWS: tl.constexpr, HALO: tl.constexpr, USE_GDC: tl.constexpr,
):
    # The rows of build_prefill_groups_kernel (kernels.prefill): token i of request
    # r = owners[i] that closes a region writes group row g = i // 8 + r = [i, slots[i],
    # max(0, 7 - (i - qsl[r]))]; request row r is [max(s, e - 7), e, s] (s = qsl[r],
    # e = qsl[r + 1]) when token s is of request r; every other row is -1. Program j owns
    # group rows and request rows ROWS*j .. ROWS*j + ROWS - 1: it writes -1 to all of them,
    # then (after a barrier, so the entries land last) the entries of the closing tokens
    # whose row is one of them. Those are among its own 8*ROWS tokens and the
    # 8 * (requests - 1) <= HALO before them, since g - i // 8 = r <= requests - 1.
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    first_row = tl.program_id(0).to(tl.int64) * ROWS
    rows = first_row + tl.arange(0, ROWS)
    none = tl.full((ROWS,), -1, tl.int32)
    tl.store(Groups + rows * 3, none, mask=rows < n_groups)
    tl.store(Groups + rows * 3 + 1, none, mask=rows < n_groups)
    tl.store(Groups + rows * 3 + 2, none, mask=rows < n_groups)
    asked = rows < n_requests  # request rows: from query_start_loc alone
    s = tl.load(QueryStartLoc + rows, mask=asked, other=-1).to(tl.int64)
    e = tl.load(QueryStartLoc + rows + 1, mask=asked, other=-1).to(tl.int64)
    inside = asked & (s >= 0) & (s < n_tokens)
    listed = inside & (tl.load(Owners + s, mask=inside, other=-1).to(tl.int64) == rows)
    request_row = Groups + (n_groups + rows) * 3
    tl.store(request_row, tl.where(listed, tl.maximum(s, e - 7), -1).to(tl.int32), mask=asked)
    tl.store(request_row + 1, tl.where(listed, e, -1).to(tl.int32), mask=asked)
    tl.store(request_row + 2, tl.where(listed, s, -1).to(tl.int32), mask=asked)
    tokens = first_row * 8 - HALO + tl.arange(0, HALO + 8 * ROWS)
    valid = (tokens >= 0) & (tokens < n_tokens) & (tokens >= (first_row - n_requests + 1) * 8)
    slots = tl.load(Slots + tokens, mask=valid, other=-1)
    positions = tl.load(Positions + tokens * positions_stride, mask=valid, other=0)
    owners = tl.load(Owners + tokens, mask=valid, other=-1).to(tl.int64)
    known = valid & (owners >= 0) & (owners < n_requests)  # padding tokens may carry any owner
    start = tl.load(QueryStartLoc + owners, mask=known, other=0).to(tl.int64)
    group = tokens // 8 + owners
    closing = known & (slots >= 0) & (positions >= 0) & (positions % 8 == 7) & (group < n_groups)
    mine = closing & (group >= first_row) & (group < first_row + ROWS)
    tl.debug_barrier()  # every -1 above is stored before any entry below
    row = Groups + group * 3
    tl.store(row, tokens.to(tl.int32), mask=mine)
    tl.store(row + 1, slots.to(tl.int32), mask=mine)
    tl.store(row + 2, tl.maximum(7 - (tokens - start), 0).to(tl.int32), mask=mine)


@triton.jit
def _open_rows(Key, Z, RingSlots, lo, hi, active, key_stride0, key_stride2, z_stride0, z_stride2):
    """The rows the ring stores for a request row ``[lo, hi, _]``: ``ring_slots`` of tokens
    ``lo .. hi - 1`` (at most 8; -1 where none, or not ``active``) and their key and z, as
    ``write_ring_kernel`` loads them."""
    tokens = lo.to(tl.int64) + tl.arange(0, 8)
    present = active & (tokens < hi)
    destinations = tl.load(RingSlots + tokens, mask=present, other=-1).to(tl.int64)
    dim = tl.arange(0, 256)[None, :]
    key_ptr, z_ptr = row_pointers(Key, Z, tokens[:, None], dim, key_stride0, key_stride2, z_stride0, z_stride2)
    return destinations, tl.load(key_ptr, mask=present[:, None]), tl.load(z_ptr, mask=present[:, None])


@triton.jit
def _store_open_rows(Ring, destinations, key, z):
    """ring[destinations[i]] = [key[i] | z[i]] where destinations[i] >= 0."""
    keep = (destinations >= 0)[:, None]
    dim = tl.arange(0, 256)[None, :]
    row = Ring + destinations[:, None] * 512
    tl.store(row + dim, key, mask=keep)
    tl.store(row + 256 + dim, z, mask=keep)


@triton.jit
def _reads_the_ring(group, token, ring_rows, request, start, n_groups):
    """Whether metadata row ``group`` (``[token, _, ring_rows]``) is the summary that reads the
    ring rows of ``request`` (first token ``start``): it reads some (ring_rows > 0), it is of
    that request (group - token // 8 == request, as the build numbers rows) and its token
    is in the first two 8-token blocks from ``start`` (the region of the first token closes
    at most 6 tokens after it). Both its program and the request's own program ask this."""
    block = token // 8 - start // 8
    return ((token >= 0) & (ring_rows > 0) & (start >= 0) & (group - token // 8 == request) & (block >= 0)
            & (block <= 1) & (group < n_groups))


@triton.jit(
    do_not_specialize=["positions_stride", "n_groups", "n_requests"],
    do_not_specialize_on_alignment=["Groups", "Positions", "RingBase", "RingSlots"],
)
def prefill_update_kernel(
    Key, Z, Groups, Positions, RingBase, RingSlots, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0, n_groups, n_requests,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr, HW_FP8: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    # Programs 0 .. R-1: request r stores its open rows (metadata row n_groups + r = [lo, hi,
    # first token]), unless a summary program reads its ring rows; that one stores them.
    # Programs R + g: the summary of group row g, as prefill_summary_kernel computes it.
    # The only ring rows a step reads are those before a request's first token, read by the
    # summary of the region that token is in (ring_rows > 0; one per request). That
    # program stores the request's rows after a barrier, so after all its reads: the step's
    # bytes are the three-launch path's, whatever the capacity and chunk lengths.
    if USE_GDC:
        tl.extra.cuda.gdc_wait()  # launched with PDL: the build before us has finished
        tl.extra.cuda.gdc_launch_dependents()
    program = tl.program_id(0).to(tl.int64)
    dim = tl.arange(0, 256)
    strides = (key_stride0, key_stride2, z_stride0, z_stride2)
    if program < n_requests:
        request_row = Groups + (n_groups + program) * 3
        lo = tl.load(request_row)
        hi = tl.load(request_row + 1)
        start = tl.load(request_row + 2).to(tl.int64)
        has_rows = (lo >= 0) & (hi > lo)
        readers = tl.maximum(start, 0) // 8 + program + tl.arange(0, 2)  # rows of a summary that may read
        listed = readers < n_groups
        reader_tokens = tl.load(Groups + readers * 3, mask=listed, other=-1).to(tl.int64)
        reader_ring_rows = tl.load(Groups + readers * 3 + 2, mask=listed, other=0)
        read = _reads_the_ring(readers, reader_tokens, reader_ring_rows, program, start, n_groups)
        open_destinations, open_key, open_z = _open_rows(Key, Z, RingSlots, lo, hi, has_rows, *strides)
        if has_rows & (tl.reduce(read.to(tl.int32), 0, max_combine) == 0):
            _store_open_rows(Ring, open_destinations, open_key, open_z)
    else:
        group_id = program - n_requests
        group = Groups + group_id * 3
        token = tl.load(group).to(tl.int64)
        slot = tl.load(group + 1).to(tl.int64)
        ring_rows = tl.load(group + 2)
        if (token >= 0) & (ring_rows == 0):  # all 8 rows from key/z; no ring access
            base = tl.load(RingBase + token)
            key_ptr, z_ptr = row_pointers(Key, Z, token - 7, dim, *strides)
            rows = ()  # (key, z) of tokens t-7 .. t
            for i in tl.static_range(8):
                rows += (tl.load(key_ptr + i * key_stride0), tl.load(z_ptr + i * z_stride0))
            loads_issued(ring_rows, NVIDIA)
            num, den = summarize_region(*rows, NVIDIA=NVIDIA)
            if base >= 0:
                store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
        elif token >= 0:  # rows before the request's first token from the ring
            base = tl.load(RingBase + token).to(tl.int64)
            position = tl.load(Positions + token * positions_stride).to(tl.int64)
            request = group_id - token // 8
            request_row = Groups + (n_groups + tl.minimum(tl.maximum(request, 0), n_requests - 1)) * 3
            lo = tl.load(request_row)
            hi = tl.load(request_row + 1)
            start = tl.load(request_row + 2).to(tl.int64)
            stores = ((request >= 0) & (request < n_requests) & (lo >= 0) & (hi > lo)
                      & _reads_the_ring(group_id, token, ring_rows, request, start, n_groups))
            destinations, key, z = _open_rows(Key, Z, RingSlots, lo, hi, stores, *strides)  # alongside the region's
            if base >= 0:
                first = (position - 7) % RING_CAPACITY  # p % 8 == 7, so p >= 7
                rows = ()  # (key, z) of positions p-7 .. p
                for i in tl.static_range(8):
                    rows += region_row(Key, Z, Ring, token, base, first, i, ring_rows, dim, *strides,
                                       RING_CAPACITY, NVIDIA)
                loads_issued(ring_rows, NVIDIA)
                num, den = summarize_region(*rows, NVIDIA=NVIDIA)
                store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
            if stores:
                tl.debug_barrier()  # every ring read of this program (all threads) before the writes
                _store_open_rows(Ring, destinations, key, z)
