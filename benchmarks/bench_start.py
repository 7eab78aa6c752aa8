"""Cold start of a serving process: ``import jitkern`` + ``load()`` of every shipped
manifest + the first launch, each in a fresh process.

    python3 benchmarks/bench_start.py [--cache-dir DIR] [--runs 5] [--manifests ...] [--dry-run]

Each run is a fresh Python process that times, in order:
- what any engine pays anyway: ``import torch``, ``import triton``, the CUDA context;
- import: ``import jitkern`` (after torch and triton);
- process start: ``jitkern.serve.start_process()``: Triton's hash of its own build,
  ``triton_key()``, which jitkern remembers per installed build (``JITKERN_STATE_DIR``,
  a fresh folder per benchmark: its first run pays the hash);
- kernel modules: importing the modules the manifests name (Triton parses and hashes
  each ``@triton.jit`` function; an engine imports them to call the kernels anyway);
- load: ``jitkern.serve.load(manifests)``: loading every binary, per binary too; after
  the first run, from the memo that run's ``load()`` wrote (``jitkern.serve.memo``);
- first launch: the first ``axpy`` call after it (a kernel ``load()`` loaded), and a second.
The first run (cold file-system caches, no memos yet: it takes ``load()``'s full path) is
shown apart, and the table gives the median of the ``--runs`` after it.

Our packages' bytecode is written first (``compileall``), as pip writes it when it installs
a package: a process that finds none compiles every module from source, on every run, when
it may not write bytecode (``PYTHONDONTWRITEBYTECODE``, which the device image sets).
``--sources-only`` skips that, to measure a checkout without bytecode.

``bench_serving_start.py`` times the same start as an engine sees it, one span from before
``import jitkern`` to after ``load()``, Triton's import within it, in 1 and 8 processes.

The cache must hold every key of the manifests for this GPU (``python -m jitkern.warmup
... --target cuda:90 --cache-dir DIR``; ``load()`` compiles nothing). ``--dry-run`` runs on
a machine with no GPU through ``jitkern.testing.dry_run_gpu``: the host work only (no
CUDA context, no module loads on a GPU, launches that launch nothing).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RUN = """
import json, sys, time
clock = time.perf_counter
t0 = clock()
import torch
t1 = clock()
import triton
t2 = clock()
import jitkern
t3 = clock()
import contextlib
from jitkern.testing import dry_run_gpu
from jitkern.serve import load, start_process
dry_run = {dry_run!r}
device = "cpu" if dry_run else "cuda"
sync = (lambda: None) if dry_run else torch.cuda.synchronize
with dry_run_gpu() if dry_run else contextlib.nullcontext():
    t4 = clock()
    if not dry_run:
        torch.cuda.init(); torch.empty(1, device="cuda"); sync()
    t5 = clock()
    start_process()
    t6 = clock()
    for manifest in {manifests!r}:
        jitkern.kernel.registry.import_modules(json.load(open(manifest))["modules"])
    t6m = clock()
    loaded_kernels = load({manifests!r})
    t7 = clock()
    from jitkern.examples.axpy import axpy
    x = torch.randn(1 << 20, device=device); y = torch.randn_like(x); out = torch.empty_like(x)
    sync()
    t8 = clock(); axpy(x, y, 2.0, out); sync(); t9 = clock()
    axpy(x, y, 2.0, out); sync(); t10 = clock()
print("RESULT " + json.dumps(dict(
    torch_s=t1 - t0, triton_s=t2 - t1, import_s=t3 - t2, context_s=t5 - t4, start_s=t6 - t5, modules_s=t6m - t6,
    load_s=t7 - t6m,
    binaries=sum(row.binaries for row in loaded_kernels), first_ms=(t9 - t8) * 1e3, second_ms=(t10 - t9) * 1e3,
    kernels={{row.kernel: [row.binaries, row.seconds] for row in loaded_kernels}})))
"""


def one_run(manifests: list[str], cache_dir: str, dry_run: bool, state_dir: str) -> dict:
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    environment = dict(os.environ, TRITON_CACHE_DIR=cache_dir, PYTHONPATH=python_path, TRITON_INTERPRET="0",
                       JITKERN_STATE_DIR=state_dir)
    done = subprocess.run([sys.executable, "-c", RUN.format(manifests=manifests, dry_run=dry_run)], cwd=REPO,
                          env=environment, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"a run exited with {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("RESULT ", 1)[1])


PACKAGES = ("jitkern", "step5", "deepseek_v4")  # the shipped manifests' kernels live in these


def write_bytecode(packages: tuple[str, ...]) -> bool:
    """Write each package's bytecode (``__pycache__``), as an install does; whether all was written."""
    import compileall

    return all(compileall.compile_dir(str(REPO / package), quiet=2) for package in packages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", default=os.environ.get("TRITON_CACHE_DIR", str(REPO / ".triton-cache")))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--manifests", nargs="*", default=sorted(glob.glob(str(REPO / "warmup_manifests/*.json"))))
    parser.add_argument("--dry-run", action="store_true", help="no GPU: host work only, through dry_run_gpu")
    parser.add_argument("--sources-only", action="store_true", help="do not write our packages' bytecode first")
    args = parser.parse_args()
    cache_dir = str(Path(args.cache_dir).resolve())
    bytecode = not args.sources_only and write_bytecode(PACKAGES)
    with tempfile.TemporaryDirectory() as state_dir:  # the first run pays triton_key() and remembers it
        first = one_run(args.manifests, cache_dir, args.dry_run, state_dir)
        runs = [one_run(args.manifests, cache_dir, args.dry_run, state_dir) for _ in range(args.runs)]
    median = lambda field: statistics.median(run[field] for run in runs)  # noqa: E731
    binaries = runs[0]["binaries"]
    ours = median("import_s") + median("start_s") + median("modules_s") + median("load_s")
    where = ("CPU dry run (host work only)" if args.dry_run else "GPU") + \
        (", bytecode written first" if bytecode else ", from sources (no bytecode)")
    rows = [
        ("first run (cold file-system caches, no memos: load()'s full path)",
         f"import jitkern {first['import_s']:.3f} s, start {first['start_s']:.3f} s, kernel modules "
         f"{first['modules_s']:.3f} s, load {first['load_s']:.3f} s"),
        ("import torch (the engine's own)", f"{median('torch_s'):.3f} s"),
        ("import triton (the engine's own)", f"{median('triton_s'):.3f} s"),
        ("CUDA context (the engine's own)", f"{median('context_s'):.3f} s"),
        ("import jitkern (after torch and triton)", f"{median('import_s'):.3f} s"),
        ("process start: Triton's triton_key(), remembered", f"{median('start_s'):.3f} s"),
        ("import the kernel modules the manifests name", f"{median('modules_s'):.3f} s"),
        (f"load() {binaries} binaries, from the load memo",
         f"{median('load_s'):.3f} s = {median('load_s') / max(binaries, 1) * 1e3:.2f} ms a binary"),
        ("jitkern's share: import jitkern + start + kernel modules + load", f"{ours:.3f} s"),
        ("first launch after load (axpy)", f"{median('first_ms'):.3f} ms (second {median('second_ms'):.3f} ms)"),
    ]
    per_kernel = {name: statistics.median(run["kernels"][name][1] for run in runs) for name in runs[0]["kernels"]}
    for name, seconds in sorted(per_kernel.items(), key=lambda item: -item[1]):
        count = runs[0]["kernels"][name][0]
        rows.append((f"  {name}: {count} binaries", f"{seconds * 1e3:.1f} ms ({seconds * 1e3 / count:.2f} ms each)"))
    print(f"cold start, {where}, median of {len(runs)} fresh processes (cache {cache_dir})")
    width = max(len(label) for label, _ in rows)
    print("\n".join(f"{label.ljust(width)}  {value}" for label, value in rows))


if __name__ == "__main__":
    main()
