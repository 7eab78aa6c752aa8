"""The kernel model on jitkern's example kernel, under the interpreter."""

from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl

from jitkern import JitKernel, LayoutDomain, WarmupMismatch, key_name
from jitkern.kernel import registry
from jitkern.examples.axpy import AxpyKernel, axpy


@pytest.mark.parametrize("n", [1, 7, 1024, 3001])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_axpy_matches_reference_and_writes_every_element(n, dtype):
    x, y = torch.randn(n + 1, dtype=dtype)[1:], torch.randn(n, dtype=dtype)  # x unaligned
    out = torch.full((n,), float("nan"), dtype=dtype)
    axpy(x, y, -0.75, out=out)
    expected = (-0.75 * x.float() + y.float()).to(dtype)
    # float32 is exact (no FMA); a bf16 store may land one bf16 step away (the interpreter's
    # rounding of bf16 differs from torch's), never more.
    one_step = 0 if dtype == torch.float32 else 2**-7
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected, rtol=one_step, atol=0)


def test_axpy_rejects_bad_inputs_by_name():
    x = torch.randn(8)
    with pytest.raises(ValueError, match=r"^y: shape = \(9,\), but x has shape = \(8,\)$"):
        axpy(x, torch.randn(9), 1.0)
    with pytest.raises(ValueError, match="^x: expected float32 or float16 or bfloat16 "):
        axpy(torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32), 1.0)
    with pytest.raises(ValueError, match="out: must be contiguous"):
        axpy(x, x, 1.0, out=torch.empty(16)[::2])


def test_kernels_are_singletons_and_registered_by_name():
    assert AxpyKernel() is AxpyKernel()
    assert registry.get_kernel("jitkern.example.axpy") is AxpyKernel()
    with pytest.raises(registry.UnknownKernel, match="unknown kernel 'nope'"):
        registry.get_kernel("nope")


def test_every_warmup_key_round_trips_through_the_launch_path():
    kernel = AxpyKernel()
    every_offset = LayoutDomain(unaligned=frozenset({"x", "y", "out"}))
    binaries = kernel.layouts.binary_keys(kernel.get_warmup_keys(dtypes=["float32", "bfloat16"], block_sizes=[256, 1024]),
                                  every_offset)
    assert len(binaries) == 2 * 2 * 8 * 3  # dtypes x block sizes x alignments x classes of n_elements
    for binary in binaries:
        assert kernel.launch_spec(**kernel.warmup_inputs(binary.key)).key == binary.key
        kernel.compile(binary)  # under the interpreter: builds the stand-ins of its layout, checks them
    assert key_name(binary) == "dtype=bfloat16,block_size=1024,layout=X_ptr:*bf16 Y_ptr:*bf16 Out_ptr:*bf16 n_elements:i32"


def test_warmup_inputs_that_disagree_with_dispatch_are_caught():
    class Drifted(AxpyKernel):
        def warmup_inputs(self, key):
            inputs = super().warmup_inputs(key)
            inputs["block_size"] = key.block_size * 2  # not what the key names
            return inputs

    kernel = Drifted()
    key = kernel.get_warmup_keys(dtypes=["float32"])[0]
    with pytest.raises(WarmupMismatch, match=r"dispatches to dtype=float32,block_size=2048 \(block_size 1024 -> 2048; "
                                             r"the stand-ins: x torch.float32 \(1024,\), y torch.float32 \(1024,\), out "
                                             r"torch.float32 \(1024,\)\): declare stand-ins"):
        kernel.compile(key)


def test_kernel_classes_must_declare_a_frozen_key_and_a_unique_name():
    with pytest.raises(TypeError, match="frozen"):
        class Unfrozen(JitKernel):
            name = "tests.unfrozen"

            @dataclass
            class CompileKey:
                a: int

    with pytest.raises(ValueError, match="taken"):
        class Impostor(JitKernel):
            name = "jitkern.example.axpy"

            @dataclass(frozen=True)
            class CompileKey:
                a: int


_SCALE = tl.constexpr(2)  # a helper's constexpr global: Triton 3.6 hashes it into a kernel only once the helper is hashed


@triton.jit
def _scaled(x):
    return x * _SCALE


@triton.jit
def _first_kernel(X):
    tl.store(X, _scaled(tl.load(X)))


@triton.jit
def _second_kernel(X):
    tl.store(X, _scaled(tl.load(X)) + 1)


@pytest.mark.compiled
def test_a_kernels_triton_cache_key_does_not_depend_on_what_was_hashed_before():
    """Triton 3.6 hashes a kernel with only the constexpr globals of helpers hashed before
    it; jitkern settles every kernel's key so that warmup and serving agree whatever the order.
    (Step5's decode kernel once looked up another key than warmup built, after verify was
    hashed first; its helpers have no constexpr global since they take their code paths as
    constexpr arguments, so two kernels of this module show it.)"""
    from jitkern.kernel.settle import _callees_first, settle_cache_key

    decode, prefill = _first_kernel, _second_kernel
    settle_cache_key(decode)
    settled = decode.cache_key
    functions = {id(f): f for f in _callees_first(decode) + _callees_first(prefill)}.values()
    raw_keys = []
    for first in (decode, prefill):  # as two fresh processes would, in two orders
        for function in functions:
            function.hash, function.used_global_vals = None, {}
        first.cache_key
        raw_keys.append(decode.cache_key)
        settle_cache_key(decode)
        assert decode.cache_key == settled
    assert raw_keys[0] != raw_keys[1], "Triton no longer depends on the order: settle_cache_key may go"


def test_a_kernel_name_is_refused_to_a_class_of_another_module_and_kept_on_reload():
    """A copied module whose class keeps its name would silently take the original's
    launches and warmups; a module reloaded defines the same class again, which is fine."""
    for _reload in range(2):
        class Reloaded(JitKernel):
            name = "tests.reloaded"

            @dataclass(frozen=True)
            class CompileKey:
                a: int

    assert registry.get_kernel("tests.reloaded") is Reloaded()
    with pytest.raises(ValueError, match=r"kernel name 'tests.reloaded' of copied_module\..*Reloaded is taken by "
                                         rf"{__name__}\..*Reloaded"):
        class Copy(JitKernel):
            __module__ = "copied_module"
            __qualname__ = Reloaded.__qualname__
            name = "tests.reloaded"

            @dataclass(frozen=True)
            class CompileKey:
                a: int

    assert registry.get_kernel("tests.reloaded") is Reloaded()


def test_a_launch_spec_passing_what_is_no_runtime_parameter_is_refused():
    """A launch option (``num_warps``) or a misspelt argument in a LaunchSpec is no argument
    of the binary: the direct launch would run the key's binary without it. Refused where a
    constexpr is, on Triton's path (warmup's too), naming it and the kernel's parameters."""
    import dataclasses

    x = torch.randn(100)
    spec = AxpyKernel().launch_spec(x, x, torch.empty_like(x), 1.0)
    n = spec.kwargs["n_elements"]
    for kwargs, passed in (({**spec.kwargs, "num_warps": 8}, "num_warps"),
                           ({**{k: v for k, v in spec.kwargs.items() if k != "n_elements"}, "N": n}, "N")):
        with pytest.raises(TypeError, match=rf"jitkern.example.axpy: the LaunchSpec passes \['{passed}'\], not "
                                            r"runtime parameters of _axpy_kernel \(those are X_ptr, Y_ptr, Out_ptr, "
                                            r"alpha, n_elements\)"):
            AxpyKernel().launch(dataclasses.replace(spec, kwargs=kwargs))


@pytest.mark.parametrize("mode", ["this", pytest.param("compiled", marks=pytest.mark.compiled)])
def test_every_shipped_kernels_runtime_parameters_are_those_triton_compiles_with(mode):
    """What a LaunchSpec may pass (``_runtime_names``) comes from ``runtime_params``, as the
    layouts do. Under the interpreter, whose functions keep no parameters, and compiled,
    it names the arguments a compiled JITFunction of the same body takes at run time."""
    from triton.runtime.jit import JITFunction

    registry.import_modules(["step5", "deepseek_v4", "jitkern.examples.axpy"])
    kernels = [registry.get_kernel(name) for name in registry.kernel_names()]
    shipped = [kernel for kernel in kernels if kernel.name.startswith(("step5.", "deepseek_v4.", "jitkern."))]
    assert len(shipped) >= 10
    for kernel in shipped:
        params = JITFunction(kernel.kernel.fn).params
        assert kernel._runtime_names == tuple(param.name for param in params if not param.is_constexpr)
        assert kernel._constexpr_names == {param.name for param in params if param.is_constexpr}


def test_a_kernel_attribute_that_is_no_triton_function_is_refused_by_name():
    """A plain function (or anything else Triton cannot compile) is refused where the class
    is made; Triton's autotune and heuristics wrappers are adopted
    (``tests/jitkern/kernel/test_tuning.py``). Such a class was accepted, then failed at its
    first compile with an AttributeError from inside the direct launch."""
    with pytest.raises(TypeError, match=r"Wrapped.kernel must be a @triton.jit function \(or one wrapped in "
                                        r"triton.autotune or triton.heuristics\), got function"):
        class Wrapped(JitKernel):
            kernel = _first_kernel.fn

    class Plain(JitKernel):
        kernel = _first_kernel
