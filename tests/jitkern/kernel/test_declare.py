"""A kernel declared once (``jitkern.kernel.declare``): what the declarations give, and each
declaration that cannot work refused where it is made, in one line."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from jitkern import (Arg, Arguments, Config, DeclarationError, LaunchSpec, Tensor, TritonJitKernel, Warm, argument,
                     computed, derived, dtype_of, fixed, kernel_launcher, size_of)
from jitkern.examples.axpy import AxpyKernel
from jitkern.kernel.interpreter import InterpreterCannotRun
from jitkern.kernel.registry import UnknownKernel, get_kernel

FLOATS = (torch.float32, torch.float16)
ROWS = Arguments(x=Arg("rows width", FLOATS, strides="_ 1"), out=Arg("rows width", "x", contiguous=True))  # a public function's
WIDTHS = Config("widths", list[int], default=[64, 128], check=lambda v: None if all(w > 0 for w in v) else "not positive")


@triton.jit
def _scale_rows_kernel(X, Out, row_stride, n_rows, WIDTH: tl.constexpr, SCALE: tl.constexpr):
    # out[r, c] = x[r, c] * SCALE for c < WIDTH
    row = tl.program_id(0)
    cols = tl.arange(0, WIDTH)
    x = tl.load(X + row * row_stride + cols)
    tl.store(Out + row * row_stride + cols, x * SCALE)


def scale_rows(name: str, **attributes):
    """A kernel scaling rows, its class made with ``attributes`` (each a way to break it)."""

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("x", warm=Config("dtypes", list[str], default=["float32"]))
        width: int = size_of("x", 1, constexpr="WIDTH", warm=WIDTHS)
        scale: int = argument("scale", constexpr="SCALE", warm=[2])
        double_width: int = derived(lambda width: 2 * width)
        half_width: int = derived(lambda width: SimpleNamespace(half=width // 2), "half")  # an attribute of a tiling
        num_warps: int = fixed(1, option="num_warps")

    def __call__(self, compile_key, x, out, scale: int = 2) -> LaunchSpec:
        return LaunchSpec(grid=(x.shape[0],), kwargs=dict(X=x, Out=out, row_stride=x.stride(0), n_rows=x.shape[0]),
                          result=out)

    namespace = dict(name=name, kernel=_scale_rows_kernel, CompileKey=CompileKey,
                     stand_ins=dict(x=Tensor((16, "width")), out=Tensor((16, "width"), "dtype")),
                     __call__=kernel_launcher(attributes.pop("call", __call__)))
    return type("ScaleRows", (TritonJitKernel,), {**namespace, **attributes})


def test_the_declarations_give_dispatch_warmup_keys_constants_and_stand_ins():
    kernel = scale_rows("test.declared.scale_rows")()
    keys = kernel.get_warmup_keys(widths=[32, 64])
    assert [(key.dtype, key.width, key.scale, key.double_width, key.num_warps) for key in keys] == \
        [("float32", 32, 2, 64, 1), ("float32", 64, 2, 128, 1)]
    assert kernel.get_warmup_keys() == kernel.get_warmup_keys(dtypes=["float32"], widths=[64, 128])
    with pytest.raises(ValueError, match="widths: not positive"):
        kernel.get_warmup_keys(widths=[0])
    with pytest.raises(TypeError, match=r"unknown \['width'\]"):
        kernel.get_warmup_keys(width=[32])
    assert kernel.constants(keys[0]) == {"WIDTH": 32, "SCALE": 2, "num_warps": 1}
    stand_ins = kernel.warmup_inputs(keys[0])
    assert stand_ins["x"].shape == (16, 32) and stand_ins["out"].dtype is torch.float32 and stand_ins["scale"] == 2

    x = torch.randn(5, 64)
    spec = kernel.launch_spec(x, torch.empty_like(x), scale=3)
    assert spec.key == kernel.dispatch(dtype=torch.float32, width=64, scale=3, num_warps=1)
    assert (spec.key.double_width, spec.key.half_width) == (128, 32) and spec.grid == (5,)
    assert kernel.launch_spec(x, torch.empty_like(x)).key.scale == 2  # the default of __call__
    assert kernel.key_for(x=x, scale=3) == spec.key  # before the call has an out: no field reads it
    assert kernel.key_for(x=x).scale == 2
    with pytest.raises(TypeError, match="dtype reads x, which the arguments lack"):
        kernel.key_for(out=x)


def test_a_field_warmed_by_several_config_parameters_and_a_stand_in_following_the_key():
    """``Warm``: a width that is one config parameter times another; a stand-in whose row
    stride and alignment follow the key (a view of one projection twice as wide)."""
    heads, factors = Config("head_dim", int, choices=range(1, 1024)), Config("factor", int, choices=(1, 2))
    with pytest.raises(TypeError, match=r"parameters \['head'\] must be the configs' names"):
        Warm(lambda head: [head], heads)
    key_class = _key_class(dtype=dtype_of("x", warm=["float32"]),
                           width=size_of("x", 1, warm=Warm(lambda head_dim, factor: [head_dim * factor], heads, factors)))
    stand_ins = dict(x=Tensor((16, "width"), strides=(lambda key: 2 * key.width, 1), aligned=lambda key: key.width % 8 == 0),
                     out=Tensor((16, "width"), "dtype"))
    kernel = scale_rows("test.declared.warm", CompileKey=key_class, stand_ins=stand_ins)()
    assert [key.width for key in kernel.get_warmup_keys(head_dim=12, factor=2)] == [24]
    with pytest.raises(ValueError, match=r"^factor: \[3\] not supported; use \[1, 2\]"):
        kernel.get_warmup_keys(head_dim=12, factor=3)
    with pytest.raises(TypeError, match=r"missing \['factor'\]"):
        kernel.get_warmup_keys(head_dim=12)
    x = kernel.warmup_inputs(kernel.get_warmup_keys(head_dim=12, factor=1)[0])["x"]
    assert (tuple(x.shape), x.stride(), x.aligned) == ((16, 12), (24, 1), False)


def test_a_declared_kernel_computes_and_loads_from_a_manifest(tmp_path):
    kernel = scale_rows("test.declared.scale_rows_run")()
    x = torch.randn(7, 64)
    out = torch.full_like(x, float("nan"))
    assert kernel(x, out, 3) is out
    torch.testing.assert_close(out, x * 3)

    from jitkern.manifest import load_manifest

    manifest = tmp_path / "m.json"
    manifest.write_text('{"format_version": 1, "name": "m", "targets": ["cuda:90"], "kernels": [{"kernel": '
                        '"test.declared.scale_rows_run", "config": {"widths": [16]}}]}')
    (entry,) = load_manifest(manifest).entries
    assert {binary.key.width for binary in entry.keys} == {16}
    manifest.write_text(manifest.read_text().replace('"widths": [16]', '"widths": "16"'))
    with pytest.raises(ValueError, match=r"kernels\[0\]\.config\.widths: Input should be a valid list"):
        load_manifest(manifest)


def test_axpy_is_declared_once():
    kernel = AxpyKernel()
    (key,) = kernel.get_warmup_keys(dtypes=["bfloat16"])
    assert (key.dtype, key.block_size) == ("bfloat16", 1024)
    x = torch.randn(10)
    assert kernel.launch_spec(x, x, torch.empty_like(x), 0.5, 256).key == kernel.dispatch(dtype=torch.float32,
                                                                                         block_size=256)


def _call_reading(name):
    def __call__(self, compile_key, x, out, scale: int = 2) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(X=x, Out=out, row_stride=x.stride(0), n_rows=1))

    return __call__


@pytest.mark.parametrize("attributes, said", [
    (dict(fixed_strides="x"), r"ScaleRows\.fixed_strides = 'x': expected names"),
    (dict(fixed_strides=["x.0", "y"]), r"ScaleRows\.fixed_strides: 'y' is not an argument of __call__ \(out, scale, x\)"),
    (dict(aligned_tensors={"outt"}), r"ScaleRows\.aligned_tensors: 'outt' is not an argument of __call__"),
    (dict(aligned_tensors={"x.0"}), r"ScaleRows\.aligned_tensors: 'x\.0': only fixed_strides names a dimension"),
    (dict(pinned_by_key={"n_row"}), r"ScaleRows\.pinned_by_key: 'n_row' is not a runtime parameter of the kernel"),
    (dict(stand_ins=dict(y=Tensor())), r"ScaleRows\.stand_ins: 'y' is not an argument of __call__"),
    (dict(stand_ins=dict(x=Tensor((16, "wide")))), r"ScaleRows\.stand_ins\['x'\]: 'wide' is not a field of CompileKey"),
    (dict(stand_ins={}, arguments=Arguments(x=Arg("rows width", torch.float32), out=Arg("rows width", FLOATS))),
     r"ScaleRows\.arguments: out has no one dtype; read it with dtype_of or declare its stand-in"),
    (dict(arguments=Arguments(y=Arg("rows", torch.float32))), r"ScaleRows\.arguments: declares none of __call__'s"),
], ids=["a-string", "misspelt-stride", "misspelt-aligned", "aligned-dimension", "misspelt-pinned",
        "stand-in-of-nothing", "stand-in-size-of-no-field", "arguments-of-several-dtypes", "arguments-of-another"])
def test_a_declaration_naming_what_does_not_exist_is_refused(attributes, said):
    with pytest.raises(DeclarationError, match=said):
        scale_rows("test.declared.broken", **attributes)
    with pytest.raises(UnknownKernel):
        get_kernel("test.declared.broken")  # refused before it was registered


def test_the_public_functions_arguments_give_the_usual_stand_ins_and_the_fixed_strides():
    kernel = scale_rows("test.declared.arguments", arguments=ROWS, stand_ins={})()
    (key,) = kernel.get_warmup_keys(dtypes=["float16"], widths=[32])
    x, out = (kernel.warmup_inputs(key)[name] for name in ("x", "out"))
    assert (x.shape, out.shape, x.dtype, out.dtype) == ((16, 32), (16, 32), torch.float16, torch.float16)
    assert x.varying == out.varying == (0,) and x.is_contiguous()  # rows: free; width: the key's
    assert kernel.fixed_strides == {"x.1", "out"}
    own = scale_rows("test.declared.arguments_and_own", arguments=ROWS, stand_ins=dict(x=Tensor((4, "width"))),
                     fixed_strides={"x.0"})()
    x, out = (own.warmup_inputs(key)[name] for name in ("x", "out"))
    assert (x.shape, out.shape) == ((4, 32), (16, 32)) and own.fixed_strides == {"x.0", "x.1", "out"}


def test_any_iterable_of_names_is_taken_where_a_set_is_meant():
    kernel = scale_rows("test.declared.iterables", fixed_strides=("x.0", "out.0"), aligned_tensors=["x"])
    assert kernel.fixed_strides == frozenset({"x.0", "out.0"}) and kernel.aligned_tensors == frozenset({"x"})


def _key_class(**fields):
    return dataclass(frozen=True, kw_only=True)(type("CompileKey", (), {
        "__annotations__": {name: int for name in fields}, **fields}))


@pytest.mark.parametrize("fields, said", [
    (dict(width=size_of("y", 1, warm=[8])), r"CompileKey\.width: reads 'y', which is not an argument of __call__"),
    (dict(width=size_of("x", 1, constexpr="WIDE", warm=[8])), r"CompileKey\.width: constexpr='WIDE' is not a "
                                                                r"constexpr parameter of _scale_rows_kernel"),
    (dict(width=size_of("x", 1, warm=[8]), warps=fixed(1, option="num_warp")),
     r"CompileKey\.warps: option='num_warp' is not a Triton launch option"),
    (dict(width=size_of("x", 1, warm=8)), r"CompileKey\.width: warm=8: expected a Config, a Warm or a list"),
    (dict(width=size_of("x", 1)), r"CompileKey\.width: no warm values"),
    (dict(width=size_of("x", 1, warm=[8]), twice=derived(lambda wide: 2 * wide)),
     r"CompileKey\.twice: reads 'wide', which is not a key field"),
    (dict(width=size_of("x", 1, warm=[8]), plain=3), r"CompileKey: plain not declared"),
], ids=["reads-no-argument", "no-such-constexpr", "no-such-option", "warm-not-a-list", "no-warm-values",
        "derived-of-no-field", "a-field-undeclared"])
@pytest.mark.parametrize("arguments", [None, ROWS], ids=["own-stand-ins", "arguments"])
def test_a_field_declaration_that_cannot_work_is_refused(fields, said, arguments):
    """Named as such also where the stand-ins would come from the public function's
    ``Arguments``: the field is checked before anything is derived from it."""
    with pytest.raises(DeclarationError, match=said):
        scale_rows("test.declared.broken_field", CompileKey=_key_class(**fields), stand_ins={}, arguments=arguments)


def test_a_launcher_taking_compile_key_needs_declared_fields():
    @dataclass(frozen=True)
    class CompileKey:
        width: int

    with pytest.raises(DeclarationError, match=r"__call__ takes compile_key, but its CompileKey declares no field"):
        scale_rows("test.declared.undeclared", CompileKey=CompileKey)


@pytest.mark.parametrize("annotation, said", [
    (None, r"__call__'s scale has no annotation: annotate the type real calls pass"),
    ("str", r"__call__'s scale is annotated 'str', and its stand-in is the int 2"),
    ("bool", r"__call__'s scale is annotated 'bool', and its stand-in is the int 2"),
])
def test_a_plain_argument_without_the_type_real_calls_pass_is_named(annotation, said):
    def __call__(self, compile_key, x, out, scale=2) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(X=x, Out=out, row_stride=x.stride(0), n_rows=1))

    if annotation:
        __call__.__annotations__["scale"] = annotation
    kernel = scale_rows(f"test.declared.annotation_{annotation}", call=__call__)()
    with pytest.raises(DeclarationError, match=said):
        kernel.layouts.stand_ins(kernel.get_warmup_keys()[0])


def test_a_float_argument_stands_in_as_a_float_and_an_argument_with_no_stand_in_is_refused_where_declared():
    """Triton passes any float as fp32, so a ``float`` argument needs no declared stand-in;
    an int with none is named when the class is made, not when a manifest first warms it."""
    def gained(self, compile_key, x, out, gain: float, scale: int = 2) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(X=x, Out=out, row_stride=x.stride(0), n_rows=1))

    def counted(self, compile_key, x, out, count: int, scale: int = 2) -> LaunchSpec:
        return LaunchSpec(grid=(count,), kwargs=dict(X=x, Out=out, row_stride=x.stride(0), n_rows=1))

    kernel = scale_rows("test.declared.float_stand_in", call=gained)()
    key = kernel.get_warmup_keys()[0]
    assert kernel.warmup_inputs(key)["gain"] == 1.5 and kernel.layouts.stand_ins(key)
    with pytest.raises(DeclarationError, match=r"^ScaleRows: no stand-in for 'count': declare it in stand_ins"):
        scale_rows("test.declared.no_stand_in", call=counted)
    own = scale_rows("test.declared.own_stand_in", call=counted, stand_ins=dict(
        x=Tensor((16, "width")), out=Tensor((16, "width"), "dtype"), count=3))()
    assert own.warmup_inputs(own.get_warmup_keys()[0])["count"] == 3


def test_a_pinned_stride_that_a_layout_could_vary_is_named():
    kernel = scale_rows("test.declared.pinned_stride", pinned_by_key={"row_stride"})()
    with pytest.raises(DeclarationError, match=r"pinned_by_key: 'row_stride' is x\.stride\(0\), which fixed_strides "
                                               r"does not fix"):
        kernel.layouts.stand_ins(kernel.get_warmup_keys()[0])
    fixed_too = scale_rows("test.declared.pinned_fixed", pinned_by_key={"row_stride"}, fixed_strides={"x.0"})()
    assert fixed_too.layouts.stand_ins(fixed_too.get_warmup_keys()[0])


@triton.jit
def _matmul_kernel(A, B, C, N: tl.constexpr):
    # c = a @ b for one N x N tile
    i = tl.arange(0, N)
    tile = i[:, None] * N + i[None, :]
    tl.store(C + tile, tl.dot(tl.load(A + tile), tl.load(B + tile)).to(C.dtype.element_ty))


class _Matmul(TritonJitKernel):
    name = "test.declared.matmul"
    kernel = _matmul_kernel
    stand_ins = dict(a=Tensor((16, 16)), b=Tensor((16, 16), "dtype"), c=Tensor((16, 16), "dtype"))

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("a", warm=["float16"])
        n: int = size_of("a", 0, constexpr="N", warm=[16])

    @kernel_launcher
    def __call__(self, compile_key, a, b, c) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(A=a, B=b, C=c), result=c)


def test_the_interpreter_refuses_a_bf16_dot_it_would_compute_wrongly():
    from jitkern.settings import interpreting

    a = torch.randn(16, 16)
    if not interpreting():
        pytest.skip("compiled kernels compute a bf16 dot right")
    fp16 = _Matmul()(a.half(), a.half(), torch.empty(16, 16, dtype=torch.half))
    torch.testing.assert_close(fp16.float(), a.half().float() @ a.half().float(), atol=0.05, rtol=0.01)
    with pytest.raises(InterpreterCannotRun, match=r"test.declared.matmul: Triton's interpreter computes a bf16 "
                                                   r"tl.dot wrongly \(triton-lang/triton#11584\), and A is bf16"):
        _Matmul()(a.bfloat16(), a.bfloat16(), torch.empty(16, 16, dtype=torch.bfloat16))


def test_a_computed_field_reads_the_arguments_it_names():
    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("x", warm=["float32"])
        width: int = computed(lambda x, scale: x.shape[1] * 0 + 64 if scale else 32, constexpr="WIDTH", warm=[64])
        scale: int = argument("scale", constexpr="SCALE", warm=[2])

    kernel = scale_rows("test.declared.computed", CompileKey=CompileKey)()
    assert kernel.launch_spec(torch.randn(3, 64), torch.empty(3, 64), 0).key.width == 32


def test_record_launches_records_a_dot_kernel_and_in_dry_run_runs_nothing():
    """Under the interpreter a kernel calling ``tl.dot`` has a launch of its own (refusing bf16
    dots); ``record_launches`` still records its launches, and in ``dry_run`` runs none, bf16 too."""
    from jitkern.testing import record_launches

    a = torch.randn(16, 16)
    out = torch.full((16, 16), 7.0, dtype=torch.half)
    with record_launches(dry_run=True) as launches:
        _Matmul()(a.bfloat16(), a.bfloat16(), torch.empty(16, 16, dtype=torch.bfloat16))
        _Matmul()(a.half(), a.half(), out)
    assert [spec.kwargs["A"].dtype for _, spec in launches] == [torch.bfloat16, torch.half]
    assert (out == 7).all(), "a dry run launched"
    with record_launches() as launches:
        _Matmul()(a.half(), a.half(), out)
    assert len(launches) == 1 and not (out == 7).all()


def test_a_config_list_read_by_several_fields_is_deduplicated_and_bounded():
    """One list warming three fields multiplies itself: a value given twice is one key, and
    more combinations than keys could be compiled is a ValueError naming the product."""
    sizes = Config("sizes", list[int], choices=range(1, 2**31))
    key_class = _key_class(dtype=dtype_of("x", warm=["float32"]), width=size_of("x", 1, constexpr="WIDTH", warm=sizes),
                           scale=argument("scale", constexpr="SCALE", warm=sizes),
                           rows=computed(lambda x: x.shape[0], warm=sizes))
    kernel = scale_rows("test.declared.one_list_three_fields", CompileKey=key_class)()
    assert kernel.get_warmup_keys(sizes=[8, 8, 16, 8]) == kernel.get_warmup_keys(sizes=[8, 16])
    with pytest.raises(ValueError, match=r"ScaleRows: this config gives 125000 combinations of key fields "
                                         r"\(1 x 50 x 50 x 50\), more than 100000: split it"):
        kernel.get_warmup_keys(sizes=list(range(1, 51)))


def test_a_plain_compile_key_class_is_made_a_frozen_keyword_only_dataclass():
    """No rule to remember: the key of a plain nested class is frozen and keyword-only (a
    subclass of a dataclass key too); a dataclass that is not frozen is refused."""
    import dataclasses

    from jitkern.kernel.base import JitKernel

    @dataclass(frozen=True, kw_only=True)
    class Shared:
        dtype: str = dtype_of("x", warm=["float32"])

    for key_class in (type("CompileKey", (), {"__annotations__": {"width": int},
                                              "width": size_of("x", 1, constexpr="WIDTH", warm=[64])}),
                      type("CompileKey", (Shared,), {"__annotations__": {"width": int},
                                                     "width": size_of("x", 1, constexpr="WIDTH", warm=[64])})):
        made = type("Plain", (JitKernel,), dict(CompileKey=key_class))
        assert made.CompileKey.__dataclass_params__.frozen
        assert [field.name for field in dataclasses.fields(made.CompileKey)][-1] == "width"
        values = {field.name: 64 for field in dataclasses.fields(made.CompileKey)}
        with pytest.raises(TypeError):
            made.CompileKey(*values.values())  # keyword-only
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.CompileKey(**values).width = 32

    @dataclass(kw_only=True)
    class Mutable:
        width: int = 64

    with pytest.raises(TypeError, match="CompileKey must be frozen"):
        type("Mutable", (JitKernel,), dict(name="test.declared.mutable", CompileKey=Mutable))


@triton.jit
def _weighted_copy_kernel(X, W, Out, HAS_W: tl.constexpr):
    # out[i] = x[i] * w[i] where w is given, else x[i]
    i = tl.arange(0, 16)
    x = tl.load(X + i)
    tl.store(Out + i, x * tl.load(W + i) if HAS_W else x)


def test_an_optional_tensor_a_computed_field_reads_is_none_in_the_stand_ins_of_keys_that_say_so():
    """``has_w = computed(lambda w: w is not None)``: the keys without it get no ``w`` stand-in
    (given, it would launch the other key), those with it the one ``Arguments`` gives."""

    class WeightedCopy(TritonJitKernel):
        kernel = _weighted_copy_kernel
        arguments = Arguments(x=Arg("n", torch.float32), w=Arg("n", torch.float32, optional=True))

        class CompileKey:
            has_w: bool = computed(lambda w: w is not None, constexpr="HAS_W", warm=[False, True])

        stand_ins = dict(out=Tensor(dtype=torch.float32))

        @kernel_launcher
        def __call__(self, compile_key, x, w, out) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(X=x, W=w, Out=out), result=out)

    kernel = WeightedCopy()
    for key in kernel.get_warmup_keys():
        inputs = kernel.warmup_inputs(key)
        assert (inputs["w"] is not None) == key.has_w
        assert kernel.launch_spec(**inputs).key == key


def test_a_size_warmed_by_name_is_a_positive_int_config_and_a_bucketed_one_its_most():
    from jitkern import Buckets
    from jitkern.kernel.declare import METADATA, POSITIVE

    plain = size_of("x", 1, warm="width").metadata[METADATA].warm
    assert plain == Config("width", int, choices=POSITIVE) and plain.values(64) == [64]
    with pytest.raises(ValueError, match=r"width: \[0\] not supported; use an int in \[1, 2147483648\)"):
        plain.values(0)
    most = size_of("x", 0, buckets=Buckets((1, 4, 16)), warm="max_rows").metadata[METADATA].warm
    assert (most.name, most.values(10), most.values(1)) == ("max_rows", [1, 4], [1])
