"""The window compressor: each closed window's rows -> one float32 compressed entry
(``docs/spec/deepseek-v4-compressor.md``, "The compressor"; its notes say why ratio 128 scans chunks)."""

from __future__ import annotations


import torch

from jitkern import LaunchSpec, argument, derived, dtype_of, kernel_launcher, launch_stride, public_call
from jitkern.kernel.arguments import Arg, Arguments, Within
from jitkern.kernel.validation import INDEX_DTYPES, check_int, check_values_in, runs_on_host
from deepseek_v4.common import (INDEX, INDEX_DTYPE_NAMES, LAUNCH_PDL, POSITIVE, RATIOS, WindowKernel, WindowKey, floats,
                                ratio_geometry, resolve_pdl)
from deepseek_v4.kernels.compressor import compress_windows_kernel
from deepseek_v4.tiling import chunk_count, chunk_grid, chunk_size, compressor_tiling


class CompressWindowsKernel(WindowKernel):
    name = "deepseek_v4.compress_windows"
    compile_cost = 0.25  # seconds a key on our CPU machine
    kernel = compress_windows_kernel

    class CompileKey(WindowKey):
        req_indices_dtype: str = dtype_of("req_indices", warm=INDEX_DTYPE_NAMES)
        launch_pdl: bool = argument("launch_pdl", option="launch_pdl", warm=LAUNCH_PDL)
        scan: int = derived(compressor_tiling, "scan", constexpr="SCAN")
        block_d: int = derived(compressor_tiling, "block_d", constexpr="BLOCK_D")
        program_d: int = derived(compressor_tiling, "program_d", constexpr="PROGRAM_D")
        num_warps: int = derived(compressor_tiling, "num_warps", option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, state_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                 req_indices: torch.Tensor, out: torch.Tensor, compress_ratio: int, head_dim: int, block_size: int,
                 launch_pdl: bool = False) -> LaunchSpec:
        """Programs over (token chunks, column groups); at ratio 4 one per token and the
        whole head."""
        tokens, scan, program_d = positions.shape[0], compile_key.scan, compile_key.program_d
        n_chunks = chunk_count(tokens, 1 if scan == 1 else chunk_size(tokens, head_dim, scan, program_d))
        return LaunchSpec(
            grid=chunk_grid(n_chunks, head_dim, program_d),
            kwargs=dict(
                State_ptr=state_cache, state_block_stride=launch_stride(state_cache, 0),  # one block: any stride
                state_row_stride=launch_stride(state_cache, 1), BlockTable_ptr=block_table,
                block_table_row_stride=launch_stride(block_table, 0), Positions_ptr=positions,
                ReqIdx_ptr=req_indices, Out_ptr=out, out_row_stride=launch_stride(out, 0),  # one token: any stride
                n_tokens=tokens, n_chunks=n_chunks),
            result=out)


@public_call(op="deepseek_v4::compress_windows", mutates=["out"], returns="out")
def compress_windows(state_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                     req_indices: torch.Tensor, out: torch.Tensor, compress_ratio: int, head_dim: int, block_size: int,
                     pdl_kwargs: dict | None = None, max_position: int | None = None) -> torch.Tensor:
    """Write the compressed entry of every window closed by a token into ``out[token]``
    (spec, "The compressor"), after this step's store. Pass ``max_position`` (an upper
    bound the engine knows, e.g. ``max_model_len - 1``) to have the block table's width
    checked on a GPU, where reading the positions would synchronise."""
    device = check_compress_windows(state_cache, block_table, positions, req_indices, out, compress_ratio, head_dim,
                                    block_size, max_position)
    launch_pdl = resolve_pdl(pdl_kwargs, device)
    if positions.shape[0]:
        CompressWindowsKernel()(state_cache, block_table, positions, req_indices, out, compress_ratio, head_dim, block_size,
                                launch_pdl=launch_pdl)
    return out


COMPRESS = Arguments(head_dim=POSITIVE, block_size=POSITIVE, state_cache=floats("blocks block_size _"),
                     block_table=Arg("requests _", torch.int32, strides="_ 1"),
                     positions=Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(0)), req_indices=INDEX,
                     out=floats("tokens _", written=True))


def check_compress_windows(state_cache, block_table, positions, req_indices, out, compress_ratio: int,
                           head_dim: int, block_size: int, max_position: int | None) -> torch.device:
    """``compress_windows``' argument checks (values too, where ``runs_on_host``); returns the device."""
    geometry = ratio_geometry(compress_ratio)
    checked = COMPRESS.check(locals())
    if max_position is not None:
        check_int("max_position", max_position, minimum=0)
    width = geometry.state_width(head_dim)
    tokens = positions.shape[0]
    if state_cache.shape[2] < 2 * width:
        raise ValueError(f"state_cache: last dim {state_cache.shape[2]} < 2W = {2 * width} for head_dim={head_dim} "
                         f"at ratio {compress_ratio}")
    if out.shape[1] < head_dim:
        raise ValueError(f"out: shape {tuple(out.shape)}, expected [{tokens}, >= head_dim={head_dim}]")
    if max_position is not None and max_position // block_size >= block_table.shape[1]:
        raise ValueError(f"block_table: {block_table.shape[1]} blocks of {block_size} cannot hold "
                         f"max_position={max_position}")
    if runs_on_host(positions) and tokens:
        _check_values_on_host(state_cache, block_table, positions, req_indices, compress_ratio, block_size)
    return checked.device


def _check_values_on_host(state_cache, block_table, positions, req_indices, compress_ratio, block_size) -> None:
    """Checks that need the values: free in the interpreter, a device sync on a GPU."""
    closing = (positions + 1) % compress_ratio == 0
    if not bool(closing.any()):
        return
    check_values_in("req_indices", req_indices, 0, block_table.shape[0], where=closing, note=" (block_table's requests)")
    requests = req_indices[closing].long()
    last_block = positions[closing].long() // block_size
    if int(last_block.max()) >= block_table.shape[1]:
        raise ValueError(f"block_table: {block_table.shape[1]} blocks of {block_size} are too short for position "
                         f"{int(positions[closing].max())}")
    window = 2 * compress_ratio if RATIOS[compress_ratio].overlap else compress_ratio
    first_block = (positions[closing].long() - window + 1).clamp(min=0) // block_size
    columns = torch.arange(block_table.shape[1], device=block_table.device)
    used = (columns >= first_block[:, None]) & (columns <= last_block[:, None])
    blocks = block_table[requests][used]
    if int(blocks.min()) < 0 or int(blocks.max()) >= state_cache.shape[0]:
        raise ValueError(f"block_table: a block a window reads is outside the cache's [0, {state_cache.shape[0]})")
