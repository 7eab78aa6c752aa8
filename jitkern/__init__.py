"""jitkern: Triton kernels whose every binary is named, enumerated and warmed ahead.

The packages follow a binary's life (``docs/architecture.md``): ``kernel`` (what an author
declares), ``layouts`` (how Triton specialises a launch), ``manifest`` (what a deployment
needs), ``build`` (compiling it for a target anywhere), ``cache`` (the artifact: entries,
trust, lock, wheel, Redis), ``serve`` (a serving process's start), ``launch`` (the fast
path), ``guard`` (compiles while serving) and ``testing``. Importing jitkern installs its
cache manager, Triton's remembered build hash, the guard's mode from ``JITKERN_GUARD`` and
AMD cache keys free of Triton's install path.
"""

from jitkern import guard as _guard
from jitkern import memo as _memo
from jitkern.cache import install as _install_cache_manager
from jitkern.kernel import keys
from jitkern.kernel.arguments import Arg, Arguments, Within
from jitkern.kernel.base import JitKernel, TritonJitKernel
from jitkern.kernel.launcher import kernel_launcher
from jitkern.kernel.declare import (Config, DeclarationError, Tensor, Warm, argument, computed, derived, dtype_of,
                                    fixed, size_of, tuned)
from jitkern.kernel.tuning import Buckets, TuningSpace
from jitkern.kernel.validation import INDEX_DTYPES
from jitkern.kernel.grid import cdiv, next_power_of_2
from jitkern.launch.plans import public_call, torch_step
from jitkern.launch.spec import LaunchSpec, is_faking
from jitkern.layouts.binary_key import BinaryKey, key_fields, key_name
from jitkern.layouts.domains import LayoutDomain
from jitkern.layouts.kernel_layouts import WarmupMismatch
from jitkern.layouts.stand_ins import TritonWarmupTensor, launch_stride
from jitkern.targets import install_path_free_amd_key as _install_path_free_amd_key

Layout = LayoutDomain
"""Deprecated name of ``LayoutDomain``."""

_install_cache_manager()
_memo.install()
_guard.install_from_environment()
_install_path_free_amd_key()

__all__ = [
    "Arg",
    "Arguments",
    "BinaryKey",
    "Buckets",
    "Config",
    "DeclarationError",
    "INDEX_DTYPES",
    "Tensor",
    "Warm",
    "argument",
    "computed",
    "derived",
    "dtype_of",
    "fixed",
    "size_of",
    "JitKernel",
    "LaunchSpec",
    "Layout",
    "LayoutDomain",
    "TritonJitKernel",
    "TritonWarmupTensor",
    "TuningSpace",
    "WarmupMismatch",
    "Within",
    "cdiv",
    "kernel_launcher",
    "key_fields",
    "key_name",
    "keys",
    "launch_stride",
    "next_power_of_2",
    "is_faking",
    "public_call",
    "torch_step",
    "tuned",
]
