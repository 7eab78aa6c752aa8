"""The direct launch path: same binary as Triton's normal path, or no direct launch at all."""

import pytest
import torch

from jitkern import guard, settings
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.testing import record_launches, triton_lookup_key

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]

KERNEL = AxpyKernel()


def inputs(n, dtype=torch.float32, offset=0):
    return torch.randn(n + offset, dtype=dtype)[offset:], torch.randn(n, dtype=dtype)


def test_direct_launch_uses_the_binary_the_normal_path_would():
    for key in KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"], unaligned=True):
        KERNEL.compile(key)
    with record_launches() as launches:
        for n in [1, 3, 16, 1000, 5003]:
            for dtype in (torch.float32, torch.bfloat16):
                for offset in (0, 1):
                    axpy(*inputs(n, dtype, offset), 2.0)
    binaries = KERNEL.kernel.device_caches["compile-only:cuda:90"][0]
    for kernel, spec in launches:
        direct = KERNEL._direct_launches[spec.key]
        assert direct.binary is binaries[triton_lookup_key(kernel, spec)], kernel.describe(spec.key)


def test_a_call_outside_the_warmed_specialisation_takes_the_normal_path():
    class AlignmentBlind(AxpyKernel):
        """Its key ignores alignment, so one key stands for several Triton binaries."""

        def dispatch(self, **values):
            return super().dispatch(**dict(values, x_aligned=True, y_aligned=True, out_aligned=True))

    blind = AlignmentBlind()
    x, y = inputs(1000)
    blind(x, y, x, 1.0)  # first call: Triton's path, then the key gets its direct launch
    key = blind.launch_spec(x=x, y=y, out=x, alpha=1.0).key
    assert key in blind._direct_launches
    unaligned_x, _ = inputs(1000, offset=1)
    try:
        guard.set_mode("error")
        blind(x, y, x, 1.0)  # same specialisation: direct, nothing for the guard to see
        with pytest.raises(guard.ServeTimeCompile, match="x_aligned=True"):
            blind(unaligned_x, y, x, 1.0)  # same key, other alignment: not the direct binary
        with pytest.raises(guard.ServeTimeCompile):
            blind(torch.randn(16), torch.randn(16), torch.randn(16), 1.0)  # integer class 16, not 17
    finally:
        guard.set_mode("off")


def test_launch_hooks_fire_on_the_direct_path():
    import triton

    x, y = inputs(100)
    axpy(x, y, 1.0)  # prepares the direct launch
    seen = []
    triton.knobs.runtime.launch_enter_hook = lambda metadata: seen.append(metadata.get()["name"])
    try:
        axpy(x, y, 1.0)
    finally:
        triton.knobs.runtime.launch_enter_hook = None
    assert seen == ["_axpy_kernel"]


def test_direct_launch_can_be_turned_off():
    x, y = inputs(100)
    with settings.scope(direct_launch=False):
        axpy(x, y, 1.0)
    assert not KERNEL._direct_launches  # every launch takes Triton's own path
    axpy(x, y, 1.0)
    assert KERNEL._direct_launches


def test_every_shipped_kernel_takes_the_binary_the_normal_path_would(monkeypatch):
    """Sampled deployment-shaped calls of every shipped kernel (benchmarks/launch_samples.py),
    launched twice: the second launch goes direct, through the binary Triton's own path
    looked up for the first."""
    from pathlib import Path

    from jitkern import registry

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from benchmarks import launch_samples

    for name in registry.kernel_names():
        registry.get_kernel(name).forget_binaries()
    with record_launches() as first:
        launch_samples.drive_all("cpu")
    with record_launches() as second:
        launch_samples.drive_all("cpu")
    launched = {kernel.name for kernel, _ in first}
    assert launched >= {name for name in registry.kernel_names() if not name.startswith("jitkern.")}, launched
    for kernel, spec in second:
        direct = kernel._direct_launches[spec.key]
        binaries = kernel.kernel.device_caches["compile-only:cuda:90"][0]
        assert direct.binary is binaries[triton_lookup_key(kernel, spec)], kernel.describe(spec.key)
