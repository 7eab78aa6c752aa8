"""GPU targets: naming them, what kernels may use on each, and compiling for one anywhere.

- **Names.** ``cuda:<compute capability>`` (``cuda:80``, ``cuda:90``, ...) and
  ``hip:<gfx arch>`` (``hip:gfx942``, ``hip:gfx950``): ``parse_target`` turns one into
  Triton's ``GPUTarget``, ``parse_targets`` a comma-separated list into names.
- **What a kernel may use** (``Target``, from ``current()``): the target Triton compiles
  for right now (the active driver's), and with it whether inline PTX, a capability and
  programmatic dependent launch (PDL) are there. ``JITKERN_PORTABLE_PATHS=1`` answers
  "no" to all of them on any GPU, so an NVIDIA GPU runs the code paths that sm_80 and AMD
  compile. A kernel's ``constants(key)`` asks ``current()``; jitkern keeps constants per
  target (``TritonJitKernel._key_constants``) and fits Triton's launch options to the
  target (``fit_launch_options``).
- **Compiling with no GPU**: Triton asks its active driver for the device, the stream
  and the target. A driver that answers a fixed ``GPUTarget`` and never touches a GPU
  lets ``JITFunction.warmup`` run on a CPU-only machine through Triton's own argument
  specialisation, so the cache entries it writes are those a GPU process of the same
  Triton build looks up.
- **AMD caches that do not depend on where Triton is installed**
  (``install_path_free_amd_key``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime import driver

from jitkern import settings

SUPPORTED_TARGETS = ("cuda:80", "cuda:86", "cuda:89", "cuda:90", "cuda:100", "cuda:120", "hip:gfx942", "hip:gfx950")
"""The targets every shipped kernel is compiled for in CI; others of ``COMPILABLE`` may work."""

COMPILABLE = {
    "cuda": (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121),
    "hip": ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151",
            "gfx1200", "gfx1201", "gfx1250"),
}
"""The architectures Triton 3.6.0 compiles for, each checked by compiling the example kernel.
Another name of the same form fails every key: a CUDA capability its ptxas does not list
(``cuda:88``, ``cuda:999``: an LLVM error ends the worker), an AMD arch its backend has no
ISA family for (``hip:gfx940``, ``hip:gfx000``: ``unsupported target``, with pages of IR),
so ``parse_target`` refuses it up front."""

_CUDA = re.compile(r"cuda:([0-9]{2,3})")
_HIP = re.compile(r"hip:(gfx([0-9]{1,2})[0-9a-f]{2})")


def parse_target(text: str) -> GPUTarget:
    """``cuda:90`` -> ``GPUTarget("cuda", 90, 32)``, ``hip:gfx942`` -> ``GPUTarget("hip",
    "gfx942", 64)`` (a wavefront of 64 before gfx10, as Triton's AMD backend has it);
    anything else, or an architecture not in ``COMPILABLE``, is a ``ValueError``."""
    if not isinstance(text, str):
        raise ValueError(f"target {text!r}: expected a string such as cuda:90 or hip:gfx942")
    name = text.strip()
    if match := _CUDA.fullmatch(name):
        target = GPUTarget("cuda", int(match.group(1)), 32)
    elif match := _HIP.fullmatch(name):
        target = GPUTarget("hip", match.group(1), 64 if int(match.group(2)) < 10 else 32)
    else:
        raise ValueError(f"target {text!r}: expected cuda:<compute capability> (e.g. cuda:90) "
                         f"or hip:<gfx arch> (e.g. hip:gfx942)")
    known = COMPILABLE[target.backend]
    if target.arch not in known:
        raise ValueError(f"target {text!r}: Triton 3.6.0 compiles for no such GPU; its {target.backend} targets: "
                         + ", ".join(f"{target.backend}:{arch}" for arch in known))
    return target


def parse_targets(text: str) -> list[str]:
    """``"cuda:90,hip:gfx942"`` -> their names, each checked, duplicates dropped, order kept."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise ValueError(f"--target {text!r}: an empty name in the list; expected e.g. cuda:80,cuda:90,hip:gfx942")
    return list(dict.fromkeys(target_name(parse_target(part)) for part in parts))


def target_name(target: GPUTarget) -> str:
    return f"{target.backend}:{target.arch}"


# --- what a kernel may use where it is compiled --------------------------------------


@dataclass(frozen=True)
class Target:
    """The target a kernel is being compiled for (or launched on), as kernels ask about it.

    ``name`` is ``cuda:90``, ``hip:gfx942``, ``interpreter`` (Triton's CPU interpreter) or
    ``none`` (no GPU and no target named). ``portable`` (``JITKERN_PORTABLE_PATHS=1``)
    denies every feature below, so a GPU that has them compiles the portable paths.
    """

    name: str
    backend: str = ""
    arch: int | str | None = None
    portable: bool = False

    @property
    def ptx(self) -> bool:
        """Inline PTX (``tl.inline_asm_elementwise`` with PTX): NVIDIA only."""
        return self.backend == "cuda" and not self.portable

    def cuda_at_least(self, capability: int) -> bool:
        """An NVIDIA GPU of this compute capability or newer (``89``: Ada's fp8 conversions)."""
        return self.ptx and isinstance(self.arch, int) and self.arch >= capability

    @property
    def pdl(self) -> bool:
        """Programmatic dependent launch (``griddepcontrol``): NVIDIA sm_90 and newer."""
        return self.cuda_at_least(90)

    def describe(self) -> str:
        return f"{self.name} (portable paths)" if self.portable else self.name


INTERPRETER = Target("interpreter")
NO_TARGET = Target("none")


def current() -> Target:
    """The target Triton compiles for now: the interpreter's when ``TRITON_INTERPRET=1``,
    else the active driver's (a GPU's, or the compile-only driver's), else ``NO_TARGET``.
    ``JITKERN_PORTABLE_PATHS`` applies to GPU targets."""
    if settings.interpreting():
        return INTERPRETER
    try:
        gpu = driver.active.get_current_target()
    except Exception:  # no GPU driver and no compile-only driver
        return NO_TARGET
    return _target_of(gpu, settings.current().portable_paths)


@functools.lru_cache(maxsize=64)
def _target_of(gpu: GPUTarget, portable: bool) -> Target:
    return Target(target_name(gpu), gpu.backend, gpu.arch, portable)


def fit_launch_options(constants: dict[str, Any], target: Target) -> tuple[dict[str, Any], list[str]]:
    """A kernel's ``constants(key)`` as ``target``'s compiler takes them, and a note for
    each request the target cannot grant.

    - ``launch_pdl=True`` where the target has no programmatic dependent launch (before
      sm_90, AMD, portable paths, the interpreter): launched without it. The kernel's own PDL code must
      ask ``target.pdl`` too (it does not assemble before sm_90); the note says so in the
      warmup report.
    - A launch option of another backend's compiler only (``maxnreg`` on AMD): dropped,
      as Triton would refuse it. Options no compiler knows are left for Triton to refuse.
    """
    fitted, notes = dict(constants), []
    if fitted.get("launch_pdl") and not target.pdl:
        fitted["launch_pdl"] = False
        why = "portable paths (JITKERN_PORTABLE_PATHS=1)" if target.portable else \
            f"{target.name} has no programmatic dependent launch (sm_90 and newer)"
        notes.append(f"launch_pdl=True built without PDL: {why}")
    if target.backend not in ("cuda", "hip"):
        return fitted, notes  # the interpreter takes any option
    own, others = _launch_options(target.backend)
    for name in [name for name in fitted if name not in own and name in others]:
        del fitted[name]
    return fitted, notes


@functools.cache
def _launch_options(backend: str) -> tuple[frozenset[str], frozenset[str]]:
    """The option names of ``backend``'s compiler, and those of the other backends'."""
    from triton.compiler.compiler import make_backend

    examples = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}
    fields = {name: frozenset(vars(make_backend(gpu).parse_options({}))) for name, gpu in examples.items()}
    others = frozenset().union(*(names for name, names in fields.items() if name != backend))
    return fields[backend], others


# --- compiling with no GPU -------------------------------------------------------------


class CompileOnlyDriver(DriverBase):
    """A Triton driver for one target that compiles and never launches."""

    def __init__(self, target: GPUTarget):
        super().__init__()
        self.target = target
        # Triton keeps its in-process binaries per device: a name per target keeps
        # binaries of different targets (and of a real GPU) apart in one process.
        self.device = f"compile-only:{target_name(target)}"

    @classmethod
    def is_active(cls) -> bool:
        return False  # never picked by Triton on its own; installed by ``compile_only``

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> str:
        return self.device

    def get_current_stream(self, device: str | None = None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError("a compile-only driver builds no launcher")

    def get_benchmarker(self):
        raise NotImplementedError("a compile-only driver runs nothing")


@contextlib.contextmanager
def compile_only(target: GPUTarget):
    """Within the block, Triton compiles for ``target`` whatever this machine has."""
    previous = driver._active
    driver.set_active(CompileOnlyDriver(target))
    try:
        yield
    finally:
        driver._active = previous


def local_target() -> GPUTarget | None:
    """The target of this machine's GPU, or None when there is none."""
    try:
        return driver.active.get_current_target()
    except Exception:  # no GPU driver: Triton raises RuntimeError or an import error
        return None


# --- AMD cache keys that do not depend on where Triton is installed ---------------------

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
