"""The coverage checker on every shipped kernel: launches drawn from a layout domain, each
pointer at its own offset, odd and huge strides, boundary sizes, every index dtype of the
shipped configs, all hit a binary that warming the domain builds (Triton's lookup key,
compile-only for cuda:90)."""

import json
import re
from pathlib import Path

import pytest

from jitkern import LayoutDomain
from jitkern.kernel import registry
from jitkern.testing import check_coverage

pytestmark = pytest.mark.compiled

MANIFESTS = sorted((Path(__file__).resolve().parents[3] / "warmup_manifests").glob("*.json"))

# Wider than the shipped manifests' layouts: what each public function accepts, within
# jitkern's bound on binaries per key.
ROWS = {"unaligned": ["key", "z", "mean", "ring"], "strided": ["key.0", "z.0", "mean.0", "positions"]}
WIDE_LAYOUTS = {
    "jitkern.example.axpy": {"unaligned": ["x", "y", "out"]},
    "jitkern.example.grouped_gemm": {"unaligned": ["a", "b", "out"], "strided": ["a.0", "b.0", "b.1"]},
    "step5.update_decode": ROWS,
    "step5.prefill_summary": ROWS,
    "step5.update_verify": ROWS,
    "step5.write_ring": {"unaligned": ["key", "z", "ring"], "strided": ["key.0", "z.0", "key.2"]},
    "step5.build_prefill_groups": {"strided": ["positions"]},
    "step5.prefill_update": ROWS,
    "step5.build_prefill_groups_filled": {"strided": ["positions"]},
    "deepseek_v4.save_partial_states": {"unaligned": ["kv", "score", "ape", "state_cache"],
                                        "strided": ["kv.0", "score.0"]},
    "deepseek_v4.compress_windows": {"unaligned": ["state_cache", "out"], "strided": ["state_cache.0", "out.0"]},
    "deepseek_v4.decode_step": {"unaligned": ["kv", "score", "ape", "state_cache", "out"],
                                "strided": ["kv.0", "score.0", "state_cache.0", "out.0"]},
}


def shipped_configs():
    """(kernel name, config) of every config entry of the shipped manifests, once each."""
    seen = {}
    for path in MANIFESTS:
        document = json.loads(path.read_text())
        registry.import_modules(document["modules"])
        for entry in document["kernels"]:
            seen.setdefault(json.dumps([entry["kernel"], entry["config"]], sort_keys=True), entry)
    return [(entry["kernel"], entry["config"]) for entry in seen.values()]


CONFIGS = shipped_configs()


def test_every_shipped_kernel_has_a_wide_layout_here():
    assert {name for name, _ in CONFIGS} == set(WIDE_LAYOUTS)


@pytest.mark.parametrize("name, config", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_launches_drawn_from_a_wide_layout_hit_warmed_binaries(name, config):
    assert check_coverage(registry.get_kernel(name), config, WIDE_LAYOUTS[name], max_examples=40) > 0


@pytest.mark.parametrize("name, config", CONFIGS[:1] + [c for c in CONFIGS if c[0] != CONFIGS[0][0]][:3])
def test_launches_drawn_from_the_default_layout_hit_warmed_binaries(name, config):
    assert check_coverage(registry.get_kernel(name), config, max_examples=40) > 0


def test_a_warmup_narrower_than_the_deployment_fails_naming_the_argument():
    """The issue's deployment: z a slice of a wider projection (8 bytes off 16), key aligned."""
    kernel = registry.get_kernel("step5.update_decode")
    config = {"block_size": 64, "ring_capacity": 8}
    deployment = {"unaligned": ["z"], "strided": ["z.0"]}
    assert check_coverage(kernel, config, deployment, max_examples=60) > 0
    one_flag_for_all = kernel.layouts.binary_keys(kernel.get_warmup_keys(**config),
                                          LayoutDomain(unaligned=frozenset({"key"}), strided=frozenset({"z.0"})))
    with pytest.raises(AssertionError, match=r"z: a bf16 tensor not 16-byte aligned; warmed binaries all assume a "
                                             r"bf16 tensor 16-byte aligned"):
        check_coverage(kernel, config, deployment, warmed=one_flag_for_all, max_examples=200)


def test_a_contiguous_stride_over_a_varying_dimension_is_warmed_in_every_class():
    """A block table row holds max_blocks entries, which varies by deployment: its stand-in
    declares that dimension varying, so its row stride is warmed as 1, 16k and other."""
    kernel = registry.get_kernel("deepseek_v4.compress_windows")
    config = {"head_dim": 128, "compress_ratio": 4, "index_dtypes": ["int32"]}
    keys = kernel.get_warmup_keys(**config)
    assert {binary.layout for binary in kernel.layouts.binary_keys(keys)} == \
        {"", "block_table_row_stride:1", "block_table_row_stride:i32"}
    assert check_coverage(kernel, config, max_examples=80) > 0
    base_only = [binary for binary in kernel.layouts.binary_keys(keys) if not binary.layout]
    with pytest.raises(AssertionError, match=r"block_table.stride\(0\): (equal to 1|i32 not a multiple of 16)"):
        check_coverage(kernel, config, warmed=base_only, max_examples=200)


def test_values_no_drawn_launch_can_take_are_named_not_left_to_hypothesis():
    """n_elements read from stand-ins whose size never varies: values other than theirs are
    drawn by no launch, which hypothesis calls Unsatisfiable; the checker says why."""
    from jitkern import Tensor
    from jitkern.examples.axpy import AxpyKernel

    class FixedSizeAxpy(AxpyKernel):
        name = "test.axpy_fixed_size"
        stand_ins = {name: Tensor(("block_size",), "dtype", varying=()) for name in ("x", "y", "out")}

    with pytest.raises(AssertionError, match=r"^test\.axpy_fixed_size: no launch drawn from the layout domain fits it "
                                             r"\(values of n_elements\): a value no drawn size gives"):
        check_coverage(FixedSizeAxpy(), {"dtypes": ["float32"]}, {"values": {"n_elements": [3000]}}, max_examples=10)


def test_a_plain_stand_in_of_another_type_than_the_launcher_takes_is_drawn_as_that_type():
    """An int ``alpha`` stand-in warms an i32 (or constexpr 1) binary, but ``axpy`` passes
    ``float(alpha)``, which specialises as fp32: every real call would compile. The checker
    draws floats for ``__call__``'s ``alpha: float``, so it fails, naming ``alpha``; it used
    to pass the int on and find the warmed binary."""
    import random

    from jitkern.examples.axpy import AxpyKernel

    class IntAlphaAxpy(AxpyKernel):
        name = "test.axpy_int_alpha"

        def warmup_inputs(self, key):
            return {**super().warmup_inputs(key), "alpha": random.choice([1, 2, 16, 17, 3000])}

    config = {"dtypes": [random.choice(["float32", "float16", "bfloat16"])]}
    with pytest.raises(AssertionError, match=r"misses every warmed binary: alpha: fp32; warmed binaries "):
        check_coverage(IntAlphaAxpy(), config, {"unaligned": ["x", "y", "out"]}, max_examples=40)
    assert check_coverage(AxpyKernel(), config, {"unaligned": ["x", "y", "out"]}, max_examples=40) > 0


def test_a_dimension_of_size_1_is_drawn_with_any_stride_where_the_usual_layout_is_a_view(monkeypatch):
    """The store's kv and score are usually views of one ``[tokens, 2W]`` projection, not
    contiguous. Their row of one token takes any stride too (a transposed column has 1):
    the checker draws it, so a launcher passing it as it is, not as ``launch_stride`` gives
    it, is caught. The checker drew such strides for contiguous stand-ins only."""
    import importlib

    from jitkern import launch_stride

    store_module = importlib.import_module("deepseek_v4.save_partial_states")  # the package names the function so

    kernel = registry.get_kernel("deepseek_v4.save_partial_states")
    config = {"head_dim": 128, "compress_ratio": 128, "index_dtypes": ["int32"]}
    assert check_coverage(kernel, config, max_examples=60) > 0
    as_it_is = lambda tensor, dim, usual=None: tensor.stride(dim) if usual else launch_stride(tensor, dim)  # noqa: E731
    monkeypatch.setattr(store_module, "launch_stride", as_it_is)
    misses = []
    for _ in range(4):  # fresh draws each time: a run of 300 may draw no one-token row with such a stride
        try:
            check_coverage(kernel, config, max_examples=300)
        except AssertionError as error:
            misses.append(str(error))
            break
    assert misses, "the checker drew no one-token kv or score row with a stride the launcher passes as it is"
    assert re.search(r"(kv|score)\.stride\(0\): (equal to 1|i32 not a multiple of 16)", misses[0]), misses[0]
