"""Triton's cache manager for a deployment's cache: whole, trusted entries only.

A cache is built on one machine, copied, mounted read-only and shared by processes.
jitkern installs ``JitkernCacheManager`` as Triton's cache manager (unless the user
chose another with ``TRITON_CACHE_MANAGER``). Compared with Triton's own it

- hands out only **whole** entries (``jitkern.cache.entries``) that match the trusted
  lock (``jitkern.cache.trust``): a damaged entry reads as absent, so Triton compiles it
  again and replaces it (and the guard, in error mode, refuses instead);
- reads the cache directory, then installed cache wheels, then Redis
  (``JITKERN_REMOTE_CACHE``), writing what it takes from Redis into the cache directory;
- falls back to a private directory for writes when the cache is read-only;
- within ``binaries_only()`` (a warmup's compiles), writes an entry's binary and
  metadata only, none of its IR.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import threading
import warnings
from typing import Iterator

import triton
from triton.runtime.cache import FileCacheManager

from jitkern import settings
from jitkern.cache.entries import MISSING, CacheEntryUnusable, EntryState, file_problem, flag_on, inspect_entry
from jitkern.cache.entries import read_bytes
from jitkern.cache.lock import LOCK_FILE, Lock, LockError, mismatch
from jitkern.cache.remote import RECORD_FILE, RemoteUnavailable
from jitkern.cache.roots import read_roots
from jitkern.cache.trust import RemoteCacheUnavailable, lock_problem, read_through
from jitkern.cache.trust import remote_store, warn_unusable

_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


_refusing = threading.local()


def refusing_compiles() -> contextlib.AbstractContextManager[None]:
    """Within the block a kernel entry the cache lacks (or holds damaged) raises
    ``CacheEntryUnusable`` where Triton would have compiled it."""
    return flag_on(_refusing)


class JitkernCacheManager(FileCacheManager):
    """Triton's file cache, handing out whole, verified entries only, from the cache
    directory, installed cache wheels, then Redis (``JITKERN_REMOTE_CACHE``); writable
    when read-only."""

    def __init__(self, key, override=False, dump=False):
        try:
            super().__init__(key, override, dump)
        except OSError as error:
            if override or dump or error.errno not in _UNWRITABLE:
                raise
            self.key = key  # a read-only cache without this entry: reads find nothing
            self.cache_dir = os.path.join(triton.knobs.cache.dir, key)
            self.lock_path = os.path.join(self.cache_dir, "lock")
        self._private_dir: str | None = None

    def get_file(self, filename: str) -> str | None:
        path, _problem = lookup_file(self.key, filename)
        if path is not None:
            return path
        if self._private_dir and os.path.exists(os.path.join(self._private_dir, filename)):
            return os.path.join(self._private_dir, filename)
        entry, _refused = read_through(self.key)
        if entry is not None and filename in entry.files:
            self.put(entry.record_bytes, RECORD_FILE)
            return self.put(entry.files[filename], filename)
        return None

    def get_group(self, filename: str) -> dict[str, str] | None:
        state = lookup_entry(self.key, filename)
        if state.usable:
            return state.files
        if self._private_dir:
            private = inspect_entry(self._private_dir, filename)
            if private.usable:
                return private.files
        entry, refused = read_through(self.key)
        if refused is not None:
            state = EntryState(None, refused)
        if entry is not None:  # written as Redis holds it, IR files or not
            self._write(entry.record_bytes, RECORD_FILE)  # its signature, for processes that trust the HMAC key
            paths = {name: self._write(data, name) for name, data in sorted(entry.files.items())}
            FileCacheManager.put_group(self, filename, paths)  # written last: the entry is whole from here on
            written = inspect_entry(os.path.dirname(paths[filename]), filename) if filename in paths else state
            if written.usable:
                return written.files
        if getattr(_refusing, "on", False):
            raise CacheEntryUnusable(state.problem)
        return None

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        if getattr(_scratch, "dir", None) is not None:
            group = {name: path for name, path in group.items() if not name.endswith(_SOURCE_SUFFIX)}
        path = super().put_group(filename, group)
        _publish_serve_time_compile(self.key, filename, group)
        return path

    def put(self, data, filename, binary=True) -> str:
        scratch = getattr(_scratch, "dir", None)
        if scratch is not None and filename.endswith(_SOURCE_SUFFIX):
            return _manager_at(self.key, os.path.join(scratch, self.key)).put(data, filename, binary)
        return self._write(data, filename, binary)

    def _write(self, data, filename, binary=True) -> str:
        if self._private_dir is None:
            try:
                return super().put(data, filename, binary)
            except OSError as error:
                if error.errno not in _UNWRITABLE:
                    raise
                self._private_dir = os.path.join(_private_root(self.cache_dir, error), self.key)
        return _manager_at(self.key, self._private_dir).put(data, filename, binary)


def _manager_at(key: str, folder: str) -> FileCacheManager:
    """Triton's own manager writing entry ``key``'s files into ``folder``."""
    os.makedirs(folder, exist_ok=True)
    manager = FileCacheManager.__new__(FileCacheManager)
    manager.key, manager.cache_dir, manager.lock_path = key, folder, os.path.join(folder, "lock")
    return manager


_SOURCE_SUFFIX = ".source"
"""The TTIR Triton starts a compile from (``<kernel>.source``)."""
_BINARY_ONLY_VARIABLE = "TRITON_STORE_BINARY_ONLY"
_scratch = threading.local()


@contextlib.contextmanager
def binaries_only(on: bool = True) -> Iterator[None]:
    """Within the block, an entry Triton compiles holds what a serving process loads, its
    binary and metadata, and none of the IR (``on=False``: every IR file, for debugging).

    A serving process reads the binary and metadata alone; the IR is most of an entry's
    bytes, on disk, in a wheel and in Redis. Triton's ``store_binary_only`` knob (set for
    the block, then as it was, with its variable) leaves out the IR of each compile stage.
    The TTIR Triton starts from (``_SOURCE_SUFFIX``), which it writes whatever the knob
    says, goes to a scratch folder removed at the end of the block: outside the entry and
    its group, where Triton's ``CompiledKernel`` still reads it. The knob is not one of
    Triton's cache-invalidating settings: an entry of either kind has the same cache key,
    and every process finds it whatever it sets.
    """
    compilation, variable = triton.knobs.compilation, os.environ.get(_BINARY_ONLY_VARIABLE)
    knob, previous = vars(compilation).get("store_binary_only"), getattr(_scratch, "dir", None)
    compilation.store_binary_only = on
    try:
        with tempfile.TemporaryDirectory(prefix="jitkern-ir-") if on else contextlib.nullcontext() as scratch:
            _scratch.dir = scratch
            yield
    finally:
        _scratch.dir = previous
        if knob is None:
            del compilation.store_binary_only
        else:
            compilation.store_binary_only = knob
        if variable is None:
            os.environ.pop(_BINARY_ONLY_VARIABLE, None)
        else:
            os.environ[_BINARY_ONLY_VARIABLE] = variable


def lookup_entry(folder: str, group_name: str, verified: bool = True) -> EntryState:
    """The entry ``folder`` (a Triton cache key) from the cache directory or an installed
    cache wheel: whole and matching the trusted lock, or why it cannot be used (the
    first problem other than absence). Refusals are warned, one line each.
    ``verified=False`` only checks it whole: for the warmup that locks its own cache."""
    found = EntryState(None, MISSING)
    for root in read_roots():
        state = inspect_entry(os.path.join(root, folder), group_name)
        if state.usable:
            problem = _files_problem(root, folder, state.files, verified)
            if problem is None:
                return state
            state = EntryState(None, problem)
        if state.problem != MISSING:
            warn_unusable(root, folder, group_name, state.problem)
            found = found if found.problem != MISSING else state
    return found


def lookup_file(folder: str, filename: str, verified: bool = True) -> tuple[str | None, str | None]:
    """The single file ``filename`` of entry ``folder`` (a host C module) as ``lookup_entry``
    finds an entry: its path, whole and (``verified``) matching the trusted lock, or None
    and why not (the first problem other than absence)."""
    problem = MISSING
    for root in read_roots():
        path = os.path.join(root, folder, filename)
        if not os.path.exists(path):
            continue
        found = file_problem(path, filename) or _files_problem(root, folder, {filename: path}, verified)
        if found is None:
            return path, None
        warn_unusable(root, folder, filename, found)
        problem = problem if problem != MISSING else found
    return None, problem


def _files_problem(root: str, folder: str, paths: dict[str, str], verified: bool) -> str | None:
    """Why the whole entry ``folder`` of ``root`` (its files' ``paths``) may not be used: it
    does not match the trusted lock (``verified``), or, within ``own_lock_shows_damage()``,
    the cache directory's own lock."""
    own = getattr(_showing_damage, "on", False) and root == triton.knobs.cache.dir
    if not (verified or own):
        return None
    files = {name: read_bytes(path) for name, path in paths.items()}
    return (lock_problem(root, folder, files) if verified else None) or (_own_lock_problem(folder, files) if own
                                                                           else None)


_showing_damage = threading.local()


def own_lock_shows_damage() -> contextlib.AbstractContextManager[None]:
    """Within the block, an entry of the cache directory whose files differ from those its
    own lock (``jitkern-lock.json`` beside them) lists is damaged: a warmup replaces it
    instead of locking it again, ``--check`` and ``pack`` name it. That lock
    authenticates nothing (whoever changed the files could change it too), so this is a
    check for damage, not trust."""
    return flag_on(_showing_damage)


def _own_lock_problem(folder: str, files: dict[str, bytes]) -> str | None:
    expected = _own_lock().entries.get(folder)
    return None if expected is None else mismatch(expected, files, f"the cache's {LOCK_FILE}")


_own_locks: dict[tuple, Lock] = {}


def _own_lock() -> Lock:
    """The cache directory's lock (empty when it has none, or an unreadable one), read again
    only when the file changed."""
    path = os.path.join(triton.knobs.cache.dir, LOCK_FILE)
    try:
        status = os.stat(path)
        fingerprint = (path, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        if fingerprint not in _own_locks:
            _own_locks.clear()
            _own_locks[fingerprint] = Lock.from_bytes(read_bytes(path), path)
        return _own_locks[fingerprint]
    except (OSError, LockError):
        return Lock()


_private: dict[str, str] = {}


def _private_root(cache_entry_dir: str, error: OSError) -> str:
    """This process's private writable cache, created (and announced) once."""
    if "root" not in _private:
        _private["root"] = settings.current().private_cache_dir or tempfile.mkdtemp(prefix="jitkern-cache-")
        warnings.warn(
            f"jitkern: the Triton cache {os.path.dirname(cache_entry_dir)} is not writable ({error.strerror}); "
            f"this process compiles into the private directory {_private['root']}",
            RuntimeWarning, stacklevel=3,
        )
    return _private["root"]


_publishing = threading.Event()


def publish_compiles(on: bool) -> None:
    """Publish each entry this process compiles to Redis from now on (or no longer): the
    guard's record mode, so that other nodes (trusting the HMAC key) load it."""
    if on:
        _publishing.set()
    else:
        _publishing.clear()


def _publish_serve_time_compile(folder: str, filename: str, group: dict[str, str]) -> None:
    """A compile published in record mode (``publish_compiles``)."""
    store = remote_store()
    if store is None or not _publishing.is_set():
        return
    try:
        files = {name: read_bytes(path) for name, path in group.items()}
        store.publish(folder, files, f"{filename} (compiled while serving)", settings.current().lock_key)
    except (OSError, RemoteUnavailable) as error:
        warnings.warn(f"jitkern: publishing {filename} failed: {error}", RemoteCacheUnavailable, stacklevel=3)


def install() -> None:
    """Make ``JitkernCacheManager`` Triton's cache manager, unless the user chose one."""
    if not os.environ.get("TRITON_CACHE_MANAGER"):
        triton.knobs.cache.manager_class = JitkernCacheManager


