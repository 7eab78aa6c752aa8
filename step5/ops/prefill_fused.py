"""Step5 CSA region summaries, prefill in two launches instead of four for steps of 256+
tokens, both with PDL where the GPU has it (``docs/spec/step5-csa.md``, "Prefill in two launches")."""

from __future__ import annotations

from typing import Any

import torch

from jitkern import LaunchSpec, argument, cdiv, dtype_of, fixed, kernel_launcher
from jitkern.kernel.validation import device_has_pdl, use_gdc
from step5.ops.common import (NUM_WARPS, OWNER_DTYPES, PDL_CHOICES, POSITION_DTYPES, PREFILL_MAXNREG,
                              QUERY_START_LOC_DTYPES, RING_INDEX_DTYPES, SLOT_DTYPES, Step5Kernel, SummaryKernel,
                              SummaryKey, prefill_metadata_geometry, stride_kwargs)
from step5.ops.validate import BUILD, UPDATE
from step5.ops.kernels.prefill_fused import build_prefill_groups_filled_kernel, prefill_update_kernel

_ROWS = 32  # group rows (and request rows) per program of the filled build: its 256 tokens
_HALO = 256  # tokens before a program's own that may land in its rows: 8 * (requests - 1)
MAX_REQUESTS = 1 + _HALO // 8  # 33: the most requests the filled build takes
MIN_TOKENS = 256  # steps below this keep the three launches (see ``two_launches``)
LAUNCH_PDL = True  # launch both kernels with PDL where the GPU has it (False: plain launches, to compare)


def two_launches(tokens: int, requests: int) -> bool:
    """Whether a step of ``tokens`` tokens and ``requests`` requests takes this path, from
    shapes only: at most ``MAX_REQUESTS`` requests (the filled build's halo); below
    ``MIN_TOKENS`` tokens the three launches stay (``tests/step5/test_schedule.py`` pins them)."""
    return tokens >= MIN_TOKENS and 1 <= requests <= MAX_REQUESTS


def launch_pdl(device: torch.device) -> bool:
    """PDL for launches on ``device`` where the GPU has it (``device_has_pdl``), ``LAUNCH_PDL`` permitting."""
    return LAUNCH_PDL and device_has_pdl(device)


def launched_on_its_gpu(kernel: Any, key: Any, target: Any) -> bool:  # the PDL variant launch_pdl picks there
    return key.launch_pdl == (LAUNCH_PDL and target.gpu_has_pdl)


class BuildFilledPrefillGroupsKernel(Step5Kernel):  # the filled build: every metadata row written by the kernel
    name = "step5.build_prefill_groups_filled"
    kernel = build_prefill_groups_filled_kernel
    arguments = BUILD
    launched_on = launched_on_its_gpu

    class CompileKey:  # index dtypes, and PDL or not (PDL on GPUs that have it, plain elsewhere)
        slots_dtype: str = dtype_of("slots", warm=SLOT_DTYPES)
        positions_dtype: str = dtype_of("positions", warm=POSITION_DTYPES)
        owners_dtype: str = dtype_of("owners", warm=OWNER_DTYPES)
        query_start_loc_dtype: str = dtype_of("query_start_loc", warm=QUERY_START_LOC_DTYPES)
        launch_pdl: bool = argument("launch_pdl", option="launch_pdl", warm=PDL_CHOICES)
        num_warps: int = fixed(8, option="num_warps")  # 1.41 / 3.52 us at 8K / 256K tokens, 1.72 / 4.24 at 4

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return {**super().constants(key), "ROWS": _ROWS, "HALO": _HALO, "USE_GDC": use_gdc(key.launch_pdl)}

    @kernel_launcher
    def __call__(self, compile_key, slots, positions, owners, query_start_loc, out, launch_pdl: bool = False) -> LaunchSpec:
        n_tokens = slots.shape[0]
        requests = query_start_loc.shape[0] - 1
        n_groups = n_tokens // 8 + requests
        return LaunchSpec(
            grid=(cdiv(n_groups, _ROWS),),  # n_groups >= requests: every request row is owned too
            kwargs=dict(Slots=slots, Positions=positions, Owners=owners, QueryStartLoc=query_start_loc, Groups=out,
                        n_tokens=n_tokens, n_groups=n_groups, n_requests=requests, **stride_kwargs(positions=positions)),
            result=out)


class PrefillUpdateKernel(SummaryKernel):  # summaries and ring writes in one launch
    name = "step5.prefill_update"
    kernel = prefill_update_kernel
    compile_cost = 2.0  # seconds a key on our CPU machine, about: 1.7x the summary kernel's in a serial warmup
    maxnreg = PREFILL_MAXNREG
    arguments = UPDATE
    launched_on = launched_on_its_gpu

    class CompileKey(SummaryKey):  # positions and ring metadata dtypes, and PDL or not (PDL on GPUs that have it)
        positions_dtype: str = dtype_of("positions", warm=POSITION_DTYPES)
        ring_base_dtype: str = dtype_of("ring_base", warm=RING_INDEX_DTYPES)
        ring_slots_dtype: str = dtype_of("ring_slots", warm=RING_INDEX_DTYPES)
        launch_pdl: bool = argument("launch_pdl", option="launch_pdl", warm=PDL_CHOICES)
        num_warps: int = fixed(NUM_WARPS, option="num_warps")

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return {**super().constants(key), "USE_GDC": use_gdc(key.launch_pdl)}

    @kernel_launcher
    def __call__(self, compile_key, key, z, metadata, positions, ring_base, ring_slots, mean, ring, capacity: int,
                 launch_pdl: bool = False) -> LaunchSpec:
        n_groups, requests = prefill_metadata_geometry(key.shape[0], metadata.shape[0])
        return LaunchSpec(grid=(requests + n_groups,), kwargs=dict(
            Key=key, Z=z, Groups=metadata, Positions=positions, RingBase=ring_base, RingSlots=ring_slots, Mean=mean,
            Ring=ring, **stride_kwargs(key=key, z=z, positions=positions, mean=mean), n_groups=n_groups,
            n_requests=requests))
