"""Shared builders of the Step5 tests: random rows with realistic strides, KV block tables,
poisoned caches, and the byte comparisons the spec allows."""

from __future__ import annotations

import os
import random
from pathlib import Path

import torch

from step5.reference import assert_summaries_close

GOLDEN = Path(os.environ.get("JITKERN_GOLDEN_DIR", Path(__file__).resolve().parents[1] / "golden"))
"""The golden vectors: ``tests/golden`` (or ``JITKERN_GOLDEN_DIR``)."""


def load_golden(name: str) -> dict:
    """A golden file, its tensors on torch's default device (CUDA in the GPU test mode)."""
    return torch.load(GOLDEN / name, map_location=torch.get_default_device())


POISON = 0xA5  # a byte no kernel should leave behind where it was told to write
OTHER_POISON = 0x5A


def random_rows(n: int, layout: str = "contiguous") -> tuple[torch.Tensor, torch.Tensor]:
    """``key`` and ``z`` bf16 ``[n, 1, 256]`` laid out as a serving engine may pass them.

    contiguous: two tensors. fused: slices of one ``[n, 1, 512]`` tensor (row stride 512).
    odd_rows: slices of a ``[n, 1, 600]`` tensor at 0 and 300 (row stride not a multiple of 16).
    interleaved: ``[n, 1, 512][..., ::2]`` and ``[..., 1::2]`` (element stride 2).
    z_offset: key contiguous; z a slice of a ``[n, 1, 260]`` projection at column 4, so 8
    bytes off a 16-byte boundary, rows 520 bytes apart.
    z mixes scales (so the scalar running max matters) and a few -inf entries.
    """
    key = torch.randn(n, 1, 256).mul(4).to(torch.bfloat16)
    z = (torch.randn(n, 1, 256) * torch.rand(n, 1, 1).mul(6)).to(torch.bfloat16)
    z[torch.rand(n, 1, 256) < 0.02] = float("-inf")
    if layout == "contiguous":
        return key, z
    if layout == "z_offset":
        projection = torch.randn(n, 1, 260).to(torch.bfloat16)
        projection[:, :, 4:] = z
        return key, projection[:, :, 4:]
    width, key_at, z_at, step = {"fused": (512, 0, 256, 1), "odd_rows": (600, 0, 300, 1), "interleaved": (512, 0, 1, 2)}[layout]
    shared = torch.randn(n, 1, width).to(torch.bfloat16)
    key_view = shared[:, :, key_at : key_at + 256 * step : step]
    z_view = shared[:, :, z_at : z_at + 256 * step : step]
    key_view.copy_(key)
    z_view.copy_(z)
    return key_view, z_view


def strided_index(values: list[int], dtype: torch.dtype, strided: bool) -> torch.Tensor:
    """An index tensor, as a stride-2 view of a larger tensor when ``strided``."""
    tensor = torch.tensor(values, dtype=dtype)
    if not strided:
        return tensor
    wide = torch.full((2 * len(values),), 12345, dtype=dtype)
    wide[::2] = tensor
    return wide[::2]


def poisoned_mean(blocks: int, block_size: int, strided: bool, poison: int = POISON) -> torch.Tensor:
    """``[blocks, block_size // 8, 256]`` uint8 full of ``poison``; blocks 512 bytes apart
    more than needed when ``strided`` (a view into a larger page buffer)."""
    inner = block_size // 8 * 256
    pages = torch.full((blocks, inner + (512 if strided else 0)), poison, dtype=torch.uint8)
    return pages[:, :inner].view(blocks, block_size // 8, 256)


class BlockTables:
    """Random, distinct KV blocks handed to requests, as a paged KV cache does."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.free = list(range(num_blocks))
        random.shuffle(self.free)

    def take(self, tokens: int) -> list[int]:
        count = -(-tokens // self.block_size)
        if count > len(self.free):
            raise RuntimeError("test ran out of KV blocks")
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def give_back(self, blocks: list[int]) -> None:
        self.free.extend(blocks)

    def slot(self, table: list[int], position: int) -> int:
        return table[position // self.block_size] * self.block_size + position % self.block_size


def assert_mean_matches(actual: torch.Tensor, expected: torch.Tensor, expected_other: torch.Tensor) -> None:
    """Bytes the reference wrote (equal under both poisons) within one fp8 step, >= 99% equal;
    every other byte untouched."""
    written = expected == expected_other
    assert (actual[~written] == expected[~written]).all(), "a kernel wrote mean bytes the reference did not"
    assert_summaries_close(actual[written], expected[written], "mean")
