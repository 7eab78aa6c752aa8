"""Manifests: good ones resolve to keys; bad ones give one clear error naming file and field."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
        r"kernels\[0\]\.layout\.strided\[0\]: jitkern.example.axpy has no tensor 'x\.1'",
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
