"""The direct launch path: same binary as Triton's normal path, or no direct launch at all."""

import dataclasses
import itertools

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, assume, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from triton.runtime.driver import driver

from jitkern import LaunchSpec, LayoutDomain, TritonWarmupTensor, guard, settings
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.launch.direct import build_direct_launch
from jitkern.testing import dry_run_gpu, record_launches, triton_lookup_key

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]

KERNEL = AxpyKernel()


def inputs(n, dtype=torch.float32, offset=0):
    return torch.randn(n + offset, dtype=dtype)[offset:], torch.randn(n, dtype=dtype)


def triton_runs(monkeypatch, kernel):
    """The calls that reach Triton's own launch path (``JITFunction.run``) from now on."""
    calls, run = [], kernel.kernel.run
    monkeypatch.setattr(kernel.kernel, "run", lambda *args, **kwargs: calls.append(kwargs) or run(*args, **kwargs))
    return calls


def test_direct_launch_uses_the_binary_the_normal_path_would():
    every_offset = LayoutDomain(unaligned=frozenset({"x", "y", "out"}))
    for key in KERNEL.layouts.binary_keys(KERNEL.get_warmup_keys(dtypes=["float32", "bfloat16"]), every_offset):
        KERNEL.compile(key)
    with record_launches() as launches:
        for n in [1, 3, 16, 1000, 5003]:
            for dtype in (torch.float32, torch.bfloat16):
                for offset in (0, 1):
                    axpy(*inputs(n, dtype, offset), 2.0)
    binaries = KERNEL.kernel.device_caches["compile-only:cuda:90"][0]
    for kernel, spec in launches:
        direct = KERNEL.binaries.direct_launch(spec)
        assert direct.binary is binaries[triton_lookup_key(kernel, spec)], kernel.describe(spec.key)


def test_a_key_with_binaries_of_several_layouts_launches_each_directly(monkeypatch):
    """24 binaries of one key (x, y, out aligned or not; three classes of n_elements): each
    launch is picked by its layout, with no call of Triton's own path; another dtype is not."""
    every_offset = LayoutDomain(unaligned=frozenset({"x", "y", "out"}))
    for binary in KERNEL.layouts.binary_keys(KERNEL.get_warmup_keys(dtypes=["float32"]), every_offset):
        KERNEL.compile(binary)
    runs = triton_runs(monkeypatch, KERNEL)
    for n in (1, 16, 17, 1000):
        for offsets in itertools.product((0, 1), repeat=3):
            x, y, out = (torch.randn(n + 1)[at:at + n] for at in offsets)
            axpy(x, y, 0.5, out=out)
    assert runs == []
    try:
        guard.set_mode("error")
        with pytest.raises(guard.ServeTimeCompile):
            axpy(*inputs(16, torch.bfloat16), 0.5)
    finally:
        guard.set_mode("off")


def test_a_call_outside_the_warmed_specialisation_takes_the_normal_path(monkeypatch):
    class Blind(AxpyKernel):
        """Its key does not pin the dtype: one key stands for Triton binaries of every dtype."""

        def dispatch(self, **values):
            return super().dispatch(**dict(values, dtype=torch.float32))

    blind = Blind()
    x, y = inputs(1000)
    blind(x, y, x, 1.0)  # first call: Triton's path, then the key gets its direct launch
    key = blind.launch_spec(x=x, y=y, out=x, alpha=1.0).key
    assert blind.binaries.layouts_of(key) == ["n_elements:i32"]
    runs = triton_runs(monkeypatch, blind)
    unaligned_x, _ = inputs(1000, offset=1)
    try:
        guard.set_mode("error")
        blind(x, y, x, 1.0)  # same specialisation: direct, nothing for the guard to see
        blind(torch.nn.Parameter(x, requires_grad=False), y, x, 3.0)  # a parameter is a tensor too
        assert runs == []
        with pytest.raises(guard.ServeTimeCompile, match="x: a fp32 tensor not 16-byte aligned"):
            blind(unaligned_x, y, x, 1.0)  # same key, other alignment: not the direct binary
        with pytest.raises(guard.ServeTimeCompile, match="n_elements: i32 a multiple of 16"):
            blind(*inputs(1008), torch.empty(1008), 1.0)  # n_elements a multiple of 16, unlike 1000
        with pytest.raises(guard.ServeTimeCompile, match="x: a bf16 tensor 16-byte aligned; warmed binaries all "
                                                         "assume a fp32 tensor"):
            blind(*inputs(1000, torch.bfloat16), y.bfloat16(), 1.0)  # another dtype
    finally:
        guard.set_mode("off")
    assert len(runs) == 3


def test_launch_hooks_set_after_the_direct_launch_was_prepared_fire(monkeypatch):
    x, y = inputs(100)
    axpy(x, y, 1.0)  # prepares the direct launch
    runs = triton_runs(monkeypatch, KERNEL)
    entered, exited = [], []
    exit_hook = exited.append
    with monkeypatch.context() as patch:
        patch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda metadata: entered.append(metadata.get()))
        triton.knobs.runtime.launch_exit_hook.add(exit_hook)  # Triton's own chain, changed in place
        try:
            axpy(x, y, 1.0)
        finally:
            triton.knobs.runtime.launch_exit_hook.remove(exit_hook)
    assert entered == [{"name": "_axpy_kernel", "function": 0, "stream": 0}]
    assert [metadata.get() for metadata in exited] == entered
    assert runs == []  # the direct path fired them
    axpy(x, y, 1.0)
    assert len(entered) == len(exited) == 1


def test_an_equal_key_object_finds_the_direct_launch(monkeypatch):
    """A key dropped from dispatch's cache comes back as an equal object with another id."""
    x, y = inputs(100)
    axpy(x, y, 1.0)
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    runs = triton_runs(monkeypatch, KERNEL)
    KERNEL.launch(dataclasses.replace(spec, key=dataclasses.replace(spec.key)))
    KERNEL.launch(spec)
    assert runs == []


def test_keys_launched_in_turn_each_take_their_own_binary():
    """The key launched last is remembered apart from the others: keys and layouts taking
    turns, and binaries dropped and made again between launches, never launch another
    key's or layout's binary, and ``launch`` returns the launch that launched."""
    specs = []
    for n, dtype, offset in [(1000, torch.float32, 0), (1000, torch.bfloat16, 0), (17, torch.float16, 0),
                             (1000, torch.float32, 1)]:
        x, y = inputs(n, dtype, offset)
        axpy(x, y, 1.0)
        specs.append(KERNEL.launch_spec(x, y, torch.empty_like(y), 1.0))
    assert len({id(spec.key) for spec in specs}) == 3 and specs[3].key is specs[0].key
    assert KERNEL.layouts.binary_key(specs[3]) != KERNEL.layouts.binary_key(specs[0])  # x unaligned: another binary

    def launch_in_turn():
        binaries = KERNEL.kernel.device_caches["compile-only:cuda:90"][0]
        for spec in [*specs, *specs, specs[1], specs[1], specs[0], specs[3], specs[3], specs[0]]:
            launched = KERNEL.launch(spec)
            assert launched is not None
            assert KERNEL.binaries.direct_launch(spec, launched).binary is binaries[triton_lookup_key(KERNEL, spec)]

    launch_in_turn()
    KERNEL.binaries.forget()
    for spec in specs:
        assert KERNEL.launch(spec) is None  # Triton's path, which compiles the binary again
    launch_in_turn()


def test_what_no_key_pins_is_checked_on_every_direct_launch(monkeypatch):
    x, y = inputs(100)
    axpy(x, y, 1.0)
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    direct = KERNEL.binaries.direct_launch(spec)
    assert direct.launch(spec.kwargs, spec.grid)
    assert not direct.launch({**spec.kwargs, "alpha": 1}, spec.grid)  # an int where the binary has a float
    assert not direct.launch(dict(spec.kwargs, num_warps=8), spec.grid)  # anything more: Triton's path decides
    with monkeypatch.context() as patch:
        patch.setattr(triton.knobs.runtime, "debug", True)
        assert not direct.launch(spec.kwargs, spec.grid)  # Triton would build a debug binary
    with dry_run_gpu("cuda:90"):  # another driver
        assert not direct.launch(spec.kwargs, spec.grid)


def test_constexprs_and_options_come_from_the_key_alone():
    """A LaunchSpec carrying a constexpr or a launch option, or constants carrying a runtime
    argument, is refused on Triton's path, before anything compiles or runs."""
    x, y = inputs(100)
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    assert KERNEL.triton_kwargs(spec) == {**spec.kwargs, "BLOCK_SIZE": 1024, "enable_fp_fusion": False}
    for extra in ({"BLOCK_SIZE": 1024}, {"enable_fp_fusion": False}):
        with pytest.raises(TypeError, match="constexprs and launch options come from constants"):
            KERNEL.launch(dataclasses.replace(spec, kwargs={**spec.kwargs, **extra}))

    class Leaky(AxpyKernel):
        def constants(self, key):
            return dict(super().constants(key), n_elements=100)

    with pytest.raises(TypeError, match=r"gives \['n_elements'\], which are not constexprs"):
        Leaky().triton_kwargs(spec)


_SCALE = tl.constexpr(2.0)


@triton.jit
def _scaled_kernel(Out, BLOCK: tl.constexpr):
    tl.store(Out + tl.arange(0, BLOCK), tl.full((BLOCK,), _SCALE, tl.float32))


def test_a_global_the_kernel_read_that_changed_sends_the_launch_to_triton(monkeypatch):
    """Triton refuses to launch a binary once a global it was built with has changed."""
    out = torch.empty(16)
    spec = LaunchSpec((1,), {"Out": out}, None)
    _scaled_kernel[(1,)](out, BLOCK=16)  # compiles, which records the global
    direct = build_direct_launch(_scaled_kernel, spec, {"BLOCK": 16}, StubBinary())
    assert direct.launch(spec.kwargs, spec.grid)
    monkeypatch.setitem(globals(), "_SCALE", tl.constexpr(3.0))
    assert not direct.launch(spec.kwargs, spec.grid)
    with pytest.raises(RuntimeError, match="Global variable _SCALE has changed"):
        _scaled_kernel[(1,)](out, BLOCK=16)


def test_direct_launch_can_be_turned_off():
    x, y = inputs(100)
    with settings.scope(direct_launch=False):
        axpy(x, y, 1.0)
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    assert KERNEL.binaries.direct_launch(spec) is None  # every launch takes Triton's own path
    axpy(x, y, 1.0)
    assert KERNEL.binaries.direct_launch(spec) is not None


def test_every_shipped_kernel_takes_the_binary_the_normal_path_would(monkeypatch):
    """Sampled deployment-shaped calls of every shipped kernel (benchmarks/launch_samples.py),
    launched twice: the second launch goes direct, through the binary Triton's own path
    looked up for the first."""
    from pathlib import Path

    from jitkern.kernel import registry

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3]))
    from benchmarks import launch_samples

    for name in registry.kernel_names():
        registry.get_kernel(name).binaries.forget()
    with record_launches() as first:
        launch_samples.drive_all("cpu")
    with record_launches() as second:
        launch_samples.drive_all("cpu")
    launched = {kernel.name for kernel, _ in first}
    shipped = {name for name in registry.kernel_names() if name.partition(".")[0] in ("step5", "deepseek_v4")}
    assert launched >= shipped, launched  # every shipped kernel (the registry also holds the tests' own)
    for kernel, spec in second:
        direct = kernel.binaries.direct_launch(spec)
        binaries = kernel.kernel.device_caches["compile-only:cuda:90"][0]
        assert direct.binary is binaries[triton_lookup_key(kernel, spec)], kernel.describe(spec.key)


@triton.jit(do_not_specialize=["count"], do_not_specialize_on_alignment=["Loose"])
def _probe_kernel(Ptr, Loose, n, count, scale, flag, maybe, BLOCK: tl.constexpr):
    pass  # never compiled: the checks are compared with Triton's binder alone


class StubBinary:
    """What a direct launch needs of a compiled kernel, for checks that need no binary."""

    name, function, packed_metadata = "probe", 0, ()

    def _init_handles(self):
        pass

    def run(self, *args):
        pass

    def launch_metadata(self, grid, stream, *args):
        return None


def triton_binary(kwargs):
    """What names Triton's binary for these arguments (``compute_cache_key``); None if it refuses them."""
    binder = _probe_kernel.device_caches[driver.active.get_current_device()][4]
    try:
        _bound, specialization, options = binder(**kwargs)
    except (TypeError, OverflowError):
        return None
    return str(specialization), repr(sorted(options.items()))


def _tensor(dtype, offset, parameter):
    tensor = torch.zeros(64, dtype=dtype)[offset:]  # odd offsets break 16-byte alignment
    return torch.nn.Parameter(tensor, requires_grad=False) if parameter else tensor


_EDGES = [0, 1, 16, 2**31, 2**63, 2**64]  # around Triton's integer classes and 1
_BOUNDARIES = st.sampled_from([1, *(sign * edge + k for edge in _EDGES for sign in (1, -1) for k in (-1, 0, 1))])
_SCALARS = st.one_of(
    _BOUNDARIES,
    st.builds(lambda edge, sign, k: sign * edge + k, st.sampled_from(_EDGES), st.sampled_from([1, -1]),
              st.integers(-17, 17)),
    st.integers(-(2**63), 2**64 - 1), st.floats(), st.booleans(), st.none(),
)
_DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool])
_SUPPORTED = st.one_of(st.builds(_tensor, _DTYPES, st.integers(0, 17), st.booleans()), _SCALARS)
_SUPPORTED_TYPES = (torch.Tensor, torch.nn.Parameter, int, float, bool, type(None), str)
_OTHERS = st.sampled_from([TritonWarmupTensor(torch.float32), TritonWarmupTensor(torch.int32, aligned=False),
                           "text", (16, 17)])
_OPTIONS = st.sampled_from([{"num_warps": 4}, {"num_warps": 8}, {"num_warps": 4.0}, {},
                            {"num_warps": 4, "num_stages": 2}])


def _near(value):
    """Values of the same kind as ``value``, across the boundaries Triton specialises on."""
    if isinstance(value, torch.Tensor):
        return st.builds(_tensor, st.just(value.dtype), st.integers(0, 17), st.booleans())
    if type(value) is int:
        return st.one_of(_BOUNDARIES, st.integers(-17, 17).map(lambda k: value + k))
    return _SCALARS


@hypothesis_settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_checks_accept_exactly_the_calls_triton_specialises_as_the_binary(data):
    """Calls one argument away from the one a binary was built for are accepted exactly
    when Triton would take that binary."""
    names = _probe_kernel.arg_names[:-1]  # BLOCK, the constexpr, comes with the options from the key
    reference = {name: data.draw(_SUPPORTED, label=name) for name in names}
    constants = {"BLOCK": data.draw(st.one_of(_SCALARS, st.text(max_size=2)), label="BLOCK")}
    constants.update(data.draw(_OPTIONS, label="options"))
    binary = triton_binary({**reference, **constants})
    direct = build_direct_launch(_probe_kernel, LaunchSpec((1,), reference, None), constants, StubBinary())
    assert (direct is None) == (binary is None)  # left to Triton: only what Triton refuses
    assume(direct is not None)
    assert direct.launch(reference, (1,))
    changed = data.draw(st.sampled_from(names), label="changed")
    value = st.one_of(_near(reference[changed]), _SUPPORTED, _OTHERS)
    probe = dict(reference, **{changed: data.draw(value, label=f"probe {changed}")})
    accepted = direct.launch(probe, (1,))
    event(f"accepted={accepted}")
    if all(type(value) in _SUPPORTED_TYPES for value in probe.values()):
        assert accepted == (triton_binary({**probe, **constants}) == binary)
    else:
        assert not accepted  # stand-ins, tuples: Triton's path decides


def test_integer_checks_agree_with_triton_on_each_side_of_every_boundary():
    """Every value around Triton's integer classes, divisibility and 1, against every other,
    for an argument specialised as usual (n), not at all (count) and not on divisibility (Loose)."""
    values = sorted({sign * edge + k for edge in _EDGES for sign in (1, -1) for k in (-17, -16, -8, -1, 0, 1, 8, 16, 17)})
    others, constants = dict(Ptr=0, Loose=0, n=0, count=0, scale=0.0, flag=False, maybe=None), dict(BLOCK=0)
    for name in ("n", "count", "Loose"):
        for reference in values:
            kwargs = dict(others, **{name: reference})
            binary = triton_binary({**kwargs, **constants})
            direct = build_direct_launch(_probe_kernel, LaunchSpec((1,), kwargs, None), constants, StubBinary())
            assert (direct is None) == (binary is None), (name, reference)
            for value in values if direct is not None else ():
                probe = dict(others, **{name: value})
                accepted = triton_binary({**probe, **constants}) == binary
                assert direct.launch(probe, (1,)) == accepted, (name, reference, value)


def test_a_cuda_launcher_gets_what_its_own_call_would_pass_to_its_c_function():
    """With no scratch memory to allocate, the direct launch calls the C function itself."""
    from triton.backends.nvidia.driver import CudaLauncher

    calls = []
    launcher = CudaLauncher.__new__(CudaLauncher)  # the object, without building its C module
    launcher.launch = lambda *args: calls.append(args)
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    binary = StubBinary()
    binary.run = launcher
    x, y = inputs(100)
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    direct = build_direct_launch(KERNEL.kernel, spec, KERNEL.constants(spec.key), binary)
    plan = direct.launch.__globals__["PLAN"]  # the C function, called directly, with the flags its call adds
    assert plan[6] == launcher.launch and plan[7] == (binary.function, False, True, None, None, binary.packed_metadata)
    assert direct.launch(spec.kwargs, spec.grid)
    arguments = [KERNEL.triton_kwargs(spec)[name] for name in KERNEL.kernel.arg_names]
    pointers = [value.data_ptr() if isinstance(value, torch.Tensor) else value for value in arguments]
    launcher(*spec.grid, 1, 1, 0, binary.function, binary.packed_metadata, None, None, None, *pointers)
    assert len(calls) == 2 and calls[0] == calls[1]


def test_tensors_made_under_inference_mode_launch_directly(monkeypatch):
    """Serving engines make tensors under torch.inference_mode(); a direct launch prepared
    outside it takes them (its checks hold no thread state), and still refuses another dtype."""
    x, y = inputs(256)
    axpy(x, y, 1.0)  # prepares the direct launch, outside inference mode
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    direct = KERNEL.binaries.direct_launch(spec)
    runs = triton_runs(monkeypatch, KERNEL)
    with torch.inference_mode():
        a, b, out = torch.randn(256), torch.randn(256), torch.empty(256)
        for _ in range(3):
            assert direct.launch(dict(spec.kwargs, X_ptr=a, Y_ptr=b, Out_ptr=out), spec.grid)
    assert runs == []
    assert not direct.launch(dict(spec.kwargs, X_ptr=a.double()), spec.grid)  # another dtype: refused


def test_a_torch_function_mode_that_drops_the_arguments_mid_check_cannot_break_the_launch():
    """The C checks read tensor attributes through torch's getters, which run an active
    torch function mode's Python code: here, code that empties the arguments' dict, so
    that the only reference to the tensor being read was the dict's."""
    from torch.overrides import TorchFunctionMode

    x, y = inputs(256)
    axpy(x, y, 1.0)  # prepares the direct launch
    spec = KERNEL.launch_spec(x, y, torch.empty_like(x), 1.0)
    direct = KERNEL.binaries.direct_launch(spec)
    arguments = dict(spec.kwargs, X_ptr=torch.randn(256))

    class Dropping(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            arguments.clear()
            return func(*args, **(kwargs or {}))

    with Dropping():
        assert direct.launch(arguments, spec.grid) is False  # the next argument is gone: Triton's path
    with Dropping():
        assert direct.launch(dict(spec.kwargs), spec.grid) is True  # a dict the mode does not touch
