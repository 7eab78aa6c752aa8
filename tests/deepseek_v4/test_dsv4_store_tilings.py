"""Every tiling of the store that a sweep can launch, bit for bit against the reference.

``sweep_launch`` runs tilings that are no warmup key, so that the H200 sweep
(``benchmarks/device/sweep_store.py``) can pick the one to ship; each must store the
same bits as the shipped one. Fresh random inputs per tiling: token counts that leave a
partial last tile, padding slots (with garbage positions, which must not be read),
``kv`` and ``score`` as column views of one projection, a strided and poisoned cache
whose untouched bytes are compared too.
"""

from __future__ import annotations

import random
from dataclasses import astuple

import pytest
import torch
from dsv4_helpers import projection_views, same_bits, strided_cache

from benchmarks.bench_deepseek_v4 import store_variants
from deepseek_v4 import SavePartialStatesKernel, save_partial_states
from deepseek_v4.common import RATIOS
from deepseek_v4.reference import save_partial_states_ref
from deepseek_v4.tiling import StoreTiling, store_tiling
from deepseek_v4.sweeps import store_sweep_launch as sweep_launch

SHIPPED = [(512, 4), (512, 128), (128, 4), (128, 128)]  # (head_dim, ratio) of the manifests


def _case(tokens: int, head_size: int, ratio: int, block_size: int, *, pad: int):
    """Random inputs with about a quarter padding tokens; returns them and the cache's backing tensor."""
    index_dtype = random.choice([torch.int32, torch.int64])
    kv, score = projection_views(tokens, head_size, pad=pad)
    ape = torch.randn(ratio, head_size + 3)[:, :head_size]
    blocks = tokens // block_size + 2
    slots = torch.randperm(blocks * block_size)[:tokens]
    padding = torch.rand(tokens) < 0.25
    slots[padding] = -1
    positions = torch.randint(0, 1 << 20, (tokens,))
    positions[padding] = torch.randint(-(1 << 30), 1 << 30, (int(padding.sum()),))  # never read
    cache, full = strided_cache(blocks, block_size, 2 * head_size, extra_rows=1, extra_cols=2)
    return dict(kv=kv, score=score, ape=ape, positions=positions.to(index_dtype), state_cache=cache,
                slot_mapping=slots.to(index_dtype), block_size=block_size, state_width=head_size,
                compress_ratio=ratio), full


def _tokens_for(tiling: StoreTiling) -> int:
    """A few tiles and, when a tile holds several tokens, a partial last one."""
    tail = random.randint(1, tiling.tokens - 1) if tiling.tokens > 1 else 0
    return random.randint(1, 3) * tiling.tokens + tail


def _check(inputs, full, tiling: StoreTiling) -> None:
    expected_full = full.clone()
    expected = expected_full[:, : inputs["block_size"], : inputs["state_cache"].shape[2]]
    save_partial_states_ref(**{**inputs, "state_cache": expected})
    sweep_launch(SavePartialStatesKernel(), inputs, tiling)
    assert same_bits(full, expected_full), f"{tiling}: cache differs from the reference (written or untouched bytes)"


@pytest.mark.parametrize("head_dim,ratio", SHIPPED, ids=str)
def test_every_sweep_tiling_stores_the_reference_bits(head_dim, ratio):
    geometry = RATIOS[ratio]
    width = geometry.state_width(head_dim)
    variants = store_variants(head_dim, ratio)
    assert variants[0] == store_tiling(width)
    assert any(t.tokens > 1 for t in variants)
    assert width == 128 or any(t.block_h < width for t in variants)  # column splits down to 128
    for index, tiling in enumerate(variants):
        # the deployment's projection (row stride 2H) and an odd-strided one, in turn
        inputs, full = _case(_tokens_for(tiling), width, ratio, geometry.block_size, pad=5 * (index % 2))
        _check(inputs, full, tiling)


@pytest.mark.parametrize(
    "head_size,tiling",
    [(40, StoreTiling(2, 16, 1)), (40, StoreTiling(4, 32, 2)), (96, StoreTiling(1, 64, 1)),
     (17, StoreTiling(8, 8, 1)), (24, StoreTiling(16, 32, 4))],
    ids=str,
)
def test_tilings_of_rows_that_are_not_a_power_of_two(head_size, tiling):
    """Column groups whose last one is partial, tiles wider than the row."""
    for _ in range(2):
        inputs, full = _case(_tokens_for(tiling), head_size, 128, 8, pad=3)
        _check(inputs, full, tiling)


@pytest.mark.parametrize("head_dim,ratio", SHIPPED, ids=str)
def test_the_shipped_tiling_through_the_public_function(head_dim, ratio):
    """The key's tiling (several tokens a program for short rows) on a partial last tile."""
    geometry = RATIOS[ratio]
    width = geometry.state_width(head_dim)
    kernel = SavePartialStatesKernel()
    tiling = store_tiling(width)
    inputs, full = _case(_tokens_for(tiling) if tiling.tokens > 1 else 5, width, ratio, geometry.block_size, pad=0)
    key = kernel.launch_spec(**inputs).key
    assert (key.tokens, key.block_h, key.num_warps) == (tiling.tokens, tiling.block_h, tiling.num_warps)
    expected_full = full.clone()
    expected = expected_full[:, : geometry.block_size, : 2 * width]
    save_partial_states_ref(**{**inputs, "state_cache": expected})
    save_partial_states(**inputs)
    assert same_bits(full, expected_full)


def test_the_tiling_adds_no_keys():
    """One tiling per (head_dim, ratio): a config's keys are still its index dtype pairs."""
    kernel = SavePartialStatesKernel()
    for head_dim, ratio in SHIPPED:
        keys = kernel.get_warmup_keys(head_dim=head_dim, compress_ratio=ratio)
        assert len(keys) == 4
        assert {(k.tokens, k.block_h, k.num_warps) for k in keys} == {
            astuple(store_tiling(RATIOS[ratio].state_width(head_dim)))}
