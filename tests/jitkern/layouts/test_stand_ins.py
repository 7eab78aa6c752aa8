"""Stand-ins: their strides, the stride a launch passes, and the classes a stride takes."""

from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from jitkern import (Arg, Arguments, Config, LaunchSpec, TritonJitKernel, TritonWarmupTensor, dtype_of, kernel_launcher,
                     launch_stride, size_of)
from jitkern.layouts.specialisation import representative


def triton_class(value):
    return native_specialize_impl(CUDABackend, value, False, True, True)


INTEGERS = [0, 1, 2, 15, 16, 17, 48, 1000, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 3, 2**32, 2**40 + 5,
            2**63 - 16]


@pytest.mark.parametrize("value", INTEGERS)
def test_the_representative_of_a_value_s_class_specialises_like_the_value(value):
    kind, key = triton_class(value)
    text = repr(key) if kind == "constexpr" else f"{kind}/16" if key == "D" else kind
    assert triton_class(representative(text, value)) == triton_class(value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.int64, torch.int32])
@pytest.mark.parametrize("offset", [0, 1, 3, 8])
def test_warmup_tensor_specialises_like_a_real_tensor(dtype, offset):
    real = torch.zeros(64, dtype=dtype)[offset:]
    stand_in = TritonWarmupTensor(dtype, shape=real.shape, aligned=real.data_ptr() % 16 == 0)
    assert triton_class(stand_in) == triton_class(real)


def test_warmup_tensor_shape_and_strides():
    tensor = TritonWarmupTensor(torch.bfloat16, shape=(3, 1, 256), strides=(1024, 256, 1))
    assert tensor.stride() == (1024, 256, 1) and tensor.stride(0) == 1024
    assert tensor.shape == (3, 1, 256) and tensor.numel() == 768 and tensor.dim() == 3
    assert TritonWarmupTensor(torch.float32, shape=(2, 5)).stride() == (5, 1)
    with pytest.raises(ValueError, match="strides"):
        TritonWarmupTensor(torch.float32, shape=(2, 5), strides=(1,))


def test_a_named_stand_in_s_strides_say_whose_they_are():
    z = TritonWarmupTensor(torch.bfloat16, shape=(3, 1, 256), strides=(768, 256, 1)).named("z")
    assert z.stride(0) == 768 and (z.stride(0).tensor, z.stride(0).dim) == ("z", 0)
    assert z.stride(-1).dim == 2 and z.stride() == (768, 256, 1)


@pytest.mark.parametrize("rows, width, wide", [(1, 8, 16), (1, 8, 11), (3, 8, 11), (1, 1, 5), (0, 8, 16)])
def test_a_launch_stride_of_a_dimension_of_size_1_is_the_dense_one(rows, width, wide):
    """A one-row slice of a wider tensor is contiguous to torch, whatever its row stride:
    the launch passes the stride a dense tensor of those rows has; other sizes keep theirs."""
    sliced = torch.randn(rows + 2, wide)[1:1 + rows, :width]
    dense = torch.randn(rows, width)
    assert sliced.is_contiguous() == (rows <= 1 or width == wide)
    expected = dense.stride(0) if rows <= 1 else sliced.stride(0)
    assert launch_stride(sliced, 0) == expected and launch_stride(sliced, -1) == 1
    blocks = torch.randn(4, 1, 6)[2:3]  # a one-block cache of one-row blocks
    assert launch_stride(blocks, 0) == 6 and launch_stride(blocks, 1) == 6
    stand_in = TritonWarmupTensor(torch.float32, shape=(1, 4, 10), strides=(999, 10, 1))
    assert launch_stride(stand_in, 0) == 40


def test_a_launch_stride_of_a_dimension_of_size_1_stays_an_i32_beside_a_huge_later_stride():
    """One token whose last dimension steps 2**31 - 1 elements (the coverage checker drew it
    for Step5's ring write): the product would be an i64 no manifest warms; the stride of a
    dense tensor of the later sizes is passed instead."""
    huge = TritonWarmupTensor(torch.bfloat16, shape=(1, 1, 256), strides=(0, 0, 2**31 - 1))
    assert launch_stride(huge, 0) == launch_stride(huge, 1) == 256
    assert launch_stride(huge, 2) == 2**31 - 1


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_a_launch_stride_of_a_dimension_of_size_1_is_the_usual_one_where_given(rows):
    """A tensor usually a view of a wider one (DeepSeek V4's kv: a ``[tokens, 2W]``
    projection's first half) passes, for one row or none, the stride of that view, so the
    launch takes its stand-in's binary: the dense stride W may be another class than 2W."""
    width = 24  # W: not a multiple of 16; 2W is
    transposed = torch.randn(width, rows).t()  # one row: stride 1
    expected = 2 * width if rows <= 1 else transposed.stride(0)
    assert launch_stride(transposed, 0, usual=2 * width) == expected
    stand_in = TritonWarmupTensor(torch.float32, shape=(1, width), strides=(2 * width, 1)).named("kv")
    traced = launch_stride(stand_in, 0, usual=7)
    assert traced == 2 * width and (traced.tensor, traced.dim) == ("kv", 0)


@triton.jit
def _double_heads_kernel(Q, q_token_stride, q_head_stride, HEAD_DIM: tl.constexpr):
    # q[t, h, :] *= 2, one program per (token, head)
    at = Q + tl.program_id(0) * q_token_stride + tl.program_id(1) * q_head_stride + tl.arange(0, HEAD_DIM)
    tl.store(at, tl.load(at) * 2)


class DoubleHeads(TritonJitKernel):
    """q [tokens, heads, head_dim] dense: tokens and heads vary, the key holds head_dim."""

    name = "test.double_heads"
    kernel = _double_heads_kernel
    arguments = Arguments(q=Arg("tokens heads head_dim", (torch.bfloat16,), contiguous=True))

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("q", warm=["bfloat16"])
        head_dim: int = size_of("q", 2, constexpr="HEAD_DIM", warm=Config("head_dims", list[int]))

    @kernel_launcher
    def __call__(self, compile_key, q) -> LaunchSpec:
        return LaunchSpec(grid=(q.shape[0], q.shape[1]),
                          kwargs=dict(Q=q, q_token_stride=launch_stride(q, 0), q_head_stride=launch_stride(q, 1)))


def test_a_stride_over_varying_sizes_and_a_fixed_multiple_of_16_is_warmed_in_that_class_alone():
    """heads * 128 is a multiple of 16 whatever heads is: one binary; heads * 24 is not always."""
    stand_in = TritonWarmupTensor(torch.bfloat16, shape=(16, 16, 128), varying=(0, 1))
    assert stand_in.stride_of_sixteens(0) and stand_in.stride_of_sixteens(1)
    assert not TritonWarmupTensor(torch.bfloat16, shape=(16, 16, 24), varying=(0, 1)).stride_of_sixteens(0)
    kernel = DoubleHeads()
    for head_dim, binaries in ((128, 1), (24, 3)):
        keys = kernel.get_warmup_keys(head_dims=[head_dim])
        assert len(kernel.layouts.binary_keys(keys)) == binaries, head_dim


@pytest.mark.compiled
@pytest.mark.parametrize("head_dim", [128, 24])
def test_launches_of_any_heads_hit_the_binaries_warmed_for_them(head_dim):
    from jitkern.testing import check_coverage

    assert check_coverage(DoubleHeads(), {"head_dims": [head_dim]}, max_examples=60) > 0
