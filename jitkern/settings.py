"""Every jitkern setting, each tied to one ``JITKERN_*`` environment variable.

Read once where they are used off the hot path; tests change them with ``scope``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields, replace

GUARD_MODES = ("off", "warn", "error", "record")


@dataclass(frozen=True)
class Settings:
    guard_mode: str = "off"
    """JITKERN_GUARD: what a serve-time compile does (off / warn / error / record)."""
    guard_record_file: str = "jitkern-unseen-keys.jsonl"
    """JITKERN_GUARD_RECORD: where record mode appends keys nobody warmed."""
    direct_launch: bool = True
    """JITKERN_DIRECT_LAUNCH: launch warmed keys straight through their binary."""
    private_cache_dir: str = ""
    """JITKERN_PRIVATE_CACHE_DIR: where to compile when the Triton cache is read-only
    (empty: a new temporary directory)."""
    remote_cache: str = ""
    """JITKERN_REMOTE_CACHE: a Redis URL (redis://HOST:PORT/DB) read through after the
    local cache; empty: no remote tier."""
    remote_timeout: float = 2.0
    """JITKERN_REMOTE_TIMEOUT: seconds a Redis command may take before the remote tier is
    given up for the rest of the process."""
    lock_digest: str = ""
    """JITKERN_LOCK_DIGEST: sha256 of the deployment's lock; only a lock with this digest
    is trusted (see ``jitkern.cache.lock``)."""
    lock_key: str = ""
    """JITKERN_LOCK_KEY: HMAC-SHA256 key; entries published with it are trusted. The
    store must never see it."""
    state_dir: str = os.path.join(os.path.expanduser("~"), ".cache", "jitkern")
    """JITKERN_STATE_DIR: where this machine's memos live (Triton's hash of each installed
    build: ``jitkern.memo``; the installed cache wheels: ``jitkern.cache``; what
    each deployment's ``load()`` found: ``jitkern.serve.memo``)."""
    load_memo: bool = True
    """JITKERN_LOAD_MEMO: let ``load()`` take a deployment's binaries from what an earlier
    process's ``load()`` of the same deployment recorded (``jitkern.serve.memo``)."""
    portable_paths: bool = False
    """JITKERN_PORTABLE_PATHS: compile every kernel's portable code paths (those sm_80 and
    AMD compile: no inline PTX, no hardware fp8 conversion, no PDL) on any GPU, to test
    them on an NVIDIA GPU (``jitkern.targets.Target``). Binaries differ, so a cache is
    built and used with the same setting. Read at each compile: a process that changes it
    (a test, with ``scope``) calls ``kernel.binaries.forget()`` on the kernels, or their direct
    launches keep running the other setting's binaries."""

    @classmethod
    def from_environment(cls) -> "Settings":
        guard_mode = os.environ.get("JITKERN_GUARD", cls.guard_mode).strip().lower()
        if guard_mode not in GUARD_MODES:
            raise ValueError(f"JITKERN_GUARD={guard_mode!r}: expected one of {', '.join(GUARD_MODES)}")
        return cls(
            guard_mode=guard_mode,
            guard_record_file=os.environ.get("JITKERN_GUARD_RECORD", cls.guard_record_file),
            direct_launch=os.environ.get("JITKERN_DIRECT_LAUNCH", "1") not in ("0", "false", "no"),
            private_cache_dir=os.environ.get("JITKERN_PRIVATE_CACHE_DIR", cls.private_cache_dir),
            remote_cache=os.environ.get("JITKERN_REMOTE_CACHE", cls.remote_cache),
            remote_timeout=_positive_float("JITKERN_REMOTE_TIMEOUT", cls.remote_timeout),
            lock_digest=os.environ.get("JITKERN_LOCK_DIGEST", cls.lock_digest).strip().lower(),
            lock_key=os.environ.get("JITKERN_LOCK_KEY", cls.lock_key),
            state_dir=os.environ.get("JITKERN_STATE_DIR", "") or cls.state_dir,
            load_memo=os.environ.get("JITKERN_LOAD_MEMO", "1") not in ("0", "false", "no"),
            portable_paths=os.environ.get("JITKERN_PORTABLE_PATHS", "0") not in ("", "0", "false", "no"),
        )


def _positive_float(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}={text!r}: expected a positive number of seconds")
    return value


settings = Settings.from_environment()


@contextlib.contextmanager
def scope(**changes):
    """Temporarily change settings (for tests): ``with scope(guard_mode="error"): ...``."""
    global settings
    known = {f.name for f in fields(Settings)}
    unknown = set(changes) - known
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    previous = settings
    settings = replace(settings, **changes)
    try:
        yield settings
    finally:
        settings = previous


def current() -> Settings:
    return settings


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU (fixed when kernels are decorated)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
