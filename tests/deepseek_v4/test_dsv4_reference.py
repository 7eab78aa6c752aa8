"""Our references and kernels against the golden vectors (computed outside the project).

A misread spec (wrong halves, an off-by-one window, ape on the wrong row) would agree
with itself between reference and kernel; the golden vectors catch it.
"""

from __future__ import annotations

import pytest
import torch
from dsv4_helpers import GOLDEN, assert_rel_close, poison

from deepseek_v4 import compress_windows, save_partial_states
from deepseek_v4.common import RATIOS
from deepseek_v4.reference import compress_sequence_ref, compress_windows_ref, save_partial_states_ref

CASES = [("ratio4", 4), ("ratio128", 128)]


def _golden(name):
    device = torch.empty(0).device  # the GPU test mode makes CUDA the default device
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in torch.load(GOLDEN)[name].items()}


@pytest.mark.parametrize("name,ratio", CASES)
def test_sequence_reference_matches_golden(name, ratio):
    case = _golden(name)
    closing, entries = compress_sequence_ref(case["kv"], case["score"], case["ape"], ratio, case["head_dim"])
    assert torch.equal(closing, case["closing_positions"])
    assert_rel_close(entries, case["compressed"], name)


def _store_sequence(case, ratio, store, compress):
    """One request's tokens through a paged cache with shuffled blocks, in one step."""
    geometry = RATIOS[ratio]
    kv, score, ape, d = case["kv"], case["score"], case["ape"], case["head_dim"]
    tokens, width = kv.shape
    bs = geometry.block_size
    blocks = -(-tokens // bs)
    block_table = (torch.randperm(blocks + 2)[:blocks].int())[None, :]
    cache = poison((blocks + 2, bs, 2 * width))
    positions = torch.arange(tokens)
    slots = block_table[0, positions // bs].long() * bs + positions % bs
    store(kv, score, ape, positions, cache, slots, bs, width, ratio)
    out = poison((tokens, d))
    compress(cache, block_table, positions, torch.zeros(tokens, dtype=torch.int64), out, ratio, d, bs)
    return out[case["closing_positions"]]


@pytest.mark.parametrize("name,ratio", CASES)
def test_paged_reference_matches_golden(name, ratio):
    case = _golden(name)
    got = _store_sequence(case, ratio, save_partial_states_ref, compress_windows_ref)
    assert_rel_close(got, case["compressed"], name)


@pytest.mark.parametrize("name,ratio", CASES)
def test_kernels_match_golden(name, ratio):
    case = _golden(name)
    got = _store_sequence(case, ratio, save_partial_states, compress_windows)
    assert_rel_close(got, case["compressed"], name)
