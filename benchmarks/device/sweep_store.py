"""The store's tilings on the GPU: which one to ship for each config.

    python benchmarks/device/sweep_store.py [--tokens 1024 65536] [--head-dims 512 128] [--ratios 4 128]

For each shipped config (head_dim 512 and 128 at ratios 4 and 128) and token count, times
every tiling of ``store_variants`` (``bench_deepseek_v4.py``: tokens and columns per
program, warps; the shipped one first) as GPU time in a CUDA graph over inputs rotating
past L2, each checked bit for bit against PyTorch before it is timed. "of copy" is the
bandwidth the store's bytes need as a fraction of a copy measured in the same run
(targets: >= 0.90 at 65536 tokens, >= 0.5 at 1024 for head_dim 512). '*' marks the
fastest tiling of a config and token count, 'default' the one ``store_tiling`` ships.
Compiles each tiling once (about 45); about two minutes on an H200.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.bench_deepseek_v4 import (  # noqa: E402
    copy_bandwidth_gbs,
    store_bytes,
    store_case,
    store_variants,
    tiling_label,
    time_store_tiling,
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 65536])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[512, 128], choices=[512, 128])
    parser.add_argument("--ratios", type=int, nargs="+", default=[4, 128], choices=[4, 128])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("sweep_store: needs a CUDA GPU")
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth_gbs()
    print(f"copy bandwidth (read + write): {copy_gbs:.0f} GB/s on {torch.cuda.get_device_name()}")
    print(f"{'config':>12}  {'tokens':>6}  {'tiling':<28}  {'GPU us':>8}  {'of copy':>7}")
    best = []
    for head_dim in args.head_dims:
        for ratio in args.ratios:
            for tokens in args.tokens:
                sets, next_set, expected = store_case(tokens, head_dim, ratio)
                times = {tiling: time_store_tiling(sets, next_set, expected, tiling)
                         for tiling in store_variants(head_dim, ratio)}
                of_copy = {tiling: store_bytes(tokens, head_dim, ratio) / 1e3 / us / copy_gbs
                           for tiling, us in times.items()}
                fastest, default = min(times, key=times.get), next(iter(times))
                for tiling, us in times.items():
                    mark = ("*" if tiling == fastest else " ") + (" default" if tiling == default else "")
                    print(f"{f'head{head_dim} r{ratio}':>12}  {tokens:>6}  {tiling_label(tiling):<28}  {us:>8.2f}  "
                          f"{of_copy[tiling]:>7.2f} {mark}", flush=True)
                best.append(f"{f'head{head_dim} r{ratio}':>12}  {tokens:>6}  {tiling_label(fastest):<28}  "
                            f"{times[fastest]:>8.2f}  {of_copy[fastest]:>7.2f}  (default {of_copy[default]:.2f})")
    print("\nfastest per config and token count:")
    print("\n".join(best))


if __name__ == "__main__":
    main()
