"""Launch paths, guard and test helpers, through Triton's real launch path with no GPU."""

import json
import warnings

import pytest
import torch
import triton

from jitkern import guard
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.testing import UnexpectedCompile, assert_no_compile, record_launches, uncovered_by_warmup

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]

KERNEL = AxpyKernel()


def sampled_launches():
    """Real CPU tensors as serving would pass them: odd sizes, views at odd offsets."""
    with record_launches(dry_run=True) as launches:
        for n in [1, 5, 16, 1000, 4096, 70001]:
            for dtype in (torch.float32, torch.bfloat16):
                for x_offset, out_offset in [(0, 0), (1, 0), (0, 3), (8, 8)]:
                    x = torch.randn(n + x_offset, dtype=dtype)[x_offset:]
                    out = torch.empty(n + out_offset, dtype=dtype)[out_offset:]
                    axpy(x, torch.randn(n, dtype=dtype), 0.5, out=out)
    return launches


def test_every_real_launch_finds_a_binary_that_warmup_built():
    keys = KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"], unaligned=True)
    assert uncovered_by_warmup(sampled_launches(), {KERNEL.name: keys}) == []


def test_a_warmup_that_disagrees_with_the_launch_is_caught():
    class AlignmentBlind(AxpyKernel):
        """Claims every pointer aligned at warmup: unaligned views would compile at serve time."""

        def warmup_inputs(self, key):
            inputs = super().warmup_inputs(key)
            for name in ("x", "y", "out"):
                inputs[name].aligned = True
            return inputs

        def dispatch(self, **values):
            return super().dispatch(**dict(values, x_aligned=True, y_aligned=True, out_aligned=True))

    blind = AlignmentBlind()
    launches = [(blind, spec) for _kernel, spec in sampled_launches()]
    keys = blind.get_warmup_keys(dtypes=["float32", "bfloat16"])
    uncovered = uncovered_by_warmup(launches, {blind.name: keys})
    assert uncovered and all("with Triton key" in line for line in uncovered)


def test_assert_no_compile_passes_after_warmup_and_names_a_miss():
    x, y = torch.randn(1000), torch.randn(1000)
    KERNEL.compile(KERNEL.launch_spec(x=x, y=y, out=x, alpha=1.0).key)
    with assert_no_compile():
        axpy(x, y, 2.0)
    with pytest.raises(UnexpectedCompile, match=r"jitkern.example.axpy\[dtype=float32,block_size=1024,n_elements=17,"
                                                r"x_aligned=False"):
        with assert_no_compile():
            axpy(x[1:], y[1:], 2.0)


def test_guard_error_mode_raises_before_compiling_and_names_the_manifest_entry():
    x = torch.randn(999, dtype=torch.float16)
    try:
        guard.set_mode("error")
        with pytest.raises(guard.ServeTimeCompile) as error:
            axpy(x, x, 1.0)
    finally:
        guard.set_mode("off")
    message = str(error.value)
    assert "jitkern.example.axpy[dtype=float16" in message
    entry = json.loads(message.split("a manifest entry covering it: ", 1)[1])
    assert entry["kernel"] == "jitkern.example.axpy" and entry["keys"][0]["dtype"] == "float16"


def test_guard_warn_and_record_modes(tmp_path):
    record_file = tmp_path / "unseen.jsonl"
    x = torch.randn(77, dtype=torch.bfloat16)
    try:
        guard.set_mode("warn")
        with pytest.warns(guard.ServeTimeCompileWarning, match="serve-time compile of jitkern.example.axpy"):
            axpy(x, x, 1.0)
        guard.set_mode("record", record_file)
        axpy(x[1:], x[1:], 1.0)
        axpy(x[1:], x[1:], 1.0)  # warmed by the line above: nothing new to record
    finally:
        guard.set_mode("off")
    (entry,) = guard.recorded_entries(record_file)
    assert entry["kernel"] == "jitkern.example.axpy" and len(entry["keys"]) == 1
    recorded = KERNEL.CompileKey(**entry["keys"][0])
    assert recorded.x_aligned is False and recorded.dtype == "bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        axpy(x, x, 1.0)  # guard off: silent


def test_launch_hooks_fire():
    seen = []
    triton.knobs.runtime.launch_enter_hook = lambda metadata: seen.append(metadata.get()["name"])
    try:
        axpy(torch.randn(64), torch.randn(64), 1.0)
    finally:
        triton.knobs.runtime.launch_enter_hook = None
    assert seen == ["_axpy_kernel"]


def test_pytest_fixture_is_registered(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("jitkern")
