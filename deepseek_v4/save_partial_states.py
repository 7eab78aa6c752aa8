"""The partial-state store: each token's ``[kv | score + ape]`` into the paged state cache
(``docs/spec/deepseek-v4-compressor.md``, "The store")."""

from __future__ import annotations

from typing import Any

import torch

from jitkern import (LaunchSpec, Tensor, TritonJitKernel, argument, derived, dtype_of, kernel_launcher, launch_stride,
                     public_call, size_of)
from jitkern.kernel.arguments import Arg, Arguments, Within
from jitkern.kernel.validation import INDEX_DTYPES, use_gdc
from deepseek_v4.common import (BLOCK_SIZE, COMPRESS_RATIO, FLOAT_DTYPE, INDEX_DTYPE_NAMES, LAUNCH_PDL, POSITIVE,
                                STATE_WIDTH, floats, projection_views, ratio_geometry, resolve_pdl)
from deepseek_v4.kernels.save_partial_states import save_partial_states_kernel
from deepseek_v4.tiling import store_grid, store_tiling


class SavePartialStatesKernel(TritonJitKernel):
    name = "deepseek_v4.save_partial_states"
    kernel = save_partial_states_kernel
    stand_ins = dict(**projection_views(lambda key: key.head_size), positions=Tensor((1,)), slot_mapping=Tensor((1,)),
                     state_cache=Tensor((1, "block_size", lambda key: key.state_width + key.head_size), "dtype"))

    class CompileKey:
        head_size: int = size_of("kv", -1, constexpr="HEAD_SIZE", warm=STATE_WIDTH)  # H
        state_width: int = argument("state_width", constexpr="STATE_WIDTH", warm=STATE_WIDTH)
        compress_ratio: int = argument("compress_ratio", constexpr="COMPRESS_RATIO", warm=COMPRESS_RATIO)
        block_size: int = argument("block_size", constexpr="BLOCK_SIZE", warm=BLOCK_SIZE)
        dtype: str = dtype_of("kv", warm=[FLOAT_DTYPE])  # kv, score, ape and state_cache (the public function checks)
        positions_dtype: str = dtype_of("positions", warm=INDEX_DTYPE_NAMES)  # int32 or int64: different binaries
        slot_mapping_dtype: str = dtype_of("slot_mapping", warm=INDEX_DTYPE_NAMES)
        launch_pdl: bool = argument("launch_pdl", option="launch_pdl", warm=LAUNCH_PDL)  # PDL: Hopper and newer
        tokens: int = derived(store_tiling, "tokens", constexpr="TOKENS")
        block_h: int = derived(store_tiling, "block_h", constexpr="BLOCK_H")
        num_warps: int = derived(store_tiling, "num_warps", option="num_warps")

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return {**super().constants(key), "USE_GDC": use_gdc(key.launch_pdl)}

    @kernel_launcher
    def __call__(self, compile_key, kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
                 state_cache: torch.Tensor, slot_mapping: torch.Tensor, block_size: int, state_width: int,
                 compress_ratio: int, launch_pdl: bool = False) -> LaunchSpec:
        """Programs over (token groups, column groups)."""
        tokens = slot_mapping.shape[0]
        return LaunchSpec(
            grid=store_grid(tokens, compile_key.head_size, compile_key.tokens, compile_key.block_h),
            kwargs=dict(
                KV_ptr=kv, kv_row_stride=launch_stride(kv, 0, usual=2 * kv.shape[1]),  # one token: as its stand-in's
                Score_ptr=score, score_row_stride=launch_stride(score, 0, usual=2 * score.shape[1]),
                Ape_ptr=ape, ape_row_stride=ape.stride(0), Positions_ptr=positions,
                State_ptr=state_cache, state_block_stride=launch_stride(state_cache, 0),  # one block: any stride
                state_row_stride=launch_stride(state_cache, 1), Slot_ptr=slot_mapping, n_tokens=tokens),
            result=state_cache)


@public_call(op="deepseek_v4::save_partial_states", mutates=["state_cache"])
def save_partial_states(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
                        state_cache: torch.Tensor, slot_mapping: torch.Tensor, block_size: int, state_width: int,
                        compress_ratio: int, pdl_kwargs: dict | None = None) -> None:
    """Store each token's ``[kv | score + ape[position % ratio]]`` row into ``state_cache``
    at its slot (-1: padding), as the spec's "The store" says (argument layouts, and the
    manifest layout a ``score`` of its own needs); PDL where the GPU has it."""
    device = check_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                       compress_ratio)
    launch_pdl = resolve_pdl(pdl_kwargs, device)
    if kv.shape[0]:
        SavePartialStatesKernel()(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                  compress_ratio, launch_pdl=launch_pdl)


STORE = Arguments(block_size=POSITIVE, state_width=int, kv=floats("tokens H"), score=floats("tokens H"),
                  ape=floats("ratio _"), state_cache=floats("blocks block_size _", written=True),
                  positions=Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(
                      0, where="slot_mapping", note="the kernel's % truncates, Python's floors")),
                  slot_mapping=Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(
                      0, lambda s: s.blocks * s.block_size, padding=-1, note="the cache's slots")), sizes=dict(H=POSITIVE))


def check_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size: int,
                              state_width: int, compress_ratio: int) -> torch.device:
    """``save_partial_states``' argument checks (values too, where ``runs_on_host``); returns the device."""
    ratio_geometry(compress_ratio)  # 4 or 128; the spec's block size is a warmup default only
    checked = STORE.check(locals())
    head_size = checked.H
    if ape.shape[0] != compress_ratio or ape.shape[1] < head_size:
        raise ValueError(f"ape: shape {tuple(ape.shape)}, expected [compress_ratio={compress_ratio}, >= {head_size}]")
    if not head_size <= state_width:
        raise ValueError(f"state_width: {state_width} is smaller than kv's width {head_size}; halves would overlap")
    if state_cache.shape[2] < state_width + head_size:
        raise ValueError(f"state_cache: last dim {state_cache.shape[2]} < state_width + H = {state_width} + {head_size}")
    return checked.device
