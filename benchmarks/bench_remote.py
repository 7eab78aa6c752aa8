"""Publish and load rates of the Redis tier against a local redis-server (CPU, no GPU).

    .venv/bin/python benchmarks/bench_remote.py [MANIFEST] [--cache-dir DIR]

Warms the manifest for cuda:90 (cached after the first run), starts a redis-server on a
free loopback port, publishes every entry, then loads every key into an empty cache
through Redis (verified against the pinned lock, launching nothing), and prints a table.
docs/fleet.md scales these figures to a fleet.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("manifest", nargs="?", default=str(REPO / "warmup_manifests" / "jitkern-example.json"))
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "jitkern-bench-remote-cache"))
    args = parser.parse_args()
    os.environ["TRITON_INTERPRET"] = "0"
    subprocess.run([sys.executable, "-m", "jitkern.warmup", args.manifest, "--target", "cuda:90", "--cache-dir",
                    args.cache_dir, "--no-progress"], check=True, capture_output=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        rows = measure(args.manifest, args.cache_dir, f"redis://127.0.0.1:{port}/0")
    finally:
        server.kill()
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def measure(manifest: str, cache_dir: str, url: str) -> list[tuple[str, str]]:
    import redis

    from jitkern import settings
    from jitkern.cache.lock import LOCK_FILE, Lock, digest
    from jitkern.cache.remote import RedisStore
    from jitkern.cache.share import publish
    from jitkern.testing import dry_run_gpu
    from jitkern.serve import load

    client = redis.Redis.from_url(url)
    while True:
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    data = Path(cache_dir, LOCK_FILE).read_bytes()
    lock = Lock.from_bytes(data, LOCK_FILE)
    entry_bytes = sum(os.path.getsize(Path(cache_dir, f, n)) for f, files in lock.entries.items() for n in files)
    empty = client.info("memory")["used_memory"]
    start = time.perf_counter()
    publish(lock, RedisStore(url), "bench")
    published = time.perf_counter() - start
    used = client.info("memory")["used_memory"] - empty
    start = time.perf_counter()
    publish(lock, RedisStore(url), "bench")
    republished = time.perf_counter() - start

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitkern-bench-node-")
    with dry_run_gpu(), settings.scope(remote_cache=url, lock_digest=digest(data)):
        from jitkern.serve import start_process

        start_process()
        start = time.perf_counter()
        load([manifest])
        loaded = time.perf_counter() - start
        from jitkern.kernel import registry

        for kernel in registry.kernel_names():
            registry.get_kernel(kernel).binaries.forget()
        start = time.perf_counter()
        load([manifest])
        local = time.perf_counter() - start
    keys, entries = len(lock.keys), len(lock.entries)
    return [
        ("keys / entries (binaries + host modules)", f"{keys} / {entries}"),
        ("entry files on disk, total / per key", f"{entry_bytes / 1e6:.2f} MB / {entry_bytes / keys / 1e3:.1f} kB"),
        ("Redis memory used, total / per key", f"{used / 1e6:.2f} MB / {used / keys / 1e3:.1f} kB"),
        ("publish (measured)",
         f"{published:.2f} s = {entries / published:.0f} entries/s, {entry_bytes / published / 1e6:.1f} MB/s"),
        ("publish again, no-op (measured)", f"{republished:.2f} s"),
        ("load through Redis, empty cache (measured)", f"{loaded:.2f} s = {keys / loaded:.0f} keys/s"),
        ("load from the local cache after (measured)", f"{local:.2f} s = {keys / local:.0f} keys/s"),
    ]


if __name__ == "__main__":
    main()
