"""DeepSeek V4 compressor states on the GPU: the store, the window compressor, both fused.

    python benchmarks/bench_deepseek_v4.py [--quick] [--sweep] [--fused-only]

Measures, in one run:

- the copy bandwidth of this GPU (a large device-to-device ``copy_``, bytes read plus
  written), the ceiling of these memory-bound kernels;
- ``save_partial_states`` at 1, 64, 1024 and 65536 tokens, head_dim 512 and 128 at
  ratios 4 and 128;
- ``compress_windows`` at 1024 and 65536 tokens (prefill-shaped: requests of 4096 tokens,
  so one token in ``ratio`` closes a window), both ratios;
- the fused ``decode_step`` at batch 64 and 1024 (a token per request at a random
  position, so about one in ``ratio`` closes a window), both head dims and ratios, against
  the store alone and the store then the compressor (its own table; target: fused / store
  <= 1.2; ``--fused-only`` runs just this);

each as GPU time (a CUDA graph of many launches: no host overhead, the median of
``triton.testing.do_bench_cudagraph``), the bandwidth its bytes need, that bandwidth as a
fraction of the copy bandwidth, the host-inclusive time of one call (``do_bench``), and
the speed-up over eager PyTorch doing the same work (vectorised from the spec). Inputs
rotate over enough copies to exceed L2, so small sizes are not served from cache.
Before timing, each kernel's output is checked against the PyTorch version.

``--sweep`` also times other tilings of the store at 1024 and 64K tokens
(``store_variants``: tokens and columns per program, warps; ``benchmarks/device/sweep_store.py``
times only those, in a few minutes) and of the compressor (``compressor_variants``:
``BLOCK_D``/``num_warps`` at ratio 4; the tile, columns per program, warps and tokens
scanned per program at ratio 128), to retune the choices in ``deepseek_v4/`` (compiles
extra variants; each is checked against PyTorch before it is timed).
Targets (issue): the store at 64K tokens >= 0.90 of copy bandwidth and at 1024 tokens
>= 0.5 for head_dim 512, the compressor at 64K tokens >= 0.70 of the bandwidth its reads
need. The table is printed last.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepseek_v4 import (  # noqa: E402
    CompressWindowsKernel,
    SavePartialStatesKernel,
    compress_windows,
    decode_step,
    save_partial_states,
)
from deepseek_v4.common import RATIOS  # noqa: E402
from deepseek_v4.sweeps import check_decode_tiling, store_sweep_launch  # noqa: E402
from deepseek_v4.sweeps import compressor_sweep_launch as sweep_launch  # noqa: E402
from deepseek_v4.tiling import StoreTiling, WindowTiling, decode_tiling, store_tiling  # noqa: E402

L2_BYTES = 60 * 2**20  # H200: 60 MB; rotate over at least 4x this
ROTATE_BYTES = 4 * L2_BYTES
MAX_SETS = 64
REQUEST_LEN = 4096
DEVICE = "cuda"  # the input builders also run on the CPU, to test the PyTorch versions


@dataclass
class Row:
    kernel: str
    config: str
    tokens: int
    gpu_us: float
    bytes: int
    copy_gbs: float
    call_us: float
    torch_us: float

    @property
    def gbs(self) -> float:
        return self.bytes / self.gpu_us / 1e3

    def cells(self) -> list[str]:
        return [self.kernel, self.config, f"{self.tokens}", f"{self.gpu_us:.2f}", f"{self.gbs:.0f}",
                f"{self.gbs / self.copy_gbs:.2f}", f"{self.call_us:.1f}", f"{self.torch_us:.1f}",
                f"{self.torch_us / self.gpu_us:.1f}x"]


def gpu_us(fn) -> float:
    """Median GPU time of one call, from a CUDA graph of many calls (no host overhead)."""
    return do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3


def call_us(fn) -> float:
    """Median time of one call as an engine without graphs sees it (host path included)."""
    return do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3


def rotating(make_set, bytes_per_call: int):
    """A function cycling through copies of the inputs, so that they exceed L2."""
    sets = [make_set() for _ in range(max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(bytes_per_call, 1)))))]
    state = {"i": 0}

    def next_set():
        state["i"] = (state["i"] + 1) % len(sets)
        return sets[state["i"]]

    return sets, next_set


def copy_bandwidth_gbs() -> float:
    src = torch.empty(2**28, dtype=torch.float32, device=DEVICE)  # 1 GiB
    dst = torch.empty_like(src)
    seconds = do_bench(lambda: dst.copy_(src), warmup=5, rep=200, return_mode="median") / 1e3
    return 2 * src.numel() * 4 / seconds / 1e9


# --- the store ------------------------------------------------------------------------------


def store_inputs(tokens: int, head_dim: int, ratio: int) -> dict:
    geometry = RATIOS[ratio]
    width, bs = geometry.state_width(head_dim), geometry.block_size
    projection = torch.randn(tokens, 2 * width, device=DEVICE)
    blocks = -(-tokens // bs)
    block_order = torch.randperm(blocks, device=DEVICE)
    q = torch.arange(tokens, device=DEVICE)
    return dict(
        kv=projection[:, :width], score=projection[:, width:], ape=torch.randn(ratio, width, device=DEVICE),
        positions=torch.randint(0, 1 << 20, (tokens,), device=DEVICE),
        state_cache=torch.empty(blocks, bs, 2 * width, device=DEVICE),
        slot_mapping=block_order[q // bs] * bs + q % bs, block_size=bs, state_width=width, compress_ratio=ratio,
    )


def store_bytes(tokens: int, head_dim: int, ratio: int) -> int:
    """kv and score read, both halves written, positions and slots read (ape stays in L2)."""
    width = RATIOS[ratio].state_width(head_dim)
    return tokens * (4 * width * 4 + 2 * 8)


def store_torch(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width, compress_ratio):
    """The spec in eager PyTorch (no padding in these inputs, so no masking)."""
    blocks, rows, head = slot_mapping // block_size, slot_mapping % block_size, kv.shape[1]
    state_cache[blocks, rows, :head] = kv
    state_cache[blocks, rows, state_width : state_width + head] = score + ape[positions % compress_ratio]


def store_case(tokens: int, head_dim: int, ratio: int):
    """Input sets rotating past L2, the function cycling through them, and PyTorch's cache
    for the first set, whose cache starts as NaN (the kernel's must match it bit for bit)."""
    sets, next_set = rotating(lambda: store_inputs(tokens, head_dim, ratio), store_bytes(tokens, head_dim, ratio))
    expected = sets[0]["state_cache"].fill_(float("nan")).clone()
    store_torch(**{**sets[0], "state_cache": expected})
    return sets, next_set, expected


def bench_store(tokens: int, head_dim: int, ratio: int, copy_gbs: float, sweep: bool) -> list[Row]:
    nbytes = store_bytes(tokens, head_dim, ratio)
    sets, next_set, expected = store_case(tokens, head_dim, ratio)
    save_partial_states(**sets[0])
    assert same_bits(sets[0]["state_cache"], expected), "store differs from PyTorch"

    config = f"head{head_dim} r{ratio}"
    rows = [Row("store", config, tokens, gpu_us(lambda: save_partial_states(**next_set())), nbytes, copy_gbs,
                call_us(lambda: save_partial_states(**next_set())), gpu_us(lambda: store_torch(**next_set())))]
    if sweep:
        for tiling in store_variants(head_dim, ratio):
            rows.append(Row("store", f"{config} {tiling_label(tiling)}", tokens,
                            time_store_tiling(sets, next_set, expected, tiling), nbytes, copy_gbs, float("nan"),
                            rows[0].torch_us))
    return rows


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def store_variants(head_dim: int, ratio: int) -> list[StoreTiling]:
    """The store tilings a sweep times (``deepseek_v4.sweeps.store_sweep_launch``), the shipped
    one first: whole rows of 1 to 16 tokens (at most 2048 floats a tile), or one row in 2
    or 4 column groups of at least 128; each with the warps that give every thread 4, 8
    or 16 floats of kv (and as many of score)."""
    width = RATIOS[ratio].state_width(head_dim)
    head = triton.next_power_of_2(width)
    tiles = [(tokens, head) for tokens in (1, 2, 4, 8, 16) if tokens * head <= 2048]
    tiles += [(1, head // parts) for parts in (2, 4) if head // parts >= 128]
    variants = [StoreTiling(tokens, block_h, warps) for tokens, block_h in tiles for warps in (1, 2, 4, 8)
                if tokens * block_h // (32 * warps) in (4, 8, 16)]
    default = store_tiling(width)
    return [default] + [tiling for tiling in variants if tiling != default]


def tiling_label(tiling: StoreTiling) -> str:
    return f"tokens={tiling.tokens} cols={tiling.block_h} warps={tiling.num_warps}"


def time_store_tiling(sets, next_set, expected, tiling: StoreTiling) -> float:
    """GPU us of the store with ``tiling``, after checking its bytes on ``sets[0]``
    against ``expected`` (PyTorch's cache for those inputs)."""
    kernel = SavePartialStatesKernel()
    sets[0]["state_cache"].fill_(float("nan"))
    store_sweep_launch(kernel, sets[0], tiling)
    assert same_bits(sets[0]["state_cache"], expected), f"store {tiling} differs from PyTorch"
    return gpu_us(lambda: store_sweep_launch(kernel, next_set(), tiling))


# --- the compressor -------------------------------------------------------------------------


def compressor_inputs(tokens: int, head_dim: int, ratio: int) -> dict:
    """Prefill-shaped: requests of REQUEST_LEN tokens (or one shorter one) at positions
    0 .. len-1, their rows already in a cache whose blocks are shuffled."""
    geometry = RATIOS[ratio]
    width, bs = geometry.state_width(head_dim), geometry.block_size
    request_len = min(tokens, REQUEST_LEN)
    requests = -(-tokens // request_len)
    max_blocks = -(-request_len // bs)
    block_table = torch.randperm(requests * max_blocks, device=DEVICE, dtype=torch.int32).view(requests, max_blocks)
    token = torch.arange(tokens, device=DEVICE)
    return dict(
        state_cache=torch.randn(requests * max_blocks, bs, 2 * width, device=DEVICE),
        block_table=block_table, positions=token % request_len, req_indices=token // request_len,
        out=torch.empty(tokens, head_dim, device=DEVICE), compress_ratio=ratio, head_dim=head_dim, block_size=bs,
    )


def compressor_bytes(tokens: int, head_dim: int, ratio: int) -> int:
    """Per window: its rows' kv and score columns (``2R`` rows of ``d`` at ratio 4, ``R``
    at 128: the same bytes as ``R`` full rows) and its output; positions of every token."""
    geometry = RATIOS[ratio]
    request_len = min(tokens, REQUEST_LEN)
    full, rest = divmod(tokens, request_len)
    windows = full * (request_len // ratio) + rest // ratio
    rows = 2 * ratio if geometry.overlap else ratio
    return windows * (rows * 2 * head_dim * 4 + head_dim * 4) + tokens * 8


def compressor_torch(state_cache, block_table, positions, req_indices, out, compress_ratio, head_dim, block_size,
                     closing):
    """The spec in eager PyTorch: gather each window's rows, softmax per dimension.
    ``closing`` (the closing tokens) is computed on the host beforehand, to spare a sync."""
    geometry, d = RATIOS[compress_ratio], head_dim
    width = geometry.state_width(d)
    p, r = positions[closing], req_indices[closing]
    j = torch.arange(compress_ratio, device=positions.device)

    def rows(q, columns):
        valid = q >= 0
        q = q.clamp(min=0)
        slots = block_table[r[:, None], q // block_size].long() * block_size + q % block_size
        data = state_cache[slots // block_size, slots % block_size]  # [windows, R, 2W]
        score = data[..., width + columns : width + columns + d].masked_fill(~valid[..., None], float("-inf"))
        return data[..., columns : columns + d], score

    kv, score = rows(p[:, None] - compress_ratio + 1 + j, d if geometry.overlap else 0)
    if geometry.overlap:
        kv_prev, score_prev = rows(p[:, None] - 2 * compress_ratio + 1 + j, 0)
        kv, score = torch.cat([kv_prev, kv], 1), torch.cat([score_prev, score], 1)
    out[closing] = (torch.softmax(score, dim=1) * kv).sum(1)


def bench_compressor(tokens: int, head_dim: int, ratio: int, copy_gbs: float, sweep: bool) -> list[Row]:
    nbytes = compressor_bytes(tokens, head_dim, ratio)

    def make():
        inputs = compressor_inputs(tokens, head_dim, ratio)
        closing = ((inputs["positions"] + 1) % ratio == 0).nonzero().squeeze(1)
        return inputs, closing

    sets, next_set = rotating(make, nbytes)
    inputs, closing = sets[0]
    compress_windows(**inputs)
    expected = torch.empty_like(inputs["out"])
    compressor_torch(**{**inputs, "out": expected}, closing=closing)
    got, want = inputs["out"][closing], expected[closing]
    error = float((got - want).abs().max() / want.abs().max())
    assert error < 1e-5, f"compressor differs from PyTorch: relative error {error:.2e}"

    def kernel_call():
        compress_windows(**next_set()[0])

    def torch_call():
        inputs, closing = next_set()
        compressor_torch(**inputs, closing=closing)

    config = f"head{head_dim} r{ratio}"
    rows = [Row("compress", config, tokens, gpu_us(kernel_call), nbytes, copy_gbs, call_us(kernel_call),
                gpu_us(torch_call))]
    if sweep:
        kernel = CompressWindowsKernel()
        for variant in compressor_variants(tokens, head_dim, ratio):
            inputs["out"].fill_(float("nan"))
            sweep_launch(kernel, inputs, **variant)
            error = float((inputs["out"][closing] - want).abs().max() / want.abs().max())
            assert error < 1e-5, f"compressor {variant} differs from PyTorch: relative error {error:.2e}"
            label = " ".join(f"{name}={value}" for name, value in variant.items())
            rows.append(Row("compress", f"{config} {label}", tokens,
                            gpu_us(lambda: sweep_launch(kernel, next_set()[0], **variant)),
                            nbytes, copy_gbs, float("nan"), rows[0].torch_us))
    return rows


def compressor_variants(tokens: int, head_dim: int, ratio: int) -> list[dict]:
    """The tilings ``--sweep`` times (``deepseek_v4.sweeps.compressor_sweep_launch`` arguments).

    Ratio 4 (a program per token, whole head): ``block_d`` x ``num_warps``. Ratio 128:
    at 64K tokens the tile (``block_d`` columns x 128 rows per step, ``program_d``
    columns per program, ``num_warps``); at both sizes the tokens a program scans
    (``chunk`` forced, or picked from ``min_programs``, the default being
    ``deepseek_v4.tiling.MIN_PROGRAMS``).
    """
    head = triton.next_power_of_2(head_dim)
    if RATIOS[ratio].overlap:
        if tokens != 65536:
            return []
        return [dict(block_d=b, num_warps=w) for b in (128, 256, 512, 1024) if b <= head for w in (1, 2, 4, 8)]
    variants = []
    if tokens == 65536:
        variants += [dict(block_d=b, program_d=b * k, num_warps=w)  # 8 .. 32 floats per thread and tensor
                     for b in (16, 32, 64, 128) for k in (1, 2, 4) if b * k <= head
                     for w in (2, 4, 8, 16) if 4 * w <= b <= 16 * w]
    variants += [dict(chunk=c) for c in (8, 32, 64, 128)]
    variants += [dict(min_programs=m) for m in (128, 256, 1024, 2048, 4096)]
    return variants


# --- the fused decode step -------------------------------------------------------------------

DECODE_BATCHES = (64, 1024)
DECODE_CONTEXT = 4096  # positions are drawn below this, so about one token in `ratio` closes a window
STORE_ARGS = ("kv", "score", "ape", "positions", "state_cache", "slot_mapping", "block_size", "state_width",
              "compress_ratio")
COMPRESS_ARGS = ("state_cache", "block_table", "positions", "req_indices", "out", "compress_ratio", "head_dim",
                 "block_size")


@dataclass
class FusedRow:
    config: str
    batch: int
    closing: float  # tokens closing a window, averaged over the rotated input sets
    fused_us: float
    store_us: float
    both_us: float  # the store, then the compressor: what the fused kernel replaces
    call_us: float

    def cells(self) -> list[str]:
        return [self.config, f"{self.batch}", f"{self.closing:.1f}", f"{self.fused_us:.2f}", f"{self.store_us:.2f}",
                f"{self.both_us:.2f}", f"{self.fused_us / self.store_us:.2f}", f"{self.fused_us / self.both_us:.2f}",
                f"{self.call_us:.1f}"]


def decode_inputs(batch: int, head_dim: int, ratio: int, closing: float | None = None, padding: float = 0.0) -> dict:
    """One decode step: a token per request at a random position below DECODE_CONTEXT. Each
    request owns the few blocks its window and its own row lie in (shuffled); its other
    table entries point at block 0 and are never read, so the cache stays small.
    ``closing``: the fraction of tokens moved to the end of their window (default: about
    one in ``ratio`` closes one, as positions fall); ``padding``: the fraction of tokens
    given slot -1 (byte checks: the timed inputs have none)."""
    geometry = RATIOS[ratio]
    width, bs = geometry.state_width(head_dim), geometry.block_size
    window = 2 * ratio if geometry.overlap else ratio
    span = -(-window // bs) + 1  # blocks that positions p - window + 1 .. p can lie in
    positions = torch.randint(0, DECODE_CONTEXT, (batch,), device=DEVICE)
    if closing is not None:
        close = torch.rand(batch, device=DEVICE) < closing
        positions = torch.where(close, positions | (ratio - 1), positions)  # DECODE_CONTEXT is a multiple of R
        positions = torch.where(~close & ((positions + 1) % ratio == 0), positions - 1, positions)
    first = (positions - window + 1).clamp(min=0) // bs
    offset = torch.arange(DECODE_CONTEXT // bs, device=DEVICE)[None, :] - first[:, None]
    own = torch.randperm(batch * span, device=DEVICE, dtype=torch.int32).view(batch, span)
    in_window = (offset >= 0) & (offset < span)
    block_table = torch.where(in_window, own.gather(1, offset.clamp(0, span - 1)), 0).int()
    requests = torch.arange(batch, device=DEVICE)
    projection = torch.randn(batch, 2 * width, device=DEVICE)
    slot_mapping = block_table[requests, positions // bs].long() * bs + positions % bs
    if padding:
        slot_mapping[torch.rand(batch, device=DEVICE) < padding] = -1
    return dict(
        kv=projection[:, :width], score=projection[:, width:], ape=torch.randn(ratio, width, device=DEVICE),
        positions=positions, state_cache=torch.randn(batch * span, bs, 2 * width, device=DEVICE),
        slot_mapping=slot_mapping, block_table=block_table,
        req_indices=requests, out=torch.full((batch, head_dim), float("nan"), device=DEVICE), compress_ratio=ratio,
        head_dim=head_dim, block_size=bs, state_width=width,
    )


def decode_variants(head_dim: int, ratio: int) -> list[dict]:
    """The fused step's tilings a sweep times (``deepseek_v4.sweeps.decode_step_sweep_launch`` arguments: a
    ``WindowTiling``, and at ratio 128 the ``min_programs`` that picks tokens a program),
    the shipped one first. Only tilings whose window tiles sum each column's rows as the
    compressor's do (``check_decode_tiling``): at ratio 4 a program per token with 128 to
    512 columns and 1 to 4 warps; at ratio 128 the compressor's 32-column steps with 4
    warps, 32 to 128 columns and up to 8 to 64 tokens a program, as many as leave 128 to
    2048 programs (``min_programs``; the shipped choice leaves 512)."""
    shipped = decode_tiling(ratio, head_dim)
    head = triton.next_power_of_2(head_dim)
    variants = [dict(tiling=shipped)]
    if RATIOS[ratio].overlap:
        tilings = [WindowTiling(1, block_d, block_d, warps)
                   for block_d, warps in ((256, 2), (128, 1), (256, 1), (512, 4)) if block_d <= head]
    else:
        variants += [dict(tiling=shipped, min_programs=m) for m in (128, 256, 1024, 2048)]
        wide = WindowTiling(64, shipped.block_d, shipped.program_d, shipped.num_warps)
        variants += [dict(tiling=wide, min_programs=m) for m in (128, 256)]
        tilings = [WindowTiling(scan, shipped.block_d, program_d, shipped.num_warps)
                   for scan, program_d in ((16, 32), (8, 32), (32, 64), (32, 128), (16, 64), (16, 128))
                   if program_d <= head]
    for tiling in tilings:
        try:
            check_decode_tiling(ratio, head_dim, tiling)
        except ValueError:
            continue
        if tiling != shipped:
            variants.append(dict(tiling=tiling))
    return variants


def decode_label(variant: dict) -> str:
    tiling = variant["tiling"]
    label = f"scan={tiling.scan} block_d={tiling.block_d} program_d={tiling.program_d} warps={tiling.num_warps}"
    return label + "".join(f" {name}={value}" for name, value in variant.items() if name != "tiling")


def pick(inputs: dict, names: tuple[str, ...]) -> dict:
    return {name: inputs[name] for name in names}


def store_then_compress(inputs: dict) -> None:
    save_partial_states(**pick(inputs, STORE_ARGS))
    compress_windows(**pick(inputs, COMPRESS_ARGS))


def bench_fused(batch: int, head_dim: int, ratio: int) -> FusedRow:
    """GPU time of ``decode_step`` against the store alone and the two launches it replaces,
    after checking that it writes their bytes."""
    geometry = RATIOS[ratio]
    window_bytes = (2 * ratio if geometry.overlap else ratio) * 2 * head_dim * 4 + head_dim * 4
    nbytes = store_bytes(batch, head_dim, ratio) + batch // ratio * window_bytes
    sets, next_set = rotating(lambda: decode_inputs(batch, head_dim, ratio), nbytes)
    fused = sets[0]
    two = {**fused, "state_cache": fused["state_cache"].clone(), "out": fused["out"].clone()}
    store_then_compress(two)
    decode_step(**fused)
    for name in ("state_cache", "out"):
        assert torch.equal(fused[name].view(torch.int32), two[name].view(torch.int32)), f"fused {name} differs"
    closing = sum(int(((s["positions"] + 1) % ratio == 0).sum()) for s in sets) / len(sets)
    return FusedRow(f"head{head_dim} r{ratio}", batch, closing, gpu_us(lambda: decode_step(**next_set())),
                    gpu_us(lambda: save_partial_states(**pick(next_set(), STORE_ARGS))),
                    gpu_us(lambda: store_then_compress(next_set())), call_us(lambda: decode_step(**next_set())))


def print_fused_table(rows: list[FusedRow]) -> None:
    header = ["config", "batch", "closing", "fused us", "store us", "store+compress us", "fused/store",
              "fused/(store+compress)", "fused call us"]
    cells = [header] + [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    print("\nfused decode step (target: fused/store <= 1.2)")
    for line in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


def print_table(rows: list[Row], copy_gbs: float) -> None:
    header = ["kernel", "config", "tokens", "GPU us", "GB/s", "of copy", "call us", "torch us", "speed-up"]
    cells = [header] + [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    print(f"\ncopy bandwidth (read + write): {copy_gbs:.0f} GB/s on {torch.cuda.get_device_name()}")
    for line in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="head_dim 512 only, fewer sizes")
    parser.add_argument("--sweep", action="store_true",
                        help="also time other tilings (see store_variants, compressor_variants)")
    parser.add_argument("--fused-only", action="store_true", help="only the fused decode step against its two launches")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_deepseek_v4: needs a CUDA GPU")
    torch.manual_seed(0)

    head_dims = (512,) if args.quick else (512, 128)
    fused_rows = []
    for head_dim in head_dims:
        for ratio in (4, 128):
            for batch in DECODE_BATCHES:
                fused_rows.append(bench_fused(batch, head_dim, ratio))
                print(fused_rows[-1].cells(), flush=True)
    if args.fused_only:
        print_fused_table(fused_rows)
        return
    store_tokens = (1, 1024, 65536) if args.quick else (1, 64, 1024, 65536)
    compressor_tokens = (65536,) if args.quick else (1024, 65536)
    copy_gbs = copy_bandwidth_gbs()
    rows: list[Row] = []
    for head_dim in head_dims:
        for ratio in (4, 128):
            for tokens in store_tokens:
                rows += bench_store(tokens, head_dim, ratio, copy_gbs, args.sweep and tokens in (1024, 65536))
                print(rows[-1].cells(), flush=True)
    for head_dim in head_dims:
        for ratio in (4, 128):
            for tokens in compressor_tokens:
                rows += bench_compressor(tokens, head_dim, ratio, copy_gbs, args.sweep)
                print(rows[-1].cells(), flush=True)
    print_table(rows, copy_gbs)
    print_fused_table(fused_rows)


if __name__ == "__main__":
    main()
