"""Argument checks that kernels' public functions share, and what they decide from their
arguments' devices: whether index values are checked, whether a launch asks for PDL."""

from __future__ import annotations

import functools
from typing import Any

import torch

from jitkern import targets
from jitkern.launch.spec import active_launch
from jitkern.settings import interpreting

INDEX_DTYPES = (torch.int32, torch.int64)  # of index tensors; a tuple: `in` takes 40 ns, 240 in a dict's values()


def dtype_name(dtype: torch.dtype) -> str:
    """``int32`` for ``torch.int32``: the name compile keys, manifests and errors use."""
    return str(dtype).removeprefix("torch.")


INDEX_DTYPES_BY_NAME = {dtype_name(dtype): dtype for dtype in INDEX_DTYPES}  # as manifests name them


def check_int(name: str, value: Any, minimum: int | None = None) -> None:
    """``value`` is an int, at least ``minimum`` when given. Not a bool (``True`` would
    pass for 1), nor a float (8.5 would become 8), nor a numpy int: sizes become Triton
    arguments, and another type there is another binary."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")


def check_strides_below_i32(name: str, tensor: torch.Tensor) -> None:
    """Every stride of ``tensor`` is below 2**31. Kernels that keep integers i32
    (``large_ints`` False) have no binary for a larger stride: it would compile an i64 one."""
    if max(tensor.stride(), default=0) >= 2**31:
        raise ValueError(f"{name}: strides {tuple(tensor.stride())} must be below 2**31")


def same_device(**tensors: torch.Tensor) -> torch.device:
    """The one device of all ``tensors`` (named as the function's parameters).

    The error names the tensor that is elsewhere and one on the expected device: the one
    most of them are on (in a tie, the first named's), so one stray argument is the one blamed.
    """
    devices = [tensor.device for tensor in tensors.values()]
    if devices.count(devices[0]) == len(devices):
        return devices[0]
    expected = max(devices, key=devices.count)  # max keeps the first of equal counts
    like = next(name for name, tensor in tensors.items() if tensor.device == expected)
    for name, tensor in tensors.items():
        if tensor.device != expected:
            raise ValueError(f"{name}: on {tensor.device}, expected {expected} like {like}")
    return expected


def first_outside(values: torch.Tensor, low: int, high: int | None = None, *, padding: int | None = None,
                  where: torch.Tensor | None = None) -> int | None:
    """The position of the first of ``values`` (1-D) outside ``[low, high)`` (``high`` None:
    no upper bound), not counting ``padding`` entries nor those ``where`` is False; None when
    there is none. It reads the values: call it for CPU tensors only (on a GPU, a device sync)."""
    values = values.long()  # an int32 tensor compared with 2**31 would wrap the bound
    bad = values < low
    if high is not None:
        bad |= values >= high
    if padding is not None:
        bad &= values != padding
    if where is not None:
        bad &= where
    hits = bad.nonzero()
    return int(hits[0, 0]) if len(hits) else None


def check_values_in(name: str, values: torch.Tensor, low: int, high: int | None = None, *,
                    padding: int | None = None, where: torch.Tensor | None = None, note: str = "") -> None:
    """Index values the kernels address memory with are in ``[low, high)`` (or ``padding``),
    where ``where`` holds; else one ``ValueError`` naming the first bad entry and the range.
    CPU tensors only (``first_outside``)."""
    at = first_outside(values, low, high, padding=padding, where=where)
    if at is None:
        return
    valid = f"in [{low}, {high})" if high is not None else f">= {low}"
    if padding is not None:
        valid = f"{padding} (padding) or {valid}"
    raise ValueError(f"{name}: {name}[{at}] = {int(values[at])}; expected {valid}{note}")


def runs_on_host(tensor: torch.Tensor) -> bool:
    """Whether kernels launched on ``tensor``'s device (every argument's, checked) run in
    Triton's interpreter, on host memory: a CPU tensor with ``TRITON_INTERPRET``. There an
    index out of range reads or corrupts the process's memory, and checking the values is
    free: public functions check them (an ``Arg``'s ``Within``) where this is True. Not a GPU
    (reading values would synchronise it), nor CPU tensors compiled for a target and
    launched by nothing (compile-only tests), whose outputs, never written, hold no values
    to check, nor a torch op's fake tensors, which hold none (``jitkern.launch.ops.faking``).
    ``is_cpu``, not ``device.type``: 0.1 against 0.7 us a call (timeit, CPU machine)."""
    return tensor.is_cpu and interpreting() and not active_launch.faking


def device_has_pdl(device: torch.device) -> bool:
    """Whether launches on ``device`` may use programmatic dependent launch (PDL): an NVIDIA
    GPU of sm_90 or newer. A public function asks it to choose its key's ``launch_pdl``. CPU
    tensors have it as the target compiled for does (``dry_run_gpu("cuda:90")``: they stand for
    an H200's; the interpreter and a machine with no target: none).

    The key's binary asks the same of the target it is compiled for (``use_gdc``,
    ``Target.pdl``: NVIDIA sm_90 and newer), and the two agree: the binary a launch on a
    device takes is the one compiled for that device's target. Where the target denies PDL
    anyway (``JITKERN_PORTABLE_PATHS=1``), the key asking for it builds the plain kernel and
    jitkern launches it without PDL (``jitkern.targets.fit_launch_options``)."""
    if device.type != "cuda" or torch.version.hip is not None:  # ROCm's torch calls its GPUs cuda too
        # CPU tensors: a dry run or a compile-only test, as on the GPU of the target compiled for
        return device.type == "cpu" and targets.current().gpu_has_pdl
    return _capability_major(device.index if device.index is not None else torch.cuda.current_device()) >= 9


@functools.cache
def _capability_major(index: int) -> int:
    """Cached: asking the driver on every launch would cost host time on the hot path."""
    return torch.cuda.get_device_capability(index)[0]


def use_gdc(launch_pdl: bool) -> bool:
    """Whether a key launched with ``launch_pdl`` compiles its kernel's wait on the grid
    before it (``griddepcontrol``, inline PTX: a ``USE_GDC`` constexpr): only where the
    target being compiled for has PDL (``Target.pdl``). Elsewhere (sm_80, AMD, the CPU
    interpreter, which runs no inline PTX and has no grid to wait on) the key compiles the
    plain kernel, which jitkern launches without PDL (``jitkern.targets.fit_launch_options``)."""
    return launch_pdl and targets.current().pdl
