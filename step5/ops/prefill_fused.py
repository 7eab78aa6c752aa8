"""Step5 CSA region summaries, prefill in two launches instead of four (``spec/step5-csa.md``,
"Prefill in two launches").

The three-launch path of ``step5.ops.prefill`` is four kernels on the stream: torch's fill
of the metadata with -1, ``build_prefill_groups``, the summaries, the ring writes. Each
costs 1-2 us of fixed latency, which is most of a step of a few thousand tokens. Here:

- ``build_prefill_groups_filled``: the same metadata, but every row written by the kernel
  (program ``j`` owns group rows ``32j .. 32j + 31`` and request rows ``32j ..``), so there is
  no fill; request rows carry the request's first token in their third column.
- ``prefill_update``: the summaries and the ring writes in one launch. The ring rows a
  request's summaries read (the ones before its first token, at most 7, read by the
  summary of the region its first token is in) may be the rows its ring write stores
  (capacity 8: always, when the chunk starts and ends inside a region). So that summary's
  program stores the request's open rows itself, after its reads; every other request's
  rows are stored by a program of their own, which no summary of the step reads.

Both are launched with programmatic dependent launch (PDL) where the GPU has it (sm_90+):
each waits for the kernel before it (``griddepcontrol.wait``) before touching memory, and
lets the next one be launched at once, so the second launch's latency hides behind the
first. ``update_prefill`` and ``build_prefill_groups`` take this path on their own
(``two_launches``); the decision reads only shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, kernel_launcher, keys, targets
from step5.ops._rows import (
    _check_deployment,
    _dtype_name,
    FIXED_STRIDES,
    _index,
    _INDEX_DTYPES,
    _mean_stand_in,
    _NUM_WARPS,
    _ring_stand_in,
    _row_stand_ins, stride_kwargs,
)
from step5.ops._summary_math import (_loads_issued, _max_combine, _region_row, _row_pointers, _store_summary,
                                     _summarize_region, target_paths)
from step5.ops._validate import SIZE_LIMIT

_ROWS = 32  # group rows (and request rows) per program of the filled build: its 256 tokens
_HALO = 256  # tokens before a program's own that may land in its rows: 8 * (requests - 1)
MAX_REQUESTS = 1 + _HALO // 8  # 33: the most requests the filled build takes
MIN_TOKENS = 256  # steps below this keep the three launches (see ``two_launches``)
LAUNCH_PDL = True  # launch both kernels with PDL where the GPU has it (False: plain launches, to compare)
_PREFILL_MAXNREG = 128  # as the summary kernel's (step5.ops.prefill._PREFILL_MAXNREG)


def two_launches(tokens: int, requests: int) -> bool:
    """Whether a step of ``tokens`` tokens and ``requests`` requests takes this path: the
    filled build, then a single launch of summaries and ring writes. From shapes only.

    The filled build needs at most ``MAX_REQUESTS`` requests (a program scans 8 tokens
    before its own per request after the first). Steps below ``MIN_TOKENS`` tokens, the
    small mixed batches of decode tokens and short chunks, keep the three launches that the
    serving-schedule tests pin (``tests/step5/test_schedule.py`` asserts those kernels run
    in its steps of at most 243 tokens); the single launch would be as exact there.
    """
    return tokens >= MIN_TOKENS and 1 <= requests <= MAX_REQUESTS


def launch_pdl(device: torch.device) -> bool:
    """PDL for launches on ``device``: NVIDIA sm_90 and newer (``LAUNCH_PDL`` permitting)."""
    if not LAUNCH_PDL or device.type != "cuda" or torch.version.hip is not None:
        return False
    return _capability_major(device.index if device.index is not None else torch.cuda.current_device()) >= 9


@functools.cache
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def _layout(tokens: int, rows: int) -> tuple[int, int]:
    """(groups, requests) of a metadata tensor of ``rows`` rows (``prefill_metadata_layout``)."""
    requests = (rows - tokens // 8) // 2
    return tokens // 8 + requests, requests


# --- the filled build: every metadata row written by the kernel ------------------------------


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "n_requests", "positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def _build_prefill_groups_filled_kernel(
    Slots, Positions, Owners, QueryStartLoc, Groups, n_tokens, n_groups, n_requests, positions_stride,
    ROWS: tl.constexpr, HALO: tl.constexpr, USE_GDC: tl.constexpr,
):
    # The rows of _build_prefill_groups_kernel (step5.ops.prefill): token i of request
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


class BuildFilledPrefillGroupsKernel(TritonJitKernel["BuildFilledPrefillGroupsKernel.CompileKey"]):
    name = "step5.build_prefill_groups_filled"
    kernel = _build_prefill_groups_filled_kernel
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        slots_dtype: str
        positions_dtype: str
        owners_dtype: str
        query_start_loc_dtype: str
        launch_pdl: bool
        num_warps: int = 8  # 1.41 / 3.52 us at 8K / 256K tokens, against 1.72 / 4.24 at 4 (device notes 52)

    def dispatch(self, *, slots_dtype, positions_dtype, owners_dtype, query_start_loc_dtype,
                 launch_pdl: bool) -> CompileKey:
        return self.CompileKey(
            slots_dtype=_dtype_name(slots_dtype), positions_dtype=_dtype_name(positions_dtype),
            owners_dtype=_dtype_name(owners_dtype), query_start_loc_dtype=_dtype_name(query_start_loc_dtype),
            launch_pdl=launch_pdl,
        )

    def get_warmup_keys(
        self, *, slot_dtypes: list[str] = ["int64"], position_dtypes: list[str] = ["int64"],
        owner_dtypes: list[str] = ["int32"], query_start_loc_dtypes: list[str] = ["int32"],
        launch_pdl: list[bool] = [False, True],
    ) -> list[CompileKey]:
        """Index dtypes, and PDL or not (PDL on GPUs that have it, plain elsewhere)."""
        _check_deployment(slot_dtypes=slot_dtypes, position_dtypes=position_dtypes, owner_dtypes=owner_dtypes,
                          query_start_loc_dtypes=query_start_loc_dtypes)
        rows = keys.product(
            slots_dtype=slot_dtypes, positions_dtype=position_dtypes, owners_dtype=owner_dtypes,
            query_start_loc_dtype=query_start_loc_dtypes, launch_pdl=launch_pdl,
        )
        return keys.unique_keys(
            lambda launch_pdl, **row: self.dispatch(launch_pdl=launch_pdl,
                                                    **{k: _INDEX_DTYPES[v] for k, v in row.items()}), rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            slots=_index(key.slots_dtype), positions=_index(key.positions_dtype), owners=_index(key.owners_dtype),
            query_start_loc=_index(key.query_start_loc_dtype), groups=_index("int32", (16, 3)),
            launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(ROWS=_ROWS, HALO=_HALO, USE_GDC=_use_gdc(key.launch_pdl), num_warps=key.num_warps,
                    launch_pdl=key.launch_pdl)

    @kernel_launcher
    def __call__(self, slots, positions, owners, query_start_loc, groups, launch_pdl: bool = False) -> LaunchSpec:
        n_tokens = slots.shape[0]
        requests = query_start_loc.shape[0] - 1
        n_groups = n_tokens // 8 + requests
        return LaunchSpec(
            grid=(triton.cdiv(n_groups, _ROWS),),  # n_groups >= requests: every request row is owned too
            kwargs=dict(
                Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=groups,
                n_tokens=n_tokens, n_groups=n_groups, n_requests=requests, **stride_kwargs(positions=positions),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, owners_dtype=owners.dtype,
                query_start_loc_dtype=query_start_loc.dtype, launch_pdl=launch_pdl,
            ),
            result=groups,
        )


def _use_gdc(launch_pdl: bool) -> bool:
    """Whether a key launched with PDL waits on the kernel before it (``griddepcontrol``):
    only where the target being compiled for has PDL; elsewhere the key builds the plain
    kernel and jitkern launches it without PDL (``jitkern.targets.fit_launch_options``)."""
    return launch_pdl and targets.current().pdl


# --- summaries and ring writes in one launch ---------------------------------------------------


@triton.jit
def _open_rows(Key, Z, RingSlots, lo, hi, active, key_stride0, key_stride2, z_stride0, z_stride2):
    """The rows the ring stores for a request row ``[lo, hi, _]``: ``ring_slots`` of tokens
    ``lo .. hi - 1`` (at most 8; -1 where none, or not ``active``) and their key and z, as
    ``_write_ring_kernel`` loads them."""
    tokens = lo.to(tl.int64) + tl.arange(0, 8)
    present = active & (tokens < hi)
    destinations = tl.load(RingSlots + tokens, mask=present, other=-1).to(tl.int64)
    dim = tl.arange(0, 256)[None, :]
    key_ptr, z_ptr = _row_pointers(Key, Z, tokens[:, None], dim, key_stride0, key_stride2, z_stride0, z_stride2)
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
def _prefill_update_kernel(
    Key, Z, Groups, Positions, RingBase, RingSlots, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0, n_groups, n_requests,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr, HW_FP8: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    # Programs 0 .. R-1: request r stores its open rows (metadata row n_groups + r = [lo, hi,
    # first token]), unless a summary program reads its ring rows; that one stores them.
    # Programs R + g: the summary of group row g, as _prefill_summary_kernel computes it.
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
        if has_rows & (tl.reduce(read.to(tl.int32), 0, _max_combine) == 0):
            _store_open_rows(Ring, open_destinations, open_key, open_z)
    else:
        group_id = program - n_requests
        group = Groups + group_id * 3
        token = tl.load(group).to(tl.int64)
        slot = tl.load(group + 1).to(tl.int64)
        ring_rows = tl.load(group + 2)
        if (token >= 0) & (ring_rows == 0):  # all 8 rows from key/z; no ring access
            base = tl.load(RingBase + token)
            key_ptr, z_ptr = _row_pointers(Key, Z, token - 7, dim, *strides)
            rows = ()  # (key, z) of tokens t-7 .. t
            for i in tl.static_range(8):
                rows += (tl.load(key_ptr + i * key_stride0), tl.load(z_ptr + i * z_stride0))
            _loads_issued(ring_rows, NVIDIA)
            num, den = _summarize_region(*rows, NVIDIA=NVIDIA)
            if base >= 0:
                _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
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
                    rows += _region_row(Key, Z, Ring, token, base, first, i, ring_rows, dim, *strides,
                                        RING_CAPACITY, NVIDIA)
                _loads_issued(ring_rows, NVIDIA)
                num, den = _summarize_region(*rows, NVIDIA=NVIDIA)
                _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
            if stores:
                tl.debug_barrier()  # every ring read of this program (all threads) before the writes
                _store_open_rows(Ring, destinations, key, z)


class PrefillUpdateKernel(TritonJitKernel["PrefillUpdateKernel.CompileKey"]):
    name = "step5.prefill_update"
    kernel = _prefill_update_kernel
    compile_cost = 2.0  # seconds a key on our CPU machine, about: 1.7x the summary kernel's in a serial warmup
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        positions_dtype: str
        ring_base_dtype: str
        ring_slots_dtype: str
        launch_pdl: bool
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, positions_dtype, ring_base_dtype, ring_slots_dtype, block_size, ring_capacity,
                 launch_pdl: bool) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, positions_dtype=_dtype_name(positions_dtype),
            ring_base_dtype=_dtype_name(ring_base_dtype), ring_slots_dtype=_dtype_name(ring_slots_dtype),
            launch_pdl=launch_pdl,
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, position_dtypes: list[str] = ["int64"],
        ring_index_dtypes: list[str] = ["int32"], launch_pdl: list[bool] = [False, True],
    ) -> list[CompileKey]:
        """Positions and ring metadata dtypes, and PDL or not (PDL on GPUs that have it)."""
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, position_dtypes=position_dtypes,
                          ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes,
                            ring_slots_dtype=ring_index_dtypes, launch_pdl=launch_pdl)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins()
        return dict(
            key=k, z=z, groups=_index("int32", (16, 3)), positions=_index(key.positions_dtype),
            ring_base=_index(key.ring_base_dtype), ring_slots=_index(key.ring_slots_dtype),
            mean=_mean_stand_in(key.block_size), ring=_ring_stand_in(), capacity=key.ring_capacity,
            launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, USE_GDC=_use_gdc(key.launch_pdl),
                    num_warps=key.num_warps, enable_fp_fusion=False, maxnreg=_PREFILL_MAXNREG,
                    launch_pdl=key.launch_pdl, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, ring_slots, mean, ring, capacity: int,
                 launch_pdl: bool = False) -> LaunchSpec:
        n_groups, requests = _layout(key.shape[0], groups.shape[0])
        return LaunchSpec(
            grid=(requests + n_groups,),
            kwargs=dict(
                Key=key, Z=z, Groups=groups, Positions=positions, RingBase=ring_base, RingSlots=ring_slots,
                Mean=mean, Ring=ring,
                **stride_kwargs(key=key, z=z, positions=positions, mean=mean),
                n_groups=n_groups, n_requests=requests,
            ),
            key=self.dispatch(
                positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype, ring_slots_dtype=ring_slots.dtype,
                block_size=mean.shape[1] * 8, ring_capacity=capacity, launch_pdl=launch_pdl,
            ),
        )
