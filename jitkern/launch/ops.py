"""A public function as a torch op, so that ``torch.compile(fullgraph=True)`` and CUDA
graphs take its call as one node and never trace its checks or launches.

``public_call(op="step5::update_decode", mutates=("mean", "ring"))`` defines the op
``torch.ops.step5.update_decode`` with the schema read from the function's signature
(``schema_of``: each parameter's annotation, ``Tensor(a!)`` for what it writes). Its
real implementation calls the public function (planned as any eager call); its fake
implementation runs the public function itself on fake tensors with ``faking`` on, where
kernels launch nothing and public functions read no tensor values, so the result's
shape and dtype are the function's own.

An eager call of the public function never meets the op: Dynamo, when it traces a call
of it, traces the function's ``_torchdynamo_inline`` attribute instead, the function's
op call (``op_call_source``), which costs the eager path nothing (a
``torch.compiler.is_compiling()`` test at the head of every call would cost 0.2 us on
our CPU machine: ``benchmarks/bench_ops.py``). A torch op cannot return one of its
arguments: a function that returns the argument it writes (``returns="out"``) returns it
around the op, and one whose ``out`` may be None has a second overload, ``.out``, that
takes it. A ``dict`` argument (``pdl_kwargs``) travels as its ``repr``, read back with
``ast.literal_eval``.

The op is defined by hand (``torch.library.Library.define``, an implementation for every
device): a call costs 3.4 us of dispatch on our CPU machine, against 44 us through
``torch.library.custom_op`` and 50 through ``triton_op`` (``benchmarks/bench_ops.py``);
its arguments are positional, as the function's are (a keyword-only schema cost 9.4 us).
It is opaque to Inductor, which never sees, specialises or compiles the kernels behind
it (``triton_op`` would let Inductor launch them with Triton's own JIT). Its fake
implementation is its ``Meta`` kernel, which fake tensors run: ``torch.library.register_fake``
reads its caller's source for its messages, 10-25 ms of a serving process's start on our
CPU machine at its first call, where all nine shipped ops now take 10-15 ms.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from jitkern.launch.direct import parameters_source
from jitkern.launch.spec import active_launch
from jitkern.layouts.kernel_layouts import DeclarationError

_TYPES = {torch.Tensor: "Tensor", int: "int", float: "float", bool: "bool", str: "str", dict: "str"}
_UNION = type(int | None)
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

    function: Callable[..., Any]  # the public function as written: the fake implementation runs it
    call: Callable[..., Any]  # as decorated (planned): the real implementation calls it
    schema: str
    where: str
    repr_args: tuple[str, ...]  # dict arguments, carried as their repr


def register(function: Callable[..., Any], call: Callable[..., Any], op: str, mutates: tuple[str, ...],
             returns: str | None) -> Callable[..., Any]:
    """Define ``function``'s op ``op`` ("namespace::name") and return its op call, the
    function Dynamo traces in place of ``call``."""
    namespace, _, name = op.partition("::")
    if not namespace.isidentifier() or not name.isidentifier():
        raise DeclarationError(f"public_call(op={op!r}): expected 'namespace::name', each a Python identifier")
    schema, given, repr_args = schema_of(function, op, mutates, returns)
    where = f"{function.__module__}.{function.__qualname__}"
    entry = _ops.get(op)
    if entry is not None:
        if entry.where != where or entry.schema != schema:
            raise DeclarationError(f"op {op} of {where} is taken by {entry.where} (schema {entry.schema})")
        entry.function, entry.call = function, call  # a reloaded module
    else:
        entry = _ops[op] = Op(function, call, schema, where, repr_args)
        if namespace not in _libraries:
            _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        library = _libraries[namespace]
        positional = [parameter.name for parameter in inspect.signature(function).parameters.values()
                      if parameter.kind is not parameter.KEYWORD_ONLY and (given is None or parameter.name != returns)]
        _define(library, namespace, f"{name}{schema}", entry, positional)
        if given is not None:
            _define(library, namespace, f"{name}.{returns}{given}", entry, positional)
    packet = getattr(getattr(torch.ops, namespace), name)
    source, names = op_call_source(function, repr_args, returns, given is not None)
    names.update(OP=packet.default, GIVEN=getattr(packet, returns) if given is not None else None)
    exec(compile(source, f"<op call of {op}>", "exec"), names)  # noqa: S102 - our own source
    return names[function.__name__]


def _define(library: torch.library.Library, namespace: str, schema: str, entry: Op, positional: list[str]) -> None:
    """Define one overload with its real implementation (every device) and its fake one
    (its ``Meta`` kernel); it returns the function's result when its schema returns a
    tensor, else nothing. ``positional``: the names of its positional arguments, in order."""
    library.define(schema)
    name, returns_tensor = schema.partition("(")[0], not schema.endswith("-> ()")
    texts = [(argument, positional.index(argument) if argument in positional else None)
             for argument in entry.repr_args]

    def real(*args: Any, **kwargs: Any) -> Any:
        if texts:
            args, kwargs = _read_reprs(texts, args, kwargs)
        result = entry.call(*args, **kwargs)
        return result if returns_tensor else None

    def fake(*args: Any, **kwargs: Any) -> Any:
        with faking():
            result = entry.function(*_read_reprs(texts, args, kwargs)[0], **kwargs)
        if returns_tensor and any(result is value for value in (*args, *kwargs.values())):
            raise TypeError(f"{namespace}::{name} returned one of its arguments: name it with public_call(returns=)")
        return result if returns_tensor else None

    library.impl(name, real, "CompositeExplicitAutograd")
    library.impl(name, fake, "Meta")


def _read_reprs(texts: list[tuple[str, int | None]], args: tuple, kwargs: dict[str, Any]) -> tuple[list, dict]:
    """The arguments with each dict argument's repr (``texts``: names, and positions when
    positional) read back; ``kwargs`` is changed in place."""
    args = list(args)
    for name, at in texts:
        if at is not None and at < len(args) and args[at] is not None:
            args[at] = ast.literal_eval(args[at])
        elif kwargs.get(name) is not None:
            kwargs[name] = ast.literal_eval(kwargs[name])
    return args, kwargs


def schema_of(function: Callable[..., Any], op: str, mutates: tuple[str, ...],
              returns: str | None) -> tuple[str, str | None, tuple[str, ...]]:
    """The op's schema read from ``function``'s signature; the schema of its ``.out``
    overload, when ``returns`` names an argument that may be None (the op's own schema
    leaves it out); and the dict arguments it carries as their repr.

    Each annotation is a tensor, int, float, bool, str or dict, or one of them or None; an
    argument in ``mutates`` is a tensor written in place. Arguments are positional or
    keyword-only as the function's are.
    """
    at = f"public_call(op={op!r}) of {function.__qualname__}"
    parameters = inspect.signature(function).parameters
    hints = typing.get_type_hints(function)
    for name in (*mutates, *([returns] if returns else [])):
        if name not in parameters:
            raise DeclarationError(f"{at}: {name!r} is not an argument ({', '.join(parameters)})")
    if returns is not None and returns not in mutates:
        raise DeclarationError(f"{at}: returns={returns!r} must be one of mutates, the arguments it writes")
    texts: dict[str, str] = {}  # each argument's schema text, "*" before the keyword-only ones
    repr_args, letters = [], iter("abcdefghijklmnopqrstuvwxyz")
    for name, parameter in parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise DeclarationError(f"{at}: *{name}: an op takes named arguments only")
        kind, optional = _type_of(hints.get(name))
        if kind is None:
            given = f"annotated {hints[name]!r}" if name in hints else "not annotated"
            raise DeclarationError(f"{at}: argument {name!r} is {given}; annotate it torch.Tensor, int, float, bool, "
                                   "str or dict, or one of them | None")
        if name in mutates and kind is not torch.Tensor:
            raise DeclarationError(f"{at}: mutates {name!r}, which is not a tensor")
        repr_args += [name] if kind is dict else []
        text = f"Tensor({next(letters)}!)" if name in mutates else _TYPES[kind]
        text += ("?" if optional else "") + f" {name}"
        if parameter.default is not parameter.empty:
            if parameter.default is not None and type(parameter.default) not in (int, float, bool):
                raise DeclarationError(f"{at}: argument {name!r} defaults to {parameter.default!r}; an op's defaults "
                                       "are None, ints, floats or bools")
            text += f"={parameter.default}"
        if parameter.kind is parameter.KEYWORD_ONLY and "*" not in texts:
            texts["*"] = "*"
        texts[name] = text
    result = hints.get("return")
    returns_tensor = result not in (None, type(None))
    if returns_tensor and _type_of(result) != (torch.Tensor, False):
        raise DeclarationError(f"{at}: returns {result!r}; an op's public function returns None or a tensor")
    if returns is not None and not returns_tensor:
        raise DeclarationError(f"{at}: returns={returns!r}, but the function returns None")
    if returns is None:
        return _schema(texts, returns_tensor), None, tuple(repr_args)
    if not _type_of(hints[returns])[1]:  # always given: the op writes it, the call returns it
        return _schema(texts, False), None, tuple(repr_args)
    if parameters[returns].kind is not parameters[returns].KEYWORD_ONLY and returns != list(parameters)[-1]:
        raise DeclarationError(f"{at}: returns={returns!r} may be None: make it the last argument or keyword-only")
    without = {name: text for name, text in texts.items() if name != returns}
    given = {**without, "*": "*", returns: texts[returns].replace("?", "").removesuffix("=None")}  # keyword-only
    return _schema(without, True), _schema(given, False), tuple(repr_args)


def _schema(texts: dict[str, str], returns_tensor: bool) -> str:
    arguments = list(texts.values())
    if arguments[-1:] == ["*"]:
        arguments.pop()
    return f"({', '.join(arguments)}) -> {'Tensor' if returns_tensor else '()'}"


def _type_of(annotation: Any) -> tuple[type | None, bool]:
    """The schema type of an annotation, and whether it may be None."""
    options = [item for item in typing.get_args(annotation) if item is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, _UNION) else [annotation]
    optional = len(options) < len(typing.get_args(annotation))
    kind = typing.get_origin(options[0]) or options[0] if len(options) == 1 else None
    return (kind if kind in _TYPES else None), optional


def op_call_source(function: Callable[..., Any], repr_args: tuple[str, ...], returns: str | None,
                   given: bool) -> tuple[str, dict[str, Any]]:
    """The source of the op call Dynamo traces for a call of ``function`` (its op, ``OP``;
    with ``given``, its ``.out`` overload, ``GIVEN``), with the function's own signature,
    so that defaults and keywords bind as in an eager call; and its defaults."""
    parameters = inspect.signature(function).parameters
    parts, names = parameters_source(parameters.values())
    passed = []
    for name, parameter in parameters.items():
        value = f"None if {name} is None else repr({name})" if name in repr_args else name
        passed.append((name, f"{name}={value}" if parameter.kind is parameter.KEYWORD_ONLY else value))
    call = ", ".join(text for _, text in passed)
    if returns is None:
        body = [f"    return OP({call})"]
    elif given:  # it may be None: the op allocates the result, or the .out overload writes the one given
        without = ", ".join(text for name, text in passed if name != returns)
        body = [f"    if {returns} is None:", f"        return OP({without})",
                f"    GIVEN({without}{', ' if without else ''}{returns}={returns})", f"    return {returns}"]
    else:
        body = [f"    OP({call})", f"    return {returns}"]
    return "\n".join([f"def {function.__name__}({', '.join(parts)}):", *body]), names
