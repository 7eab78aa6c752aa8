"""Value domains: a deployment names the values of a stride or an integer argument, and
exactly the classes Triton gives them are warmed; anything outside is named."""

from __future__ import annotations

import json

import pytest
import torch

from jitkern import LayoutDomain, guard
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.layouts.values import EmptyDomain, ValueDomain, domain_of
from jitkern.manifest import ManifestError, load_manifest
from jitkern.testing import check_coverage
from warmup_testing import EXAMPLE


@pytest.mark.parametrize("domain, large, classes", [
    (ValueDomain(values=(600,)), False, [600]),
    (ValueDomain(low=1, high=512), False, [1, 16, 2]),
    (ValueDomain(low=2), False, [16, 2]),  # "never 1"
    (ValueDomain(low=16, high=16), False, [16]),
    (ValueDomain(multiple_of=16, low=0), False, [0]),
    (ValueDomain(multiple_of=8, low=8, high=4096), False, [16, 8]),
    (ValueDomain(low=2**31 - 1), True, [2**31 - 1, 2**31, 2**31 + 1]),
])
def test_a_domain_has_a_witness_of_each_class_it_holds(domain, large, classes):
    assert domain.witnesses(large) == classes
    assert all(value in domain for value in classes)


@pytest.mark.parametrize("document, said", [
    ([], "an empty list of values"),
    ({"min": 5, "max": 3}, "min 5 is above max 3"),
    ({"min": 2**31, "max": 2**32}, r"no integer is in \{2147483648\.\.4294967296\} below 2\*\*31"),
    ({"min": 17, "max": 31, "multiple_of": 16}, r"no integer is in \{17\.\.31, multiples of 16\}"),
])
def test_an_empty_domain_is_named(document, said):
    with pytest.raises(EmptyDomain, match=said):
        domain_of(document).witnesses(False)


def _binaries(**values):
    kernel = AxpyKernel()
    domain = LayoutDomain(values={name: domain_of(value) for name, value in values.items()})
    return sorted(binary.layout for binary in kernel.layouts.binary_keys(kernel.get_warmup_keys(dtypes=["float32"]),
                                                                          domain))


def test_exactly_the_classes_of_the_declared_values_are_warmed():
    assert _binaries() == ["", "n_elements:1", "n_elements:i32"]  # any size: three classes
    assert _binaries(n_elements=[1024, 4096]) == [""]  # multiples of 16 only: the stand-ins' own
    assert _binaries(n_elements=[1000]) == ["n_elements:i32"]
    assert _binaries(n_elements={"min": 2}) == ["", "n_elements:i32"]  # never 1


def test_a_tensor_declared_by_where_it_starts_warms_the_alignments_of_those_offsets():
    """``"x": [8]``: x starts 8 bytes past a 16-byte boundary, so only its unaligned binaries."""
    unaligned = ["X_ptr:*fp32", "X_ptr:*fp32 n_elements:1", "X_ptr:*fp32 n_elements:i32"]
    assert _binaries(x=[8]) == unaligned
    assert _binaries(x=[0]) == _binaries() == ["", "n_elements:1", "n_elements:i32"]
    assert _binaries(x=[0, 4]) == _binaries(x={"min": 0, "max": 15}) == sorted(_binaries() + unaligned)
    kernel = AxpyKernel()
    (key,) = kernel.get_warmup_keys(dtypes=["float32"])
    assert kernel.layouts.factors(key, LayoutDomain(values={"x": domain_of([0, 4])})) == {
        "x starts [0, 4] past 16": 2, "n_elements any value": 3}  # what --list says of each declaration


def _manifest(tmp_path, layout):
    document = dict(json.loads(EXAMPLE.read_text()), layout=layout)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    return path


def test_a_manifest_declares_values_and_each_wrong_one_is_one_error_naming_the_field(tmp_path):
    (entry,) = load_manifest(_manifest(tmp_path, {"values": {"n_elements": {"min": 2, "max": 4096}}})).entries
    assert len(entry.keys) == 6 and entry.domain.values["n_elements"] == ValueDomain(low=2, high=4096)
    for values, said in [
        ({"n_element": [1]}, r"layout\.values\['n_element'\]: no kernel of this manifest has a tensor, stride or "
                             r"integer"),
        ({"x": [16]}, r"values\['x'\]: a tensor's values are the bytes past a 16-byte boundary at which it starts, "
                      r"0 to 15; got \[16\]"),
        ({"x": {"min": 4}}, r"values\['x'\]: a tensor's values are the bytes .* got \{4\.\.\}"),
        ({"n_elements": []}, r"values\['n_elements'\]: an empty list of values"),
        ({"n_elements": {"min": 9, "max": 3}}, r"values\['n_elements'\]: min 9 is above max 3"),
        ({"n_elements": [2**31]}, r"values\['n_elements'\]: jitkern\.example\.axpy's public function refuses integers "
                                  r"of 2\*\*31 or more"),
        ({"n_elements": {"max": 3, "multiple_of": 0}}, r"layout\.values\.n_elements\.ValueRangeSchema\.multiple_of: Input "
                                                       r"should be greater than or equal to 1"),
    ]:
        with pytest.raises(ManifestError, match=said):
            load_manifest(_manifest(tmp_path, {"values": values}))
    kernel_layout = json.loads(EXAMPLE.read_text())
    kernel_layout.pop("layout")
    kernel_layout["kernels"][0]["layout"] = {"strided": ["x.0"], "values": {"x.0": [1]}}
    (tmp_path / "both.json").write_text(json.dumps(kernel_layout))
    with pytest.raises(ManifestError, match=r"layout lists 'x\.0' both as strided \(any stride\) and with values"):
        load_manifest(tmp_path / "both.json")
    kernel_layout["kernels"][0]["layout"] = {"unaligned": ["x"], "values": {"x": [8]}}
    (tmp_path / "both.json").write_text(json.dumps(kernel_layout))
    with pytest.raises(ManifestError, match=r"layout lists 'x' both as unaligned \(any start\) and with values"):
        load_manifest(tmp_path / "both.json")


def test_a_tensor_the_public_function_requires_aligned_cannot_be_declared_to_start_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setattr(AxpyKernel, "aligned_tensors", frozenset({"x"}), raising=False)
    assert len(load_manifest(_manifest(tmp_path, {"values": {"x": [0]}})).entries[0].keys) == 9
    with pytest.raises(ManifestError, match=r"values\['x'\]: jitkern\.example\.axpy's public function requires "
                                            r"'x' 16-byte aligned"):
        load_manifest(_manifest(tmp_path, {"values": {"x": [0, 8]}}))


@pytest.mark.compiled
def test_launches_drawn_from_the_declared_values_hit_the_binaries_they_warm():
    domain = LayoutDomain(unaligned=frozenset({"x"}), values={"n_elements": ValueDomain(low=2, high=5000)})
    assert check_coverage(AxpyKernel(), {"dtypes": ["float16"]}, domain, max_examples=60) > 0


@pytest.mark.compiled
def test_launches_drawn_from_the_declared_start_offsets_hit_the_binaries_they_warm():
    kernel, config = AxpyKernel(), {"dtypes": ["float16"]}
    starts = LayoutDomain(values={"x": ValueDomain(values=(2, 8)), "y": ValueDomain(values=(0,))})
    assert check_coverage(kernel, config, starts, max_examples=60) > 0
    aligned = kernel.layouts.binary_keys(kernel.get_warmup_keys(**config))  # warmed as if x started aligned
    with pytest.raises(AssertionError, match=r"misses every warmed binary: x: a fp16 tensor not 16-byte aligned"):
        check_coverage(kernel, config, starts, max_examples=60, warmed=aligned)


@pytest.mark.compiled
def test_the_guard_names_a_value_outside_the_declared_domain(tmp_path, dry_run_gpu, monkeypatch):
    """Served by the manifest's values (sizes that are multiples of 16), a size of 1000
    compiles: the guard says which value left the domain, and the domain."""
    from jitkern.build.compile import CompileTask, compile_task
    from jitkern.serve import load

    monkeypatch.setenv("JITKERN_LOAD_MEMO", "0")
    manifest = _manifest(tmp_path, {"values": {"n_elements": {"min": 16, "multiple_of": 16}}})
    for entry in load_manifest(manifest).entries:
        for binary in entry.keys:
            assert compile_task(CompileTask(entry.kernel.name, binary, "cuda:90")).status in ("compiled", "cached")
    AxpyKernel().binaries.forget()
    load([str(manifest)])
    guard.set_mode("error")
    try:
        x = torch.randn(4096)
        axpy(x, x, 0.5)
        with pytest.raises(guard.ServeTimeCompile, match=r"n_elements: value 1000 outside the declared \{16\.\., "
                                                         r"multiples of 16\}; n_elements: i32 not a multiple of 16"):
            axpy(x[:1000], x[:1000], 0.5)
    finally:
        guard.set_mode("off")


def test_a_one_row_launch_of_a_stride_declared_by_values_finds_its_binary(tmp_path):
    """A dimension of size 1 passes its kernel's usual stride (``launch_stride``), whatever the
    tensor's own: a batch of one token whose row is a slice of a 40-wide projection, in a
    deployment declared ``"a.0": [40]``, still finds a warmed binary."""
    from jitkern.examples.grouped_gemm import grouped_gemm
    from jitkern.manifest import manifest_keys
    from jitkern.testing import missing_from, record_launches

    path = tmp_path / "gemm.json"
    path.write_text(json.dumps({
        "format_version": 1, "name": "gemm", "targets": ["cuda:90"], "modules": ["jitkern.examples.grouped_gemm"],
        "layout": {"values": {"a.0": [40]}},
        "kernels": [{"kernel": "jitkern.example.grouped_gemm",
                     "config": {"n": 64, "k": 32, "top_k": 2, "experts": 4, "max_tokens": 2}}]}))
    keys = manifest_keys(load_manifest(path))
    b = torch.randn(4, 64, 32, dtype=torch.bfloat16)
    for tokens in (2, 1):
        a = torch.randn(tokens, 40, dtype=torch.bfloat16)[:, :32]
        with record_launches(dry_run=True) as launches:
            grouped_gemm(a, b, torch.tensor([[0, 1]] * tokens))
        assert missing_from(launches, keys) == [], f"{tokens} token(s)"
