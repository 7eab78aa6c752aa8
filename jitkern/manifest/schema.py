"""The manifest's JSON schema: pydantic models of its shape, and of each kernel's config and keys.

A manifest is validated in two stages: the shape (unknown fields are errors), then each
entry's ``config`` against the keyword parameters of its kernel's ``get_warmup_keys``
(``config_model``) and each explicit key against its ``CompileKey`` (``key_model``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import torch
from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from jitkern.targets import parse_target

FORMAT_VERSION = 1
MAX_PROBLEMS = 10  # validation problems listed in one error


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and the field."""


class ValueRangeSchema(BaseModel):
    """The integers in ``[min, max]`` (a bound left out: unbounded) that are multiples of ``multiple_of``."""

    model_config = ConfigDict(extra="forbid", title="ValueRange")

    min: int | None = None
    max: int | None = None
    multiple_of: int = Field(default=1, ge=1)


class LayoutDomainSchema(BaseModel):
    """The layout domain a deployment passes, by the kernels' tensor argument names
    (``jitkern.layouts.LayoutDomain`` once loaded)."""

    model_config = ConfigDict(extra="forbid", title="LayoutDomain")

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
    values: dict[str, list[int] | ValueRangeSchema] = Field(
        default_factory=dict,
        description="the values a stride ('z.0'), a runtime integer argument of a kernel ('n_tokens') or a "
                    "tensor's start ('z': bytes past a 16-byte boundary, 0 to 15) takes: a list, or a range "
                    "{'min', 'max', 'multiple_of'}; only their classes are warmed",
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
    layout: LayoutDomainSchema | None = Field(
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
    layout: LayoutDomainSchema | None = Field(
        default=None, description="layouts of the deployment's tensors, for every kernel that has them"
    )
    kernels: list[KernelEntry] = Field(min_length=1)

    @pydantic.field_validator("targets")
    @classmethod
    def _known_targets(cls, targets: list[str]) -> list[str]:
        for target in targets:
            parse_target(target)
        return targets


def json_schema() -> dict[str, Any]:
    return Manifest.model_json_schema()


@functools.cache
def key_model(key_class: type) -> type[BaseModel]:
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
def config_model(kernel_class: type) -> type[BaseModel]:
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


def describe_errors(path: Path, error: pydantic.ValidationError, prefix: tuple, fields: Any = None) -> str:
    """One line a problem, the first ``MAX_PROBLEMS`` of them (a long list can fail at every item),
    with the value given; ``fields``: the names the model at ``prefix`` takes, for an unknown one."""
    problems = error.errors()
    lines = [f"{path}: invalid manifest"]
    for problem in problems[:MAX_PROBLEMS]:
        message = problem["msg"].removeprefix("Value error, ")  # our validators' messages name the value
        if problem["type"] == "extra_forbidden":
            message += f" (it takes {', '.join(fields)})" if fields is not None and len(problem["loc"]) == 1 else ""
        elif problem["type"] not in ("missing", "value_error") and "input" in problem:
            given = repr(problem["input"])
            message += f", got {given if len(given) <= 60 else given[:57] + '...'}"
        lines.append(f"  {location(prefix + tuple(problem['loc']))}: {message}")
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"  ... and {len(problems) - MAX_PROBLEMS} more")
    return "\n".join(lines)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def location(parts: tuple) -> str:
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
