"""Sharing a warmed cache: its lock, publishing it to Redis, checking what Redis holds.

Warmup writes the lock of what it warmed (``jitkern-lock.json``, merged with what the
cache already locks); ``publish`` copies every entry of a plan to Redis, one atomic
write per entry, and the lock after them; ``check_remote`` reads them back against a
lock, with no local cache needed.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from jitkern.cache.entries import read_bytes
from jitkern.cache.lock import LOCK_FILE, Lock, LockError, digest, mismatch
from jitkern.cache.remote import RECORD_FILE, RedisStore, UnreadableRemoteKey, entry_record
from jitkern.cache.roots import read_roots


@dataclass(frozen=True)
class LockResult:
    lock: Lock
    unlocked: list[str]  # "kernel[key] for target: why" for keys the cache cannot serve
    paths: dict[str, dict[str, str]]  # entry folder -> {file name: the path locked}


def keep_signed_records(cache_dir: str, locked: LockResult, hmac_key: str) -> int:
    """Sign each locked entry of ``cache_dir`` with ``hmac_key`` (``JITKERN_LOCK_KEY``): its
    record, as ``publish`` writes it to Redis, kept beside its files (``RECORD_FILE``). A
    process trusting the key then loads a copy of this directory as it loads from Redis.
    The digests are the lock's, taken as it was built: no file is read again. Returns how
    many records it wrote (one already as it would write it is left)."""
    written, here = 0, os.path.realpath(cache_dir)
    for folder, files in locked.paths.items():
        if os.path.realpath(os.path.dirname(os.path.dirname(next(iter(files.values()))))) != here:
            continue  # an installed wheel's: trusted by its own lock
        record = entry_record(folder, locked.lock.entries[folder], locked.lock.owner(folder), hmac_key)
        path = os.path.join(cache_dir, folder, RECORD_FILE)
        try:
            if read_bytes(path) == record:
                continue
        except OSError:
            pass
        write_atomically(path, record)
        written += 1
    return written


def write_lock(cache_dir: str, lock: Lock) -> tuple[str, str, int]:
    """Merge ``lock`` into the cache's lock (atomically, safe when warmups run at once);
    returns its path, its sha256 and how many keys it now holds (earlier runs' too)."""
    path = os.path.join(cache_dir, LOCK_FILE)
    with open(path + ".lock", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            lock = Lock.from_bytes(read_bytes(path), path).merged(lock)
        except (OSError, LockError):
            pass  # no lock yet, or a damaged one: this warmup's lock replaces it
        data = Lock(dict(sorted(lock.keys.items())), dict(sorted(lock.entries.items()))).to_bytes()
        write_atomically(path, data)
    return path, digest(data), len(lock.keys)


def unreadable_lock(cache_dir: str) -> str | None:
    """Why the cache's own lock cannot be read, or None (it reads, or there is none yet).
    Such a lock shows no damage, and the next warmup replaces it by its own keys' lock."""
    path = os.path.join(cache_dir, LOCK_FILE)
    try:
        Lock.from_bytes(read_bytes(path), path)
    except FileNotFoundError:
        return None
    except (OSError, LockError) as error:
        return str(error)
    return None


def write_atomically(path: str, data: bytes) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        file.write(data)
    os.replace(temporary, path)


@dataclass(frozen=True)
class PublishResult:
    written: int
    unchanged: int
    lock_digest: str


def publish(lock: Lock, store: RedisStore, deployment: str, hmac_key: str = "") -> PublishResult:
    """Copy the lock, then every entry it lists, from the local caches to Redis.

    Each entry is one atomic write; an entry Redis already holds unchanged is skipped, so
    publishing again writes nothing. Raises ``RemoteUnavailable`` (one line) on failure,
    and ``OSError`` when a local file changed since the lock was made.
    """
    lock_digest = store.put_lock(lock, deployment)  # first: nodes pinned to it then see misses, not refusals
    written = unchanged = 0
    for folder, expected in lock.entries.items():
        root = next(root for root in read_roots() if os.path.isdir(os.path.join(root, folder)))
        files = {name: read_bytes(os.path.join(root, folder, name)) for name in expected}
        problem = mismatch(expected, files)
        if problem is not None:
            raise OSError(f"{lock.owner(folder)}: {problem} (the cache changed since it was locked)")
        if store.publish(folder, files, lock.owner(folder), hmac_key):
            written += 1
        else:
            unchanged += 1
    return PublishResult(written, unchanged, lock_digest)


def check_remote(key_names: list[str], lock: Lock, store: RedisStore) -> list[str]:
    """One line per key that Redis cannot serve whole and matching ``lock``."""
    problems = []
    verdicts: dict[str, str | None] = {}
    for name in key_names:
        if name not in lock.keys:
            problems.append(f"{name}: not in the lock")
            continue
        for folder in lock.keys[name]:
            if folder not in verdicts:
                verdicts[folder] = _remote_problem(store, folder, lock.entries.get(folder, {}))
            if verdicts[folder] is not None:
                problems.append(f"{name}: entry {folder}: {verdicts[folder]}")
                break
    return problems


def _remote_problem(store: RedisStore, folder: str, expected: dict[str, str]) -> str | None:
    """Why Redis cannot serve the entry ``folder`` as locked; None when it can. An
    unreadable entry is one problem among others, not the end of the check."""
    try:
        entry = store.fetch(folder)
    except UnreadableRemoteKey as error:
        return f"tampered or damaged: {error}"
    if entry is None:
        return "missing from the remote cache"
    problem = mismatch(expected, entry.files)
    return None if problem is None else f"tampered or damaged: {problem}"
