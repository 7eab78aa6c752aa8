"""Merging what the guard recorded while serving (``JITKERN_GUARD=record``) into a manifest.

The guard appends one JSON line per binary it saw compile at serve time,
``{"kernel": NAME, "key": {field: value, ..., "layout": ...}}``; ``merge_record`` adds
the keys a manifest does not cover yet as explicit ``keys`` entries.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from jitkern.layouts.binary_key import key_fields
from jitkern.manifest.load import load_manifest, manifest_keys
from jitkern.manifest.schema import ManifestError


def merge_record(record_file: str | Path, manifest_path: str | Path) -> int:
    """Add the record file's keys that ``manifest_path`` does not cover yet to it, as
    ``keys`` entries; returns how many. The manifest is rewritten only if the result
    loads, and atomically (a reader sees the old file or the new one): through a symlink,
    the file it points to, keeping its mode; a read-only manifest is refused, since
    replacing it would bypass the permission its owner set."""
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
    is not what ``jitkern.guard`` writes in record mode raises ``ValueError`` naming the file and line."""
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
