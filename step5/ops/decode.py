"""Step5 CSA region summaries, decode: one program per token (one token per request)
(``spec/step5-csa.md``).

A closing token (position ``p % 8 == 7``) summarizes its region from 7 ring rows and its
own row; any other token stores its ``[key | z]`` row in the ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel
from jitkern import public_call
from jitkern import kernel_launcher, keys
from step5.ops._rows import (
    _check_deployment,
    _dtype_name,
    FIXED_STRIDES,
    _index,
    _mean_stand_in,
    _NUM_WARPS,
    _ring_stand_in,
    _row_stand_ins, stride_kwargs,
)
from step5.ops._summary_math import (
    _loads_issued,
    _ring_row,
    _ring_row_after,
    _row_pointers,
    _store_summary,
    _summarize_region,
    target_paths,
)
from step5.ops._validate import SIZE_LIMIT, check_index, check_mean, check_ring, check_rows, check_same_device

# ptxas register cap (None: ptxas decides). Decode is one wave of latency-bound programs:
# registers are free, and with the cap raised ptxas issues all 14 ring loads at once (at
# its own choice, 128, it consumes two rows before issuing the last loads). Measure it
# against prefill's (``step5.ops.prefill._PREFILL_MAXNREG``; profile_step5.py).
_DECODE_MAXNREG = 200


@triton.jit(
    do_not_specialize=["positions_stride"],
    do_not_specialize_on_alignment=["Slots", "Positions", "RingBase"],
)
def _update_decode_kernel(
    Key, Z, Slots, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr, HW_FP8: tl.constexpr,
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
            _loads_issued(slot.to(tl.int32), NVIDIA)  # all 14 ring loads in flight at once
            num, den = _summarize_region(*rows, key, z, NVIDIA=NVIDIA)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
        else:
            row = _ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, key)
            tl.store(row + 256 + dim, z)


class UpdateDecodeKernel(TritonJitKernel["UpdateDecodeKernel.CompileKey"]):
    name = "step5.update_decode"
    kernel = _update_decode_kernel
    compile_cost = 0.6  # seconds a key on our CPU machine
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        slots_dtype: str
        positions_dtype: str
        ring_base_dtype: str
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, slots_dtype, positions_dtype, ring_base_dtype, block_size, ring_capacity) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, slots_dtype=_dtype_name(slots_dtype),
            positions_dtype=_dtype_name(positions_dtype), ring_base_dtype=_dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, slot_dtypes: list[str] = ["int64"],
        position_dtypes: list[str] = ["int64"], ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """One key per index-dtype combination."""
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, slot_dtypes=slot_dtypes,
                          position_dtypes=position_dtypes, ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(slots_dtype=slot_dtypes, positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = _row_stand_ins()
        return dict(
            key=k, z=z, slots=_index(key.slots_dtype), positions=_index(key.positions_dtype),
            ring_base=_index(key.ring_base_dtype), mean=_mean_stand_in(key.block_size), ring=_ring_stand_in(),
            capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, num_warps=key.num_warps,
                    enable_fp_fusion=False, maxnreg=_DECODE_MAXNREG, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, slots, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        return LaunchSpec(
            grid=(slots.shape[0],),
            kwargs=dict(
                Key=key, Z=z, Slots=slots, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
                **stride_kwargs(key=key, z=z,
                                positions=positions, mean=mean),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, positions_dtype=positions.dtype, ring_base_dtype=ring_base.dtype,
                block_size=block_size, ring_capacity=capacity,
            ),
        )


from step5.ops._validate import check_decode_values, runs_on_host  # noqa: E402 - below the kernel


@public_call
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
    if runs_on_host(slots):
        check_decode_values(slots, positions, ring_base, mean, ring, capacity)
    if tokens:
        UpdateDecodeKernel()(key, z, slots, positions, ring_base, mean, ring, capacity)
