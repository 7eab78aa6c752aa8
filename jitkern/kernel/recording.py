"""Every launch of jitkern's kernels inside a block, recorded (and run, or not): what tests
compare with a manifest's keys, and how ``tune`` finds the launch a public call makes."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from jitkern.kernel.base import TritonJitKernel
from jitkern.launch.plans import every_call_in_full
from jitkern.launch.spec import LaunchSpec


@contextlib.contextmanager
def record_launches(dry_run: bool = False) -> Iterator[list[tuple[TritonJitKernel, LaunchSpec]]]:
    """Collect ``(kernel, spec)`` for every launch inside the block; launch nothing if ``dry_run``.

    A kernel class may have a ``launch`` of its own (under Triton's interpreter, one that
    calls ``tl.dot`` refuses bf16 launches: ``jitkern.kernel.interpreter``), so each class
    defining one is wrapped, not only ``TritonJitKernel``. Public calls run in full inside
    the block (``every_call_in_full``): a planned call's launches would pass ``launch`` by."""
    launches: list[tuple[TritonJitKernel, LaunchSpec]] = []
    originals = {cls: cls.__dict__["launch"] for cls in _kernel_classes() if "launch" in cls.__dict__}

    def recording(launch: Any) -> Any:
        def recording_launch(kernel: TritonJitKernel, spec: LaunchSpec) -> None:
            launches.append((kernel, spec))
            if not dry_run:
                launch(kernel, spec)

        return recording_launch

    for cls, launch in originals.items():
        cls.launch = recording(launch)
    try:
        with every_call_in_full():
            yield launches
    finally:
        for cls, launch in originals.items():
            cls.launch = launch


def _kernel_classes() -> list[type]:
    """``TritonJitKernel`` and every subclass of it defined so far."""
    found, pending = [], [TritonJitKernel]
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.append(cls)
            pending += cls.__subclasses__()
    return found
