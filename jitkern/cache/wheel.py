"""``python -m jitkern.warmup pack``: one deployment's warmed cache as a wheel.

Installed with pip, the wheel is a read-only data folder in site-packages,
``jitkern_cache_<deployment>/cache/``, named by an entry point in the group
``jitkern.caches``; ``jitkern.cache`` reads it after the cache directory, with no
``TRITON_CACHE_DIR`` needed. It holds every entry the deployment's keys load (binaries,
metadata, host launchers), ``jitkern-identity.json`` and ``jitkern-lock.json``: the
lock an installed wheel brings is trusted like the code installed beside it.

It is tagged with the tags of the Triton wheel that made the cache (the cache is only
valid for that Triton build), and built deterministically with the stdlib ``zipfile``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import zipfile
from importlib import metadata

from jitkern.cache.identity import IDENTITY_FILE, compiler_identity, recorded_identities
from jitkern.cache.lock import LOCK_FILE, Lock, mismatch
from jitkern.cache.roots import WHEEL_DATA, WHEEL_ENTRY_POINTS, read_roots

VERSION = "1.0.0"
MAX_BYTES = 1 << 30  # zip64 works, but a deployment's cache this large means a manifest went wrong
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # deterministic archives


class PackError(RuntimeError):
    """The wheel cannot be made; one line."""


def distribution_name(deployment: str) -> str:
    return "jitkern_cache_" + re.sub(r"[^a-z0-9]+", "_", deployment.lower()).strip("_")


def triton_wheel_tags() -> list[str]:
    """The tags of the installed Triton wheel (``cp312-cp312-manylinux_2_27_x86_64``, ...),
    else this interpreter and platform's."""
    try:
        wheel = metadata.distribution("triton").read_text("WHEEL") or ""
    except metadata.PackageNotFoundError:
        wheel = ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    if tags:
        return tags
    import sysconfig

    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return [f"{python}-{python}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"]


def compressed_tag(tags: list[str]) -> str:
    """``py-abi-plat`` with each part's values joined by dots, as wheel file names write them."""
    parts = [list(dict.fromkeys(tag.split("-")[i] for tag in tags)) for i in range(3)]
    return "-".join(".".join(values) for values in parts)


def pack(lock: Lock, paths: dict[str, dict[str, str]], deployment: str, target: str, out_dir: str) -> str:
    """Write the wheel of ``lock``'s entries for ``target`` into ``out_dir``; its path.
    ``paths``: each entry's files as they were checked (``build_lock``); their bytes must
    still be the locked ones."""
    package = distribution_name(deployment)
    tags = triton_wheel_tags()
    files: dict[str, bytes] = {f"{package}/__init__.py": f'"""Warmed Triton cache of {deployment} (data only)."""\n'.encode()}
    data = f"{package}/{WHEEL_DATA}"
    for folder, locked in lock.entries.items():
        contents = {}
        for name in locked:
            with open(paths[folder][name], "rb") as file:
                contents[name] = file.read()
        problem = mismatch(locked, contents)
        if problem is not None:
            raise PackError(f"{lock.owner(folder)}: {problem} (the cache changed while it was packed)")
        files.update({f"{data}/{folder}/{name}": content for name, content in contents.items()})
        groups = [name for name in locked if name.endswith(".json") and len(locked) > 1]
        for group in groups:  # children beside the group file; jitkern.cache reads them there
            files[f"{data}/{folder}/__grp__{group}"] = json.dumps({"child_paths": {n: n for n in sorted(locked)}}).encode()
    files[f"{data}/{LOCK_FILE}"] = lock.to_bytes()
    files[f"{data}/{IDENTITY_FILE}"] = json.dumps({"makers": _makers(target)}, indent=2).encode()
    size = sum(len(content) for content in files.values())
    if size > MAX_BYTES:
        raise PackError(f"{deployment}: {size / 2**30:.1f} GiB of binaries; split it into smaller deployments")

    import triton

    dist_info = f"{package}-{VERSION}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n"
        f"Summary: jitkern warmed Triton cache of {deployment} for {target}\n"
        f"Requires-Dist: triton=={triton.__version__}\n").encode()
    files[f"{dist_info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: jitkern\nRoot-Is-Purelib: false\n"
                                   + "".join(f"Tag: {tag}\n" for tag in tags)).encode()
    files[f"{dist_info}/entry_points.txt"] = f"[{WHEEL_ENTRY_POINTS}]\n{package} = {package}\n".encode()
    files[f"{dist_info}/RECORD"] = _record(files, f"{dist_info}/RECORD")

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{package}-{VERSION}-{compressed_tag(tags)}.whl")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files, key=lambda n: (n.startswith(dist_info), n)):  # dist-info last, as pip expects
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as file:
            file.write(buffer.getvalue())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)  # nothing half-written is left behind
        raise
    return path


def _makers(target: str) -> list[dict]:
    """Who made the packed entries: the cache's recorded makers for the target, else us."""
    makers = [maker for root in read_roots()[:1] for maker in recorded_identities(root) or []
              if maker.get("target") == target]
    return makers or [compiler_identity(target)]


def _record(files: dict[str, bytes], record_name: str) -> bytes:
    lines = []
    for name in sorted(files):
        hashed = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={hashed},{len(files[name])}")
    lines.append(f"{record_name},,")
    return ("\n".join(lines) + "\n").encode()


__all__ = ["PackError", "distribution_name", "pack", "triton_wheel_tags"]
