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

REPO = Path(__file__).resolve().parents[3]
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
    with pytest.raises(TypeError, match=r"^manifest_keys\(\*manifests\): each a load_manifest\(path\), got list$"):
        manifest_keys([loaded])


def test_a_layout_a_kernel_cannot_serve_is_named(tmp_path):
    from jitkern.examples.axpy import AxpyKernel

    class AlignedOut(AxpyKernel):
        name = "test.axpy_aligned_out"
        aligned_tensors = frozenset({"out"})

    document = example(modules=[], kernels=[{"kernel": AlignedOut.name, "config": {"dtypes": ["float32"]}}])
    with pytest.raises(ManifestError, match=r"json: layout\.unaligned lists 'out', which test\.axpy_aligned_out "
                                            r"\(kernels\[0\]\) cannot serve: its public function requires 'out' "
                                            r"16-byte aligned"):  # the manifest's layout, not the entry's
        load_manifest(write(tmp_path, document))
    document = example(modules=[], layout={}, kernels=[{"kernel": AlignedOut.name, "config": {"dtypes": ["float32"]},
                                                        "layout": {"unaligned": ["out"]}}])
    with pytest.raises(ManifestError, match=r"json: kernels\[0\]\.layout\.unaligned lists 'out', which"):
        load_manifest(write(tmp_path, document))


BAD_MANIFESTS = {
    "unknown kernel": (
        lambda: example(kernels=[{"kernel": "jitkern.example.nope", "config": {}}]),
        r"kernels\[0\]\.kernel: unknown kernel 'jitkern.example.nope'",
    ),
    "unknown top-level field": (lambda: example(colour="blue"), r"colour: Extra inputs are not permitted"),
    "unknown config field": (
        lambda: example(kernels=[{"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"], "heads": 3}}]),
        r"kernels\[0\]\.config\.heads: Extra inputs are not permitted \(it takes dtypes, block_sizes\)$",
    ),
    "wrong type": (
        lambda: example(kernels=[
            {"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"]}},
            {"kernel": "jitkern.example.axpy", "config": {"dtypes": ["float32"], "block_sizes": ["1024"]}},
        ]),
        r"kernels\[1\]\.config\.block_sizes\[0\]: Input should be a valid integer, got '1024'$",
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
    "bad target": (lambda: example(targets=["rocm:90"]), r"targets: target 'rocm:90'"),
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
        r"kernels\[0\]\.keys\[0\]\.layout: jitkern\.example\.axpy \[.*\]: \['Q_ptr'\] not among the runtime arguments",
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


IMPOSSIBLE_LAYOUTS = {  # argument -> a specialisation no launch of an axpy key has, given its dtype's name
    "X_ptr": lambda dtype: "*fp64/16",  # another dtype
    "Y_ptr": lambda dtype: f"*{dtype}/8",  # an alignment Triton never marks
    "n_elements": lambda dtype: "i64",  # beyond i32: axpy refuses such sizes (large_ints False)
    "alpha": lambda dtype: "i32",  # a float argument as an int: axpy refuses an int alpha
    "Out_ptr": lambda dtype: f"*{dtype}/16/large",  # a storage over 2 GiB, on a target that never specialises on it
}


@pytest.mark.parametrize("argument", IMPOSSIBLE_LAYOUTS)
def test_an_explicit_key_no_launch_has_is_refused_naming_manifest_kernel_key_and_argument(tmp_path, argument):
    """Such a key used to load, then failed to compile (WarmupMismatch) or built a binary
    nothing launches; the loader refuses it, naming where it is and what is impossible."""
    import random

    dtype = random.choice(["float32", "float16", "bfloat16"])
    short = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]
    block_size = random.choice([64, 256, 1024])
    valid = {"dtype": dtype, "block_size": block_size, "layout": f"X_ptr:*{short} n_elements:i32/16"}
    impossible = {"dtype": dtype, "block_size": block_size,
                  "layout": f"{argument}:{IMPOSSIBLE_LAYOUTS[argument](short)}"}
    path = write(tmp_path, example(kernels=[{"kernel": "jitkern.example.axpy", "keys": [valid, impossible]}]))
    with pytest.raises(ManifestError) as refused:
        load_manifest(path)
    assert str(refused.value).startswith(
        f"{path}: kernels[0].keys[1].layout: jitkern.example.axpy [dtype={dtype},block_size={block_size}]: "
        f"{argument}"), refused.value
    assert f"no launch of this key specialises as {impossible['layout'].partition(':')[2]!r}" in str(refused.value)


def test_a_large_storage_is_a_layout_of_manifests_whose_targets_all_specialise_on_it(tmp_path):
    """AMD specialises a pointer whose storage spans over 2 GiB (``/large``); NVIDIA never does."""
    key = {"dtype": "float16", "block_size": 1024, "layout": "Out_ptr:*fp16/16/large"}
    for targets, loads in ((["hip:gfx942"], True), (["hip:gfx942", "cuda:90"], False), (["cuda:80"], False)):
        path = write(tmp_path, example(targets=targets, kernels=[{"kernel": "jitkern.example.axpy", "keys": [key]}]))
        if loads:
            (binary,) = manifest_keys(load_manifest(path))["jitkern.example.axpy"]
            assert binary.layout == "Out_ptr:*fp16/16/large"
        else:
            with pytest.raises(ManifestError, match=r"over 2 GiB: for targets that specialise on it, AMD's, alone"):
                load_manifest(path)


@pytest.mark.parametrize("shipped", sorted((REPO / "warmup_manifests").glob("*.json")), ids=lambda path: path.stem)
def test_every_binary_a_shipped_manifest_enumerates_loads_as_an_explicit_key(tmp_path, shipped):
    """The loader's check of explicit layouts refuses none a deployment's launches have,
    as record mode writes them (on AMD targets, a storage over 2 GiB too)."""
    from jitkern.kernel import key_fields

    document = json.loads(shipped.read_text())
    enumerated = manifest_keys(load_manifest(shipped))
    amd = all(target.startswith("hip:") for target in document["targets"])
    large = lambda layout: " ".join(part + "/large" if ":*" in part else part for part in layout.split())  # noqa: E731
    explicit = {name: [key_fields(binary) for binary in binaries] for name, binaries in enumerated.items()}
    if amd:
        explicit = {name: keys + [{**key, "layout": large(key["layout"])} for key in keys if ":*" in key.get("layout", "")]
                    for name, keys in explicit.items()}
    document.pop("layout", None)
    document["kernels"] = [{"kernel": name, "keys": keys} for name, keys in explicit.items()]
    loaded = manifest_keys(load_manifest(write(tmp_path, document)))
    assert {name: [key_fields(binary) for binary in binaries] for name, binaries in loaded.items()} == explicit


def test_an_explicit_key_breaking_what_the_public_function_requires_is_refused(tmp_path):
    """An unaligned tensor the kernel requires aligned: a binary no launch looks up."""
    from jitkern.examples.axpy import AxpyKernel

    class AlignedOut(AxpyKernel):
        name = "test.axpy_aligned_out_key"
        aligned_tensors = frozenset({"out"})

    keys = [{"dtype": "float32", "block_size": 1024, "layout": layout} for layout in ("X_ptr:*fp32", "Out_ptr:*fp32")]
    path = write(tmp_path, example(modules=[], kernels=[{"kernel": AlignedOut.name, "keys": keys}]))
    with pytest.raises(ManifestError, match=r"keys\[1\]\.layout: test\.axpy_aligned_out_key \[.*\]: Out_ptr \(out\): "
                                            r"no launch of this key specialises as '\*fp32', only as '\*fp32/16'$"):
        load_manifest(path)


class DtypeShiftKernel(ShiftKernel):
    """The kernel above, its key holding a ``torch.dtype`` as engineers first write one."""

    name = "test.shift_dtype"

    @dataclass(frozen=True)
    class CompileKey:
        dtype: torch.dtype
        has_bias: bool

    def dispatch(self, *, has_bias, dtype=torch.float32):
        return self.CompileKey(dtype, has_bias)

    @kernel_launcher
    def __call__(self, x, bias):
        return LaunchSpec((1,), dict(X=x, Bias=bias, n=x.numel()), self.dispatch(has_bias=bias is not None))


def test_a_key_holding_a_torch_dtype_loads_back_from_what_the_guard_records(tmp_path):
    """The guard records a key as ``key_fields`` writes it (``"dtype": "torch.float32"``) and
    ``merge-record`` adds it to the manifest's ``keys``; a kernel whose key holds a
    ``torch.dtype`` then failed to load with pydantic's PydanticSchemaGenerationError
    traceback (no schema for torch.dtype). Both names of a dtype load, a wrong one is named."""
    from jitkern.kernel import key_fields

    (binary,) = DtypeShiftKernel().layouts.binary_keys(DtypeShiftKernel().get_warmup_keys(has_bias=[False]))
    recorded, by_name = key_fields(binary), {**key_fields(binary), "dtype": "float32"}
    document = {"format_version": 1, "name": "dtypes", "targets": ["cuda:90"],
                "kernels": [{"kernel": DtypeShiftKernel.name, "keys": [recorded, by_name]}]}
    assert manifest_keys(load_manifest(write(tmp_path, document)))[DtypeShiftKernel.name] == [binary]  # one key
    document["kernels"][0]["keys"] = [{**recorded, "dtype": "torch.floaty"}]
    with pytest.raises(ManifestError, match=r"kernels\[0\]\.keys\[0\]\.dtype: expected a torch dtype's "
                                            r"name such as 'float16', got 'torch.floaty'"):
        load_manifest(write(tmp_path, document))


def test_values_for_an_integer_triton_does_not_specialise_are_refused(tmp_path):
    """The GEMM's num_pairs is do_not_specialize: values there would choose nothing and a
    launch outside them would never be named, so the manifest says so where it is read."""
    document = json.loads((EXAMPLE.parent / "grouped-gemm-h200.json").read_text())
    document["kernels"] = document["kernels"][:1]
    document["kernels"][0]["layout"] = {"values": {"num_pairs": [64]}}
    with pytest.raises(ManifestError, match=r"kernels\[0\]\.layout\.values\['num_pairs'\]: num_pairs is "
                                            r"do_not_specialize in grouped_gemm_kernel: one binary takes all its "
                                            r"values, so values here choose nothing; leave it out$"):
        load_manifest(write(tmp_path, document))
