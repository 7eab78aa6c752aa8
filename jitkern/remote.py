"""A Redis server as a shared tier of warmed cache entries.

Key layout (one Redis database per fleet, or a prefix per fleet):

- ``jitkern:entry:<folder>``: one hash per Triton cache entry (``<folder>`` is Triton's
  cache key). Field ``record`` holds JSON ``{"files": {name: sha256}, "describes":
  "kernel[key] for target", "hmac": ...}``; field ``file:<name>`` holds each file's bytes.
  It is written by one ``MULTI``/``EXEC`` (drop, then one ``HSET``) and read by one
  ``HGETALL``, so a reader sees a whole entry or none. ``hmac`` is there when the
  publisher had ``JITKERN_LOCK_KEY``.
- ``jitkern:lock:<sha256>``: a lock, addressed by its digest (``JITKERN_LOCK_DIGEST``).
- ``jitkern:deployment:<name>``: the digest of the last lock published for a deployment.

Nothing read here is trusted: ``jitkern.cache`` checks every entry against a trusted
lock before a file of it is written or loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from jitkern import lock as locks

PREFIX = "jitkern"


class RemoteUnavailable(RuntimeError):
    """Redis could not be reached, answered too slowly, or refused a write (one line)."""


@dataclass(frozen=True)
class RemoteEntry:
    files: dict[str, bytes]
    record: dict[str, Any]
    record_bytes: bytes


def entry_record(folder: str, files: dict[str, bytes], describes: str, hmac_key: str = "") -> bytes:
    record: dict[str, Any] = {"describes": describes, "files": {name: locks.digest(data) for name, data in files.items()}}
    if hmac_key:
        record["hmac"] = locks.sign(signed_part(folder, record), hmac_key)
    return json.dumps(record, sort_keys=True).encode()


def signed_part(folder: str, record: dict[str, Any]) -> bytes:
    """What an entry's HMAC covers: its folder (the Triton cache key) and file digests."""
    return json.dumps({"folder": folder, "files": record.get("files")}, sort_keys=True).encode()


class RedisStore:
    def __init__(self, url: str, timeout: float = 2.0):
        parsed = urlparse(url)
        if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
            raise ValueError(f"remote cache {url!r}: expected redis://HOST:PORT/DB")
        import redis

        self.url = url
        self._errors = redis.exceptions.RedisError
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)

    def _call(self, what: str, function, *args):
        try:
            return function(*args)
        except self._errors as error:
            raise RemoteUnavailable(f"remote cache {self.url}: {what} failed: {error}") from None

    def publish(self, folder: str, files: dict[str, bytes], describes: str, hmac_key: str = "") -> bool:
        """Write the entry whole; False when Redis already holds exactly this entry."""
        record = entry_record(folder, files, describes, hmac_key)
        name = f"{PREFIX}:entry:{folder}"
        if self._call("reading an entry", self._redis.hget, name, "record") == record:
            return False
        fields: dict[str, bytes] = {f"file:{file}": data for file, data in files.items()}
        fields["record"] = record

        def write():
            pipe = self._redis.pipeline(transaction=True)
            pipe.delete(name)
            pipe.hset(name, mapping=fields)
            pipe.execute()

        self._call("publishing an entry", write)
        return True

    def fetch(self, folder: str) -> RemoteEntry | None:
        """The entry as Redis holds it (unverified), or None when it holds none."""
        fields = self._call("reading an entry", self._redis.hgetall, f"{PREFIX}:entry:{folder}")
        if not fields or b"record" not in fields:
            return None
        record_bytes = fields.pop(b"record")
        try:
            record = json.loads(record_bytes)
        except ValueError:
            record = {}
        files = {name.decode().removeprefix("file:"): data for name, data in fields.items()}
        return RemoteEntry(files, record if isinstance(record, dict) else {}, record_bytes)

    def put_lock(self, lock: locks.Lock, deployment: str) -> str:
        data = lock.to_bytes()
        lock_digest = locks.digest(data)
        self._call("publishing the lock", self._redis.set, f"{PREFIX}:lock:{lock_digest}", data)
        self._call("publishing the lock", self._redis.set, f"{PREFIX}:deployment:{deployment}", lock_digest)
        return lock_digest

    def get_lock(self, lock_digest: str) -> bytes | None:
        return self._call("reading the lock", self._redis.get, f"{PREFIX}:lock:{lock_digest}")

    def deployment_lock_digest(self, deployment: str) -> str | None:
        value = self._call("reading the lock", self._redis.get, f"{PREFIX}:deployment:{deployment}")
        return value.decode() if value else None


__all__ = ["RedisStore", "RemoteEntry", "RemoteUnavailable", "entry_record", "signed_part"]
