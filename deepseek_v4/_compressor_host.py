"""Host side of the window compressor that needs no kernel: the tiling of a launch (from
the ratio and head size) and the checks of ``compress_windows``' arguments."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jitkern.kernel.grid import cdiv, next_power_of_2
from jitkern.kernel.validation import check_int, check_strides_below_i32
from deepseek_v4.common import (
    INDEX_DTYPES,
    LAYOUTS,
    check_float_tensor,
    check_index_tensor,
    check_same_device,
    dtype_name,
    layout_of,
)

_INDEX_DTYPES = tuple(INDEX_DTYPES.values())


@dataclass(frozen=True)
class Tiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    scan: int  # tokens a program can scan: 1 = one program per token
    block_d: int  # columns per step (a rows x block_d tile)
    program_d: int  # columns per program (a multiple of block_d): cdiv(head_dim, program_d) programs per chunk
    num_warps: int


def _tiling(compress_ratio: int, head_dim: int) -> Tiling:
    """How a window is split, from the H200 sweep (device notes 6 and 7).

    Ratio 4 reads 8 rows: one program per token takes the whole head in one step, a warp
    per 128 columns (head 512: 0.92 of copy at 64K tokens and 5.5 us at 1024; one warp
    walking 128 columns at a time reaches 0.95 at 64K but takes 10 us at 1024). Ratio
    128 reads 128 rows: 4-warp programs of 32-column steps, each owning a group of up to
    128 columns and scanning up to 128 tokens for window ends (head 512: 0.84 at 64K;
    64-column steps, 8 warps, one step per program: 0.56).
    """
    if LAYOUTS[compress_ratio].overlap:
        block_d = min(next_power_of_2(head_dim), 512)
        return Tiling(scan=1, block_d=block_d, program_d=block_d * cdiv(head_dim, block_d),
                      num_warps=max(1, block_d // 128))
    block_d = min(next_power_of_2(head_dim), 32)
    program_d = min(128, max(block_d, next_power_of_2(head_dim) // 2))
    return Tiling(scan=compress_ratio, block_d=block_d, program_d=program_d, num_warps=4)


def check_compress_windows(state_cache, block_table, positions, req_indices, out, compress_ratio: int,
                           head_dim: int, block_size: int, max_position: int | None) -> torch.device:
    """``compress_windows``' argument checks (values too, on the CPU); returns the device."""
    layout = layout_of(compress_ratio)
    check_int("head_dim", head_dim, minimum=1)
    check_int("block_size", block_size, minimum=1)
    if max_position is not None:
        check_int("max_position", max_position, minimum=0)
    check_float_tensor("state_cache", state_cache, 3)
    check_float_tensor("out", out, 2, written=True)
    check_index_tensor("positions", positions, _INDEX_DTYPES)
    check_index_tensor("req_indices", req_indices, _INDEX_DTYPES)
    if not isinstance(block_table, torch.Tensor):
        raise ValueError(f"block_table: expected a torch.Tensor, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise ValueError(
            f"block_table: must be int32 [requests, max_blocks], got {dtype_name(block_table.dtype)} "
            f"{tuple(block_table.shape)}"
        )
    if block_table.shape[1] > 1 and block_table.stride(1) != 1:
        raise ValueError(f"block_table: rows must be contiguous, got strides {block_table.stride()}")
    check_strides_below_i32("block_table", block_table)
    device = check_same_device(
        state_cache=state_cache, block_table=block_table, positions=positions, req_indices=req_indices, out=out
    )
    width = layout.state_width(head_dim)
    tokens = positions.shape[0]
    if state_cache.shape[1] != block_size:
        raise ValueError(f"state_cache: dim 1 is {state_cache.shape[1]}, expected block_size={block_size}")
    if state_cache.shape[2] < 2 * width:
        raise ValueError(
            f"state_cache: last dim {state_cache.shape[2]} < 2W = {2 * width} for head_dim={head_dim} "
            f"at ratio {compress_ratio}"
        )
    if req_indices.shape[0] != tokens:
        raise ValueError(f"req_indices: {req_indices.shape[0]} tokens, positions has {tokens}")
    if out.shape[0] != tokens or out.shape[1] < head_dim:
        raise ValueError(f"out: shape {tuple(out.shape)}, expected [{tokens}, >= head_dim={head_dim}]")
    if max_position is not None and max_position // block_size >= block_table.shape[1]:
        raise ValueError(
            f"block_table: {block_table.shape[1]} blocks of {block_size} cannot hold max_position={max_position}"
        )
    if device.type == "cpu" and tokens:
        _check_values_on_host(state_cache, block_table, positions, req_indices, compress_ratio, block_size)
    return device


def _check_values_on_host(state_cache, block_table, positions, req_indices, compress_ratio, block_size) -> None:
    """Checks that need the values: free on the CPU, a device sync on a GPU."""
    closing = (positions + 1) % compress_ratio == 0
    if int(positions.min()) < 0:
        raise ValueError("positions: must be >= 0")
    if not bool(closing.any()):
        return
    requests = req_indices[closing].long()
    if int(requests.min()) < 0 or int(requests.max()) >= block_table.shape[0]:
        raise ValueError(f"req_indices: a closing token's request is outside [0, {block_table.shape[0]})")
    last_block = positions[closing].long() // block_size
    if int(last_block.max()) >= block_table.shape[1]:
        raise ValueError(
            f"block_table: {block_table.shape[1]} blocks of {block_size} are too short for position "
            f"{int(positions[closing].max())}"
        )
    window = 2 * compress_ratio if LAYOUTS[compress_ratio].overlap else compress_ratio
    first_block = (positions[closing].long() - window + 1).clamp(min=0) // block_size
    columns = torch.arange(block_table.shape[1], device=block_table.device)
    used = (columns >= first_block[:, None]) & (columns <= last_block[:, None])
    blocks = block_table[requests][used]
    if int(blocks.min()) < 0 or int(blocks.max()) >= state_cache.shape[0]:
        raise ValueError(f"block_table: a block a window reads is outside the cache's [0, {state_cache.shape[0]})")
