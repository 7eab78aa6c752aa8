"""Prefill in two launches (``step5.ops.prefill_fused``) against the three-launch path and
the reference, on fresh random inputs.

Schedules of several steps carry each path's own ``mean`` and ring from step to step:
chunks of mixed lengths, starting and ending inside regions, long enough to wrap the
ring over the rows their first region reads; decode tokens and requests without a ring
in the same step; padding tokens with any owner; strided ``positions``; key and z as
views of one projection. After every step the two-launch path must have written exactly
the three-launch path's bytes (``mean`` poisoned, so bytes nobody writes show), and both
the reference's.

Under Triton's interpreter programs run one after another in program order, and the
single launch puts the requests' ring-writing programs first: were one to store rows
that a summary of the step still reads, the interpreter would show it. On a GPU
(``JITKERN_TEST_MODE=gpu``) the same tests run compiled, plus the ``gpu`` ones below.
"""

from __future__ import annotations

import contextlib
import random

import pytest
import torch

from jitkern.launch.plans import forget_plans
from jitkern.testing import record_launches
from step5 import Step5CSATailRing
from step5.ops import prefill_fused
from step5.ops.summary_update import (BuildFilledPrefillGroupsKernel, BuildPrefillGroupsKernel, build_prefill_groups,
                                      update_prefill)
from step5.reference import reference_update_prefill
from step5_testing import OTHER_POISON, BlockTables, assert_mean_matches, poisoned_mean, random_rows, strided_index

I16, I32, I64 = torch.int16, torch.int32, torch.int64
TWO_LAUNCHES = {"step5.build_prefill_groups_filled", "step5.prefill_update"}
THREE_LAUNCHES = {"step5.build_prefill_groups", "step5.prefill_summary", "step5.write_ring"}


@contextlib.contextmanager
def three_launches():
    """Every step through the three launches (and torch's fill), as before ``prefill_fused``."""
    saved = prefill_fused.MIN_TOKENS
    prefill_fused.MIN_TOKENS = 2**62
    forget_plans()  # a planned call would repeat the launches it recorded
    try:
        yield
    finally:
        prefill_fused.MIN_TOKENS = saved
        forget_plans()


def test_which_steps_take_two_launches():
    assert prefill_fused.two_launches(256, 1) and prefill_fused.two_launches(8192, 33)
    assert not prefill_fused.two_launches(255, 1)  # small mixed batches keep the three launches
    assert not prefill_fused.two_launches(8192, 34)  # more requests than the filled build scans for
    assert not prefill_fused.two_launches(300, 0)


# --- the filled build ----------------------------------------------------------------------------


def _group_inputs(requests: int, max_chunk: int, padding: int, dtypes, strided: bool):
    """(slots, positions, owners, query_start_loc) of a valid step: chunks of 0 .. max_chunk
    tokens at random first positions, then padding tokens (slot -1, any owner)."""
    slots, positions, owners, starts = [], [], [], [0]
    for request in range(requests):
        count = random.choice([0, 1, random.randint(1, max_chunk)])
        first = random.randint(0, 60)
        positions += range(first, first + count)
        slots += [request * 4096 + p for p in range(first, first + count)]
        owners += [request] * count
        starts.append(starts[-1] + count)
    slots += [-1] * padding
    positions += [random.randint(0, 30) for _ in range(padding)]
    owners += [random.randint(0, requests + 2) for _ in range(padding)]
    slot_dtype, position_dtype, owner_dtype = dtypes
    return (strided_index(slots, slot_dtype, False), strided_index(positions, position_dtype, strided),
            strided_index(owners, owner_dtype, False), torch.tensor(starts, dtype=I32))


@pytest.mark.parametrize("requests, max_chunk, padding, dtypes, strided", [
    (1, 700, 0, (I64, I64, I32), False),  # one long chunk: several programs, no halo
    (33, 40, 5, (I32, I64, I32), True),  # the most requests the filled build takes: the widest halo
    (7, 300, 3, (I64, I32, I64), False),
    (2, 12, 9, (I64, I64, I32), True),  # fewer tokens than one program's
])
def test_the_filled_build_writes_every_row_of_the_fill_and_scatter_build(requests, max_chunk, padding, dtypes,
                                                                         strided):
    """Called directly (any size): the group rows of ``build_prefill_groups``' kernel after
    torch's fill, every row written over a poison; request rows ``[first, end, the request's
    first token]`` where the three-launch build writes ``[first, end, 0]``."""
    for _ in range(3):
        slots, positions, owners, starts = _group_inputs(requests, max_chunk, padding, dtypes, strided)
        tokens = slots.shape[0]
        expected = torch.full((tokens // 8 + 2 * requests, 3), -1, dtype=I32)
        BuildPrefillGroupsKernel()(slots, positions, owners, starts, expected)
        filled = torch.full_like(expected, 0x5A5A5A5A)
        BuildFilledPrefillGroupsKernel()(slots, positions, owners, starts, filled)
        groups = tokens // 8 + requests
        assert torch.equal(filled[:groups], expected[:groups]), "group rows differ"
        assert torch.equal(filled[groups:, :2], expected[groups:, :2]), "request rows differ"
        listed = expected[groups:, 0] >= 0
        assert torch.equal(filled[groups:, 2], torch.where(listed, starts[:-1].to(filled.device), -1))


@pytest.mark.parametrize("requests, max_chunk, padding, dtypes, strided", [
    (7, 30, 3, (I64, I32, I32), True),
    (1, 256, 0, (I64, I64, I32), False),  # up to the 256 tokens of one program
    (300, 1, 40, (I32, I32, I64), True),  # many short requests: up to 1024 rows
])
def test_the_one_program_build_writes_every_row_of_the_fill_and_scatter_build(requests, max_chunk, padding, dtypes,
                                                                              strided):
    """Steps of at most 256 tokens and 1024 rows: one program writes -1 over a poison, then
    its entries; the rows are those of torch's fill followed by the scatter build."""
    from step5.ops.prefill import one_program

    for _ in range(3):
        slots, positions, owners, starts = _group_inputs(requests, max_chunk, padding, dtypes, strided)
        tokens = slots.shape[0]
        expected = torch.full((tokens // 8 + 2 * requests, 3), -1, dtype=I32)
        if not one_program(tokens, expected.shape[0]) or prefill_fused.two_launches(tokens, requests):
            continue  # a step of exactly 256 tokens takes the filled build (two_launches) instead
        BuildPrefillGroupsKernel()(slots, positions, owners, starts, expected)
        built = torch.full_like(expected, 0x5A5A5A5A)
        with record_launches() as launches:
            assert build_prefill_groups(slots, positions, owners, starts, out=built) is built
        assert [(kernel.name, spec.grid) for kernel, spec in launches] == [("step5.build_prefill_groups", (1,))]
        assert torch.equal(built, expected), "rows differ"


def test_a_step_of_requests_without_tokens_gets_every_row_minus_one():
    empty = torch.empty(0, dtype=I64)
    built = torch.full((6, 3), 0x5A5A5A5A, dtype=I32)
    assert build_prefill_groups(empty, empty, empty.to(I32), torch.zeros(4, dtype=I32), out=built) is built
    assert bool((built == -1).all())


@pytest.mark.parametrize("two, requests, max_chunk, padding, dtypes, strided", [
    (False, 7, 30, 3, (I64, I32, I32), True),  # up to 256 tokens: one program writes every row
    (False, 40, 30, 0, (I32, I32, I64), False),  # more requests than the filled build takes
    (True, 33, 40, 5, (I32, I64, I32), False),  # the most requests the filled build takes
    (True, 1, 700, 0, (I64, I64, I32), True),
])
def test_out_gets_the_bytes_of_the_allocating_call(two, requests, max_chunk, padding, dtypes, strided):
    """``out=``, poisoned first, ends as the tensor ``build_prefill_groups`` allocates, on
    each path (``two``: the filled build; else one program, or the fill and the build)."""
    for _ in range(3):
        inputs = _group_inputs(requests, max_chunk, padding, dtypes, strided)
        while prefill_fused.two_launches(inputs[0].shape[0], requests) != two:
            inputs = _group_inputs(requests, max_chunk, padding, dtypes, strided)
        expected = build_prefill_groups(*inputs)
        out = torch.full_like(expected, 0x7F7F7F7F)
        assert build_prefill_groups(*inputs, out=out) is out
        assert torch.equal(out, expected), "rows differ from the allocating call's"


# --- whole steps: two launches, three launches, the reference ------------------------------------


class Paths:
    """The state (``mean`` and ring) of each path, from the same start."""

    def __init__(self, block_size: int, capacity: int, requests: int, blocks: int):
        self.capacity = capacity
        self.ring = Step5CSATailRing(requests, 4096, capacity=capacity)
        self.ring.rows.copy_(torch.randn(self.ring.rows.shape))  # rows of earlier chunks
        mean = poisoned_mean(blocks, block_size, strided=True)
        self.state = {name: (mean.clone(), self.ring.rows.clone()) for name in ("two", "three", "reference")}
        self.state["other"] = (mean.clone().fill_(OTHER_POISON), self.ring.rows.clone())

    def step(self, key, z, slots, positions, owners, starts, base, ring_slots) -> None:
        args = (positions, base, ring_slots)

        def launches(name):
            forget_plans()  # (on a GPU) a call planned earlier would launch unrecorded
            mean, ring = self.state[name]
            groups = build_prefill_groups(slots, positions, owners, starts)
            update_prefill(key, z, groups, *args, mean, ring, self.capacity)

        with record_launches() as two:
            launches("two")
        assert {kernel.name for kernel, _ in two} == TWO_LAUNCHES
        with three_launches(), record_launches() as three:
            launches("three")
        assert {kernel.name for kernel, _ in three} == THREE_LAUNCHES
        for name in ("reference", "other"):
            mean, ring = self.state[name]
            reference_update_prefill(key, z, slots, positions, owners, starts, base, ring_slots, mean, ring,
                                     self.capacity)

    def check(self, step: int) -> None:
        (two, two_ring), (three, three_ring) = self.state["two"], self.state["three"]
        (expected, expected_ring), (other, _) = self.state["reference"], self.state["other"]
        assert torch.equal(two, three), f"step {step}: two launches wrote other summary bytes than three"
        assert torch.equal(two_ring.view(I16), three_ring.view(I16)), f"step {step}: ring rows differ"
        assert_mean_matches(two, expected, other)
        assert torch.equal(two_ring.view(I16), expected_ring.view(I16)), f"step {step}: ring differs from reference"



def run_schedule(block_size: int, capacity: int, steps: int, layout: str, dtypes, strided: bool,
                 long_chunk: int = 300) -> None:
    """``steps`` steps of 5 requests: one long chunk per step (up to ``long_chunk`` tokens, at
    least 256 in the step), short chunks and decode tokens, a request without a ring, a
    request with no tokens at times, padding."""
    requests, span = 5, steps * (long_chunk + 48) + 20  # span: positions a request may reach
    tables = BlockTables(num_blocks=requests * -(-span // block_size), block_size=block_size)
    paths = Paths(block_size, capacity, requests, len(tables.free))
    for request in range(requests - 1):
        paths.ring.allocate(request)  # the last request has no ring
    lengths = [random.randint(0, 20) for _ in range(requests)]  # positions already handled
    block_tables = [tables.take(span) for _ in range(requests)]
    for step in range(steps):
        counts = [random.choice([0, 1, random.randint(1, 48)]) for _ in range(requests)]
        counts[random.randrange(requests - 1)] = random.randint(256, long_chunk)
        padding = random.choice([0, 3, 8])
        ids = [r if r < requests - 1 else None for r in range(requests)]
        slots, positions, owners, starts = [], [], [], [0]
        for request, count in enumerate(counts):
            first = lengths[request]
            positions += range(first, first + count)
            slots += [tables.slot(block_tables[request], p) for p in range(first, first + count)]
            owners += [request] * count
            starts.append(starts[-1] + count)
        slots += [-1] * padding
        positions += [0] * padding
        owners += [random.randint(0, requests + 1) for _ in range(padding)]
        tokens = len(slots)
        metadata = paths.ring.prepare(ids, lengths, counts, num_tokens=tokens)
        key, z = random_rows(tokens, layout)
        slot_dtype, position_dtype, owner_dtype = dtypes
        paths.step(key, z, strided_index(slots, slot_dtype, False), strided_index(positions, position_dtype, strided),
                   strided_index(owners, owner_dtype, False), torch.tensor(starts, dtype=owner_dtype),
                   metadata.base[:tokens], metadata.slot_mapping[:tokens])
        paths.check(step)
        lengths = [length + count for length, count in zip(lengths, counts)]


@pytest.mark.parametrize("block_size, capacity, layout, dtypes, strided", [
    (64, 8, "fused", (I64, I64, I32), True),  # capacity 8: a chunk's last rows reuse the rows its first region reads
    (256, 16, "odd_rows", (I32, I32, I32), False),
    (8, 10, "interleaved", (I64, I32, I64), True),  # a capacity no multiple of 8; a region is a block
])
def test_two_launches_write_the_bytes_of_three_launches_and_the_reference(block_size, capacity, layout, dtypes,
                                                                          strided):
    run_schedule(block_size, capacity, steps=3, layout=layout, dtypes=dtypes, strided=strided)


def test_a_step_just_below_256_tokens_keeps_three_launches():
    slots, positions = torch.arange(255), torch.arange(3, 258)
    owners, starts = torch.zeros(255, dtype=I32), torch.tensor([0, 255], dtype=I32)
    ring = Step5CSATailRing(1, 512, capacity=8)
    ring.allocate(0)
    metadata = ring.prepare([0], [3], [255])
    key, z = random_rows(255, "fused")
    groups = build_prefill_groups(slots, positions, owners, starts)  # run: update_prefill checks its rows on the CPU
    forget_plans()
    with record_launches(dry_run=True) as launches:
        build_prefill_groups(slots, positions, owners, starts)
        update_prefill(key, z, groups, positions, metadata.base[:255], metadata.slot_mapping[:255],
                       poisoned_mean(4, 256, strided=False), ring.rows, 8)
    assert {kernel.name for kernel, _ in launches} == THREE_LAUNCHES


# --- on the GPU: the benchmark's step, many programs at once, CUDA graphs -------------------------


def _one_long_chunk(tokens: int, first: int = 3, capacity: int = 8, block_size: int = 256):
    """The benchmark's prefill step: one request, ``tokens`` tokens from position ``first``."""
    ring = Step5CSATailRing(1, tokens, capacity=capacity)
    ring.rows.copy_(torch.randn(ring.rows.shape))
    ring.allocate(0)
    metadata = ring.prepare([0], [first], [tokens])
    positions = torch.arange(first, first + tokens)
    key, z = random_rows(tokens, "fused")
    mean = poisoned_mean((first + tokens) // block_size + 2, block_size, strided=False)
    return dict(slots=positions.clone(), positions=positions, owners=torch.zeros(tokens, dtype=I32),
                starts=torch.tensor([0, tokens], dtype=I32), key=key, z=z, base=metadata.base[:tokens],
                ring_slots=metadata.slot_mapping[:tokens], mean=mean, ring=ring.rows, capacity=capacity)


def _step(i, mean, ring) -> None:
    groups = build_prefill_groups(i["slots"], i["positions"], i["owners"], i["starts"])
    update_prefill(i["key"], i["z"], groups, i["positions"], i["base"], i["ring_slots"], mean, ring, i["capacity"])


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [8192, 65536])
def test_the_benchmark_step_on_the_gpu_writes_the_bytes_of_three_launches(tokens):
    """Capacity 8, first position 3: the request's last rows go to the ring rows its first
    summary reads, while a thousand other programs run; many trials, fresh inputs."""
    for _ in range(5):
        i = _one_long_chunk(tokens)
        two = (i["mean"].clone(), i["ring"].clone())
        _step(i, *two)
        with three_launches():
            three = (i["mean"].clone(), i["ring"].clone())
            _step(i, *three)
        torch.cuda.synchronize()
        assert torch.equal(two[0], three[0]) and torch.equal(two[1].view(I16), three[1].view(I16))


@pytest.mark.gpu
def test_a_schedule_of_long_steps_on_the_gpu():
    run_schedule(256, 16, steps=4, layout="fused", dtypes=(I64, I64, I32), strided=False, long_chunk=3000)
    run_schedule(64, 8, steps=4, layout="z_offset", dtypes=(I32, I32, I32), strided=True, long_chunk=3000)


@pytest.mark.gpu
def test_the_two_launches_in_a_cuda_graph_replay_what_they_do_eagerly():
    """Build and update captured together (PDL on sm_90+), replayed on fresh inputs."""
    static = _one_long_chunk(8192)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _step(static, static["mean"], static["ring"])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _step(static, static["mean"], static["ring"])
    for _ in range(3):
        fresh = _one_long_chunk(8192)
        for name, value in fresh.items():
            if isinstance(value, torch.Tensor):
                static[name].copy_(value)
        graph.replay()
        _step(fresh, fresh["mean"], fresh["ring"])
        torch.cuda.synchronize()
        assert torch.equal(static["mean"], fresh["mean"])
        assert torch.equal(static["ring"].view(I16), fresh["ring"].view(I16))


# --- num_warps (spec: "Why the Step5 kernels use one warp"): the barrier and the fp8 path -------


@pytest.mark.compiled
def test_the_update_in_one_launch_converts_to_fp8_right_at_any_num_warps(triton_cache):
    """Compiled for cuda:90 with PDL: no fp8 pair merges its upper half from elsewhere, the
    hardware conversion wherever ptxas gets it right, and the grid dependency waited on."""
    from step5_testing import foreign_fp8_merges
    from test_warps import WARPS, compile_with_warps, sass_of

    kernel = prefill_fused.PrefillUpdateKernel()
    (key,) = kernel.get_warmup_keys(block_size=64, ring_capacity=8, launch_pdl=[True])
    for warps in WARPS:
        binary = compile_with_warps(kernel, key, warps)
        sass = sass_of(binary)
        assert not foreign_fp8_merges(sass), f"{warps} warps"
        assert ("F2FP.SATFINITE.E4M3" in sass) == (warps != 4), f"{warps} warps"
        assert "griddepcontrol.wait" in binary.asm["ptx"] and binary.metadata.launch_pdl


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_the_update_in_one_launch_writes_the_same_bytes_at_any_num_warps(num_warps):
    """With several warps the threads that store a request's rows are not the ones that read
    them: the barrier orders them. The bytes of the shipped 1-warp kernel, at any warps."""
    from step5_testing import launch_with_warps

    i = _one_long_chunk(8192)
    groups = build_prefill_groups(i["slots"], i["positions"], i["owners"], i["starts"])
    kernel = prefill_fused.PrefillUpdateKernel()
    written = {}
    for warps in (1, num_warps):
        mean, ring = i["mean"].clone(), i["ring"].clone()
        spec = kernel.launch_spec(i["key"], i["z"], groups, i["positions"], i["base"], i["ring_slots"], mean, ring,
                                  i["capacity"], prefill_fused.launch_pdl(mean.device))
        launch_with_warps(kernel, spec, warps)
        written[warps] = (mean, ring)
    torch.cuda.synchronize()
    (one, one_ring), (many, many_ring) = written[1], written[num_warps]
    assert torch.equal(one, many) and torch.equal(one_ring.view(I16), many_ring.view(I16))


@pytest.mark.compiled
def test_each_target_warms_the_pdl_variant_its_gpu_launches():
    """The manifest lists both PDL variants; an H200 launches the PDL one, an A100 or an
    MI300 the plain one, so each target's warmup, lock and load() take only that one."""
    from pathlib import Path

    from jitkern.manifest import resolve

    manifest = Path(__file__).resolve().parents[2] / "warmup_manifests" / "step5-bs256-mtp3.json"
    deployment, _ = resolve([str(manifest)], "cuda:90,cuda:80,hip:gfx942")
    two_launches = (prefill_fused.PrefillUpdateKernel.name, BuildFilledPrefillGroupsKernel.name)
    for target, pdl in (("cuda:90", True), ("cuda:80", False), ("hip:gfx942", False)):
        variants = {key.key.launch_pdl for kernel, key in deployment.by_target[target] if kernel in two_launches}
        assert variants == {pdl}, target
    assert len({key for _kernel, key in deployment.entries}) > len(deployment.by_target["cuda:90"])
