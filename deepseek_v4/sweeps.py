"""Launches of the DeepSeek V4 kernels with tilings other than the shipped ones, for the
benchmark sweeps (``bench_deepseek_v4.py --sweep``, ``benchmarks/device/sweep_*.py``) and
the tests that check every tiling a sweep may time. None of these variants is a warmup
key: each compiles on first use.
"""

from __future__ import annotations

from jitkern import cdiv
from deepseek_v4.compressor import CompressWindowsKernel
from deepseek_v4.decode_step import DecodeStepKernel
from deepseek_v4.save_partial_states import SavePartialStatesKernel
from deepseek_v4.common import RATIOS
from deepseek_v4.tiling import (DECODE_MIN_PROGRAMS, StoreTiling, WindowTiling, chunk_count, chunk_grid, chunk_size,
                                compressor_tiling, store_grid)


def check_decode_tiling(compress_ratio: int, head_dim: int, tiling: WindowTiling) -> None:
    """A ``ValueError`` for a tiling whose entries might not have the compressor's bits on
    NVIDIA (the spec's implementation notes say which)."""
    compressor = compressor_tiling(compress_ratio, head_dim)
    same = (tiling.block_d, tiling.num_warps) == (compressor.block_d, compressor.num_warps)
    rows_in_thread = (RATIOS[compress_ratio].overlap and tiling.block_d >= 128 * tiling.num_warps
                      and compressor.block_d >= 128 * compressor.num_warps)
    if not (same or rows_in_thread):
        raise ValueError(f"tiling {tiling}: its window tiles would not sum each column's rows as the compressor's "
                         f"(block_d={compressor.block_d}, num_warps={compressor.num_warps}) do")
    if tiling.program_d % tiling.block_d or tiling.block_d & (tiling.block_d - 1) or tiling.scan & (tiling.scan - 1):
        raise ValueError(f"tiling {tiling}: program_d must be a multiple of block_d, both and scan powers of two")
    if tiling.scan >= compress_ratio:
        raise ValueError(f"tiling {tiling}: scan must be below the ratio {compress_ratio}")


def compressor_sweep_launch(kernel: CompressWindowsKernel, inputs: dict, *, block_d: int | None = None,
                            program_d: int | None = None, num_warps: int | None = None, chunk: int | None = None,
                            min_programs: int | None = None) -> None:
    """Launch ``inputs`` with tiling choices replaced (benchmark sweeps only: the
    variants are not warmup keys and compile on first use). ``program_d`` defaults to
    ``block_d``; ``chunk`` to the one ``min_programs`` (default ``MIN_PROGRAMS``) picks."""
    kwargs = kernel.triton_kwargs(kernel.launch_spec(**inputs))
    head_dim, tokens, scan = kwargs["HEAD_DIM"], kwargs["n_tokens"], kwargs["SCAN"]
    if block_d is not None:
        kwargs["BLOCK_D"] = block_d
        kwargs["PROGRAM_D"] = program_d or (block_d if scan > 1 else block_d * cdiv(head_dim, block_d))
    elif program_d is not None:
        kwargs["PROGRAM_D"] = program_d
    if num_warps is not None:
        kwargs["num_warps"] = num_warps
    if scan > 1:
        if chunk is None:
            chunk = chunk_size(tokens, head_dim, scan, kwargs["PROGRAM_D"], min_programs)
        if not 1 <= chunk <= scan:
            raise ValueError(f"chunk: must be in [1, {scan}], got {chunk}")
        kwargs["n_chunks"] = chunk_count(tokens, chunk)
    kernel.kernel[chunk_grid(kwargs["n_chunks"], head_dim, kwargs["PROGRAM_D"])](**kwargs)


def decode_step_sweep_launch(kernel: DecodeStepKernel, inputs: dict, tiling: WindowTiling | None = None, *,
                             chunk: int | None = None, min_programs: int | None = None) -> None:
    """Launch ``inputs`` (``__call__``'s arguments) with another tiling, ``chunk`` tokens a
    program (at most ``tiling.scan``) or the chunk ``min_programs`` picks: benchmark sweeps
    and their tests only. The variant is no warmup key and compiles on first use."""
    kwargs = kernel.triton_kwargs(kernel.launch_spec(**inputs))
    head_dim, tokens = kwargs["HEAD_DIM"], kwargs["n_tokens"]
    if tiling is not None:
        check_decode_tiling(kwargs["COMPRESS_RATIO"], head_dim, tiling)
        kwargs.update(SCAN=tiling.scan, BLOCK_D=tiling.block_d, PROGRAM_D=tiling.program_d,
                      num_warps=tiling.num_warps)
    scan = kwargs["SCAN"]
    if chunk is None:
        chunk = chunk_size(tokens, head_dim, scan, kwargs["PROGRAM_D"],
                            DECODE_MIN_PROGRAMS if min_programs is None else min_programs)
    if not 1 <= chunk <= scan:
        raise ValueError(f"chunk: must be in [1, {scan}], got {chunk}")
    kwargs["n_chunks"] = cdiv(tokens, chunk)
    kernel.kernel[chunk_grid(kwargs["n_chunks"], head_dim, kwargs["PROGRAM_D"])](**kwargs)


def store_sweep_launch(kernel: SavePartialStatesKernel, inputs: dict, tiling: StoreTiling) -> None:
    """Launch ``inputs`` (``__call__``'s arguments) with another tiling: benchmark sweeps and
    their tests only. The variant is no warmup key and compiles on first use."""
    kwargs = kernel.triton_kwargs(kernel.launch_spec(**inputs))
    kwargs.update(TOKENS=tiling.tokens, BLOCK_H=tiling.block_h, num_warps=tiling.num_warps)
    kernel.kernel[store_grid(kwargs["n_tokens"], kwargs["HEAD_SIZE"], tiling.tokens, tiling.block_h)](**kwargs)
