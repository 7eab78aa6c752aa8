"""Layouts: how Triton specialises a launch's runtime arguments, and what a deployment passes.

- ``stand_ins``: compile-only tensors Triton specialises like real ones.
- ``specialisation``: Triton's specialisation of a launch, as layout text.
- ``binary_key``: a binary's name, its compile key and its layout.
- ``domains``: the layout domain a deployment declares, and the layouts it gives.
- ``misses``: why a launch missed the warmed binaries, in words.
- ``kernel_layouts``: all of it for one kernel (``kernel.layouts``).
"""

from jitkern.layouts.binary_key import BinaryKey, key_fields, key_name
from jitkern.layouts.domains import LayoutDomain, TooManyLayouts
from jitkern.layouts.kernel_layouts import KernelLayouts, WarmupMismatch
from jitkern.layouts.stand_ins import TritonWarmupTensor, launch_stride

__all__ = ["BinaryKey", "KernelLayouts", "LayoutDomain", "TooManyLayouts", "TritonWarmupTensor", "WarmupMismatch",
           "key_fields", "key_name", "launch_stride"]
