"""Watching compiles in a serving process.

Once serving starts, a launch that misses the binaries warmup loaded means a compile
(or a cache load) on somebody's request. The guard sees each one through Triton's
hooks and, by mode: ``off`` ignores it, ``warn`` warns, ``error`` raises
``ServeTimeCompile`` before anything compiles, ``record`` appends the key to a JSON-lines
file whose lines are ready to paste into a manifest's ``keys``. Explicit warmups
(``kernel.compile``, the CLI) are never flagged.

Set the mode in code (``jitkern.guard.set_mode("error")``) or with ``JITKERN_GUARD``;
``JITKERN_GUARD_RECORD`` names the record file.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from typing import Any

from jitkern import hooks, settings
from jitkern.kernel import active_launch, key_fields


class ServeTimeCompile(RuntimeError):
    """A launch at serve time needed a binary that warmup did not load."""


class ServeTimeCompileWarning(RuntimeWarning):
    pass


_state: dict[str, Any] = {"mode": "off", "record_file": None}
_recorded: set[tuple[str, str]] = set()
_lock = threading.Lock()


def set_mode(mode: str, record_file: str | Path | None = None) -> None:
    """Turn the guard to ``off``, ``warn``, ``error`` or ``record``."""
    if mode not in settings.GUARD_MODES:
        raise ValueError(f"guard mode {mode!r}: expected one of {', '.join(settings.GUARD_MODES)}")
    _state["mode"] = mode
    _state["record_file"] = Path(record_file or settings.current().guard_record_file)
    if mode == "off":
        hooks.remove_watchers(on_cache_miss=_on_cache_miss)
    else:
        hooks.add_watchers(on_cache_miss=_on_cache_miss)


def mode() -> str:
    return _state["mode"]


def install_from_environment() -> None:
    """Apply ``JITKERN_GUARD`` (called on ``import jitkern``; off costs nothing)."""
    configured = settings.current()
    if configured.guard_mode != "off":
        set_mode(configured.guard_mode, configured.guard_record_file)


def describe_miss(fn: Any) -> tuple[str, dict[str, Any] | None]:
    """What missed, in words, and the manifest entry that would have covered it. When the
    process holds binaries of the launch's key, but none of its layout, the words say
    which argument differs and how; else which fields of the key differ from the nearest
    key it holds."""
    kernel, spec = active_launch.kernel, active_launch.spec
    if kernel is None or spec is None:
        name = getattr(fn, "name", None) or repr(fn)
        return f"Triton kernel {name} (not launched through a jitkern kernel)", None
    binary = kernel.binary_key(spec)
    warmed = kernel.warmed_layouts(spec.key)
    why = f" ({kernel.explain_miss(binary, warmed) if warmed else kernel.explain_unwarmed_key(spec.key, kernel.warmed_keys())})"
    return f"{kernel.describe(binary)}{why}", {"kernel": kernel.name, "keys": [key_fields(binary)]}


def _on_cache_miss(*, fn, is_manual_warmup: bool, **_: Any) -> None:
    if is_manual_warmup:
        return
    what, entry = describe_miss(fn)
    covering = f"; a manifest entry covering it: {json.dumps(entry)}" if entry else ""
    message = f"serve-time compile of {what}{covering}"
    current = _state["mode"]
    if current == "error":
        raise ServeTimeCompile(message)
    if current == "warn":
        warnings.warn(message, ServeTimeCompileWarning, stacklevel=2)
    elif current == "record" and entry is not None:
        _record(entry)


def _record(entry: dict[str, Any]) -> None:
    line = json.dumps({"kernel": entry["kernel"], "key": entry["keys"][0]}, sort_keys=True)
    with _lock:
        if (entry["kernel"], line) in _recorded:
            return
        _recorded.add((entry["kernel"], line))
        with open(_state["record_file"], "a") as record:
            record.write(line + "\n")


def merge_record(record_file: str | Path, manifest_path: str | Path) -> int:
    """Add the record file's keys that ``manifest_path`` does not cover yet to it, as
    ``keys`` entries; returns how many. The manifest is rewritten only if the result
    loads, and atomically (a reader sees the old file or the new one): through a symlink,
    the file it points to, keeping its mode; a read-only manifest is refused, since
    replacing it would bypass the permission its owner set."""
    import os
    import stat
    import tempfile

    from jitkern.kernel import key_fields
    from jitkern.manifest import ManifestError, load_manifest, manifest_keys

    covered = {name: [key_fields(key) for key in keys]
               for name, keys in manifest_keys(load_manifest(manifest_path)).items()}
    path = Path(os.path.realpath(manifest_path))
    document = json.loads(path.read_text())
    added = 0
    for entry in recorded_entries(record_file):
        new = [key for key in entry["keys"] if key not in covered.get(entry["kernel"], [])]
        if not new:
            continue
        target = next((k for k in document["kernels"] if k["kernel"] == entry["kernel"] and "keys" in k), None)
        if target is None:
            target = {"kernel": entry["kernel"], "keys": []}
            document["kernels"].append(target)
        target["keys"].extend(new)
        added += len(new)
    if added:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if not mode & 0o222 or not os.access(path, os.W_OK):
            raise ManifestError(f"{manifest_path}: read-only; make it writable to merge the record into it")
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(handle, "w") as file:
            file.write(json.dumps(document, indent=2) + "\n")
        try:
            try:
                load_manifest(temporary)
            except ManifestError as error:  # named as the manifest, not the temporary file
                raise ManifestError(str(error).replace(temporary, f"{manifest_path} merged with {record_file}")) from None
            os.chmod(temporary, mode)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    return added


def recorded_entries(record_file: str | Path) -> list[dict[str, Any]]:
    """Turn a record file into manifest ``kernels`` entries, one per kernel. A line that
    is not what ``_record`` writes raises ``ValueError`` naming the file and line."""
    keys: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(Path(record_file).read_text().splitlines(), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except ValueError as error:
                raise ValueError(f"{record_file}, line {number}: not JSON ({error})") from None
            if not (isinstance(item, dict) and isinstance(item.get("kernel"), str) and isinstance(item.get("key"), dict)):
                raise ValueError(f'{record_file}, line {number}: expected {{"kernel": NAME, "key": {{...}}}}, '
                                 f"got {line.strip()[:80]}")
            found = keys.setdefault(item["kernel"], [])
            if item["key"] not in found:
                found.append(item["key"])
    return [{"kernel": kernel, "keys": found} for kernel, found in keys.items()]
