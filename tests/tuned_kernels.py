"""Small tuned kernels for the tuning tests: one declaring its space, one written with
``triton.autotune`` and ``triton.heuristics``; cheap to compile and to interpret.
A manifest naming this module (``tuned_kernels``) warms them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from jitkern import (Buckets, Config, LaunchSpec, Tensor, TritonJitKernel, TuningSpace, cdiv, computed, dtype_of,
                     kernel_launcher, size_of, tuned)

SIZES = Buckets((1, 1024, 65536))  # a call of n elements: the last <= n
CONFIGS = [dict(block=64, num_warps=1), dict(block=256, num_warps=2), dict(block=1024, num_warps=4)]


@triton.jit(do_not_specialize=["n"])
def _double_kernel(X, Out, n, BLOCK: tl.constexpr):
    # out = 2 * x
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(Out + offsets, tl.load(X + offsets, mask=mask) * 2, mask=mask)


def double_inputs(key, device, *, size: int) -> dict:
    """``size`` elements: the bucket's first size."""
    x = torch.randn(size, dtype=getattr(torch, key.dtype), device=device)
    return dict(x=x, out=torch.empty_like(x))


class TunedDouble(TritonJitKernel):
    name = "test.tuned_double"
    kernel = _double_kernel
    tuning = TuningSpace(CONFIGS, default=lambda size: CONFIGS[0 if size < 1024 else 2], inputs=double_inputs,
                         by=dict(size=computed(lambda x: SIZES.of(x.numel()),
                                               warm=Config("max_size", int, default=65536, expand=SIZES.upto))))

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("x", warm=Config("dtypes", list[str], default=["float32"]))
        block: int = tuned(constexpr="BLOCK")
        num_warps: int = tuned(option="num_warps")

    stand_ins = dict(x=Tensor((4096,)), out=Tensor((4096,), "dtype"))

    @kernel_launcher
    def __call__(self, compile_key, x, out) -> LaunchSpec:
        return LaunchSpec(grid=(cdiv(x.numel(), compile_key.block),), kwargs=dict(X=x, Out=out, n=x.numel()),
                          result=out)


@triton.autotune([triton.Config({"BLOCK": 128}, num_warps=2), triton.Config({"BLOCK": 512}, num_warps=4)],
                 key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit(do_not_specialize=["n"])
def _autotuned_scale_kernel(X, Out, n, scale, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    # out = x * scale (EVEN: n is a multiple of BLOCK, no mask)
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(Out + offsets, tl.load(X + offsets) * scale)
    else:
        mask = offsets < n
        tl.store(Out + offsets, tl.load(X + offsets, mask=mask) * scale, mask=mask)


class AutotunedScale(TritonJitKernel):
    """Adopted: BLOCK, num_warps and num_stages become tuned fields of its key (the autotuner's
    configs; num_ctas, Triton's 1 in each, does not), EVEN a constant of the key (the heuristic,
    which reads n)."""

    name = "test.autotuned_scale"
    kernel = _autotuned_scale_kernel
    tuning = TuningSpace(inputs=lambda key, device: dict(x=torch.randn(key.n, device=device),
                                                         out=torch.empty(key.n, device=device), scale=0.5))

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        n: int = size_of("x", 0, warm=Config("sizes", list[int], default=[4096]))  # the autotuner's key

    stand_ins = dict(x=Tensor(("n",), torch.float32), out=Tensor(("n",), torch.float32), scale=0.5)

    @kernel_launcher
    def __call__(self, compile_key, x, out, scale: float) -> LaunchSpec:
        return LaunchSpec(grid=(cdiv(x.numel(), compile_key.BLOCK),),
                          kwargs=dict(X=x, Out=out, n=x.numel(), scale=scale), result=out)
