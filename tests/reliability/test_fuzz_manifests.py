"""Reliability promise 6: the manifest loader never fails with anything but one ``ManifestError``.

Hypothesis feeds ``load_manifest`` arbitrary JSON, mutations of the shipped manifests and
damaged bytes. Each input must load into a sane manifest (every entry a registered kernel
with a non-empty tuple of hashable keys of its ``CompileKey``) or raise exactly
``ManifestError`` whose message:

- starts with ``<file>: `` and is printable text (one problem a line, no raw control
  characters or lone surrogates from the input, at most a dozen lines);
- says what is wrong with the file as a whole (``cannot read``, ``empty file``,
  ``not UTF-8 (byte N)``, ``not JSON: ... (line L, column C)`` or, for JSON Python
  cannot hold, ``not JSON: ...``), or names a field path: ``(top level)``, or a path
  like ``kernels[0].config.block_size`` / ``targets[1]`` / ``config['odd key']``
  (identifiers after dots, list indices and quoted keys in brackets). When the file is
  JSON, the path must exist in the document, except a missing (``Field required``) leaf.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

import deepseek_v4  # noqa: F401 - the kernel modules, imported once rather than per example
import jitkern.examples.axpy  # noqa: F401
import jitkern.examples.grouped_gemm  # noqa: F401
import step5.ops.summary_update  # noqa: F401
from jitkern.kernel import registry
from jitkern.kernel import key_fields, key_name
from jitkern.manifest import ManifestError, load_manifest

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "warmup_manifests").glob("*.json"))
DOCUMENTS = {path.name: json.loads(path.read_text()) for path in SHIPPED}
KERNELS = {name: registry.get_kernel(name) for name in registry.kernel_names()}
KERNEL_MODULES = ["deepseek_v4", "step5.ops.summary_update", "jitkern.examples.axpy", "jitkern.examples.grouped_gemm"]

pytestmark = pytest.mark.usefixtures("bounded_memory")  # tests/reliability/conftest.py

# Module names the fuzzer may put in "modules": importing anything else (say "antigravity")
# could have side effects, so every other string is renamed under a package that does not exist.
SAFE_MODULES = KERNEL_MODULES + [
    "no_such_module_xyz", "jitkern.no_such_module_xyz", "step5.ops.summary_update.not_a_package",
    "", " ", ".", "..", ".relative", "..relative", "a..b", "trailing.", "1abc", "not an identifier",
    "with-dash", "nul\x00byte", "slash/name", "\ud800", "é_no_such_module",
]
FIELD_NAMES = sorted(
    {"format_version", "name", "description", "targets", "modules", "kernels", "kernel", "config", "keys", "layout",
     "unaligned", "strided"}
    | {name for kernel in KERNELS.values() for name in inspect.signature(kernel.get_warmup_keys).parameters}
    | {field.name for kernel in KERNELS.values() for field in dataclasses.fields(kernel.CompileKey)}
)
ODD_STRINGS = ["", " ", "\n", "\x00", "\ud800", "\ufeff", "é", "𝔘", "a" * 3000, "[0]", "(top level)", "'", '"',
               "\\"]
TARGETS = ["cuda:90", "cuda:90a", "cuda:80", "cuda:", "cuda:x", "CUDA:90", " cuda:90 ", "cuda:90\n", "cuda:٩٠",
           "cuda:" + "9" * 5000, "rocm:90"]
DTYPES = ["int32", "int64", "int16", "float32", "float16", "bfloat16", "float8"]
WEIRD_STRINGS = ODD_STRINGS + TARGETS + DTYPES + [*KERNELS, "jitkern.example.nope"]
HUGE_NUMBERS = [0, 1, -1, 2, 16, 17, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1,
                10**30, 10**300, int("9" * 4300), -int("9" * 4300),  # 4300 digits: the most json reads
                0.0, -0.0, 1.5, 1e308, float("inf"), float("-inf"), float("nan")]

json_leaves = (
    st.none() | st.booleans() | st.integers() | st.sampled_from(HUGE_NUMBERS)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | st.sampled_from(WEIRD_STRINGS)
)
json_keys = st.text(max_size=8) | st.sampled_from(FIELD_NAMES + ODD_STRINGS)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=4),
    max_leaves=12,
)

# Valid explicit keys of every kernel, as the JSON objects a guard record would hold.
VALID_KEYS: dict[str, list[dict]] = {}
for _path in SHIPPED:
    for _entry in load_manifest(_path).entries:
        VALID_KEYS.setdefault(_entry.kernel.name, []).extend(key_fields(key) for key in _entry.keys[:4])


# --- the property --------------------------------------------------------------------------


def check_file(path: Path) -> None:
    """``load_manifest(path)`` loads a sane manifest or raises one well-formed ``ManifestError``."""
    try:
        loaded = load_manifest(path)
    except ManifestError as error:
        assert type(error) is ManifestError
        check_message(path, str(error))
        return
    outcome("loads")
    for position, entry in enumerate(loaded.entries):
        assert entry.index == position
        assert type(entry.kernel) is type(KERNELS[entry.kernel.name])
        assert isinstance(entry.keys, tuple) and entry.keys, entry
        hints = typing.get_type_hints(type(entry.kernel).CompileKey)
        for binary in entry.keys:
            key = binary.key
            assert isinstance(key, type(entry.kernel).CompileKey) and isinstance(binary.layout, str)
            hash(binary)
            key_name(binary)  # printable (a key of an integer Python cannot print would break reports)
            for field in dataclasses.fields(key):
                assert type(getattr(key, field.name)) is hints[field.name], (field.name, key)
    assert len(loaded.entries) == len(loaded.manifest.kernels) >= 1 and loaded.manifest.targets


def outcome(text: str) -> None:
    """Counted by ``pytest --hypothesis-show-statistics``: how far into the loader inputs get."""
    if currently_in_test_context():
        event(text)


FILE_PROBLEMS = re.compile(
    r"cannot read: .+|empty file; .+|not UTF-8: .*\(byte \d+\)|not JSON: .+ \(line \d+, column \d+\)"
    r"|not JSON: (lists or objects nested too deeply|an integer of more than \d+ digits)"
)
PATH_STEP = re.compile(r"""\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]""")


def check_message(path: Path, message: str) -> None:
    lines = message.split("\n")
    assert lines[0].startswith(f"{path}: "), message
    assert 1 <= len(lines) <= 12, message
    assert all(line.isprintable() for line in lines), message
    message.encode("utf-8")  # printable on any terminal (lone surrogates would not encode)
    rest = lines[0][len(f"{path}: "):]
    if FILE_PROBLEMS.fullmatch(rest):
        assert len(lines) == 1, message
        outcome(f"ManifestError: {rest.partition(':')[0].partition(';')[0]}")
        return
    problems = [line.removeprefix("  ") for line in lines[1:]] if rest == "invalid manifest" else [rest]
    assert problems, message
    where = re.sub(r"\[\d+\]", "[i]", problems[0].partition(": ")[0])
    outcome(f"ManifestError: {where}")
    document = parsed(path)
    for problem in problems:
        if re.fullmatch(r"\.\.\. and \d+ more", problem):
            continue
        location, separator, reason = problem.partition(": ")
        assert separator and reason, f"no field path in {problem!r}"
        if location == "(top level)":
            continue
        steps = parse_location(location)
        assert steps is not None, f"{location!r} is not a field path ({message})"
        if document is not None:
            assert_in_document(document, steps, missing_ok="Field required" in reason, message=message)


def parse_location(location: str) -> list[str | int] | None:
    """``kernels[0].config['a b']`` -> ``['kernels', 0, 'config', 'a b']``; None if malformed."""
    steps, at = [], 0
    while at < len(location):
        match = PATH_STEP.match(location, at)
        if not match or (match.group(1) and location[at] != "." and at > 0):
            return None
        name, index, quoted = match.groups()
        steps.append(name if name is not None else int(index) if index is not None else ast.literal_eval(quoted))
        at = match.end()
    return steps or None


def assert_in_document(document, steps, missing_ok: bool, message: str) -> None:
    node = document
    for depth, step in enumerate(steps):
        last = depth == len(steps) - 1
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        else:
            assert last and missing_ok and isinstance(node, dict), f"{steps} not in the document: {message}"


def parsed(path: Path):
    """The file's JSON document as the loader reads it, or None."""
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return None


# --- inputs --------------------------------------------------------------------------------


def sanitized(document):
    """The document with every module name outside ``SAFE_MODULES`` renamed under a missing package."""
    if isinstance(document, dict) and isinstance(document.get("modules"), list):
        document = {**document, "modules": [
            name if not isinstance(name, str) or name in SAFE_MODULES else f"no_such_module_xyz.{name}"
            for name in document["modules"]
        ]}
    return document


def check_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifest.json"
        path.write_bytes(data)
        check_file(path)


def check_document(document) -> None:
    check_bytes(json.dumps(sanitized(document)).encode())  # ensure_ascii: lone surrogates become \ud800


FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(json_values)
def test_arbitrary_json(document):
    check_document(document)


@FUZZ
@given(st.fixed_dictionaries(
    {"format_version": st.sampled_from([1, 1, 2, True, 1.0, "1"]), "name": st.sampled_from(["n", "", 5]),
     "targets": st.lists(st.sampled_from(TARGETS), max_size=3)},
    optional={"modules": st.lists(st.sampled_from(SAFE_MODULES), max_size=3), "description": json_values,
              "kernels": st.lists(json_values, max_size=3)},
))
def test_arbitrary_json_of_a_manifests_shape(document):
    """Nearer the loader's later stages than fully arbitrary JSON gets."""
    check_document(document)


# Mutations of one shipped manifest: each draws where and what from ``data``.


def paths_in(node, prefix=()):
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for step, child in children:
        yield from paths_in(child, prefix + (step,))


def parent_and_step(document, path):
    node = document
    for step in path[:-1]:
        node = node[step]
    return node, path[-1]


def set_at(document, path, value):
    if not path:
        return value
    parent, step = parent_and_step(document, path)
    parent[step] = value
    return document


def delete_at(data, document, path):
    if not path:
        return data.draw(json_values)
    parent, step = parent_and_step(document, path)
    del parent[step]
    return document


def replace_at(data, document, path):
    return set_at(document, path, data.draw(json_values))


def number_at(data, document, path):
    return set_at(document, path, data.draw(st.sampled_from(HUGE_NUMBERS) | st.integers()))


def string_at(data, document, path):
    return set_at(document, path, data.draw(st.sampled_from(WEIRD_STRINGS) | st.text(max_size=6)))


def add_unknown_key(data, document, path):
    dicts = [p for p in paths_in(document) if isinstance(value_at(document, p), dict)]
    if dicts:
        target = value_at(document, data.draw(st.sampled_from(dicts)))
        target[data.draw(json_keys)] = data.draw(json_values)
    return document


def resize_list(data, document, path):
    lists = [p for p in paths_in(document) if isinstance(value_at(document, p), list)]
    if lists:
        where = data.draw(st.sampled_from(lists))
        values = value_at(document, where)
        document = set_at(document, where, data.draw(st.sampled_from(
            [[], values * 2, values * 16, values[:1], values[::-1], [values]]
        )))
    return document


def value_at(document, path):
    node = document
    for step in path:
        node = node[step]
    return node


def retarget_fields(data, document, path):
    """Weird values where the loader checks names: kernel, targets, modules."""
    if not isinstance(document, dict):
        return document
    which = data.draw(st.sampled_from(["kernel", "targets", "modules"]))
    if which == "modules":
        document["modules"] = data.draw(st.lists(st.sampled_from(SAFE_MODULES), max_size=3))
    elif which == "targets":
        document["targets"] = data.draw(st.lists(st.sampled_from(WEIRD_STRINGS) | st.text(max_size=8), max_size=3))
    elif isinstance(document.get("kernels"), list) and document["kernels"]:
        entry = data.draw(st.sampled_from(document["kernels"]))
        if isinstance(entry, dict):
            entry["kernel"] = data.draw(st.sampled_from(WEIRD_STRINGS))
    return document


def explicit_keys(data, document, path):
    """Turn an entry into explicit ``keys`` (often of another kernel), then damage them."""
    kernels = document.get("kernels") if isinstance(document, dict) else None
    if not isinstance(kernels, list) or not kernels or not isinstance(kernels[0], dict):
        return document
    entry = kernels[data.draw(st.integers(0, len(kernels) - 1))]
    if not isinstance(entry, dict):
        return document
    source = data.draw(st.sampled_from(sorted(VALID_KEYS)))
    keys = [dict(key) for key in data.draw(st.lists(st.sampled_from(VALID_KEYS[source]), max_size=3))]
    for key in keys:
        for _ in range(data.draw(st.integers(0, 2))):
            field = data.draw(st.sampled_from(sorted(key) + ["unknown_field"]))
            action = data.draw(st.sampled_from(["drop", "list", "dict", "any", "number", "string"]))
            if action == "drop":
                key.pop(field, None)
            else:
                key[field] = {"list": [1], "dict": {"a": 1}}.get(action) or data.draw(
                    {"any": json_values, "number": st.sampled_from(HUGE_NUMBERS),
                     "string": st.sampled_from(WEIRD_STRINGS)}[action])
    entry["keys"] = keys
    if data.draw(st.booleans()):
        entry.pop("config", None)
    return document


CONFIG_VALUES = (
    st.lists(st.sampled_from(DTYPES + ODD_STRINGS) | st.text(max_size=4), max_size=3)
    | st.lists(st.sampled_from(HUGE_NUMBERS) | st.integers(), max_size=3)
    | st.sampled_from(HUGE_NUMBERS) | st.integers() | st.booleans() | json_values
)


def config_value(data, document, path):
    """An odd value for one of the kernel's config parameters: the well-typed ones pass
    validation and reach the kernel's own ``get_warmup_keys``."""
    kernels = document.get("kernels") if isinstance(document, dict) else None
    entries = [entry for entry in (kernels if isinstance(kernels, list) else [])
               if isinstance(entry, dict) and isinstance(entry.get("config"), dict)
               and isinstance(entry.get("kernel"), str) and entry["kernel"] in KERNELS]
    if entries:
        entry = data.draw(st.sampled_from(entries))
        parameters = sorted(inspect.signature(KERNELS[entry["kernel"]].get_warmup_keys).parameters)
        entry["config"][data.draw(st.sampled_from(parameters))] = data.draw(CONFIG_VALUES)
    return document


MUTATIONS = [delete_at, replace_at, number_at, string_at, add_unknown_key, resize_list, retarget_fields,
             explicit_keys, config_value, config_value]


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_mutated_shipped_manifest(name, data):
    document = json.loads(json.dumps(DOCUMENTS[name]))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        mutation = data.draw(st.sampled_from(MUTATIONS), label="mutation")
        path = data.draw(st.sampled_from(list(paths_in(document))), label="path")
        document = mutation(data, document, path)
    check_document(document)


@settings(FUZZ, max_examples=200)
@given(name=st.sampled_from(sorted(DOCUMENTS)), data=st.data())
def test_odd_config_values_of_shipped_manifests(name, data):
    """Only ``config_value``: most inputs get past validation, into the kernels' own code."""
    document = json.loads(json.dumps(DOCUMENTS[name]))
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        document = config_value(data, document, ())
    check_document(document)


# Byte-level damage.

SHIPPED_BYTES = [path.read_bytes() for path in SHIPPED]
BAD_UTF8 = [b"\xff", b"\xfe", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]


@st.composite
def damaged_bytes(draw):
    data = bytearray(draw(st.sampled_from(SHIPPED_BYTES)))
    kind = draw(st.sampled_from(["truncate", "flip", "invalid utf-8", "bom", "nul"]))
    if kind == "truncate":
        del data[draw(st.integers(0, len(data))):]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif kind == "invalid utf-8":
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.sampled_from(BAD_UTF8))
    elif kind == "bom":
        data[:0] = b"\xef\xbb\xbf" * draw(st.integers(1, 2))
    else:
        data.insert(draw(st.integers(0, len(data))), 0)
    return bytes(data)


@FUZZ
@given(damaged_bytes() | st.binary(max_size=64) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass"))
       | st.sampled_from([b"", b" \n\t", b"\xef\xbb\xbf", b"\xef\xbb\xbf{}", b"\x00", b"null", b"[]", b"{}", b"1",
                          b"NaN", b"-Infinity", b'"\\ud800"', ("1" * 5000).encode(), b"[" * 100_000,
                          b'{"a":' * 50_000, ("[" * 500 + "]" * 500).encode()]))
def test_damaged_bytes(data):
    check_bytes(data)


def test_deep_nesting_inside_a_manifest():
    """Deep JSON the loader can parse, where pydantic walks it (an unknown key and a config value)."""
    document = json.loads(json.dumps(DOCUMENTS["jitkern-example.json"]))
    deep = "[" * 900 + "]" * 900
    text = json.dumps(document).replace('"unaligned": [', f'"unaligned": [{deep}, ')
    check_bytes(text.encode())
    check_bytes(text.replace('"format_version"', f'"deep": {deep}, "format_version"').encode())


def test_a_directory_and_a_missing_file():
    with tempfile.TemporaryDirectory() as folder:
        check_file(Path(folder))
        check_file(Path(folder) / "missing.json")
        check_file(Path(folder) / "missing" / "manifest.json")


def test_shipped_manifests_still_load():
    for path in SHIPPED:
        check_file(path)


def manifest_error(document) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifest.json"
        path.write_text(json.dumps(document))
        with pytest.raises(ManifestError) as error:
            load_manifest(path)
        check_message(path, str(error.value))
        return str(error.value).removeprefix(f"{path}: ")


def test_huge_values_are_bounded():
    """Found by reasoning, rare for the fuzzer: values that load but break what comes after."""
    step5 = json.loads(json.dumps(DOCUMENTS["step5-bs256-mtp3.json"]))
    step5["kernels"][4]["config"]["draft_tokens"] = int("9" * 4300)  # q = 1 + k: 4301 digits, unprintable
    assert manifest_error(step5) == "kernels[4].config.draft_tokens: integer out of the 64-bit range"

    ring = {"kernel": "step5.write_ring", "config": {"ring_index_dtypes": ["int32"] * 6000}}
    step5["kernels"] = [ring, ring]  # 6000 combinations each, 10000 at most for the manifest
    assert manifest_error(step5).startswith("kernels[1].config: the manifest's configs pass 10000 combinations")
