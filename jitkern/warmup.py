"""``python -m jitkern.warmup``: compile, list, check or load every variant of a deployment.

    python -m jitkern.warmup MANIFEST... [--target cuda:80,cuda:90,hip:gfx942] [--cache-dir DIR] [--jobs N]
                             [--check | --list | --load] [--keep-ir] [--remote URL] [--report FILE]
                             [--no-progress]
    python -m jitkern.warmup schema
    python -m jitkern.warmup merge-record RECORD MANIFEST
    python -m jitkern.warmup pack MANIFEST... --target T [--cache-dir DIR] --out DIST
    python -m jitkern.warmup tune MANIFEST... [--check | --import-vllm FILE | --export-vllm FILE] (``jitkern.tune``)

With a GPU here and no ``--target`` it compiles for that GPU; with ``--target`` (a
comma-separated list) for those targets, and with no GPU and no ``--target`` for each
manifest's own targets, with no GPU needed. This module parses arguments and prints; the
work is the stages' (``jitkern.manifest``, ``jitkern.build``, ``jitkern.cache``,
``jitkern.serve``).

``load``, ``LoadedKernel``, ``MissingBinary``, ``NoGPU`` and ``start_process`` are
``jitkern.serve``'s; their names here still work but are deprecated: importing this
module costs a serving process the CLI's imports (pydantic among them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from jitkern import settings
from jitkern.build.check import NoLock, checking_every_file, run_check, run_remote_check
from jitkern.build.compile import default_jobs, run_compile, tasks_of
from jitkern.build.probe import build_lock
from jitkern.build.report import binary_list, format_notes, format_table, keys_of, report, summarise
from jitkern.cache.identity import cache_directory, compiler_identity, record_identity
from jitkern.cache.lock import Lock, LockError
from jitkern.cache.remote import RedisStore, RemoteUnavailable
from jitkern.cache.share import keep_signed_records, publish, unreadable_lock, write_lock
from jitkern.cache.wheel import PackError, pack
from jitkern.manifest import Deployment, ManifestError, json_schema, merge_record, resolve
from jitkern.serve import LoadedKernel, MissingBinary, NoGPU, load, start_process  # noqa: F401 - deprecated homes
from jitkern.targets import local_target

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
  compile keeping every IR file beside the binaries (TTIR, TTGIR, LLVM IR, PTX), for debugging:
    python -m jitkern.warmup warmup_manifests/deepseek_v4-h200.json --target cuda:90 --cache-dir .triton-cache \\
        --keep-ir
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
  on the GPU, time each tuned kernel's candidates per bucket into tables shipped with the cache:
    python -m jitkern.warmup tune warmup_manifests/grouped-gemm-h200.json --cache-dir .triton-cache
  name each tuning table missing or stale (python -m jitkern.warmup tune --help: vLLM's files in and out):
    python -m jitkern.warmup tune warmup_manifests/grouped-gemm-h200.json --cache-dir .triton-cache --check
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
    parser.add_argument("--keep-ir", action="store_true",
                        help="the entries it compiles keep every IR file, for debugging (default: only what serving "
                        "loads: the binary, its metadata, the host modules)")
    parser.add_argument("--remote", metavar="URL",
                        help="redis://HOST:PORT/DB: publish every key there after warming; with --check, check it")
    parser.add_argument("--report", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _print_load(manifest_paths: list[str]) -> int:
    if not settings.interpreting() and local_target() is None:
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
    parser = argparse.ArgumentParser(
        prog="python -m jitkern.warmup merge-record",
        description="Add what a guard in record mode wrote (JITKERN_GUARD=record) to a manifest: its entries' "
                    "layout domains widened to the recorded launches, other keys as explicit keys.")
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
    argv = sys.argv[1:] if argv is None else argv
    if os.getcwd() not in sys.path:  # a manifest's modules are found here, as under python -m, by jitkern-warmup too
        sys.path.insert(0, os.getcwd())
    if argv[:1] == ["schema"]:
        print(json.dumps(json_schema(), indent=2))
        return 0
    if argv[:1] == ["merge-record"]:
        return _merge_record(argv[1:])
    if argv[:1] == ["pack"]:
        return _pack(argv[1:])
    if argv[:1] == ["tune"]:
        from jitkern.tune import main as tune  # its imports only when it runs

        return tune(argv[1:])
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
        deployment, note = resolve(args.manifests, args.target)
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(binary_list(deployment)))
        return 0
    if args.load:
        return _print_load(args.manifests)
    if settings.interpreting():
        print("TRITON_INTERPRET=1: kernels run on the CPU interpreter; there is nothing to compile.")
        return 0
    progress = not args.no_progress
    if args.check and store is not None:
        return _check_remote(deployment, store)
    if args.check:
        checked = run_check(deployment, progress)
        for line in checked.foreign:
            print(line)
        damaged_lock = unreadable_lock(cache_directory())
        if damaged_lock is not None:
            print(f"the cache's lock cannot be read, so it shows no damage: {damaged_lock} (a warmup writes it anew)")
        if not checked.ok:
            print(f"{len(checked.unusable)} of {checked.total} keys cannot be used from the cache:")
            print("\n".join(f"  {line}" for line in checked.unusable))
            return 1
        print(f"all {keys_of(checked.total)} in the cache, whole")
        return 0 if damaged_lock is None else 1
    if store is not None and not _reachable(store):
        return 1
    try:
        for target in deployment.targets:
            record_identity(cache_directory(), compiler_identity(target))
    except OSError as error:
        print(f"error: cannot write the cache directory {cache_directory()}: {error.strerror or error}; "
              "nothing was compiled", file=sys.stderr)
        return 2
    print(note, file=sys.stderr)
    start = time.perf_counter()
    outcomes = run_compile(deployment, args.jobs, progress, keep_ir=args.keep_ir)
    wall = time.perf_counter() - start
    rows = summarise(outcomes)
    print(format_table(rows))
    for line in format_notes(rows):
        print(line)
    print(f"wall time {wall:.2f} s with {min(args.jobs, max(len(outcomes), 1))} worker(s)")
    summary = report(outcomes, wall, [str(loaded.path) for loaded in deployment.manifests], deployment.targets)
    if args.report:
        args.report.write_text(json.dumps(summary, indent=2) + "\n")
    for outcome in outcomes:
        if outcome.replaced:
            print(f"replaced a damaged entry of {outcome.task.describe()}: {outcome.replaced}", file=sys.stderr)
    for failure in summary["failures"]:
        print(f"FAILED {failure['kernel']} {json.dumps(failure['key'])} for {failure['target']}:\n  {failure['error']}",
              file=sys.stderr)
    damaged_lock = unreadable_lock(cache_directory())
    locked = build_lock(tasks_of(deployment))
    path, lock_digest, held = write_lock(cache_directory(), locked.lock)
    if damaged_lock is not None:
        print(f"replaced the cache's unreadable lock ({damaged_lock}): it locks this run's keys only",
              file=sys.stderr)
    run = len(locked.lock.keys)
    print(f"lock {path} (sha256 {lock_digest}): {keys_of(run)}" + (f" of this run, {held} in all" if held != run else ""))
    if settings.current().lock_key:
        signed = keep_signed_records(cache_directory(), locked, settings.current().lock_key)
        print(f"signed with JITKERN_LOCK_KEY: {signed} entries' records written beside them")
    for line in locked.unlocked:
        print(f"not locked: {line}", file=sys.stderr)
    if store is not None and not _publish(deployment, locked.lock, store):
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


def _publish(deployment: Deployment, lock: Lock, store: RedisStore) -> bool:
    try:
        result = publish(lock, store, deployment.name, settings.current().lock_key)
    except (RemoteUnavailable, OSError, ValueError) as error:
        print(f"error: publishing to {store.url}: {error}", file=sys.stderr)
        return False
    print(f"published to {store.url}: {result.written} entries written, {result.unchanged} already there; "
          f"lock sha256 {result.lock_digest}")
    return True


def _check_remote(deployment: Deployment, store: RedisStore) -> int:
    """``--check --remote``: Redis holds every key whole and matching the lock."""
    try:
        checked = run_remote_check(deployment, store)
    except (NoLock, RemoteUnavailable, LockError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if checked.problems:
        print(f"{len(checked.problems)} of {checked.total} keys cannot be used from {store.url}:")
        print("\n".join(f"  {line}" for line in checked.problems))
        return 1
    print(f"all {keys_of(checked.total)} in {store.url}, whole and matching the lock {checked.lock_source} "
          f"(sha256 {checked.lock_digest})")
    return 0


def _pack(argv: list[str]) -> int:
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
        deployment, _note = resolve(args.manifests, args.target)
    except (ManifestError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if len(deployment.targets) > 1:  # a wheel names the one target its makers compiled for
        print(f"error: --target {args.target}: pack writes one wheel per target; run it once for each", file=sys.stderr)
        return 2
    with checking_every_file():  # packed only as a serving process would load them
        tasks = tasks_of(deployment)
        locked = build_lock(tasks, verified=True)
    if locked.unlocked:
        print(f"error: {len(locked.unlocked)} of {len(tasks)} keys cannot be packed (run python -m "
              "jitkern.warmup to compile what is missing or damaged); no wheel was written:", file=sys.stderr)
        print("\n".join(f"  {line}" for line in locked.unlocked), file=sys.stderr)
        return 1
    try:
        path = pack(locked.lock, locked.paths, deployment.name, deployment.targets[0], args.out)
    except (OSError, PackError) as error:
        print(f"error: {error}; no wheel was written", file=sys.stderr)
        return 1
    print(f"{path}: {keys_of(len(locked.lock.keys))}, {os.path.getsize(path) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the cache holds whole entries only: a rerun compiles what is left
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while exiting changes nothing
        print("interrupted: run it again to compile what is left", file=sys.stderr)
        sys.exit(130)
