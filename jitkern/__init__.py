"""jitkern: Triton kernels whose every binary is named, enumerated and warmed ahead."""

from jitkern import keys
from jitkern.call_plan import public_call, torch_step
from jitkern.grid import cdiv, next_power_of_2
from jitkern.kernel import (
    JitKernel,
    LaunchSpec,
    TritonJitKernel,
    WarmupMismatch,
    kernel_launcher,
    key_fields,
    key_name,
)
from jitkern.specialisation import BinaryKey, Layout
from jitkern.warmup_inputs import TritonWarmupTensor, launch_stride

from jitkern import cache as _cache
from jitkern import guard as _guard
from jitkern import triton_build as _triton_build
from jitkern import targets as _targets

_cache.install()
_triton_build.install()
_guard.install_from_environment()
_targets.install_path_free_amd_key()

__all__ = [
    "cdiv",
    "next_power_of_2",
    "public_call",
    "torch_step",
    "BinaryKey",
    "Layout",
    "JitKernel",
    "LaunchSpec",
    "TritonJitKernel",
    "TritonWarmupTensor",
    "WarmupMismatch",
    "kernel_launcher",
    "key_fields",
    "key_name",
    "keys",
    "launch_stride",
]
