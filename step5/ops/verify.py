"""Step5 CSA region summaries, speculative verify: one program per request, its ``q``
tokens in position order; no host metadata (``spec/step5-csa.md``)."""

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
    _region_row,
    _ring_row,
    _row_pointers,
    _store_summary,
    _summarize_region,
    target_paths,
)
from step5.ops._validate import SIZE_LIMIT, check_index, check_mean, check_ring, check_rows, check_same_device


@triton.jit(
    do_not_specialize=["n_tokens"],
    do_not_specialize_on_alignment=["Slots", "QueryStartLoc", "SeqLens", "RingBase"],
)
def _update_verify_kernel(
    Key, Z, Slots, QueryStartLoc, SeqLens, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, n_tokens, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, Q: tl.constexpr, NVIDIA: tl.constexpr,
    HW_FP8: tl.constexpr,
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
                rows += _region_row(Key, Z, Ring, token, base, ring_first, i, 7 - j, dim, *strides,
                                    RING_CAPACITY, NVIDIA)
            key_ptr, z_ptr = _row_pointers(Key, Z, token, dim, *strides)
            rows += (tl.load(key_ptr), tl.load(z_ptr))
            _loads_issued(slot.to(tl.int32), NVIDIA)  # all 16 row loads in flight at once
            num, den = _summarize_region(*rows, NVIDIA=NVIDIA)
            _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE, HW_FP8)
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
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, slots_dtype, query_start_loc_dtype, seq_lens_dtype, ring_base_dtype,
                 block_size, ring_capacity, query_len) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, query_len=query_len,
            slots_dtype=_dtype_name(slots_dtype), query_start_loc_dtype=_dtype_name(query_start_loc_dtype),
            seq_lens_dtype=_dtype_name(seq_lens_dtype), ring_base_dtype=_dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, draft_tokens: int, slot_dtypes: list[str] = ["int64"],
        query_start_loc_dtypes: list[str] = ["int32"], seq_lens_dtypes: list[str] = ["int32"],
        ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """``draft_tokens`` is k: every verify step carries q = 1 + k tokens per request."""
        _check_deployment(block_size=block_size, ring_capacity=ring_capacity, draft_tokens=draft_tokens,
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
        k, z = _row_stand_ins()
        return dict(
            key=k, z=z, slots=_index(key.slots_dtype, (4 * key.query_len,), varying=()),
            query_start_loc=_index(key.query_start_loc_dtype, (5,), varying=()),
            seq_lens=_index(key.seq_lens_dtype, (4,), varying=()),
            ring_base=_index(key.ring_base_dtype, (4 * key.query_len,), varying=()),
            mean=_mean_stand_in(key.block_size), ring=_ring_stand_in(), capacity=key.ring_capacity,
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


from step5.ops._validate import check_verify_values, runs_on_host  # noqa: E402 - below the kernel


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
    check_same_device(key=key, z=z, slots=slots, query_start_loc=query_start_loc, seq_lens=seq_lens,
                      ring_base=ring_base, mean=mean, ring=ring)
    if runs_on_host(slots):
        check_verify_values(slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
    if requests:
        UpdateVerifyKernel()(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity)
