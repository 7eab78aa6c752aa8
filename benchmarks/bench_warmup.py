"""Warmup costs: compiling every shipped manifest, loading it back, and the first launch.

    python benchmarks/bench_warmup.py [--target cuda:90] [--manifests warmup_manifests/*.json]

Measures, each in fresh processes so nothing is already in memory:
- wall time to compile all manifests into an empty cache with 1, 2, 4, ... workers up to
  all cores (for ``--target`` with no GPU, or for this machine's GPU), and the speed-up
  per worker; beside it, the machine's own ceiling: how much more work that many
  processes running a fixed CPU-bound loop do than one (below 1 x workers where cores
  are hyperthreads or shared);
- with a GPU: time to load every binary from the full cache (``--load``), per variant;
- with a GPU: first-launch latency of the example kernel with and without warmup.
Prints a table last.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FIRST_LAUNCH = """
import time, torch
start = time.perf_counter()
{load}
loaded = time.perf_counter()
from jitkern.examples.axpy import axpy
x = torch.randn(1 << 20, device="cuda"); y = torch.randn_like(x)
torch.cuda.synchronize()
t0 = time.perf_counter(); axpy(x, y, 2.0); torch.cuda.synchronize(); t1 = time.perf_counter()
axpy(x, y, 2.0); torch.cuda.synchronize(); t2 = time.perf_counter()
print(f"RESULT {{(loaded - start) * 1e3:.2f}} {{(t1 - t0) * 1e3:.3f}} {{(t2 - t1) * 1e3:.3f}}")
"""


def run(command, cache_dir, **kwargs):
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    environment = dict(os.environ, TRITON_CACHE_DIR=str(cache_dir), PYTHONPATH=python_path, TRITON_INTERPRET="0")
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, **kwargs)
    if done.returncode:
        sys.exit(f"{' '.join(map(str, command))} exited with {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def compile_all(manifests, target, jobs, cache_dir):
    report = Path(cache_dir) / "report.json"
    command = [sys.executable, "-m", "jitkern.warmup", *manifests, "--jobs", str(jobs), "--report", str(report),
               "--no-progress"]
    if target:
        command += ["--target", target]
    run(command, cache_dir)
    summary = json.loads(report.read_text())
    keys = sum(row["keys"] for row in summary["kernels"])
    return summary["wall_seconds"], keys


CPU_LOOP = "sum(i * i for i in range(6_000_000))"


def cpu_ceiling(workers: int) -> float:
    """Speed-up of ``workers`` processes each running ``CPU_LOOP`` at once over one alone
    (the better of two tries each)."""
    def wall(count: int) -> float:
        start = time.perf_counter()
        processes = [subprocess.Popen([sys.executable, "-c", CPU_LOOP]) for _ in range(count)]
        for process in processes:
            process.wait()
        return time.perf_counter() - start

    return workers * min(wall(1), wall(1)) / min(wall(workers), wall(workers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None, help="compile for this target (no GPU needed); default: this GPU")
    parser.add_argument("--manifests", nargs="*", default=sorted(glob.glob(str(REPO / "warmup_manifests/*.json"))))
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    has_gpu = _has_gpu()
    rows = []
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many:
        serial, keys = compile_all(args.manifests, args.target, 1, one)
        where = args.target or "this GPU"
        rows.append((f"compile {keys} keys for {where}, 1 worker", f"{serial:.2f} s"))
        for workers in sorted({min(2**power, cores) for power in range(1, cores.bit_length() + 1)} - {1}):
            with tempfile.TemporaryDirectory() as scratch:
                cache = many if workers == cores else scratch
                parallel, _ = compile_all(args.manifests, args.target, workers, cache)
            ceiling = cpu_ceiling(workers)
            rows.append((f"compile {keys} keys, {workers} workers",
                         f"{parallel:.2f} s  speed-up {serial / parallel:.2f}x = {serial / parallel / workers:.2f} "
                         f"x workers (CPU-bound loops: {ceiling:.2f}x = {ceiling / workers:.2f} x workers)"))
        if has_gpu and not args.target:
            start = time.perf_counter()
            loaded = run([sys.executable, "-m", "jitkern.warmup", *args.manifests, "--load"], many).stdout
            wall = time.perf_counter() - start
            per_variant = [float(line.split("(")[1].split(" ms")[0]) for line in loaded.splitlines() if "ms each" in line]
            start = next(line.rsplit(": ", 1)[1] for line in loaded.splitlines() if line.startswith("process start"))
            rows.append(("warm start: load every binary (fresh process, incl. imports)", f"{wall:.2f} s"))
            rows.append(("warm start: process start (GPU context, triton_key), once", start))
            rows.append(("warm start per variant, worst kernel", f"{max(per_variant):.2f} ms"))
            print(loaded)
            example = str(REPO / "warmup_manifests/jitkern-example.json")
            cold = run([sys.executable, "-c", FIRST_LAUNCH.format(load="")], Path(one) / "cold").stdout
            warm = run([sys.executable, "-c", FIRST_LAUNCH.format(
                load=f"from jitkern.warmup import load; load([{example!r}])")], many).stdout
            for label, output in (("no warmup", cold), ("after load()", warm)):
                _load_ms, first_ms, second_ms = map(float, output.split("RESULT")[1].split())
                rows.append((f"first launch, {label}", f"{first_ms:.3f} ms (second {second_ms:.3f} ms)"))
    width = max(len(label) for label, _ in rows)
    print("\n".join(f"{label.ljust(width)}  {value}" for label, value in rows))


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
