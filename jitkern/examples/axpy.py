"""``out = alpha * x + y``: the smallest complete jitkern kernel.

It shows every piece a kernel needs (key, dispatch, warmup keys, stand-in inputs,
launcher, public function) and gives the CLI and tests something real to compile. Its
key names only what the kernel decides (dtype, block size): which of x, y and out are
16-byte aligned, and the class of ``n_elements``, jitkern derives from Triton.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor
from jitkern import public_call
from jitkern import cdiv, kernel_launcher, keys

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@triton.jit
def _axpy_kernel(X_ptr, Y_ptr, Out_ptr, alpha, n_elements, BLOCK_SIZE: tl.constexpr):
    # out[i] = alpha * x[i] + y[i], computed in float32
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(X_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(Y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(Out_ptr + offsets, (alpha * x + y).to(Out_ptr.dtype.element_ty), mask=mask)


class AxpyKernel(TritonJitKernel["AxpyKernel.CompileKey"]):
    name = "jitkern.example.axpy"
    kernel = _axpy_kernel

    @dataclass(frozen=True)
    class CompileKey:  # what the kernel decides; jitkern adds how Triton specialises x, y, out and n_elements
        dtype: str
        block_size: int

    def dispatch(self, *, dtype: torch.dtype, block_size: int) -> CompileKey:
        return self.CompileKey(dtype=str(dtype).removeprefix("torch."), block_size=block_size)

    def get_warmup_keys(self, *, dtypes: list[str], block_sizes: list[int] = [1024]) -> list[CompileKey]:  # noqa: B006
        unknown = sorted(set(dtypes) - set(_DTYPES))
        if unknown:
            raise ValueError(f"dtypes: {unknown} not supported; use {sorted(_DTYPES)}")
        rows = keys.product(dtype=[_DTYPES[name] for name in dtypes], block_size=block_sizes)
        return keys.unique_keys(self.dispatch, rows)

    def warmup_inputs(self, key: CompileKey) -> dict[str, Any]:
        stand_in = TritonWarmupTensor(_DTYPES[key.dtype], shape=(key.block_size,))
        return dict(x=stand_in, y=stand_in, out=stand_in, alpha=1.5, block_size=key.block_size)

    def constants(self, key: CompileKey) -> dict[str, Any]:
        return dict(
            BLOCK_SIZE=key.block_size,
            enable_fp_fusion=False,  # alpha * x + y rounded twice, as PyTorch computes it
        )

    @kernel_launcher
    def __call__(self, x, y, out, alpha: float, block_size: int = 1024) -> LaunchSpec:
        n_elements = x.numel()
        return LaunchSpec(
            grid=(cdiv(n_elements, block_size),),
            kwargs=dict(X_ptr=x, Y_ptr=y, Out_ptr=out, alpha=alpha, n_elements=n_elements),
            key=self.dispatch(dtype=x.dtype, block_size=block_size),
            result=out,
        )


@public_call
def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """``alpha * x + y`` for contiguous tensors of one dtype and size."""
    for name, tensor in (("x", x), ("y", y), ("out", out)):
        if not isinstance(tensor, torch.Tensor) and not (name == "out" and tensor is None):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if x.dtype not in _DTYPES.values():
        raise ValueError(f"x: dtype {x.dtype} not supported; use one of {sorted(_DTYPES)}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ValueError(f"alpha: expected a float, got {type(alpha).__name__}")
    alpha = float(alpha)  # an int is another Triton binary (i32, and 1 is specialised): the warmed one is float
    if out is None:
        out = torch.empty_like(x)
    for name, tensor in (("y", y), ("out", out)):
        if tensor.shape != x.shape or tensor.dtype != x.dtype or tensor.device != x.device:
            raise ValueError(f"{name}: expected {x.dtype} {tuple(x.shape)} on {x.device} like x, got "
                             f"{tensor.dtype} {tuple(tensor.shape)} on {tensor.device}")
    for name, tensor in (("x", x), ("y", y), ("out", out)):
        if not tensor.is_contiguous():
            raise ValueError(f"{name}: must be contiguous")
    if x.numel() >= 2**31:  # offsets are i32 in the kernel (and n_elements an i32 binary)
        raise ValueError(f"x: {x.numel()} elements; at most 2**31 - 1")
    if x.numel():
        AxpyKernel()(x, y, out, alpha)
    return out
