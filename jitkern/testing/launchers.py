"""The rules a kernel's launcher (``__call__``) must keep, checked on real tensors.

``__call__`` runs on every launch that its public function's plan does not repeat, and on
warmup stand-ins, so it may only read its arguments' metadata and build a ``LaunchSpec``:

- no torch work (no allocation, no view, no arithmetic): an allocation or a copy costs
  each launch, and a plan could not repeat it;
- no read of device memory (``.item()``, ``bool(tensor)``): a device sync per launch;
- no call of one of Triton's ``constexpr_function``s from the host (``triton.cdiv``,
  ``triton.next_power_of_2``): each unwraps its arguments through Triton's constexpr
  machinery, about 2 us a call against 0.03 us for ``jitkern.cdiv``.

``check_launcher(kernel, keys)`` runs the launcher of each key on real CPU tensors laid
out as its stand-ins, watching torch's dispatcher and Python's calls, and fails naming
the kernel, the key and what it did.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.jit import ConstexprFunction

from jitkern.layouts.binary_key import key_name
from jitkern.serve.rehearsal import real_inputs


class LauncherRuleBroken(AssertionError):
    """A kernel's ``__call__`` did what a launcher must not (see the module docstring)."""


class _TorchWork(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def check_launcher(kernel: Any, keys: list[Any] | None = None, **config: Any) -> int:
    """Run ``kernel``'s launcher for each of ``keys`` (by default the keys of ``config``:
    ``get_warmup_keys(**config)``) on real CPU tensors of its stand-ins; raise
    ``LauncherRuleBroken`` at the first torch op, device read or host call of a Triton
    ``constexpr_function``. Returns how many keys were checked (stand-ins too large to
    allocate are left out)."""
    checked = 0
    for key in keys if keys is not None else kernel.get_warmup_keys(**config):
        inputs = real_inputs(kernel.warmup_inputs(key), torch.device("cpu"))
        if inputs is None:
            continue
        broken = _broken_rules(kernel, key, inputs)
        if broken:
            raise LauncherRuleBroken(f"{kernel.name}[{key_name(key)}]: __call__ {broken}; a launcher only reads its "
                                     "arguments' metadata and builds a LaunchSpec (jitkern.testing.launchers)")
        checked += 1
    return checked


def _broken_rules(kernel: Any, key: Any, inputs: dict[str, Any]) -> str:
    """What the launcher did that it must not, in words, or ""."""
    triton_calls: list[str] = []

    def watch(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code is ConstexprFunction.__call__.__code__:
            triton_calls.append(getattr(frame.f_locals.get("self"), "_fn_name", "a constexpr_function"))

    work = _TorchWork()
    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        with work:
            kernel.spec_for(key, **inputs)
    finally:
        sys.setprofile(previous)
    if triton_calls:
        return (f"calls Triton's {triton_calls[0]} from the host (a constexpr_function: use jitkern.cdiv or "
                "jitkern.next_power_of_2, or plain arithmetic)")
    if work.ops:
        reads = [op for op in work.ops if "_local_scalar_dense" in op or "is_nonzero" in op]
        if reads:
            return f"reads device memory ({reads[0]}): a sync on every launch"
        return f"runs torch work ({', '.join(dict.fromkeys(work.ops))}): allocate or check in the public function"
    return ""
