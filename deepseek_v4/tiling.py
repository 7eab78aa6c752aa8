"""How each DeepSeek V4 launch is cut: the tiling a key pins (the compressor's, the fused
decode step's, the store's), and a launch's chunks and grid, from shapes only (no sync,
graph-capturable). The tilings were chosen by the H200 sweeps of
``benchmarks/bench_deepseek_v4.py --sweep`` and ``benchmarks/device/sweep_*.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitkern.kernel.grid import cdiv, next_power_of_2
from deepseek_v4.common import RATIOS

# Ratio 128: the tokens a program scans (at most SCAN) are the largest power of two that
# still leaves at least this many programs (chunks x column groups); see ``chunk_size``.
MIN_PROGRAMS = 512  # the compressor's
DECODE_MIN_PROGRAMS = 512  # the fused decode step's


@dataclass(frozen=True)
class CompressorTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    scan: int  # tokens a program can scan: 1 = one program per token
    block_d: int  # columns per step (a rows x block_d tile)
    program_d: int  # columns per program (a multiple of block_d): cdiv(head_dim, program_d) programs per chunk
    num_warps: int


def compressor_tiling(compress_ratio: int, head_dim: int) -> CompressorTiling:
    """How a window is split, from the H200 sweep (``bench_deepseek_v4.py --sweep``).

    Ratio 4 reads 8 rows: one program per token takes the whole head in one step, a warp
    per 128 columns (head 512: 0.92 of copy at 64K tokens and 5.5 us at 1024; one warp
    walking 128 columns at a time reaches 0.95 at 64K but takes 10 us at 1024). Ratio
    128 reads 128 rows: 4-warp programs of 32-column steps, each owning a group of up to
    128 columns and scanning up to 128 tokens for window ends (head 512: 0.84 at 64K;
    64-column steps, 8 warps, one step per program: 0.56).
    """
    if RATIOS[compress_ratio].overlap:
        block_d = min(next_power_of_2(head_dim), 512)
        return CompressorTiling(scan=1, block_d=block_d, program_d=block_d * cdiv(head_dim, block_d),
                                num_warps=max(1, block_d // 128))
    block_d = min(next_power_of_2(head_dim), 32)
    program_d = min(128, max(block_d, next_power_of_2(head_dim) // 2))
    return CompressorTiling(scan=compress_ratio, block_d=block_d, program_d=program_d, num_warps=4)


@dataclass(frozen=True)
class DecodeTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    scan: int  # tokens a program can take (1: a program per token); the host picks how many it does
    block_d: int  # columns per step of a window tile (rows x block_d): fixes the reductions' order
    program_d: int  # entry columns per program (a multiple of block_d): cdiv(head_dim, program_d) groups
    num_warps: int


def decode_tiling(compress_ratio: int, head_dim: int) -> DecodeTiling:
    """The shipped tiling of the fused step.

    The window tiles are the compressor's (``compressor_tiling``) or reduce as they do. At
    ratio 128: 32-column steps with 4 warps, which fixes how each column's 128 rows are
    summed; each program takes one 32-column group and a chunk of up to 32 tokens, so a
    closing token's window (128 rows) is read by ``head_dim / 32`` programs at once instead
    of by programs walking 128 columns in 4 steps. At ratio 4 a window has 8 rows, and the compressor's
    tile of a head of 512 (512 columns, 4 warps) has all of a column's rows in one thread
    on NVIDIA and spreads them over 2 warps on AMD; 256 columns with 2 warps does the same
    on both, so a head of 512 takes two programs a token, as the store splits its rows.
    ``tests/deepseek_v4/test_dsv4_decode_layouts.py`` checks the layouts in the compiled
    code, for cuda:90 and hip:gfx942.
    """
    compressor = compressor_tiling(compress_ratio, head_dim)
    if RATIOS[compress_ratio].overlap:
        block_d, num_warps = compressor.block_d, compressor.num_warps
        if block_d > 256 and block_d == 128 * num_warps:
            block_d, num_warps = 256, 2
        return DecodeTiling(scan=1, block_d=block_d, program_d=block_d, num_warps=num_warps)
    return DecodeTiling(scan=32, block_d=compressor.block_d, program_d=compressor.block_d,
                        num_warps=compressor.num_warps)


def check_decode_tiling(compress_ratio: int, head_dim: int, tiling: DecodeTiling) -> None:
    """A ``ValueError`` for a tiling whose entries might not have the compressor's bits on
    NVIDIA: the window tiles must reduce as the compressor's do (see ``decode_tiling``),
    and ``scan`` must stay below the ratio, so that the store's ``[scan, program_d]`` tile
    never has a window tile's shape (Triton lays out loads of one shape alike, which could
    change the window tiles' layout). The compiled layouts test has the last word."""
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


@dataclass(frozen=True)
class StoreTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    tokens: int  # tokens per program: a [tokens, block_h] tile
    block_h: int  # columns per program (a power of two): cdiv(H, block_h) programs per token group
    num_warps: int


def store_tiling(head_size: int) -> StoreTiling:
    """The shipped tiling of a row of ``head_size`` floats, as the H200 sweep chose it
    (``benchmarks/device/sweep_store.py``).

    One warp per program, each moving 256-512 floats of kv and of score: rows of 512 and
    more are split in 512-column groups, rows of 128 are paired (two tokens a program).
    At 64K tokens this gave 0.94 / 0.94 / 0.93 / 0.90 of copy for H = 1024 / 512 / 256 /
    128, where 4 warps and 1024 floats a program gave 0.93 / 0.92 / 0.91 / 0.88.
    """
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
    """The compressor's chunks of at most ``chunk`` tokens: an odd number (see
    ``deepseek_v4.compressor``), or ``tokens`` when ``chunk == 1`` (a program per token)."""
    n_chunks = cdiv(tokens, chunk)
    return n_chunks if chunk == 1 or n_chunks % 2 else n_chunks + 1


def chunk_grid(n_chunks: int, head_dim: int, program_d: int) -> tuple[int]:
    """One axis: (chunk, column group) pairs, the groups of a chunk next to each other."""
    return (n_chunks * cdiv(head_dim, program_d),)


def store_grid(n_tokens: int, head_size: int, tokens: int, block_h: int) -> tuple[int]:
    """One axis: (token group, column group) pairs, the column groups of a token group adjacent."""
    return (cdiv(n_tokens, tokens) * cdiv(head_size, block_h),)
