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

from jitkern.cache import lock as locks

PREFIX = "jitkern"


class RemoteUnavailable(RuntimeError):
    """Redis could not be reached, answered too slowly, or refused a write (one line)."""


class UnreadableRemoteKey(ValueError):
    """One key in Redis is not as jitkern writes it (another type, a field name that is
    not UTF-8): whoever can write Redis can write anything, so it is refused (one line
    naming it) and the rest of Redis is still used; only a down or slow server disables it."""


@dataclass(frozen=True)
class RemoteEntry:
    files: dict[str, bytes]
    record: dict[str, Any]
    record_bytes: bytes


RECORD_FILE = "jitkern-record.json"
"""An entry's record, signed, kept beside its files in a cache directory (not in its group):
a process trusting the HMAC key then loads the entry from there as it would from Redis."""


def entry_record(folder: str, digests: dict[str, str], describes: str, hmac_key: str = "") -> bytes:
    """The record of entry ``folder`` whose files have sha256 ``digests`` (name -> hex)."""
    record: dict[str, Any] = {"describes": describes, "files": dict(digests)}
    if hmac_key:
        record["hmac"] = locks.sign(signed_part(folder, record), hmac_key)
    return json.dumps(record, sort_keys=True).encode()


def signed_part(folder: str, record: dict[str, Any]) -> bytes:
    """What an entry's HMAC covers: its folder (the Triton cache key) and file digests."""
    return json.dumps({"folder": folder, "files": record.get("files")}, sort_keys=True).encode()


def check_url(url: str) -> None:
    """Raise ``ValueError`` (one line) unless ``url`` is ``redis[s]://HOST[:PORT][/DB]``:
    a mistyped URL is the user's mistake, found before any work, not a failed connection."""
    usage = f"remote cache {url!r}: expected redis://HOST:PORT/DB"
    parsed = urlparse(url)
    if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
        raise ValueError(usage)
    try:
        parsed.port  # parsed when read: raises on a port that is not a number in range
    except ValueError as error:
        raise ValueError(f"{usage} ({error})") from None
    if parsed.path.strip("/") and not parsed.path.strip("/").isdigit():
        raise ValueError(f"{usage} (database {parsed.path.strip('/')!r} is not a number)")


class RedisStore:
    def __init__(self, url: str, timeout: float = 2.0):
        check_url(url)
        import redis

        self.url = url
        self._errors = redis.exceptions.RedisError
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)

    def _call(self, what: str, function, *args):
        try:
            return function(*args)
        except self._errors as error:
            if str(error).startswith("WRONGTYPE") and args:
                raise UnreadableRemoteKey(f"{args[0]} holds another type of value than jitkern writes") from None
            raise RemoteUnavailable(f"remote cache {self.url}: {what} failed: {error}") from None

    def ping(self) -> None:
        """Raise ``RemoteUnavailable`` unless the server answers: checked before a long run."""
        self._call("connecting", self._redis.ping)

    def publish(self, folder: str, files: dict[str, bytes], describes: str, hmac_key: str = "") -> bool:
        """Write the entry whole; False when Redis already holds exactly this entry. Every
        field is compared, so republishing repairs an entry damaged in Redis (a flipped
        byte in a file, a field added, another type under its key)."""
        record = entry_record(folder, {file: locks.digest(data) for file, data in files.items()}, describes, hmac_key)
        name = f"{PREFIX}:entry:{folder}"
        fields: dict[str, bytes] = {f"file:{file}": data for file, data in files.items()}
        fields["record"] = record
        try:
            held = self._call("reading an entry", self._redis.hgetall, name)
        except UnreadableRemoteKey:
            held = None
        if held == {field.encode(): data for field, data in fields.items()}:
            return False

        def write():
            pipe = self._redis.pipeline(transaction=True)
            pipe.delete(name)
            pipe.hset(name, mapping=fields)
            pipe.execute()

        self._call("publishing an entry", write)
        return True

    def fetch(self, folder: str) -> RemoteEntry | None:
        """The entry as Redis holds it (unverified), or None when it holds none. Raises
        ``UnreadableRemoteKey`` when its key holds something jitkern never writes."""
        name = f"{PREFIX}:entry:{folder}"
        fields = self._call("reading an entry", self._redis.hgetall, name)
        if not fields or b"record" not in fields:
            return None
        record_bytes = fields.pop(b"record")
        try:
            record = json.loads(record_bytes)
        except ValueError:
            record = {}
        try:
            files = {field.decode().removeprefix("file:"): data for field, data in fields.items()}
        except UnicodeDecodeError:
            raise UnreadableRemoteKey(f"{name} has a field name that is not UTF-8") from None
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


__all__ = ["RECORD_FILE", "RedisStore", "RemoteEntry", "RemoteUnavailable", "UnreadableRemoteKey", "check_url", "entry_record",
           "signed_part"]
