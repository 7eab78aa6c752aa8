"""A public function as a torch op, so that ``torch.compile(fullgraph=True)`` and CUDA
graphs take its call as one node and never trace its checks or launches.

``public_call(op="step5::update_decode", mutates=("mean", "ring"))`` registers the op
``torch.ops.step5.update_decode`` whose schema is read from the function's signature
(``schema_of``: each parameter's annotation, ``Tensor(a!)`` for what it writes). Its
real implementation calls the public function (planned as any eager call); its fake
implementation runs the public function itself on fake tensors with ``faking`` on, where
kernels launch nothing and public functions read no tensor values, so the result's
shape and dtype are the function's own.

An eager call of the public function never meets the op: Dynamo, when it traces a call
of it, traces the function's ``_torchdynamo_inline`` attribute instead, the function's
op call (``traced_source``), which costs the eager path nothing (a
``torch.compiler.is_compiling()`` test at the head of every call would cost 0.1-0.3 us:
``benchmarks/bench_ops.py``). A torch op cannot return one of its arguments: a function
that returns the argument it writes (``returns="out"``) returns it around the op, and one
whose ``out`` may be None has a second overload, ``.out``, taking it. A ``dict``
argument (``pdl_kwargs``) travels as its ``repr``, read back with ``ast.literal_eval``.
The op is defined by hand (``torch.library.Library.define``), not by
``torch.library.custom_op`` (4-7 against 35-50 us a call on our CPU machine), and is
opaque to Inductor, which never sees, specialises or compiles the kernels behind it.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from jitkern.launch.spec import active_launch
from jitkern.layouts.kernel_layouts import DeclarationError

_TYPES = {torch.Tensor: "Tensor", int: "int", float: "float", bool: "bool", str: "str", dict: "str"}
_libraries: dict[str, torch.library.Library] = {}  # namespace -> its fragment, kept for the process
_ops: dict[str, "Op"] = {}  # "namespace::name" -> its op


@contextlib.contextmanager
def faking() -> Iterator[None]:
    """Within the block kernels launch nothing and return None, and public functions read
    no tensor values (``runs_on_host`` is False): a fake implementation runs."""
    previous, active_launch.faking = active_launch.faking, True
    try:
        yield
    finally:
        active_launch.faking = previous


@dataclass
class Op:
    """One public function's op: what its implementations call (a reloaded module's
    function replaces the first's: ``function`` and ``call`` are read per call)."""

    name: str
    function: Callable[..., Any]  # the public function as written: the fake runs it
    call: Callable[..., Any]  # the public function as called (planned): the real implementation calls it
    schema: str
    where: str
    repr_args: tuple[str, ...]  # dict arguments, carried as their repr
    returns: str | None


def register(function: Callable[..., Any], call: Callable[..., Any], op: str, mutates: tuple[str, ...],
             returns: str | None) -> Callable[..., Any]:
    """Register ``function`` as the op ``op`` ("namespace::name") and return the function
    Dynamo traces in place of ``call`` (set as its ``_torchdynamo_inline``)."""
    namespace, _, name = op.partition("::")
    if not namespace.isidentifier() or not name.isidentifier():
        raise DeclarationError(f"public_call(op={op!r}): expected 'namespace::name', each a Python identifier")
    schema, given_schema, repr_args = schema_of(function, op, mutates, returns)
    where = f"{function.__module__}.{function.__qualname__}"
    existing = _ops.get(op)
    if existing is not None:
        if existing.where != where or existing.schema != schema:
            raise DeclarationError(f"op {op} of {where} is taken by {existing.where} (schema {existing.schema})")
        existing.function, existing.call = function, call  # a reloaded module
    else:
        entry = _ops[op] = Op(op, function, call, schema, where, repr_args, returns)
        library = _libraries.get(namespace) or _libraries.setdefault(
            namespace, torch.library.Library(namespace, "FRAGMENT"))
        _define(library, op, f"{name}{schema}", entry)
        if given_schema is not None:
            _define(library, op, f"{name}.{returns}{given_schema}", entry)
    packet = getattr(getattr(torch.ops, namespace), name)
    source, namespace_dict = traced_source(function, packet, repr_args, returns, given_schema is not None)
    exec(compile(source, f"<op call of {op}>", "exec"), namespace_dict)  # noqa: S102 - our own source
    return namespace_dict[function.__name__]


def _define(library: torch.library.Library, op: str, schema: str, entry: Op) -> None:
    """Define one overload, with its real (every device) and fake implementations; it
    returns the function's result when its schema returns a tensor, else nothing."""
    fresh = not schema.endswith("-> ()")
    library.define(schema)
    name = schema.partition("(")[0]

    def real(**kwargs: Any) -> Any:
        result = entry.call(**_read_reprs(entry, kwargs))
        return result if fresh else None

    def fake(**kwargs: Any) -> Any:
        with faking():
            result = entry.function(**_read_reprs(entry, kwargs))
        if fresh and any(result is value for value in kwargs.values()):
            raise TypeError(f"{op} returned one of its arguments: name it with public_call(returns=...)")
        return result if fresh else None

    library.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{op.partition('::')[0]}::{name}", fake, lib=library)


def _read_reprs(entry: Op, kwargs: dict[str, Any]) -> dict[str, Any]:
    for name in entry.repr_args:
        if kwargs.get(name) is not None:
            kwargs[name] = ast.literal_eval(kwargs[name])
    return kwargs


def schema_of(function: Callable[..., Any], op: str, mutates: tuple[str, ...],
              returns: str | None) -> tuple[str, str | None, tuple[str, ...]]:
    """The op's schema read from ``function``'s signature, without and (when ``returns``
    names an argument that may be None) with it; and the dict arguments it carries as text.

    Every argument is passed by keyword (``*``): the op's implementations call the public
    function with the same names. Each annotation is a tensor, int, float, bool, str or
    dict, or one of them or None; an argument in ``mutates`` is a tensor written in place.
    """
    at = f"public_call(op={op!r}) of {function.__qualname__}"
    parameters = inspect.signature(function).parameters
    hints = typing.get_type_hints(function)
    for name in (*mutates, *([returns] if returns else [])):
        if name not in parameters:
            raise DeclarationError(f"{at}: {name!r} is not an argument ({', '.join(parameters)})")
    if returns is not None and returns not in mutates:
        raise DeclarationError(f"{at}: returns={returns!r} must be one of mutates, the arguments it writes")
    texts: dict[str, str] = {}  # each argument's schema text
    repr_args, letters = [], iter("abcdefghijklmnopqrstuvwxyz")
    for name, parameter in parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise DeclarationError(f"{at}: *{name}: an op takes named arguments only")
        kind, optional = _type_of(hints.get(name))
        if kind is None:
            given = f"annotated {hints[name]!r}" if name in hints else "not annotated"
            raise DeclarationError(f"{at}: argument {name!r} is {given}; annotate it torch.Tensor, int, float, bool, "
                                   "str or dict, or one of them | None")
        if name in mutates:
            if kind is not torch.Tensor:
                raise DeclarationError(f"{at}: mutates {name!r}, which is not a tensor")
            text = f"Tensor({next(letters)}!)"
        else:
            text = _TYPES[kind]
        if kind is dict:
            repr_args.append(name)
        text += ("?" if optional else "") + f" {name}"
        default = parameter.default
        if default is not parameter.empty:
            if default is not None and type(default) not in (int, float, bool):
                raise DeclarationError(f"{at}: argument {name!r} defaults to {default!r}; an op's defaults are None, "
                                       "ints, floats or bools")
            text += f"={default}"
        texts[name] = text
    result = hints.get("return")
    returns_tensor = result not in (None, type(None))
    if returns_tensor and _type_of(result) != (torch.Tensor, False):
        raise DeclarationError(f"{at}: returns {result!r}; an op's public function returns None or a tensor")
    if returns is not None and not returns_tensor:
        raise DeclarationError(f"{at}: returns={returns!r}, but the function returns None")
    if returns is None:
        return _schema(texts.values(), returns_tensor), None, tuple(repr_args)
    if not _type_of(hints[returns])[1]:  # always given: the op writes it, the call returns it
        return _schema(texts.values(), False), None, tuple(repr_args)
    given = {**texts, returns: texts[returns].replace("?", "").removesuffix("=None")}
    without = [text for name, text in texts.items() if name != returns]
    return _schema(without, True), _schema(given.values(), False), tuple(repr_args)


def _schema(arguments: Iterable[str], returns_tensor: bool) -> str:
    return f"(*, {', '.join(arguments)}) -> {'Tensor' if returns_tensor else '()'}"


def _type_of(annotation: Any) -> tuple[type | None, bool]:
    """The schema type of an annotation, and whether it may be None."""
    options = [item for item in typing.get_args(annotation) if item is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, _UNION) else [annotation]
    optional = len(options) < len(typing.get_args(annotation))
    kind = typing.get_origin(options[0]) or options[0] if len(options) == 1 else None
    return (kind if kind in _TYPES else None), optional


_UNION = type(int | None)


def traced_source(function: Callable[..., Any], packet: Any, repr_args: tuple[str, ...], returns: str | None,
                  given: bool) -> tuple[str, dict[str, Any]]:
    """The source of what Dynamo traces for a call of ``function``: its op's call, with the
    function's own signature (so defaults and keywords bind as in an eager call)."""
    namespace: dict[str, Any] = {"OP": packet.default, "GIVEN": getattr(packet, returns, None) if given else None}
    parts, passed = [], []
    for name, parameter in inspect.signature(function).parameters.items():
        text = name
        if parameter.default is not parameter.empty:
            namespace[f"DEFAULT_{name}"] = parameter.default
            text += f"=DEFAULT_{name}"
        if parameter.kind is parameter.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(text)
        passed.append(f"{name}={name}" if name not in repr_args else
                      f"{name}=None if {name} is None else repr({name})")
    call = ", ".join(passed)
    without = ", ".join(item for item in passed if not item.startswith(f"{returns}="))
    if returns is None:
        body = [f"    return OP({call})"]
    elif given:  # the argument may be None: the op allocates the result, or .out writes the one given
        body = [f"    if {returns} is None:", f"        return OP({without})", f"    GIVEN({call})",
                f"    return {returns}"]
    else:
        body = [f"    OP({call})", f"    return {returns}"]
    return "\n".join([f"def {function.__name__}({', '.join(parts)}):", *body]), namespace
