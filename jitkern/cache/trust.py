"""Trust: which entries this process may load, and the Redis tier it reads through.

A binary or host ``.so`` is code, so an entry is loaded only when its files match a lock
this process trusts (``jitkern.cache.lock``): one inside an installed cache wheel, one
whose sha256 is pinned (``JITKERN_LOCK_DIGEST``), or an entry's record signed with the
HMAC key (``JITKERN_LOCK_KEY``), from Redis or kept beside its files. A cache directory
with none of them configured is trusted as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import warnings
from dataclasses import dataclass

import triton

from jitkern import settings
from jitkern.cache.entries import DamagedCacheEntry, flag_on, read_bytes
from jitkern.cache.lock import LOCK_FILE, Lock, LockError, digest, mismatch, signed
from jitkern.cache.remote import RECORD_FILE, RedisStore, RemoteEntry, RemoteUnavailable, UnreadableRemoteKey, signed_part
from jitkern.cache.roots import wheel_roots

REFUSED = "refused: "


class RefusedCacheEntry(DamagedCacheEntry):
    """An entry whose files do not match the trusted lock (or no trusted lock lists it)."""


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
            return REFUSED + "not in a trusted lock"
        problem = mismatch(expected, files)
        return None if problem is None else REFUSED + problem


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
            trusted = trusted.merged(Lock.from_bytes(read_bytes(os.path.join(root, LOCK_FILE)), root))
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
        candidates.append((triton.knobs.cache.dir, read_bytes(os.path.join(triton.knobs.cache.dir, LOCK_FILE))))
    store = remote_store()
    if store is not None and not any(digest(data) == lock_digest for _, data in candidates if data):
        try:
            candidates.append((store.url, store.get_lock(lock_digest)))
        except RemoteUnavailable as error:
            remote_failed(error)
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


def lock_problem(root: str, folder: str, files: dict[str, bytes]) -> str | None:
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
        record = json.loads(read_bytes(os.path.join(root, folder, RECORD_FILE)))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


_building = threading.local()


def building_own_cache() -> contextlib.AbstractContextManager[None]:
    """Within the block (a warmup compiling), the cache directory is this process's own
    work: its entries are checked whole and against its own lock, not refused for want of
    a trusted lock or signature. ``JITKERN_LOCK_KEY`` set for a warmup is there to sign
    what it writes, not to make it distrust and recompile its own cache."""
    return flag_on(_building)


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


def remote_failed(error: RemoteUnavailable) -> None:
    _remotes[settings.current().remote_cache] = None
    warnings.warn(f"jitkern: {error}; reading local caches only from now on", RemoteCacheUnavailable, stacklevel=4)


class RemoteCacheUnavailable(RuntimeWarning):
    """The remote tier failed once; this process reads local caches only."""


def read_through(folder: str) -> tuple[RemoteEntry | None, str | None]:
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
        remote_failed(error)
        return None, None
    except UnreadableRemoteKey as error:  # that entry only: the others are still read
        entry, problem = None, REFUSED + str(error)
    if problem is not None:
        warn_unusable(store.url, folder, "", problem)
        return None, f"refused from {store.url}: {problem.removeprefix(REFUSED)}"
    return entry, None


def _warn_damaged(path: str, problem: str) -> None:
    warnings.warn(f"jitkern: damaged cache entry {path}: {problem}; it is not used", DamagedCacheEntry, stacklevel=3)


def warn_unusable(root: str, folder: str, filename: str, problem: str) -> None:
    if problem.startswith(REFUSED):
        owner = trust().lock.owner(folder)
        warnings.warn(f"jitkern: refused {owner} from {root}: {problem.removeprefix(REFUSED)}; nothing of it is loaded",
                      RefusedCacheEntry, stacklevel=3)
    else:
        _warn_damaged(os.path.join(root, folder, filename), problem)
