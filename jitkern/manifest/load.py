"""Loading a warmup manifest: which kernels, with which configs, a deployment needs.

A manifest is JSON (``jitkern.manifest.schema``). Loading validates it, imports the
modules it names, enumerates each entry's keys through its kernel's ``get_warmup_keys``
and its layout domain into binary keys. Any problem is one ``ManifestError`` naming the
file and the field path (or what is wrong with the file, if it is not UTF-8 JSON),
raised before anything compiles.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from jitkern.kernel import registry
from jitkern.layouts.binary_key import BinaryKey, key_name
from jitkern.layouts.domains import LayoutDomain, TooManyLayouts
from jitkern.layouts.specialisation import backend_of, marks_pointer_range
from jitkern.manifest.domains import accepted_domain, check_dimension_names, check_shared_domain, kernel_domain
from jitkern.manifest.domains import integer_arguments, tensor_dims
from jitkern.manifest.schema import KernelEntry, LayoutDomainSchema, Manifest, ManifestError, config_model
from jitkern.manifest.schema import describe_errors, key_model, location
from jitkern.targets import parse_target

# Combinations of list values (each config's product of list lengths, what get_warmup_keys
# multiplies) summed over a manifest: bounds its enumeration, so that a small file cannot
# take the loader hours. The shipped manifests have at most 32.
MAX_COMBINATIONS = 10_000
INTEGERS = range(-(2**63), 2**64)  # what a Triton argument holds


@dataclass(frozen=True)
class ResolvedEntry:
    """A manifest entry with its kernel found and its keys enumerated."""

    index: int
    kernel: Any
    config: dict[str, Any] | None
    keys: tuple[Any, ...]
    domain: LayoutDomain = LayoutDomain()  # the layout domain its keys were enumerated in


@dataclass(frozen=True)
class LoadedManifest:
    path: Path
    manifest: Manifest
    entries: tuple[ResolvedEntry, ...]


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read, validate and resolve one manifest; raise ``ManifestError`` on any problem."""
    path = Path(path)
    document = _read_json(path)
    _check_integers(path, document)
    try:
        manifest = Manifest.model_validate(document)
    except pydantic.ValidationError as error:
        raise ManifestError(describe_errors(path, error, prefix=())) from None
    for index, module in enumerate(manifest.modules):
        _import_module(f"{path}: modules[{index}]", module)
    entries, combinations = [], 0
    shared = manifest.layout or LayoutDomainSchema()
    check_dimension_names(f"{path}: layout", shared)
    large_storage = all(marks_pointer_range(backend_of(parse_target(target))) for target in manifest.targets)
    for index, kernel_entry in enumerate(manifest.kernels):
        entries.append(_resolve(path, index, kernel_entry, shared, budget=MAX_COMBINATIONS - combinations,
                                large_storage=large_storage))
        combinations += _combinations(entries[-1].config)
    check_shared_domain(path, shared, entries)
    return LoadedManifest(path=path, manifest=manifest, entries=tuple(entries))


def _read_json(path: Path) -> Any:
    """The file's JSON document; a file that is unreadable, not UTF-8 or not JSON is a ManifestError."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # JSON is UTF-8; some editors start it with a byte-order mark
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not UTF-8: {error.reason} (byte {error.start})") from None
    if not text.strip():
        raise ManifestError(f"{path}: empty file; expected a JSON manifest")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    except RecursionError:  # json recurses once per nested list or object
        raise ManifestError(f"{path}: not JSON: lists or objects nested too deeply") from None
    except ValueError:  # int() refuses integers of more digits than Python's limit
        raise ManifestError(
            f"{path}: not JSON: an integer of more than {sys.get_int_max_str_digits()} digits"
        ) from None


def _check_integers(path: Path, document: Any) -> None:
    """Every integer fits in 64 bits: no kernel takes more, and a key holding a longer
    one (``1 + draft_tokens`` of 4300 digits) could not even be printed."""
    stack = [((), document)]  # not recursive: the document may nest as deep as json allows
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict | list):
            stack.extend(((*where, step), value) for step, value in (
                node.items() if isinstance(node, dict) else enumerate(node)))
        elif isinstance(node, int) and node not in INTEGERS:
            raise ManifestError(f"{path}: {location(where)}: integer out of the 64-bit range")


def _import_module(where: str, module: str) -> None:
    """Import only what looks like a module name: ``import_module`` raises ValueError or
    TypeError (not ImportError) for names such as ``""`` or ``"..x"``."""
    if not all(part.isidentifier() for part in module.split(".")):
        raise ManifestError(f"{where}: {module!r} is not a module name (dotted Python identifiers)")
    try:
        registry.import_modules([module])
    except ImportError as error:
        raise ManifestError(f"{where}: cannot import {error.name!r}: {error}") from None


def manifest_keys(*manifests: LoadedManifest) -> dict[str, list[BinaryKey]]:
    """Kernel name -> every binary key the manifests enumerate, duplicates dropped, order kept."""
    keys: dict[str, dict[Any, None]] = {}
    for loaded in manifests:
        if not isinstance(loaded, LoadedManifest):
            raise TypeError(f"manifest_keys(*manifests): each a load_manifest(path), got {type(loaded).__name__}")
        for entry in loaded.entries:
            keys.setdefault(entry.kernel.name, {}).update(dict.fromkeys(entry.keys))
    return {name: list(found) for name, found in keys.items()}


def _resolve(path: Path, index: int, entry: KernelEntry, shared: LayoutDomainSchema, budget: int,
             large_storage: bool) -> ResolvedEntry:
    where = f"{path}: kernels[{index}]"
    try:
        kernel = registry.get_kernel(entry.kernel)
    except registry.UnknownKernel as error:
        raise ManifestError(f"{where}.kernel: {error}") from None
    if (entry.config is None) == (entry.keys is None):
        raise ManifestError(f"{where}: give exactly one of 'config' (for get_warmup_keys) or 'keys'")
    if entry.keys is not None and entry.layout is not None:
        raise ManifestError(f"{where}.layout: explicit keys carry their own layout; give 'layout' with 'config'")
    check_dimension_names(f"{where}.layout", entry.layout or LayoutDomainSchema())
    if entry.keys is not None:
        keys = [_explicit_key(path, index, position, kernel, values, large_storage)
                for position, values in enumerate(entry.keys)]
        return ResolvedEntry(index, kernel, None, tuple(keys))
    model = config_model(type(kernel))
    try:
        config = model.model_validate(entry.config).model_dump()
    except pydantic.ValidationError as error:
        raise ManifestError(describe_errors(path, error, ("kernels", index, "config"), model.model_fields)) from None
    if _combinations(config) > budget:
        raise ManifestError(
            f"{where}.config: the manifest's configs pass {MAX_COMBINATIONS} combinations of list values "
            "here; split the manifest"
        )
    try:
        keys = kernel.get_warmup_keys(**config)
    except (TypeError, ValueError) as error:
        raise ManifestError(f"{where}.config: {error}") from None
    except Exception as error:  # e.g. a KeyError from a kernel's table lookup of a config value
        raise ManifestError(f"{where}.config: {entry.kernel} rejects it: {type(error).__name__}: {error}") from error
    if not keys:
        raise ManifestError(f"{where}.config: {entry.kernel} enumerates no keys for this config")
    try:
        layout = kernel_domain(path, index, kernel, tensor_dims(kernel, keys), entry.layout or LayoutDomainSchema(),
                               shared, integer_arguments(kernel, keys))
        binaries = kernel.layouts.binary_keys(keys, layout)
    except ManifestError:
        raise
    except TooManyLayouts as error:
        raise ManifestError(f"{where}.layout: {error}") from None
    except Exception as error:  # e.g. Triton refusing a stand-in's stride of a huge config value
        raise ManifestError(f"{where}.config: {entry.kernel} cannot launch its keys: {type(error).__name__}: "
                            f"{error}") from error
    return ResolvedEntry(index, kernel, config, tuple(binaries), layout)


def _combinations(config: dict[str, Any] | None) -> int:
    """How many rows ``get_warmup_keys`` may build: the product of the config's list lengths."""
    if config is None:
        return 0
    return math.prod(len(value) for value in config.values() if isinstance(value, list))


def _explicit_key(path: Path, index: int, position: int, kernel: Any, values: dict[str, Any],
                  large_storage: bool) -> BinaryKey:
    """One ``keys`` item as a BinaryKey, its fields checked against their types first
    (a list value would make an unhashable key, a string block size a key that never
    matches), its layout against what the kernel's launches can be (``accepted_domain``;
    pointers to storage over 2 GiB where every target specialises on it, ``large_storage``):
    another one would fail to compile, or give a binary nothing launches."""
    where = f"{path}: kernels[{index}].keys[{position}]"
    values = dict(values)
    layout = values.pop("layout", "")
    try:
        fields = key_model(kernel.CompileKey).model_validate(values).model_dump()
    except pydantic.ValidationError as error:
        raise ManifestError(describe_errors(path, error, prefix=("kernels", index, "keys", position))) from None
    try:
        key = kernel.CompileKey(**fields)
    except (TypeError, ValueError) as error:  # a key's own __post_init__ checks
        raise ManifestError(f"{where}: {error}") from None
    if not isinstance(layout, str):
        raise ManifestError(f"{where}.layout: expected a string such as 'Z:*bf16 n:i32'")
    try:
        kernel.layouts.tensor_dims(key)  # builds the key's stand-ins, through its warmup_inputs and __call__
    except Exception as error:  # a field value the kernel has no launch for, e.g. a dtype it does not know
        raise ManifestError(f"{where}: {kernel.name} cannot launch this key: {type(error).__name__}: {error}") from None
    try:
        return kernel.layouts.check_layout(BinaryKey(key, layout), accepted_domain(kernel, key), large_storage)
    except ValueError as error:
        raise ManifestError(f"{where}.layout: {kernel.name} [{key_name(key)}]: {error}") from None


