"""A kernel declared once: each compile-key field says where a call's value comes from, and
how a deployment's config enumerates it; each tensor its usual stand-in.

A field of a kernel's ``CompileKey`` is declared by its default::

    @dataclass(frozen=True, kw_only=True)
    class CompileKey:
        dtype: str = dtype_of("x", warm=DTYPES)                  # x.dtype's name
        block_size: int = argument("block_size", constexpr="BLOCK_SIZE", warm=[1024])
        num_warps: int = fixed(4, option="num_warps")

From the declarations jitkern makes the kernel's ``dispatch`` (and the call of it in
``__call__``, which receives the key as ``compile_key``), its ``get_warmup_keys`` (the
product of each field's warm values; the manifest config's parameters are the ``Config``
objects named), the constexprs and launch options of ``constants(key)`` and, with the
class's ``stand_ins`` (a ``Tensor`` per tensor argument, a value per plain one), its
``warmup_inputs``. What is not plain (a spec table, a per-target path) stays
a method the kernel writes. ``kw_only=True`` lets fields with and without defaults mix.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import typing
from dataclasses import dataclass
from typing import Any, Callable

import torch

from jitkern.launch.direct import parameters_source
from jitkern.layouts.kernel_layouts import DeclarationError
from jitkern.layouts.specialisation import runtime_params
from jitkern.layouts.stand_ins import TritonWarmupTensor

METADATA = "jitkern"  # the key in a dataclass field's metadata holding its declaration
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl", "enable_fp_fusion",
                            "launch_cooperative_grid", "waves_per_eu", "matrix_instr_nonkdim", "kpack"})


@dataclass(frozen=True)
class Config:
    """A parameter of a manifest entry's ``config``, whose values warm key fields (``warm=``).

    ``type``: ``int``, ``bool``, ``str`` or a ``list[...]`` of one; a list's items are
    multiplied with the other fields' values. ``choices``: the values (of a list, the
    items) allowed. ``check(value)``: why a value is refused, or None. ``expand(value)``:
    the field values a value gives, when they are not the value (or its items) itself: the
    batch-size buckets up to a maximum, say.
    """

    name: str
    type: Any
    default: Any = inspect.Parameter.empty  # none: the manifest must give it
    choices: tuple = ()
    check: Callable[[Any], str | None] | None = None
    expand: Callable[[Any], list[Any]] | None = None

    def values(self, value: Any) -> list[Any]:
        """The field values ``value`` (from a manifest) gives; ValueError naming the parameter."""
        items = list(value) if typing.get_origin(self.type) is list else [value]
        unknown = [item for item in items if self.choices and item not in self.choices]
        if unknown:
            raise ValueError(f"{self.name}: {unknown} not supported; use {sorted(self.choices)}")
        problem = self.check(value) if self.check is not None else None
        if problem:
            raise ValueError(f"{self.name}: {problem}")
        return list(self.expand(value)) if self.expand is not None else items


@dataclass(frozen=True)
class Field:
    """How one key field is made: from the call (``reads`` its arguments), from other fields
    (``derived``) or fixed; and what warms it and what constant it becomes."""

    kind: str  # "dtype", "value" (read from the call), "derived" (from fields), "fixed"
    reads: tuple[str, ...] = ()
    function: Callable[..., Any] | None = None
    warm: Any = None  # a Config, or a list of the values every deployment warms
    constexpr: str | None = None
    option: str | None = None


def dtype_of(tensor: str, *, warm: Any = None) -> Any:
    """The name of ``tensor``'s dtype (``"bfloat16"``); its stand-in gets that dtype."""
    return _field(Field("dtype", (tensor,), warm=warm))


def size_of(tensor: str, dim: int, *, warm: Any = None, constexpr: str | None = None) -> Any:
    """``tensor.shape[dim]``; its stand-in gets that size."""
    return _field(Field("value", (tensor,), _Size(dim), warm, constexpr))


def argument(name: str, *, warm: Any = None, constexpr: str | None = None, option: str | None = None,
             default: Any = dataclasses.MISSING) -> Any:
    """The value of ``__call__``'s plain argument ``name`` (an int, a bool); its stand-in is the key's."""
    return _field(Field("value", (name,), None, warm, constexpr, option), default)


def computed(function: Callable[..., Any], *, warm: Any = None, constexpr: str | None = None,
             option: str | None = None) -> Any:
    """``function`` of the ``__call__`` arguments its parameters name (``lambda mean: mean.shape[1] * 8``)."""
    return _field(Field("value", tuple(inspect.signature(function).parameters), function, warm, constexpr, option))


def derived(function: Callable[..., Any], *, constexpr: str | None = None, option: str | None = None) -> Any:
    """``function`` of the key fields its parameters name (a tiling of the head size)."""
    return _field(Field("derived", tuple(inspect.signature(function).parameters), function, None, constexpr, option))


def fixed(value: Any, *, constexpr: str | None = None, option: str | None = None) -> Any:
    """A field every key of the kernel has with this value (a launch option, say)."""
    return _field(Field("fixed", warm=[value], constexpr=constexpr, option=option), value)


@dataclass(frozen=True)
class _Size:
    dim: int

    def __call__(self, tensor: Any) -> int:
        return tensor.shape[self.dim]


def _field(declaration: Field, default: Any = dataclasses.MISSING) -> Any:
    return dataclasses.field(default=default, metadata={METADATA: declaration})


@dataclass(frozen=True)
class Tensor:
    """A tensor argument's usual stand-in (``TritonWarmupTensor``). ``shape`` items and
    ``dtype`` may name a key field (or, a size, be a function of the key); a
    ``dtype_of``/``size_of`` field of the tensor gives its own."""

    shape: tuple = (16,)
    dtype: Any = None  # a torch.dtype, or the name of a key field holding a dtype's name
    strides: tuple | None = None
    varying: tuple = (0,)
    aligned: bool = True


# --- what jitkern makes of a declaration ---------------------------------------------------


class Declaration:
    """A kernel class's declared key fields and tensors, and what follows from them."""

    def __init__(self, cls: type, key_class: type, launcher: Callable[..., Any]):
        self.name = cls.__qualname__
        self.key_class = key_class
        self.fields = {field.name: field.metadata[METADATA] for field in dataclasses.fields(key_class)
                       if METADATA in field.metadata}
        undeclared = [field.name for field in dataclasses.fields(key_class) if METADATA not in field.metadata]
        if undeclared:
            raise DeclarationError(f"{self.name}.CompileKey: {', '.join(undeclared)} not declared (dtype_of, "
                                   "size_of, argument, computed, derived or fixed): declare every field or none")
        self.defaults = {field.name: field.default for field in dataclasses.fields(key_class)
                         if field.default is not dataclasses.MISSING}
        self.parameters = [parameter for parameter in list(inspect.signature(launcher).parameters.values())[1:]
                           if parameter.name != "compile_key"]  # __call__'s, as callers pass them
        self.read = [name for name, field in self.fields.items() if field.kind in ("dtype", "value")]
        self.make = functools.lru_cache(maxsize=4096)(self._make)

    def check(self, cls: type, writes_warmup_keys: bool) -> None:
        """Every name a field or tensor declares exists, every constant is the kernel's, and
        every field has warm values unless the kernel writes its own ``get_warmup_keys``."""
        arguments = {parameter.name for parameter in self.parameters}
        constexprs = set(inspect.signature(cls.kernel.fn).parameters) - {p.name for p in runtime_params(cls.kernel)}
        for name, field in self.fields.items():
            at = f"{self.name}.CompileKey.{name}"
            known = set(self.fields) if field.kind == "derived" else arguments
            for read in field.reads:
                if read not in known:
                    raise DeclarationError(f"{at}: reads {read!r}, which is not {'a key field' if field.kind == 'derived' else 'an argument of __call__'} "
                                           f"({', '.join(sorted(known)) or 'none'})")
            if field.constexpr is not None and field.constexpr not in constexprs:
                raise DeclarationError(f"{at}: constexpr={field.constexpr!r} is not a constexpr parameter of "
                                       f"{cls.kernel.__name__} ({', '.join(sorted(constexprs)) or 'none'})")
            if field.option is not None and field.option not in LAUNCH_OPTIONS:
                raise DeclarationError(f"{at}: option={field.option!r} is not a Triton launch option "
                                       f"({', '.join(sorted(LAUNCH_OPTIONS))})")
            if field.warm is not None and not isinstance(field.warm, (Config, list, tuple)):
                raise DeclarationError(f"{at}: warm={field.warm!r}: expected a Config or a list of values")
            if not writes_warmup_keys and field.kind != "derived" and field.warm is None and name not in self.defaults:
                raise DeclarationError(f"{at}: no warm values (warm=, or a default), and {self.name} writes no "
                                       "get_warmup_keys")
        for name, spec in cls.stand_ins.items():
            if name not in arguments:
                raise DeclarationError(f"{self.name}.stand_ins: {name!r} is not an argument of __call__ "
                                       f"({', '.join(sorted(arguments))})")
            for item in (spec.dtype, *spec.shape) if isinstance(spec, Tensor) else ():  # names, not functions
                if isinstance(item, str) and item not in self.fields:
                    raise DeclarationError(f"{self.name}.stand_ins[{name!r}]: {item!r} is not a field of CompileKey")

    # --- dispatch ------------------------------------------------------------------------

    def _make(self, *values: Any) -> Any:
        fields = dict(zip(self.read, values))
        return self.key_of(fields)

    def key_of(self, given: dict[str, Any]) -> Any:
        """The key of field values (a dtype as a ``torch.dtype`` or its name), derived fields made."""
        fields = {}
        for name, field in self.fields.items():
            if field.kind == "derived":
                fields[name] = field.function(*(fields[read] for read in field.reads))
            elif name in given:
                value = given[name]
                fields[name] = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
        return self.key_class(**fields)

    def launcher_source(self, own_dispatch: bool = False) -> tuple[str, dict[str, Any]]:
        """The source of the ``__call__`` (and ``launch_spec``) made around the author's:
        the key read from the arguments (by the class's own ``dispatch`` when it writes
        one), then the author's launcher given it."""
        for parameter in self.parameters:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise DeclarationError(f"{self.name}.__call__: *{parameter.name} cannot be read by a declared key")
        parts, namespace = parameters_source(self.parameters)
        arguments = [f"{parameter.name}={parameter.name}" if parameter.kind is parameter.KEYWORD_ONLY
                     else parameter.name for parameter in self.parameters]
        reads = []
        for name in self.read:
            field = self.fields[name]
            if field.kind == "dtype":
                reads.append(f"{field.reads[0]}.dtype")
            elif field.function is None:
                reads.append(field.reads[0])
            elif isinstance(field.function, _Size):
                reads.append(f"{field.reads[0]}.shape[{field.function.dim}]")
            else:
                namespace[f"READ_{name}"] = field.function
                reads.append(f"READ_{name}({', '.join(field.reads)})")
        signature, call = ", ".join(["self", *parts]), ", ".join(arguments)
        make = (f"self.dispatch({', '.join(f'{name}={read}' for name, read in zip(self.read, reads))})" if own_dispatch
                else f"MAKE({', '.join(reads)}{',' if len(reads) == 1 else ''})")
        source = "\n".join([
            f"def launch_spec({signature}):",
            f"    compile_key = {make}",
            f"    spec = BUILD(self, compile_key, {call})",
            "    spec.key = compile_key",
            "    return spec",
            f"def __call__({signature}):",
            "    if ACTIVE.faking:  # a torch op's fake implementation: nothing launches",
            "        return None",
            f"    compile_key = {make}",
            f"    spec = BUILD(self, compile_key, {call})",
            "    spec.key = compile_key",
            "    launched = self.launch(spec)",
            "    if RECORDING.launches is not None:",
            "        RECORDING.launches.append((self, spec, launched))",
            "    return spec.result",
        ])
        return source, namespace

    # --- warmup ---------------------------------------------------------------------------

    def configs(self) -> list[Config]:
        """The manifest config parameters the fields warm from, each once."""
        return list({field.warm.name: field.warm for field in self.fields.values()
                     if isinstance(field.warm, Config)}.values())

    def warmup_keys(self, config: dict[str, Any]) -> list[Any]:
        """Every key the product of the fields' warm values gives, duplicates dropped."""
        names, choices = [], []
        for name, field in self.fields.items():
            if field.kind == "derived":
                continue
            if isinstance(field.warm, Config):
                values = field.warm.values(config[field.warm.name])
            elif field.warm is not None:
                values = list(field.warm)
            elif name in self.defaults:
                values = [self.defaults[name]]
            else:
                raise ValueError(f"{self.name}.CompileKey.{name} declares no warm values: the kernel writes its own "
                                 "get_warmup_keys")
            names.append(name)
            choices.append(values)
        return list(dict.fromkeys(self.key_of(dict(zip(names, row))) for row in itertools.product(*choices)))

    def get_warmup_keys(self) -> Callable[..., list[Any]]:
        """The kernel's ``get_warmup_keys``: one keyword parameter per ``Config`` (the
        manifest's schema of the config is read from its signature)."""
        configs = self.configs()
        defaults = {config.name: config.default for config in configs if config.default is not inspect.Parameter.empty}

        def get_warmup_keys(kernel: Any, **config: Any) -> list[Any]:
            unknown = sorted(config.keys() - {c.name for c in configs})
            missing = sorted({c.name for c in configs} - config.keys() - defaults.keys())
            if unknown or missing:
                raise TypeError(f"{kernel.name}.get_warmup_keys: " + "; ".join(
                    ([f"unknown {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])))
            config = {**defaults, **config}
            check = type(kernel).check_config  # read on the class: a plain function, not a method
            if check is not None:  # what the parameters must say together
                check(**config)
            return self.warmup_keys(config)

        parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        for config in configs:
            default = config.default if config.name in defaults else inspect.Parameter.empty
            parameters.append(inspect.Parameter(config.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                                annotation=config.type))
        get_warmup_keys.__signature__ = inspect.Signature(parameters)
        get_warmup_keys.__doc__ = "Every key the product of the fields' warm values gives, duplicates dropped."
        return get_warmup_keys

    # --- constants and stand-ins ------------------------------------------------------------

    def constants(self, key: Any) -> dict[str, Any]:
        """The constexprs and launch options the fields name."""
        constants = {}
        for name, field in self.fields.items():
            for target in (field.constexpr, field.option):
                if target is not None:
                    constants[target] = getattr(key, name)
        return constants

    def stand_ins(self, key: Any, declared: dict[str, Any]) -> dict[str, Any]:
        """``__call__``'s arguments for ``key``: a plain argument the key reads, the key's
        value; else as ``declared`` (a ``Tensor``'s stand-in, a plain value), else its default."""
        dtypes = {field.reads[0]: getattr(key, name) for name, field in self.fields.items() if field.kind == "dtype"}
        sizes: dict[str, dict[int, int]] = {}
        values = {}
        for name, field in self.fields.items():
            if isinstance(field.function, _Size):
                sizes.setdefault(field.reads[0], {})[field.function.dim] = getattr(key, name)
            elif field.kind == "value" and field.function is None:
                values[field.reads[0]] = getattr(key, name)
        inputs = {}
        for parameter in self.parameters:
            name = parameter.name
            value = declared.get(name)
            if callable(value) and not isinstance(value, Tensor):
                value = value(key)  # a stand-in that depends on the key
            if name in values:
                inputs[name] = values[name]
            elif isinstance(value, Tensor):
                inputs[name] = _stand_in(value, key, dtypes.get(name), sizes.get(name, {}))
            elif name in declared:
                inputs[name] = value
            elif parameter.default is not parameter.empty:
                inputs[name] = parameter.default
            else:
                raise DeclarationError(f"{self.name}: no stand-in for {name!r}: declare it in stand_ins, read it "
                                       "with argument(), give it a default, or write warmup_inputs")
        return inputs


def _stand_in(spec: Tensor, key: Any, dtype_name: str | None, sizes: dict[int, int]) -> TritonWarmupTensor:
    dtype = dtype_name or spec.dtype
    if isinstance(dtype, str):
        dtype = getattr(key, dtype) if dtype in {f.name for f in dataclasses.fields(key)} else dtype
        if not isinstance(getattr(torch, dtype, None), torch.dtype):  # a key read from a manifest or a record
            raise ValueError(f"dtype {dtype!r} is not a torch dtype")
        dtype = getattr(torch, dtype)
    if dtype is None:
        raise DeclarationError("a Tensor stand-in with no dtype: give Tensor(dtype=...) or a dtype_of field")
    shape = [getattr(key, size) if isinstance(size, str) else size(key) if callable(size) else size
             for size in spec.shape]
    for dim, size in sizes.items():
        shape[dim] = size
    return TritonWarmupTensor(dtype, shape, spec.strides, aligned=spec.aligned, varying=spec.varying)
