"""``python -m jitkern.warmup``: compile, list or check every variant of a deployment.

    python -m jitkern.warmup MANIFEST... [--target cuda:80,cuda:90,hip:gfx942] [--cache-dir DIR] [--jobs N]
                             [--check | --list | --load] [--remote URL] [--report FILE] [--no-progress]
    python -m jitkern.warmup schema
    python -m jitkern.warmup merge-record RECORD MANIFEST
    python -m jitkern.warmup pack MANIFEST... --target T [--cache-dir DIR] --out DIST

With a GPU here and no ``--target`` it compiles for that GPU; with ``--target`` (a
comma-separated list) for those targets, and with no GPU and no ``--target`` for each
manifest's own targets, with no GPU needed.
The work itself lives in importable functions (``resolve``, ``run_compile``,
``run_check``); this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from jitkern.cache import CacheEntryUnusable, DamagedCacheEntry, own_lock_shows_damage, refusing_compiles, wheel_roots
from jitkern.compile import CompileOutcome, CompileTask, compile_tasks, default_jobs, entry_files, tasks_for
from jitkern.identity import compiler_identity, describe_identity, foreign_maker, record_identity, recorded_identities
from jitkern.kernel import key_fields, key_name
from jitkern.report import format_notes, format_table, report, summarise
from jitkern import settings
from jitkern.settings import interpreting
from jitkern.specialisation import BinaryKey
from jitkern.remote import RedisStore, RemoteUnavailable
from jitkern.share import (build_lock, check_remote, deployment_name, keep_signed_records, publish, unreadable_lock,
                           write_lock)
from jitkern.targets import local_target, parse_target, parse_targets, target_name

if TYPE_CHECKING:  # the manifests' module imports pydantic (0.1 s): a load() from its memo never needs it
    from jitkern.manifest import LoadedManifest


@dataclass(frozen=True)
class Plan:
    """What a run covers: the manifests, their (kernel, key) pairs, and for each target
    the pairs compiled for it."""

    manifests: list[LoadedManifest]
    entries: list[tuple[str, Any]]
    by_target: dict[str, list[tuple[str, Any]]]
    modules: list[str]

    @property
    def targets(self) -> list[str]:
        return list(self.by_target)

    def tasks(self) -> list[CompileTask]:
        return [task for target, entries in self.by_target.items() for task in tasks_for(entries, [target])]


def resolve(manifest_paths: list[str], target: str | None) -> tuple[Plan, str]:
    """Load every manifest (all errors before any work) and choose the targets.

    ``target``: a comma-separated list (``cuda:80,cuda:90,hip:gfx942``) for which every
    key of every manifest is compiled. Without it, this machine's GPU; with no GPU here,
    each manifest's keys for that manifest's own ``targets``.
    """
    from jitkern.manifest import load_manifest

    manifests = [load_manifest(path) for path in manifest_paths]
    entries_of = [list(dict.fromkeys((entry.kernel.name, key) for entry in loaded.entries for key in entry.keys))
                  for loaded in manifests]
    entries = list(dict.fromkeys(pair for pairs in entries_of for pair in pairs))
    modules = list(dict.fromkeys(module for loaded in manifests for module in loaded.manifest.modules))
    if target is not None:
        targets = parse_targets(target)
        by_target = {name: entries for name in targets}
        note = f"compiling for {', '.join(targets)} (no GPU needed)"
    elif (here := local_target()) is not None:
        # Compiled through the same compile-only driver as a named target: the cache
        # entries are those this GPU looks up, and workers can fork without GPU state.
        by_target = {target_name(here): entries}
        note = f"compiling for this machine's GPU ({target_name(here)})"
    else:
        by_target = {}
        for loaded, pairs in zip(manifests, entries_of):
            for name in loaded.manifest.targets:
                name = target_name(parse_target(name))
                by_target[name] = list(dict.fromkeys(by_target.get(name, []) + pairs))
        note = f"no GPU here: compiling each manifest for its targets ({', '.join(by_target)}), no GPU needed"
    return Plan(manifests, entries, by_target, modules), note


def run_compile(plan: Plan, jobs: int, progress: bool = True) -> list[CompileOutcome]:
    tasks = plan.tasks()
    bar = _progress_bar(len(tasks), "compiling", progress)
    try:
        return compile_tasks(tasks, jobs, plan.modules, on_outcome=lambda outcome: bar.update(1))
    finally:
        bar.close()


@dataclass(frozen=True)
class CheckResult:
    """What ``--check`` found: each key the cache cannot serve, and who made the cache."""

    total: int
    unusable: list[str]  # "kernel[key] for target: not in the cache" (or what is damaged)
    foreign: list[str]  # one line per target whose cache another compiler made

    @property
    def ok(self) -> bool:
        return not self.unusable


def run_check(plan: Plan, progress: bool = True) -> CheckResult:
    """Check that every file each key loads (its binary's entry, its host modules) is whole,
    matches the trusted lock, and the cache's own lock where it lists it; compiles nothing."""
    from jitkern import registry

    tasks = plan.tasks()
    unusable: dict[str, list[str]] = {target: [] for target in plan.targets}
    bar = _progress_bar(len(tasks), "checking", progress)
    with _checking_every_file():
        for task in tasks:
            try:
                entry_files(registry.get_kernel(task.kernel_name), task.key, task.target)
            except LookupError as error:
                unusable[task.target].append(f"{task.describe()}: {error}")
            bar.update(1)
    bar.close()
    foreign = [line for target, entries in plan.by_target.items()
               if (line := foreign_cache_line(target, len(unusable[target]), len(entries))) is not None]
    return CheckResult(len(tasks), [line for lines in unusable.values() for line in lines], foreign)


@contextlib.contextmanager
def _checking_every_file() -> Iterator[None]:
    """Files checked as a serving process checks them, and against the cache's own lock
    (``own_lock_shows_damage``); each problem is printed once, by key, not warned too."""
    with own_lock_shows_damage(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedCacheEntry)
        yield


def foreign_cache_line(target: str, recompiles: int, total: int) -> str | None:
    """One line when this cache, or an installed cache wheel, was made for ``target`` by
    another compiler than ours, or a wheel for another target only."""
    identity = compiler_identity(target)
    maker = foreign_maker(cache_directory(), identity)
    if maker is not None:
        return (f"this cache was made by {describe_identity(maker)}; this process is {describe_identity(identity)}: "
                f"{recompiles} of {total} keys would recompile")
    for root in wheel_roots():
        makers = recorded_identities(root) or []
        wheel = os.path.basename(os.path.dirname(root))
        maker = foreign_maker(root, identity)
        if maker is not None:
            return (f"the cache wheel {wheel} was made by {describe_identity(maker)}; this process is "
                    f"{describe_identity(identity)}: {recompiles} of {total} keys would recompile")
        if makers and not any(m.get("target") == target for m in makers):
            return (f"the cache wheel {wheel} was made for {', '.join(sorted({str(m.get('target')) for m in makers}))}; "
                    f"this process serves {target}: {recompiles} of {total} keys would recompile")
    return None


def cache_directory() -> str:
    import triton

    return triton.knobs.cache.dir


@dataclass(frozen=True)
class LoadedKernel:
    kernel: str
    binaries: int
    seconds: float


class MissingBinary(RuntimeError):
    """``load`` found keys that the cache lacks or holds damaged; it compiled none of them."""


class NoGPU(RuntimeError):
    """``load`` was called on a machine with no GPU, where there is nothing to load onto."""


def load(manifest_paths: list[str]) -> list[LoadedKernel]:
    """Warm start: load every binary of the manifests into this process, compiling nothing.

    Each key is taken from Triton's cache (which may hold binaries of other targets too:
    only this GPU's target is looked up) onto this machine's GPU and its direct launch
    prepared, so the first request launches at full speed. Keys the cache lacks, or holds
    damaged, are not compiled: ``MissingBinary`` names each (after the others loaded). A
    cache made by another compiler build is reported in one line, with the count. Each
    kernel's launch is then rehearsed, launching nothing (``jitkern.rehearsal``). On a
    machine with no GPU it raises ``NoGPU``.
    """
    with _collector_paused():
        from jitkern import registry
        from jitkern.rehearsal import rehearse

        loaded = _load(manifest_paths)
        for row in loaded:
            rehearse(registry.get_kernel(row.kernel))
    return loaded


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic collector paused while ``load()`` builds thousands of objects that
    live as long as the process: otherwise they can set off a full collection, which
    scans every object torch and the engine made (0.09 s on our CPU machine). At the end,
    one collection of the young generations (ours) moves them out of the way."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)
        gc.enable()


def _load(manifest_paths: list[str]) -> list[LoadedKernel]:
    from jitkern import hooks, load_memo, registry

    if interpreting():
        resolve(manifest_paths, target=None)  # the manifests' errors, as below
        return []
    if local_target() is None:  # else Triton's "0 active drivers" traceback, from deep inside
        raise NoGPU("load() loads the binaries onto this machine's GPU, and there is none here "
                    "(python -m jitkern.warmup MANIFEST --check checks a cache with no GPU)")
    start_process()  # once per process: not a cost of any one binary
    fingerprint = load_memo.deployment_fingerprint(manifest_paths) if settings.current().load_memo else None
    memo = load_memo.read_memo(fingerprint) if fingerprint else None
    remembered = load_memo.load_remembered(memo) if memo else None
    if remembered is not None:
        for name in remembered:
            registry.get_kernel(name).prepare_launches()
        return [LoadedKernel(name, binaries, seconds) for name, (binaries, seconds) in remembered.items()]
    plan, _note = resolve(manifest_paths, target=None)
    here, entries = next(iter(plan.by_target.items()))  # this GPU's target (with none: the manifests' first)
    fresh: list[str] = []

    def on_compile(*, src, cache_hit: bool, **_: Any) -> None:
        if not cache_hit:  # only with a cache manager of the user's, which cannot refuse
            fresh.append(getattr(src, "name", str(src)))

    loaded: dict[str, LoadedKernel] = {}
    unusable: list[str] = []
    binaries: list[tuple[str, BinaryKey, Any]] = []  # what the memo records
    with hooks.watching(on_compile=on_compile), refusing_compiles():
        for name, key in entries:
            start = time.perf_counter()
            try:
                binaries.append((name, key if isinstance(key, BinaryKey) else BinaryKey(key),
                                 registry.get_kernel(name).compile(key)))
            except CacheEntryUnusable as error:
                unusable.append(f"{name}[{key_name(key)}]: {error.problem}")
                continue
            if fresh:
                unusable.append(f"{name}[{key_name(key)}]: not in the cache (it was compiled)")
                fresh.clear()
            previous = loaded.get(name, LoadedKernel(name, 0, 0.0))
            loaded[name] = LoadedKernel(name, previous.binaries + 1, previous.seconds + time.perf_counter() - start)
    for name in loaded:
        kernel = registry.get_kernel(name)
        if hasattr(kernel, "prepare_launches"):
            kernel.prepare_launches()
    if unusable:
        foreign = foreign_cache_line(here, len(unusable), len(entries))
        elsewhere = [str(manifest.path) for manifest in plan.manifests
                     if here not in {target_name(parse_target(t)) for t in manifest.manifest.targets}]
        hint = (f"; {', '.join(elsewhere)} do not list {here} among their targets: build with --target {here}"
                if elsewhere else "")
        raise MissingBinary(foreign or (
            f"{len(unusable)} of {len(entries)} keys are not usable in the cache {cache_directory()} for {here} "
            f"(run python -m jitkern.warmup on the manifests{hint}):\n  " + "\n  ".join(unusable)))
    if fingerprint:
        load_memo.write_memo(fingerprint, plan.modules, {name: registry.get_kernel(name) for name in loaded}, binaries)
    return list(loaded.values())


_process_started: list[float] = []


def start_process() -> float:
    """Pay a process's one-time costs of loading binaries; returns the seconds they took
    (0 after the first call): the GPU's context and Triton's hash of its own build
    (``triton_key()``, remembered per build by ``jitkern.triton_build``), which Triton
    otherwise pays at the first binary it looks up."""
    if _process_started:
        return 0.0
    import torch

    start = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context exists from here on
    from triton.runtime.cache import triton_key

    triton_key()
    _process_started.append(time.perf_counter() - start)
    return _process_started[0]


def _progress_bar(total: int, description: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="key", disable=not enabled, file=sys.stderr, mininterval=0.5)


# Shown after the options by --help: the main uses, for a reader who has not read the README.
EXAMPLES = """\
examples:
  compile two deployments for an H200 on any machine (no GPU needed):
    python -m jitkern.warmup warmup_manifests/step5-bs256-mtp3.json warmup_manifests/deepseek_v4-h200.json \\
        --target cuda:90 --cache-dir .triton-cache
  compile for a mixed fleet (H200, A100, MI300X) into one cache:
    python -m jitkern.warmup warmup_manifests/*.json --target cuda:90,cuda:80,hip:gfx942 --cache-dir .triton-cache
  ... and publish it to a shared Redis (pip install 'jitkern[redis]'):
    python -m jitkern.warmup warmup_manifests/*.json --target cuda:90 --cache-dir .triton-cache \\
        --remote redis://127.0.0.1:6379/0
  check that a cache holds every key, whole (exit 1 names each missing or damaged key):
    python -m jitkern.warmup warmup_manifests/*.json --target cuda:90 --cache-dir .triton-cache --check
  print every key of a manifest, one a line:
    python -m jitkern.warmup warmup_manifests/deepseek_v4-h200.json --list
  warm start on the serving GPU: load every binary from the cache, compile nothing:
    TRITON_CACHE_DIR=/srv/triton-cache python -m jitkern.warmup warmup_manifests/deepseek_v4-h200.json --load
  add the keys a guard recorded while serving (JITKERN_GUARD=record) to a manifest:
    python -m jitkern.warmup merge-record guard-record.jsonl warmup_manifests/deepseek_v4-h200.json
  pack a deployment's cache as a wheel, for pip install on the serving machines:
    python -m jitkern.warmup pack warmup_manifests/deepseek_v4-h200.json --target cuda:90 \\
        --cache-dir .triton-cache --out dist
  print the manifest JSON Schema:
    python -m jitkern.warmup schema
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup",
        description="Compile every kernel variant of the manifests into Triton's cache, ahead of serving.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the examples' lines as written
    )
    parser.add_argument("manifests", nargs="+", metavar="MANIFEST", help="warmup manifest JSON files")
    parser.add_argument("--target", help="compile for these GPU targets, comma-separated (e.g. cuda:80,cuda:90,hip:gfx942), "
                        "on any machine, no GPU needed; default: this GPU's, else each manifest's targets")
    parser.add_argument("--cache-dir", help="Triton cache directory (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes (default: cores here)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compile nothing; fail naming each key not in the cache")
    mode.add_argument("--list", action="store_true", help="print every key, one a line, and the count")
    mode.add_argument("--load", action="store_true",
                      help="warm start: load every binary from the cache onto this GPU (compiling nothing) and time it")
    parser.add_argument("--remote", metavar="URL",
                        help="redis://HOST:PORT/DB: publish every key there after warming; with --check, check it")
    parser.add_argument("--report", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _print_load(manifest_paths: list[str]) -> int:
    if not interpreting() and local_target() is None:
        print("error: --load loads the binaries onto this machine's GPU, and there is none here "
              "(--check checks a cache with no GPU)", file=sys.stderr)
        return 1
    try:
        print(f"process start (GPU context, Triton's hash of its own build), once: {start_process() * 1e3:.1f} ms")
        loaded = load(manifest_paths)
    except MissingBinary as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for row in loaded:
        print(f"{row.kernel}: {row.binaries} binaries loaded in {row.seconds * 1e3:.1f} ms "
              f"({row.seconds * 1e3 / max(row.binaries, 1):.2f} ms each)")
    return 0


def _merge_record(argv: list[str]) -> int:
    from jitkern.guard import merge_record
    from jitkern.manifest import ManifestError

    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup merge-record",
        description="Add the keys a guard in record mode wrote (JITKERN_GUARD=record) to a manifest.")
    parser.add_argument("record", help="the record file (JITKERN_GUARD_RECORD, JSON lines)")
    parser.add_argument("manifest", help="the manifest to extend (rewritten in place)")
    args = parser.parse_args(argv)
    try:
        added = merge_record(args.record, args.manifest)
    except (ManifestError, OSError, ValueError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{added} key(s) added to {args.manifest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from jitkern.manifest import ManifestError, json_schema

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["schema"]:
        print(json.dumps(json_schema(), indent=2))
        return 0
    if argv[:1] == ["merge-record"]:
        return _merge_record(argv[1:])
    if argv[:1] == ["pack"]:
        return _pack(argv[1:])
    args = build_parser().parse_args(argv)
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    problem = _report_problem(args.report) if args.report else None
    if problem is not None:
        print(f"error: --report {args.report}: {problem}; nothing was compiled", file=sys.stderr)
        return 2
    try:  # a malformed URL is a usage error, found before any work
        store = RedisStore(args.remote, settings.current().remote_timeout) if args.remote else None
    except ValueError as error:
        print(f"error: --remote: {error}", file=sys.stderr)
        return 2
    if args.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    try:
        plan, note = resolve(args.manifests, args.target)
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.list:
        for target, entries in plan.by_target.items():
            for name, key in entries:
                print(f"{name}[{','.join(f'{k}={v}' for k, v in key_fields(key).items())}] for {target}")
        counts = {target: len(entries) for target, entries in plan.by_target.items()}
        total = sum(counts.values())
        print(f"{total} keys for {plan.targets[0]}" if len(counts) == 1 else
              f"{total} keys: " + ", ".join(f"{count} for {target}" for target, count in counts.items()))
        return 0
    if args.load:
        return _print_load(args.manifests)
    if interpreting():
        print("TRITON_INTERPRET=1: kernels run on the CPU interpreter; there is nothing to compile.")
        return 0
    progress = not args.no_progress
    if args.check and store is not None:
        return _check_remote(plan, store)
    if args.check:
        checked = run_check(plan, progress)
        for line in checked.foreign:
            print(line)
        damaged_lock = unreadable_lock(cache_directory())
        if damaged_lock is not None:
            print(f"the cache's lock cannot be read, so it shows no damage: {damaged_lock} (a warmup writes it anew)")
        if not checked.ok:
            print(f"{len(checked.unusable)} of {checked.total} keys cannot be used from the cache:")
            print("\n".join(f"  {line}" for line in checked.unusable))
            return 1
        print(f"all {checked.total} keys in the cache, whole")
        return 0 if damaged_lock is None else 1
    if store is not None and not _reachable(store):
        return 1
    try:
        for target in plan.targets:
            record_identity(cache_directory(), compiler_identity(target))
    except OSError as error:
        print(f"error: cannot write the cache directory {cache_directory()}: {error.strerror or error}; "
              "nothing was compiled", file=sys.stderr)
        return 2
    print(note, file=sys.stderr)
    start = time.perf_counter()
    outcomes = run_compile(plan, args.jobs, progress)
    wall = time.perf_counter() - start
    rows = summarise(outcomes)
    print(format_table(rows))
    for line in format_notes(rows):
        print(line)
    print(f"wall time {wall:.2f} s with {min(args.jobs, max(len(outcomes), 1))} worker(s)")
    summary = report(outcomes, wall, [str(loaded.path) for loaded in plan.manifests], plan.targets)
    if args.report:
        args.report.write_text(json.dumps(summary, indent=2) + "\n")
    for outcome in outcomes:
        if outcome.replaced:
            print(f"replaced a damaged entry of {outcome.task.describe()}: {outcome.replaced}", file=sys.stderr)
    for failure in summary["failures"]:
        print(f"FAILED {failure['kernel']} {json.dumps(failure['key'])} for {failure['target']}:\n  {failure['error']}",
              file=sys.stderr)
    damaged_lock = unreadable_lock(cache_directory())
    locked = build_lock(plan.tasks())
    path, lock_digest = write_lock(cache_directory(), locked.lock)
    if damaged_lock is not None:
        print(f"replaced the cache's unreadable lock ({damaged_lock}): it locks this run's keys only",
              file=sys.stderr)
    print(f"lock {path} (sha256 {lock_digest}): {len(locked.lock.keys)} keys")
    if settings.current().lock_key:
        signed = keep_signed_records(cache_directory(), locked, settings.current().lock_key)
        print(f"signed with JITKERN_LOCK_KEY: {signed} entries' records written beside them")
    for line in locked.unlocked:
        print(f"not locked: {line}", file=sys.stderr)
    if store is not None and not _publish(plan, locked.lock, store):
        return 1
    return 1 if summary["failures"] else 0


def _report_problem(path: Path) -> str | None:
    """Why the summary cannot be written to ``path``: found before compiling, not after."""
    if path.is_dir():
        return "is a directory"
    if not path.parent.is_dir():
        return f"no directory {path.parent}"
    if not os.access(path.parent, os.W_OK):
        return f"the directory {path.parent} is not writable"
    return None


def _reachable(store: RedisStore) -> bool:
    """Ping Redis before compiling: a server that is down is a failed run, said at once."""
    try:
        store.ping()
    except RemoteUnavailable as error:
        print(f"error: {error}; nothing was compiled", file=sys.stderr)
        return False
    return True


def _publish(plan: Plan, lock, store: RedisStore) -> bool:
    from jitkern.settings import current

    try:
        result = publish(lock, store, plan_deployment(plan), current().lock_key)
    except (RemoteUnavailable, OSError, ValueError) as error:
        print(f"error: publishing to {store.url}: {error}", file=sys.stderr)
        return False
    print(f"published to {store.url}: {result.written} entries written, {result.unchanged} already there; "
          f"lock sha256 {result.lock_digest}")
    return True


def plan_deployment(plan: Plan) -> str:
    return deployment_name([loaded.manifest.name for loaded in plan.manifests], plan.targets)


def _check_remote(plan: Plan, store: RedisStore) -> int:
    """``--check --remote``: Redis holds every key whole and matching the lock: the one
    pinned by JITKERN_LOCK_DIGEST, else the cache directory's, else the one Redis names
    for the deployment (which shows damage, not tampering)."""
    from jitkern.lock import LOCK_FILE, Lock, LockError, digest
    from jitkern.settings import current

    url = store.url
    pinned = current().lock_digest
    local = os.path.join(cache_directory(), LOCK_FILE)
    try:
        wanted = pinned or store.deployment_lock_digest(plan_deployment(plan))
        if os.path.exists(local) and (not pinned or digest(Path(local).read_bytes()) == pinned):
            source, data = local, Path(local).read_bytes()
        else:
            source, data = f"{url} lock {wanted}", store.get_lock(wanted) if wanted else None
        if data is None or (pinned and digest(data) != pinned):
            print(f"error: no lock {'with sha256 ' + pinned if pinned else 'for ' + plan_deployment(plan)} "
                  f"in {local} or {url}", file=sys.stderr)
            return 1
        lock = Lock.from_bytes(data, source)
        problems = check_remote([task.describe() for task in plan.tasks()], lock, store)
    except (RemoteUnavailable, LockError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if problems:
        print(f"{len(problems)} of {len(plan.tasks())} keys cannot be used from {url}:")
        print("\n".join(f"  {line}" for line in problems))
        return 1
    print(f"all {len(plan.tasks())} keys in {url}, whole and matching the lock {source} (sha256 {digest(data)})")
    return 0


def _pack(argv: list[str]) -> int:
    from jitkern.manifest import ManifestError
    from jitkern.wheel import PackError, pack

    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup pack",
        description="Write one wheel holding a deployment's warmed cache for one target, with its lock.")
    parser.add_argument("manifests", nargs="+", metavar="MANIFEST")
    parser.add_argument("--target", required=True, help="the GPU target, e.g. cuda:90")
    parser.add_argument("--cache-dir", help="the warmed cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    parser.add_argument("--out", required=True, metavar="DIST", help="folder to write the wheel into")
    args = parser.parse_args(argv)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        print(f"error: --out {args.out}: not a directory", file=sys.stderr)
        return 2
    if args.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    try:
        plan, _note = resolve(args.manifests, args.target)
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if len(plan.targets) > 1:  # a wheel names the one target its makers compiled for
        print(f"error: --target {args.target}: pack writes one wheel per target; run it once for each", file=sys.stderr)
        return 2
    with _checking_every_file():  # packed only as a serving process would load them
        locked = build_lock(plan.tasks(), verified=True)
    if locked.unlocked:
        print(f"error: {len(locked.unlocked)} of {len(plan.tasks())} keys cannot be packed (run python -m "
              "jitkern.warmup to compile what is missing or damaged); no wheel was written:", file=sys.stderr)
        print("\n".join(f"  {line}" for line in locked.unlocked), file=sys.stderr)
        return 1
    try:
        path = pack(locked.lock, locked.paths, plan_deployment(plan), plan.targets[0], args.out)
    except (OSError, PackError) as error:
        print(f"error: {error}; no wheel was written", file=sys.stderr)
        return 1
    print(f"{path}: {len(locked.lock.keys)} keys, {os.path.getsize(path) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the cache holds whole entries only: a rerun compiles what is left
        print("interrupted: run it again to compile what is left", file=sys.stderr)
        sys.exit(130)
