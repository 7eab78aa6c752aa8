"""A kernel's tuning space (``jitkern.kernel.tuning``): every candidate warmed, each call's
bucket taking the winner a table gave or the declared default (the guard warns, or refuses
in error mode, and nothing is benchmarked), Triton's autotune and heuristics adopted, and
each declaration that cannot work refused in one line."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl
from tuned_kernels import CONFIGS, SIZES, AutotunedScale, TunedDouble

from jitkern import (Buckets, Config, DeclarationError, LaunchSpec, Tensor, TritonJitKernel, TuningSpace, computed,
                     derived, kernel_launcher, tuned)
from jitkern import guard
from jitkern.kernel.tuning import TuningError
from jitkern.layouts.binary_key import key_name


@pytest.fixture
def fresh_winners():
    """Each test starts with no table taken and the guard off, and leaves them so."""
    for kernel in (TunedDouble(), AutotunedScale()):
        kernel.winners.take({}, "")
    yield
    guard.set_mode("off")
    for kernel in (TunedDouble(), AutotunedScale()):
        kernel.winners.take({}, "")


def test_buckets_take_the_last_start_at_or_below_a_value():
    assert [SIZES.of(value) for value in (0, 1, 1023, 1024, 65535, 65536, 10**9)] == [1, 1, 1, 1024, 1024, 65536,
                                                                                      65536]
    assert SIZES.upto(5000) == [1, 1024] and SIZES.upto(0) == [1]


def test_warmup_builds_every_candidate_of_every_key_and_the_selectors_multiply_no_key():
    keys = TunedDouble().get_warmup_keys(dtypes=["float32", "float16"], max_size=10**6)
    assert [key_name(key) for key in keys] == [f"dtype={dtype},block={c['block']},num_warps={c['num_warps']}"
                                               for dtype in ("float32", "float16") for c in CONFIGS]
    assert TunedDouble().winners.selector_rows({"max_size": 5000}) == [(1,), (1024,)]
    with pytest.raises(TypeError, match=r"unknown \['sizes'\]"):
        TunedDouble().get_warmup_keys(sizes=[1])


def test_a_call_takes_its_buckets_default_with_no_table_and_the_tables_winner_once_taken(fresh_winners):
    kernel = TunedDouble()
    small, large = torch.randn(100), torch.randn(70000)
    assert kernel.launch_spec(small, torch.empty_like(small)).key.block == 64  # default: CONFIGS[0] below 1024
    assert kernel.launch_spec(large, torch.empty_like(large)).key.block == 1024
    kernel.winners.take({("float32", 1): CONFIGS[1]}, "a table")
    assert kernel.launch_spec(small, torch.empty_like(small)).key.block == 256  # the memoised key was dropped
    assert kernel.dispatch(dtype=torch.float32, size=1).block == 256
    torch.testing.assert_close(kernel(small, torch.empty_like(small)), small * 2)


def test_a_bucket_without_a_winner_warns_once_under_the_guard_and_is_refused_in_error_mode(fresh_winners):
    kernel = TunedDouble()
    x = torch.randn(2000)
    guard.set_mode("error")
    with pytest.raises(guard.UntunedBucket, match=r"test.tuned_double: no tuned config for the bucket "
                                                  r"dtype=float32,size=1024 \(no tuning table loaded\): its default "
                                                  r"block=1024,num_warps=4 is refused in error mode"):
        kernel(x, torch.empty_like(x))
    with pytest.raises(guard.UntunedBucket):  # refused every time, not only the first
        kernel(x, torch.empty_like(x))
    guard.set_mode("warn")
    with pytest.warns(guard.UntunedBucketWarning, match=r"dtype=float32,size=1024 .* block=1024,num_warps=4 launches"):
        kernel(x, torch.empty_like(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", guard.UntunedBucketWarning)  # a GPU compiles the first call
        kernel(x, torch.empty_like(x))  # once a bucket
    guard.set_mode("error")
    with pytest.raises(guard.UntunedBucket):  # after warn mode let it by, error mode refuses it again
        kernel(x, torch.empty_like(x))
    guard.set_mode("warn")  # the table's winner compiles on a GPU: a serve-time compile, warned
    kernel.winners.take({("float32", 1024): CONFIGS[0]}, "its table")
    with warnings.catch_warnings():
        warnings.simplefilter("error", guard.UntunedBucketWarning)  # a GPU compiles the first call
        torch.testing.assert_close(kernel(x, torch.empty_like(x)), x * 2)


def test_a_table_row_naming_a_config_that_is_no_candidate_is_refused():
    with pytest.raises(TuningError, match=r"t.json: the winner block=128,num_warps=4 is not one of its configs"):
        TunedDouble().winners.take({("float32", 1): dict(block=128, num_warps=4)}, "t.json")
    with pytest.raises(TuningError, match=r"bucket \('float32',\) is not \(dtype, size\)"):
        TunedDouble().winners.take({("float32",): CONFIGS[0]}, "t.json")


def test_an_autotuned_kernel_is_adopted_its_configs_candidates_its_heuristics_constants(fresh_winners):
    kernel = AutotunedScale()
    assert kernel.winners.tuned_names == ("BLOCK", "num_warps", "num_stages")  # num_ctas: Triton's 1 in every config
    assert kernel.winners.candidates == ({"BLOCK": 128, "num_warps": 2, "num_stages": 3},
                                         {"BLOCK": 512, "num_warps": 4, "num_stages": 3})
    keys = kernel.get_warmup_keys(sizes=[4096, 1000])
    assert [key_name(key) for key in keys][:2] == ["n=4096,BLOCK=128,num_warps=2,num_stages=3",
                                                   "n=4096,BLOCK=512,num_warps=4,num_stages=3"]
    assert [kernel.constants(key)["EVEN"] for key in keys] == [True, True, False, False]  # n % BLOCK == 0
    assert kernel.kernel is _autotuned_function()  # the @triton.jit function inside, as the key names binaries
    for size in (4096, 1000):
        x = torch.randn(size)
        torch.testing.assert_close(kernel(x, torch.empty_like(x), 0.5), x * 0.5)  # the default: the first config
        assert kernel.launch_spec(x, torch.empty_like(x), 0.5).key.BLOCK == 128


def _autotuned_function():
    import tuned_kernels

    return tuned_kernels._autotuned_scale_kernel.fn.fn


@triton.jit
def _plain_kernel(X, n, BLOCK: tl.constexpr):
    tl.store(X + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32), mask=tl.arange(0, BLOCK) < n)


def _autotuned(**options):
    return triton.autotune([triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], **options)(
        _plain_kernel)


def _class(name: str, kernel, tuning=None, fields=None, call=None, **attributes):
    """A kernel class of ``kernel`` whose CompileKey has ``fields`` (by default n, read from x)."""

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        n: int = computed(lambda x: x.numel(), warm=[16])

    key_class = CompileKey if fields is None else dataclass(frozen=True, kw_only=True)(
        type("CompileKey", (), {"__annotations__": {f: int for f in fields}, **fields}))

    def __call__(self, compile_key, x) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(X=x, n=x.numel()), result=x)

    namespace = dict(name=name, kernel=kernel, CompileKey=key_class, stand_ins=dict(x=Tensor((16,), torch.float32)),
                     __call__=kernel_launcher(call or __call__), **({"tuning": tuning} if tuning else {}), **attributes)
    return type("Tuned", (TritonJitKernel,), namespace)


@pytest.mark.parametrize("option, feature", [
    (dict(pre_hook=lambda kwargs, reset_only=False: None), "pre_hook"),
    (dict(post_hook=lambda kwargs, exception: None), "post_hook"),
    (dict(reset_to_zero=["X"]), "reset_to_zero"),
    (dict(restore_value=["X"]), "restore_value"),
    (dict(prune_configs_by={"early_config_prune": lambda configs, named_args, **kwargs: configs}), "prune_configs_by"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_what_cannot_be_adopted_is_refused_naming_the_class_and_the_feature(option, feature):
    with pytest.raises(DeclarationError, match=rf"^Tuned.kernel: triton.autotune's {feature} cannot be adopted: "
                                               "jitkern picks configs from a table tuned ahead of serving"):
        _class("test.unadoptable", _autotuned(**option))
    hooked = triton.autotune([triton.Config({"BLOCK": 16}, pre_hook=lambda kwargs: None)], key=["n"])(_plain_kernel)
    with pytest.raises(DeclarationError, match=r"triton.autotune's pre_hook of a Config cannot be adopted"):
        _class("test.unadoptable", hooked)


def test_an_autotuners_key_must_be_a_field_or_a_selector_and_its_configs_alike():
    with pytest.raises(DeclarationError, match=r"^Tuned: triton.autotune key 'n' is neither a field of CompileKey nor "
                                               r"a selector of its tuning space: declare it"):
        _class("test.unkeyed", _autotuned(), fields={"width": computed(lambda x: x.numel(), warm=[16])})
    tuned_by_size = _class("test.keyed_by_selector", _autotuned(), fields={},
                           tuning=TuningSpace(by=dict(n=computed(lambda x: Buckets((1, 64)).of(x.numel()), warm=[1]))))
    assert tuned_by_size().winners.bucket_names == ("n",)
    ragged = triton.autotune([triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}, maxnreg=64)], key=["n"])
    with pytest.raises(DeclarationError, match=r"triton.autotune's configs set different names"):
        _class("test.ragged", ragged(_plain_kernel))
    with pytest.raises(DeclarationError, match=r"Tuned.tuning: configs come from its triton.autotune"):
        _class("test.twice", _autotuned(), tuning=TuningSpace(configs=[dict(BLOCK=16)]))
    with pytest.raises(DeclarationError, match=r"Tuned.CompileKey: \['BLOCK'\] are tuned by its triton.autotune"):
        _class("test.clash", _autotuned(), fields={"n": computed(lambda x: x.numel(), warm=[16]),
                                                    "block": derived(lambda n: n, constexpr="BLOCK")})


def test_a_heuristic_reading_what_the_key_lacks_is_named():
    kernel = _class("test.heuristic", triton.heuristics({"BLOCK": lambda args: args["width"]})(_plain_kernel))()
    with pytest.raises(TypeError, match=r"test.heuristic: triton.heuristics value 'BLOCK' reads 'width', neither a "
                                        r"field of its CompileKey nor one of its constants"):
        kernel.constants(kernel.get_warmup_keys()[0])
    with pytest.raises(DeclarationError, match=r"triton.heuristics sets 'WIDTH', not a parameter of _plain_kernel"):
        _class("test.heuristic_unknown", triton.heuristics({"WIDTH": lambda args: 1})(_plain_kernel))


SPACE = [dict(block=16), dict(block=32)]


@pytest.mark.parametrize("tuning, fields, said", [
    (TuningSpace(SPACE), {"n": computed(lambda x: x.numel(), warm=[16])},
     r"^Tuned.tuning: its configs set \['block'\], neither fields of CompileKey, constexprs of _plain_kernel \(BLOCK\) "
     r"nor launch options$"),
    (TuningSpace(), {"n": computed(lambda x: x.numel(), warm=[16]), "block": tuned(constexpr="BLOCK")},
     r"Tuned.tuning: no configs"),
    (TuningSpace(SPACE, calls=print, inputs=print), {"block": tuned(constexpr="BLOCK")},
     r"Tuned.tuning: calls= and inputs= both say what tune times; give one"),
    (None, {"block": tuned(constexpr="BLOCK")}, r"CompileKey.block is tuned\(\), but the class declares no tuning space"),
    (TuningSpace([dict(block=16), dict(width=2)]), {"block": tuned(constexpr="BLOCK")},
     r"Tuned.tuning: configs\[1\]: lacks \['block'\]; \['width'\] are not tuned fields"),
    (TuningSpace([dict(block=16), dict(block=16)]), {"block": tuned(constexpr="BLOCK")},
     r"configs \['block=16'\] given twice"),
    (TuningSpace(SPACE, default=dict(block=64)), {"block": tuned(constexpr="BLOCK")},
     r"default block=64 is not one of its configs"),
    (TuningSpace(SPACE, default=lambda tokens: SPACE[0]), {"block": tuned(constexpr="BLOCK")},
     r"default reads \['tokens'\], not bucket fields \(\)"),
    (TuningSpace(SPACE, by=dict(size=computed(lambda x: x.numel()))), {"block": tuned(constexpr="BLOCK")},
     r"tuning.by\['size'\]: warm= must give the values a deployment tunes"),
    (TuningSpace(SPACE, by=dict(size=computed(lambda y: 1, warm=[1]))), {"block": tuned(constexpr="BLOCK")},
     r"tuning.by\['size'\]: reads \['y'\], not arguments of __call__"),
    (TuningSpace(SPACE, by=dict(block=computed(lambda x: 1, warm=[1]))), {"block": tuned(constexpr="BLOCK")},
     r"tuning.by: \['block'\] are fields of CompileKey already"),
    (TuningSpace(SPACE), {"block": tuned(constexpr="BLOCK"), "twice": derived(lambda block: 2 * block)},
     r"CompileKey.twice: reads the tuned field 'block'"),
], ids=["config-of-no-constexpr", "no-configs", "calls-and-inputs", "no-space", "candidate-fields", "twice",
        "default-not-a-candidate", "default-reads", "selector-not-warmed", "selector-reads", "selector-is-a-field",
        "derived-of-tuned"])
def test_a_tuning_declaration_that_cannot_work_is_refused(tuning, fields, said):
    with pytest.raises(DeclarationError, match=said):
        _class("test.misdeclared", _plain_kernel, tuning=tuning, fields=fields)


def test_a_tuned_kernel_reads_its_key_and_enumerates_through_its_declaration():
    def own_call(self, x) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(X=x, n=x.numel()), result=x)

    with pytest.raises(DeclarationError, match=r"a tuned kernel's __call__ takes compile_key"):
        _class("test.no_key", _plain_kernel, tuning=TuningSpace(SPACE), fields={"block": tuned(constexpr="BLOCK")},
               call=own_call, dispatch=lambda self, **values: None)
    with pytest.raises(DeclarationError, match=r"a tuned kernel's keys are its declaration's"):
        _class("test.own_keys", _plain_kernel, tuning=TuningSpace(SPACE), fields={"block": tuned(constexpr="BLOCK")},
               get_warmup_keys=lambda self: [])


def test_a_default_that_is_not_a_candidate_is_named_when_a_bucket_takes_it():
    kernel = _class("test.bad_default", _plain_kernel, fields={
        "n": computed(lambda x: x.numel(), warm=Config("sizes", list[int], default=[16])),
        "block": tuned(constexpr="BLOCK")}, tuning=TuningSpace(SPACE, default=lambda n: dict(block=4 * n)))()
    with pytest.raises(TuningError, match=r"^Tuned.tuning: default block=64 is not one of its configs"):
        kernel.dispatch(n=16)


def test_the_grouped_gemm_declares_its_tiles_as_a_space_with_the_old_tiles_as_default():
    from jitkern.examples.grouped_gemm import BATCHES, TILES, GroupedGemmKernel

    kernel = GroupedGemmKernel()
    assert kernel.winners.bucket_names == ("dtype", "n", "k", "top_k", "mul_routed_weight", "experts", "batch")
    assert len(kernel.winners.candidates) == len(TILES) == 9
    keys = kernel.get_warmup_keys(n=1408, k=2048, top_k=6, experts=64, max_tokens=512)
    assert len(keys) == 2 * 9  # weights or not, each candidate; the batch buckets multiply no key
    assert kernel.winners.selector_rows({"experts": 64, "max_tokens": 512}) == [(64, b) for b in BATCHES.upto(512)]
    blocks = {tokens: kernel.dispatch(dtype="bfloat16", n=1408, k=2048, top_k=6, mul_routed_weight=False, experts=64,
                                      batch=BATCHES.of(tokens)).BLOCK_SIZE_M for tokens in (1, 16, 31, 32, 63, 64, 512)}
    assert blocks == {1: 16, 16: 16, 31: 16, 32: 32, 63: 32, 64: 64, 512: 64}


def test_the_configs_declare_the_tuned_fields_the_key_lacks_by_the_names_they_set():
    """Each tuned field written once, in the candidates: a constexpr's name or a launch option's."""
    kernel = _class("test.tuned_by_configs", _plain_kernel, fields={}, tuning=TuningSpace(
        [dict(BLOCK=16, num_warps=1), dict(BLOCK=32, num_warps=2)]))()
    assert [key_name(key) for key in kernel.get_warmup_keys()] == ["BLOCK=16,num_warps=1", "BLOCK=32,num_warps=2"]
    assert kernel.constants(kernel.get_warmup_keys()[1]) == {"BLOCK": 32, "num_warps": 2}
    assert kernel.launch_spec(torch.zeros(8)).key.BLOCK == 16  # no table: the first candidate
