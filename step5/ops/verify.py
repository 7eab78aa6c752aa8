"""Step5 CSA region summaries, speculative verify: one program per request, its ``q``
tokens in position order; no host metadata (``spec/step5-csa.md``). The kernel's Triton
source: ``step5.ops.kernels.verify``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jitkern import LaunchSpec, TritonJitKernel, kernel_launcher, keys, public_call
from jitkern.kernel.validation import dtype_name, runs_on_host, same_device
from step5.ops.common import (FIXED_STRIDES, NUM_WARPS, check_deployment, index_stand_in, mean_stand_in, ring_stand_in,
                              row_stand_ins, stride_kwargs, target_paths)
from step5.ops.kernels.verify import update_verify_kernel
from step5.ops.validate import SIZE_LIMIT, check_index, check_mean, check_ring, check_rows, check_verify_values


class UpdateVerifyKernel(TritonJitKernel["UpdateVerifyKernel.CompileKey"]):
    name = "step5.update_verify"
    kernel = update_verify_kernel
    compile_cost = 1.3  # seconds a key on our CPU machine: the slowest to compile
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        query_len: int  # q = 1 + draft tokens
        slots_dtype: str
        query_start_loc_dtype: str
        seq_lens_dtype: str
        ring_base_dtype: str
        num_warps: int = NUM_WARPS

    def dispatch(self, *, slots_dtype, query_start_loc_dtype, seq_lens_dtype, ring_base_dtype,
                 block_size, ring_capacity, query_len) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, query_len=query_len,
            slots_dtype=dtype_name(slots_dtype), query_start_loc_dtype=dtype_name(query_start_loc_dtype),
            seq_lens_dtype=dtype_name(seq_lens_dtype), ring_base_dtype=dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, draft_tokens: int, slot_dtypes: list[str] = ["int64"],
        query_start_loc_dtypes: list[str] = ["int32"], seq_lens_dtypes: list[str] = ["int32"],
        ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """``draft_tokens`` is k: every verify step carries q = 1 + k tokens per request."""
        check_deployment(block_size=block_size, ring_capacity=ring_capacity, draft_tokens=draft_tokens,
                         slot_dtypes=slot_dtypes, query_start_loc_dtypes=query_start_loc_dtypes,
                         seq_lens_dtypes=seq_lens_dtypes, ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(
            slots_dtype=slot_dtypes, query_start_loc_dtype=query_start_loc_dtypes,
            seq_lens_dtype=seq_lens_dtypes, ring_base_dtype=ring_index_dtypes,
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(
                block_size=block_size, ring_capacity=ring_capacity, query_len=1 + draft_tokens, **row
            ),
            rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        """Four requests of q tokens. The index tensors' sizes vary together (tokens = q *
        requests, which the key's q depends on) and reach the kernel only as ``n_tokens``,
        which is not specialised: their stand-ins keep one size."""
        k, z = row_stand_ins()
        return dict(
            key=k, z=z, slots=index_stand_in(key.slots_dtype, (4 * key.query_len,), varying=()),
            query_start_loc=index_stand_in(key.query_start_loc_dtype, (5,), varying=()),
            seq_lens=index_stand_in(key.seq_lens_dtype, (4,), varying=()),
            ring_base=index_stand_in(key.ring_base_dtype, (4 * key.query_len,), varying=()),
            mean=mean_stand_in(key.block_size), ring=ring_stand_in(), capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, Q=key.query_len,
                    num_warps=key.num_warps, enable_fp_fusion=False, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        requests = seq_lens.shape[0]
        query_len = slots.shape[0] // requests
        return LaunchSpec(
            grid=(requests,),
            kwargs=dict(
                Key=key, Z=z, Slots=slots, QueryStartLoc=query_start_loc, SeqLens=seq_lens, RingBase=ring_base,
                Mean=mean, Ring=ring, n_tokens=slots.shape[0],
                **stride_kwargs(key=key, z=z, mean=mean),
            ),
            key=self.dispatch(
                slots_dtype=slots.dtype, query_start_loc_dtype=query_start_loc.dtype, seq_lens_dtype=seq_lens.dtype,
                ring_base_dtype=ring_base.dtype, block_size=block_size, ring_capacity=capacity,
                query_len=query_len,
            ),
        )


@public_call
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
    if not requests and tokens:  # nothing would launch: the tokens would be dropped
        raise ValueError(f"slots: {tokens} tokens, but seq_lens has no requests")
    if requests and tokens == 0:
        raise ValueError(f"key: no tokens for {requests} requests")
    check_mean(mean)
    check_ring(ring, capacity, draft_tokens=tokens // requests - 1 if requests else 0)
    same_device(key=key, z=z, slots=slots, query_start_loc=query_start_loc, seq_lens=seq_lens,
                ring_base=ring_base, mean=mean, ring=ring)
    if runs_on_host(slots):
        check_verify_values(slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
    if requests:
        UpdateVerifyKernel()(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
