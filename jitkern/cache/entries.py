"""Whole cache entries: what Triton's cache holds for one compiled kernel, checked complete.

An entry is whole when its group file parses, every file it lists is there and non-empty
(found beside the group file: Triton's group files hold absolute paths, and a cache may be
copied or mounted elsewhere), the metadata parses and the binary is a complete ELF file.
A damaged entry reads as absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
from dataclasses import dataclass
from typing import Iterator


class DamagedCacheEntry(RuntimeWarning):
    """A cache entry was incomplete or unreadable and is treated as absent."""


class CacheEntryUnusable(RuntimeError):
    """Raised while ``refusing_compiles()``: the entry a load needs is missing or damaged."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


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
        problem = file_problem(path, child)
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


def file_problem(path: str, name: str) -> str | None:
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


def read_bytes(path: str) -> bytes:
    """The file's bytes."""
    with open(path, "rb") as file:
        return file.read()


@contextlib.contextmanager
def flag_on(flag: threading.local) -> Iterator[None]:
    """``flag.on`` set in this thread for the block, then as it was."""
    previous = getattr(flag, "on", False)
    flag.on = True
    try:
        yield
    finally:
        flag.on = previous


