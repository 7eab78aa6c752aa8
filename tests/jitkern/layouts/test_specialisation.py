"""The layouts jitkern derives are those Triton's specialiser gives, for each way a
``@triton.jit`` function marks an argument."""

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, kernel_launcher
from jitkern.layouts.specialisation import _text, int_classes

_EDGES = [0, 1, 2, 15, 16, 17, 32, 2**31 - 16, 2**31 - 1]
_LARGE_EDGES = [2**31, 2**31 + 16, 2**32 + 1, 2**40]


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("specialize, align", [(True, True), (True, False), (False, True), (False, False)])
def test_an_integer_takes_the_classes_triton_gives_its_values(specialize, align, large):
    values = _EDGES + (_LARGE_EDGES if large else []) + [random.randrange(2**40 if large else 2**31)
                                                         for _ in range(50)]
    given = {_text(*native_specialize_impl(CUDABackend, value, False, specialize, align)) for value in values}
    param = SimpleNamespace(do_not_specialize=not specialize, do_not_specialize_on_alignment=not align)
    assert set(int_classes(param, large)) == given


@triton.jit(do_not_specialize_on_alignment=["offset"])
def _offset_kernel(X, offset, BLOCK: tl.constexpr):
    tl.store(X + offset + tl.arange(0, BLOCK), 0.0)


class OffsetKernel(TritonJitKernel["OffsetKernel.CompileKey"]):
    kernel = _offset_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def dispatch(self, *, block):
        return self.CompileKey(block)

    def get_warmup_keys(self, *, block: int = 16):
        return [self.dispatch(block=block)]

    def warmup_inputs(self, key):
        return dict(x=TritonWarmupTensor(torch.float32, shape=(64,)), offset=3, block=key.block)

    def constants(self, key):
        return dict(BLOCK=key.block)

    @kernel_launcher
    def __call__(self, x, offset: int, block: int):
        return LaunchSpec((1,), dict(X=x, offset=offset), self.dispatch(block=block))


def test_an_integer_not_specialised_on_alignment_is_warmed_in_the_classes_it_takes():
    """Triton marks no multiple of 16 of such an integer, only 1: a layout ``offset:i32/16``
    would be a binary no launch looks up, and its stand-ins would not specialise as named."""
    kernel = OffsetKernel()
    binaries = kernel.layouts.binary_keys(kernel.get_warmup_keys())
    assert {binary.layout for binary in binaries} == {"", "offset:1"}
    for binary in binaries:
        kernel.compile(binary)  # under the interpreter: builds its stand-ins, checks them with Triton
    x = TritonWarmupTensor(torch.float32, shape=(64,))
    for offset in [0, 1, 16, 17, random.randrange(2**31)]:
        assert kernel.layouts.binary_key(kernel.launch_spec(x, offset, 16)) in binaries


@pytest.mark.compiled
@pytest.mark.usefixtures("dry_run_gpu")
def test_each_class_of_such_an_integer_launches_directly(monkeypatch):
    """The layout picker tells the binaries apart by the classes Triton gives, so a launch
    of 16 after one of 1 takes the ``i32`` binary directly, not Triton's path."""
    kernel = OffsetKernel()
    kernel.binaries.forget()
    for binary in kernel.layouts.binary_keys(kernel.get_warmup_keys()):
        kernel.compile(binary)
    runs, run = [], kernel.kernel.run
    monkeypatch.setattr(kernel.kernel, "run", lambda *args, **kwargs: runs.append(kwargs) or run(*args, **kwargs))
    x = torch.zeros(64)
    for offset in [1, 16, 1, 17, 1, random.randrange(2**31)]:
        kernel(x, offset, 16)
    assert runs == []


@triton.jit
def _pair_sum_kernel(Pair, Out, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(Out + offsets, tl.load(Pair[0] + offsets) + tl.load(Pair[1] + offsets))


class PairSumKernel(TritonJitKernel["PairSumKernel.CompileKey"]):
    kernel = _pair_sum_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def dispatch(self, *, block):
        return self.CompileKey(block)

    def get_warmup_keys(self, *, block: int = 16):
        return [self.dispatch(block=block)]

    def warmup_inputs(self, key):
        rows = TritonWarmupTensor(torch.float32, shape=(key.block,))
        return dict(a=rows, b=rows, out=rows, block=key.block)

    def constants(self, key):
        return dict(BLOCK=key.block)

    @kernel_launcher
    def __call__(self, a, b, out, block: int):
        return LaunchSpec((1,), dict(Pair=(a, b), Out=out), self.dispatch(block=block))


def test_a_tuple_argument_is_refused_by_name_as_its_items_layouts_cannot_be_named():
    """Triton specialises each tensor of a tuple on its alignment, but the layout named the
    tuple whole: ``"unaligned": ["a"]`` warmed nothing more, a launch with ``a`` one element
    off looked up a binary no warmup built (at serve time: a compile), and the guard blamed
    another argument. Warmup now stops at the stand-ins, naming the argument."""
    kernel = PairSumKernel()
    with pytest.raises(TypeError, match="_pair_sum_kernel: runtime argument Pair is a tuple; Triton specialises "
                                        "each of its items"):
        kernel.layouts.binary_keys(kernel.get_warmup_keys())


@triton.jit(do_not_specialize=["X"])
def _unspecialised_pointer_kernel(X, BLOCK: tl.constexpr):
    tl.store(X + tl.arange(0, BLOCK), 0.0)


class UnspecialisedPointerKernel(OffsetKernel):
    name = "tests.unspecialised_pointer"
    kernel = _unspecialised_pointer_kernel

    def warmup_inputs(self, key):
        return dict(x=TritonWarmupTensor(torch.float32, shape=(64,)), offset=0, block=key.block)

    @kernel_launcher
    def __call__(self, x, offset: int, block: int):
        return LaunchSpec((1,), dict(X=x), self.dispatch(block=block))


def test_a_pointer_triton_does_not_specialise_takes_one_binary_whatever_the_layout_says():
    """``do_not_specialize`` on a pointer leaves its alignment out of Triton's key, as
    ``do_not_specialize_on_alignment`` does. A layout listing it as ``unaligned`` gave an
    aligned binary too, whose stand-ins Triton specialises as the other: the warmup of
    that key failed with WarmupMismatch."""
    from jitkern import LayoutDomain

    kernel = UnspecialisedPointerKernel()
    binaries = kernel.layouts.binary_keys(kernel.get_warmup_keys(), LayoutDomain(unaligned=frozenset({"x"})))
    for binary in binaries:
        kernel.compile(binary)  # under the interpreter: builds its stand-ins, checks them with Triton
    x = TritonWarmupTensor(torch.float32, shape=(64,), aligned=False)
    assert binaries == [kernel.layouts.binary_key(kernel.launch_spec(x, 0, 16))]
