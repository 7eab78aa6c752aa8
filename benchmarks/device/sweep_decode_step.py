"""The fused decode step's tilings on the GPU: which one to ship for each config.

    python benchmarks/device/sweep_decode_step.py [--batches 64 1024] [--head-dims 512 128] [--ratios 4 128]

For each shipped config (head_dim 512 and 128 at ratios 4 and 128) and decode batch (a
token per request at a random position, as ``bench_deepseek_v4.py --fused-only``: about
one token in ``ratio`` closes a window), times the store alone, the store then the
compressor (the two launches the fused step replaces) and every tiling of
``decode_variants`` (``bench_deepseek_v4.py``: columns, warps, tokens a program; the
shipped one first), as GPU time in a CUDA graph over inputs rotating past L2. Before it
is timed, each tiling must leave every byte of the cache and of ``out`` as the two
launches do, on inputs where half the tokens close a window and some are padding (slot
-1). "tokens x programs": how many tokens a program takes and how many programs run.
"/store" is the fused time over the store's (target: <= 1.2), "/both" over the two
launches'. '*' marks the fastest tiling of a config and batch, 'default' the one
``decode_tiling`` ships. Compiles about 25 tilings; under two minutes on an H200.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.bench_deepseek_v4 import (  # noqa: E402
    STORE_ARGS,
    decode_inputs,
    decode_label,
    decode_variants,
    gpu_us,
    pick,
    rotating,
    store_bytes,
    store_then_compress,
)
from deepseek_v4 import DecodeStepKernel, decode_step, save_partial_states  # noqa: E402
from deepseek_v4.common import RATIOS  # noqa: E402
from deepseek_v4.tiling import chunk_size  # noqa: E402
from deepseek_v4.sweeps import decode_step_sweep_launch as sweep_launch  # noqa: E402

CALL_ARGS = ("kv", "score", "ape", "positions", "state_cache", "slot_mapping", "block_table", "req_indices", "out",
             "compress_ratio", "head_dim", "block_size")


def programs(batch: int, head_dim: int, variant: dict) -> str:
    """Tokens a program and programs of ``variant`` at ``batch`` (as ``sweep_launch`` picks them)."""
    tiling = variant["tiling"]
    chunk = chunk_size(batch, head_dim, tiling.scan, tiling.program_d, variant.get("min_programs"))
    return f"{chunk:>2} x {-(-batch // chunk) * -(-head_dim // tiling.program_d):>5}"


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def check_bytes(batch: int, head_dim: int, ratio: int, variants: list[dict]) -> None:
    """Every variant, and the public ``decode_step``, against store-then-compress on one input
    where half the tokens close a window and a sixteenth are padding."""
    inputs = decode_inputs(batch, head_dim, ratio, closing=0.5, padding=1 / 16)
    expected = {**inputs, "state_cache": inputs["state_cache"].clone(), "out": inputs["out"].clone()}
    store_then_compress(expected)
    kernel = DecodeStepKernel()
    runs = [("decode_step", lambda got: decode_step(**got))]
    runs += [(decode_label(v), lambda got, v=v: sweep_launch(kernel, pick(got, CALL_ARGS), **v)) for v in variants]
    for label, run in runs:
        got = {**inputs, "state_cache": inputs["state_cache"].clone(), "out": inputs["out"].clone()}
        run(got)
        for name in ("state_cache", "out"):
            assert same_bytes(got[name], expected[name]), f"head{head_dim} r{ratio} batch {batch} {label}: {name} differs"


def sweep(batch: int, head_dim: int, ratio: int) -> list[tuple[str, float]]:
    geometry = RATIOS[ratio]
    window_bytes = (2 * ratio if geometry.overlap else ratio) * 2 * head_dim * 4 + head_dim * 4
    nbytes = store_bytes(batch, head_dim, ratio) + batch // ratio * window_bytes
    variants = decode_variants(head_dim, ratio)
    check_bytes(batch, head_dim, ratio, variants)
    sets, next_set = rotating(lambda: decode_inputs(batch, head_dim, ratio), nbytes)
    closing = sum(int(((s["positions"] + 1) % ratio == 0).sum()) for s in sets) / len(sets)
    store = gpu_us(lambda: save_partial_states(**pick(next_set(), STORE_ARGS)))
    both = gpu_us(lambda: store_then_compress(next_set()))
    kernel = DecodeStepKernel()
    times = {decode_label(v): gpu_us(lambda v=v: sweep_launch(kernel, pick(next_set(), CALL_ARGS), **v))
             for v in variants}
    shapes = {decode_label(v): programs(batch, head_dim, v) for v in variants}
    config = f"head{head_dim} r{ratio}"
    print(f"\n{config}  batch {batch}  closing tokens {closing:.1f}  store {store:.2f} us  "
          f"store+compress {both:.2f} us", flush=True)
    fastest, default = min(times, key=times.get), next(iter(times))
    for label, us in times.items():
        mark = ("*" if label == fastest else " ") + (" default" if label == default else "")
        print(f"  {label:<58} {shapes[label]}  {us:>7.2f} us  /store {us / store:>5.2f}  /both {us / both:>5.2f} "
              f"{mark}", flush=True)
    return [(f"{config:>12} {batch:>5}  {fastest:<58} {times[fastest]:>7.2f} us  /store {times[fastest] / store:.2f}"
             f"  (default {times[default]:.2f} us, /store {times[default] / store:.2f}; store {store:.2f}, "
             f"both {both:.2f})", times[fastest])]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[512, 128], choices=[512, 128])
    parser.add_argument("--ratios", type=int, nargs="+", default=[4, 128], choices=[4, 128])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("sweep_decode_step: needs a CUDA GPU")
    torch.manual_seed(0)
    print(f"fused decode step on {torch.cuda.get_device_name()} (GPU us, CUDA graph; target: fused/store <= 1.2)")
    best = []
    for head_dim in args.head_dims:
        for ratio in args.ratios:
            for batch in args.batches:
                best += sweep(batch, head_dim, ratio)
    print("\nfastest per config and batch:")
    print("\n".join(line for line, _ in best))


if __name__ == "__main__":
    main()
