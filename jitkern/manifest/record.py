"""Merging what the guard recorded while serving (``JITKERN_GUARD=record``) into a manifest.

The guard appends one JSON line per binary it saw compile at serve time,
``{"kernel": NAME, "key": {field: value, ..., "layout": ...}, "unaligned": [...], "values":
{...}}``; ``merge_record`` widens the layout domains of the manifest's entries to what the
traffic passed, and adds any other binary as an explicit ``keys`` entry.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import typing
from pathlib import Path
from typing import Any

import torch

from jitkern.layouts.binary_key import BinaryKey
from jitkern.manifest.domains import accepted_domain
from jitkern.manifest.load import load_manifest, manifest_keys
from jitkern.manifest.schema import ManifestError


def merge_record(record_file: str | Path, manifest_path: str | Path) -> int:
    """Add what the record file's launches need that ``manifest_path`` does not cover yet to
    it; returns how many binaries that adds. A launch of a compile key a ``config`` entry
    enumerates widens that entry's layout domain by what made its layout (its tensors
    unaligned, its strides' and integers' values: ``merge_domain``), so record, merge and
    warm converge to what the traffic needs; any other is added as an explicit ``keys``
    entry. The manifest is rewritten only if the result loads and covers every recorded
    binary, and atomically (a reader sees the old file or the new one): through a symlink,
    the file it points to, keeping its mode; a read-only manifest is refused, since
    replacing it would bypass the permission its owner set."""
    loaded = load_manifest(manifest_path)
    covered = {name: set(keys) for name, keys in manifest_keys(loaded).items()}
    path = Path(os.path.realpath(manifest_path))
    document = json.loads(path.read_text())
    recorded = [(item, _binary_key(loaded, item)) for item in _recorded_items(record_file)]
    unseen = [(item, binary) for item, binary in recorded if binary is None or binary not in covered.get(item["kernel"], ())]
    if not unseen:
        return 0
    for item, binary in unseen:
        entry = next((e for e in loaded.entries if binary is not None and e.config is not None
                      and e.kernel.name == item["kernel"] and binary.key in {b.key for b in e.keys}), None)
        if entry is None or not merge_domain(document["kernels"][entry.index], entry, binary, item):
            _add_key(document, item)
    merged = _write_checked(document, path, manifest_path, record_file, check=lambda merged_manifest: [
        item for item, binary in unseen
        if binary is not None and binary not in set(manifest_keys(merged_manifest).get(item["kernel"], ()))])
    return sum(map(len, manifest_keys(merged).values())) - sum(map(len, covered.values()))


def merge_domain(document_entry: dict, entry: Any, binary: Any, item: dict) -> bool:
    """Widen a ``config`` entry's layout domain (its JSON, ``document_entry``) so that it holds
    the recorded launch ``item`` of ``binary``; False when a value cannot be added (a range
    that does not hold it)."""
    layout = document_entry.setdefault("layout", {})
    unaligned = item.get("unaligned", ())
    tensors = entry.kernel.layouts.tensor_dims(binary.key)
    offsets = {tensor for tensor in tensors if entry.domain.offsets(tensor) is not None}
    for tensor in unaligned:
        if tensor not in offsets and tensor not in layout.setdefault("unaligned", []):
            layout["unaligned"].append(tensor)
    # A tensor declared by its start offsets widens by the recorded one (0: it started aligned).
    seen = {**{tensor: 0 for tensor in offsets if tensor not in unaligned}, **item.get("values", {})}
    for name, value in seen.items():
        if name in tensors and name not in offsets:
            continue  # an unaligned start where "unaligned" (any) is declared or was added above
        if entry.kernel.layouts.takes_every_class(binary.key, name, entry.domain):
            continue  # "any" already: a value would narrow it
        declared = entry.domain.values.get(name)  # the entry's own, else the manifest's
        if declared is not None and not declared.values:
            if value not in declared:
                return False  # a range: widening it is the user's call
            continue
        usual = entry.kernel.layouts.usual_value(binary.key, name)
        current = layout.get("values", {}).get(name)  # widened by an earlier line of the record
        if current is None:
            current = list(declared.values) if declared is not None else [usual] if usual is not None else []
        layout.setdefault("values", {})[name] = sorted(set(current) | {value})
    return True


def _binary_key(loaded: Any, item: dict) -> Any:
    """The recorded binary key as the manifest's kernel names it, or None (another kernel's)."""
    kernel = next((entry.kernel for entry in loaded.entries if entry.kernel.name == item["kernel"]), None)
    if kernel is None:
        return None
    fields = dict(item["key"])
    layout = fields.pop("layout", "")
    try:
        key = kernel.CompileKey(**_decoded(kernel, fields))
        return kernel.layouts.check_layout(BinaryKey(key, layout), accepted_domain(kernel, key))
    except (TypeError, ValueError):
        return None


def _decoded(kernel: Any, fields: dict) -> dict:
    """Key fields as JSON holds them, a ``torch.dtype`` field's name made the dtype again."""
    hints = typing.get_type_hints(kernel.CompileKey)
    return {name: getattr(torch, value.removeprefix("torch.")) if hints.get(name) is torch.dtype else value
            for name, value in fields.items()}


def _add_key(document: dict, item: dict) -> None:
    target = next((k for k in document["kernels"] if k["kernel"] == item["kernel"] and "keys" in k), None)
    if target is None:
        target = {"kernel": item["kernel"], "keys": []}
        document["kernels"].append(target)
    if item["key"] not in target["keys"]:
        target["keys"].append(item["key"])


def _write_checked(document: dict, path: Path, manifest_path: str | Path, record_file: str | Path,
                   check: Any) -> Any:
    """Write ``document`` over ``path`` once it loads and ``check(loaded)`` finds nothing
    uncovered (each such item added as an explicit key first); returns the loaded result."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & 0o222 or not os.access(path, os.W_OK):
        raise ManifestError(f"{manifest_path}: read-only; make it writable to merge the record into it")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        for _ in range(2):  # what the widened domains leave uncovered is added as explicit keys
            Path(temporary).write_text(json.dumps(document, indent=2) + "\n")
            try:
                merged = load_manifest(temporary)
            except ManifestError as error:  # named as the manifest, not the temporary file
                raise ManifestError(str(error).replace(temporary, f"{manifest_path} merged with {record_file}")) from None
            left = check(merged)
            if not left:
                break
            for item in left:
                _add_key(document, item)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return merged


def _recorded_items(record_file: str | Path) -> list[dict[str, Any]]:
    """The record file's lines, each checked, duplicates dropped."""
    items: list[dict[str, Any]] = []
    for number, line in enumerate(Path(record_file).read_text().splitlines(), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except ValueError as error:
                raise ValueError(f"{record_file}, line {number}: not JSON ({error})") from None
            if not (isinstance(item, dict) and isinstance(item.get("kernel"), str) and isinstance(item.get("key"), dict)):
                raise ValueError(f'{record_file}, line {number}: expected {{"kernel": NAME, "key": {{...}}}}, '
                                 f"got {line.strip()[:80]}")
            if item not in items:
                items.append(item)
    return items


def recorded_entries(record_file: str | Path) -> list[dict[str, Any]]:
    """Turn a record file into manifest ``kernels`` entries of explicit keys, one per kernel.
    A line that is not what ``jitkern.guard`` writes in record mode raises ``ValueError``
    naming the file and line."""
    keys: dict[str, list[dict[str, Any]]] = {}
    for item in _recorded_items(record_file):
        found = keys.setdefault(item["kernel"], [])
        if item["key"] not in found:
            found.append(item["key"])
    return [{"kernel": kernel, "keys": found} for kernel, found in keys.items()]
