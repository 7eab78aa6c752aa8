"""Step5 CSA region summaries, decode: one program per token, one token per request
(``docs/spec/step5-csa.md``, "The three update paths")."""

from __future__ import annotations


import torch

from jitkern import LaunchSpec, dtype_of, fixed, kernel_launcher, public_call
from step5.ops.common import (NUM_WARPS, POSITION_DTYPES, RING_INDEX_DTYPES, SLOT_DTYPES, SummaryKernel, SummaryKey,
                              stride_kwargs)
from step5.ops.kernels.decode import update_decode_kernel
from step5.ops.validate import DECODE


class UpdateDecodeKernel(SummaryKernel):
    name = "step5.update_decode"
    kernel = update_decode_kernel
    compile_cost = 0.6  # seconds a key on our CPU machine
    maxnreg = 200  # ptxas issues all 14 ring loads at once (spec, "Register caps")
    arguments = DECODE

    class CompileKey(SummaryKey):
        slots_dtype: str = dtype_of("slots", warm=SLOT_DTYPES)
        positions_dtype: str = dtype_of("positions", warm=POSITION_DTYPES)
        ring_base_dtype: str = dtype_of("ring_base", warm=RING_INDEX_DTYPES)
        num_warps: int = fixed(NUM_WARPS, option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, key, z, slots, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        return LaunchSpec(grid=(slots.shape[0],), kwargs=dict(
            Key=key, Z=z, Slots=slots, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
            **stride_kwargs(key=key, z=z, positions=positions, mean=mean)))


@public_call(op="step5::update_decode", mutates=["mean", "ring"])
def update_decode(key: torch.Tensor, z: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                  ring_base: torch.Tensor, mean: torch.Tensor, ring: torch.Tensor, capacity: int) -> None:
    """One token per request: a closing token summarizes its region (7 ring rows + its own);
    any other token stores its ``[key | z]`` row in the ring. Slot or base -1: skipped."""
    DECODE.check(locals())
    if key.shape[0]:
        UpdateDecodeKernel()(key, z, slots, positions, ring_base, mean, ring, capacity)
