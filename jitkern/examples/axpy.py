"""``out = alpha * x + y``: the smallest complete jitkern kernel.

It shows every piece a kernel needs (a declared key, stand-ins, a launcher, a public function) and gives
the CLI and tests something real to compile. Its key names only what the kernel decides (dtype, block size):
which of x, y and out are 16-byte aligned, and the class of ``n_elements``, jitkern derives from Triton.
Its public function ``axpy`` checks what its ``ARGUMENTS`` declare, alpha a float included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from jitkern import (Arg, Arguments, Config, LaunchSpec, Tensor, TritonJitKernel, argument, cdiv, dtype_of,
                     kernel_launcher, public_call)

DTYPES = Config("dtypes", list[str], choices=("float32", "float16", "bfloat16"))
BLOCK_SIZES = Config("block_sizes", list[int], default=[1024])


@triton.jit
def _axpy_kernel(X_ptr, Y_ptr, Out_ptr, alpha, n_elements, BLOCK_SIZE: tl.constexpr):
    # out[i] = alpha * x[i] + y[i], computed in float32
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(X_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(Y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(Out_ptr + offsets, (alpha * x + y).to(Out_ptr.dtype.element_ty), mask=mask)


class AxpyKernel(TritonJitKernel):
    name = "jitkern.example.axpy"
    kernel = _axpy_kernel
    stand_ins = dict(x=Tensor(("block_size",)), y=Tensor(("block_size",), "dtype"),
                     out=Tensor(("block_size",), "dtype"))

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:  # what the kernel decides; jitkern adds how Triton specialises x, y, out and n_elements
        dtype: str = dtype_of("x", warm=DTYPES)
        block_size: int = argument("block_size", constexpr="BLOCK_SIZE", warm=BLOCK_SIZES)

    def constants(self, key: CompileKey) -> dict:
        return {**super().constants(key), "enable_fp_fusion": False}  # alpha * x + y rounded twice, as PyTorch does

    @kernel_launcher
    def __call__(self, compile_key, x, y, out, alpha: float, block_size: int = 1024) -> LaunchSpec:
        n_elements = x.numel()
        return LaunchSpec(grid=(cdiv(n_elements, block_size),),
                          kwargs=dict(X_ptr=x, Y_ptr=y, Out_ptr=out, alpha=alpha, n_elements=n_elements), result=out)


ARGUMENTS = Arguments(x=Arg("*shape", tuple(getattr(torch, name) for name in DTYPES.choices), contiguous=True),
                      y=Arg("*shape", "x", contiguous=True), out=Arg("*shape", "x", contiguous=True, optional=True),
                      alpha=float)


@public_call(op="jitkern_examples::axpy", mutates=["out"], returns="out")
def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """``alpha * x + y`` for contiguous tensors of one dtype and size."""
    ARGUMENTS.check(locals())
    alpha = float(alpha)  # an int is another Triton binary (i32, and 1 is specialised): the warmed one is float
    if x.numel() >= 2**31:  # offsets are i32 in the kernel (and n_elements an i32 binary)
        raise ValueError(f"x: {x.numel()} elements; at most 2**31 - 1")
    if out is None:
        out = torch.empty_like(x)
    if x.numel():
        AxpyKernel()(x, y, out, alpha)
    return out
