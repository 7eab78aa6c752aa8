"""A decode step in one launch: the store and the compressor fused, every byte as the two
launches leave it (``docs/spec/deepseek-v4-compressor.md``, "The fused decode step")."""

from __future__ import annotations


import torch

from jitkern import LaunchSpec, Tensor, argument, cdiv, derived, dtype_of, kernel_launcher, launch_stride, public_call
from jitkern.kernel.validation import runs_on_host
from deepseek_v4.common import (INDEX_DTYPE_NAMES, LAUNCH_PDL, RATIOS, WindowKernel, WindowKey, key_width,
                                projection_views, ratio_geometry, resolve_pdl)
from deepseek_v4.compressor import check_compress_windows
from deepseek_v4.kernels.decode_step import decode_step_kernel
from deepseek_v4.save_partial_states import check_save_partial_states
from deepseek_v4.tiling import DECODE_MIN_PROGRAMS, chunk_grid, chunk_size, decode_tiling


class DecodeStepKernel(WindowKernel):
    name = "deepseek_v4.decode_step"
    compile_cost = 0.3  # seconds a key on our CPU machine (0.31 measured, 2 workers)
    kernel = decode_step_kernel
    stand_ins = dict(**WindowKernel.stand_ins, **projection_views(key_width), slot_mapping=Tensor((1,)))  # both halves'

    class CompileKey(WindowKey):
        slot_mapping_dtype: str = dtype_of("slot_mapping", warm=INDEX_DTYPE_NAMES)
        req_indices_dtype: str = dtype_of("req_indices", warm=INDEX_DTYPE_NAMES)
        launch_pdl: bool = argument("launch_pdl", option="launch_pdl", warm=LAUNCH_PDL)
        scan: int = derived(decode_tiling, "scan", constexpr="SCAN")
        block_d: int = derived(decode_tiling, "block_d", constexpr="BLOCK_D")
        program_d: int = derived(decode_tiling, "program_d", constexpr="PROGRAM_D")
        num_warps: int = derived(decode_tiling, "num_warps", option="num_warps")

    @kernel_launcher
    def __call__(self, compile_key, kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
                 state_cache: torch.Tensor, slot_mapping: torch.Tensor, block_table: torch.Tensor,
                 req_indices: torch.Tensor, out: torch.Tensor, compress_ratio: int, head_dim: int, block_size: int,
                 launch_pdl: bool = False) -> LaunchSpec:
        """A program per (token chunk, column group); at ratio 4 a chunk is a token."""
        tokens, program_d = positions.shape[0], compile_key.program_d
        n_chunks = cdiv(tokens, chunk_size(tokens, head_dim, compile_key.scan, program_d, DECODE_MIN_PROGRAMS))
        return LaunchSpec(
            grid=chunk_grid(n_chunks, head_dim, program_d),
            kwargs=dict(
                KV_ptr=kv, kv_row_stride=launch_stride(kv, 0, usual=2 * kv.shape[1]),  # one token: as its stand-in's
                Score_ptr=score, score_row_stride=launch_stride(score, 0, usual=2 * score.shape[1]),
                Ape_ptr=ape, ape_row_stride=ape.stride(0), Positions_ptr=positions, Slot_ptr=slot_mapping,
                State_ptr=state_cache, state_block_stride=launch_stride(state_cache, 0),  # one block: any stride
                state_row_stride=launch_stride(state_cache, 1), BlockTable_ptr=block_table,
                block_table_row_stride=launch_stride(block_table, 0), ReqIdx_ptr=req_indices, Out_ptr=out,
                out_row_stride=launch_stride(out, 0), n_tokens=tokens, n_chunks=n_chunks),
            result=out)


@public_call(op="deepseek_v4::decode_step", mutates=["state_cache", "out"], returns="out")
def decode_step(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
                state_cache: torch.Tensor, slot_mapping: torch.Tensor, block_table: torch.Tensor,
                req_indices: torch.Tensor, out: torch.Tensor, compress_ratio: int, head_dim: int, block_size: int,
                state_width: int, pdl_kwargs: dict | None = None, max_position: int | None = None) -> torch.Tensor:
    """``save_partial_states`` then ``compress_windows`` in one launch, for a decode batch
    (one token per request; spec, "The fused decode step"): the same bytes, the two
    functions' checks and errors, and ``kv`` as wide as a state half (``W = state_width``).
    That no token stores a row another token's window reads is checked in the interpreter
    (CPU tensors); on a GPU it is the caller's promise."""
    device = check_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                       compress_ratio)
    check_compress_windows(state_cache, block_table, positions, req_indices, out, compress_ratio, head_dim, block_size,
                           max_position)
    width = ratio_geometry(compress_ratio).state_width(head_dim)
    if state_width != width:
        raise ValueError(f"state_width: {state_width}, but compress_windows reads scores at W = {width} "
                         f"(head_dim={head_dim}, ratio {compress_ratio})")
    if kv.shape[1] != width:
        raise ValueError(f"kv: width {kv.shape[1]}, expected W = {width}: the fused store writes whole state halves")
    launch_pdl = resolve_pdl(pdl_kwargs, device)
    tokens = positions.shape[0]
    if runs_on_host(positions) and tokens:
        _check_no_row_is_shared(positions, slot_mapping, block_table, req_indices, compress_ratio, block_size)
    if tokens:
        DecodeStepKernel()(kv, score, ape, positions, state_cache, slot_mapping, block_table, req_indices, out,
                           compress_ratio, head_dim, block_size, launch_pdl=launch_pdl)
    return out


def _check_no_row_is_shared(positions, slot_mapping, block_table, req_indices, compress_ratio, block_size) -> None:
    """No closing token's window reads a slot another token stores in this launch (the two
    would race): needs the values, so only where ``runs_on_host``."""
    closing = (positions + 1) % compress_ratio == 0
    stored = slot_mapping[slot_mapping >= 0].long()
    if not bool(closing.any()) or not stored.numel():
        return
    window = 2 * compress_ratio if RATIOS[compress_ratio].overlap else compress_ratio
    q = positions[closing].long()[:, None] - torch.arange(window, device=positions.device)
    valid = q >= 0
    q = q.clamp(min=0)
    reads = block_table[req_indices[closing].long()[:, None], q // block_size].long() * block_size + q % block_size
    own = slot_mapping[closing].long()[:, None]
    if bool((valid & (reads != own) & torch.isin(reads, stored)).any()):
        raise ValueError("slot_mapping: a token stores a row that another token's window reads; decode_step takes "
                         "decode batches (one token per request): run save_partial_states, then compress_windows")
