"""The author API: what a kernel declares, and the helpers its launcher uses.

- ``base``: ``JitKernel``, ``TritonJitKernel`` and ``kernel_launcher``, the kernel contract.
- ``declare``: a key declared once (``dtype_of``, ``size_of``, ..., ``tuned``, ``Config``, ``Warm``,
  ``Tensor``); ``declaration``: what jitkern makes of it.
- ``tuning``: a kernel's tuning space and the winners a process took from a table.
- ``adopt``: kernels written with ``triton.autotune`` or ``triton.heuristics``, taken in.
- ``registry``: kernel classes by their stable names.
- ``keys``: enumerating compile keys from a deployment's config.
- ``grid``: host arithmetic for launchers (``cdiv``).
- ``arguments``: a public function's arguments declared once and checked (``Arg``, ``Arguments``).
- ``validation``: argument checks public functions share.
- ``settle``: a kernel's Triton cache key made independent of what was hashed before.
"""

from jitkern.kernel import keys
from jitkern.kernel.base import JitKernel, TritonJitKernel
from jitkern.kernel.launcher import kernel_launcher
from jitkern.kernel.grid import cdiv, next_power_of_2
from jitkern.launch.spec import LaunchSpec
from jitkern.layouts.binary_key import BinaryKey, key_fields, key_name
from jitkern.layouts.kernel_layouts import WarmupMismatch

__all__ = ["BinaryKey", "JitKernel", "LaunchSpec", "TritonJitKernel", "WarmupMismatch", "cdiv", "kernel_launcher",
           "key_fields", "key_name", "keys", "next_power_of_2"]
