"""How each DeepSeek V4 launch is cut: the tiling a key pins, chosen by the H200 sweeps (the
spec's implementation notes), and a launch's chunks and grid, from shapes only (no sync)."""

from __future__ import annotations

from dataclasses import dataclass

from jitkern.kernel.grid import cdiv, next_power_of_2
from deepseek_v4.common import RATIOS

# Ratio 128: the tokens a program scans (at most SCAN) are the largest power of two that
# still leaves at least this many programs (chunks x column groups); see ``chunk_size``.
MIN_PROGRAMS = 512  # the compressor's
DECODE_MIN_PROGRAMS = 512  # the fused decode step's


@dataclass(frozen=True)
class WindowTiling:
    """How a launch of the compressor or the fused decode step is cut: the constexprs and
    ``num_warps`` a key pins."""

    scan: int  # tokens a program can take: 1 = one program per token (the decode step's host picks how many)
    block_d: int  # columns per step of a window tile (rows x block_d): fixes the reductions' order
    program_d: int  # columns per program (a multiple of block_d): cdiv(head_dim, program_d) programs per chunk
    num_warps: int


def compressor_tiling(compress_ratio: int, head_dim: int) -> WindowTiling:
    """How a window is split: a program per token and the whole head at ratio 4, 4-warp
    column groups scanning chunks at ratio 128 (the spec's implementation notes say why)."""
    if RATIOS[compress_ratio].overlap:
        block_d = min(next_power_of_2(head_dim), 512)
        return WindowTiling(scan=1, block_d=block_d, program_d=block_d * cdiv(head_dim, block_d),
                                num_warps=max(1, block_d // 128))
    block_d = min(next_power_of_2(head_dim), 32)
    program_d = min(128, max(block_d, next_power_of_2(head_dim) // 2))
    return WindowTiling(scan=compress_ratio, block_d=block_d, program_d=program_d, num_warps=4)


def decode_tiling(compress_ratio: int, head_dim: int) -> WindowTiling:
    """The fused step's tiling: window tiles that reduce as the compressor's do (its bits),
    the rest free (the spec's implementation notes say how)."""
    compressor = compressor_tiling(compress_ratio, head_dim)
    if RATIOS[compress_ratio].overlap:
        block_d, num_warps = compressor.block_d, compressor.num_warps
        if block_d > 256 and block_d == 128 * num_warps:
            block_d, num_warps = 256, 2
        return WindowTiling(scan=1, block_d=block_d, program_d=block_d, num_warps=num_warps)
    return WindowTiling(scan=32, block_d=compressor.block_d, program_d=compressor.block_d,
                        num_warps=compressor.num_warps)


@dataclass(frozen=True)
class StoreTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    tokens: int  # tokens per program: a [tokens, block_h] tile
    block_h: int  # columns per program (a power of two): cdiv(H, block_h) programs per token group
    num_warps: int


def store_tiling(head_size: int) -> StoreTiling:
    """The tiling of a row of ``head_size`` floats: one warp moving 256-512 floats a program."""
    block_h = min(512, next_power_of_2(head_size))
    return StoreTiling(tokens=max(1, 256 // block_h), block_h=block_h, num_warps=1)


def chunk_size(tokens: int, head_dim: int, scan: int, program_d: int, min_programs: int | None = None) -> int:
    """Tokens per program: the largest power of two <= ``scan`` leaving ``min_programs``
    (default ``MIN_PROGRAMS``) programs, or 1."""
    min_programs = MIN_PROGRAMS if min_programs is None else min_programs
    chunk = 1
    column_groups = cdiv(head_dim, program_d)
    while chunk < scan and cdiv(tokens, 2 * chunk) * column_groups >= min_programs:
        chunk *= 2
    return chunk


def chunk_count(tokens: int, chunk: int) -> int:
    """The compressor's chunks of at most ``chunk`` tokens: an odd number (the spec's
    implementation notes say why), or ``tokens`` when ``chunk == 1`` (a program per token)."""
    n_chunks = cdiv(tokens, chunk)
    return n_chunks if chunk == 1 or n_chunks % 2 else n_chunks + 1


def chunk_grid(n_chunks: int, head_dim: int, program_d: int) -> tuple[int]:
    """One axis: (chunk, column group) pairs, the groups of a chunk next to each other."""
    return (n_chunks * cdiv(head_dim, program_d),)


def store_grid(n_tokens: int, head_size: int, tokens: int, block_h: int) -> tuple[int]:
    """One axis: (token group, column group) pairs, the column groups of a token group adjacent."""
    return (cdiv(n_tokens, tokens) * cdiv(head_size, block_h),)
