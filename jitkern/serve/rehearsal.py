"""A kernel's launch rehearsed at ``load()``, so that a serving process's first request
does not run its launch code for the first time.

On the H200 a fresh process's first ``axpy`` call took 0.19 ms of host time, against
0.07 ms after one call of another binary had run the same code
(``benchmarks/device/first_launch_split.py``): Python and torch code run once in the
process run faster the next time. ``load()`` therefore runs, for each kernel it loaded,
the kernel's own checks and ``LaunchSpec`` on real tensors laid out as the kernel's
stand-ins (``warmup_inputs``), then the kernel's ``launch`` of them with an empty grid,
which takes the direct launch of a binary it holds (and remembers it for the key):
Triton's launcher returns before calling the driver, so nothing runs on the GPU.
Nothing can compile here: a launch that no binary held takes, which would go to
Triton, raises instead, and that key is skipped. It also reads a tensor as public
functions' checks read their inputs (``_read_as_checks_do``). A process with launch hooks
set (a profiler) rehearses nothing, so that the hooks see only real launches.

Measured on the H200 against no rehearsal, in fresh processes taking turns
(``benchmarks/device/first_launch_split.py``): the first call took 0.129 ms of host time
against 0.193 ms. A rehearsal of the direct launch alone saved 0.02-0.045 ms or nothing:
the kernel's checks and the tensor reads it left out are code a first call runs too.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from jitkern.kernel.grid import cdiv
from jitkern.launch.plans import input_signature
from jitkern.launch.spec import active_launch
from jitkern.layouts.stand_ins import TritonWarmupTensor

LARGEST_TENSOR_BYTES = 1 << 26  # stand-ins larger than this are not allocated: no rehearsal


def rehearse(kernel: Any) -> bool:
    """Rehearse one launch of ``kernel`` (see the module docstring); whether one ran."""
    import triton

    if _launch_hook_set(triton.knobs.runtime):
        return False
    device = torch.device(triton.runtime.driver.active.get_active_torch_device())
    for key in kernel.binaries.directly_launched_keys() if hasattr(kernel, "binaries") else ():
        try:  # a rehearsal only saves time: whatever goes wrong in it must not stop load()
            inputs = real_inputs(kernel.warmup_inputs(key), device)
            spec = kernel.spec_for(key, **inputs) if inputs is not None else None
            if spec is None or spec.key != key:
                continue
            input_signature(tuple(inputs.values()))  # what a public call's plan reads
            _read_as_checks_do(next(value for value in inputs.values() if isinstance(value, torch.Tensor)))
            active_launch.rehearsing = True  # Triton's path raises: nothing can compile
            try:
                kernel.launch(type(spec)((0,), spec.kwargs, spec.key))
            finally:
                active_launch.rehearsing = False
            return True
        except Exception:  # noqa: BLE001 - stand-ins the kernel refuses as real tensors: the next key
            continue
    return False


def _launch_hook_set(runtime: Any) -> bool:
    """Whether Triton would call a launch hook: a function set, or one added to a default
    chain. None, which users set to clear a hook, is none."""
    for name in ("launch_enter_hook", "launch_exit_hook"):
        hook, default = getattr(runtime, name), getattr(type(runtime), name)
        if hook is not None and (hook is not default or default.calls):
            return True
    return False


def _read_as_checks_do(tensor: torch.Tensor) -> None:
    """Read ``tensor`` as public functions' checks read their inputs. The first call of
    each of torch's tensor methods in a process sets up the parsing of its arguments, and
    Python fills an ABC's cache on its first ``isinstance`` check of a class: on our CPU
    machine ``is_contiguous()`` took 19 us the first time and 1.3 us the next, ``stride()``
    11 and 0.8, ``isinstance(2.0, numbers.Real)`` 16 and 2.3."""
    tensor.shape != tensor.shape or tensor.dtype != tensor.dtype or tensor.device != tensor.device  # noqa: B015
    tensor.is_contiguous(), tensor.numel(), tensor.dim(), tensor.stride(), tensor.stride(-1) if tensor.dim() else 0
    isinstance(0.5, numbers.Real), isinstance(1, numbers.Integral)


def real_inputs(stand_ins: dict[str, Any], device: torch.device) -> dict[str, Any] | None:
    """``stand_ins`` with each ``TritonWarmupTensor`` made a tensor of its dtype, shape,
    strides and alignment on ``device`` (None when one would be too large)."""
    inputs = {}
    for name, value in stand_ins.items():
        if isinstance(value, TritonWarmupTensor):
            offset = 0 if value.aligned else 1  # one element past an allocation's start: not 16-byte aligned
            if value.ptr_range() > LARGEST_TENSOR_BYTES:
                return None
            elements = cdiv(value.ptr_range(), value.element_size()) + offset
            storage = torch.empty(elements, dtype=value.dtype, device=device)
            value = storage.as_strided(value.shape, value.stride(), offset)
        inputs[name] = value
    return inputs
