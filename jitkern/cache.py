"""The warmup cache as a deployment artifact: whole entries, who made it, read-only use.

A cache is built on one machine, copied, mounted read-only and shared by processes.
jitkern installs ``JitkernCacheManager`` as Triton's cache manager (unless the user
chose another with ``TRITON_CACHE_MANAGER``). Compared with Triton's own it

- hands out only **whole** entries: the group file parses, every file it lists is
  there and non-empty, the metadata parses, the binary is a complete ELF file. A
  damaged entry reads as absent, so Triton compiles it again and replaces it (and the
  guard, in error mode, refuses instead);
- finds an entry's files beside its group file, so a cache that was copied or mounted
  elsewhere still hits (Triton's group files hold absolute paths);
- falls back to a private directory for writes when the cache is read-only.

``jitkern-identity.json`` at the top of a cache records which compilers made it, so a
cache from another Triton build is reported as such instead of recompiling silently.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import triton
from triton.runtime.cache import FileCacheManager

from jitkern import settings

IDENTITY_FILE = "jitkern-identity.json"
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class DamagedCacheEntry(RuntimeWarning):
    """A cache entry was incomplete or unreadable and is treated as absent."""


class CacheEntryUnusable(RuntimeError):
    """Raised while ``refusing_compiles()``: the entry a load needs is missing or damaged."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


# --- whole entries ------------------------------------------------------------------


MISSING = "not in the cache"


@dataclass(frozen=True)
class EntryState:
    """What the cache holds for one compiled kernel: its files, or why it cannot be used."""

    files: dict[str, str] | None
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None


def inspect_entry(entry_dir: str, group_name: str) -> EntryState:
    """Check the entry whose group file is ``__grp__<group_name>`` in ``entry_dir``.

    ``group_name`` is the metadata file's name (``<kernel>.json``), as Triton names it.
    """
    group_path = os.path.join(entry_dir, f"__grp__{group_name}")
    if not os.path.exists(group_path):
        return EntryState(None, MISSING)
    try:
        with open(group_path, "rb") as file:
            children = json.loads(file.read()).get("child_paths")
    except (OSError, ValueError, AttributeError):
        return EntryState(None, "its group file is not valid JSON")
    if not isinstance(children, dict) or not children or not all(isinstance(p, str) for p in children.values()):
        return EntryState(None, "its group file lists no files")
    files = {}
    for child in children:
        # Beside the group file, wherever the cache was built: Triton stores absolute paths.
        path = os.path.join(entry_dir, os.path.basename(child))
        problem = _file_problem(path, child)
        if problem is not None:
            return EntryState(None, problem)
        files[child] = path
    if group_name not in files:
        return EntryState(None, f"its group lacks the metadata {group_name}")
    backend = _metadata_backend(files[group_name])
    if backend is None:
        return EntryState(None, f"metadata {group_name} is not valid JSON")
    binary = os.path.splitext(group_name)[0] + "." + _BINARY_SUFFIX.get(backend, "")
    if backend in _BINARY_SUFFIX and binary not in files:
        return EntryState(None, f"its group lacks the binary {binary}")
    return EntryState(files)


_BINARY_SUFFIX = {"cuda": "cubin", "hip": "hsaco"}


def _file_problem(path: str, name: str) -> str | None:
    try:
        size = os.path.getsize(path)
    except OSError:
        return f"{name} is missing"
    if size == 0:
        return f"{name} is empty"
    if name.endswith((".cubin", ".hsaco", ".so")) and not _whole_elf(path, size):
        return f"{name} is truncated or not an ELF file"
    return None


def _whole_elf(path: str, size: int) -> bool:
    """An ELF file whose section header table (written last by linkers) fits in the file."""
    try:
        with open(path, "rb") as file:
            header = file.read(64)
    except OSError:
        return False
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
        return False
    order = "<" if header[5] == 1 else ">"
    section_headers, = struct.unpack_from(order + "Q", header, 0x28)
    entry_size, count = struct.unpack_from(order + "HH", header, 0x3A)
    return section_headers + entry_size * count <= size


def _metadata_backend(path: str) -> str | None:
    """The metadata's target backend ("cuda"), "" if it names none, None if not JSON."""
    try:
        with open(path, "rb") as file:
            metadata = json.loads(file.read())
    except (OSError, ValueError):
        return None
    if not isinstance(metadata, dict):
        return None
    target = metadata.get("target")
    return str(target.get("backend", "")) if isinstance(target, dict) else ""


# --- Triton's cache manager ---------------------------------------------------------


_refusing = threading.local()


@contextlib.contextmanager
def refusing_compiles() -> Iterator[None]:
    """Within the block a kernel entry the cache lacks (or holds damaged) raises
    ``CacheEntryUnusable`` where Triton would have compiled it."""
    previous = getattr(_refusing, "on", False)
    _refusing.on = True
    try:
        yield
    finally:
        _refusing.on = previous


class JitkernCacheManager(FileCacheManager):
    """Triton's file cache, handing out whole entries only, and writable when read-only."""

    def __init__(self, key, override=False, dump=False):
        try:
            super().__init__(key, override, dump)
        except OSError as error:
            if override or dump or error.errno not in _UNWRITABLE:
                raise
            self.key = key  # a read-only cache without this entry: reads find nothing
            self.cache_dir = os.path.join(triton.knobs.cache.dir, key)
            self.lock_path = os.path.join(self.cache_dir, "lock")
        self._private_dir: str | None = None

    def _dirs(self) -> list[str]:
        return [self.cache_dir] + ([self._private_dir] if self._private_dir else [])

    def get_file(self, filename: str) -> str | None:
        for folder in self._dirs():
            path = os.path.join(folder, filename)
            if os.path.exists(path):
                problem = _file_problem(path, filename)
                if problem is None:
                    return path
                _warn_damaged(path, problem)
        return None

    def get_group(self, filename: str) -> dict[str, str] | None:
        state = EntryState(None, MISSING)
        for folder in self._dirs():
            state = inspect_entry(folder, filename)
            if state.usable:
                return state.files
            if state.problem != MISSING:
                _warn_damaged(os.path.join(folder, filename), state.problem)
        if getattr(_refusing, "on", False):
            raise CacheEntryUnusable(state.problem)
        return None

    def put(self, data, filename, binary=True) -> str:
        if self._private_dir is None:
            try:
                return super().put(data, filename, binary)
            except OSError as error:
                if error.errno not in _UNWRITABLE:
                    raise
                self._private_dir = os.path.join(_private_root(self.cache_dir, error), self.key)
        os.makedirs(self._private_dir, exist_ok=True)
        private = FileCacheManager.__new__(FileCacheManager)
        private.key, private.cache_dir = self.key, self._private_dir
        private.lock_path = os.path.join(self._private_dir, "lock")
        return private.put(data, filename, binary)


_private: dict[str, str] = {}


def _private_root(cache_entry_dir: str, error: OSError) -> str:
    """This process's private writable cache, created (and announced) once."""
    if "root" not in _private:
        _private["root"] = settings.current().private_cache_dir or tempfile.mkdtemp(prefix="jitkern-cache-")
        warnings.warn(
            f"jitkern: the Triton cache {os.path.dirname(cache_entry_dir)} is not writable ({error.strerror}); "
            f"this process compiles into the private directory {_private['root']}",
            RuntimeWarning, stacklevel=3,
        )
    return _private["root"]


def _warn_damaged(path: str, problem: str) -> None:
    warnings.warn(f"jitkern: damaged cache entry {path}: {problem}; it is not used", DamagedCacheEntry, stacklevel=3)


def install() -> None:
    """Make ``JitkernCacheManager`` Triton's cache manager, unless the user chose one."""
    if not os.environ.get("TRITON_CACHE_MANAGER"):
        triton.knobs.cache.manager_class = JitkernCacheManager


# --- who made a cache ---------------------------------------------------------------


def compiler_identity(target: str) -> dict[str, Any]:
    """What decides whether this process finds a cache's binaries: Triton's build (its
    cache key hashes its own sources and libtriton), ptxas (NVIDIA), the device libraries
    and how their key is made (AMD), portable paths, the Python build, the target."""
    from triton.runtime import cache as triton_cache

    from jitkern.targets import AMD_KEY, amd_libraries_digest

    identity: dict[str, Any] = {
        "triton": triton.__version__,
        "triton_build": hashlib.sha256(triton_cache.triton_key().encode()).hexdigest()[:16],
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


__all__ = ["CacheEntryUnusable", "DamagedCacheEntry", "EntryState", "IDENTITY_FILE", "JitkernCacheManager",
           "compiler_identity", "describe_identity", "foreign_maker", "inspect_entry", "install",
           "record_identity", "recorded_identities", "refusing_compiles"]
