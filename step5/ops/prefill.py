"""Step5 CSA region summaries, prefill (``spec/step5-csa.md``).

``build_prefill_groups`` lists, on the device, the closing tokens of the step (int32
``[token, slot, ring rows]``, at most ``tokens // 8 + requests`` groups, 1.5 bytes a token)
and each request's last tokens; ``update_prefill`` then summarizes one region per program,
and only after that stores open-region rows (one program per request), so every ring read
of the step precedes its writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, cdiv, kernel_launcher, keys
from jitkern import public_call, torch_step
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
from step5.ops._summary_math import (_loads_issued, _region_row, _row_pointers, _store_summary, _summarize_region,
                                     target_paths)
from step5.ops._validate import (SIZE_LIMIT, check_index, check_mean, check_out, check_ring, check_rows,
                                 check_same_device)

_GROUP_BUILD_TOKENS = 256  # tokens per program of build_prefill_groups
_GROUP_FILL_ROWS = 1024  # rows of the one program that writes -1 to every row itself
# ptxas register cap (None: ptxas decides). Prefill is a throughput kernel: ptxas picks 128
# (16 resident programs per SM, the 16 row loads in two batches); 200 gives one batch but 10
# programs per SM. Measure it against decode's (``step5.ops.decode._DECODE_MAXNREG``;
# profile_step5.py).
_PREFILL_MAXNREG = 128  # H200, 256K tokens: 74.8 us vs 76.2 us (ptxas default), 97.9 us at 96 (device notes 5)
GROUP_COLUMNS = 3  # prefill metadata row: [closing token, its KV slot, rows taken from the ring]


def prefill_metadata_layout(tokens: int, rows: int) -> tuple[int, int]:
    """(groups, requests) of ``build_prefill_groups``' metadata for a step of ``tokens``
    tokens: ``tokens // 8 + requests`` group rows, then one row per request."""
    extra = rows - tokens // 8
    if extra < 0 or extra % 2:
        raise ValueError(f"metadata: {rows} rows is not the layout build_prefill_groups makes for {tokens} tokens "
                         "(tokens // 8 + 2 * requests rows)")
    return tokens // 8 + extra // 2, extra // 2


# --- prefill, step 1: the step's closing tokens, listed on the device ---------------------


def one_program(tokens: int, rows: int) -> bool:
    """Whether ``build_prefill_groups`` of ``tokens`` tokens into ``rows`` metadata rows is
    one program, which writes -1 to every row itself before its entries (the small steps
    of mixed decode and prefill); otherwise torch fills the rows first."""
    return tokens <= _GROUP_BUILD_TOKENS and rows <= _GROUP_FILL_ROWS


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "n_requests", "positions_stride", "fill_rows"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def _build_prefill_groups_kernel(
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


class BuildPrefillGroupsKernel(TritonJitKernel["BuildPrefillGroupsKernel.CompileKey"]):
    name = "step5.build_prefill_groups"
    kernel = _build_prefill_groups_kernel
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        slots_dtype: str
        positions_dtype: str
        owners_dtype: str
        query_start_loc_dtype: str
        num_warps: int = 4

    def dispatch(self, *, slots_dtype, positions_dtype, owners_dtype, query_start_loc_dtype) -> CompileKey:
        return self.CompileKey(
            slots_dtype=_dtype_name(slots_dtype), positions_dtype=_dtype_name(positions_dtype),
            owners_dtype=_dtype_name(owners_dtype), query_start_loc_dtype=_dtype_name(query_start_loc_dtype),
        )

    def get_warmup_keys(
        self, *, slot_dtypes: list[str] = ["int64"], position_dtypes: list[str] = ["int64"],
        owner_dtypes: list[str] = ["int32"], query_start_loc_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """Sizes and the positions stride are not specialised: only index dtypes select a binary."""
        _check_deployment(slot_dtypes=slot_dtypes, position_dtypes=position_dtypes, owner_dtypes=owner_dtypes,
                          query_start_loc_dtypes=query_start_loc_dtypes)
        rows = keys.product(
            slots_dtype=slot_dtypes, positions_dtype=position_dtypes, owners_dtype=owner_dtypes,
            query_start_loc_dtype=query_start_loc_dtypes,
        )
        return keys.unique_keys(lambda **row: self.dispatch(**{k: _INDEX_DTYPES[v] for k, v in row.items()}), rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            slots=_index(key.slots_dtype), positions=_index(key.positions_dtype), owners=_index(key.owners_dtype),
            query_start_loc=_index(key.query_start_loc_dtype), groups=_index("int32", (16, 3)),
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK=_GROUP_BUILD_TOKENS, FILL_ROWS=_GROUP_FILL_ROWS, num_warps=4)

    @kernel_launcher
    def __call__(self, slots, positions, owners, query_start_loc, groups, fill: bool = False) -> LaunchSpec:
        """``fill``: one program writes every row of ``groups``, -1 first (``one_program``
        steps); else ``groups`` must hold -1 already."""
        n_tokens = slots.shape[0]
        requests = query_start_loc.shape[0] - 1
        if fill and not one_program(n_tokens, groups.shape[0]):
            raise ValueError(f"fill: one program takes at most {_GROUP_BUILD_TOKENS} tokens and {_GROUP_FILL_ROWS} "
                             f"rows, got {n_tokens} and {groups.shape[0]}")
        return LaunchSpec(
            grid=(1,) if fill else (cdiv(n_tokens, _GROUP_BUILD_TOKENS),),
            kwargs=dict(
                Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=groups,
                n_tokens=n_tokens, n_groups=n_tokens // 8 + requests, n_requests=requests,
                positions_stride=positions.stride(0), fill_rows=groups.shape[0] if fill else 0,
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, owners_dtype=owners.dtype,
                query_start_loc_dtype=query_start_loc.dtype,
            ),
            result=groups,
        )



# --- prefill, step 2: one program per closed region ---------------------------------------


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Groups", "Positions", "RingBase"],
)
def _prefill_summary_kernel(
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
        key_ptr, z_ptr = _row_pointers(Key, Z, token - 7, dim, *strides)
        rows = ()  # (key, z) of tokens t-7 .. t
        for i in tl.static_range(8):
            rows += (tl.load(key_ptr + i * key_stride0), tl.load(z_ptr + i * z_stride0))
        _loads_issued(ring_rows, NVIDIA)
        num, den = _summarize_region(*rows, NVIDIA=NVIDIA)
        if base >= 0:
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
    elif token >= 0:
        base = tl.load(RingBase + token).to(tl.int64)
        position = tl.load(Positions + token * positions_stride).to(tl.int64)
        if base >= 0:
            first = (position - 7) % RING_CAPACITY  # p % 8 == 7, so p >= 7
            rows = ()  # (key, z) of positions p-7 .. p
            for i in tl.static_range(8):
                rows += _region_row(Key, Z, Ring, token, base, first, i, ring_rows, dim, *strides, RING_CAPACITY,
                                    NVIDIA)
            _loads_issued(ring_rows, NVIDIA)
            num, den = _summarize_region(*rows, NVIDIA=NVIDIA)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)


class PrefillSummaryKernel(TritonJitKernel["PrefillSummaryKernel.CompileKey"]):
    name = "step5.prefill_summary"
    kernel = _prefill_summary_kernel
    compile_cost = 1.2  # seconds a key on our CPU machine: among the slowest to compile
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        positions_dtype: str
        ring_base_dtype: str
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, positions_dtype, ring_base_dtype, block_size, ring_capacity) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, positions_dtype=_dtype_name(positions_dtype),
            ring_base_dtype=_dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, position_dtypes: list[str] = ["int64"],
        ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, position_dtypes=position_dtypes,
                          ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins()
        return dict(
            key=k, z=z, groups=_index("int32", (16, 3)), positions=_index(key.positions_dtype),
            ring_base=_index(key.ring_base_dtype), mean=_mean_stand_in(key.block_size), ring=_ring_stand_in(),
            capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, num_warps=key.num_warps,
                    enable_fp_fusion=False, maxnreg=_PREFILL_MAXNREG, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        n_groups, _ = prefill_metadata_layout(key.shape[0], groups.shape[0])
        return LaunchSpec(
            grid=(n_groups,),
            kwargs=dict(
                Key=key, Z=z, Groups=groups, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                **stride_kwargs(key=key, z=z,
                                positions=positions, mean=mean),
            ),
            key=self.dispatch(
                positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype, block_size=block_size,
                ring_capacity=capacity,
            ),
        )


# --- prefill, step 3: store the rows of regions still open --------------------------------


@triton.jit(do_not_specialize=["n_groups"], do_not_specialize_on_alignment=["Metadata", "RingSlots"])
def _write_ring_kernel(
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
        key_ptr, z_ptr = _row_pointers(Key, Z, tokens[:, None], dim, key_stride0, key_stride2, z_stride0, z_stride2)
        key = tl.load(key_ptr, mask=present[:, None])  # alongside ring_slots, not after
        z = tl.load(z_ptr, mask=present[:, None])
        target = Ring + rows[:, None] * 512
        tl.store(target + dim, key, mask=keep)
        tl.store(target + 256 + dim, z, mask=keep)


class WriteRingKernel(TritonJitKernel["WriteRingKernel.CompileKey"]):
    name = "step5.write_ring"
    kernel = _write_ring_kernel
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        ring_slots_dtype: str
        num_warps: int = 1

    def dispatch(self, *, ring_slots_dtype) -> CompileKey:
        return self.CompileKey(ring_slots_dtype=_dtype_name(ring_slots_dtype))

    def get_warmup_keys(self, *, ring_index_dtypes: list[str] = ["int32"]) -> list[CompileKey]:
        _check_deployment(ring_index_dtypes=ring_index_dtypes)
        return keys.unique_keys(self.dispatch, keys.product(ring_slots_dtype=ring_index_dtypes))

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins()
        return dict(key=k, z=z, metadata=_index("int32", (16, 3)), ring_slots=_index(key.ring_slots_dtype),
                    ring=_ring_stand_in())

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(num_warps=key.num_warps)

    @kernel_launcher
    def __call__(self, key, z, metadata, ring_slots, ring) -> LaunchSpec:
        n_groups, requests = prefill_metadata_layout(ring_slots.shape[0], metadata.shape[0])
        return LaunchSpec(
            grid=(requests,),
            kwargs=dict(
                Key=key, Z=z, Metadata=metadata, RingSlots=ring_slots, Ring=ring,
                **stride_kwargs(key=key, z=z),
                n_groups=n_groups,
            ),
            key=self.dispatch(ring_slots_dtype=ring_slots.dtype),
        )


from step5.ops._validate import check_build_values, check_prefill_values, runs_on_host  # noqa: E402 - below the kernels


@public_call
def build_prefill_groups(slots, positions, owners, query_start_loc, *, out=None) -> torch.Tensor:
    """The step's closed regions, listed on the device with no host synchronisation.

    Returns int32 ``[tokens // 8 + 2 * requests, 3]``: ``tokens // 8 + requests`` group rows
    ``[closing token, KV slot, rows from the ring]``, then one row per request ``[first,
    end, 0]`` naming its last (at most 7) tokens, the only ones whose rows the ring may
    store; ``-1`` rows unused. Pass it to ``update_prefill`` of the same step unchanged.
    Assumes each request's tokens in the step are contiguous, in request order, with
    consecutive positions (chunked prefill), and KV slots below 2**31. ``out``, a
    contiguous int32 tensor of that shape on the inputs' device, is written and returned
    instead of a new tensor (its bytes are the same).

    Steps that ``update_prefill`` takes in one launch (``prefill_fused.two_launches``:
    at least 256 tokens, at most 33 requests) get the same rows from one kernel that
    writes every row, and request rows ``[first, end, request's first token]``. Other
    steps take one program that writes every row, -1 first (``one_program``), or else a
    fill of -1, then the kernel. The allocation and the fill are ``torch_step``s, so that
    a planned call repeats them. ``torch.empty`` takes the sizes one by one: it parses them
    faster than a tuple (2.2 against 3.5 us on the H200's host, run 72).
    """
    if not isinstance(slots, torch.Tensor) or slots.dim() != 1:
        raise ValueError("slots: expected a 1-D int32/int64 tensor")
    tokens = slots.shape[0]
    check_index("slots", slots, tokens)
    check_index("positions", positions, tokens, strided=True, counted_by="slots")
    check_index("owners", owners, tokens, counted_by="slots")
    check_index("query_start_loc", query_start_loc, None)
    if query_start_loc.shape[0] < 1:
        raise ValueError("query_start_loc: expected [requests + 1] cumulative token counts, got an empty tensor")
    device = check_same_device(slots=slots, positions=positions, owners=owners, query_start_loc=query_start_loc)
    if runs_on_host(slots):
        check_build_values(slots, positions, query_start_loc)
    requests = query_start_loc.shape[0] - 1
    shape = (tokens // 8 + 2 * requests, GROUP_COLUMNS)
    if out is not None:
        check_out("out", out, torch.int32, shape, device, "[tokens // 8 + 2 * requests, 3]")
    from step5.ops import prefill_fused  # (imported here: an import above would move the kernels' lines)

    if prefill_fused.two_launches(tokens, requests):  # every row written by the kernel: no fill launch
        groups = out if out is not None else torch_step(torch.empty, *shape, dtype=torch.int32, device=device)
        return prefill_fused.BuildFilledPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups,
                                                             prefill_fused.launch_pdl(device))
    if one_program(tokens, shape[0]):  # it writes every row: no fill launch
        groups = out if out is not None else torch_step(torch.empty, *shape, dtype=torch.int32, device=device)
        if shape[0]:
            BuildPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups, fill=True)
        return groups
    if out is not None:
        groups = torch_step(torch.Tensor.fill_, out, -1)
    else:
        groups = torch_step(torch.full, shape, -1, dtype=torch.int32, device=device)
    BuildPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups)
    return groups


@public_call
def update_prefill(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity: int) -> None:
    """Summarize the regions this step closes, then store open-region rows.

    Two launches on one stream: every ring read of the step (summaries) precedes its
    writes (``ring_slots``), so a long chunk cannot overwrite rows it still has to read.
    The write is one small program per request (its last <= 7 tokens, from the metadata),
    not a scan of every token's ``ring_slots``. Steps of ``prefill_fused.two_launches``
    (decided from shapes) take one launch instead, where the one summary that reads a
    request's ring rows stores that request's rows after its reads (spec, "Prefill in two
    launches"); the bytes are the same.
    """
    tokens = check_rows(key, z)
    if not isinstance(metadata, torch.Tensor) or metadata.dtype != torch.int32 or metadata.dim() != 2 \
            or metadata.shape[1] != GROUP_COLUMNS or not metadata.is_contiguous():
        raise ValueError("metadata: expected the contiguous int32 [groups, 3] tensor of build_prefill_groups, got "
                         f"{getattr(metadata, 'dtype', type(metadata))} {tuple(getattr(metadata, 'shape', ()))}")
    check_index("positions", positions, tokens, strided=True)
    check_index("ring_base", ring_base, tokens)
    check_index("ring_slots", ring_slots, tokens)
    check_mean(mean)
    check_ring(ring, capacity, draft_tokens=0)
    check_same_device(key=key, z=z, metadata=metadata, positions=positions, ring_base=ring_base,
                      ring_slots=ring_slots, mean=mean, ring=ring)
    n_groups, requests = prefill_metadata_layout(tokens, metadata.shape[0])
    if runs_on_host(metadata):
        check_prefill_values(metadata, positions, ring_base, ring_slots, mean, ring, capacity, n_groups)
    from step5.ops import prefill_fused

    if prefill_fused.two_launches(tokens, requests):
        prefill_fused.PrefillUpdateKernel()(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity,
                                            prefill_fused.launch_pdl(key.device))
        return
    if tokens and n_groups:
        PrefillSummaryKernel()(key, z, metadata, positions, ring_base, mean, ring, capacity)
    if tokens and requests:
        WriteRingKernel()(key, z, metadata, ring_slots, ring)
