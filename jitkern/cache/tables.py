"""Tuning tables as cache artifacts: where one lives, read as trusted as a binary, written whole.

A table (``jitkern.tuning``: JSON, one per kernel, target and GPU name) is one file in a
folder of its own beside the binaries' entries, ``tuning@<kernel>@<target>@<gpu>/tuning.json``
(each part with characters other than letters, digits, ``.``, ``_`` and ``-`` made ``_``).
So it travels as an entry does: the lock lists its sha256, ``pack`` puts it in the wheel,
``--remote`` publishes it to Redis, and a process reads it from the cache directory,
installed cache wheels, then Redis, checked against the trusted lock (or its record's
HMAC) exactly as a binary's files are (``jitkern.cache.manager``). This module knows the
file's bytes only; what they say is ``jitkern.tuning``'s.
"""

from __future__ import annotations

import contextlib
import os
import re

from jitkern.cache.entries import MISSING, read_bytes
from jitkern.cache.manager import lookup_file
from jitkern.cache.remote import RECORD_FILE
from jitkern.cache.roots import read_roots
from jitkern.cache.lock import Lock, digest
from jitkern.cache.share import LockResult, keep_signed_records, write_atomically, write_lock
from jitkern.cache.trust import read_through

TABLE_FILE = "tuning.json"
PREFIX = "tuning@"


def table_folder(kernel: str, target: str, gpu: str) -> str:
    """The folder of the table of ``kernel`` for ``target`` measured on GPU ``gpu``."""
    return PREFIX + "@".join(re.sub(r"[^A-Za-z0-9._-]", "_", part) for part in (kernel, target, gpu))


def table_name(kernel: str, target: str, folder: str) -> str:
    """How the lock and messages name a table: ``kernel[tuning table NVIDIA_H200] for cuda:90``."""
    return f"{kernel}[tuning table {folder.rpartition('@')[2]}] for {target}"


def names_a_table(name: str, kernel: str, target: str) -> bool:
    """Whether a lock's key ``name`` is a table of ``kernel`` for ``target`` (``table_name``)."""
    return name.startswith(f"{kernel}[tuning table ") and name.endswith(f"] for {target}")


def stored_tables(kernel: str, target: str) -> list[str]:
    """The folders of every table of ``kernel`` for ``target`` in the cache directory and
    installed cache wheels (any GPU), sorted."""
    prefix = table_folder(kernel, target, "")
    found = set()
    for root in read_roots():
        with contextlib.suppress(OSError):
            found.update(name for name in os.listdir(root) if name.startswith(prefix)
                         and os.path.exists(os.path.join(root, name, TABLE_FILE)))
    return sorted(found)


def table_path(folder: str) -> str:
    """Where the cache directory holds the table of ``folder`` (there or not)."""
    return os.path.join(read_roots()[0], folder, TABLE_FILE)


def read_table(folder: str) -> tuple[bytes | None, str]:
    """The table's bytes from the cache directory, an installed cache wheel or Redis, whole
    and matching the trusted lock (or its record's HMAC), with "" ; else None and why
    (``MISSING`` when no tier holds it). A table taken from Redis is kept in the cache
    directory, with its record, as a binary's entry is."""
    path, problem = lookup_file(folder, TABLE_FILE)
    if path is not None:
        return read_bytes(path), ""
    entry, refused = read_through(folder)
    if entry is None or TABLE_FILE not in entry.files:
        return None, refused or problem or MISSING
    with contextlib.suppress(OSError):  # a read-only cache: it is read from Redis again next time
        os.makedirs(os.path.dirname(table_path(folder)), exist_ok=True)
        write_atomically(os.path.join(os.path.dirname(table_path(folder)), RECORD_FILE), entry.record_bytes)
        write_atomically(table_path(folder), entry.files[TABLE_FILE])
    return entry.files[TABLE_FILE], ""


def store_table(folder: str, name: str, data: bytes, hmac_key: str = "") -> tuple[str, str]:
    """Write a table into the cache directory whole (a reader sees the old one or the new
    one) and lock it as ``name`` in the cache's lock, its record signed with ``hmac_key``
    when given (as a warmup signs its entries); the table's path and the lock's sha256.
    Raises ``OSError`` when the directory cannot be written."""
    path = table_path(folder)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, data)
    lock = Lock({name: [folder]}, {folder: {TABLE_FILE: digest(data)}})
    if hmac_key:
        keep_signed_records(read_roots()[0], LockResult(lock, [], {folder: {TABLE_FILE: path}}), hmac_key)
    _lock_path, lock_digest, _held = write_lock(read_roots()[0], lock)
    return path, lock_digest
