"""The lock of a deployment: every key, the files of its Triton cache entries, their sha256.

A binary or host ``.so`` is code, so a serving process loads a cache entry only when its
files match a lock it trusts. A lock lying beside the binaries in the same store shows
damage but authenticates nothing (whoever can write the binaries can write it too), so
a lock is trusted only when it comes with the deployment:

- inside an installed cache wheel (``python -m jitkern.warmup pack``): installed code;
- or its sha256 is pinned in the serving configuration, ``JITKERN_LOCK_DIGEST``;
- or, for single entries published to Redis, an HMAC-SHA256 over the entry's record
  with ``JITKERN_LOCK_KEY``, a key the store never sees.

The JSON is written with sorted keys, so the same cache gives the same bytes and digest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Mapping

LOCK_FILE = "jitkern-lock.json"
FORMAT_VERSION = 1


class LockError(ValueError):
    """A lock that cannot be read; the message is one line naming the source."""


@dataclass(frozen=True)
class Lock:
    keys: dict[str, list[str]] = field(default_factory=dict)
    """``kernel[key] for target`` -> the entry folders (Triton cache keys) it loads."""
    entries: dict[str, dict[str, str]] = field(default_factory=dict)
    """entry folder -> {file name: sha256 of its bytes}."""

    def to_bytes(self) -> bytes:
        document = {"format_version": FORMAT_VERSION, "keys": self.keys, "entries": self.entries}
        return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> "Lock":
        try:
            document = json.loads(data)
            if document.get("format_version") != FORMAT_VERSION:
                raise LockError(f"{source}: not a jitkern lock of format {FORMAT_VERSION}")
            keys = {str(k): [str(f) for f in v] for k, v in document["keys"].items()}
            entries = {str(f): {str(n): str(h) for n, h in files.items()} for f, files in document["entries"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise LockError(f"{source}: not a valid jitkern lock ({error})") from None
        return cls(keys, entries)

    def merged(self, other: "Lock") -> "Lock":
        return Lock({**self.keys, **other.keys}, {**self.entries, **other.entries})

    def only(self, key_names: list[str]) -> "Lock":
        """The part of the lock that these keys need."""
        keys = {name: self.keys[name] for name in key_names if name in self.keys}
        folders = {folder for needed in keys.values() for folder in needed}
        return Lock(keys, {folder: self.entries[folder] for folder in sorted(folders) if folder in self.entries})

    def owner(self, folder: str) -> str:
        """The first key that loads ``folder``, for messages; else the folder itself."""
        return next((name for name, folders in sorted(self.keys.items()) if folder in folders), f"entry {folder}")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sign(data: bytes, key: str) -> str:
    return hmac.new(key.encode(), data, hashlib.sha256).hexdigest()


def signed(data: bytes, signature: str, key: str) -> bool:
    """Whether ``signature`` (read from Redis: anything) is the HMAC of ``data``. Compared
    as bytes: ``compare_digest`` raises on a str holding a character that is not ASCII."""
    return bool(key) and hmac.compare_digest(sign(data, key).encode(), signature.encode(errors="replace"))


def mismatch(expected: Mapping[str, str], files: Mapping[str, bytes], lock: str = "the lock") -> str | None:
    """Why ``files`` (name -> bytes) are not exactly the files ``lock`` locks, else None."""
    for name in sorted(set(expected) | set(files)):
        if name not in files:
            return f"{name} is locked but missing"
        if name not in expected:
            return f"{name} is not in {lock}"
        if digest(files[name]) != expected[name]:
            return f"{name} does not match {lock} (sha256 {digest(files[name])[:12]}…, locked {expected[name][:12]}…)"
    return None


__all__ = ["LOCK_FILE", "Lock", "LockError", "digest", "mismatch", "sign", "signed"]
