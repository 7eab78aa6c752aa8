"""The fused decode step's tilings: which ones ship, and which keep the compressor's bits.

Apart from ``decode_step.py`` so that module stays small; its kernel's lines are part of
Triton's cache keys, so nothing moved above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseek_v4._compressor_host import _tiling
from deepseek_v4.common import LAYOUTS


@dataclass(frozen=True)
class DecodeTiling:
    """How a launch is cut: the constexprs and ``num_warps`` a key pins."""

    scan: int  # tokens a program can take (1: a program per token); the host picks how many it does
    block_d: int  # columns per step of a window tile (rows x block_d): fixes the reductions' order
    program_d: int  # entry columns per program (a multiple of block_d): cdiv(head_dim, program_d) groups
    num_warps: int


def decode_tiling(compress_ratio: int, head_dim: int) -> DecodeTiling:
    """The shipped tiling of the fused step.

    The window tiles are the compressor's (``_tiling``) or reduce as they do. At ratio 128:
    32-column steps with 4 warps, which fixes how each column's 128 rows are summed; each
    program takes one 32-column group and a chunk of up to 32 tokens, so a closing token's
    window (128 rows) is read by ``head_dim / 32`` programs at once instead of by programs
    walking 128 columns in 4 steps. At ratio 4 a window has 8 rows, and the compressor's
    tile of a head of 512 (512 columns, 4 warps) has all of a column's rows in one thread
    on NVIDIA and spreads them over 2 warps on AMD; 256 columns with 2 warps does the same
    on both, so a head of 512 takes two programs a token, as the store splits its rows.
    ``tests/deepseek_v4/test_dsv4_decode_layouts.py`` checks the layouts in the compiled
    code, for cuda:90 and hip:gfx942.
    """
    compressor = _tiling(compress_ratio, head_dim)
    if LAYOUTS[compress_ratio].overlap:
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
    compressor = _tiling(compress_ratio, head_dim)
    same = (tiling.block_d, tiling.num_warps) == (compressor.block_d, compressor.num_warps)
    rows_in_thread = (LAYOUTS[compress_ratio].overlap and tiling.block_d >= 128 * tiling.num_warps
                      and compressor.block_d >= 128 * compressor.num_warps)
    if not (same or rows_in_thread):
        raise ValueError(f"tiling {tiling}: its window tiles would not sum each column's rows as the compressor's "
                         f"(block_d={compressor.block_d}, num_warps={compressor.num_warps}) do")
    if tiling.program_d % tiling.block_d or tiling.block_d & (tiling.block_d - 1) or tiling.scan & (tiling.scan - 1):
        raise ValueError(f"tiling {tiling}: program_d must be a multiple of block_d, both and scan powers of two")
    if tiling.scan >= compress_ratio:
        raise ValueError(f"tiling {tiling}: scan must be below the ratio {compress_ratio}")
