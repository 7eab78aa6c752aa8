"""``python -m jitkern.warmup``: compile, list or check every variant of a deployment.

    python -m jitkern.warmup MANIFEST... [--target cuda:90] [--cache-dir DIR] [--jobs N]
                             [--check] [--list] [--report FILE]
    python -m jitkern.warmup schema

With a GPU here and no ``--target`` it compiles for that GPU; with ``--target`` (or with
no GPU, for the manifests' own targets) it compiles for that target with no GPU needed.
The work itself lives in importable functions (``resolve``, ``run_compile``,
``run_check``); this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitkern.compile import CACHED, COMPILED, FAILED, CompileOutcome, compile_tasks, default_jobs, is_cached, tasks_for
from jitkern.kernel import key_fields, key_name
from jitkern.manifest import LoadedManifest, ManifestError, json_schema, load_manifest
from jitkern.settings import interpreting
from jitkern.targets import local_target, parse_target, target_name


@dataclass(frozen=True)
class Plan:
    """What a run covers: the manifests, their (kernel, key) pairs, and the targets."""

    manifests: list[LoadedManifest]
    entries: list[tuple[str, Any]]
    targets: list[str]
    modules: list[str]

    def tasks(self):
        return tasks_for(self.entries, self.targets)


def resolve(manifest_paths: list[str], target: str | None) -> tuple[Plan, str]:
    """Load every manifest (all errors before any work) and choose the targets."""
    manifests = [load_manifest(path) for path in manifest_paths]
    entries = list(dict.fromkeys(
        (entry.kernel.name, key) for loaded in manifests for entry in loaded.entries for key in entry.keys
    ))
    modules = list(dict.fromkeys(module for loaded in manifests for module in loaded.manifest.modules))
    if target is not None:
        targets = [target_name(parse_target(target))]
        note = f"compiling for {targets[0]} (no GPU needed)"
    elif (here := local_target()) is not None:
        # Compiled through the same compile-only driver as a named target: the cache
        # entries are those this GPU looks up, and workers can fork without GPU state.
        targets = [target_name(here)]
        note = f"compiling for this machine's GPU ({targets[0]})"
    else:
        targets = list(dict.fromkeys(t for loaded in manifests for t in loaded.manifest.targets))
        note = f"no GPU here: compiling for the manifests' targets {', '.join(targets)} (no GPU needed)"
    return Plan(manifests, entries, targets, modules), note


def run_compile(plan: Plan, jobs: int, progress: bool = True) -> list[CompileOutcome]:
    tasks = plan.tasks()
    bar = _progress_bar(len(tasks), "compiling", progress)
    try:
        return compile_tasks(tasks, jobs, plan.modules, on_outcome=lambda outcome: bar.update(1))
    finally:
        bar.close()


def run_check(plan: Plan, progress: bool = True) -> list[str]:
    """Every task whose binary the cache lacks, described; compiles nothing."""
    from jitkern import registry

    missing = []
    tasks = plan.tasks()
    bar = _progress_bar(len(tasks), "checking", progress)
    for task in tasks:
        if not is_cached(registry.get_kernel(task.kernel_name), task.key, task.target):
            missing.append(task.describe())
        bar.update(1)
    bar.close()
    return missing


@dataclass(frozen=True)
class LoadedKernel:
    kernel: str
    binaries: int
    seconds: float


def load(manifest_paths: list[str]) -> list[LoadedKernel]:
    """Warm start: load every binary of the manifests into this process, compiling nothing.

    Each key is taken from Triton's cache onto this machine's GPU and its direct launch
    prepared, so the first request launches at full speed. A key missing from the cache
    raises ``MissingBinary`` naming it (run ``python -m jitkern.warmup`` first).
    """
    from jitkern import hooks

    plan, _note = resolve(manifest_paths, target=None)
    if interpreting():
        return []
    _start_gpu_context()  # once per process: not a cost of any one binary
    fresh: list[str] = []

    def on_compile(*, src, cache_hit: bool, **_: Any) -> None:
        if not cache_hit:
            fresh.append(getattr(src, "name", str(src)))

    from jitkern import registry

    loaded: dict[str, LoadedKernel] = {}
    with hooks.watching(on_compile=on_compile):
        for name, key in plan.entries:
            start = time.perf_counter()
            registry.get_kernel(name).compile(key)
            if fresh:
                raise MissingBinary(f"{name}[{key_name(key)}] was not in the cache and had to be compiled")
            previous = loaded.get(name, LoadedKernel(name, 0, 0.0))
            loaded[name] = LoadedKernel(name, previous.binaries + 1, previous.seconds + time.perf_counter() - start)
    return list(loaded.values())


class MissingBinary(RuntimeError):
    pass


def _start_gpu_context() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context exists from here on


def summarise(outcomes: list[CompileOutcome]) -> list[dict[str, Any]]:
    """One row per kernel: keys, compiled, cached, failed, seconds."""
    rows: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        row = rows.setdefault(outcome.task.kernel_name, {
            "kernel": outcome.task.kernel_name, "keys": 0, COMPILED: 0, CACHED: 0, FAILED: 0, "seconds": 0.0,
        })
        row["keys"] += 1
        row[outcome.status] += 1
        row["seconds"] += outcome.seconds
    return list(rows.values())


def report(outcomes: list[CompileOutcome], wall_seconds: float, plan: Plan) -> dict[str, Any]:
    """The JSON written by ``--report``: the table, each failure, and the wall time."""
    return {
        "manifests": [str(loaded.path) for loaded in plan.manifests],
        "targets": plan.targets,
        "wall_seconds": round(wall_seconds, 3),
        "kernels": [dict(row, seconds=round(row["seconds"], 3)) for row in summarise(outcomes)],
        "failures": [
            {"kernel": o.task.kernel_name, "key": key_fields(o.task.key), "target": o.task.target, "error": o.error}
            for o in outcomes if o.status == FAILED
        ],
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    header = ("kernel", "keys", COMPILED, CACHED, FAILED, "seconds")
    lines = [tuple(str(row[c]) if c != "seconds" else f"{row[c]:.2f}" for c in header) for row in rows]
    totals = Counter()
    for row in rows:
        totals.update({c: row[c] for c in header[1:]})
    lines.append(("total",) + tuple(str(totals[c]) if c != "seconds" else f"{totals[c]:.2f}" for c in header[1:]))
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]
    render = lambda cells: "  ".join(  # noqa: E731
        cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(cells, widths))
    )
    return "\n".join([render(header), render(tuple("-" * w for w in widths))] + [render(line) for line in lines])


def _progress_bar(total: int, description: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="key", disable=not enabled, file=sys.stderr, mininterval=0.5)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup",
        description="Compile every kernel variant of the manifests into Triton's cache, ahead of serving. "
        "'python -m jitkern.warmup schema' prints the manifest JSON Schema.",
    )
    parser.add_argument("manifests", nargs="+", metavar="MANIFEST", help="warmup manifest JSON files")
    parser.add_argument("--target", help="compile for this GPU target (e.g. cuda:90) on any machine, no GPU needed")
    parser.add_argument("--cache-dir", help="Triton cache directory (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes (default: cores here)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compile nothing; fail naming each key not in the cache")
    mode.add_argument("--list", action="store_true", help="print every key, one a line, and the count")
    mode.add_argument("--load", action="store_true",
                      help="warm start: load every binary from the cache onto this GPU (compiling nothing) and time it")
    parser.add_argument("--report", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _print_load(manifest_paths: list[str]) -> int:
    try:
        loaded = load(manifest_paths)
    except MissingBinary as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for row in loaded:
        print(f"{row.kernel}: {row.binaries} binaries loaded in {row.seconds * 1e3:.1f} ms "
              f"({row.seconds * 1e3 / max(row.binaries, 1):.2f} ms each)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["schema"]:
        print(json.dumps(json_schema(), indent=2))
        return 0
    args = build_parser().parse_args(argv)
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    try:
        plan, note = resolve(args.manifests, args.target)
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.list:
        for name, key in plan.entries:
            print(f"{name}[{','.join(f'{k}={v}' for k, v in key_fields(key).items())}]")
        print(f"{len(plan.entries)} keys")
        return 0
    if args.load:
        return _print_load(args.manifests)
    if interpreting():
        print("TRITON_INTERPRET=1: kernels run on the CPU interpreter; there is nothing to compile.")
        return 0
    progress = not args.no_progress
    if args.check:
        missing = run_check(plan, progress)
        total = len(plan.tasks())
        if missing:
            print(f"{len(missing)} of {total} keys missing from the cache:")
            print("\n".join(f"  {line}" for line in missing))
            return 1
        print(f"all {total} keys in the cache")
        return 0
    print(note, file=sys.stderr)
    start = time.perf_counter()
    outcomes = run_compile(plan, args.jobs, progress)
    wall = time.perf_counter() - start
    print(format_table(summarise(outcomes)))
    print(f"wall time {wall:.2f} s with {min(args.jobs, max(len(outcomes), 1))} worker(s)")
    summary = report(outcomes, wall, plan)
    if args.report:
        args.report.write_text(json.dumps(summary, indent=2) + "\n")
    for failure in summary["failures"]:
        print(f"FAILED {failure['kernel']} {json.dumps(failure['key'])}:\n  {failure['error']}", file=sys.stderr)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
