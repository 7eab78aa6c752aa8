"""Launching a held binary without Triton's per-call work.

- ``spec``: ``LaunchSpec``, what one launch needs, and the launch under way.
- ``direct``: a binary's direct launch, its argument checks in one C call (``c_module``).
- ``picker``: which of a key's binaries a launch's layout needs.
- ``binaries``: ``BinaryTable``, what a process holds for one kernel, and its launch path.
- ``plans``: ``public_call``, a public function's checks and launches planned per input signature.
"""

from jitkern.launch.binaries import BinaryTable
from jitkern.launch.plans import public_call, torch_step
from jitkern.launch.spec import LaunchSpec, active_launch

__all__ = ["BinaryTable", "LaunchSpec", "active_launch", "public_call", "torch_step"]
