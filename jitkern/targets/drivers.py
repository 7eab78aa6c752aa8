"""Compiling with no GPU: a Triton driver for one target that compiles and never launches.

Triton asks its active driver for the device, the stream and the target. A driver that
answers a fixed ``GPUTarget`` and never touches a GPU lets ``JITFunction.warmup`` run on a
CPU-only machine through Triton's own argument specialisation, so the cache entries it
writes are those a GPU process of the same Triton build looks up.
"""

from __future__ import annotations

import contextlib

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime import driver

from jitkern.targets.names import parse_target, target_name


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
def compile_only(target: GPUTarget | str):
    """Within the block, Triton compiles for ``target`` (``"cuda:90"`` or a ``GPUTarget``)
    whatever this machine has."""
    previous = driver._active
    driver.set_active(CompileOnlyDriver(parse_target(target) if isinstance(target, str) else target))
    try:
        yield
    finally:
        driver._active = previous


class NoGPU(RuntimeError):
    """Something needs this machine's GPU (loading binaries, a launch), and there is none."""


def local_target() -> GPUTarget | None:
    """The target of this machine's GPU, or None when there is none."""
    try:
        return driver.active.get_current_target()
    except Exception:  # no GPU driver: Triton raises RuntimeError or an import error
        return None


def gpu_name() -> str | None:
    """This machine's GPU model as its driver names it (``NVIDIA H200``; a dry run's, named
    by ``jitkern.testing.dry_run_gpu``), or None when there is none: tuning tables are per GPU."""
    try:
        named = getattr(driver.active, "gpu_name", None)
    except Exception:  # no GPU driver
        return None
    if named:
        return named
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def compiling_only() -> bool:
    """Whether Triton's active driver is a compile-only one (a warmup for a named target)."""
    return type(driver.active) is CompileOnlyDriver
