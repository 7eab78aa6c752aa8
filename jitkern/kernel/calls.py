"""Random calls of a kernel's public function for one compile key: what ``tune`` times a
candidate on when the space names the function (``TuningSpace(calls=...)``).

The sizes come from the key and the selector values: each ``size_of`` field or selector
binds the size its ``Arguments`` declaration names there (``size_of("b", 1)`` of
``b=Arg("E N K", ...)`` binds N; a bucketed one, its bucket's first value), each int
argument a field reads, its value. Each tensor is dense, of the dtype a ``dtype_of`` field
reads (or the one it declares, or that of the argument it names), random normal values
for a float tensor and random ints within its ``Within`` for an index tensor. What a
``computed`` field reads (an optional tensor given or not) is not inverted: the caller
tries which optional tensors to give and keeps the call whose launch has the key.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from jitkern.kernel.arguments import ANY, Arg, Arguments
from jitkern.kernel.declare import Size


class NoCallFor(ValueError):
    """The public function's ``Arguments`` and the key do not give a call; one line saying why."""


def read_names(reading: dict[str, Any], arguments: Arguments) -> tuple[dict, dict, dict]:
    """``(sizes, dtypes, plain)``: the field (or selector) of ``reading`` that holds each size
    ``arguments`` names (a ``size_of`` of a declared tensor), each tensor's dtype (``dtype_of``)
    and each plain argument (``argument()``), by those names."""
    sizes, dtypes, plain = {}, {}, {}
    for name, field in reading.items():
        declared = arguments.arguments.get(field.reads[0]) if field.reads else None
        if field.kind == "dtype":
            dtypes[field.reads[0]] = name
        elif isinstance(field.function, Size) and isinstance(declared, Arg):
            sizes[declared.shape[field.function.dim]] = name
        elif field.kind == "value" and field.function is None:
            plain[field.reads[0]] = name
    return sizes, dtypes, plain


def bound_values(reading: dict[str, Any], arguments: Arguments, values: dict[str, Any]) -> tuple[dict, dict]:
    """``(sizes, dtypes)``: the sizes and plain arguments by name, and the dtypes by tensor, a
    call with these field and selector ``values`` has, by the declarations in ``reading``."""
    size_fields, dtype_fields, plain_fields = read_names(reading, arguments)
    sizes = {size: values[name] for size, name in size_fields.items()
             if isinstance(size, str) and size != ANY and name in values}
    dtypes = {tensor: getattr(torch, values[name]) for tensor, name in dtype_fields.items() if name in values}
    plain = {argument: values[name] for argument, name in plain_fields.items()
             if argument in arguments.arguments and name in values}
    return {**sizes, **plain}, dtypes


def random_call(arguments: Arguments, sizes: dict[str, Any], dtypes: dict[str, torch.dtype], absent: Iterable[str],
                device: Any) -> dict[str, Any]:
    """The public function's arguments: a random dense tensor per ``Arg`` (None for those in
    ``absent``), each plain argument its value in ``sizes`` (the sizes and plain arguments
    ``bound_values`` gives)."""
    call: dict[str, Any] = {}
    for name, declared in arguments.arguments.items():
        if not isinstance(declared, Arg):
            call[name] = sizes.get(name, 1.0 if declared is float else False if declared is bool
                                   else declared.start if type(declared) is range else None)
            if call[name] is None:
                raise NoCallFor(f"the int argument {name} is no size a key field or selector reads")
            continue
        if name in absent:
            call[name] = None
            continue
        unbound = [size for size in declared.shape if type(size) is not int and size not in sizes]
        if unbound:
            raise NoCallFor(f"{name} [{' '.join(map(str, declared.shape))}]: no key field or selector reads "
                            f"{', '.join(map(str, unbound))}")
        shape = [size if type(size) is int else sizes[size] for size in declared.shape]
        call[name] = _random(name, declared, shape, _dtype(name, arguments, dtypes), sizes, device)
    return call


def _dtype(name: str, arguments: Arguments, dtypes: dict[str, torch.dtype]) -> torch.dtype:
    seen = set()
    while name not in dtypes and name not in seen:
        seen.add(name)
        first = arguments.arguments[name].dtypes[0]
        if not isinstance(first, str):
            return first
        name = first  # "the same dtype as" that argument
    if name not in dtypes:
        raise NoCallFor(f"{name} has no dtype: read it with dtype_of")
    return dtypes[name]


def _random(name: str, declared: Arg, shape: list[int], dtype: torch.dtype, sizes: dict[str, int],
            device: Any) -> torch.Tensor:
    if declared.values is None:
        if dtype.is_floating_point:
            return torch.randn(shape, device=device).to(dtype)
        return torch.zeros(shape, dtype=dtype, device=device)
    low, high = (sizes.get(bound) if isinstance(bound, str) else bound
                 for bound in (declared.values.low, declared.values.high))
    if not isinstance(low, int) or not (high is None or isinstance(high, int)):
        raise NoCallFor(f"{name}'s values are bounded by a function of the sizes, which no random call draws from")
    values = torch.randint(low, high if high is not None else low + 16, shape, device=device)
    return (values.sort(dim=-1).values if declared.values.ascending else values).to(dtype)
