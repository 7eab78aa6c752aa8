"""Step5 CSA summary updates on the GPU: time, bandwidth against a device copy, speed-up.

    python benchmarks/bench_step5.py [--quick]

Measures, in one run:
- copy bandwidth: a large torch device-to-device copy (bytes read + written per second);
- prefill at 8K and 256K tokens (one request, block size 256): the whole update
  (``build_prefill_groups`` + ``update_prefill``: two launches, with PDL on sm_90+,
  ``step5.ops.prefill_fused``), and for comparison the same step through the three
  launches (and torch's fill) of before, and at 8K in two launches without PDL;
- decode at batch 1, 64, 1024 (block size 64; one token in eight closes a region, as in
  serving, where each request advances one position a step; and at 1024 also the worst
  case, every token closing) and verify with 3 draft tokens at batch 1, 64, 1024 (block
  size 256).
Every case is captured in a CUDA graph (``--graph-steps`` steps per graph) and timed with
``triton.testing.do_bench`` medians; µs is GPU time per step. "Bytes" are those the spec
makes move: key and z read (1 KB a token), ring rows read by closing tokens, ring rows and
256-byte summaries written, index reads; not our own prefill metadata. The PyTorch
baseline is eager PyTorch around ``step5.reference.summarize_regions`` (host-prepared
gather indices, so it is faster than any real PyTorch path). Targets: prefill at 256K at
>= 0.80 of copy bandwidth, at 8K >= 0.50; decode at batch 1024 <= 3 µs per step in a CUDA graph.
``--smoke`` runs tiny sizes on the CPU under TRITON_INTERPRET=1 to check the script itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from jitkern.launch.plans import forget_plans  # noqa: E402
from step5 import Step5CSATailRing, Step5SparseSummaryCache, Step5SummaryCacheSpec  # noqa: E402
from step5.ops import prefill_fused  # noqa: E402
from step5.ops.summary_update import build_prefill_groups  # noqa: E402
from step5.reference import summarize_regions  # noqa: E402

ROW_BYTES = 1024  # [key | z] of one token, bf16
SUMMARY_BYTES = 256


@dataclass
class Result:
    name: str
    microseconds: float
    bytes_moved: int
    baseline_microseconds: float | None


class Timer:
    """GPU time per call: ``steps`` calls captured in one CUDA graph, median of replays."""

    def __init__(self, device: torch.device, steps: int):
        self.device, self.steps = device, steps

    def __call__(self, fn, graph: bool = True) -> float:
        fn()  # compile / load, and check it runs
        if self.device.type != "cuda":
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e6
        import triton.testing

        torch.cuda.synchronize()
        if not graph:
            return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm on a side stream, as torch.cuda.graph recommends
        torch.cuda.current_stream().wait_stream(stream)
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            for _ in range(self.steps):
                fn()
        milliseconds = triton.testing.do_bench(cuda_graph.replay, warmup=25, rep=200, return_mode="median")
        return milliseconds * 1e3 / self.steps


def copy_bandwidth(device: torch.device, megabytes: int) -> float:
    """Bytes read + written per second of a large device-to-device copy."""
    source = torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    if device.type != "cuda":
        return float("nan")
    import triton.testing

    milliseconds = triton.testing.do_bench(lambda: target.copy_(source), warmup=10, rep=200, return_mode="median")
    return 2 * source.numel() / (milliseconds * 1e-3)


def rows(tokens: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    key = torch.randn(tokens, 1, 256, device=device).mul(4).to(torch.bfloat16)
    z = torch.randn(tokens, 1, 256, device=device).mul(3).to(torch.bfloat16)
    return key, z


def torch_baseline(key, z, ring, mean, sources, from_ring, mean_rows, ring_targets, ring_sources):
    """Eager PyTorch of one step with host-prepared indices: gather each closed region's
    8 rows (ring or step), summarize, scatter to ``mean``; copy open rows into the ring."""
    step_rows = torch.cat([key[:, 0], z[:, 0]], 1)

    def run():
        if sources.numel():
            gathered = torch.where(
                from_ring[..., None], ring[sources.clamp(max=ring.shape[0] - 1)],
                step_rows[sources.clamp(max=step_rows.shape[0] - 1)]
            )
            mean.view(-1, 256)[mean_rows] = summarize_regions(gathered[..., :256], gathered[..., 256:])
        if ring_targets.numel():
            ring[ring_targets] = step_rows[ring_sources]

    return run


def region_sources(closing_tokens, closing_positions, first_positions, first_tokens, bases, capacity, device):
    """[C, 8] sources of each closed region's rows: ring row, or step token (host side)."""
    offsets = torch.arange(8) - 7
    positions = closing_positions[:, None] + offsets
    in_step = positions >= first_positions[:, None]
    step_tokens = closing_tokens[:, None] + offsets
    ring_rows = bases[:, None] + positions % capacity
    sources = torch.where(in_step, step_tokens, ring_rows)
    return sources.to(device), (~in_step).to(device)


PREFILL_PATHS = {  # (name suffix, prefill_fused settings) of each way to run a prefill step
    "two": ("", {}),
    "three": (", three launches", {"MIN_TOKENS": 2**62}),
    "no-pdl": (", no PDL", {"LAUNCH_PDL": False}),
}


@contextlib.contextmanager
def prefill_path(path: str):
    """``step5.ops.prefill_fused`` set to run prefill steps as ``path`` says (plans dropped:
    a planned call repeats the launches it recorded)."""
    changes = PREFILL_PATHS[path][1]
    saved = {name: getattr(prefill_fused, name) for name in changes}
    for name, value in changes.items():
        setattr(prefill_fused, name, value)
    forget_plans()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(prefill_fused, name, value)
        forget_plans()


def bench_prefill(tokens: int, timer: Timer, device, path: str = "two") -> Result:
    """One prefill step; ``path``: two launches (as shipped), ``three`` (as before
    ``prefill_fused``) or ``no-pdl`` (two launches, plain). Only ``two`` times the PyTorch baseline."""
    block_size, capacity, first = 256, 8, 3
    ring = Step5CSATailRing(1, tokens, capacity=capacity, device=device)
    ring.rows.normal_()
    ring.allocate(0)
    mean = Step5SummaryCacheSpec(block_size).allocate((first + tokens) // block_size + 2, device)
    cache = Step5SparseSummaryCache(mean)
    key, z = rows(tokens, device)
    positions = torch.arange(first, first + tokens, device=device)
    slots = positions.clone()  # contiguous KV blocks 0, 1, 2, ...
    owners = torch.zeros(tokens, dtype=torch.int32, device=device)
    query_start_loc = torch.tensor([0, tokens], dtype=torch.int32, device=device)
    ring.prepare([0], [first], [tokens])

    def step():
        groups = build_prefill_groups(slots, positions, owners, query_start_loc)
        cache.update_prefill(key, z, groups, positions, ring)

    with prefill_path(path):
        microseconds = timer(step, graph=True)
    name = f"prefill {tokens // 1024}K tokens{PREFILL_PATHS[path][0]}"
    host_positions = torch.arange(first, first + tokens)
    closing = (host_positions % 8 == 7).nonzero().flatten()
    open_rows = tokens - (int(closing[-1]) + 1 if closing.numel() else 0)
    moved = tokens * ROW_BYTES + closing.numel() * SUMMARY_BYTES + first * ROW_BYTES + open_rows * ROW_BYTES
    moved += 8 * 2 * tokens  # slots and positions, int64 (the spec's inputs)
    if path != "two":
        return Result(name, microseconds, moved, None)
    sources, from_ring = region_sources(
        closing, host_positions[closing], torch.full((closing.numel(),), first), closing,
        torch.zeros(closing.numel(), dtype=torch.int64), capacity, device,
    )
    base_positions = host_positions[-open_rows:] if open_rows else host_positions[:0]
    baseline = torch_baseline(
        key, z, ring.rows, mean, sources, from_ring, (host_positions[closing] // 8).to(device),
        (base_positions % capacity).to(device), torch.arange(tokens - open_rows, tokens).to(device),
    )
    return Result(name, microseconds, moved, timer(baseline, graph=False))


def bench_decode(batch: int, timer: Timer, device, every_token_closes: bool = False) -> Result:
    """One decode step: each request advances one position, so one token in eight closes
    a region (``batch // 8`` of them here, at least one); or, the worst case, every token."""
    block_size, capacity, span = 64, 8, 512
    ring = Step5CSATailRing(batch, batch, capacity=capacity, device=device)
    ring.rows.normal_()
    for request in range(batch):
        ring.allocate(request)
    mean = Step5SummaryCacheSpec(block_size).allocate(batch * span // block_size, device)
    cache = Step5SparseSummaryCache(mean)
    offsets = torch.randint(0, 7, (batch,))  # position % 8: 7 closes a region
    offsets[: batch if every_token_closes else max(1, batch // 8)] = 7
    host_positions = torch.randint(0, span // 8, (batch,)) * 8 + offsets
    host_slots = torch.arange(batch) * span + host_positions
    ring.prepare(list(range(batch)), host_positions.tolist(), [1] * batch)
    key, z = rows(batch, device)
    slots, positions = host_slots.to(device), host_positions.to(device)

    microseconds = timer(lambda: cache.update_decode(key, z, slots, positions, ring))
    closing = (host_positions % 8 == 7).nonzero().flatten()
    others = batch - closing.numel()
    moved = batch * (ROW_BYTES + 8 + 8 + 4) + closing.numel() * (7 * ROW_BYTES + SUMMARY_BYTES) + others * ROW_BYTES
    bases = closing * capacity
    sources, from_ring = region_sources(
        closing, host_positions[closing], host_positions[closing], closing, bases, capacity, device
    )
    open_tokens = (host_positions % 8 != 7).nonzero().flatten()
    baseline = torch_baseline(
        key, z, ring.rows, mean, sources, from_ring, (host_slots[closing] // 8).to(device),
        (open_tokens * capacity + host_positions[open_tokens] % capacity).to(device), open_tokens.to(device),
    )
    name = f"decode batch {batch}{', all closing' if every_token_closes else ''}"
    return Result(name, microseconds, moved, timer(baseline, graph=False))


def bench_verify(batch: int, timer: Timer, device, draft_tokens: int = 3, none_closing: bool = False) -> Result:
    """``none_closing``: every request's tokens start at a multiple of 8, so that no token of
    the step closes a region (what verify costs without its closing path, for the profile)."""
    block_size, q, span = 256, 1 + draft_tokens, 512
    ring = Step5CSATailRing(batch, batch * q, draft_tokens=draft_tokens, device=device)
    capacity = ring.capacity
    ring.rows.normal_()
    for request in range(batch):
        ring.allocate(request)
    mean = Step5SummaryCacheSpec(block_size).allocate(batch * span // block_size, device)
    cache = Step5SparseSummaryCache(mean)
    host_seq_lens = torch.randint(q, span, (batch,))
    if none_closing:
        host_seq_lens = (host_seq_lens - q) // 8 * 8 + q
    first_positions = host_seq_lens - q
    host_positions = (first_positions[:, None] + torch.arange(q)).flatten()
    owners = torch.arange(batch).repeat_interleave(q)
    host_slots = owners * span + host_positions
    ring.prepare(list(range(batch)), first_positions.tolist(), [q] * batch)
    key, z = rows(batch * q, device)
    slots = host_slots.to(device)
    query_start_loc = (torch.arange(batch + 1, dtype=torch.int32) * q).to(device)
    seq_lens = host_seq_lens.to(torch.int32).to(device)

    microseconds = timer(lambda: cache.update_verify(key, z, slots, query_start_loc, seq_lens, ring))
    closing = (host_positions % 8 == 7).nonzero().flatten()
    in_step_rows = torch.clamp(host_positions[closing] - first_positions[owners[closing]] + 1, max=8)
    ring_reads = int((8 - in_step_rows).sum())
    tokens = batch * q
    moved = tokens * (ROW_BYTES + 8) + batch * 8 + ring_reads * ROW_BYTES
    moved += closing.numel() * SUMMARY_BYTES + (tokens - closing.numel()) * ROW_BYTES
    sources, from_ring = region_sources(
        closing, host_positions[closing], first_positions[owners[closing]], closing,
        owners[closing] * capacity, capacity, device,
    )
    open_tokens = (host_positions % 8 != 7).nonzero().flatten()
    baseline = torch_baseline(
        key, z, ring.rows, mean, sources, from_ring, (host_slots[closing] // 8).to(device),
        (owners[open_tokens] * capacity + host_positions[open_tokens] % capacity).to(device), open_tokens.to(device),
    )
    return Result(f"verify k={draft_tokens} batch {batch}{', none closing' if none_closing else ''}", microseconds,
                  moved, timer(baseline, graph=False))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer graph steps and a smaller copy")
    parser.add_argument("--graph-steps", type=int, default=None, help="steps captured per CUDA graph")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (interpreter) to test the script")
    args = parser.parse_args(argv)
    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_step5: needs a CUDA GPU (or --smoke on the CPU)")
    torch.manual_seed(0)
    timer = Timer(device, args.graph_steps or (5 if args.quick else 20))
    copy_bw = copy_bandwidth(device, 16 if args.smoke else (1024 if args.quick else 4096))
    prefill_sizes = [256, 1024] if args.smoke else [8 << 10, 256 << 10]
    batches = [1, 6] if args.smoke else [1, 64, 1024]
    results = [bench_prefill(t, timer, device) for t in prefill_sizes]
    results += [bench_prefill(prefill_sizes[0], timer, device, path) for path in ("three", "no-pdl")]
    results.append(bench_prefill(prefill_sizes[1], timer, device, "three"))
    results += [bench_decode(b, timer, device) for b in batches]
    results.append(bench_decode(batches[-1], timer, device, every_token_closes=True))
    results += [bench_verify(b, timer, device) for b in batches]

    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)"
    print(f"\n{name}: device-to-device copy {copy_bw / 1e9:.0f} GB/s (read + written)")
    print(f"{'case':<36}{'GPU us':>10}{'MB moved':>10}{'GB/s':>9}{'of copy':>9}{'torch us':>11}{'speed-up':>10}")
    for result in results:
        bandwidth = result.bytes_moved / (result.microseconds * 1e-6)
        baseline = result.baseline_microseconds
        print(
            f"{result.name:<36}{result.microseconds:>10.2f}{result.bytes_moved / 1e6:>10.2f}{bandwidth / 1e9:>9.0f}"
            f"{bandwidth / copy_bw:>9.2f}{baseline if baseline else float('nan'):>11.1f}"
            f"{(baseline / result.microseconds) if baseline else float('nan'):>9.1f}x"
        )
    print("targets: prefill 256K >= 0.80 of copy; prefill 8K >= 0.50 of copy; decode batch 1024 <= 3 us "
          "(CUDA graph)")


if __name__ == "__main__":
    main()
