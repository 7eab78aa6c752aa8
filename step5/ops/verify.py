"""Step5 CSA region summaries, speculative verify: one program per request, its ``q``
tokens in position order; no host metadata (``docs/spec/step5-csa.md``)."""

from __future__ import annotations


import torch

from jitkern import LaunchSpec, Tensor, computed, dtype_of, fixed, kernel_launcher, public_call
from step5.ops.common import (DRAFT_TOKENS, NUM_WARPS, QUERY_START_LOC_DTYPES, RING_INDEX_DTYPES, SEQ_LENS_DTYPES,
                              SLOT_DTYPES, SummaryKernel, SummaryKey, stride_kwargs)
from step5.ops.kernels.verify import update_verify_kernel
from step5.ops.validate import VERIFY


class UpdateVerifyKernel(SummaryKernel):
    name = "step5.update_verify"
    kernel = update_verify_kernel
    compile_cost = 1.3  # seconds a key on our CPU machine: the slowest to compile
    arguments = VERIFY
    # Four requests of q tokens. The index tensors' sizes vary together (tokens = q * requests,
    # which the key's q depends on) and reach the kernel only as n_tokens, which is not
    # specialised: their stand-ins keep one size.
    stand_ins = dict(**SummaryKernel.stand_ins, slots=Tensor((lambda key: 4 * key.query_len,), varying=()),
                     query_start_loc=Tensor((5,), varying=()), seq_lens=Tensor((4,), varying=()),
                     ring_base=Tensor((lambda key: 4 * key.query_len,), varying=()))

    class CompileKey(SummaryKey):
        query_len: int = computed(lambda slots, seq_lens: slots.shape[0] // seq_lens.shape[0], constexpr="Q",
                                  warm=DRAFT_TOKENS)  # q = 1 + draft tokens
        slots_dtype: str = dtype_of("slots", warm=SLOT_DTYPES)
        query_start_loc_dtype: str = dtype_of("query_start_loc", warm=QUERY_START_LOC_DTYPES)
        seq_lens_dtype: str = dtype_of("seq_lens", warm=SEQ_LENS_DTYPES)
        ring_base_dtype: str = dtype_of("ring_base", warm=RING_INDEX_DTYPES)
        num_warps: int = fixed(NUM_WARPS, option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring,
                 capacity: int) -> LaunchSpec:
        return LaunchSpec(grid=(seq_lens.shape[0],), kwargs=dict(
            Key=key, Z=z, Slots=slots, QueryStartLoc=query_start_loc, SeqLens=seq_lens, RingBase=ring_base, Mean=mean,
            Ring=ring, n_tokens=slots.shape[0], **stride_kwargs(key=key, z=z, mean=mean)))


@public_call(op="step5::update_verify", mutates=["mean", "ring"])
def update_verify(key: torch.Tensor, z: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                  seq_lens: torch.Tensor, ring_base: torch.Tensor, mean: torch.Tensor, ring: torch.Tensor,
                  capacity: int) -> None:
    """Speculative verify: ``q = tokens // requests`` tokens per request at positions
    ``seq_lens[r] - q .. seq_lens[r] - 1``. No host metadata, no sync, no allocation:
    capturable in a CUDA graph."""
    if VERIFY.check(locals()).requests:
        UpdateVerifyKernel()(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
