"""AMD cache keys that do not depend on where Triton is installed."""

from __future__ import annotations

import functools
import hashlib
import os

AMD_KEY = "path-free"
"""How jitkern makes the key of AMD binaries, as the cache's identity record names it."""


def install_path_free_amd_key() -> None:
    """Make the cache key of AMD binaries independent of Triton's install path.

    Triton's AMD backend always links its bundled ``ocml.bc`` and ``ockl.bc`` and hashes
    its options as text (``HIPOptions.hash``), so the key holds their absolute paths: a
    cache built where Triton lives at one path is not found by a process whose Triton
    lives at another (another venv, another container layout). The NVIDIA backend hashes
    its libraries' contents instead. Here ``HIPOptions.hash`` is replaced, in every
    process that imports jitkern (warmup and serving alike), by the same text with each
    library named by its file name and the SHA-256 of its contents: the key still
    changes when a library does, and no longer when only the path does. Triton's own
    hash stays reachable as ``HIPOptions.hash.triton_hash``.
    """
    try:
        from triton.backends.amd.compiler import HIPOptions
    except ImportError:  # a Triton build without the AMD backend
        return
    if getattr(HIPOptions.hash, "triton_hash", None) is not None:
        return
    triton_hash = HIPOptions.hash

    def hash(self) -> str:  # noqa: A001 - Triton's name
        values = dict(self.__dict__)
        if values.get("extern_libs"):
            values["extern_libs"] = tuple((name, _library_identity(path)) for name, path in values["extern_libs"])
        key = "_".join(f"{name}-{value}" for name, value in values.items())
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    hash.triton_hash = triton_hash
    hash.__doc__ = install_path_free_amd_key.__doc__
    HIPOptions.hash = hash


def _library_identity(path: str) -> str:
    """``ocml.bc:sha256=<hex>``: a library's file name and contents, not its folder (a
    path that names no file stays as it is: Triton reports it when it links)."""
    try:
        digest = _file_digest(os.path.realpath(path), os.path.getmtime(path))
    except OSError:
        return path
    return f"{os.path.basename(path)}:sha256={digest}"


@functools.lru_cache(maxsize=32)
def _file_digest(path: str, modified: float) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def amd_libraries_digest() -> str | None:
    """A short digest of the device libraries Triton's AMD backend links (for the cache's
    identity record), or None without the AMD backend."""
    try:
        from triton.backends.amd import compiler as amd_compiler
    except ImportError:
        return None
    folder = os.path.join(os.path.dirname(amd_compiler.__file__), "lib")
    digests = [_library_identity(os.path.join(folder, f"{name}.bc")) for name in ("ocml", "ockl")]
    return hashlib.sha256(" ".join(digests).encode()).hexdigest()[:16]
