"""Where a key's files are in the cache, found without compiling; the lock built from them.

``entry_location`` runs a key's warmup through Triton's own binding and specialisation
and stops it in the cache-miss hook, where Triton hands over what it would compile; the
cache key follows from that exactly as ``triton.compile`` computes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator

from jitkern import hooks
from jitkern.build.compile import one_error
from jitkern.build.host_modules import cuda_utils_source, host_module_entry, launcher_source
from jitkern.cache.entries import MISSING, read_bytes
from jitkern.cache.lock import Lock, digest
from jitkern.cache.manager import lookup_entry, lookup_file
from jitkern.cache.share import LockResult
from jitkern.cache.tables import TABLE_FILE, stored_tables, table_name
from jitkern.kernel import registry
from jitkern.kernel.base import JitKernel
from jitkern.launch import c_module
from jitkern.targets import compile_only, parse_target


class _Probe(Exception):
    """Raised from Triton's cache-miss hook to stop it after we learned the cache key."""

    def __init__(self, location: "EntryLocation"):
        self.location = location


@dataclass(frozen=True)
class EntryLocation:
    """Where Triton's cache keeps a key's binary: its folder (Triton's cache key) and
    group name, and the source Triton would compile (which keys its host launcher)."""

    folder: str
    group_name: str
    source: Any


def entry_location(kernel: JitKernel, key: Any, target: str) -> EntryLocation | None:
    """Where ``key``'s binary for ``target`` lives in Triton's cache; compiles nothing.

    Runs the kernel's warmup through Triton's own binding and specialisation, and stops
    it in the cache-miss hook: there Triton hands over the signature, constants and
    options it would compile with, from which the on-disk cache key follows exactly as
    ``triton.compile`` computes it. None when nothing would compile (the interpreter).
    Raises ``LookupError`` (one line) for a key that fails before that lookup (Triton's
    check of ``num_warps``, a launcher's ``TypeError``): it has no entry, and the other
    keys' checks and lock go on without it.
    """
    with compile_only(parse_target(target)), hooks.watching(on_cache_miss=_probe_cache), \
            _fresh_in_process_cache(kernel):
        try:
            kernel.compile(key)
        except _Probe as probe:
            return probe.location
        except Exception as error:
            raise LookupError(f"cannot be compiled: {one_error(error).splitlines()[0]}") from None
    return None


def entry_files(kernel: JitKernel, key: Any, target: str, verified: bool = True) -> dict[str, dict[str, str]]:
    """Every cache file that loading ``key`` reads, by entry folder: the binary's entry
    and its host C modules (launcher, ``cuda_utils``, the direct launch's), each checked
    as a serving process checks it: whole and (``verified``) matching the trusted lock.
    ``verified=False`` is for the warmup that locks its own cache. Raises ``LookupError``
    naming the file and what is wrong with it."""
    location = entry_location(kernel, key, target)
    if location is None:
        return {}
    state = lookup_entry(location.folder, location.group_name, verified)
    if not state.usable:
        raise LookupError(state.problem)
    files = {location.folder: dict(state.files)}
    with open(state.files[location.group_name]) as file:
        metadata = json.load(file)
    if metadata.get("target", {}).get("backend") == "cuda":
        for c_source, name in ((launcher_source(location.source, metadata.get("tensordesc_meta")), "__triton_launcher"),
                               (cuda_utils_source(), "cuda_utils"), (c_module.SOURCE, c_module.NAME)):
            folder, filename = host_module_entry(c_source, name)
            path, problem = lookup_file(folder, filename, verified)
            if path is None:
                raise LookupError(f"its host module {filename} ({folder}) is not in the cache" if problem == MISSING
                                  else f"its host module in {folder}: {problem}")
            files[folder] = {filename: path}
    return files


def _probe_cache(*, fn, compile, **_: Any) -> None:
    raise _Probe(_entry_location(fn.jit_function, compile))


def _entry_location(jit_function, compile: dict) -> EntryLocation:
    """Mirror ``triton.compile``'s cache lookup for what the hook says it would build."""
    from triton.compiler.compiler import ASTSource, get_cache_invalidating_env_vars, make_backend
    from triton.runtime.cache import _base32, get_cache_key
    from triton.runtime.driver import driver

    backend = make_backend(driver.active.get_current_target())
    options = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in json.loads(compile["specialization_data"])["options"].items()
    }
    src = ASTSource(jit_function, compile["signature"], compile["constants"], compile["configs"][0])
    options = backend.parse_options(dict(options, **src.parse_options()))
    cache_key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    folder = _base32(hashlib.sha256(cache_key.encode("utf-8")).hexdigest())
    return EntryLocation(folder, f"{src.name[:150]}.json", src)


@contextlib.contextmanager
def _fresh_in_process_cache(kernel: JitKernel) -> Iterator[None]:
    """Hide the kernel's in-process binaries so the probe always reaches the cache."""
    jit_function = getattr(kernel, "kernel", None)
    if jit_function is None or not hasattr(jit_function, "device_caches"):
        yield
        return
    saved = jit_function.device_caches
    jit_function.device_caches = defaultdict(jit_function.create_binder)
    try:
        yield
    finally:
        jit_function.device_caches = saved


def build_lock(tasks: list[Any], verified: bool = False) -> LockResult:
    """The lock of ``tasks`` (``CompileTask``) from the caches as they are now: of every
    file each key loads, whole and, when ``verified``, matching the trusted lock
    (``entry_files``); the warmup locking its own cache checks them whole only. The
    tuning tables of their kernels and targets, for every GPU, are locked as entries too."""
    keys: dict[str, list[str]] = {}
    locked: dict[str, dict[str, str]] = {}
    unlocked = []
    for task in tasks:
        try:
            files = entry_files(registry.get_kernel(task.kernel_name), task.key, task.target, verified)
        except LookupError as error:
            unlocked.append(f"{task.describe()}: {error}")
            continue
        keys[task.describe()] = sorted(files)
        locked.update((folder, dict(sorted(paths.items()))) for folder, paths in files.items())
    for kernel, target in dict.fromkeys((task.kernel_name, task.target) for task in tasks):
        for folder in stored_tables(kernel, target):
            path, problem = lookup_file(folder, TABLE_FILE, verified)
            if path is None:
                unlocked.append(f"{table_name(kernel, target, folder)}: {problem}")
                continue
            keys[table_name(kernel, target, folder)] = [folder]
            locked[folder] = {TABLE_FILE: path}
    entries = {folder: {name: digest(read_bytes(path)) for name, path in paths.items()}
               for folder, paths in sorted(locked.items())}
    return LockResult(Lock(keys, entries), unlocked, locked)
