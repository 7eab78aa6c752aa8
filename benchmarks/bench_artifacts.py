"""Bytes a warmed cache takes per binary, with its IR (``--keep-ir``) and binary-only:
on disk, in a cache wheel and in Redis (CPU, no GPU).

    .venv/bin/python benchmarks/bench_artifacts.py --redis redis://127.0.0.1:6379/0 [MANIFEST...] [--target cuda:90]

For each kind it warms the manifests into a fresh folder with ``--remote URL`` (so the
entries are published as a warmup publishes them), counts the bytes of every file of each
binary's entry and, apart, of the host modules, packs the cache as a wheel (``pack``),
and sums Redis's ``MEMORY USAGE`` of each entry's key. Give it a Redis it may write: the
second kind's publish overwrites the first's entries (their Triton cache keys are the
same). Then it prints a table.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = [str(REPO / "warmup_manifests" / name) for name in ("step5-bs256-mtp3.json", "deepseek_v4-h200.json")]
KINDS = {"with IR": ["--keep-ir"], "binary-only": []}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("manifests", nargs="*", default=MANIFESTS)
    parser.add_argument("--target", default="cuda:90")
    parser.add_argument("--redis", required=True, metavar="URL", help="redis://HOST:PORT/DB to publish to")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workdir", help="where the caches and wheels go (default: a new temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jitkern-bench-artifacts-"))
    figures = {kind: measure(args, workdir / kind.replace(" ", "-"), options) for kind, options in KINDS.items()}
    print(f"{', '.join(Path(m).name for m in args.manifests)} for {args.target} (work folder {workdir})")
    print(table(figures))


def measure(args, folder: Path, options: list[str]) -> dict[str, float]:
    """Warm, publish, pack one kind of cache into ``folder``; its figures in bytes."""
    import redis

    from jitkern.cache.lock import LOCK_FILE, Lock

    cache, dist = folder / "cache", folder / "dist"
    environment = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")]))
    command = [sys.executable, "-m", "jitkern.warmup", *args.manifests, "--target", args.target, "--jobs",
               str(args.jobs), "--no-progress"]
    subprocess.run([*command, "--cache-dir", str(cache), "--remote", args.redis, *options], check=True,
                   capture_output=True, env=environment)
    client = redis.Redis.from_url(args.redis)
    lock = Lock.from_bytes((cache / LOCK_FILE).read_bytes(), "lock")
    binaries = {folder for folder, files in lock.entries.items() if any(n.endswith((".cubin", ".hsaco")) for n in files)}
    memory = {folder: client.memory_usage(f"jitkern:entry:{folder}", samples=0) or 0 for folder in lock.entries}
    subprocess.run([sys.executable, "-m", "jitkern.warmup", "pack", *args.manifests, "--target", args.target,
                    "--cache-dir", str(cache), "--out", str(dist)], check=True, capture_output=True, env=environment)
    (wheel,) = dist.glob("*.whl")
    disk = {folder: sum(path.stat().st_size for path in (cache / folder).iterdir() if path.is_file())
            for folder in lock.entries}
    return {
        "binaries": len(binaries),
        "host modules": len(lock.entries) - len(binaries),
        "disk, per binary": sum(disk[f] for f in binaries) / len(binaries),
        "disk, binaries": sum(disk[f] for f in binaries),
        "disk, host modules": sum(size for f, size in disk.items() if f not in binaries),
        "wheel": wheel.stat().st_size,
        "wheel, per binary": wheel.stat().st_size / len(binaries),
        "Redis, per binary": sum(memory[f] for f in binaries) / len(binaries),
        "Redis, binaries": sum(memory[f] for f in binaries),
        "Redis, host modules": sum(size for f, size in memory.items() if f not in binaries),
    }


def table(figures: dict[str, dict[str, float]]) -> str:
    """One row per figure, one column per kind, and how many times smaller binary-only is."""
    before, after = figures["with IR"], figures["binary-only"]
    rows = [["", "with IR", "binary-only", "smaller"]]
    for name in before:
        counted = name in ("binaries", "host modules")
        ratio = "" if counted or not after[name] else f"{before[name] / after[name]:.1f}x"
        rows.append([name, shown(name, before[name]), shown(name, after[name]), ratio])
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))) for row in rows)


def shown(name: str, value: float) -> str:
    if name in ("binaries", "host modules"):
        return f"{value:.0f}"
    return f"{value / 1e3:.1f} kB" if "per binary" in name else f"{value / 1e6:.2f} MB"


if __name__ == "__main__":
    main()
