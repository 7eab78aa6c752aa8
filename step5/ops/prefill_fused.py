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
(``two_launches``); the decision reads only shapes. The kernels' Triton source:
``step5.ops.kernels.prefill_fused``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton

from jitkern import LaunchSpec, TritonJitKernel, kernel_launcher, keys
from jitkern.kernel.validation import INDEX_DTYPES_BY_NAME, device_has_pdl, dtype_name, use_gdc
from step5.ops.common import (FIXED_STRIDES, NUM_WARPS, PREFILL_MAXNREG, check_deployment, index_stand_in,
                              mean_stand_in, prefill_metadata_geometry, ring_stand_in, row_stand_ins, stride_kwargs,
                              target_paths)
from step5.ops.kernels.prefill_fused import build_prefill_groups_filled_kernel, prefill_update_kernel
from step5.ops.validate import SIZE_LIMIT

_ROWS = 32  # group rows (and request rows) per program of the filled build: its 256 tokens
_HALO = 256  # tokens before a program's own that may land in its rows: 8 * (requests - 1)
MAX_REQUESTS = 1 + _HALO // 8  # 33: the most requests the filled build takes
MIN_TOKENS = 256  # steps below this keep the three launches (see ``two_launches``)
LAUNCH_PDL = True  # launch both kernels with PDL where the GPU has it (False: plain launches, to compare)


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
    """PDL for launches on ``device``: NVIDIA sm_90 and newer (``device_has_pdl``),
    ``LAUNCH_PDL`` permitting."""
    return LAUNCH_PDL and device_has_pdl(device)


# --- the filled build: every metadata row written by the kernel ------------------------------


class BuildFilledPrefillGroupsKernel(TritonJitKernel["BuildFilledPrefillGroupsKernel.CompileKey"]):
    name = "step5.build_prefill_groups_filled"
    kernel = build_prefill_groups_filled_kernel
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        slots_dtype: str
        positions_dtype: str
        owners_dtype: str
        query_start_loc_dtype: str
        launch_pdl: bool
        num_warps: int = 8  # 1.41 / 3.52 us at 8K / 256K tokens, 1.72 / 4.24 at 4 (profile_step5.py prefill)

    def dispatch(self, *, slots_dtype, positions_dtype, owners_dtype, query_start_loc_dtype,
                 launch_pdl: bool) -> CompileKey:
        return self.CompileKey(
            slots_dtype=dtype_name(slots_dtype), positions_dtype=dtype_name(positions_dtype),
            owners_dtype=dtype_name(owners_dtype), query_start_loc_dtype=dtype_name(query_start_loc_dtype),
            launch_pdl=launch_pdl,
        )

    def get_warmup_keys(
        self, *, slot_dtypes: list[str] = ["int64"], position_dtypes: list[str] = ["int64"],
        owner_dtypes: list[str] = ["int32"], query_start_loc_dtypes: list[str] = ["int32"],
        launch_pdl: list[bool] = [False, True],
    ) -> list[CompileKey]:
        """Index dtypes, and PDL or not (PDL on GPUs that have it, plain elsewhere)."""
        check_deployment(slot_dtypes=slot_dtypes, position_dtypes=position_dtypes, owner_dtypes=owner_dtypes,
                         query_start_loc_dtypes=query_start_loc_dtypes)
        rows = keys.product(
            slots_dtype=slot_dtypes, positions_dtype=position_dtypes, owners_dtype=owner_dtypes,
            query_start_loc_dtype=query_start_loc_dtypes, launch_pdl=launch_pdl,
        )
        return keys.unique_keys(
            lambda launch_pdl, **row: self.dispatch(launch_pdl=launch_pdl,
                                                    **{k: INDEX_DTYPES_BY_NAME[v] for k, v in row.items()}), rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            slots=index_stand_in(key.slots_dtype), positions=index_stand_in(key.positions_dtype),
            owners=index_stand_in(key.owners_dtype), query_start_loc=index_stand_in(key.query_start_loc_dtype),
            groups=index_stand_in("int32", (16, 3)), launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(ROWS=_ROWS, HALO=_HALO, USE_GDC=use_gdc(key.launch_pdl), num_warps=key.num_warps,
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


# --- summaries and ring writes in one launch ---------------------------------------------------


class PrefillUpdateKernel(TritonJitKernel["PrefillUpdateKernel.CompileKey"]):
    name = "step5.prefill_update"
    kernel = prefill_update_kernel
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
        num_warps: int = NUM_WARPS

    def dispatch(self, *, positions_dtype, ring_base_dtype, ring_slots_dtype, block_size, ring_capacity,
                 launch_pdl: bool) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, positions_dtype=dtype_name(positions_dtype),
            ring_base_dtype=dtype_name(ring_base_dtype), ring_slots_dtype=dtype_name(ring_slots_dtype),
            launch_pdl=launch_pdl,
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, position_dtypes: list[str] = ["int64"],
        ring_index_dtypes: list[str] = ["int32"], launch_pdl: list[bool] = [False, True],
    ) -> list[CompileKey]:
        """Positions and ring metadata dtypes, and PDL or not (PDL on GPUs that have it)."""
        check_deployment(block_size=block_size, ring_capacity=ring_capacity, position_dtypes=position_dtypes,
                         ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes,
                            ring_slots_dtype=ring_index_dtypes, launch_pdl=launch_pdl)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = row_stand_ins()
        return dict(
            key=k, z=z, groups=index_stand_in("int32", (16, 3)), positions=index_stand_in(key.positions_dtype),
            ring_base=index_stand_in(key.ring_base_dtype), ring_slots=index_stand_in(key.ring_slots_dtype),
            mean=mean_stand_in(key.block_size), ring=ring_stand_in(), capacity=key.ring_capacity,
            launch_pdl=key.launch_pdl,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, USE_GDC=use_gdc(key.launch_pdl),
                    num_warps=key.num_warps, enable_fp_fusion=False, maxnreg=PREFILL_MAXNREG,
                    launch_pdl=key.launch_pdl, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, ring_slots, mean, ring, capacity: int,
                 launch_pdl: bool = False) -> LaunchSpec:
        n_groups, requests = prefill_metadata_geometry(key.shape[0], groups.shape[0])
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
