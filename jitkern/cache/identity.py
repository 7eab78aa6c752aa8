"""Who made a cache: ``jitkern-identity.json`` records each compiler that wrote to it.

Triton's cache key hashes its own build, so a cache made by another build (another
Python version of the same Triton release, say) finds nothing: ``--check`` and ``load``
compare the recorded makers with this process and say so in one line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
from typing import Any

import triton

from jitkern import settings
from jitkern.cache.roots import wheel_roots
from jitkern.targets import AMD_KEY, amd_libraries_digest

IDENTITY_FILE = "jitkern-identity.json"


def compiler_identity(target: str) -> dict[str, Any]:
    """What decides whether this process finds a cache's binaries: Triton's build (its
    cache key hashes its own sources and libtriton), ptxas (NVIDIA), the device libraries
    and how their key is made (AMD), portable paths, the Python build, the target."""
    identity: dict[str, Any] = {
        "triton": triton.__version__,
        "triton_build": triton_build(),
        "python": platform.python_version(),
        "target": target,
    }
    if target.startswith("cuda"):
        from triton.backends.nvidia.compiler import get_ptxas_version

        version = get_ptxas_version()
        release, build = re.search(r"V([\d.]+)", version), re.search(r"Build (\S+)", version)
        identity["ptxas"] = " ".join(m.group(1) for m in (release, build) if m) or version.strip()
    if target.startswith("hip"):
        identity["amd_libs"] = amd_libraries_digest()
        identity["amd_key"] = AMD_KEY
    if settings.current().portable_paths:
        identity["portable_paths"] = True
    return identity


def triton_build() -> str:
    """Triton's build, as its cache keys hash it (``triton_key()``: its sources and libtriton), in 16 hex digits."""
    from triton.runtime import cache as triton_cache

    return hashlib.sha256(triton_cache.triton_key().encode()).hexdigest()[:16]


def record_identity(cache_dir: str, identity: dict[str, str]) -> None:
    """Add ``identity`` to the cache's makers (safe when warmups run at once).

    Raises ``OSError`` when the directory cannot be written: the first write of a warmup.
    """
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, IDENTITY_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        makers = recorded_identities(cache_dir) or []
        if identity in makers:
            return
        temporary = os.path.join(cache_dir, f".{IDENTITY_FILE}.{os.getpid()}.tmp")
        with open(temporary, "w") as file:
            json.dump({"makers": makers + [identity]}, file, indent=2)
        os.replace(temporary, os.path.join(cache_dir, IDENTITY_FILE))


def recorded_identities(cache_dir: str) -> list[dict[str, Any]] | None:
    """The makers a cache records; None when it records none (or it cannot be read)."""
    try:
        with open(os.path.join(cache_dir, IDENTITY_FILE)) as file:
            makers = json.load(file).get("makers")
    except (OSError, ValueError, AttributeError):
        return None
    return [m for m in makers if isinstance(m, dict)] if isinstance(makers, list) else None


KEYED_FIELDS = ("triton", "triton_build", "ptxas", "amd_libs", "amd_key", "portable_paths", "target")
"""What Triton's cache keys depend on. The Python version is recorded for people: the
build hash already tells wheels for different Pythons apart. ``amd_key`` names how the
key of an AMD binary is made (``jitkern.targets.install_path_free_amd_key``): a cache
whose maker hashed Triton's install path into it records none."""


def foreign_maker(cache_dir: str, identity: dict[str, str]) -> dict[str, Any] | None:
    """A maker of the cache for this target that is not this compiler, when no maker
    for the target is this compiler; else None."""
    makers = [m for m in recorded_identities(cache_dir) or [] if m.get("target") == identity["target"]]
    same = [m for m in makers if all(m.get(field) == identity.get(field) for field in KEYED_FIELDS)]
    return makers[-1] if makers and not same else None


def describe_identity(identity: dict[str, Any]) -> str:
    parts = [f"Triton {identity.get('triton')} (build {identity.get('triton_build')})",
             f"Python {identity.get('python')}"]
    if identity.get("ptxas"):
        parts.append(f"ptxas {identity['ptxas']}")
    if str(identity.get("target", "")).startswith("hip"):
        parts.append(f"AMD libraries {identity.get('amd_libs')}, "
                     + (f"{identity['amd_key']} AMD keys" if identity.get("amd_key") else
                        "AMD keys holding Triton's install path (a jitkern without install_path_free_amd_key)"))
    if identity.get("portable_paths"):
        parts.append("portable paths (JITKERN_PORTABLE_PATHS=1)")
    return ", ".join(parts) + f" for {identity.get('target')}"


def foreign_cache_line(target: str, recompiles: int, total: int) -> str | None:
    """One line when this cache, or an installed cache wheel, was made for ``target`` by
    another compiler than ours, or a wheel for another target only."""
    identity = compiler_identity(target)
    maker = foreign_maker(cache_directory(), identity)
    if maker is not None:
        return (f"this cache was made by {describe_identity(maker)}; this process is {describe_identity(identity)}: "
                f"{recompiles} of {total} keys would recompile")
    for root in wheel_roots():
        makers = recorded_identities(root) or []
        wheel = os.path.basename(os.path.dirname(root))
        maker = foreign_maker(root, identity)
        if maker is not None:
            return (f"the cache wheel {wheel} was made by {describe_identity(maker)}; this process is "
                    f"{describe_identity(identity)}: {recompiles} of {total} keys would recompile")
        if makers and not any(m.get("target") == target for m in makers):
            return (f"the cache wheel {wheel} was made for {', '.join(sorted({str(m.get('target')) for m in makers}))}; "
                    f"this process serves {target}: {recompiles} of {total} keys would recompile")
    return None


def cache_directory() -> str:
    """Triton's cache directory (``TRITON_CACHE_DIR``, else ``~/.triton/cache``)."""
    return triton.knobs.cache.dir
