"""Small, realistic calls of every shipped kernel, for launch-cost benchmarks and checks.

``public_calls(device)`` lists a call of each public function, as (function, args, kwargs),
with deployment-shaped inputs (batch 64 decode and verify, prefill chunks of 200 and 300
tokens, ``build_prefill_groups`` with and without ``out=``), which ``drive_all`` makes;
``decode_step`` builds one decode step of every package for CUDA-graph timing
(``graph_microseconds``: captured by hand, or by ``torch.compile``'s reduce-overhead mode).
"""

from __future__ import annotations

import torch

import deepseek_v4
from jitkern.examples.axpy import axpy
from step5 import Step5CSATailRing
from step5.ops import summary_update as step5_ops

BATCH, SPAN, BLOCK_SIZE, DRAFT_TOKENS = 64, 512, 256, 3


def axpy_call(device: str):
    x = torch.randn(4096, device=device)
    return axpy, (x, torch.randn_like(x), 2.0, torch.empty_like(x)), {}


def _rows(tokens: int, device: str):
    projection = torch.randn(tokens, 1, 512, device=device).to(torch.bfloat16)
    return projection[:, :, :256], projection[:, :, 256:]


def _step5_state(device: str, batch: int = BATCH):
    ring = Step5CSATailRing(batch, 4096, draft_tokens=DRAFT_TOKENS, device=device)
    for request in range(batch):
        ring.allocate(request)
    mean = torch.zeros(batch * SPAN // BLOCK_SIZE, BLOCK_SIZE // 8, 256, dtype=torch.uint8, device=device)
    return ring, mean


def step5_decode(device: str, batch: int = BATCH):
    """Arguments of one ``update_decode`` at ``batch`` (one token in eight closes a region)."""
    ring, mean = _step5_state(device, batch)
    positions = torch.randint(0, SPAN, (batch,))
    positions[::8] |= 7
    ring.prepare(list(range(batch)), positions.tolist(), [1] * batch)
    key, z = _rows(batch, device)
    slots = (torch.arange(batch) * SPAN + positions).to(device)
    return (key, z, slots, positions.to(device), ring.metadata().base[:batch], mean, ring.rows, ring.capacity)


def step5_calls(device: str, batch: int = BATCH) -> list:
    """(public function, arguments, keyword arguments) of decode and verify at ``batch``, and
    two prefill chunks: 200 tokens (three launches) and 300 (two: ``step5.ops.prefill_fused``)."""
    calls = [(step5_ops.update_decode, step5_decode(device, batch), {})]

    ring, mean = _step5_state(device, batch)
    q = 1 + DRAFT_TOKENS
    seq_lens = torch.randint(q, SPAN, (batch,), dtype=torch.int32)
    ring.prepare(list(range(batch)), (seq_lens - q).tolist(), [q] * batch)
    positions = ((seq_lens - q)[:, None] + torch.arange(q)).flatten()
    key, z = _rows(batch * q, device)
    slots = (torch.arange(batch).repeat_interleave(q) * SPAN + positions).to(device)
    query_start_loc = (torch.arange(batch + 1, dtype=torch.int32) * q).to(device)
    calls.append((step5_ops.update_verify, (key, z, slots, query_start_loc, seq_lens.to(device),
                                            ring.metadata().base[:batch * q], mean, ring.rows, ring.capacity), {}))

    for chunk in (200, 300):  # three launches below 256 tokens, two from there (step5.ops.prefill_fused)
        ring, mean = _step5_state(device, batch)
        ring.prepare([0], [0], [chunk])
        positions = torch.arange(chunk, device=device)
        slots = positions.clone()
        owners = torch.zeros(chunk, dtype=torch.int32, device=device)
        query_start_loc = torch.tensor([0, chunk], dtype=torch.int32, device=device)
        group_args = (slots, positions, owners, query_start_loc)
        metadata = step5_ops.build_prefill_groups(*group_args)
        key, z = _rows(chunk, device)
        ring_metadata = ring.metadata()
        calls.append((step5_ops.build_prefill_groups, group_args, {}))
        calls.append((step5_ops.build_prefill_groups, group_args, {"out": torch.empty_like(metadata)}))
        calls.append((step5_ops.update_prefill, (key, z, metadata, positions, ring_metadata.base[:chunk],
                                                 ring_metadata.slot_mapping[:chunk], mean, ring.rows, ring.capacity),
                      {}))
    return calls


def dsv4_decode(device: str, head_dim: int = 512, compress_ratio: int = 4, batch: int = BATCH):
    """Arguments of one decode step's store and compressor at ``batch`` (one request each)."""
    width = 2 * head_dim if compress_ratio == 4 else head_dim
    block_size = 4 if compress_ratio == 4 else 8
    blocks_per_request = SPAN // block_size
    projection = torch.randn(batch, 2 * width, device=device)
    kv, score = projection[:, :width], projection[:, width:]
    ape = torch.randn(compress_ratio, width, device=device)
    positions = torch.randint(compress_ratio * 2, SPAN, (batch,), device=device)
    block_table = torch.randperm(batch * blocks_per_request, device=device, dtype=torch.int32).view(batch, -1)
    requests = torch.arange(batch, device=device)
    slots = block_table[requests, positions // block_size].long() * block_size + positions % block_size
    state_cache = torch.randn(batch * blocks_per_request, block_size, 2 * width, device=device)
    out = torch.empty(batch, head_dim, device=device)
    store = (kv, score, ape, positions, state_cache, slots, block_size, width, compress_ratio)
    compress = (state_cache, block_table, positions, requests, out, compress_ratio, head_dim, block_size)
    return store, compress


def dsv4_calls(device: str, batch: int = BATCH) -> list:
    """(public function, arguments, keyword arguments) of the store, the compressor and the two
    fused, at ratios 4 and 128."""
    calls = []
    for compress_ratio in (4, 128):
        store, compress = dsv4_decode(device, compress_ratio=compress_ratio, batch=batch)
        kv, score, ape, positions, state_cache, slots, block_size, width, _ = store
        _, block_table, _, requests, out, _, head_dim, _ = compress
        fused = (kv, score, ape, positions, state_cache, slots, block_table, requests, out, compress_ratio, head_dim,
                 block_size, width)  # the two in one launch
        calls += [(deepseek_v4.save_partial_states, store, {}), (deepseek_v4.compress_windows, compress, {}),
                  (deepseek_v4.decode_step, fused, {})]
    return calls


def public_calls(device: str, batch: int = BATCH) -> list:
    """(public function, arguments, keyword arguments) of a deployment-shaped call of every
    shipped kernel (decode and verify steps of ``batch`` requests)."""
    return [axpy_call(device), *step5_calls(device, batch), *dsv4_calls(device, batch)]


def drive_all(device: str) -> None:
    """Call every public function once (compiling what the cache lacks)."""
    for function, args, kwargs in public_calls(device):
        function(*args, **kwargs)


PACKAGES = ("step5", "deepseek_v4")
STEPS_PER_GRAPH = 10


def decode_step(device: str = "cuda", packages: tuple[str, ...] = PACKAGES):
    """One decode step at batch 64 of the packages named (Step5 summaries; DeepSeek V4 store
    and compressor at ratio 4), as a callable to capture in a graph. Every tensor it takes
    is a static address, as an engine's graph buffers are: ``torch.compile``'s CUDA graphs
    need the caches it writes so, and copy any other input into a buffer of their own at
    each replay."""
    step5_args = step5_decode(device)
    store, compress = dsv4_decode(device)
    for tensor in (*step5_args, *store, *compress):
        if isinstance(tensor, torch.Tensor):
            torch._dynamo.mark_static_address(tensor)

    def step() -> None:
        if "step5" in packages:
            step5_ops.update_decode(*step5_args)
        if "deepseek_v4" in packages:
            deepseek_v4.save_partial_states(*store)
            deepseek_v4.compress_windows(*compress)

    return step


def graph_microseconds(step, compiled: bool = False, replays: int = 200) -> float:
    """GPU time per step of ``STEPS_PER_GRAPH`` calls of ``step`` replayed as one CUDA graph
    (median of event timings): captured by hand, or (``compiled``) made by
    ``torch.compile(mode="reduce-overhead")`` of a function making the calls. The GPU
    sleeps first while the host queues the replay, so no host time is counted."""
    import statistics

    def steps() -> None:
        for _ in range(STEPS_PER_GRAPH):
            step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # plans each public call, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    if compiled:
        replay = torch.compile(steps, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):  # compiles, warms up, records
            replay()
    else:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            steps()
        replay = graph.replay
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # about 0.5 ms: longer than the host takes to queue what follows
        start.record()
        replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / STEPS_PER_GRAPH)
    return statistics.median(samples)
