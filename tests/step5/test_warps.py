"""The 4-warp question (spec: "Why the Step5 kernels use one warp"), compiled for cuda:90
with no GPU: the summary kernels at 1, 2, 4 and 8 warps, and the ptxas miscompile that
made 4 warps store other bytes. ``test_gpu.py`` runs the same kernels on a GPU."""

from __future__ import annotations

import dataclasses
import re

import pytest
import triton
import triton.language as tl

from step5.ops.kernels.summary_math import encode_fp8_e4m3
from step5_testing import foreign_fp8_merges

pytestmark = pytest.mark.compiled

WARPS = (1, 2, 4, 8)


def _kernel_and_key(path: str):
    from step5.ops import summary_update as ops

    if path == "decode":
        kernel = ops.UpdateDecodeKernel()
        return kernel, kernel.get_warmup_keys(block_size=64, ring_capacity=8)[0]
    if path == "prefill":
        kernel = ops.PrefillSummaryKernel()
        return kernel, kernel.get_warmup_keys(block_size=64, ring_capacity=8)[0]
    kernel = ops.UpdateVerifyKernel()
    return kernel, kernel.get_warmup_keys(block_size=256, ring_capacity=16, draft_tokens=3)[0]


def compile_with_warps(kernel, key, num_warps: int, target: str = "cuda:90"):
    """The binary of ``key`` with ``num_warps`` (its constants, so its code paths too), for
    ``target``, from the stand-ins of ``key``'s default layout; nothing runs."""
    from jitkern import LaunchSpec
    from jitkern.layouts.specialisation import stand_ins_for
    from jitkern.targets import compile_only, parse_target

    kwargs, _ = kernel.layouts.stand_ins(key)
    spec = LaunchSpec((1,), stand_ins_for(kernel.kernel, kwargs, {}), dataclasses.replace(key, num_warps=num_warps))
    with compile_only(parse_target(target)):
        return kernel.kernel.warmup(grid=(1,), **kernel.triton_kwargs(spec))


def sass_of(binary) -> str:
    from triton.tools.disasm import get_sass

    return get_sass(binary.asm["cubin"])


@pytest.mark.parametrize("path", ["decode", "prefill", "verify"])
def test_no_fp8_pair_takes_its_upper_half_from_elsewhere_at_any_num_warps(path, triton_cache):
    """At every num_warps each fp8 conversion merges only RZ or its neighbouring pair's
    result (``foreign_fp8_merges``); the hardware conversion is kept wherever ptxas gets it
    right (1, 2 and 8 warps, so the shipped 1-warp binary is unchanged) and replaced by the
    integer encoding where it does not (4 warps: one pair per thread)."""
    from step5.ops.common import hardware_fp8_is_safe

    kernel, key = _kernel_and_key(path)
    assert key.num_warps == 1  # what ships
    for warps in WARPS:
        binary = compile_with_warps(kernel, key, warps)
        assert binary.metadata.num_warps == warps
        sass = sass_of(binary)
        assert not foreign_fp8_merges(sass), f"{path} at {warps} warps"
        hardware = hardware_fp8_is_safe(warps)
        assert hardware == (warps != 4)
        assert ("cvt.rn.satfinite.e4m3x2.f32" in binary.asm["ptx"]) == hardware, f"{path} at {warps} warps"
        assert ("F2FP.SATFINITE.E4M3" in sass) == hardware, f"{path} at {warps} warps"
    from jitkern.targets import compile_only, parse_target

    with compile_only(parse_target("cuda:90")):
        shipped = kernel.compile(key)
    assert shipped.asm["ptx"] == compile_with_warps(kernel, key, 1).asm["ptx"]


@triton.jit
def _encode_kernel(X, Y, HW_FP8: tl.constexpr):
    dim = tl.arange(0, 256)
    tl.store(Y + dim, encode_fp8_e4m3(tl.load(X + dim), HW_FP8))


def test_the_cause_ptxas_miscompiles_the_hardware_encoding_at_one_pair_per_thread(triton_cache):
    """The summary's fp8 encoding alone, hardware path, 256 values: at 4 warps (one pair
    per thread) ptxas computes the conversion's merge operand from R1 (the stack pointer),
    so every odd byte is ``0x7C | sign`` on the GPU (device notes 37); at 1, 2 and 8
    warps it is right. If this fails because ptxas got it right, a newer ptxas ships with
    Triton: ``hardware_fp8_is_safe`` may then allow 4 warps, after a GPU run of
    ``benchmarks/device/check_warps.py``."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas_version
    from triton.compiler import ASTSource

    flagged = {}
    for warps in WARPS:
        source = ASTSource(_encode_kernel, {"X": "*fp32", "Y": "*u8", "HW_FP8": "constexpr"}, {"HW_FP8": True},
                           {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})
        binary = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
        flagged[warps] = foreign_fp8_merges(sass_of(binary))
    assert [w for w, found in flagged.items() if found] == [4], (get_ptxas_version(), flagged)
    assert all(re.search(r"<-.*, R1,", line) for line in flagged[4]), flagged[4]  # the stack pointer
