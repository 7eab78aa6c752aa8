"""Step5 CSA region summaries, decode: one program per token (one token per request)
(``spec/step5-csa.md``).

A closing token (position ``p % 8 == 7``) summarizes its region from 7 ring rows and its
own row; any other token stores its ``[key | z]`` row in the ring. The kernel's Triton
source: ``step5.ops.kernels.decode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jitkern import LaunchSpec, TritonJitKernel, kernel_launcher, keys, public_call
from jitkern.kernel.validation import dtype_name, runs_on_host, same_device
from step5.ops.common import (FIXED_STRIDES, NUM_WARPS, check_deployment, index_stand_in, mean_stand_in, ring_stand_in,
                              row_stand_ins, stride_kwargs, target_paths)
from step5.ops.kernels.decode import update_decode_kernel
from step5.ops.validate import SIZE_LIMIT, check_decode_values, check_index, check_mean, check_ring, check_rows

# ptxas register cap (None: ptxas decides). Decode is one wave of latency-bound programs:
# registers are free, and with the cap raised ptxas issues all 14 ring loads at once (at
# its own choice, 128, it consumes two rows before issuing the last loads). Measure it
# against prefill's (``step5.ops.common.PREFILL_MAXNREG``; profile_step5.py).
_DECODE_MAXNREG = 200


class UpdateDecodeKernel(TritonJitKernel["UpdateDecodeKernel.CompileKey"]):
    name = "step5.update_decode"
    kernel = update_decode_kernel
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
        num_warps: int = NUM_WARPS

    def dispatch(self, *, slots_dtype, positions_dtype, ring_base_dtype, block_size, ring_capacity) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, slots_dtype=dtype_name(slots_dtype),
            positions_dtype=dtype_name(positions_dtype), ring_base_dtype=dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, slot_dtypes: list[str] = ["int64"],
        position_dtypes: list[str] = ["int64"], ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """One key per index-dtype combination."""
        check_deployment(block_size=block_size, ring_capacity=ring_capacity, slot_dtypes=slot_dtypes,
                         position_dtypes=position_dtypes, ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(slots_dtype=slot_dtypes, positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = row_stand_ins()
        return dict(
            key=k, z=z, slots=index_stand_in(key.slots_dtype), positions=index_stand_in(key.positions_dtype),
            ring_base=index_stand_in(key.ring_base_dtype), mean=mean_stand_in(key.block_size), ring=ring_stand_in(),
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
    same_device(key=key, z=z, slots=slots, positions=positions, ring_base=ring_base, mean=mean, ring=ring)
    if runs_on_host(slots):
        check_decode_values(slots, positions, ring_base, mean, ring, capacity)
    if tokens:
        UpdateDecodeKernel()(key, z, slots, positions, ring_base, mean, ring, capacity)
