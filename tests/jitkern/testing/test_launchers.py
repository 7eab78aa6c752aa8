"""``check_launcher``: every shipped kernel's launcher keeps the rules, and a launcher that
breaks one is named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import triton

from jitkern import LaunchSpec, Tensor, TritonJitKernel, argument, dtype_of, kernel_launcher
from jitkern.examples.axpy import _axpy_kernel
from jitkern.manifest import load_manifest
from jitkern.testing.launchers import LauncherRuleBroken, check_launcher

MANIFESTS = sorted((Path(__file__).resolve().parents[3] / "warmup_manifests").glob("*.json"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.stem)
def test_every_shipped_launcher_only_reads_metadata(path):
    checked = 0
    for entry in load_manifest(path).entries:
        checked += check_launcher(entry.kernel, list(dict.fromkeys(binary.key for binary in entry.keys)))
    assert checked


def _kernel(name: str, body):
    """An axpy kernel whose launcher runs ``body(x)`` before building its spec."""

    class Broken(TritonJitKernel):
        kernel = _axpy_kernel
        stand_ins = dict(x=Tensor((64,)), y=Tensor((64,), "dtype"), out=Tensor((64,), "dtype"), alpha=1.5)

        @dataclass(frozen=True, kw_only=True)
        class CompileKey:
            dtype: str = dtype_of("x", warm=["float32"])
            block_size: int = argument("block_size", constexpr="BLOCK_SIZE", warm=[64])

        @kernel_launcher
        def __call__(self, compile_key, x, y, out, alpha: float, block_size: int = 64) -> LaunchSpec:
            grid = body(x)
            return LaunchSpec(grid=grid, kwargs=dict(X_ptr=x, Y_ptr=y, Out_ptr=out, alpha=alpha, n_elements=x.numel()))

    Broken.__qualname__ = Broken.name = name
    return Broken()


@pytest.mark.parametrize("body, said", [
    (lambda x: (triton.cdiv(x.numel(), 64),), "calls Triton's triton.cdiv from the host"),
    (lambda x: (torch.empty(1) is not None and 1,), "runs torch work (aten.empty"),
    (lambda x: ((x + 1).numel() // 64,), "runs torch work (aten.add"),
    (lambda x: (1,) if bool(x.sum() > -1e9) else (2,), "reads device memory"),
    (lambda x: (x.contiguous().numel() // 64,), None),  # a contiguous tensor's contiguous() is itself: no work
], ids=["triton-cdiv", "allocates", "computes", "reads", "metadata-only"])
def test_a_launcher_breaking_a_rule_is_named(body, said):
    kernel = _kernel(f"test.broken_launcher_{abs(hash(said))}", body)
    if said is None:
        assert check_launcher(kernel) == 1
        return
    with pytest.raises(LauncherRuleBroken, match=rf"test.broken_launcher_\d+\[dtype=float32,block_size=64\]: __call__ "
                                                 rf"{said.replace('(', '[(]')}"):
        check_launcher(kernel)
