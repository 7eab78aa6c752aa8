"""Step5 CSA region summaries, prefill: the step's closing tokens listed on the device, then
a program per closed region, then the ring writes (``docs/spec/step5-csa.md``, "The three update paths")."""

from __future__ import annotations

from typing import Any

import torch

from jitkern import LaunchSpec, cdiv, dtype_of, fixed, kernel_launcher, public_call, torch_step
from jitkern.kernel.arguments import describe
from jitkern.kernel.validation import runs_on_host
from step5.ops import prefill_fused
from step5.ops.common import (NUM_WARPS, OWNER_DTYPES, POSITION_DTYPES, PREFILL_MAXNREG, QUERY_START_LOC_DTYPES,
                              RING_INDEX_DTYPES, SLOT_DTYPES, Step5Kernel, SummaryKernel, SummaryKey,
                              prefill_metadata_geometry, stride_kwargs)
from step5.ops.kernels.prefill import build_prefill_groups_kernel, prefill_summary_kernel, write_ring_kernel
from step5.ops.validate import BUILD, UPDATE, check_prefill_values

_GROUP_BUILD_TOKENS = 256  # tokens per program of build_prefill_groups
_GROUP_FILL_ROWS = 1024  # rows of the one program that writes -1 to every row itself
GROUP_COLUMNS = 3  # prefill metadata row: [closing token, its KV slot, rows taken from the ring]


# --- prefill, step 1: the step's closing tokens, listed on the device ---------------------


def one_program(tokens: int, rows: int) -> bool:
    """Whether ``build_prefill_groups`` of ``tokens`` tokens into ``rows`` metadata rows is
    one program, which writes -1 to every row itself before its entries (the small steps
    of mixed decode and prefill); otherwise torch fills the rows first."""
    return tokens <= _GROUP_BUILD_TOKENS and rows <= _GROUP_FILL_ROWS


class BuildPrefillGroupsKernel(Step5Kernel):
    name = "step5.build_prefill_groups"
    kernel = build_prefill_groups_kernel
    arguments = BUILD

    class CompileKey:  # sizes and the positions stride are not specialised: only index dtypes select a binary
        slots_dtype: str = dtype_of("slots", warm=SLOT_DTYPES)
        positions_dtype: str = dtype_of("positions", warm=POSITION_DTYPES)
        owners_dtype: str = dtype_of("owners", warm=OWNER_DTYPES)
        query_start_loc_dtype: str = dtype_of("query_start_loc", warm=QUERY_START_LOC_DTYPES)
        num_warps: int = fixed(4, option="num_warps")

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return {**super().constants(key), "BLOCK": _GROUP_BUILD_TOKENS, "FILL_ROWS": _GROUP_FILL_ROWS}

    @kernel_launcher
    def __call__(self, compile_key, slots, positions, owners, query_start_loc, out, fill: bool = False) -> LaunchSpec:
        """``fill``: one program writes every row of ``out``, -1 first (``one_program``
        steps, as the public function decides); else ``out`` must hold -1 already."""
        n_tokens = slots.shape[0]
        requests = query_start_loc.shape[0] - 1
        return LaunchSpec(
            grid=(1,) if fill else (cdiv(n_tokens, _GROUP_BUILD_TOKENS),),
            kwargs=dict(Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=out,
                        n_tokens=n_tokens, n_groups=n_tokens // 8 + requests, n_requests=requests,
                        positions_stride=positions.stride(0), fill_rows=out.shape[0] if fill else 0),
            result=out)


# --- prefill, step 2: one program per closed region ---------------------------------------


class PrefillSummaryKernel(SummaryKernel):
    name = "step5.prefill_summary"
    kernel = prefill_summary_kernel
    compile_cost = 1.2  # seconds a key on our CPU machine: among the slowest to compile
    maxnreg = PREFILL_MAXNREG
    arguments = UPDATE

    class CompileKey(SummaryKey):
        positions_dtype: str = dtype_of("positions", warm=POSITION_DTYPES)
        ring_base_dtype: str = dtype_of("ring_base", warm=RING_INDEX_DTYPES)
        num_warps: int = fixed(NUM_WARPS, option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, key, z, metadata, positions, ring_base, mean, ring, capacity: int) -> LaunchSpec:
        n_groups, _ = prefill_metadata_geometry(key.shape[0], metadata.shape[0])
        return LaunchSpec(grid=(n_groups,), kwargs=dict(
            Key=key, Z=z, Groups=metadata, Positions=positions, RingBase=ring_base, Mean=mean, Ring=ring,
            **stride_kwargs(key=key, z=z, positions=positions, mean=mean)))


# --- prefill, step 3: store the rows of regions still open --------------------------------


class WriteRingKernel(Step5Kernel):
    name = "step5.write_ring"
    kernel = write_ring_kernel
    arguments = UPDATE

    class CompileKey:
        ring_slots_dtype: str = dtype_of("ring_slots", warm=RING_INDEX_DTYPES)
        num_warps: int = fixed(1, option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, key, z, metadata, ring_slots, ring) -> LaunchSpec:
        n_groups, requests = prefill_metadata_geometry(ring_slots.shape[0], metadata.shape[0])
        return LaunchSpec(grid=(requests,), kwargs=dict(Key=key, Z=z, Metadata=metadata, RingSlots=ring_slots, Ring=ring,
                                                        **stride_kwargs(key=key, z=z), n_groups=n_groups))


@public_call(op="step5::build_prefill_groups", mutates=["out"], returns="out")
def build_prefill_groups(slots: torch.Tensor, positions: torch.Tensor, owners: torch.Tensor,
                         query_start_loc: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The step's closed regions, listed on the device with no host synchronisation: int32
    ``[tokens // 8 + 2 * requests, 3]`` rows (spec, "The three update paths"; -1 rows unused),
    into ``out`` when given, for ``update_prefill`` of the same step. Allocation and fill are
    ``torch_step``s, so that a planned call repeats them (``torch.empty`` of the sizes one by
    one: parsed faster than a tuple)."""
    checked = BUILD.check(locals())
    tokens, device = checked.tokens, checked.device
    if query_start_loc.shape[0] < 1:
        raise ValueError("query_start_loc: expected [requests + 1] cumulative token counts, got an empty tensor")
    requests = query_start_loc.shape[0] - 1
    shape = (tokens // 8 + 2 * requests, GROUP_COLUMNS)
    if out is not None and tuple(out.shape) != shape:
        raise ValueError(f"out: expected int32 [tokens // 8 + 2 * requests, 3] = {shape}, got {describe(out)}")
    fused, fill = prefill_fused.two_launches(tokens, requests), one_program(tokens, shape[0])
    if fused or fill:  # the kernel writes every row: no fill launch
        groups = out if out is not None else torch_step(torch.empty, *shape, dtype=torch.int32, device=device)
    else:
        groups = torch_step(torch.Tensor.fill_, out, -1) if out is not None else torch_step(
            torch.full, shape, -1, dtype=torch.int32, device=device)
    if fused:
        prefill_fused.BuildFilledPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups,
                                                      prefill_fused.launch_pdl(device))
    elif shape[0]:
        BuildPrefillGroupsKernel()(slots, positions, owners, query_start_loc, groups, fill=fill)
    return groups


@public_call(op="step5::update_prefill", mutates=["mean", "ring"])
def update_prefill(key: torch.Tensor, z: torch.Tensor, metadata: torch.Tensor, positions: torch.Tensor,
                   ring_base: torch.Tensor, ring_slots: torch.Tensor, mean: torch.Tensor, ring: torch.Tensor,
                   capacity: int) -> None:
    """Summarize the regions this step closes, then store open-region rows: every ring read
    of the step before its writes, in two launches or, for steps of
    ``prefill_fused.two_launches``, in one (spec, "Reads before writes"); the same bytes."""
    tokens = UPDATE.check(locals()).tokens
    n_groups, requests = prefill_metadata_geometry(tokens, metadata.shape[0])
    if runs_on_host(metadata):
        check_prefill_values(metadata, positions, mean, n_groups)
    if prefill_fused.two_launches(tokens, requests):
        prefill_fused.PrefillUpdateKernel()(key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity,
                                            prefill_fused.launch_pdl(key.device))
        return
    if tokens and n_groups:
        PrefillSummaryKernel()(key, z, metadata, positions, ring_base, mean, ring, capacity)
    if tokens and requests:
        WriteRingKernel()(key, z, metadata, ring_slots, ring)
