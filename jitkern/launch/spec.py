"""What one launch needs (``LaunchSpec``), and the launch under way in this thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

CompileKeyT = TypeVar("CompileKeyT")


@dataclass(slots=True)
class LaunchSpec(Generic[CompileKeyT]):
    """What one launch needs: the grid, the kernel's runtime arguments, the key.

    ``kwargs`` holds the arguments of the ``@triton.jit`` function that are not constexprs,
    by name; the constexprs and Triton's launch options come from the kernel's
    ``constants(key)``. ``key`` is left out by a launcher that takes ``compile_key``: jitkern
    sets it. ``result`` is what the call returns. Not frozen: it is built on every launch,
    and a frozen dataclass costs twice as much.
    """

    grid: tuple[int, ...]
    kwargs: dict[str, Any]
    key: CompileKeyT | None = None
    result: Any = None


class ActiveLaunch(threading.local):
    """The kernel and spec being launched through Triton, so compile hooks (the guard) can
    name its binary; whether launches are rehearsed (``jitkern.serve.rehearsal``), which
    must never take Triton's path; and whether a torch op's fake implementation runs
    (``jitkern.launch.ops.faking``), where kernels launch nothing and no values are read."""

    kernel: Any = None
    spec: LaunchSpec | None = None
    rehearsing: bool = False
    faking: bool = False


active_launch = ActiveLaunch()


def is_faking() -> bool:
    """Whether this call runs as a torch op's fake implementation (``jitkern.launch.ops``), on
    fake tensors whose sizes may be symbolic: a public function skips host work done only for
    its launch (a sort for the kernel, a ``dispatch`` of its own, which takes concrete values)."""
    return active_launch.faking
