"""Step5 CSA region summaries, prefill (``spec/step5-csa.md``).

``build_prefill_groups`` lists, on the device, the closing tokens of the step (int32
``[token, slot, ring rows]``, at most ``tokens // 8 + requests`` groups, 1.5 bytes a token)
and each request's last tokens; ``update_prefill`` then summarizes one region per program,
and only after that stores open-region rows (one program per request), so every ring read
of the step precedes its writes. The kernels' Triton source: ``step5.ops.kernels.prefill``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from jitkern import LaunchSpec, TritonJitKernel, cdiv, kernel_launcher, keys, public_call, torch_step
from jitkern.kernel.validation import INDEX_DTYPES_BY_NAME, dtype_name, runs_on_host, same_device
from step5.ops import prefill_fused
from step5.ops.common import (FIXED_STRIDES, NUM_WARPS, PREFILL_MAXNREG, check_deployment, index_stand_in,
                              mean_stand_in, prefill_metadata_geometry, ring_stand_in, row_stand_ins, stride_kwargs,
                              target_paths)
from step5.ops.kernels.prefill import build_prefill_groups_kernel, prefill_summary_kernel, write_ring_kernel
from step5.ops.validate import (SIZE_LIMIT, check_build_values, check_index, check_mean, check_out,
                                check_prefill_values, check_ring, check_rows)

_GROUP_BUILD_TOKENS = 256  # tokens per program of build_prefill_groups
_GROUP_FILL_ROWS = 1024  # rows of the one program that writes -1 to every row itself
GROUP_COLUMNS = 3  # prefill metadata row: [closing token, its KV slot, rows taken from the ring]


# --- prefill, step 1: the step's closing tokens, listed on the device ---------------------


def one_program(tokens: int, rows: int) -> bool:
    """Whether ``build_prefill_groups`` of ``tokens`` tokens into ``rows`` metadata rows is
    one program, which writes -1 to every row itself before its entries (the small steps
    of mixed decode and prefill); otherwise torch fills the rows first."""
    return tokens <= _GROUP_BUILD_TOKENS and rows <= _GROUP_FILL_ROWS


class BuildPrefillGroupsKernel(TritonJitKernel["BuildPrefillGroupsKernel.CompileKey"]):
    name = "step5.build_prefill_groups"
    kernel = build_prefill_groups_kernel
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
            slots_dtype=dtype_name(slots_dtype), positions_dtype=dtype_name(positions_dtype),
            owners_dtype=dtype_name(owners_dtype), query_start_loc_dtype=dtype_name(query_start_loc_dtype),
        )

    def get_warmup_keys(
        self, *, slot_dtypes: list[str] = ["int64"], position_dtypes: list[str] = ["int64"],
        owner_dtypes: list[str] = ["int32"], query_start_loc_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        """Sizes and the positions stride are not specialised: only index dtypes select a binary."""
        check_deployment(slot_dtypes=slot_dtypes, position_dtypes=position_dtypes, owner_dtypes=owner_dtypes,
                         query_start_loc_dtypes=query_start_loc_dtypes)
        rows = keys.product(
            slots_dtype=slot_dtypes, positions_dtype=position_dtypes, owners_dtype=owner_dtypes,
            query_start_loc_dtype=query_start_loc_dtypes,
        )
        return keys.unique_keys(
            lambda **row: self.dispatch(**{k: INDEX_DTYPES_BY_NAME[v] for k, v in row.items()}), rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            slots=index_stand_in(key.slots_dtype), positions=index_stand_in(key.positions_dtype),
            owners=index_stand_in(key.owners_dtype), query_start_loc=index_stand_in(key.query_start_loc_dtype),
            groups=index_stand_in("int32", (16, 3)),
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


class PrefillSummaryKernel(TritonJitKernel["PrefillSummaryKernel.CompileKey"]):
    name = "step5.prefill_summary"
    kernel = prefill_summary_kernel
    compile_cost = 1.2  # seconds a key on our CPU machine: among the slowest to compile
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        block_size: int
        ring_capacity: int
        positions_dtype: str
        ring_base_dtype: str
        num_warps: int = NUM_WARPS

    def dispatch(self, *, positions_dtype, ring_base_dtype, block_size, ring_capacity) -> CompileKey:
        return self.CompileKey(
            block_size=block_size, ring_capacity=ring_capacity, positions_dtype=dtype_name(positions_dtype),
            ring_base_dtype=dtype_name(ring_base_dtype),
        )

    def get_warmup_keys(
        self, *, block_size: int, ring_capacity: int, position_dtypes: list[str] = ["int64"],
        ring_index_dtypes: list[str] = ["int32"],
    ) -> list[CompileKey]:
        check_deployment(block_size=block_size, ring_capacity=ring_capacity, position_dtypes=position_dtypes,
                         ring_index_dtypes=ring_index_dtypes)
        rows = keys.product(positions_dtype=position_dtypes, ring_base_dtype=ring_index_dtypes)
        return keys.unique_keys(
            lambda **row: self.dispatch(block_size=block_size, ring_capacity=ring_capacity, **row), rows,
        )

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = row_stand_ins()
        return dict(
            key=k, z=z, groups=index_stand_in("int32", (16, 3)), positions=index_stand_in(key.positions_dtype),
            ring_base=index_stand_in(key.ring_base_dtype), mean=mean_stand_in(key.block_size), ring=ring_stand_in(),
            capacity=key.ring_capacity,
        )

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(BLOCK_SIZE=key.block_size, RING_CAPACITY=key.ring_capacity, num_warps=key.num_warps,
                    enable_fp_fusion=False, maxnreg=PREFILL_MAXNREG, **target_paths(key.num_warps))

    @kernel_launcher
    def __call__(self, key, z, groups, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        block_size = mean.shape[1] * 8
        n_groups, _ = prefill_metadata_geometry(key.shape[0], groups.shape[0])
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


class WriteRingKernel(TritonJitKernel["WriteRingKernel.CompileKey"]):
    name = "step5.write_ring"
    kernel = write_ring_kernel
    fixed_strides = FIXED_STRIDES
    size_limit = SIZE_LIMIT

    @dataclass(frozen=True)
    class CompileKey:
        ring_slots_dtype: str
        num_warps: int = 1

    def dispatch(self, *, ring_slots_dtype) -> CompileKey:
        return self.CompileKey(ring_slots_dtype=dtype_name(ring_slots_dtype))

    def get_warmup_keys(self, *, ring_index_dtypes: list[str] = ["int32"]) -> list[CompileKey]:
        check_deployment(ring_index_dtypes=ring_index_dtypes)
        return keys.unique_keys(self.dispatch, keys.product(ring_slots_dtype=ring_index_dtypes))

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        k, z = row_stand_ins()
        return dict(key=k, z=z, metadata=index_stand_in("int32", (16, 3)),
                    ring_slots=index_stand_in(key.ring_slots_dtype), ring=ring_stand_in())

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(num_warps=key.num_warps)

    @kernel_launcher
    def __call__(self, key, z, metadata, ring_slots, ring) -> LaunchSpec:
        n_groups, requests = prefill_metadata_geometry(ring_slots.shape[0], metadata.shape[0])
        return LaunchSpec(
            grid=(requests,),
            kwargs=dict(
                Key=key, Z=z, Metadata=metadata, RingSlots=ring_slots, Ring=ring,
                **stride_kwargs(key=key, z=z),
                n_groups=n_groups,
            ),
            key=self.dispatch(ring_slots_dtype=ring_slots.dtype),
        )


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
    faster than a tuple (2.2 against 3.5 us on the H200's host: ``benchmarks/device/alloc_probe.py``).
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
    device = same_device(slots=slots, positions=positions, owners=owners, query_start_loc=query_start_loc)
    if runs_on_host(slots):
        check_build_values(slots, positions, query_start_loc)
    requests = query_start_loc.shape[0] - 1
    shape = (tokens // 8 + 2 * requests, GROUP_COLUMNS)
    if out is not None:
        check_out("out", out, torch.int32, shape, device, "[tokens // 8 + 2 * requests, 3]")
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
    same_device(key=key, z=z, metadata=metadata, positions=positions, ring_base=ring_base,
                ring_slots=ring_slots, mean=mean, ring=ring)
    n_groups, requests = prefill_metadata_geometry(tokens, metadata.shape[0])
    if runs_on_host(metadata):
        check_prefill_values(metadata, positions, ring_base, ring_slots, mean, ring, capacity, n_groups)
    if prefill_fused.two_launches(tokens, requests):
        prefill_fused.PrefillUpdateKernel()(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity,
                                            prefill_fused.launch_pdl(key.device))
        return
    if tokens and n_groups:
        PrefillSummaryKernel()(key, z, metadata, positions, ring_base, mean, ring, capacity)
    if tokens and requests:
        WriteRingKernel()(key, z, metadata, ring_slots, ring)
