"""Step5 CSA region summaries: the three update paths (``spec/step5-csa.md``).

A region is 8 positions of one request; the token at position ``p % 8 == 7`` closes it and
its summary (an fp32 online softmax of the 8 ``[key | z]`` rows with a scalar running
maximum, stored as fp8 e4m3 bytes) goes to ``mean``. Rows of still-open regions wait in
the tail ring (``step5.ring.Step5CSATailRing``).

- decode: one program per token (one token per request).
- prefill: ``build_prefill_groups`` lists, on the device, the closing tokens of the step
  (int32 ``[token, slot, ring rows]``, at most ``tokens // 8 + requests`` groups, 1.5 bytes
  a token); ``update_prefill`` then summarizes one region per program, and only after
  that stores open-region rows, so every ring read of the step precedes its writes.
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
    _accumulate,
    _bf16_to_f32,
    _neg_inf,
    _ring_row,
    _row_pointers,
    _store_summary,
    _zeros,
)
from step5.ops._validate import check_index, check_mean, check_ring, check_rows, check_same_device

_INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}
_NUM_WARPS = 1  # DESIGN.md: one warp per region ran at 0.82 of copy bandwidth, 4 warps at 0.48
_RING_WRITE_TOKENS = 32  # tokens per program of the ring write (most have no row to store)
_GROUP_BUILD_TOKENS = 256  # tokens per program of build_prefill_groups
GROUP_COLUMNS = 3  # prefill metadata row: [closing token, its KV slot, rows taken from the ring]


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
            num = _zeros()
            den = _zeros()
            m = _neg_inf()
            for i in tl.static_range(7):
                row = _ring_row(Ring, base, position - 7 + i, RING_CAPACITY)
                num, den, m = _accumulate(
                    num, den, m, _bf16_to_f32(tl.load(row + dim)), _bf16_to_f32(tl.load(row + 256 + dim))
                )
            num, den, m = _accumulate(num, den, m, _bf16_to_f32(key), _bf16_to_f32(z))
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)
        else:
            row = _ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, key)
            tl.store(row + 256 + dim, z)


class UpdateDecodeKernel(TritonJitKernel["UpdateDecodeKernel.CompileKey"]):
    name = "step5.update_decode"
    kernel = _update_decode_kernel

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

    @kernel_launcher
    def __call__(self, key, z, slots, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        return LaunchSpec(
            grid=(slots.shape[0],),
            kwargs=dict(
                Key=key, Z=z, Slots=slots, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                positions_stride=positions.stride(0), mean_stride0=mean.stride(0),
                BLOCK_SIZE=block_size, RING_CAPACITY=capacity, num_warps=_NUM_WARPS, enable_fp_fusion=False,
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype,
                mean_stride0=mean.stride(0), block_size=block_size, ring_capacity=capacity,
                **_row_key_fields(key, z, mean, ring),
            ),
        )


# --- prefill, step 1: the step's closing tokens, listed on the device ---------------------


@triton.jit(
    do_not_specialize=["n_tokens", "n_groups", "positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "Owners", "QueryStartLoc", "Groups"],
)
def _build_prefill_groups_kernel(
    Slots, Positions, Owners, QueryStartLoc, Groups, n_tokens, n_groups, positions_stride,
    BLOCK: tl.constexpr,
):
    # Token i of request r = owners[i] closes a region when positions[i] % 8 == 7. Its group is
    #   g = query_start_loc[r] // 8 + r + (positions[i] // 8 - positions[query_start_loc[r]] // 8)
    # (request r's groups fit in [qsl[r] // 8 + r, qsl[r+1] // 8 + r + 1)), and holds
    #   [i, slots[i], max(0, 7 - (i - qsl[r]))]: the last field counts the rows read from the ring.
    tokens = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = tokens < n_tokens
    slots = tl.load(Slots + tokens, mask=valid, other=-1)
    positions = tl.load(Positions + tokens.to(tl.int64) * positions_stride, mask=valid, other=0)
    closing = valid & (slots >= 0) & (positions >= 0) & (positions % 8 == 7)
    owners = tl.load(Owners + tokens, mask=closing, other=0).to(tl.int64)
    start = tl.load(QueryStartLoc + owners, mask=closing, other=0).to(tl.int64)
    first_position = tl.load(Positions + start * positions_stride, mask=closing, other=0)
    group = start // 8 + owners + (positions // 8 - first_position // 8)
    closing = closing & (group >= 0) & (group < n_groups)
    ring_rows = tl.maximum(7 - (tokens - start), 0)
    row = Groups + group * 3
    tl.store(row, tokens.to(tl.int32), mask=closing)
    tl.store(row + 1, slots.to(tl.int32), mask=closing)
    tl.store(row + 2, ring_rows.to(tl.int32), mask=closing)


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

    @kernel_launcher
    def __call__(self, slots, positions, owners, query_start_loc, groups) -> LaunchSpec:
        n_tokens = slots.shape[0]
        return LaunchSpec(
            grid=(triton.cdiv(n_tokens, _GROUP_BUILD_TOKENS),),
            kwargs=dict(
                Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=groups,
                n_tokens=n_tokens, n_groups=groups.shape[0], positions_stride=positions.stride(0),
                BLOCK=_GROUP_BUILD_TOKENS, num_warps=4,
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
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr,
):
    # group [t, slot, n]: the region closed by token t at position p has rows p-7 .. p;
    # row i comes from ring[base + (p-7+i) % capacity] when i < n, else from token t-7+i.
    # mean[slot] = fp8(bf16(online softmax of the 8 rows, in position order))
    group = Groups + tl.program_id(0).to(tl.int64) * 3
    token = tl.load(group).to(tl.int64)
    if token >= 0:
        slot = tl.load(group + 1).to(tl.int64)
        ring_rows = tl.load(group + 2)
        base = tl.load(RingBase + token).to(tl.int64)
        position = tl.load(Positions + token * positions_stride).to(tl.int64)
        if base >= 0:
            dim = tl.arange(0, 256)
            num = _zeros()
            den = _zeros()
            m = _neg_inf()
            for i in tl.static_range(8):
                from_ring = i < ring_rows
                row = _ring_row(Ring, base, position - 7 + i, RING_CAPACITY)
                key_ptr, z_ptr = _row_pointers(Key, Z, token - 7 + i, dim, key_stride0, key_stride2, z_stride0, z_stride2)
                key = tl.where(from_ring, tl.load(row + dim, mask=from_ring), tl.load(key_ptr, mask=~from_ring))
                z = tl.where(from_ring, tl.load(row + 256 + dim, mask=from_ring), tl.load(z_ptr, mask=~from_ring))
                num, den, m = _accumulate(num, den, m, _bf16_to_f32(key), _bf16_to_f32(z))
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)


class PrefillSummaryKernel(TritonJitKernel["PrefillSummaryKernel.CompileKey"]):
    name = "step5.prefill_summary"
    kernel = _prefill_summary_kernel

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

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        return LaunchSpec(
            grid=(groups.shape[0],),
            kwargs=dict(
                Key=key, Z=z, Groups=groups, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                positions_stride=positions.stride(0), mean_stride0=mean.stride(0),
                BLOCK_SIZE=block_size, RING_CAPACITY=capacity, num_warps=_NUM_WARPS, enable_fp_fusion=False,
            ),
            key=self.dispatch(
                positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype, mean_stride0=mean.stride(0),
                block_size=block_size, ring_capacity=capacity, **_row_key_fields(key, z, mean, ring),
            ),
        )


# --- prefill, step 3: store the rows of regions still open --------------------------------


@triton.jit(do_not_specialize=["n_tokens"], do_not_specialize_on_alignment=["RingSlots"])
def _write_ring_kernel(
    Key, Z, RingSlots, Ring, key_stride0, key_stride2, z_stride0, z_stride2, n_tokens,
    BLOCK: tl.constexpr,
):
    # ring[ring_slots[i]] = [key[i] | z[i]] where ring_slots[i] >= 0
    tokens = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.load(RingSlots + tokens, mask=tokens < n_tokens, other=-1).to(tl.int64)
    keep = (rows >= 0)[:, None]
    dim = tl.arange(0, 256)[None, :]
    key_ptr, z_ptr = _row_pointers(Key, Z, tokens[:, None], dim, key_stride0, key_stride2, z_stride0, z_stride2)
    row = Ring + rows[:, None] * 512
    tl.store(row + dim, tl.load(key_ptr, mask=keep), mask=keep)
    tl.store(row + 256 + dim, tl.load(z_ptr, mask=keep), mask=keep)


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
        num_warps: int = 4

    def dispatch(self, *, ring_slots_dtype, **row_fields) -> CompileKey:
        return self.CompileKey(ring_slots_dtype=_dtype_name(ring_slots_dtype), **row_fields)

    def get_warmup_keys(
        self, *, ring_index_dtypes: list[str] = ["int32"], row_strides: list[int] = [256],
        element_strides: list[int] = [1], unaligned: bool = False,
    ) -> list[CompileKey]:
        rows = keys.combine(
            keys.product(ring_slots_dtype=ring_index_dtypes), _row_rows(row_strides, element_strides, unaligned)
        )
        return keys.unique_keys(self.dispatch, rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins(key.key_stride0, key.key_stride2, key.z_stride0, key.z_stride2, key.aligned)
        return dict(key=k, z=z, ring_slots=_index(key.ring_slots_dtype), ring=_ring_stand_in(key.aligned))

    @kernel_launcher
    def __call__(self, key, z, ring_slots, ring) -> LaunchSpec:
        n_tokens = ring_slots.shape[0]
        return LaunchSpec(
            grid=(triton.cdiv(n_tokens, _RING_WRITE_TOKENS),),
            kwargs=dict(
                Key=key, Z=z, RingSlots=ring_slots, Ring=ring,
                key_stride0=key.stride(0), key_stride2=key.stride(2), z_stride0=z.stride(0), z_stride2=z.stride(2),
                n_tokens=n_tokens, BLOCK=_RING_WRITE_TOKENS, num_warps=4,
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
    # token j of request r: index qsl[r] + j, position p = seq_lens[r] - Q + j, in position order:
    #   p % 8 == 7: summary of rows p-7 .. p (rows before seq_lens[r] - Q from the ring, the
    #               others from this step) -> mean[slot];  otherwise ring[base + p % capacity] = row.
    # A closing token reads the ring before any later token of the request writes it.
    request = tl.program_id(0)
    first = tl.load(QueryStartLoc + request).to(tl.int64)
    first_position = tl.load(SeqLens + request).to(tl.int64) - Q
    base = tl.load(RingBase + first, mask=first < n_tokens, other=-1).to(tl.int64)
    dim = tl.arange(0, 256)
    for j in tl.static_range(Q):
        token = first + j
        position = first_position + j
        present = token < n_tokens
        slot = tl.load(Slots + token, mask=present, other=-1).to(tl.int64)
        key_ptr, z_ptr = _row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2)
        key = tl.load(key_ptr, mask=present)
        z = tl.load(z_ptr, mask=present)
        if (slot >= 0) & (base >= 0) & (position >= 0):
            if position % 8 == 7:
                num = _zeros()
                den = _zeros()
                m = _neg_inf()
                for i in tl.static_range(7):
                    if i >= 7 - j:  # position p-7+i is token j-7+i of this step
                        row_key_ptr, row_z_ptr = _row_pointers(
                            Key, Z, token - 7 + i, dim, key_stride0, key_stride2, z_stride0, z_stride2
                        )
                        row_key = tl.load(row_key_ptr)
                        row_z = tl.load(row_z_ptr)
                    else:
                        row = _ring_row(Ring, base, position - 7 + i, RING_CAPACITY)
                        row_key = tl.load(row + dim)
                        row_z = tl.load(row + 256 + dim)
                    num, den, m = _accumulate(num, den, m, _bf16_to_f32(row_key), _bf16_to_f32(row_z))
                num, den, m = _accumulate(num, den, m, _bf16_to_f32(key), _bf16_to_f32(z))
                _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE)
            else:
                row = _ring_row(Ring, base, position, RING_CAPACITY)
                tl.store(row + dim, key)
                tl.store(row + 256 + dim, z)


class UpdateVerifyKernel(TritonJitKernel["UpdateVerifyKernel.CompileKey"]):
    name = "step5.update_verify"
    kernel = _update_verify_kernel

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
                BLOCK_SIZE=block_size, RING_CAPACITY=capacity, Q=query_len, num_warps=_NUM_WARPS,
                enable_fp_fusion=False,
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

    Returns int32 ``[tokens // 8 + requests, 3]`` rows ``[closing token, KV slot, rows from
    the ring]``, ``-1`` rows unused; pass it to ``update_prefill`` unchanged. Assumes each
    request's tokens in the step have consecutive positions (chunked prefill) and KV slots
    below 2**31.
    """
    if not isinstance(slots, torch.Tensor) or slots.dim() != 1:
        raise ValueError("slots: expected a 1-D int32/int64 tensor")
    tokens = slots.shape[0]
    check_index("slots", slots, tokens)
    check_index("positions", positions, tokens, strided=True)
    check_index("owners", owners, tokens)
    check_index("query_start_loc", query_start_loc, None)
    if query_start_loc.shape[0] < 1:
        raise ValueError("query_start_loc: expected [requests + 1] cumulative token counts, got an empty tensor")
    check_same_device(slots=slots, positions=positions, owners=owners, query_start_loc=query_start_loc)
    requests = query_start_loc.shape[0] - 1
    groups = torch.full((tokens // 8 + requests, GROUP_COLUMNS), -1, dtype=torch.int32, device=slots.device)
    if tokens:
        BuildPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups)
    return groups


def update_prefill(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity: int) -> None:
    """Summarize the regions this step closes, then store open-region rows.

    Two launches on one stream: every ring read of the step (summaries) precedes its
    writes (``ring_slots``), so a long chunk cannot overwrite rows it still has to read.
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
    if metadata.shape[0]:
        PrefillSummaryKernel()(key, z, metadata, positions, ring_base, mean, ring, capacity)
    if tokens:
        WriteRingKernel()(key, z, ring_slots, ring)


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
