"""The example grouped GEMM: against its reference, its host-side sorting against plain
Python, its manifest against every batch size it claims, and served from it on a GPU.

Triton's interpreter does not run a bf16 ``tl.dot`` correctly (triton-lang/triton#11584:
results ~1e10 off, no error), so the reference tests run in float16; bf16 is checked in
the GPU mode only (``test_warmed_manifest_serves_bf16_without_compiling``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from jitkern.examples import reference
from jitkern.examples.grouped_gemm import TILES, GroupedGemmKernel, grouped_gemm
from jitkern.examples.kernels.grouped_gemm import padded_capacity, sort_by_expert
from jitkern.manifest import load_manifest, manifest_keys
from jitkern.testing import assert_no_compile, check_coverage, missing_from, record_launches

MANIFEST = Path(__file__).resolve().parents[2] / "warmup_manifests" / "grouped-gemm-h200.json"
SHAPES = {  # the manifest's two expert shapes
    "mixtral": dict(experts=8, top_k=2, n=14336, k=4096),
    "deepseek": dict(experts=64, top_k=6, n=1408, k=2048),
}
ON_CPU = os.environ.get("JITKERN_TEST_MODE", "interpret") != "gpu"  # the GPU mode's tensors are on CUDA


def routing(tokens: int, experts: int, top_k: int, *, empty: int = 0, dtype=torch.int64) -> torch.Tensor:
    """``[tokens, top_k]`` distinct experts per token, drawn from all but ``empty`` random experts."""
    used = torch.randperm(experts)[: experts - empty]
    return used[torch.rand(tokens, len(used)).argsort(dim=1)[:, :top_k]].to(dtype)


# tokens, experts, top_k, n, k, routed weights, extra columns of a's rows (its row stride
# k + extra), out given (poisoned). Tokens fall in each tile (16 / 32 / 64 rows); n and k are
# not multiples of 64 (but one k); each case leaves one expert with no tokens.
CASES = [
    (1, 3, 1, 17, 33, False, 0, True),
    (13, 5, 2, 100, 72, True, 0, True),
    (37, 6, 3, 70, 130, True, 5, True),
    (70, 5, 2, 129, 64, False, 16, False),
    (100, 6, 4, 65, 17, True, 0, True),
]


@pytest.mark.parametrize("tokens,experts,top_k,n,k,weighted,extra,given", CASES, ids=lambda v: str(v))
def test_matches_reference_in_float16(tokens, experts, top_k, n, k, weighted, extra, given):
    """float16, as the interpreter's bf16 dot is wrong (see the module's docstring)."""
    dtype = torch.float16
    a = torch.randn(tokens, k + extra, dtype=dtype)[:, :k]
    b = (torch.randn(experts, n, k) * k**-0.5).to(dtype)
    ids = routing(tokens, experts, top_k, empty=1, dtype=random.choice([torch.int32, torch.int64]))
    weights = torch.rand(tokens, top_k) if weighted else None
    out, backing = None, None
    if given:  # poisoned, with poisoned rows after it: a padding id's store would land there
        largest_block_m = max(tile["BLOCK_SIZE_M"] for tile in TILES)
        backing = torch.full(((tokens * top_k + largest_block_m) * n,), float("nan"), dtype=dtype)
        out = backing[: tokens * top_k * n].view(tokens, top_k, n)
    c = grouped_gemm(a, b, ids, weights, out=out)
    assert out is None or c is out
    # exact fp16 products summed in fp32 by both (orders ~1e-6 apart), then one fp16 rounding: <= 1 ulp, 2**-10 relative
    torch.testing.assert_close(c, reference.grouped_gemm(a, b, ids, weights), rtol=2e-3, atol=1e-3)
    if backing is not None:
        assert backing[tokens * top_k * n:].isnan().all(), "written past the output (a padding id stored)"


def test_no_tokens_gives_an_empty_output():
    b = torch.randn(4, 8, 16, dtype=torch.float16)
    c = grouped_gemm(torch.randn(0, 16, dtype=torch.float16), b, torch.zeros(0, 2, dtype=torch.int64))
    assert c.shape == (0, 2, 8)


def python_sort(ids: list[list[int]], experts: int, block_m: int) -> tuple[list[int], list[int]]:
    """The sorted ids and block experts in plain Python: each expert's pairs in pair order,
    padded with the pair count to a multiple of block_m, experts in order."""
    flat = [expert for row in ids for expert in row]
    sorted_ids, block_experts = [], []
    for expert in range(experts):
        group = [pair for pair, e in enumerate(flat) if e == expert]
        group += [len(flat)] * (-len(group) % block_m)
        sorted_ids += group
        block_experts += [expert] * (len(group) // block_m)
    return sorted_ids, block_experts


def test_host_side_sorting_matches_plain_python():
    for _ in range(40):
        tokens, experts, block_m = random.randint(1, 40), random.randint(1, 9), random.choice([16, 32, 64])
        top_k = random.randint(1, min(experts, 4))
        ids = torch.randint(0, experts, (tokens, top_k), dtype=random.choice([torch.int32, torch.int64]))
        if random.random() < 0.3:
            ids = routing(tokens, experts, top_k, empty=random.randint(0, experts - top_k))
        blocks = sort_by_expert(ids, experts, block_m)
        expected_ids, expected_experts = python_sort(ids.tolist(), experts, block_m)
        pairs, used = tokens * top_k, int(blocks.num_used)
        capacity = padded_capacity(pairs, experts, block_m)
        assert blocks.sorted_ids.dtype == blocks.block_experts.dtype == blocks.num_used.dtype == torch.int32
        assert blocks.sorted_ids.shape == (capacity,) and blocks.block_experts.shape == (capacity // block_m,)
        assert used == len(expected_ids) <= capacity and used % block_m == 0
        assert blocks.sorted_ids[:used].tolist() == expected_ids
        assert sorted(i for i in blocks.sorted_ids.tolist() if i < pairs) == list(range(pairs)), "a pair lost or twice"
        assert (blocks.sorted_ids[used:] == pairs).all()
        assert blocks.block_experts[: used // block_m].tolist() == expected_experts
        assert (blocks.block_experts[used // block_m:] == -1).all()


def test_capacity_is_reached_when_every_pair_has_its_own_expert():
    ids = torch.arange(12).view(6, 2)
    assert int(sort_by_expert(ids, 12, 16).num_used) == padded_capacity(12, 12, 16) == 12 * 16


def test_sorted_ids_past_int32_are_refused_naming_topk_ids():
    assert padded_capacity(2**31 - 4096, 64, 64) == 2**31 - 64
    with pytest.raises(ValueError, match=r"^topk_ids: 2147479552 pairs, padded to 2147483648 sorted ids for 66 experts; "
                                         r"the sorted ids are int32, so they must stay below 2\*\*31$"):
        padded_capacity(2**31 - 4096, 66, 64)


def _inputs(**changes):
    inputs = dict(a=torch.randn(4, 16, dtype=torch.float16), b=torch.randn(3, 8, 16, dtype=torch.float16),
                  topk_ids=torch.zeros(4, 2, dtype=torch.int64), topk_weights=None, out=None)
    return {**inputs, **changes}


BAD_INPUTS = [
    (dict(a=torch.randn(4, 16)), "a: expected float16 or bfloat16 [M, K], got float32 (4, 16)"),
    (dict(a=torch.randn(16, 4, dtype=torch.float16).t()), "a: strides (1, 4); expected (_, 1)"),
    (dict(b=torch.randn(3, 8, 15, dtype=torch.float16)), "b: K = 15 (dim 2), but a has K = 16"),
    (dict(b=torch.randn(8, 16, dtype=torch.float16)), "b: expected float16 (a's dtype) [E, N, K], got float16 (8, 16)"),
    (dict(b=torch.randn(0, 8, 16, dtype=torch.float16)), "b: E = 0 (dim 0); expected in [1, 2147483648)"),
    (dict(topk_ids=torch.zeros(4, 2)), "topk_ids: expected int32 or int64 [M, top_k]"),
    (dict(topk_ids=torch.zeros(5, 2, dtype=torch.int64)), "topk_ids: M = 5 (dim 0), but a has M = 4"),
    (dict(topk_weights=torch.rand(4, 3)), "topk_weights: top_k = 3 (dim 1), but topk_ids has top_k = 2"),
    (dict(out=torch.empty(4, 2, 9, dtype=torch.float16)), "out: N = 9 (dim 2), but b has N = 8"),
    (dict(out=torch.empty(4, 8, 2, dtype=torch.float16).transpose(1, 2)), "out: must be contiguous"),
]
if ON_CPU:
    BAD_INPUTS.append((dict(topk_ids=torch.tensor([[0, 1], [2, 3], [0, 0], [1, 1]])),
                       "topk_ids: topk_ids[3] = 3; expected in [0, 3)"))


@pytest.mark.parametrize("changes,message", BAD_INPUTS, ids=[message for _, message in BAD_INPUTS])
def test_bad_inputs_raise_one_line_naming_the_argument(changes, message):
    with pytest.raises(ValueError) as raised:
        grouped_gemm(**_inputs(**changes))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value), str(raised.value)


@pytest.mark.compiled
def test_manifest_covers_every_batch_size_of_both_shapes():
    """Every batch size 1..512 of both shapes, with and without weights, a's rows contiguous
    or a slice of a wider projection: each launch's binary is one the manifest warms."""
    warmed = manifest_keys(load_manifest(MANIFEST))
    with record_launches(dry_run=True) as launches:
        for shape in SHAPES.values():
            experts, top_k, n, k = shape["experts"], shape["top_k"], shape["n"], shape["k"]
            b = torch.empty(experts, n, k, dtype=torch.bfloat16)  # never touched: nothing launches
            for tokens in range(1, 513):
                a = torch.empty(tokens, k + 64 * (tokens % 2), dtype=torch.bfloat16)[:, :k]
                ids = torch.randint(0, experts, (tokens, top_k))
                for weights in (None, torch.rand(tokens, top_k)):
                    grouped_gemm(a, b, ids, weights)
    assert len(launches) == 2 * 512 * 2
    assert missing_from(launches, warmed) == []
    # no table loaded: each bucket takes its default tile, 3 of the 9 candidates warmup builds
    assert len({spec.key for _, spec in launches}) == 2 * 2 * 3 and len(warmed[GroupedGemmKernel.name]) == 2 * 2 * 9


@pytest.mark.compiled
def test_drawn_launches_of_the_deepseek_shape_hit_the_warmed_binaries():
    config = dict(n=1408, k=2048, top_k=6, experts=64, max_tokens=512)
    assert check_coverage(GroupedGemmKernel(), config, max_examples=60) > 0


@pytest.mark.gpu
def test_warmed_manifest_serves_bf16_without_compiling():
    from jitkern.serve import load

    for loaded in load([str(MANIFEST)]):
        assert loaded.binaries > 0
    for shape in SHAPES.values():
        experts, top_k, n, k = shape["experts"], shape["top_k"], shape["n"], shape["k"]
        b = (torch.randn(experts, n, k) * k**-0.5).to(torch.bfloat16)
        b32 = b.float()  # the reference's float32 copy, made once
        for tokens in (1, 5, 16, 17, 64, 65, 300, 512):
            a = torch.randn(tokens, k, dtype=torch.bfloat16)
            ids = routing(tokens, experts, top_k, dtype=torch.int32)
            for weights in (None, torch.rand(tokens, top_k)):
                with assert_no_compile():
                    c = grouped_gemm(a, b, ids, weights)
                # exact bf16 products summed in fp32 by both, then one bf16 rounding: <= 1 ulp, 2**-7 relative
                torch.testing.assert_close(c, reference.grouped_gemm(a, b32, ids, weights), rtol=1e-2, atol=1e-2)
