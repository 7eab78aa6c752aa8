"""Checking a warmed cache, compiling nothing: every file each key loads is there, whole,
and matches the trusted lock and the cache's own lock."""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from typing import Iterator

from jitkern import settings
from jitkern.build.compile import progress_bar, tasks_of
from jitkern.build.probe import entry_files
from jitkern.cache.entries import DamagedCacheEntry, read_bytes
from jitkern.cache.identity import cache_directory, foreign_cache_line
from jitkern.cache.lock import LOCK_FILE, Lock, digest
from jitkern.cache.manager import own_lock_shows_damage
from jitkern.cache.remote import RedisStore
from jitkern.cache.share import check_remote
from jitkern.cache.tables import names_a_table
from jitkern.kernel import registry
from jitkern.manifest.deployment import Deployment


@dataclass(frozen=True)
class CheckResult:
    """What ``--check`` found: each key the cache cannot serve, and who made the cache."""

    total: int
    unusable: list[str]  # "kernel[key] for target: not in the cache" (or what is damaged)
    foreign: list[str]  # one line per target whose cache another compiler made

    @property
    def ok(self) -> bool:
        return not self.unusable


def run_check(deployment: Deployment, progress: bool = True) -> CheckResult:
    """Check that every file each key loads (its binary's entry, its host modules) is whole,
    matches the trusted lock, and the cache's own lock where it lists it; compiles nothing."""
    tasks = tasks_of(deployment)
    unusable: dict[str, list[str]] = {target: [] for target in deployment.targets}
    bar = progress_bar(len(tasks), "checking", progress)
    with checking_every_file():
        for task in tasks:
            try:
                entry_files(registry.get_kernel(task.kernel_name), task.key, task.target)
            except LookupError as error:
                unusable[task.target].append(f"{task.describe()}: {error}")
            bar.update(1)
    bar.close()
    foreign = [line for target, entries in deployment.by_target.items()
               if (line := foreign_cache_line(target, len(unusable[target]), len(entries))) is not None]
    return CheckResult(len(tasks), [line for lines in unusable.values() for line in lines], foreign)


@contextlib.contextmanager
def checking_every_file() -> Iterator[None]:
    """Files checked as a serving process checks them, and against the cache's own lock
    (``own_lock_shows_damage``); each problem is printed once, by key, not warned too."""
    with own_lock_shows_damage(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedCacheEntry)
        yield


@dataclass(frozen=True)
class RemoteCheck:
    """What ``--check --remote`` found: each key Redis cannot serve, against which lock."""

    total: int
    problems: list[str]
    lock_source: str
    lock_digest: str


class NoLock(LookupError):
    """No lock to check Redis against: none pinned, in the cache directory or named in Redis."""


def run_remote_check(deployment: Deployment, store: RedisStore) -> RemoteCheck:
    """Check that Redis holds every key whole and matching the lock: the one pinned by
    JITKERN_LOCK_DIGEST, else the cache directory's, else the one Redis names for the
    deployment (which shows damage, not tampering); and the tuning tables that lock lists
    for the deployment's kernels. Raises ``NoLock``, and
    ``RemoteUnavailable``, ``LockError`` or ``OSError`` (one line each)."""
    url = store.url
    pinned = settings.current().lock_digest
    local = os.path.join(cache_directory(), LOCK_FILE)
    wanted = pinned or store.deployment_lock_digest(deployment.name)
    if os.path.exists(local) and (not pinned or digest(read_bytes(local)) == pinned):
        source, data = local, read_bytes(local)
    else:
        source, data = f"{url} lock {wanted}", store.get_lock(wanted) if wanted else None
    if data is None or (pinned and digest(data) != pinned):
        raise NoLock(f"no lock {'with sha256 ' + pinned if pinned else 'for ' + deployment.name} in {local} or {url}")
    lock, tasks = Lock.from_bytes(data, source), tasks_of(deployment)
    pairs = dict.fromkeys((task.kernel_name, task.target) for task in tasks)
    names = [task.describe() for task in tasks] + [name for name in lock.keys for kernel, target in pairs
                                                    if names_a_table(name, kernel, target)]  # its tuning tables
    return RemoteCheck(len(names), check_remote(names, lock, store), source, digest(data))
