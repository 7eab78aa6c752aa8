"""Each update path against the reference of ``step5/reference.py``, on fresh random inputs.

Runs the kernels under Triton's CPU interpreter (tests/conftest.py). Every case poisons
``mean`` first and runs the reference twice, on two different poisons, so bytes nobody
should write are told apart from summaries: the former must be untouched, the latter
within one fp8 step of the reference and >= 99% equal. Ring contents must equal the
reference's bit for bit.
"""

from __future__ import annotations

import random

import pytest
import torch
import triton
import triton.language as tl

from jitkern.settings import interpreting
from step5 import Step5CSATailRing
from step5.ops.kernels.summary_math import encode_fp8_e4m3
from step5.ops.summary_update import (
    build_prefill_groups,
    prefill_metadata_geometry,
    prefill_metadata_layout,
    summary_geometry,
    summary_layout,
    update_decode,
    update_prefill,
    update_verify,
)
from step5.reference import (
    assert_summaries_close,
    fp8_e4m3_bytes,
    reference_update_decode,
    reference_update_prefill,
    reference_update_verify,
)
from step5_testing import (
    load_golden,
    OTHER_POISON,
    BlockTables,
    assert_mean_matches,
    poisoned_mean,
    random_rows,
    strided_index,
)

I32, I64 = torch.int32, torch.int64


def _run_both(kernel_call, reference_call, mean: torch.Tensor, ring: torch.Tensor) -> None:
    """Run the reference on copies (two poisons), the kernel in place, and compare."""
    expected = mean.clone()
    expected_other = mean.clone().fill_(OTHER_POISON)
    expected_ring, other_ring = ring.clone(), ring.clone()
    reference_call(expected, expected_ring)
    reference_call(expected_other, other_ring)
    kernel_call(mean, ring)
    assert_mean_matches(mean, expected, expected_other)
    assert torch.equal(ring.view(torch.int16), expected_ring.view(torch.int16)), "ring rows differ from the reference"


# --- the fp8 encoding on its own -------------------------------------------------------


@triton.jit
def _encode_kernel(X, Out, N: tl.constexpr, HW_FP8: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(Out + offsets, encode_fp8_e4m3(tl.load(X + offsets), HW_FP8))


def _has_hardware_fp8() -> bool:
    """An NVIDIA GPU with the bf16 and e4m3 conversions (sm_89+), whatever JITKERN_PORTABLE_PATHS says."""
    return (not interpreting() and torch.cuda.is_available() and torch.version.hip is None
            and torch.cuda.get_device_capability() >= (8, 9))


@pytest.mark.parametrize("hardware", [
    False, pytest.param(True, marks=pytest.mark.skipif(not _has_hardware_fp8(), reason="needs NVIDIA sm_89+")),
], ids=["integer-path", "hardware-path"])
def test_fp8_encoding_matches_reference_on_every_kind_of_float(hardware):
    """bf16-then-fp8 rounding, ties, saturation, subnormals, signed zeros, inf and NaN: the
    integer form (sm_80, AMD, the interpreter) everywhere, the hardware conversions on an
    NVIDIA GPU that has them: the same bytes."""
    specials = [448.0, 460.0, 464.0, 470.0, 1e6, float("inf"), -float("inf"), -500.0, 0.0, -0.0,
                2.0**-10, 2.0**-9 * 1.5, 2.0**-6 * 0.99, 1.0625 + 2.0**-12, 1.0625, 1.1875, 3e-39]
    random_bits = torch.randint(-(2**31), 2**31 - 1, (4096,), dtype=torch.int64).to(torch.int32).view(torch.float32)
    values = torch.cat([torch.tensor(specials), random_bits, torch.randn(4096) * torch.exp(torch.randn(4096) * 4)])
    values = values[: 8192].contiguous()
    out = torch.empty(values.shape, dtype=torch.uint8)
    _encode_kernel[(1,)](values, out, values.numel(), HW_FP8=hardware)
    expected = fp8_e4m3_bytes(values)
    is_nan = values.isnan()
    assert ((out[is_nan] & 0x7F) == 0x7F).all(), "NaN must stay NaN"
    assert torch.equal(out[~is_nan], expected[~is_nan])


# --- golden vectors through the kernels ---------------------------------------------------


def test_decode_and_prefill_kernels_match_golden_vectors():
    golden = load_golden("step5_regions.pt")
    cases, capacity = golden["key"].shape[0], 8
    # decode: rows 0..6 wait in the ring, row 7 closes the region
    ring = torch.zeros(cases * capacity, 512, dtype=torch.bfloat16)
    for case in range(cases):
        ring[case * capacity : case * capacity + 7] = torch.cat([golden["key"][case, :7], golden["z"][case, :7]], 1)
    mean = poisoned_mean(cases, 8, strided=True)
    update_decode(
        golden["key"][:, 7:8].contiguous(), golden["z"][:, 7:8].contiguous(),
        torch.arange(cases) * 8 + 7, torch.full((cases,), 7), torch.arange(cases, dtype=I32) * capacity,
        mean, ring, capacity,
    )
    assert_summaries_close(mean[:, 0], golden["summary"], "decode vs golden")
    # prefill: all 8 rows in this step, one request per case
    mean = poisoned_mean(cases, 8, strided=False)
    key = golden["key"].reshape(cases * 8, 1, 256)
    z = golden["z"].reshape(cases * 8, 1, 256)
    slots = torch.arange(cases * 8)
    positions = torch.arange(8).repeat(cases)
    owners = torch.arange(cases, dtype=I32).repeat_interleave(8)
    query_start_loc = torch.arange(cases + 1, dtype=I32) * 8
    groups = build_prefill_groups(slots, positions, owners, query_start_loc)
    base = owners * capacity
    update_prefill(key, z, groups, positions, base, torch.full_like(base, -1), mean, ring, capacity)
    assert_summaries_close(mean[:, 0], golden["summary"], "prefill vs golden")


# --- decode ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block_size, capacity, layout, index_dtypes, strided",
    [
        (64, 8, "contiguous", (I64, I64, I32), False),
        (8, 11, "fused", (I32, I64, I64), True),  # odd capacity; a region is a whole block
        (256, 16, "odd_rows", (I64, I32, I32), True),
        (16, 8, "interleaved", (I32, I32, I32), False),
    ],
)
def test_update_decode_matches_reference(block_size, capacity, layout, index_dtypes, strided):
    requests = 12
    tables = BlockTables(num_blocks=requests * (64 // block_size + 2) + 4, block_size=block_size)
    positions, slots, bases = [], [], []
    for request in range(requests):
        position = 8 * random.randint(0, 7) + random.choice([7, 7, 7, 0, 3, 6])
        positions.append(position)
        slots.append(tables.slot(tables.take(position + 1), position))
        bases.append(request * capacity)
    bases[1] = -1  # a request without a ring: skipped
    positions += [7, 0, 15]  # CUDA-graph padding: slot -1
    slots += [-1, -1, -1]
    bases += [0, 0, capacity]
    tokens = len(slots)
    key, z = random_rows(tokens, layout)
    slot_t = torch.tensor(slots, dtype=index_dtypes[0])
    position_t = strided_index(positions, index_dtypes[1], strided)
    base_t = torch.tensor(bases, dtype=index_dtypes[2])
    mean = poisoned_mean(requests * (64 // block_size + 2) + 4, block_size, strided)
    ring = torch.randn(requests * capacity + 3, 512).to(torch.bfloat16)  # rows of earlier steps

    _run_both(
        lambda m, r: update_decode(key, z, slot_t, position_t, base_t, m, r, capacity),
        lambda m, r: reference_update_decode(key, z, slot_t, position_t, base_t, m, r, capacity),
        mean, ring,
    )


# --- prefill (chunked, mixed with decode) ---------------------------------------------------


def _prefill_step(block_size, capacity, chunks, layout, index_dtypes, strided, padding):
    """``chunks``: (first position, token count, has ring) per request, in token order."""
    tables = BlockTables(num_blocks=sum(-(-(p + n) // block_size) for p, n, _ in chunks) + 4, block_size=block_size)
    ring = Step5CSATailRing(len(chunks), 512, capacity=capacity)
    ring.rows.copy_(torch.randn(ring.rows.shape))  # rows of earlier chunks
    ids, slots, positions, owners, starts = [], [], [], [], [0]
    for request, (first, count, has_ring) in enumerate(chunks):
        if has_ring:
            ring.allocate(request)
        ids.append(request if has_ring else None)
        table = tables.take(first + count)
        for position in range(first, first + count):
            slots.append(tables.slot(table, position))
            positions.append(position)
            owners.append(request)
        starts.append(starts[-1] + count)
    slots += [-1] * padding
    positions += [0] * padding
    owners += [0] * padding
    tokens = len(slots)
    metadata = ring.prepare(ids, [c[0] for c in chunks], [c[1] for c in chunks], num_tokens=tokens)
    slot_dtype, position_dtype, owner_dtype = index_dtypes
    slot_t = strided_index(slots, slot_dtype, False)
    position_t = strided_index(positions, position_dtype, strided)
    owner_t = strided_index(owners, owner_dtype, False)
    start_t = torch.tensor(starts, dtype=owner_dtype)
    key, z = random_rows(tokens, layout)
    base, ring_slots = metadata.base[:tokens], metadata.slot_mapping[:tokens]
    mean = poisoned_mean(len(tables.free) + sum(-(-(p + n) // block_size) for p, n, _ in chunks), block_size, strided)

    def kernels(m, r):
        groups = build_prefill_groups(slot_t, position_t, owner_t, start_t)
        update_prefill(key, z, groups, position_t, base, ring_slots, m, r, capacity)

    _run_both(
        kernels,
        lambda m, r: reference_update_prefill(key, z, slot_t, position_t, owner_t, start_t, base, ring_slots, m, r, capacity),
        mean, ring.rows,
    )


@pytest.mark.parametrize(
    "block_size, capacity, layout, index_dtypes, strided",
    [
        (64, 8, "fused", (I64, I64, I32), True),
        (8, 16, "contiguous", (I32, I32, I64), False),
        (256, 10, "odd_rows", (I64, I32, I32), False),
        (32, 8, "interleaved", (I64, I64, I64), True),
    ],
)
def test_update_prefill_matches_reference(block_size, capacity, layout, index_dtypes, strided):
    chunks = [(0, random.randint(9, 40), True)]  # a first chunk
    chunks += [(random.randint(1, 30), random.randint(1, 30), True) for _ in range(3)]  # later chunks
    chunks += [(5, 3 * capacity + 4, True)]  # long chunk: its ring writes wrap over rows it reads
    chunks += [(random.randint(0, 40), 1, True) for _ in range(3)]  # decode tokens in the same batch
    chunks += [(random.randint(0, 20), 12, False)]  # no ring: skipped
    random.shuffle(chunks)
    _prefill_step(block_size, capacity, chunks, layout, index_dtypes, strided, padding=random.choice([0, 5]))


def test_update_prefill_of_a_chunk_shorter_than_a_region():
    """Chunks that close nothing, close exactly at their first token, or end right at a close."""
    chunks = [(3, 2, True), (7, 1, True), (8, 8, True), (1, 6, True), (6, 2, True)]
    _prefill_step(64, 8, chunks, "contiguous", (I64, I64, I32), False, padding=3)


# --- verify ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block_size, draft_tokens, capacity, layout, index_dtypes",
    [
        (64, 3, 10, "fused", (I64, I32, I32, I32)),  # capacity exactly 7 + k
        (256, 3, 16, "contiguous", (I32, I64, I64, I64)),
        (16, 1, 8, "odd_rows", (I64, I32, I32, I32)),
        (8, 9, 16, "interleaved", (I64, I32, I32, I32)),  # q = 10 > 8: a region entirely in the step
    ],
)
def test_update_verify_matches_reference(block_size, draft_tokens, capacity, layout, index_dtypes):
    q = 1 + draft_tokens
    requests = 6
    tables = BlockTables(num_blocks=requests * (80 // block_size + 2) + 4, block_size=block_size)
    seq_lens, slots, bases = [], [], []
    for request in range(requests):
        seq_len = random.randint(q, 70)
        if request == 0:  # its first token closes a region, whose first row the last token's write reuses
            seq_len = q + 7 + 8 * random.randint(0, 5)
        table = tables.take(seq_len)
        seq_lens.append(seq_len)
        slots += [tables.slot(table, p) for p in range(seq_len - q, seq_len)]
        bases += [request * capacity] * q
    bases[q : 2 * q] = [-1] * q  # request 1 has no ring
    seq_lens.append(0)  # a CUDA-graph padding request
    slots += [-1] * q
    bases += [-1] * q
    tokens = len(slots)
    slot_dtype, start_dtype, seq_dtype, base_dtype = index_dtypes
    slot_t = torch.tensor(slots, dtype=slot_dtype)
    start_t = torch.arange(requests + 2, dtype=start_dtype) * q
    seq_t = torch.tensor(seq_lens, dtype=seq_dtype)
    base_t = torch.tensor(bases, dtype=base_dtype)
    key, z = random_rows(tokens, layout)
    mean = poisoned_mean(requests * (80 // block_size + 2) + 4, block_size, strided=True)
    ring = torch.randn(requests * capacity, 512).to(torch.bfloat16)

    _run_both(
        lambda m, r: update_verify(key, z, slot_t, start_t, seq_t, base_t, m, r, capacity),
        lambda m, r: reference_update_verify(key, z, slot_t, start_t, seq_t, base_t, m, r, capacity),
        mean, ring,
    )


# --- wrong inputs: a clear ValueError naming the argument, before any launch ----------------


def _decode_args(tokens=4, block_size=64, capacity=8):
    key, z = random_rows(tokens, "contiguous")
    return dict(
        key=key, z=z, slots=torch.arange(tokens) * 8 + 7, positions=torch.full((tokens,), 7),
        ring_base=torch.arange(tokens, dtype=I32) * capacity, mean=poisoned_mean(tokens, block_size, False),
        ring=torch.zeros(max(tokens, 1) * capacity, 512, dtype=torch.bfloat16), capacity=capacity,
    )


def _bad_mean_inner_strides():
    pages = torch.zeros(4, 8, 512, dtype=torch.uint8)
    return pages[:, :, :256]  # stride(1) == 512


WRONG_DECODE = [
    ("key", lambda a: a["key"].float()),
    ("key", lambda a: a["key"].reshape(4, 256, 1)),
    ("z", lambda a: a["z"][:3]),
    ("z", lambda a: a["z"].expand(4, 2, 256)),
    ("slots", lambda a: a["slots"].float()),
    ("slots", lambda a: a["slots"][:3]),
    ("positions", lambda a: a["positions"].to("meta")),
    ("positions", lambda a: torch.cat([a["positions"], a["positions"]])),
    ("ring_base", lambda a: a["ring_base"][None]),
    ("ring_base", lambda a: torch.cat([a["ring_base"], a["ring_base"]])[::2]),  # only positions may be strided
    ("mean", lambda a: _bad_mean_inner_strides()),
    ("mean", lambda a: a["mean"].to(torch.int8)),
    ("ring", lambda a: a["ring"][:, :256]),
    ("ring", lambda a: a["ring"].float()),
    ("capacity", lambda a: 6),
]


@pytest.mark.parametrize("name, wrong", WRONG_DECODE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG_DECODE)])
def test_update_decode_rejects_wrong_inputs(name, wrong):
    args = _decode_args()
    untouched = args["mean"].clone()
    args[name] = wrong(args)
    with pytest.raises(ValueError, match=f"^{name}:"):
        update_decode(**args)
    if name != "mean":
        assert torch.equal(args["mean"], untouched), "something was launched before the error"


@pytest.mark.parametrize("name", ["key", "z"])
def test_update_decode_refuses_a_stride_of_2_31_or_more(name):
    """Every stride of key and z stays below 2**31, as the binaries keep integers i32 (the
    one-wide dim 1's is tried: it needs no memory)."""
    args = _decode_args(tokens=random.randint(1, 8))
    stride = 2**31 + random.randint(0, 2**31)
    args[name] = args[name].as_strided(args[name].shape, (256, stride, 1))
    with pytest.raises(ValueError) as refused:
        update_decode(**args)
    assert str(refused.value) == f"{name}: strides (256, {stride}, 1) must be below 2**31"


def test_update_verify_rejects_a_ring_smaller_than_7_plus_k():
    args = _decode_args(tokens=8, capacity=10)  # ring bases 10 apart: also right for capacity 9
    verify_args = dict(args, query_start_loc=torch.tensor([0, 4, 8], dtype=I32), seq_lens=torch.tensor([8, 16], dtype=I32))
    del verify_args["positions"]
    with pytest.raises(ValueError, match="^capacity:.*7 \\+ 3"):
        update_verify(**dict(verify_args, capacity=9))  # q = 4: k = 3 needs 10 rows
    with pytest.raises(ValueError, match="^query_start_loc:"):
        update_verify(**dict(verify_args, capacity=10, query_start_loc=torch.tensor([0, 8], dtype=I32)))
    with pytest.raises(ValueError, match="^slots:"):
        update_verify(**dict(verify_args, capacity=10, seq_lens=torch.tensor([8, 16, 17], dtype=I32),
                             query_start_loc=torch.tensor([0, 3, 6, 8], dtype=I32)))


def test_update_verify_refuses_tokens_of_no_request():
    """With no requests nothing launches: tokens there would be dropped without a word."""
    tokens = random.randint(1, 12)
    args = dict(_decode_args(tokens=tokens, capacity=10), query_start_loc=torch.zeros(1, dtype=I32),
                seq_lens=torch.zeros(0, dtype=I32))
    del args["positions"]
    with pytest.raises(ValueError, match=rf"^slots: {tokens} tokens, not the same number \(at least one\) for each of "
                                         "seq_lens' 0 requests"):
        update_verify(**args)
    update_verify(**dict(args, **{name: args[name][:0] for name in ("key", "z", "slots", "ring_base")}))  # an empty step


def test_prefill_functions_reject_wrong_inputs():
    args = _decode_args(tokens=8)
    slots, positions = args["slots"], args["positions"]
    owners = torch.zeros(8, dtype=I32)
    starts = torch.tensor([0, 8], dtype=I32)
    with pytest.raises(ValueError, match="^owners:"):
        build_prefill_groups(slots, positions, owners[:7], starts)
    with pytest.raises(ValueError, match="^query_start_loc:"):
        build_prefill_groups(slots, positions, owners, starts.float())
    groups = build_prefill_groups(slots, positions, owners, starts)
    call = dict(key=args["key"], z=args["z"], metadata=groups, positions=positions, ring_base=args["ring_base"],
                ring_slots=torch.full((8,), -1, dtype=I32), mean=args["mean"], ring=args["ring"], capacity=8)
    for name, wrong in [("metadata", groups.long()), ("ring_slots", call["ring_slots"][:5]),
                        ("positions", positions.float()), ("capacity", 5), ("key", args["key"][:, :, :128])]:
        with pytest.raises(ValueError, match=f"^{name}:"):
            update_prefill(**dict(call, **{name: wrong}))


def test_summary_geometry_and_empty_steps():
    mean = poisoned_mean(3, 64, strided=True)
    assert summary_geometry(mean) == (64 // 8 * 256 + 512, 64)
    with pytest.raises(ValueError, match="^mean:"):
        summary_geometry(_bad_mean_inner_strides())
    assert (summary_layout, prefill_metadata_layout) == (summary_geometry, prefill_metadata_geometry)  # former names
    empty = _decode_args(tokens=0)
    update_decode(**empty)  # nothing to do, nothing launched
    groups = build_prefill_groups(empty["slots"], empty["positions"], torch.zeros(0, dtype=I32), torch.zeros(1, dtype=I32))
    assert groups.shape == (0, 3)
