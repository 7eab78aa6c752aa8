"""Binaries a deployment warms against those its serving schedule launches (CPU, no GPU).

    .venv/bin/python benchmarks/bench_domains.py [--jobs 2] [--steps 48] [--long-steps 1] [--seed 0]
                                                 [--no-warmup] [--only NAME] [--json OUT.json]

Run it from the repository root. Per deployment:

- **warmed**: the binary keys a warmup of its manifests compiles for the target
  (``resolve(...).by_target``: de-duplicated, each kernel's ``launched_on`` the target);
- **launched**: the distinct binary keys its serving schedule launches
  (``kernel.layouts.binary_key(spec)`` of every launch ``record_launches()`` saw), and
  the ratio; the manifest's kernels the schedule never launches are named;
- a warmup of its manifests into a fresh cache (``python -m jitkern.warmup MANIFESTS
  --target T --cache-dir DIR --report R.json --no-progress --jobs N``): the compile seconds
  summed over keys (the report's: wall time each worker spent, so they grow when the
  machine is shared), the CPU seconds of the warmup and its workers (user and system,
  Python's start included: what a busy machine changes least), the warmup's wall time,
  and the bytes of every file of the cache. ``T`` is cuda:90, or the manifest's own first
  target where it lists no cuda:90 (``deepseek_v4-a100``, ``-mi300``).

The schedules run under Triton's interpreter: ``TRITON_INTERPRET=1`` is set here before
any kernel module is imported. They are the tests' own, imported from the test folders
(this script puts the repository root first on ``sys.path``, then ``tests/step5``,
``tests/deepseek_v4``): Step5's ``Schedule``/``run_schedule`` of
``tests/step5/test_schedule.py`` (``--steps`` steps as the tests run them, then
``--long-steps`` prefill steps of 320 tokens or more from ``long_prefills``, which take
the prefill in two launches: the tests' steps have at most 243 tokens; for the
mixed-layout deployment, key and z in a random layout each step, and the long steps in
each of the four layouts), DeepSeek V4's ``Schedule`` of
``tests/deepseek_v4/test_dsv4_step_sequence.py`` (each of its four deployments, int32
and int64 indices), and the grouped GEMM's public function at every batch size 1..512
of both of its manifest's shapes, with and without routed weights (recorded, not run:
``record_launches(dry_run=True)``). The interpreter has no PDL, so Step5's two-launch
prefill launches its plain variants there; a launch of a key the target never launches
is counted as its PDL twin, which the target's GPU launches. The example kernel has no
schedule: warmed only.
Prints a table last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "step5"), str(REPO / "tests" / "deepseek_v4")]

import torch  # noqa: E402

from jitkern.kernel import registry  # noqa: E402
from jitkern.manifest import resolve  # noqa: E402
from jitkern.targets import parse_target, target_of as gpu_target  # noqa: E402
from jitkern.testing import record_launches  # noqa: E402

MANIFESTS = REPO / "tests" / "manifests"
SHIPPED = REPO / "warmup_manifests"
STEP5_MIXED = MANIFESTS / "step5-views.json"  # the mixed-layout deployment's block size, drafts and capacity
DEPLOYMENTS = [  # name, manifests, schedule
    ("Step5 mixed layouts, strided", [MANIFESTS / "step5-views.json"], "step5-mixed"),
    ("Step5 mixed layouts, by values", [MANIFESTS / "step5-values.json"], "step5-mixed"),
    ("Step5 mixed layouts, by values per configuration", sorted((MANIFESTS / "step5-configs").glob("*.json")),
     "step5-mixed"),
    ("step5-bs64-nospec", [SHIPPED / "step5-bs64-nospec.json"], "step5"),
    ("step5-bs256-mtp3", [SHIPPED / "step5-bs256-mtp3.json"], "step5"),
    ("grouped-gemm-h200", [SHIPPED / "grouped-gemm-h200.json"], "grouped-gemm"),
    ("deepseek_v4-h200", [SHIPPED / "deepseek_v4-h200.json"], "deepseek_v4"),
    ("deepseek_v4-a100", [SHIPPED / "deepseek_v4-a100.json"], "deepseek_v4"),
    ("deepseek_v4-mi300", [SHIPPED / "deepseek_v4-mi300.json"], "deepseek_v4"),
    ("jitkern-example", [SHIPPED / "jitkern-example.json"], None),
]


def seeded(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def step5_launches(manifest: Path, args, mixed: bool) -> set:
    """Step5's serving schedule for the deployment of ``manifest``: ``--steps`` steps as the
    tests run them, then ``--long-steps`` prefill steps of 320 tokens or more (the prefill
    in two launches); with ``mixed``, key and z in a random layout of four each step, and
    the long steps in each of the four."""
    import test_schedule as step5

    block_size, draft_tokens, capacity = step5.deployment(manifest)
    seeded(args.seed)
    with record_launches() as launches:
        step5.run_schedule(step5.Schedule(block_size, draft_tokens, capacity, rows="mixed" if mixed else None),
                           steps=args.steps)
        for rows in step5.MIXED_ROWS if mixed else [None]:
            long = step5.long_prefills(block_size, draft_tokens, capacity, rows=rows)
            for step in range(args.long_steps):
                long.mixed_step()
                long.check(step)
    return {(kernel.name, kernel.layouts.binary_key(spec)) for kernel, spec in launches}


def dsv4_launches(args) -> set:
    """DeepSeek V4's serving schedule: each deployment of the test, with int32 and int64 indices."""
    import test_dsv4_step_sequence as dsv4

    seeded(args.seed)
    found = set()
    with record_launches() as launches:
        for ratio, head_dim, requests, lengths, max_chunk in dsv4.DEPLOYMENTS.mark.args[1]:
            for index_dtype in (torch.int32, torch.int64):
                dsv4.Schedule(ratio, head_dim, requests=requests, lengths=lengths, max_chunk=max_chunk,
                              index_dtype=index_dtype).run()
        found |= {(kernel.name, kernel.layouts.binary_key(spec)) for kernel, spec in launches}
    return found


def grouped_gemm_launches(manifest: Path, args) -> set:
    """Every batch size 1..512 of each shape of the manifest, with and without routed
    weights, a's rows contiguous or a slice of a wider projection (as the test draws them)."""
    from jitkern.examples.grouped_gemm import grouped_gemm

    seeded(args.seed)
    shapes = [entry["config"] for entry in json.loads(manifest.read_text())["kernels"]]
    with record_launches(dry_run=True) as launches:
        for shape in shapes:
            experts, top_k, n, k = shape["experts"], shape["top_k"], shape["n"], shape["k"]
            b = torch.empty(experts, n, k, dtype=torch.bfloat16)  # never touched: nothing launches
            for tokens in range(1, shape["max_tokens"] + 1):
                a = torch.empty(tokens, k + 64 * (tokens % 2), dtype=torch.bfloat16)[:, :k]
                ids = torch.randint(0, experts, (tokens, top_k))
                for weights in (None, torch.rand(tokens, top_k)):
                    grouped_gemm(a, b, ids, weights)
    return {(kernel.name, kernel.layouts.binary_key(spec)) for kernel, spec in launches}


def target_of(manifests: list[Path]) -> str:
    targets = json.loads(manifests[0].read_text())["targets"]
    return "cuda:90" if "cuda:90" in targets else targets[0]


def warmed_keys(manifests: list[Path], target: str) -> set:
    """(kernel, binary key) of every binary a warmup of the manifests compiles for ``target``."""
    deployment, _note = resolve([str(manifest) for manifest in manifests], target)
    return set(deployment.by_target[target])


def as_on(target: str, launched: set) -> set:
    """The launches as the target's GPU makes them: a key it never launches (a plain
    variant where the GPU has PDL: the interpreter has none) as its PDL twin."""
    gpu = gpu_target(parse_target(target), False)
    found = set()
    for name, binary in launched:
        key = binary.key
        if not registry.get_kernel(name).launched_on(key, gpu):
            binary = dataclasses.replace(binary, key=dataclasses.replace(key, launch_pdl=not key.launch_pdl))
        found.add((name, binary))
    return found


def warm(manifests: list[Path], target: str, folder: Path, jobs: int) -> dict:
    """Warm ``manifests`` for ``target`` into the fresh cache ``folder``: seconds and bytes."""
    cache, report_path = folder / "cache", folder / "report.json"
    folder.mkdir(parents=True)
    environment = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "jitkern.warmup", *map(str, manifests), "--target", target,
               "--cache-dir", str(cache), "--report", str(report_path), "--no-progress", "--jobs", str(jobs)]
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not report_path.exists():
        sys.exit(f"warmup exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    report = json.loads(report_path.read_text())
    rows = report["kernels"]
    return {"compile_s": sum(row["seconds"] for row in rows), "warmup_wall_s": report["wall_seconds"],
            "process_wall_s": wall, "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "compiled": sum(row["compiled"] for row in rows), "failed": sum(row["failed"] for row in rows),
            "cache_bytes": sum(path.stat().st_size for path in cache.rglob("*") if path.is_file())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=48, help="Step5 steps with the tests' chunks")
    parser.add_argument("--long-steps", type=int, default=1, help="Step5 prefill steps of 320 tokens or more "
                        "(per layout of key and z in the mixed-layout deployment)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-warmup", action="store_true", help="count binaries only; compile nothing")
    parser.add_argument("--only", action="append", help="deployments whose name contains this (repeatable)")
    parser.add_argument("--json", help="write every figure here too")
    parser.add_argument("--workdir", help="where the caches go (default: a new temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jitkern-bench-domains-"))
    chosen = [d for d in DEPLOYMENTS if not args.only or any(part in d[0] for part in args.only)]
    schedules: dict[tuple, set] = {}
    rows = []
    for index, (name, manifests, schedule) in enumerate(chosen):
        target = target_of(manifests)
        warmed = warmed_keys(manifests, target)
        launched = None
        if schedule is not None:
            memo = (schedule, manifests[0].name if schedule == "step5" else "")
            if memo not in schedules:
                start = time.perf_counter()
                schedules[memo] = (step5_launches(STEP5_MIXED, args, mixed=True) if schedule == "step5-mixed" else
                                   step5_launches(manifests[0], args, mixed=False) if schedule == "step5" else
                                   grouped_gemm_launches(manifests[0], args) if schedule == "grouped-gemm" else
                                   dsv4_launches(args))
                print(f"{name}: schedule recorded in {time.perf_counter() - start:.1f} s", flush=True)
            launched = as_on(target, schedules[memo])
        row = {"deployment": name, "manifests": [str(m.relative_to(REPO)) for m in manifests], "target": target,
               "warmed": len(warmed)}
        if launched is not None:
            kernels = {kernel for kernel, _ in warmed}
            row.update(launched=len(launched), ratio=len(warmed) / len(launched),
                       launched_unwarmed=len(launched - warmed),
                       never_launched=sorted(kernels - {kernel for kernel, _ in launched}),
                       per_kernel={kernel: [sum(k == kernel for k, _ in warmed), sum(k == kernel for k, _ in launched)]
                                   for kernel in sorted(kernels)})
        if not args.no_warmup:
            row.update(warm(manifests, target, workdir / f"{index}", args.jobs))
            print(f"{name}: warmed in {row['warmup_wall_s']:.1f} s", flush=True)
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{args.jobs} worker(s), seed {args.seed}, Step5 schedules of {args.steps} + {args.long_steps} steps; "
          f"caches in {workdir}")
    print(table(rows))


def table(rows: list[dict]) -> str:
    header = ["deployment", "target", "warmed", "launched", "ratio", "compile s", "CPU s", "wall s", "cache MB",
              "never launched"]
    lines = [header]
    for row in rows:
        has, warmed = "launched" in row, "compile_s" in row
        never = ", ".join(row.get("never_launched", [])) or "none"
        if row.get("launched_unwarmed"):
            never += f"; {row['launched_unwarmed']} launched binaries NOT warmed"
        lines.append([row["deployment"], row["target"], str(row["warmed"]), str(row["launched"]) if has else "-",
                      f"{row['ratio']:.2f}x" if has else "-",
                      *((f"{row['compile_s']:.1f}", f"{row['cpu_s']:.1f}", f"{row['warmup_wall_s']:.1f}",
                         f"{row['cache_bytes'] / 1e6:.2f}") if warmed else ("-",) * 4),
                      never if has else "no schedule"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if i in (0, 1, len(header) - 1) else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths))).rstrip() for line in lines)


if __name__ == "__main__":
    main()
