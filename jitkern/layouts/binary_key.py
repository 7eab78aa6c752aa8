"""A binary's name: its compile key and its layout, and the readable text of a key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BinaryKey:
    """One binary of a kernel: its ``CompileKey`` and the layout of its runtime arguments."""

    key: Any
    layout: str = ""


def key_name(key: Any) -> str:
    """A stable, readable name of a key: ``head_size=1024,block_size=4`` (a binary key's
    layout last, when it has one: ``...,layout=Z:*bf16``)."""
    return ",".join(f"{name}={value}" for name, value in key_fields(key).items())


def key_fields(key: Any) -> dict[str, Any]:
    """The key as plain JSON-friendly values (dtypes become their names); a binary key's
    fields are its compile key's, and ``layout`` when it is not the stand-ins' own."""
    if isinstance(key, BinaryKey):
        return {**key_fields(key.key), **({"layout": key.layout} if key.layout else {})}
    return {f.name: _plain(getattr(key, f.name)) for f in dataclasses.fields(key)}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
