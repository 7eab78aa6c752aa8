"""The tail ring's bookkeeping and per-step metadata, and the summary layer's cache spec."""

from __future__ import annotations

import random

import pytest
import torch

from step5 import RingFullError, Step5CSATailRing, Step5SparseSummaryCache, Step5SummaryCacheSpec


def test_capacity_must_hold_7_plus_k_rows():
    assert Step5CSATailRing(2, 16).capacity == 8
    assert Step5CSATailRing(2, 16, draft_tokens=3).capacity == 16
    assert Step5CSATailRing(2, 16, draft_tokens=3, capacity=10).capacity == 10
    with pytest.raises(ValueError, match="^capacity:"):
        Step5CSATailRing(2, 16, draft_tokens=3, capacity=9)
    with pytest.raises(ValueError, match="^capacity:"):
        Step5CSATailRing(2, 16, capacity=6)


def test_rows_are_allocated_per_request_and_exhaustion_is_an_error():
    ring = Step5CSATailRing(3, 16, capacity=9)
    bases = [ring.allocate(name) for name in "abc"]
    assert sorted(bases) == [0, 9, 18]
    with pytest.raises(RingFullError, match="ring full"):
        ring.allocate("d")  # never hands out another request's rows
    with pytest.raises(ValueError, match="already"):
        ring.allocate("a")
    ring.free("b")
    assert ring.allocate("d") == bases[1]  # freed rows are reused
    with pytest.raises(ValueError, match="no ring rows"):
        ring.free("b")
    assert ring.rows.shape == (27, 512) and ring.rows.dtype == torch.bfloat16


def test_prepare_gives_base_and_slot_mapping_of_the_spec():
    """slot_mapping: base + p % capacity where the token's region is still open after the step."""
    capacity = 11
    ring = Step5CSATailRing(5, 256, capacity=capacity)
    ids = [0, 1, None, 3, 4]
    for request in (0, 1, 3, 4):
        ring.allocate(request)
    firsts = [random.randint(0, 40) for _ in ids]
    lengths = [random.randint(1, 30) for _ in ids]
    lengths[0] = 8 - firsts[0] % 8  # ends exactly where a region closes: nothing stays open
    padding = 3
    metadata = ring.prepare(ids, firsts, lengths, num_tokens=sum(lengths) + padding)
    expected_base, expected_slots = [], []
    for request, first, length in zip(ids, firsts, lengths):
        last = first + length - 1
        base = -1 if request is None else ring.base_of(request)
        for position in range(first, first + length):
            expected_base.append(base)
            open_at_end = last % 8 != 7 and position // 8 == last // 8
            expected_slots.append(base + position % capacity if open_at_end and base >= 0 else -1)
    expected_base += [-1] * padding
    expected_slots += [-1] * padding
    tokens = len(expected_base)
    assert metadata.base[:tokens].tolist() == expected_base
    assert metadata.slot_mapping[:tokens].tolist() == expected_slots
    assert metadata.base.dtype == torch.int32
    with pytest.raises(ValueError, match="no ring rows"):
        ring.prepare([2], [0], [1])


def test_cache_spec_needs_blocks_of_whole_regions():
    spec = Step5SummaryCacheSpec(block_size=64)
    assert (spec.tokens_per_state, spec.head_size, spec.dtype, spec.page_size_bytes) == (8, 256, torch.uint8, 2048)
    assert spec.allocate(3).shape == (3, 8, 256)
    for bad in (12, 0, 100):
        with pytest.raises(ValueError, match="^block_size:"):
            Step5SummaryCacheSpec(block_size=bad)
    with pytest.raises(ValueError, match="^mean:"):
        Step5SparseSummaryCache(torch.zeros(3, 8, 512, dtype=torch.uint8)[:, :, :256])
    assert Step5SparseSummaryCache(spec.allocate(2)).block_size == 64
