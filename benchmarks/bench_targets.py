"""Every GPU of a fleet from one machine: keys, binaries, seconds and cache bytes per target.

    python benchmarks/bench_targets.py [--targets cuda:80,...] [--jobs N] [--manifests warmup_manifests/*.json]

Compiles the manifests for every target (default: ``jitkern.targets.SUPPORTED_TARGETS``)
into one empty cache in one warmup run (``--target`` list, no GPU needed), then reads the
report and the cache: per target, the keys, the binaries that landed in the cache (keys
that compile to the same binary, such as a PDL key built without PDL for its plain twin,
share one), the keys noted, the failures, the compile seconds (summed over keys, as each
worker spent them) and the bytes of its cache entries. NVIDIA host launchers (C modules
built once per launch signature, shared by every cuda target) are counted apart. Prints
a table last.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cache_by_target(cache_dir: Path) -> tuple[dict[str, Counter], Counter]:
    """Per target, the kernel binaries in the cache and their bytes; and the host modules'."""
    per_target: dict[str, Counter] = {}
    host = Counter()
    for entry in cache_dir.iterdir():
        if not entry.is_dir():
            continue
        files = [path for path in entry.iterdir() if path.is_file() and not path.name.startswith(".")]
        size = sum(path.stat().st_size for path in files)
        metadata = [path for path in files if path.suffix == ".json" and not path.name.startswith("__grp__")]
        target = None
        for path in metadata:
            try:
                found = json.loads(path.read_text()).get("target")
            except ValueError:
                continue
            if isinstance(found, dict):
                target = f"{found['backend']}:{found['arch']}"
        if target is None:
            host.update(modules=1, bytes=size)
        else:
            per_target.setdefault(target, Counter()).update(binaries=1, bytes=size)
    return per_target, host


def main() -> None:
    from jitkern.targets import SUPPORTED_TARGETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(SUPPORTED_TARGETS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--manifests", nargs="+", default=sorted(glob.glob(str(REPO / "warmup_manifests" / "*.json"))))
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    report_path = cache.parent / f"{cache.name}-report.json"
    environment = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_INTERPRET="0")
    command = [sys.executable, "-m", "jitkern.warmup", *args.manifests, "--target", args.targets,
               "--jobs", str(args.jobs), "--report", str(report_path), "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(done.stdout)
    if done.returncode not in (0, 1) or not report_path.exists():
        sys.exit(f"warmup exited with {done.returncode}:\n{done.stderr[-3000:]}")
    report = json.loads(report_path.read_text())
    per_target, host = cache_by_target(cache)
    rows = {}
    for row in report["kernels"]:
        counts = rows.setdefault(row["target"], Counter())
        counts.update(keys=row["keys"], failed=row["failed"], seconds=row["seconds"],
                      noted=sum(row.get("notes", {}).values()))
    header = ("target", "keys", "binaries", "noted", "failed", "compile s", "cache MB")
    lines = [header]
    for target, counts in rows.items():
        cached = per_target.get(target, Counter())
        lines.append((target, str(counts["keys"]), str(cached["binaries"]), str(counts["noted"]), str(counts["failed"]),
                      f"{counts['seconds']:.1f}", f"{cached['bytes'] / 1e6:.2f}"))
    total_bytes = sum(c["bytes"] for c in per_target.values()) + host["bytes"]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"{len(args.manifests)} manifests, {len(rows)} targets, {args.jobs} worker(s): wall {wall:.1f} s "
          f"(warmup's own: {report['wall_seconds']:.1f} s); host launchers (every cuda target): "
          f"{host['modules']} modules, {host['bytes'] / 1e6:.2f} MB; whole cache {total_bytes / 1e6:.2f} MB")
    for line in lines:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))))


if __name__ == "__main__":
    main()
