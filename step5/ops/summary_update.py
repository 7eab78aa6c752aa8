"""Step5 CSA region summaries: the three update paths (``docs/spec/step5-csa.md``).

A region is 8 positions of one request; the token at position ``p % 8 == 7`` closes it and
its summary (an fp32 online softmax of the 8 ``[key | z]`` rows with a scalar running
maximum, stored as fp8 e4m3 bytes) goes to ``mean``. Rows of still-open regions wait in
the tail ring (``step5.ring.Step5CSATailRing``).

- decode: one program per token (one token per request).
- prefill: ``build_prefill_groups`` lists, on the device, the closing tokens of the step
  (int32 ``[token, slot, ring rows]``, at most ``tokens // 8 + requests`` groups, 1.5 bytes
  a token) and each request's last tokens; ``update_prefill`` then summarizes one region
  per program, and only after that stores open-region rows (one program per request), so
  every ring read of the step precedes its writes.
- verify: one program per request, its ``q`` tokens in position order; no host metadata.

Each ``@triton.jit`` function has its ``TritonJitKernel`` class right below it; the
public functions at the end validate their arguments (shapes, dtypes, devices: never
device values, so nothing synchronises) and launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, int_representative, is_aligned
from jitkern import kernel_launcher, keys
from step5.ops._summary_math import (
    _bf16_to_f32,
    _loads_issued,
    _neg_inf,
    _ring_row,
    _ring_row_after,
    _row_pointers,
    _store_summary,
    _summarize_region,
)
from step5.ops._validate import check_index, check_mean, check_ring, check_rows, check_same_device

_INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}
_NUM_WARPS = 1  # DESIGN.md: one warp per region ran at 0.82 of copy bandwidth, 4 warps at 0.48
_GROUP_BUILD_TOKENS = 256  # tokens per program of build_prefill_groups
# ptxas register caps (None: ptxas decides). Decode is one wave of latency-bound programs:
# registers are free, and with the cap raised ptxas issues all 14 ring loads at once (at
# its own choice, 128, it consumes two rows before issuing the last loads). Prefill is a
# throughput kernel: ptxas picks 128 (16 resident programs per SM, the 16 row loads in two
# batches); 200 gives one batch but 10 programs per SM. Measure both (profile_step5.py).
_DECODE_MAXNREG = 200
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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _row_key_fields(key, z, *others) -> dict[str, Any]:
    """Key fields of the ``[tokens, 1, 256]`` inputs: stride classes and 16-byte alignment.

    ``aligned`` covers key, z and the ``others`` (mean, ring): z is often a slice of a
    wider tensor, and an unaligned base forbids 16-byte vector loads, so it is a binary.
    """
    return dict(
        key_stride0=int_representative(key.stride(0)),
        key_stride2=int_representative(key.stride(2)),
        z_stride0=int_representative(z.stride(0)),
        z_stride2=int_representative(z.stride(2)),
        aligned=all(is_aligned(t) for t in (key, z, *others)),
    )


def _row_stand_ins(key_stride0: int, key_stride2: int, z_stride0: int, z_stride2: int, aligned: bool):
    """Stand-in key and z whose strides are the representatives themselves."""
    key = TritonWarmupTensor(torch.bfloat16, (16, 1, 256), (key_stride0, 256, key_stride2), aligned)
    z = TritonWarmupTensor(torch.bfloat16, (16, 1, 256), (z_stride0, 256, z_stride2), aligned)
    return key, z


def _mean_stand_in(block_size: int, mean_stride0: int, aligned: bool):
    return TritonWarmupTensor(torch.uint8, (16, block_size // 8, 256), (mean_stride0, 256, 1), aligned)


def _ring_stand_in(aligned: bool):
    return TritonWarmupTensor(torch.bfloat16, (64, 512), (512, 1), aligned)


def _index(dtype_name: str, shape=(16,)):
    return TritonWarmupTensor(_INDEX_DTYPES[dtype_name], shape)


def _row_rows(row_strides: list[int], element_strides: list[int], unaligned: bool) -> list[dict[str, Any]]:
    """Key rows for the stride classes a deployment's key and z can have."""
    row = sorted({int_representative(s) for s in row_strides})
    element = sorted({int_representative(s) for s in element_strides})
    return keys.product(
        key_stride0=row, key_stride2=element, z_stride0=row, z_stride2=element,
        aligned=[True, False] if unaligned else [True],
    )


def _check_deployment(*, block_size: int = 8, ring_capacity: int = 7, draft_tokens: int = 0,
                      **index_dtypes: list[str]) -> None:
    """A manifest config that describes a real deployment: checked when the manifest loads,
    not when its keys fail to compile."""
    if block_size <= 0 or block_size % 8:
        raise ValueError(f"block_size: {block_size} is not a positive multiple of 8")
    if draft_tokens < 0:
        raise ValueError(f"draft_tokens: {draft_tokens} is negative")
    if ring_capacity < 7 + draft_tokens:
        raise ValueError(f"ring_capacity: {ring_capacity} is less than 7 + {draft_tokens} (draft tokens)")
    for name, dtypes in index_dtypes.items():
        unknown = sorted(set(dtypes) - set(_INDEX_DTYPES))
        if unknown:
            raise ValueError(f"{name}: {unknown} not supported; use {sorted(_INDEX_DTYPES)}")


# --- decode: one token per request --------------------------------------------------------


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "RingBase"],
)
def _update_decode_kernel(
    Key, Z, Slots, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr,
):
    # position p % 8 == 7: summary of ring rows p-7 .. p-1 then this row -> mean[slot]
    # otherwise:           ring[base + p % capacity] = [key | z]
    # The chain of dependent loads is two deep: slot / position / base (and this token's
    # row, alongside) -> the 7 ring rows, all issued before any math; then the region's
    # math with its eight row maxima in parallel (``_summarize_region``).
    token = tl.program_id(0).to(tl.int64)
    dim = tl.arange(0, 256)
    slot = tl.load(Slots + token).to(tl.int64)
    position = tl.load(Positions + token * positions_stride).to(tl.int64)
    base = tl.load(RingBase + token).to(tl.int64)
    key_ptr, z_ptr = _row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2)
    key = tl.load(key_ptr)
    z = tl.load(z_ptr)
    if (slot >= 0) & (base >= 0) & (position >= 0):
        if position % 8 == 7:
            first = (position - 7) % RING_CAPACITY  # position >= 7 here
            rows = ()  # (key, z) of positions p-7 .. p
            for i in tl.static_range(7):
                row = _ring_row_after(Ring, base, first, i, RING_CAPACITY)
                rows += (tl.load(row + dim), tl.load(row + 256 + dim))
            _loads_issued(slot.to(tl.int32))  # all 14 ring loads in flight at once
            num, den = _summarize_region(*rows, key, z)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)
        else:
            row = _ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, key)
            tl.store(row + 256 + dim, z)


class UpdateDecodeKernel(TritonJitKernel["UpdateDecodeKernel.CompileKey"]):
    name = "step5.update_decode"
    kernel = _update_decode_kernel
    compile_cost = 0.6  # seconds a key on our CPU machine

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        slots_dtype: str
        positions_dtype: str
        ring_base_dtype: str
        key_stride0: int  # integer-class representatives (1, 16, 17, ...)
        key_stride2: int
        z_stride0: int
        z_stride2: int
        mean_stride0: int
        aligned: bool  # key, z, mean and ring 16-byte aligned
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, slots_dtype, positions_dtype, ring_base_dtype, mean_stride0, block_size,
                 ring_capacity, **row_fields) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, slots_dtype=_dtype_name(slots_dtype),
            positions_dtype=_dtype_name(positions_dtype), ring_base_dtype=_dtype_name(ring_base_dtype),
            mean_stride0=int_representative(mean_stride0), **row_fields,
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, slot_dtypes: list[str] = ["int64"],
        position_dtypes: list[str] = ["int64"], ring_index_dtypes: list[str] = ["int32"],
        row_strides: list[int] = [256], element_strides: list[int] = [1], unaligned: bool = False,
    ) -> list[CompileKey]:
        """One key per index-dtype combination and key/z stride class; mean's block stride
        is ``block_size // 8 * 256`` bytes or more, always a multiple of 16."""
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, slot_dtypes=slot_dtypes,
                          position_dtypes=position_dtypes, ring_index_dtypes=ring_index_dtypes)
        rows = keys.combine(
            keys.product(slots_dtype=slot_dtypes, positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes),
            _row_rows(row_strides, element_strides, unaligned),
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, mean_stride0=16, **row),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins(key.key_stride0, key.key_stride2, key.z_stride0, key.z_stride2, key.aligned)
        return dict(
            key=k, z=z, slots=_index(key.slots_dtype), positions=_index(key.positions_dtype),
            ring_base=_index(key.ring_base_dtype), mean=_mean_stand_in(key.block_size, key.mean_stride0, key.aligned),
            ring=_ring_stand_in(key.aligned), capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, num_warps=_NUM_WARPS,
                    enable_fp_fusion=False, maxnreg=_DECODE_MAXNREG)

    @kernel_launcher
    def __call__(self, key, z, slots, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        return LaunchSpec(
            grid=(slots.shape[0],),
            kwargs=dict(
                Key=key, Z=z, Slots=slots, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                positions_stride=positions.stride(0), mean_stride0=mean.stride(0),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype,
                mean_stride0=mean.stride(0), block_size=block_size, ring_capacity=capacity,
                **_row_key_fields(key, z, mean, ring),
            ),
        )


# --- prefill, step 1: the step's closing tokens, listed on the device ---------------------


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "n_requests", "positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def _build_prefill_groups_kernel(
    Slots, Positions, Owners, QueryStartLoc, Groups, n_tokens, n_groups, n_requests, positions_stride,
    BLOCK: tl.constexpr,
):
    # Token i of request r = owners[i] closes a region when positions[i] % 8 == 7. Its group is
    #   g = i // 8 + r   (distinct: a request has one closing token in 8 consecutive tokens, and
    #                     the requests' tokens come in request order; g < tokens // 8 + requests)
    # and holds [i, slots[i], max(0, 7 - (i - qsl[r]))]: the last field counts the rows read
    # from the ring. Row n_groups + r, written by request r's first token, is
    #   [max(qsl[r], qsl[r+1] - 7), qsl[r+1], 0]: the only tokens of r whose row the ring may
    # have to store (an open region has at most 7 rows), for the ring write.
    # Two levels of loads: slots, positions, owners -> qsl[r], qsl[r+1].
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
        return dict(BLOCK=_GROUP_BUILD_TOKENS, num_warps=4)

    @kernel_launcher
    def __call__(self, slots, positions, owners, query_start_loc, groups) -> LaunchSpec:
        n_tokens = slots.shape[0]
        requests = query_start_loc.shape[0] - 1
        return LaunchSpec(
            grid=(triton.cdiv(n_tokens, _GROUP_BUILD_TOKENS),),
            kwargs=dict(
                Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=groups,
                n_tokens=n_tokens, n_groups=n_tokens // 8 + requests, n_requests=requests,
                positions_stride=positions.stride(0),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, owners_dtype=owners.dtype,
                query_start_loc_dtype=query_start_loc.dtype,
            ),
            result=groups,
        )


@triton.jit
def _region_row(Key, Z, Ring, token, base, first, i: tl.constexpr, ring_rows, dim,
                key_stride0, key_stride2, z_stride0, z_stride2, RING_CAPACITY: tl.constexpr):
    """Row i of the region closed by ``token``: from the ring when ``i < ring_rows``, else
    token ``token - 7 + i`` of this step. The (uniform) choice is made on the pointers, so
    each row is one load, and the pointer not taken is never dereferenced."""
    ring = _ring_row_after(Ring, base, first, i, RING_CAPACITY)
    key_ptr, z_ptr = _row_pointers(Key, Z, token - 7 + i, dim, key_stride0, key_stride2, z_stride0, z_stride2)
    from_ring = i < ring_rows
    return tl.load(tl.where(from_ring, ring + dim, key_ptr)), tl.load(tl.where(from_ring, ring + 256 + dim, z_ptr))


# --- prefill, step 2: one program per closed region ---------------------------------------


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Groups", "Positions", "RingBase"],
)
def _prefill_summary_kernel(
    Key, Z, Groups, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr,
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
        _loads_issued(ring_rows)
        num, den = _summarize_region(*rows)
        if base >= 0:
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)
    elif token >= 0:
        base = tl.load(RingBase + token).to(tl.int64)
        position = tl.load(Positions + token * positions_stride).to(tl.int64)
        if base >= 0:
            first = (position - 7) % RING_CAPACITY  # p % 8 == 7, so p >= 7
            rows = ()  # (key, z) of positions p-7 .. p
            for i in tl.static_range(8):
                rows += _region_row(Key, Z, Ring, token, base, first, i, ring_rows, dim, *strides, RING_CAPACITY)
            _loads_issued(ring_rows)
            num, den = _summarize_region(*rows)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)


class PrefillSummaryKernel(TritonJitKernel["PrefillSummaryKernel.CompileKey"]):
    name = "step5.prefill_summary"
    kernel = _prefill_summary_kernel
    compile_cost = 1.2  # seconds a key on our CPU machine: among the slowest to compile

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        positions_dtype: str
        ring_base_dtype: str
        key_stride0: int
        key_stride2: int
        z_stride0: int
        z_stride2: int
        mean_stride0: int
        aligned: bool  # key, z, mean and ring 16-byte aligned
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, positions_dtype, ring_base_dtype, mean_stride0, block_size, ring_capacity,
                 **row_fields) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, positions_dtype=_dtype_name(positions_dtype),
            ring_base_dtype=_dtype_name(ring_base_dtype), mean_stride0=int_representative(mean_stride0),
            **row_fields,
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, position_dtypes: list[str] = ["int64"],
        ring_index_dtypes: list[str] = ["int32"], row_strides: list[int] = [256],
        element_strides: list[int] = [1], unaligned: bool = False,
    ) -> list[CompileKey]:
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, position_dtypes=position_dtypes,
                          ring_index_dtypes=ring_index_dtypes)
        rows = keys.combine(
            keys.product(positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes),
            _row_rows(row_strides, element_strides, unaligned),
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, mean_stride0=16, **row),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins(key.key_stride0, key.key_stride2, key.z_stride0, key.z_stride2, key.aligned)
        return dict(
            key=k, z=z, groups=_index("int32", (16, 3)), positions=_index(key.positions_dtype),
            ring_base=_index(key.ring_base_dtype), mean=_mean_stand_in(key.block_size, key.mean_stride0, key.aligned),
            ring=_ring_stand_in(key.aligned), capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, num_warps=_NUM_WARPS,
                    enable_fp_fusion=False, maxnreg=_PREFILL_MAXNREG)

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        n_groups, _ = prefill_metadata_layout(key.shape[0], groups.shape[0])
        return LaunchSpec(
            grid=(n_groups,),
            kwargs=dict(
                Key=key, Z=z, Groups=groups, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                positions_stride=positions.stride(0), mean_stride0=mean.stride(0),
            ),
            key=self.dispatch(
                positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype, mean_stride0=mean.stride(0),
                block_size=block_size, ring_capacity=capacity, **_row_key_fields(key, z, mean, ring),
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

    @dataclass(frozen=True)
    class CompileKey:
        ring_slots_dtype: str
        key_stride0: int
        key_stride2: int
        z_stride0: int
        z_stride2: int
        aligned: bool  # key, z and ring 16-byte aligned
        num_warps: int = 1

    def dispatch(self, *, ring_slots_dtype, **row_fields) -> CompileKey:
        return self.CompileKey(ring_slots_dtype=_dtype_name(ring_slots_dtype), **row_fields)

    def get_warmup_keys(
        self, *, ring_index_dtypes: list[str] = ["int32"], row_strides: list[int] = [256],
        element_strides: list[int] = [1], unaligned: bool = False,
    ) -> list[CompileKey]:
        _check_deployment(ring_index_dtypes=ring_index_dtypes)
        rows = keys.combine(
            keys.product(ring_slots_dtype=ring_index_dtypes), _row_rows(row_strides, element_strides, unaligned)
        )
        return keys.unique_keys(self.dispatch, rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins(key.key_stride0, key.key_stride2, key.z_stride0, key.z_stride2, key.aligned)
        return dict(key=k, z=z, metadata=_index("int32", (16, 3)), ring_slots=_index(key.ring_slots_dtype),
                    ring=_ring_stand_in(key.aligned))

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(num_warps=key.num_warps)

    @kernel_launcher
    def __call__(self, key, z, metadata, ring_slots, ring) -> LaunchSpec:
        n_groups, requests = prefill_metadata_layout(ring_slots.shape[0], metadata.shape[0])
        return LaunchSpec(
            grid=(requests,),
            kwargs=dict(
                Key=key, Z=z, Metadata=metadata, RingSlots=ring_slots, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                n_groups=n_groups,
            ),
            key=self.dispatch(ring_slots_dtype=ring_slots.dtype, **_row_key_fields(key, z, ring)),
        )


# --- verify: q tokens per request, one program per request --------------------------------


@triton.jit(
    do_not_specialize=["n_tokens"],
    do_not_specialize_on_alignment=["Slots", "QueryStartLoc", "SeqLens", "RingBase"],
)
def _update_verify_kernel(
    Key, Z, Slots, QueryStartLoc, SeqLens, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, n_tokens, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, Q: tl.constexpr,
):
    # token j of request r: index qsl[r] + j, position p = seq_lens[r] - Q + j.
    # First the tokens that close a region (p % 8 == 7: j0, j0 + 8, ... below Q): summary of
    #   rows p-7 .. p (those before seq_lens[r] - Q from the ring, the rest from this step)
    #   -> mean[slot]. Then every other token: ring[base + p % capacity] = row. So every
    #   ring read of the request precedes its ring writes, which may reuse the rows read.
    # One closing block per 8 tokens, not one per token, keeps the kernel small: Triton's
    # Coalesce pass takes time growing faster than the kernel's loads and stores (1.4 s
    # for the 76 of a closing path per token, 0.3 s for these 33; device notes 17).
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
                rows += _region_row(Key, Z, Ring, token, base, ring_first, i, 7 - j, dim, *strides, RING_CAPACITY)
            key_ptr, z_ptr = _row_pointers(Key, Z, token, dim, *strides)
            rows += (tl.load(key_ptr), tl.load(z_ptr))
            _loads_issued(slot.to(tl.int32))  # all 16 row loads in flight at once
            num, den = _summarize_region(*rows)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)
    for j in tl.static_range(Q):
        token = first + j
        position = first_position + j
        slot = tl.load(Slots + token, mask=token < n_tokens, other=-1).to(tl.int64)
        if (slot >= 0) & (base >= 0) & (position >= 0) & (position % 8 != 7):
            key_ptr, z_ptr = _row_pointers(Key, Z, token, dim, *strides)
            row = _ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, tl.load(key_ptr))
            tl.store(row + 256 + dim, tl.load(z_ptr))


class UpdateVerifyKernel(TritonJitKernel["UpdateVerifyKernel.CompileKey"]):
    name = "step5.update_verify"
    kernel = _update_verify_kernel
    compile_cost = 1.3  # seconds a key on our CPU machine: the slowest to compile

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        query_len: int  # q = 1 + draft tokens
        slots_dtype: str
        query_start_loc_dtype: str
        seq_lens_dtype: str
        ring_base_dtype: str
        key_stride0: int
        key_stride2: int
        z_stride0: int
        z_stride2: int
        mean_stride0: int
        aligned: bool  # key, z, mean and ring 16-byte aligned
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, slots_dtype, query_start_loc_dtype, seq_lens_dtype, ring_base_dtype, mean_stride0,
                 block_size, ring_capacity, query_len, **row_fields) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, query_len=query_len,
            slots_dtype=_dtype_name(slots_dtype), query_start_loc_dtype=_dtype_name(query_start_loc_dtype),
            seq_lens_dtype=_dtype_name(seq_lens_dtype), ring_base_dtype=_dtype_name(ring_base_dtype),
            mean_stride0=int_representative(mean_stride0), **row_fields,
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, draft_tokens: int, slot_dtypes: list[str] = ["int64"],
        query_start_loc_dtypes: list[str] = ["int32"], seq_lens_dtypes: list[str] = ["int32"],
        ring_index_dtypes: list[str] = ["int32"], row_strides: list[int] = [256],
        element_strides: list[int] = [1], unaligned: bool = False,
    ) -> list[CompileKey]:
        """``draft_tokens`` is k: every verify step carries q = 1 + k tokens per request."""
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, draft_tokens=draft_tokens,
                          slot_dtypes=slot_dtypes, query_start_loc_dtypes=query_start_loc_dtypes,
                          seq_lens_dtypes=seq_lens_dtypes, ring_index_dtypes=ring_index_dtypes)
        rows = keys.combine(
            keys.product(
                slots_dtype=slot_dtypes, query_start_loc_dtype=query_start_loc_dtypes,
                seq_lens_dtype=seq_lens_dtypes, ring_base_dtype=ring_index_dtypes,
            ),
            _row_rows(row_strides, element_strides, unaligned),
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(
                block_size=block_size, ring_capacity=ring_capacity, query_len=1 + draft_tokens, mean_stride0=16, **row
            ),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins(key.key_stride0, key.key_stride2, key.z_stride0, key.z_stride2, key.aligned)
        return dict(
            key=k, z=z, slots=_index(key.slots_dtype, (4 * key.query_len,)),
            query_start_loc=_index(key.query_start_loc_dtype, (5,)), seq_lens=_index(key.seq_lens_dtype, (4,)),
            ring_base=_index(key.ring_base_dtype, (4 * key.query_len,)),
            mean=_mean_stand_in(key.block_size, key.mean_stride0, key.aligned), ring=_ring_stand_in(key.aligned),
            capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, Q=key.query_len,
                    num_warps=_NUM_WARPS, enable_fp_fusion=False)

    @kernel_launcher
    def __call__(self, key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        requests = seq_lens.shape[0]
        query_len = slots.shape[0] // requests
        return LaunchSpec(
            grid=(requests,),
            kwargs=dict(
                Key=key, Z=z, Slots=slots, QueryStartLoc=query_start_loc, SeqLens=seq_lens, RingBase=ring_base,
                Mean=mean, Ring=ring, key_stride0=key.stride(0), key_stride2=key.stride(2),
                z_stride0=z.stride(0), z_stride2=z.stride(2), n_tokens=slots.shape[0], mean_stride0=mean.stride(0),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, query_start_loc_dtype=query_start_loc.dtype, seq_lens_dtype=seq_lens.dtype,
                ring_base_dtype=ring_base.dtype, mean_stride0=mean.stride(0), block_size=block_size,
                ring_capacity=capacity, query_len=query_len, **_row_key_fields(key, z, mean, ring),
            ),
        )


# --- public functions: validate (no device reads), then launch ----------------------------

def summary_layout(mean: torch.Tensor) -> tuple[int, int]:
    """(bytes between blocks, tokens per block) of a ``[blocks, block_size // 8, 256]`` uint8 cache."""
    check_mean(mean)
    return mean.stride(0), mean.shape[1] * 8


def update_decode(key, z, slots, positions, ring_base, mean, ring, capacity: int) -> None:
    """One token per request: a closing token summarizes its region (7 ring rows + its own);
    any other token stores its ``[key | z]`` row in the ring. Slot or base -1: skipped."""
    tokens = check_rows(key, z)
    check_index("slots", slots, tokens)
    check_index("positions", positions, tokens, strided=True)
    check_index("ring_base", ring_base, tokens)
    check_mean(mean)
    check_ring(ring, capacity, draft_tokens=0)
    check_same_device(key=key, z=z, slots=slots, positions=positions, ring_base=ring_base, mean=mean, ring=ring)
    if tokens:
        UpdateDecodeKernel()(key, z, slots, positions, ring_base, mean, ring, capacity)


def build_prefill_groups(slots, positions, owners, query_start_loc) -> torch.Tensor:
    """The step's closed regions, listed on the device with no host synchronisation.

    Returns int32 ``[tokens // 8 + 2 * requests, 3]``: ``tokens // 8 + requests`` group rows
    ``[closing token, KV slot, rows from the ring]``, then one row per request ``[first,
    end, 0]`` naming its last (at most 7) tokens, the only ones whose rows the ring may
    store; ``-1`` rows unused. Pass it to ``update_prefill`` unchanged. Assumes each
    request's tokens in the step are contiguous, in request order, with consecutive
    positions (chunked prefill), and KV slots below 2**31.
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
    check_same_device(slots=slots, positions=positions, owners=owners, query_start_loc=query_start_loc)
    requests = query_start_loc.shape[0] - 1
    groups = torch.full((tokens // 8 + 2 * requests, GROUP_COLUMNS), -1, dtype=torch.int32, device=slots.device)
    if tokens:
        BuildPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups)
    return groups


def update_prefill(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity: int) -> None:
    """Summarize the regions this step closes, then store open-region rows.

    Two launches on one stream: every ring read of the step (summaries) precedes its
    writes (``ring_slots``), so a long chunk cannot overwrite rows it still has to read.
    The write is one small program per request (its last <= 7 tokens, from the metadata),
    not a scan of every token's ``ring_slots``.
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
    if tokens and n_groups:
        PrefillSummaryKernel()(key, z, metadata, positions, ring_base, mean, ring, capacity)
    if tokens and requests:
        WriteRingKernel()(key, z, metadata, ring_slots, ring)


def update_verify(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity: int) -> None:
    """Speculative verify: ``q = tokens // requests`` tokens per request at positions
    ``seq_lens[r] - q .. seq_lens[r] - 1``. No host metadata, no sync, no allocation:
    capturable in a CUDA graph."""
    tokens = check_rows(key, z)
    check_index("slots", slots, tokens)
    check_index("ring_base", ring_base, tokens)
    check_index("seq_lens", seq_lens, None)
    requests = seq_lens.shape[0]
    check_index("query_start_loc", query_start_loc, None)
    if query_start_loc.shape[0] != requests + 1:
        raise ValueError(f"query_start_loc: expected {requests + 1} entries (seq_lens has {requests}), "
                         f"got {query_start_loc.shape[0]}")
    if requests and tokens % requests:
        raise ValueError(f"slots: {tokens} tokens are not the same number for each of {requests} requests")
    if requests and tokens == 0:
        raise ValueError(f"key: no tokens for {requests} requests")
    check_mean(mean)
    check_ring(ring, capacity, draft_tokens=tokens // requests - 1 if requests else 0)
    check_same_device(key=key, z=z, slots=slots, query_start_loc=query_start_loc, seq_lens=seq_lens,
                      ring_base=ring_base, mean=mean, ring=ring)
    if requests:
        UpdateVerifyKernel()(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
