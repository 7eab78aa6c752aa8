"""The warmup cache as a deployment artifact: whole entries, who made it, read-only use.

A cache is built on one machine, copied, mounted read-only and shared by processes.
jitkern installs ``JitkernCacheManager`` as Triton's cache manager (unless the user
chose another with ``TRITON_CACHE_MANAGER``). Compared with Triton's own it

- hands out only **whole** entries: the group file parses, every file it lists is
  there and non-empty, the metadata parses, the binary is a complete ELF file. A
  damaged entry reads as absent, so Triton compiles it again and replaces it (and the
  guard, in error mode, refuses instead);
- finds an entry's files beside its group file, so a cache that was copied or mounted
  elsewhere still hits (Triton's group files hold absolute paths);
- falls back to a private directory for writes when the cache is read-only.

``jitkern-identity.json`` at the top of a cache records which compilers made it
(``jitkern.identity``), so a cache from another Triton build is reported as such instead
of recompiling silently.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import struct
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator

import triton
from triton.runtime.cache import FileCacheManager

from jitkern import settings
from jitkern.lock import LOCK_FILE, Lock, LockError, digest, mismatch, signed
from jitkern.remote import RECORD_FILE, RedisStore, RemoteEntry, RemoteUnavailable, UnreadableRemoteKey, signed_part

_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class DamagedCacheEntry(RuntimeWarning):
    """A cache entry was incomplete or unreadable and is treated as absent."""


class CacheEntryUnusable(RuntimeError):
    """Raised while ``refusing_compiles()``: the entry a load needs is missing or damaged."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


# --- whole entries ------------------------------------------------------------------


MISSING = "not in the cache"


@dataclass(frozen=True)
class EntryState:
    """What the cache holds for one compiled kernel: its files, or why it cannot be used."""

    files: dict[str, str] | None
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None


def inspect_entry(entry_dir: str, group_name: str) -> EntryState:
    """Check the entry whose group file is ``__grp__<group_name>`` in ``entry_dir``.

    ``group_name`` is the metadata file's name (``<kernel>.json``), as Triton names it.
    """
    group_path = os.path.join(entry_dir, f"__grp__{group_name}")
    if not os.path.exists(group_path):
        return EntryState(None, MISSING)
    try:
        with open(group_path, "rb") as file:
            children = json.loads(file.read()).get("child_paths")
    except (OSError, ValueError, AttributeError):
        return EntryState(None, "its group file is not valid JSON")
    if not isinstance(children, dict) or not children or not all(isinstance(p, str) for p in children.values()):
        return EntryState(None, "its group file lists no files")
    files = {}
    for child in children:
        # Beside the group file, wherever the cache was built: Triton stores absolute paths.
        path = os.path.join(entry_dir, os.path.basename(child))
        problem = _file_problem(path, child)
        if problem is not None:
            return EntryState(None, problem)
        files[child] = path
    if group_name not in files:
        return EntryState(None, f"its group lacks the metadata {group_name}")
    backend = _metadata_backend(files[group_name])
    if backend is None:
        return EntryState(None, f"metadata {group_name} is not valid JSON")
    binary = os.path.splitext(group_name)[0] + "." + _BINARY_SUFFIX.get(backend, "")
    if backend in _BINARY_SUFFIX and binary not in files:
        return EntryState(None, f"its group lacks the binary {binary}")
    return EntryState(files)


_BINARY_SUFFIX = {"cuda": "cubin", "hip": "hsaco"}


def _file_problem(path: str, name: str) -> str | None:
    try:
        size = os.path.getsize(path)
    except OSError:
        return f"{name} is missing"
    if size == 0:
        return f"{name} is empty"
    if name.endswith((".cubin", ".hsaco", ".so")) and not _whole_elf(path, size):
        return f"{name} is truncated or not an ELF file"
    return None


def _whole_elf(path: str, size: int) -> bool:
    """An ELF file whose section header table (written last by linkers) fits in the file."""
    try:
        with open(path, "rb") as file:
            header = file.read(64)
    except OSError:
        return False
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
        return False
    order = "<" if header[5] == 1 else ">"
    section_headers, = struct.unpack_from(order + "Q", header, 0x28)
    entry_size, count = struct.unpack_from(order + "HH", header, 0x3A)
    return section_headers + entry_size * count <= size


def _metadata_backend(path: str) -> str | None:
    """The metadata's target backend ("cuda"), "" if it names none, None if not JSON."""
    try:
        with open(path, "rb") as file:
            metadata = json.loads(file.read())
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict):
        return None
    target = metadata.get("target")
    return str(target.get("backend", "")) if isinstance(target, dict) else ""


# --- Triton's cache manager ---------------------------------------------------------


_refusing = threading.local()


def refusing_compiles() -> contextlib.AbstractContextManager[None]:
    """Within the block a kernel entry the cache lacks (or holds damaged) raises
    ``CacheEntryUnusable`` where Triton would have compiled it."""
    return _flag_on(_refusing)


@contextlib.contextmanager
def _flag_on(flag: threading.local) -> Iterator[None]:
    """``flag.on`` set in this thread for the block, then as it was."""
    previous = getattr(flag, "on", False)
    flag.on = True
    try:
        yield
    finally:
        flag.on = previous


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
        entry, _refused = _read_through(self.key)
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
        entry, refused = _read_through(self.key)
        if refused is not None:
            state = EntryState(None, refused)
        if entry is not None:
            self.put(entry.record_bytes, RECORD_FILE)  # its signature, for processes that trust the HMAC key
            paths = {name: self.put(data, name) for name, data in sorted(entry.files.items())}
            FileCacheManager.put_group(self, filename, paths)  # written last: the entry is whole from here on
            written = inspect_entry(os.path.dirname(paths[filename]), filename) if filename in paths else state
            if written.usable:
                return written.files
        if getattr(_refusing, "on", False):
            raise CacheEntryUnusable(state.problem)
        return None

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        path = super().put_group(filename, group)
        _publish_serve_time_compile(self.key, filename, group)
        return path

    def put(self, data, filename, binary=True) -> str:
        if self._private_dir is None:
            try:
                return super().put(data, filename, binary)
            except OSError as error:
                if error.errno not in _UNWRITABLE:
                    raise
                self._private_dir = os.path.join(_private_root(self.cache_dir, error), self.key)
        os.makedirs(self._private_dir, exist_ok=True)
        private = FileCacheManager.__new__(FileCacheManager)
        private.key, private.cache_dir = self.key, self._private_dir
        private.lock_path = os.path.join(self._private_dir, "lock")
        return private.put(data, filename, binary)


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
            _warn_unusable(root, folder, group_name, state.problem)
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
        found = _file_problem(path, filename) or _files_problem(root, folder, {filename: path}, verified)
        if found is None:
            return path, None
        _warn_unusable(root, folder, filename, found)
        problem = problem if problem != MISSING else found
    return None, problem


def _files_problem(root: str, folder: str, paths: dict[str, str], verified: bool) -> str | None:
    """Why the whole entry ``folder`` of ``root`` (its files' ``paths``) may not be used: it
    does not match the trusted lock (``verified``), or, within ``own_lock_shows_damage()``,
    the cache directory's own lock."""
    own = getattr(_showing_damage, "on", False) and root == triton.knobs.cache.dir
    if not (verified or own):
        return None
    files = {name: _read(path) for name, path in paths.items()}
    return (_lock_problem(root, folder, files) if verified else None) or (_own_lock_problem(folder, files) if own
                                                                           else None)


_showing_damage = threading.local()


def own_lock_shows_damage() -> contextlib.AbstractContextManager[None]:
    """Within the block, an entry of the cache directory whose files differ from those its
    own lock (``jitkern-lock.json`` beside them) lists is damaged: a warmup replaces it
    instead of locking it again, ``--check`` and ``pack`` name it. That lock
    authenticates nothing (whoever changed the files could change it too), so this is a
    check for damage, not trust."""
    return _flag_on(_showing_damage)


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
            _own_locks[fingerprint] = Lock.from_bytes(_read(path), path)
        return _own_locks[fingerprint]
    except (OSError, LockError):
        return Lock()


def read_roots() -> list[str]:
    """Where entries are read from, in order: the cache directory, then installed cache wheels."""
    return [triton.knobs.cache.dir, *wheel_roots()]


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


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


def _warn_damaged(path: str, problem: str) -> None:
    warnings.warn(f"jitkern: damaged cache entry {path}: {problem}; it is not used", DamagedCacheEntry, stacklevel=3)


def _warn_unusable(root: str, folder: str, filename: str, problem: str) -> None:
    if problem.startswith(_REFUSED):
        owner = trust().lock.owner(folder)
        warnings.warn(f"jitkern: refused {owner} from {root}: {problem.removeprefix(_REFUSED)}; nothing of it is loaded",
                      RefusedCacheEntry, stacklevel=3)
    else:
        _warn_damaged(os.path.join(root, folder, filename), problem)


# --- trust: installed cache wheels, the pinned lock, the remote tier ---------------------


_REFUSED = "refused: "


class RefusedCacheEntry(DamagedCacheEntry):
    """An entry whose files do not match the trusted lock (or no trusted lock lists it)."""


@functools.cache
def wheel_roots() -> tuple[str, ...]:
    """The read-only data folders of installed cache wheels (entry point group ``jitkern.caches``).

    Python finds entry points by reading every installed distribution's: 8 ms for 49
    distributions on our CPU machine, more with the hundreds of a serving image, in each
    process. So the answer is remembered per machine (``wheel-roots.json`` in
    ``JITKERN_STATE_DIR``), keyed by ``installed_distributions()``."""
    from jitkern.triton_build import remembered

    installed = installed_distributions()
    if installed is None:
        return _find_wheel_roots()
    roots = tuple(json.loads(remembered(WHEEL_ROOTS_MEMO, installed, lambda: json.dumps(_find_wheel_roots()))))
    return roots if all(map(os.path.isdir, roots)) else _find_wheel_roots()  # a wheel's folder deleted by hand


def installed_distributions() -> str | None:
    """sha256 of what Python reads to find entry points: each ``sys.path`` entry, its
    distributions' metadata folders and their ``entry_points.txt`` files' stats (another
    set of distributions, or a file rewritten, gives another digest). None when a finder
    other than Python's path finder may list distributions too."""
    from importlib.machinery import PathFinder

    from jitkern.triton_build import file_stats

    if any(hasattr(finder, "find_distributions") and finder is not PathFinder for finder in sys.meta_path):
        return None
    digest = hashlib.sha256()
    for entry in sys.path:
        folder = entry or os.curdir
        try:
            names = sorted(child.name for child in os.scandir(folder) if _holds_metadata(child.name.lower()))
        except OSError:  # a zip file, or nothing there
            digest.update(repr((entry, file_stats([folder]))).encode())
            continue
        entry_points = [os.path.join(folder, name, "entry_points.txt") for name in names]
        digest.update(repr((entry, file_stats(entry_points))).encode())
    return digest.hexdigest()


def _holds_metadata(name: str) -> bool:
    """Whether Python's path finder reads a distribution's metadata from a folder so named."""
    return name.endswith((".dist-info", ".egg-info")) or name == "egg-info"


def _find_wheel_roots() -> tuple[str, ...]:
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    roots = []
    for point in sorted(entry_points(group=WHEEL_ENTRY_POINTS), key=lambda point: point.name):
        spec = find_spec(point.value)
        for package in (spec.submodule_search_locations or []) if spec else []:
            if os.path.isdir(os.path.join(package, WHEEL_DATA)):
                roots.append(os.path.join(package, WHEEL_DATA))
    return tuple(roots)


WHEEL_ENTRY_POINTS = "jitkern.caches"
WHEEL_DATA = "cache"
WHEEL_ROOTS_MEMO = "wheel-roots.json"


@dataclass(frozen=True)
class Trust:
    """What this process may load: every entry its trusted locks list, and entries
    published with its HMAC key. ``pinned``: a lock digest or key is configured, so the
    cache directory's entries need it too (else the directory is trusted as before)."""

    lock: Lock
    hmac_key: str
    pinned: bool

    def problem(self, folder: str, files: dict[str, bytes], record: dict | None = None) -> str | None:
        """Why ``files`` of entry ``folder`` may not be loaded (None when they may): the
        trusted locks list other files, or none lists the folder and ``record`` (from
        Redis, or kept beside the files) is not signed with this process's HMAC key."""
        expected = self.lock.entries.get(folder)
        if expected is None and record is not None and signed(
                signed_part(folder, record), str(record.get("hmac", "")), self.hmac_key):
            expected = record.get("files")
        if expected is None:
            return _REFUSED + "not in a trusted lock"
        problem = mismatch(expected, files)
        return None if problem is None else _REFUSED + problem


_trusts: dict[tuple, Trust] = {}


def trust() -> Trust:
    """This process's trust, built once per cache directory and settings."""
    configured = settings.current()
    if _memo() in _trusts:
        return _trusts[_memo()]
    built = _build_trust(configured.lock_digest, configured.lock_key)
    if not configured.lock_digest or built.lock.entries:
        _trusts[_memo()] = built
    return built


def _memo() -> tuple:
    configured = settings.current()
    return (triton.knobs.cache.dir, configured.lock_digest, configured.lock_key, configured.remote_cache)


def _build_trust(lock_digest: str, hmac_key: str) -> Trust:
    trusted = Lock()
    for root in wheel_roots():
        try:
            trusted = trusted.merged(Lock.from_bytes(_read(os.path.join(root, LOCK_FILE)), root))
        except (OSError, LockError) as error:
            warnings.warn(f"jitkern: the cache wheel at {root} has no readable lock ({error}); it is not used",
                          RefusedCacheEntry, stacklevel=4)
    if lock_digest:
        pinned = _pinned_lock(lock_digest)
        if pinned is None:
            warnings.warn(f"jitkern: no lock with JITKERN_LOCK_DIGEST={lock_digest} in "
                          f"{os.path.join(triton.knobs.cache.dir, LOCK_FILE)} or the remote cache: only installed "
                          "cache wheels are trusted", RefusedCacheEntry, stacklevel=4)
        else:
            trusted = trusted.merged(pinned)
    return Trust(trusted, hmac_key, pinned=bool(lock_digest or hmac_key))


def _pinned_lock(lock_digest: str) -> Lock | None:
    candidates: list[tuple[str, bytes | None]] = []
    with contextlib.suppress(OSError):
        candidates.append((triton.knobs.cache.dir, _read(os.path.join(triton.knobs.cache.dir, LOCK_FILE))))
    store = remote_store()
    if store is not None and not any(digest(data) == lock_digest for _, data in candidates if data):
        try:
            candidates.append((store.url, store.get_lock(lock_digest)))
        except RemoteUnavailable as error:
            _remote_failed(error)
        except UnreadableRemoteKey as error:
            warnings.warn(f"jitkern: refused the lock {lock_digest}: {error}", RefusedCacheEntry, stacklevel=4)
    for source, data in candidates:
        if data and digest(data) == lock_digest:
            with contextlib.suppress(LockError):
                lock = Lock.from_bytes(data, source)
                _keep_pinned_lock(data)
                return lock
    return None


def _keep_pinned_lock(data: bytes) -> None:
    """Keep a pinned lock fetched from Redis in the cache directory, where the entries
    materialised from Redis are verified against it later (even with Redis gone)."""
    path = os.path.join(triton.knobs.cache.dir, LOCK_FILE)
    if not os.path.exists(path):
        with contextlib.suppress(OSError):
            os.makedirs(triton.knobs.cache.dir, exist_ok=True)
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "wb") as file:
                file.write(data)
            os.replace(temporary, path)


def _lock_problem(root: str, folder: str, files: dict[str, bytes]) -> str | None:
    """Why a local or wheel entry may not be loaded; None when it may."""
    trusted = trust()
    own = not trusted.pinned or getattr(_building, "on", False)
    if root == triton.knobs.cache.dir and own and folder not in trusted.lock.entries:
        return None  # a cache directory with no lock configured (or a warmup's own) is trusted as before
    return trusted.problem(folder, files, _kept_record(root, folder) if trusted.hmac_key else None)


def _kept_record(root: str, folder: str) -> dict | None:
    """The record kept beside the entry's files (``RECORD_FILE``), or None; checked by its
    HMAC like one read from Redis, so whoever wrote it proves nothing by writing it."""
    try:
        record = json.loads(_read(os.path.join(root, folder, RECORD_FILE)))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


_building = threading.local()


def building_own_cache() -> contextlib.AbstractContextManager[None]:
    """Within the block (a warmup compiling), the cache directory is this process's own
    work: its entries are checked whole and against its own lock, not refused for want of
    a trusted lock or signature. ``JITKERN_LOCK_KEY`` set for a warmup is there to sign
    what it writes, not to make it distrust and recompile its own cache."""
    return _flag_on(_building)


_remotes: dict[str, RedisStore | None] = {}


def remote_store() -> RedisStore | None:
    """The Redis tier (``JITKERN_REMOTE_CACHE``), or None: not configured, or given up
    after a failure (one warning), so a dead or slow server costs one timeout at most."""
    configured = settings.current()
    if not configured.remote_cache:
        return None
    if configured.remote_cache not in _remotes:
        _remotes[configured.remote_cache] = RedisStore(configured.remote_cache, configured.remote_timeout)
    return _remotes[configured.remote_cache]


def _remote_failed(error: RemoteUnavailable) -> None:
    _remotes[settings.current().remote_cache] = None
    warnings.warn(f"jitkern: {error}; reading local caches only from now on", RemoteCacheUnavailable, stacklevel=4)


class RemoteCacheUnavailable(RuntimeWarning):
    """The remote tier failed once; this process reads local caches only."""


def _read_through(folder: str) -> tuple[RemoteEntry | None, str | None]:
    """A whole entry from Redis that matches the trusted lock or is signed with the HMAC
    key, or why it was refused (warned, one line); (None, None) when Redis is off, down
    or lacks it."""
    store = remote_store()
    if store is None:
        return None, None
    try:
        entry = store.fetch(folder)
        problem = None if entry is None else trust().problem(folder, entry.files, entry.record)
    except RemoteUnavailable as error:
        _remote_failed(error)
        return None, None
    except UnreadableRemoteKey as error:  # that entry only: the others are still read
        entry, problem = None, _REFUSED + str(error)
    if problem is not None:
        _warn_unusable(store.url, folder, "", problem)
        return None, f"refused from {store.url}: {problem.removeprefix(_REFUSED)}"
    return entry, None


def _publish_serve_time_compile(folder: str, filename: str, group: dict[str, str]) -> None:
    """In record mode a compile is published, so other nodes (trusting the HMAC key) load it."""
    from jitkern import guard

    store = remote_store()
    if store is None or guard.mode() != "record":
        return
    try:
        files = {name: _read(path) for name, path in group.items()}
        store.publish(folder, files, f"{filename} (compiled while serving)", settings.current().lock_key)
    except (OSError, RemoteUnavailable) as error:
        warnings.warn(f"jitkern: publishing {filename} failed: {error}", RemoteCacheUnavailable, stacklevel=3)


def install() -> None:
    """Make ``JitkernCacheManager`` Triton's cache manager, unless the user chose one."""
    if not os.environ.get("TRITON_CACHE_MANAGER"):
        triton.knobs.cache.manager_class = JitkernCacheManager


__all__ = ["building_own_cache", "CacheEntryUnusable", "DamagedCacheEntry", "RefusedCacheEntry", "RemoteCacheUnavailable", "Trust",
           "lookup_entry", "lookup_file", "own_lock_shows_damage", "read_roots", "remote_store", "trust", "wheel_roots", "EntryState", "JitkernCacheManager",
           "inspect_entry", "install", "refusing_compiles"]
