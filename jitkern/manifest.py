"""Warmup manifests: which kernels, with which configs, a deployment needs.

A manifest is JSON, validated by the pydantic models below in two stages: the shape
(unknown fields are errors), then each entry's ``config`` against the keyword
parameters of its kernel's ``get_warmup_keys``. Any problem is one ``ManifestError``
naming the file and the field path, raised before anything compiles.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from jitkern import registry
from jitkern.kernel import JitKernel
from jitkern.targets import parse_target

FORMAT_VERSION = 1


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and the field."""


class KernelEntry(BaseModel):
    """One kernel of a deployment: its registry name and its warmup config."""

    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(description="registry name of the kernel class, e.g. step5.update_decode")
    config: dict[str, Any] | None = Field(
        default=None, description="keyword arguments of the kernel's get_warmup_keys"
    )
    keys: list[dict[str, Any]] | None = Field(
        default=None,
        description="explicit compile keys (field -> value), e.g. from a guard record file",
    )


class Manifest(BaseModel):
    """Every kernel variant one deployment launches, for the GPU targets it runs on."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1]
    name: str = Field(min_length=1)
    description: str = ""
    targets: list[str] = Field(min_length=1, description="GPU targets, e.g. cuda:90")
    modules: list[str] = Field(default_factory=list, description="modules that define the kernels")
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
    try:
        text = path.read_text()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror}") from None
    if not text.strip():
        raise ManifestError(f"{path}: empty file; expected a JSON manifest")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    try:
        manifest = Manifest.model_validate(document)
    except pydantic.ValidationError as error:
        raise ManifestError(_describe(path, error, prefix=())) from None
    try:
        registry.import_modules(manifest.modules)
    except ImportError as error:
        raise ManifestError(f"{path}: modules: cannot import {error.name!r}: {error}") from None
    entries = tuple(_resolve(path, index, entry) for index, entry in enumerate(manifest.kernels))
    return LoadedManifest(path=path, manifest=manifest, entries=entries)


def manifest_keys(*manifests: LoadedManifest) -> dict[str, list[Any]]:
    """Kernel name -> every key the manifests enumerate, duplicates dropped, order kept."""
    keys: dict[str, dict[Any, None]] = {}
    for loaded in manifests:
        for entry in loaded.entries:
            keys.setdefault(entry.kernel.name, {}).update(dict.fromkeys(entry.keys))
    return {name: list(found) for name, found in keys.items()}


def _resolve(path: Path, index: int, entry: KernelEntry) -> ResolvedEntry:
    where = f"{path}: kernels[{index}]"
    try:
        kernel = registry.get_kernel(entry.kernel)
    except registry.UnknownKernel as error:
        raise ManifestError(f"{where}.kernel: {error}") from None
    if (entry.config is None) == (entry.keys is None):
        raise ManifestError(f"{where}: give exactly one of 'config' (for get_warmup_keys) or 'keys'")
    if entry.keys is not None:
        return ResolvedEntry(index, kernel, None, tuple(_explicit_keys(where, kernel, entry.keys)))
    config_model = _config_model(kernel)
    try:
        config = config_model.model_validate(entry.config).model_dump()
    except pydantic.ValidationError as error:
        raise ManifestError(_describe(path, error, prefix=("kernels", index, "config"))) from None
    try:
        keys = kernel.get_warmup_keys(**config)
    except (TypeError, ValueError) as error:
        raise ManifestError(f"{where}.config: {error}") from None
    if not keys:
        raise ManifestError(f"{where}.config: {entry.kernel} enumerates no keys for this config")
    return ResolvedEntry(index, kernel, config, tuple(dict.fromkeys(keys)))


def _explicit_keys(where: str, kernel: JitKernel, fields: list[dict[str, Any]]) -> list[Any]:
    keys = []
    for position, values in enumerate(fields):
        try:
            keys.append(kernel.CompileKey(**values))
        except TypeError as error:
            raise ManifestError(f"{where}.keys[{position}]: {error}") from None
    return keys


def _config_model(kernel: JitKernel) -> type[BaseModel]:
    """A strict pydantic model of the keyword parameters of ``get_warmup_keys``."""
    function = kernel.get_warmup_keys
    fields = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        annotation = _evaluate(parameter.annotation, function)
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return pydantic.create_model(
        f"{type(kernel).__name__}Config",
        __config__=ConfigDict(extra="forbid", strict=True),
        **fields,
    )


def _evaluate(annotation: Any, function) -> Any:
    """A parameter's annotation as a type (modules may use postponed annotations)."""
    if annotation is inspect.Parameter.empty:
        return Any
    if isinstance(annotation, str):
        return eval(annotation, function.__globals__)  # noqa: S307 - our own source code
    return annotation


def _describe(path: Path, error: pydantic.ValidationError, prefix: tuple) -> str:
    lines = [f"{path}: invalid manifest"]
    for problem in error.errors():
        location = _location(prefix + tuple(problem["loc"]))
        lines.append(f"  {location}: {problem['msg']}")
    return "\n".join(lines)


def _location(parts: tuple) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"
