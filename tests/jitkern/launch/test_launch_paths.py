"""Launch paths, guard and test helpers, through Triton's real launch path with no GPU."""

import json
import warnings

import pytest
import torch
import triton

from jitkern import BinaryKey, LayoutDomain, guard
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.manifest import recorded_entries
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


EVERY_OFFSET = LayoutDomain(unaligned=frozenset({"x", "y", "out"}))


def test_every_real_launch_finds_a_binary_that_warmup_built():
    keys = KERNEL.layouts.binary_keys(KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"]), EVERY_OFFSET)
    assert uncovered_by_warmup(sampled_launches(), {KERNEL.name: keys}) == []


def test_a_warmup_narrower_than_the_launches_is_caught_naming_the_argument():
    aligned_only = KERNEL.layouts.binary_keys(KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"]))
    uncovered = uncovered_by_warmup(sampled_launches(), {KERNEL.name: aligned_only})
    assert uncovered and all("(Triton key" in line for line in uncovered)
    assert any("x: a fp32 tensor not 16-byte aligned; warmed binaries all assume a fp32 tensor 16-byte aligned"
               in line for line in uncovered)
    assert any(line.startswith("jitkern.example.axpy[dtype=bfloat16,block_size=1024,layout=Out_ptr:*bf16")
               for line in uncovered)


def test_a_compile_key_not_warmed_is_told_from_the_nearest_warmed_key():
    """The fields to change in the manifest's config are named, not left to compare."""
    import random

    block_sizes = random.sample([128, 256, 512, 2048], 2)
    warmed = KERNEL.layouts.binary_keys(KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"], block_sizes=block_sizes))
    with record_launches(dry_run=True) as launches:
        axpy(torch.randn(300, dtype=torch.bfloat16), torch.randn(300, dtype=torch.bfloat16), 0.5)  # block 1024
        axpy(torch.randn(30, dtype=torch.float16), torch.randn(30, dtype=torch.float16), 0.5)
    bf16_1024, fp16_1024 = uncovered_by_warmup(launches, {KERNEL.name: warmed})
    assert f"the nearest warmed key differs in block_size 1024 (warmed: {block_sizes[0]})" in bf16_1024
    assert "dtype 'float16' (warmed: 'float32'), block_size 1024" in fp16_1024


def test_assert_no_compile_passes_after_warmup_and_names_a_miss():
    x, y = torch.randn(1000), torch.randn(1000)
    KERNEL.compile(KERNEL.layouts.binary_key(KERNEL.launch_spec(x=x, y=y, out=x, alpha=1.0)))
    with assert_no_compile():
        axpy(x, y, 2.0)
    with pytest.raises(UnexpectedCompile) as error:
        with assert_no_compile():
            axpy(x[1:], y[1:], 2.0)
    assert "jitkern.example.axpy[dtype=float32,block_size=1024,layout=X_ptr:*fp32 Y_ptr:*fp32 n_elements:i32]" \
        in str(error.value)
    assert "x: a fp32 tensor not 16-byte aligned; warmed binaries all assume a fp32 tensor 16-byte aligned" \
        in str(error.value)


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
    (entry,) = recorded_entries(record_file)
    assert entry["kernel"] == "jitkern.example.axpy" and len(entry["keys"]) == 1
    fields = dict(entry["keys"][0])
    recorded = BinaryKey(KERNEL.CompileKey(**{k: v for k, v in fields.items() if k != "layout"}), fields["layout"])
    assert recorded.key.dtype == "bfloat16" and "X_ptr:*bf16" in recorded.layout.split()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        axpy(x, x, 1.0)  # guard off: silent


def test_launch_hooks_fire():
    seen = []
    with triton.knobs.runtime.scope():  # the knobs as they were after, not a hook set to None
        triton.knobs.runtime.launch_enter_hook = lambda metadata: seen.append(metadata.get()["name"])
        axpy(torch.randn(64), torch.randn(64), 1.0)
    assert seen == ["_axpy_kernel"]


def test_pytest_fixture_is_registered(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("jitkern")


def test_a_miss_of_a_binary_the_process_holds_is_told_as_such(monkeypatch):
    """On another device than the binaries were loaded on (a second GPU of the process),
    Triton misses a layout the process holds. The guard said "each argument's layout was
    warmed, but not together: n_elements:i32/16", blaming an argument that was warmed."""
    from triton.runtime.driver import driver

    from jitkern import settings

    x, y = torch.randn(1000), torch.randn(1000)
    KERNEL.binaries.forget()
    try:
        with settings.scope(direct_launch=False):  # Triton's path: its binaries are per device
            KERNEL.compile(KERNEL.layouts.binary_key(KERNEL.launch_spec(x=x, y=y, out=x, alpha=1.0)))
            monkeypatch.setattr(driver.active, "device", "another device")
            with pytest.raises(UnexpectedCompile, match=r"launch missed the warmed binaries: jitkern.example.axpy\["
                                                        r"dtype=float32,block_size=1024,layout=n_elements:i32\] \(its "
                                                        r"binary was warmed, but not where Triton looked it up: on "
                                                        r"another device"):
                with assert_no_compile():
                    axpy(x, y, 2.0)
    finally:
        KERNEL.binaries.forget()  # held without direct launches: later tests prepare their own
