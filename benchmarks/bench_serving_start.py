"""Serving start as an engine sees it: one wall-clock span from before ``import jitkern`` to
after ``load()`` returns, in fresh processes, 1 and 8 at once on one GPU.

    python benchmarks/bench_serving_start.py [--cache-dir DIR] [--runs 3] [--processes 1 8]
                                             [--entry jitkern.serve] [--manifests ...] [--sources-only] [--dry-run]

Each process imports torch and creates the CUDA context (the engine's own work, before the
span), then, in the span: ``import ENTRY`` (``jitkern.serve`` by default, what a serving
process needs; ``--entry jitkern.warmup`` imports the CLI as the issue's figures did, pydantic
and the compile stages with it), which imports Triton unless the engine did, and
``load(manifests)``, which imports the kernel modules, pays ``start_process()`` and loads
every binary. The processes of a run wait for one another after their CUDA context and
start their spans together, as the ranks of a tensor-parallel engine do.

- **first start of a node**: a fresh ``JITKERN_STATE_DIR`` per run: no load memo, no
  remembered ``triton_key()`` (the file-system cache stays warm: this benchmark cannot
  drop it);
- **restart**: a ``JITKERN_STATE_DIR`` that one earlier, untimed process filled.

The table, printed last, gives each span's median and range over ``--runs`` runs (all
processes' spans), and its parts. ``bench_start.py`` reports jitkern's share as the sum of
``import jitkern`` after torch *and Triton*, ``triton_key()``, the kernel modules and
``load()``, from bytecode it wrote first: the span here holds, besides, Triton's import
(the engine's own in ``bench_start.py``), the entry's own imports, and everything ``load()``
does around those parts; with ``--sources-only`` no bytecode is written first, as in an
image that sets ``PYTHONDONTWRITEBYTECODE`` (every module compiled from source, every start).
``--dry-run`` runs on a machine with no GPU (``jitkern.testing.dry_run_gpu``: host work,
no CUDA context, launches that launch nothing; its import is taken out of the span).
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: `benchmarks` imports from the repo

from benchmarks.bench_start import PACKAGES, write_bytecode  # noqa: E402

PROCESS = """
import contextlib, json, os, sys, time
clock = time.perf_counter
import torch
dry_run, entry, manifests, barrier = {dry_run!r}, {entry!r}, {manifests!r}, {barrier!r}
if not dry_run:
    torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
open(os.path.join(barrier, f"ready-{{os.getpid()}}"), "w").close()
while not os.path.exists(os.path.join(barrier, "go")):
    time.sleep(0.0005)
t0 = clock()
__import__(entry)
from jitkern.serve import load
t1 = clock()
dry = contextlib.nullcontext()
if dry_run:
    from jitkern.testing import dry_run_gpu
    dry = dry_run_gpu()
t1d = clock()
with dry:
    loaded = load(manifests)
t2 = clock()
print("RESULT " + json.dumps(dict(span_s=(t1 - t0) + (t2 - t1d), import_s=t1 - t0, load_s=t2 - t1d,
                                  binaries=sum(row.binaries for row in loaded))))
"""


def one_run(processes: int, state_dir: str, args: argparse.Namespace) -> list[dict]:
    """Start ``processes`` fresh processes at once; each one's result."""
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    environment = dict(os.environ, TRITON_CACHE_DIR=str(Path(args.cache_dir).resolve()), PYTHONPATH=python_path,
                       TRITON_INTERPRET="0", JITKERN_STATE_DIR=state_dir)
    with tempfile.TemporaryDirectory() as barrier:
        source = PROCESS.format(dry_run=args.dry_run, entry=args.entry, manifests=args.manifests, barrier=barrier)
        running = [subprocess.Popen([sys.executable, "-c", source], cwd=REPO, env=environment,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(processes)]
        while len(list(Path(barrier).glob("ready-*"))) < processes and all(p.poll() is None for p in running):
            time.sleep(0.01)
        (Path(barrier) / "go").touch()
        results = []
        for process in running:
            out, err = process.communicate()
            if process.returncode:
                sys.exit(f"a process exited with {process.returncode}:\n{out[-3000:]}{err[-3000:]}")
            results.append(json.loads(out.split("RESULT ", 1)[1]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", default=os.environ.get("TRITON_CACHE_DIR", str(REPO / ".triton-cache")))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--entry", default="jitkern.serve", help="the module a serving process imports first")
    parser.add_argument("--manifests", nargs="*", default=sorted(glob.glob(str(REPO / "warmup_manifests/*.json"))))
    parser.add_argument("--sources-only", action="store_true", help="do not write our packages' bytecode first")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: host work only, through dry_run_gpu")
    args = parser.parse_args()
    bytecode = not args.sources_only and write_bytecode(PACKAGES)
    rows = []
    for processes in args.processes:
        for start in ("first start of a node", "restart"):
            spans = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory() as state_dir:
                    if start == "restart":
                        one_run(1, state_dir, args)  # the node's first start: writes the memos
                    spans += one_run(processes, state_dir, args)
            median = lambda field: statistics.median(span[field] for span in spans)  # noqa: E731
            rows.append((start, processes, median("span_s"), min(s["span_s"] for s in spans),
                         max(s["span_s"] for s in spans), median("import_s"), median("load_s"), spans[0]["binaries"]))
    where = ("CPU dry run (host work only)" if args.dry_run else "GPU") + \
        (", bytecode written first" if bytecode else ", from sources (no bytecode)")
    print(f"serving start, {where}: import {args.entry} + load() of {len(args.manifests)} manifests, "
          f"{rows[0][7]} binaries (Triton imported inside the span); median (min-max) of {args.runs} runs, every "
          "process's span, seconds")
    header = f"{'start':22} {'processes':>9} {'span':>7} {'min-max':>13} {'import':>7} {'load()':>7}"
    print(header)
    print("-" * len(header))
    for start, processes, span, low, high, import_s, load_s, _binaries in rows:
        print(f"{start:22} {processes:9d} {span:7.3f} {f'{low:.3f}-{high:.3f}':>13} {import_s:7.3f} {load_s:7.3f}")


if __name__ == "__main__":
    main()
