"""Kernel classes by their stable names, and the modules that define them."""

from __future__ import annotations

import importlib
from typing import Any

_kernel_classes: dict[str, type] = {}  # name -> a JitKernel subclass


class UnknownKernel(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def register(cls: type) -> None:
    """Called for every kernel class that sets ``name``; names are unique. A class of the
    same module and qualified name replaces its namesake (a reloaded module); any other
    class is refused, as it would silently take the other's launches and warmups."""
    existing = _kernel_classes.get(cls.name)
    if existing is not None and _where(existing) != _where(cls):
        raise ValueError(f"kernel name {cls.name!r} of {_where(cls)} is taken by {_where(existing)}")
    _kernel_classes[cls.name] = cls


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def import_modules(modules: list[str]) -> None:
    """Import the modules that define the kernels a manifest names."""
    for module in modules:
        importlib.import_module(module)


def get_kernel(name: str) -> Any:
    """The kernel instance (a ``JitKernel``) registered under ``name``."""
    try:
        return _kernel_classes[name]()
    except KeyError:
        known = ", ".join(sorted(_kernel_classes)) or "none (did the manifest list its modules?)"
        raise UnknownKernel(f"unknown kernel {name!r}; registered: {known}") from None


def kernel_names() -> list[str]:
    return sorted(_kernel_classes)
