"""Manifests: good ones resolve to keys; bad ones give one clear error naming file and field."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from jitkern import LaunchSpec, TritonJitKernel, TritonWarmupTensor, kernel_launcher
from jitkern.manifest import ManifestError, json_schema, load_manifest, manifest_keys

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "warmup_manifests" / "jitkern-example.json"


def write(tmp_path, document) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def example(**changes):
    document = json.loads(EXAMPLE.read_text())
    document.update(changes)
    return document


def test_example_manifest_resolves_to_the_kernels_keys():
    loaded = load_manifest(EXAMPLE)
    keys = manifest_keys(loaded)["jitkern.example.axpy"]
    assert len(keys) == len(set(keys)) == 3 * 3 * 8  # dtypes x integer classes x alignments


def test_a_layout_a_kernel_cannot_serve_is_named(tmp_path):
    from jitkern.examples.axpy import AxpyKernel

    class AlignedOut(AxpyKernel):
        name = "test.axpy_aligned_out"
        aligned_tensors = frozenset({"out"})

    document = example(modules=[], kernels=[{"kernel": AlignedOut.name, "config": {"dtypes": ["float32"]}}])
    with pytest.raises(ManifestError, match=r"layout.unaligned lists 'out', which test.axpy_aligned_out cannot serve: "
                                            r"its public function requires 'out' 16-byte aligned"):
        load_manifest(write(tmp_path, document))


BAD_MANIFESTS = {
    "unknown kernel": (
        lambda: example(kernels=[{"kernel": "jitkern.example.nope", "config": {}}]),
        r"kernels\[0\]\.kernel: unknown kernel 'jitkern.example.nope'",
    ),
    "unknown top-level field": (lambda: example(colour="blue"), r"colour: Extra inputs are not permitted"),
    "unknown config field": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"], "heads": 3}}]),
        r"kernels\[0\]\.config\.heads: Extra inputs are not permitted",
    ),
    "wrong type": (
        lambda: example(kernels=[
            {"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"]}},
            {"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"], "block_sizes": ["1024"]}},
        ]),
        r"kernels\[1\]\.config\.block_sizes\[0\]: Input should be a valid integer",
    ),
    "missing config": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy"}]),
        r"kernels\[0\]: give exactly one of 'config'",
    ),
    "missing config field": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {}}]),
        r"kernels\[0\]\.config\.dtypes: Field required",
    ),
    "bad config value": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float8"]}}]),
        r"kernels\[0\]\.config: dtypes: \['float8'\] not supported",
    ),
    "bad target": (lambda: example(targets=["rocm:90"]), r"targets: Value error, target 'rocm:90'"),
    "layout of an unknown tensor": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"]},
                                  "layout": {"unaligned": ["x", "zz"]}}]),
        r"kernels\[0\]\.layout\.unaligned\[1\]: jitkern.example.axpy has no tensor 'zz' \(its tensors: out, x, y\)",
    ),
    "manifest layout of a tensor no kernel has": (
        lambda: example(layout={"strided": ["x", "z.0"]}),
        r"layout\.strided\[1\]: no kernel of this manifest has a tensor 'z\.0'",
    ),
    "layout of a dimension the tensor lacks": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"]},
                                  "layout": {"strided": ["x.1"]}}]),
        r"kernels\[0\]\.layout\.strided\[0\]: 'x\.1': 'x' of jitkern.example.axpy \(kernels\[0\]\) has 1 "
        r"dimensions, no dimension 1",
    ),
    "manifest layout of a dimension a kernel's tensor lacks": (
        lambda: example(layout={"strided": ["x.1"]}),
        r"layout\.strided\[0\]: 'x\.1': 'x' of jitkern.example.axpy \(kernels\[0\]\) has 1 dimensions, "
        r"no dimension 1",
    ),
    "a dimension not written as its number": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"]},
                                  "layout": {"strided": ["x.00"]}}]),
        r"kernels\[0\]\.layout\.strided\[0\]: 'x\.00' names dimension 0 of 'x'; write x\.0",
    ),
    "a manifest layout's dimension not written as its number": (
        lambda: example(layout={"strided": ["x", "y.01"]}),
        r": layout\.strided\[1\]: 'y\.01' names dimension 1 of 'y'; write y\.1",
    ),
    "unknown layout field": (
        lambda: example(layout={"misaligned": ["x"]}), r"layout\.misaligned: Extra inputs are not permitted",
    ),
    "layout beside explicit keys": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "keys": [{"dtype": "float32", "block_size": 64}],
                                  "layout": {"unaligned": ["x"]}}]),
        r"kernels\[0\]\.layout: explicit keys carry their own layout",
    ),
    "explicit key with a layout of unknown arguments": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy",
                                  "keys": [{"dtype": "float32", "block_size": 64, "layout": "Q_ptr:*fp32"}]}]),
        r"kernels\[0\]\.keys\[0\]\.layout: \['Q_ptr'\] not among the runtime arguments",
    ),
    "wrong format version": (lambda: example(format_version=2), r"format_version: Input should be 1"),
    "empty file": (lambda: "   \n", r"empty file"),
    "not JSON": (lambda: "{'format_version': 1,", r"not JSON: Expecting property name"),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_bad_manifest_gives_one_clear_error(tmp_path, case):
    make, message = BAD_MANIFESTS[case]
    path = write(tmp_path, make())
    with pytest.raises(ManifestError, match=message) as error:
        load_manifest(path)
    assert str(error.value).startswith(str(path))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "nowhere.json")


def test_explicit_keys_entries(tmp_path):
    key = {"dtype": "float32", "block_size": 512, "layout": "n_elements:i32 Out_ptr:*fp32"}
    loaded = load_manifest(write(tmp_path, example(kernels=[{"kernel": "jitkern.example.axpy", "keys": [key]}])))
    (found,) = manifest_keys(loaded)["jitkern.example.axpy"]
    assert found.key.block_size == 512 and found.layout == "Out_ptr:*fp32 n_elements:i32"  # in argument order
    with pytest.raises(ManifestError, match=r"kernels\[0\]\.keys\[0\]"):
        load_manifest(write(tmp_path, example(kernels=[{"kernel": "jitkern.example.axpy", "keys": [{"x": 1}]}])))


def test_schema_command_prints_the_json_schema():
    run = subprocess.run([sys.executable, "-m", "jitkern.warmup", "schema"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    schema = json.loads(run.stdout)
    assert schema == json_schema()
    assert set(schema["required"]) >= {"format_version", "name", "targets", "kernels"}


@triton.jit
def _shift_kernel(X, Bias, n, HAS_BIAS: tl.constexpr):
    pass  # never launched: a manifest builds stand-ins only


class ShiftKernel(TritonJitKernel["ShiftKernel.CompileKey"]):
    """A kernel with an optional tensor: ``bias`` is a tensor of some keys only."""

    name = "test.shift"
    kernel = _shift_kernel
    pinned_by_key = frozenset({"n"})  # one size: only bias's layout varies

    @dataclass(frozen=True)
    class CompileKey:
        has_bias: bool

    def dispatch(self, *, has_bias):
        return self.CompileKey(has_bias)

    def get_warmup_keys(self, *, has_bias: list[bool]):
        return [self.dispatch(has_bias=value) for value in has_bias]

    def warmup_inputs(self, key):
        x = TritonWarmupTensor(torch.float32, shape=(16,))
        return dict(x=x, bias=x if key.has_bias else None)

    def constants(self, key):
        return dict(HAS_BIAS=key.has_bias)

    @kernel_launcher
    def __call__(self, x, bias):
        return LaunchSpec((1,), dict(X=x, Bias=bias, n=x.numel()), self.dispatch(has_bias=bias is not None))


@pytest.mark.parametrize("has_bias", [[False, True], [True, False]], ids=["without-first", "with-first"])
@pytest.mark.parametrize("where", ["kernel", "manifest"])
def test_a_layout_may_name_a_tensor_some_keys_lack(tmp_path, has_bias, where):
    """Layout names are checked against the tensors of every key, not the first key's."""
    entry = {"kernel": ShiftKernel.name, "config": {"has_bias": has_bias}}
    layout = {"unaligned": ["bias"], "strided": ["bias.0"]}
    document = {"format_version": 1, "name": "optional", "targets": ["cuda:90"],
                "kernels": [{**entry, "layout": layout}] if where == "kernel" else [entry],
                **({"layout": layout} if where == "manifest" else {})}
    binaries = manifest_keys(load_manifest(write(tmp_path, document)))[ShiftKernel.name]
    assert {binary.layout for binary in binaries if binary.key.has_bias} == {"", "Bias:*fp32"}
    assert {binary.layout for binary in binaries if not binary.key.has_bias} == {""}
    layout["strided"] = ["bias.1"]
    with pytest.raises(ManifestError, match=r"'bias\.1': 'bias' of test\.shift \(kernels\[0\]\) has 1 dimensions"):
        load_manifest(write(tmp_path, document))
