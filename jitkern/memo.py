"""Triton's hash of its own build, remembered per installed build.

Triton's cache keys start with ``triton_key()``: the sha256 of its frontend, compiler,
backend and language sources and of ``libtriton.so`` (415 MB). A process pays it once,
0.4-0.7 s, before its first binary is looked up. The answer depends only on those files,
so jitkern remembers it, keyed by a **fingerprint** of every file ``triton_key()`` reads
(path, size, mtime and ctime in ns, inode, device) plus Triton's version and where it is
installed. Another build (reinstalled, upgraded, another wheel, another Python) changes a
file's inode, times or size, so it has another fingerprint and never reads this memo: it
pays ``triton_key()`` once and records its own answer beside it. A file rewritten in place
changes its ctime, which no program can set back.

The memo is one JSON file per machine (``JITKERN_STATE_DIR``, default
``~/.cache/jitkern``), written atomically; an unwritable or damaged memo only costs the
hash again. ``install()`` (done by ``import jitkern``) puts the memoised function in
``triton.runtime.cache``, where ``get_cache_key`` and jitkern's ``compiler_identity``
look it up; Triton's own ``triton_key`` is still what computes an unknown build's answer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
import tempfile
from typing import Callable

from jitkern import settings

MEMO_FILE = "triton-key.json"
MAX_ANSWERS = 16  # builds (or other keys) remembered per machine and memo; the oldest is dropped


def triton_root() -> str:
    import triton

    return os.path.dirname(os.path.abspath(triton.__file__))


def fingerprint_files(root: str) -> list[str]:
    """Every file ``triton_key()`` reads, and more: all of ``runtime/cache.py``, the Python
    files under ``compiler``, ``backends`` and ``language``, and ``_C/libtriton``."""
    files = [os.path.join(root, "runtime", "cache.py"),
             os.path.join(root, "_C", f"libtriton.{sysconfig.get_config_var('EXT_SUFFIX').split('.')[-1]}")]
    for folder in ("compiler", "backends", "language"):
        for directory, subdirectories, names in os.walk(os.path.join(root, folder)):
            subdirectories.sort()
            files += [os.path.join(directory, name) for name in sorted(names) if name.endswith(".py")]
    return files


def fingerprint(root: str | None = None) -> str:
    """sha256 of Triton's version, install path and each file's (path, size, mtime, ctime,
    inode, device): different for any other build or installation of Triton."""
    import triton

    root = root or triton_root()
    digest = hashlib.sha256(f"{triton.__version__}\0{root}\0".encode())
    for entry in file_stats(fingerprint_files(root)):
        digest.update(f"{entry!r}\0".encode())
    return digest.hexdigest()


def file_stats(paths: list[str]) -> list[tuple]:
    """Each file's path, size, mtime and ctime (ns), inode and device; None when it is gone.
    Another file, or this one rewritten in place (its ctime), gives another tuple."""
    stats = []
    for path in paths:
        try:
            stat = os.stat(path)
            stats.append((path, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev))
        except OSError:
            stats.append((path, None))
    return stats


def remembered(file_name: str, key: str, compute: Callable[[], str]) -> str:
    """``compute()``'s answer for ``key``, from this machine's memo ``file_name`` (in
    ``JITKERN_STATE_DIR``) when recorded there, else computed and recorded."""
    path = os.path.join(settings.current().state_dir, file_name)
    answer = _read_memo(path).get(key)
    if answer is None:
        answer = compute()
        _write_memo(path, key, answer)
    return answer


def _read_memo(path: str) -> dict[str, str]:
    try:
        with open(path) as file:
            memo = json.load(file)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in memo.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(memo, dict) else {}


def _write_memo(path: str, key: str, answer: str) -> None:
    memo = _read_memo(path)
    memo.pop(key, None)
    memo[key] = answer
    memo = dict(list(memo.items())[-MAX_ANSWERS:])
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
        with os.fdopen(handle, "w") as file:
            json.dump(memo, file)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: the next process computes it again


def remembered_triton_key(compute: Callable[[], str]) -> str:
    """``compute()``'s answer (Triton's ``triton_key``), from the memo when this exact build
    recorded it, else computed and recorded."""
    return remembered(MEMO_FILE, fingerprint(), compute)


_original: list[Callable[[], str]] = []


def install() -> None:
    """Make ``triton.runtime.cache.triton_key`` (and the autotuner's reference to it) answer
    from the memo (once per process)."""
    from triton.runtime import autotuner, cache as triton_cache

    if _original:
        return
    _original.append(triton_cache.triton_key)

    @functools.cache
    def triton_key() -> str:
        return remembered_triton_key(_original[0])

    triton_key.__doc__ = "Triton's triton_key(), remembered per installed build (jitkern.memo)."
    triton_cache.triton_key = autotuner.triton_key = triton_key

