"""Triton's whole launch path on a machine with no GPU, launching nothing."""

from __future__ import annotations

import contextlib
from typing import Iterator

from jitkern.targets import CompileOnlyDriver, parse_target


class _DryRunUtils:
    """What Triton asks a GPU driver when it loads a binary, answered for an H100/H200."""

    @staticmethod
    def get_device_properties(device):
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    @staticmethod
    def load_binary(name, kernel, shared, device):
        return 0, 0, 32, 0, 1024  # module, function, registers, spills, max threads


class DryRunDriver(CompileOnlyDriver):
    """Compiles for its target and 'launches' by calling Triton's launch hooks only."""

    utils = _DryRunUtils()

    def launcher_cls(self, src, metadata):
        def launch(grid_0, grid_1, grid_2, stream, function, packed_metadata, launch_metadata,
                   enter_hook, exit_hook, *args):
            if enter_hook is not None:
                enter_hook(launch_metadata)
            if exit_hook is not None:
                exit_hook(launch_metadata)

        return launch


@contextlib.contextmanager
def dry_run_gpu(target: str = "cuda:90", gpu: str = "NVIDIA H200") -> Iterator[None]:
    """Within the block Triton compiles for ``target`` and launches nothing, on a GPU named
    ``gpu`` (``jitkern.targets.gpu_name``: the tuning tables a load takes)."""
    from triton.runtime import driver

    previous = driver._active
    dry_run = DryRunDriver(parse_target(target))
    dry_run.gpu_name = gpu
    driver.set_active(dry_run)
    try:
        yield
    finally:
        driver._active = previous
