"""``python -m jitkern.warmup tune``: tune a deployment's kernels on this GPU into tables
shipped with the cache, check those tables, or move them in and out of vLLM's format.

    python -m jitkern.warmup tune MANIFEST... [--cache-dir DIR] [--warmups N] [--repeats N] [--eager]
    python -m jitkern.warmup tune MANIFEST... --check [--target T] [--gpu NAME]
    python -m jitkern.warmup tune MANIFEST... --import-vllm FILE [--kernel K] [--where F=V,...] [--target T] [--gpu G]
    python -m jitkern.warmup tune MANIFEST... --export-vllm FILE [--kernel K] [--where F=V,...] [--target T] [--gpu G]

The CLI's tune command: it parses arguments and prints; the work is ``jitkern.tuning``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from jitkern import settings
from jitkern.cache.share import write_atomically
from jitkern.kernel import registry
from jitkern.manifest import ManifestError, resolve
from jitkern.targets import gpu_name, local_target
from jitkern.tuning import (CudaTimer, TableError, TuneError, check_tables, export_vllm, import_vllm, read, store,
                            tune, tuned_kernel, vllm_gpu)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup tune",
        description="Time every candidate config of each tuned kernel's buckets on this GPU and write a tuning "
                    "table per kernel into the cache (locked, packed and published with it); or check the tables, "
                    "or import or export vLLM's tuned fused-MoE JSON.")
    parser.add_argument("manifests", nargs="+", metavar="MANIFEST")
    parser.add_argument("--cache-dir", help="the warmed cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    parser.add_argument("--target", help="with --check, --import-vllm, --export-vllm: the target (default: this "
                        "GPU's, else the manifests')")
    parser.add_argument("--gpu", help="the GPU's name, e.g. 'NVIDIA H200' (default: this GPU's; for --import-vllm "
                        "the file's device_name)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="name each table missing, stale, naming configs warmup "
                      "did not build or lacking buckets; exit 1 if any")
    mode.add_argument("--import-vllm", metavar="FILE", help="write the table a vLLM tuned config file gives")
    mode.add_argument("--export-vllm", metavar="FILE", help="write a table's rows as a vLLM tuned config file")
    parser.add_argument("--kernel", help="with --import-vllm/--export-vllm: the tuned kernel (default: the only one)")
    parser.add_argument("--where", default="", metavar="F=V,...",
                        help="with --import-vllm/--export-vllm: bucket fields fixed, e.g. experts=64,n=1408")
    parser.add_argument("--warmups", type=int, default=CudaTimer.warmups, help="launches before timing")
    parser.add_argument("--repeats", type=int, default=CudaTimer.repeats, help="timed samples per candidate")
    parser.add_argument("--eager", action="store_true", help="time eager launches, not CUDA-graph replays")
    return parser


def where_of(text: str) -> dict[str, Any]:
    """``n=1408,mul_routed_weight=false`` as values: JSON numbers and booleans, else strings."""
    where = {}
    for part in filter(None, text.split(",")):
        name, equals, value = part.partition("=")
        if not equals or not name:
            raise ValueError(f"--where {part!r}: expected FIELD=VALUE")
        try:
            where[name] = json.loads(value)
        except ValueError:
            where[name] = value
    return where


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    try:
        where = where_of(args.where)
        deployment, _note = resolve(args.manifests, args.target)
        kernel = tuned_kernel(deployment, args.kernel) if args.import_vllm or args.export_vllm else None
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        lines = check_tables(deployment, args.gpu or gpu_name())
        print("\n".join(lines) if lines else "every tuned kernel's table is here, fresh and whole")
        return 1 if lines else 0
    if args.import_vllm or args.export_vllm:
        gpu = args.gpu or (vllm_gpu(args.import_vllm) if args.import_vllm else None) or gpu_name()
        if gpu is None or len(deployment.targets) != 1:
            print("error: name " + ("the GPU with --gpu" if gpu is None else "one target with --target"),
                  file=sys.stderr)
            return 2
        return _vllm(args, deployment, kernel, deployment.targets[0], gpu, where)
    if local_target() is None or gpu_name() is None:
        print("error: tune times candidates on this machine's GPU, and there is none here (--check, --import-vllm "
              "and --export-vllm need none)", file=sys.stderr)
        return 1
    if args.target:
        print("error: --target: tune times candidates for this GPU's own target; --target goes with --check, "
              "--import-vllm and --export-vllm", file=sys.stderr)
        return 2
    return _tune(deployment, CudaTimer(warmups=args.warmups, repeats=args.repeats, graph=not args.eager))


def _tune(deployment: Any, timer: CudaTimer) -> int:
    target, gpu, start = deployment.targets[0], gpu_name(), time.perf_counter()
    print(f"tuning for {target} on {gpu}: {timer.describe()}", file=sys.stderr)
    try:
        tables = tune(deployment, target, gpu, timer, on_bucket=lambda name, done, total: print(
            f"\r{name}: {done}/{total} buckets", end="" if done < total else "\n", file=sys.stderr))
        for table in tables:
            path, lock_digest = store(table, settings.current().lock_key)
            print(f"{table.name}: {len(table.rows)} buckets; {path} (lock sha256 {lock_digest})")
    except (TuneError, TableError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"tuned in {time.perf_counter() - start:.1f} s")
    return 0


def _vllm(args: Any, deployment: Any, kernel: str, target: str, gpu: str, where: dict[str, Any]) -> int:
    try:
        if args.import_vllm:
            table = import_vllm(args.import_vllm, deployment, kernel, target, gpu, where)
            path, lock_digest = store(table, settings.current().lock_key)
            print(f"{table.name}: {len(table.rows)} buckets from {args.import_vllm}; {path} "
                  f"(lock sha256 {lock_digest})")
            return 0
        table, problem = read(registry.get_kernel(kernel), target, gpu)
        if table is None:
            raise TableError(f"{kernel} for {target} on {gpu}: {problem}")
        write_atomically(args.export_vllm, export_vllm(table, where))
        print(f"{args.export_vllm}: {table.name}'s rows as vLLM's tuned configs")
        return 0
    except (TableError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
