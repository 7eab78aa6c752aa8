"""What a kernel may use on the target it is compiled for: inline PTX, a capability, PDL;
and Triton's launch options fitted to that target."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.runtime import driver

from jitkern import settings
from jitkern.targets.names import target_name


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

    @property
    def gpu_has_pdl(self) -> bool:
        """Whether this target's GPU has PDL, portable paths or not: what a public function
        launching there asks (``device_has_pdl``); a key asking for it where ``pdl`` is False
        builds the plain kernel."""
        return self.backend == "cuda" and isinstance(self.arch, int) and self.arch >= 90

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
    return target_of(gpu, settings.current().portable_paths)


@functools.lru_cache(maxsize=64)
def target_of(gpu: GPUTarget, portable: bool) -> Target:
    """The ``Target`` of a Triton ``GPUTarget`` (``portable``: ``JITKERN_PORTABLE_PATHS``)."""
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
            f"{target.name} has no programmatic dependent launch (NVIDIA sm_90 and newer have it)"
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


