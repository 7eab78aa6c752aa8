import pytest
import torch
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from jitkern import TritonWarmupTensor, int_representative


def triton_class(value):
    return native_specialize_impl(CUDABackend, value, False, True, True)


INTEGERS = [0, 1, 2, 15, 16, 17, 48, 1000, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 3,
            2**32, 2**40 + 5, -(2**31) - 16, -(2**40) - 3, 2**63 - 16, 2**63, 2**63 + 16, 2**64 - 1]


@pytest.mark.parametrize("value", INTEGERS)
def test_int_representative_specialises_like_the_value(value):
    assert triton_class(int_representative(value)) == triton_class(value)


def test_int_representatives_tell_classes_apart():
    classes = {int_representative(v) for v in INTEGERS}
    assert {triton_class(v) for v in classes} == {triton_class(v) for v in INTEGERS}
    assert len(classes) == len({triton_class(v) for v in INTEGERS})


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
