"""Warmup manifests: which kernels, with which configs, a deployment needs.

A manifest is JSON, validated by the pydantic models below in two stages: the shape
(unknown fields are errors), then each entry's ``config`` against the keyword
parameters of its kernel's ``get_warmup_keys``. Any problem is one ``ManifestError``
naming the file and the field path (or what is wrong with the file, if it is not UTF-8
JSON), raised before anything compiles.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import torch
from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from jitkern import registry
from jitkern.kernel import JitKernel, TooManyLayouts, key_name
from jitkern.specialisation import BinaryKey, Layout, backend_of, marks_pointer_range
from jitkern.targets import parse_target

FORMAT_VERSION = 1
# Combinations of list values (each config's product of list lengths, what get_warmup_keys
# multiplies) summed over a manifest: bounds its enumeration, so that a small file cannot
# take the loader hours. The shipped manifests have at most 32.
MAX_COMBINATIONS = 10_000
MAX_PROBLEMS = 10  # validation problems listed in one error
INTEGERS = range(-(2**63), 2**64)  # what a Triton argument holds


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and the field."""


class LayoutDomain(BaseModel):
    """The argument layouts a deployment passes, by the kernels' tensor argument names."""

    model_config = ConfigDict(extra="forbid")

    unaligned: list[str] = Field(
        default_factory=list,
        description="tensors that may start at any element offset (a slice of a wider tensor), "
                    "not only at a multiple of 16 bytes",
    )
    strided: list[str] = Field(
        default_factory=list,
        description="tensors whose strides take any value ('z'), or one dimension's stride ('z.0'); "
                    "the others are contiguous",
    )


class KernelEntry(BaseModel):
    """One kernel of a deployment: its registry name and its warmup config."""

    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(description="registry name of the kernel class, e.g. step5.update_decode")
    config: dict[str, Any] | None = Field(
        default=None, description="keyword arguments of the kernel's get_warmup_keys"
    )
    keys: list[dict[str, Any]] | None = Field(
        default=None,
        min_length=1,
        description="explicit binary keys (field -> value, and 'layout'), e.g. from a guard record file",
    )
    layout: LayoutDomain | None = Field(
        default=None, description="layouts this kernel is launched with, besides the manifest's layout"
    )


class Manifest(BaseModel):
    """Every kernel variant one deployment launches, for the GPU targets it runs on."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1]
    name: str = Field(min_length=1)
    description: str = ""
    targets: list[str] = Field(min_length=1, description="GPU targets, e.g. cuda:90")
    modules: list[str] = Field(default_factory=list, description="modules that define the kernels")
    layout: LayoutDomain | None = Field(
        default=None, description="layouts of the deployment's tensors, for every kernel that has them"
    )
    kernels: list[KernelEntry] = Field(min_length=1)

    @pydantic.field_validator("targets")
    @classmethod
    def _known_targets(cls, targets: list[str]) -> list[str]:
        for target in targets:
            parse_target(target)
        return targets


@dataclass(frozen=True)
class ResolvedEntry:
    """A manifest entry with its kernel found and its keys enumerated."""

    index: int
    kernel: JitKernel
    config: dict[str, Any] | None
    keys: tuple[Any, ...]


@dataclass(frozen=True)
class LoadedManifest:
    path: Path
    manifest: Manifest
    entries: tuple[ResolvedEntry, ...]


def json_schema() -> dict[str, Any]:
    return Manifest.model_json_schema()


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read, validate and resolve one manifest; raise ``ManifestError`` on any problem."""
    path = Path(path)
    document = _read_json(path)
    _check_integers(path, document)
    try:
        manifest = Manifest.model_validate(document)
    except pydantic.ValidationError as error:
        raise ManifestError(_describe(path, error, prefix=())) from None
    for index, module in enumerate(manifest.modules):
        _import_module(f"{path}: modules[{index}]", module)
    entries, combinations = [], 0
    shared = manifest.layout or LayoutDomain()
    _check_dimension_names(f"{path}: layout", shared)
    large_storage = all(marks_pointer_range(backend_of(parse_target(target))) for target in manifest.targets)
    for index, kernel_entry in enumerate(manifest.kernels):
        entries.append(_resolve(path, index, kernel_entry, shared, budget=MAX_COMBINATIONS - combinations,
                                large_storage=large_storage))
        combinations += _combinations(entries[-1].config)
    _check_shared_layout(path, shared, entries)
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
            raise ManifestError(f"{path}: {_location(where)}: integer out of the 64-bit range")


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
        for entry in loaded.entries:
            keys.setdefault(entry.kernel.name, {}).update(dict.fromkeys(entry.keys))
    return {name: list(found) for name, found in keys.items()}


def _resolve(path: Path, index: int, entry: KernelEntry, shared: LayoutDomain, budget: int,
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
    _check_dimension_names(f"{where}.layout", entry.layout or LayoutDomain())
    if entry.keys is not None:
        keys = [_explicit_key(path, index, position, kernel, values, large_storage)
                for position, values in enumerate(entry.keys)]
        return ResolvedEntry(index, kernel, None, tuple(keys))
    try:
        config = _config_model(type(kernel)).model_validate(entry.config).model_dump()
    except pydantic.ValidationError as error:
        raise ManifestError(_describe(path, error, prefix=("kernels", index, "config"))) from None
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
        layout = _kernel_layout(path, index, kernel, _tensor_dims(kernel, keys), entry.layout or LayoutDomain(),
                                shared)
        binaries = kernel.binary_keys(keys, layout)
    except ManifestError:
        raise
    except TooManyLayouts as error:
        raise ManifestError(f"{where}.layout: {error}") from None
    except Exception as error:  # e.g. Triton refusing a stand-in's stride of a huge config value
        raise ManifestError(f"{where}.config: {entry.kernel} cannot launch its keys: {type(error).__name__}: "
                            f"{error}") from error
    return ResolvedEntry(index, kernel, config, tuple(binaries))


def _tensor_dims(kernel: JitKernel, keys: Any) -> dict[str, int]:
    """The tensors a layout may name, over all ``keys`` (an optional tensor is in some keys
    only), each with the dimensions it has in every key that has it."""
    dims: dict[str, int] = {}
    for key in keys:
        for tensor, ndim in kernel.tensor_dims(key).items():
            dims[tensor] = min(ndim, dims.get(tensor, ndim))
    return dims


def _kernel_layout(path: Path, index: int, kernel: JitKernel, tensors: dict[str, int], own: LayoutDomain,
                   shared: LayoutDomain) -> Layout:
    """The kernel's layout domain: its entry's, with the manifest's for the tensors it has.
    A name the entry gives must be a tensor of the kernel (of ``tensors``: its keys' tensors
    and their dimensions) that its public function accepts so laid out; one the manifest
    gives, of any kernel, and of the dimensions each kernel that has the tensor has."""
    where = f"{path}: kernels[{index}]"
    chosen: dict[str, set[str]] = {"unaligned": set(), "strided": set()}
    for at, domain, manifests in ((f"{where}.layout", own, False), (f"{path}: layout", shared, True)):
        for field in chosen:
            for position, name in enumerate(getattr(domain, field)):
                tensor, dim = _layout_name(name, field)
                if tensor not in tensors and manifests:
                    continue  # another kernel's (_check_shared_layout)
                if tensor not in tensors:
                    known = ", ".join(sorted(tensors)) or "none"
                    raise ManifestError(f"{at}.{field}[{position}]: {kernel.name} has no tensor {name!r} "
                                        f"(its tensors: {known})")
                if dim is not None and dim >= tensors[tensor]:
                    raise ManifestError(f"{at}.{field}[{position}]: {name!r}: {tensor!r} of {kernel.name} "
                                        f"(kernels[{index}]) has {tensors[tensor]} dimensions, no dimension {dim}")
                chosen[field].add(name)
    for field, names in chosen.items():
        for name in sorted(names):
            refusal = _refusal(kernel, field, name)
            if refusal:
                raise ManifestError(f"{where}: layout.{field} lists {name!r}, which {kernel.name} cannot serve: "
                                    f"its public function requires {refusal}")
    return Layout(unaligned=frozenset(chosen["unaligned"]), strided=frozenset(chosen["strided"]))


def _refusal(kernel: JitKernel, field: str, name: str) -> str:
    """What the kernel's public function requires that the layout ``name`` breaks, if anything."""
    tensor, dim = _layout_name(name, field)
    if field == "unaligned":
        return f"{tensor!r} 16-byte aligned" if tensor in getattr(kernel, "aligned_tensors", ()) else ""
    fixed = getattr(kernel, "fixed_strides", frozenset())
    if tensor in fixed or name in fixed or (dim is None and any(f.startswith(f"{tensor}.") for f in fixed)):
        fixed_here = sorted(f for f in fixed if f == tensor or f.startswith(f"{tensor}."))
        return f"fixed strides of {', '.join(fixed_here)}"
    return ""


def _layout_name(name: str, field: str) -> tuple[str, int | None]:
    """``"z"`` -> ("z", None); ``"z.0"`` -> ("z", 0) where a dimension may be named (strides)."""
    tensor, dot, dim = name.partition(".")
    if dot and field == "strided" and _DIGITS.fullmatch(dim):
        return tensor, int(dim)
    return name, None


_DIGITS = re.compile(r"[0-9]+")


def _check_dimension_names(where: str, domain: LayoutDomain) -> None:
    """A dimension is named one way, ``z.0``: the layout matches names as written, so
    ``z.00`` would match no stride."""
    for position, name in enumerate(domain.strided):
        tensor, dim = _layout_name(name, "strided")
        if dim is not None and name != f"{tensor}.{dim}":
            raise ManifestError(f"{where}.strided[{position}]: {name!r} names dimension {dim} of {tensor!r}; "
                                f"write {tensor}.{dim}")


def _check_shared_layout(path: Path, shared: LayoutDomain, entries: list[ResolvedEntry]) -> None:
    """Each tensor the manifest's layout names is a tensor of one of its kernels at least."""
    tensors = set()
    for entry in entries:
        tensors |= set(_tensor_dims(entry.kernel, dict.fromkeys(binary.key for binary in entry.keys)))
    for field, names in (("unaligned", shared.unaligned), ("strided", shared.strided)):
        for position, name in enumerate(names):
            if _layout_name(name, field)[0] not in tensors:
                raise ManifestError(f"{path}: layout.{field}[{position}]: no kernel of this manifest has a tensor "
                                    f"{name!r} (tensors: {', '.join(sorted(tensors)) or 'none'})")


def _combinations(config: dict[str, Any] | None) -> int:
    """How many rows ``get_warmup_keys`` may build: the product of the config's list lengths."""
    if config is None:
        return 0
    return math.prod(len(value) for value in config.values() if isinstance(value, list))


def _explicit_key(path: Path, index: int, position: int, kernel: JitKernel, values: dict[str, Any],
                  large_storage: bool) -> BinaryKey:
    """One ``keys`` item as a BinaryKey, its fields checked against their types first
    (a list value would make an unhashable key, a string block size a key that never
    matches), its layout against what the kernel's launches can be (``_accepted_layout``;
    pointers to storage over 2 GiB where every target specialises on it, ``large_storage``):
    another one would fail to compile, or give a binary nothing launches."""
    where = f"{path}: kernels[{index}].keys[{position}]"
    values = dict(values)
    layout = values.pop("layout", "")
    try:
        fields = _key_model(kernel.CompileKey).model_validate(values).model_dump()
    except pydantic.ValidationError as error:
        raise ManifestError(_describe(path, error, prefix=("kernels", index, "keys", position))) from None
    try:
        key = kernel.CompileKey(**fields)
    except (TypeError, ValueError) as error:  # a key's own __post_init__ checks
        raise ManifestError(f"{where}: {error}") from None
    if not isinstance(layout, str):
        raise ManifestError(f"{where}.layout: expected a string such as 'Z:*bf16 n:i32'")
    try:
        kernel.tensor_dims(key)  # builds the key's stand-ins, through its warmup_inputs and __call__
    except Exception as error:  # a field value the kernel has no launch for, e.g. a dtype it does not know
        raise ManifestError(f"{where}: {kernel.name} cannot launch this key: {type(error).__name__}: {error}") from None
    try:
        return kernel.check_layout(BinaryKey(key, layout), _accepted_layout(kernel, key), large_storage)
    except ValueError as error:
        raise ManifestError(f"{where}.layout: {kernel.name} [{key_name(key)}]: {error}") from None


def _accepted_layout(kernel: JitKernel, key: Any) -> Layout:
    """The widest layout domain of ``key``'s launches: every tensor unaligned and every
    stride any, but what the kernel's public function requires (``_refusal``)."""
    dims = kernel.tensor_dims(key)
    return Layout(unaligned=frozenset(tensor for tensor in dims if not _refusal(kernel, "unaligned", tensor)),
                  strided=frozenset(f"{tensor}.{dim}" for tensor, ndim in dims.items() for dim in range(ndim)
                                    if not _refusal(kernel, "strided", f"{tensor}.{dim}")))


@functools.cache
def _key_model(key_class: type) -> type[BaseModel]:
    """A strict pydantic model of a CompileKey dataclass's fields."""
    hints = typing.get_type_hints(key_class)
    fields = {
        field.name: (_json_type(hints[field.name]), ... if field.default is dataclasses.MISSING else field.default)
        for field in dataclasses.fields(key_class)
        if field.init
    }
    return _strict_model(f"{key_class.__qualname__}Fields", fields)


def _json_type(annotation: Any) -> Any:
    """A key field's type as JSON gives it: a ``torch.dtype`` by its name, as ``key_fields``
    writes it (``"torch.float16"``) or as configs do (``"float16"``), so that the keys the
    guard records load back; pydantic has no schema of its own for it."""
    return Annotated[Any, PlainValidator(_dtype_named)] if annotation is torch.dtype else annotation


def _dtype_named(value: Any) -> torch.dtype:
    dtype = getattr(torch, value.removeprefix("torch."), None) if isinstance(value, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"expected a torch dtype's name such as 'float16', got {value!r}")
    return dtype


@functools.cache
def _config_model(kernel_class: type[JitKernel]) -> type[BaseModel]:
    """A strict pydantic model of the keyword parameters of ``get_warmup_keys``."""
    function = kernel_class.get_warmup_keys
    fields = {}
    for parameter in list(inspect.signature(function).parameters.values())[1:]:  # after self
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        annotation = _evaluate(parameter.annotation, function)
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return _strict_model(f"{kernel_class.__name__}Config", fields)


def _strict_model(name: str, fields: dict[str, Any]) -> type[BaseModel]:
    """Unknown fields are errors and nothing is coerced: ``"16"`` is not an int, ``1`` not a bool."""
    return pydantic.create_model(name, __config__=ConfigDict(extra="forbid", strict=True), **fields)


def _evaluate(annotation: Any, function) -> Any:
    """A parameter's annotation as a type (modules may use postponed annotations)."""
    if annotation is inspect.Parameter.empty:
        return Any
    if isinstance(annotation, str):
        return eval(annotation, function.__globals__)  # noqa: S307 - our own source code
    return annotation


def _describe(path: Path, error: pydantic.ValidationError, prefix: tuple) -> str:
    """One line a problem, the first ``MAX_PROBLEMS`` of them (a long list can fail at every item)."""
    problems = error.errors()
    lines = [f"{path}: invalid manifest"]
    for problem in problems[:MAX_PROBLEMS]:
        location = _location(prefix + tuple(problem["loc"]))
        lines.append(f"  {location}: {problem['msg']}")
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"  ... and {len(problems) - MAX_PROBLEMS} more")
    return "\n".join(lines)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _location(parts: tuple) -> str:
    """``kernels[0].config.block_size``; a key that is no plain name is quoted, ``config['a b']``,
    so that keys from the file (``"0"``, ``"\\n"``, lone surrogates) print readably."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _NAME.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(top level)"
