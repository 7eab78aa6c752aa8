"""What jitkern makes of a kernel's declaration (``jitkern.kernel.declare``): its ``dispatch``
and the launcher that calls it, its ``get_warmup_keys``, its declared constants and its
stand-ins; with a tuning space (``jitkern.kernel.tuning``), the winner each call's bucket takes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
from typing import Any, Callable

import torch

from jitkern.kernel.arguments import Arguments
from jitkern.kernel.calls import read_names
from jitkern.kernel.declare import LAUNCH_OPTIONS, METADATA, Config, Size, Tensor, Warm
from jitkern.kernel.tuning import TuningError, TuningSpace, Winners
from jitkern.launch.direct import parameters_source
from jitkern.launch.plans import forget_plans
from jitkern.layouts.kernel_layouts import DeclarationError
from jitkern.layouts.specialisation import constexpr_names
from jitkern.layouts.stand_ins import TritonWarmupTensor

class Declaration:
    """A kernel class's declared key fields and tensors, and what follows from them."""

    def __init__(self, cls: type, key_class: type, launcher: Callable[..., Any],
                 space: TuningSpace | None = None):
        self.name = cls.__qualname__
        self.key_class = key_class
        self.fields = {field.name: field.metadata[METADATA] for field in dataclasses.fields(key_class)
                       if METADATA in field.metadata}
        undeclared = [field.name for field in dataclasses.fields(key_class) if METADATA not in field.metadata]
        if undeclared:
            raise DeclarationError(f"{self.name}.CompileKey: {', '.join(undeclared)} not declared (dtype_of, "
                                   "size_of, argument, computed, derived, fixed or tuned): declare every field or none")
        self.defaults = {field.name: field.default for field in dataclasses.fields(key_class)
                         if field.default is not dataclasses.MISSING}
        self.parameters = [parameter for parameter in list(inspect.signature(launcher).parameters.values())[1:]
                           if parameter.name != "compile_key"]  # __call__'s, as callers pass them
        self.tuned = tuple(name for name, field in self.fields.items() if field.kind == "tuned")
        if bool(self.tuned) != (space is not None):
            raise DeclarationError(f"{self.name}: " + (f"CompileKey.{self.tuned[0]} is tuned(), but the class declares "
                                   "no tuning space (tuning = TuningSpace(...))" if self.tuned else "its tuning space "
                                   "tunes no field: its configs set constexprs or launch options, or fields declared tuned()"))
        self.selectors = {name: _selector(self.name, name, value) for name, value in (space.by if space else {}).items()}
        clash = set(self.selectors) & set(self.fields)
        if clash:
            raise DeclarationError(f"{self.name}.tuning.by: {sorted(clash)} are fields of CompileKey already")
        self.reading = {**self.fields, **self.selectors}  # what a call reads: key fields, then selectors
        self.read = [name for name, field in self.reading.items() if field.kind in ("dtype", "value")]
        self.make = functools.lru_cache(maxsize=4096)(self._make)
        untuned = tuple(name for name in self.fields if name not in self.tuned)
        try:
            self.winners = None if space is None else Winners(
                self.name, getattr(cls, "name", self.name), space, untuned, self.tuned, self.selector_rows,
                forget=lambda: (self.make.cache_clear(), getattr(cls.dispatch, "cache_clear", tuple)(), forget_plans()))
        except TuningError as error:  # a candidate or default that cannot work, found where it is declared
            raise DeclarationError(str(error)) from None
        self.usual: dict[str, Tensor] = {}  # the stand-ins the public function's Arguments give (check)

    def check(self, cls: type, writes_warmup_keys: bool, writes_warmup_inputs: bool = False) -> None:
        """Every name a field or tensor declares exists, every constant is the kernel's, and
        every field has warm values unless the kernel writes its own ``get_warmup_keys``; then
        the usual stand-ins are derived (from names known to exist), and each argument of
        ``__call__`` has one unless the kernel writes its own ``warmup_inputs``."""
        arguments = {parameter.name for parameter in self.parameters}
        constexprs = constexpr_names(cls.kernel)
        for name, field in self.fields.items():
            at = f"{self.name}.CompileKey.{name}"
            known = set(self.fields) if field.kind == "derived" else arguments
            for read in field.reads:
                if field.kind == "derived" and read in self.tuned:
                    raise DeclarationError(f"{at}: reads the tuned field {read!r}; a derived field is of the bucket")
                if read not in known:
                    what = "a key field" if field.kind == "derived" else "an argument of __call__"
                    raise DeclarationError(f"{at}: reads {read!r}, which is not {what} ({', '.join(sorted(known)) or 'none'})")
            if field.constexpr is not None and field.constexpr not in constexprs:
                raise DeclarationError(f"{at}: constexpr={field.constexpr!r} is not a constexpr parameter of "
                                       f"{cls.kernel.__name__} ({', '.join(sorted(constexprs)) or 'none'})")
            if field.option is not None and field.option not in LAUNCH_OPTIONS:
                raise DeclarationError(f"{at}: option={field.option!r} is not a Triton launch option "
                                       f"({', '.join(sorted(LAUNCH_OPTIONS))})")
            if field.warm is not None and not isinstance(field.warm, (Config, Warm, list, tuple)):
                raise DeclarationError(f"{at}: warm={field.warm!r}: expected a Config, a Warm or a list of values")
            if not writes_warmup_keys and field.kind not in ("derived", "tuned") and field.warm is None \
                    and name not in self.defaults:
                raise DeclarationError(f"{at}: no warm values (warm=, or a default), and {self.name} writes no "
                                       "get_warmup_keys")
        for name, field in self.selectors.items():
            unknown = set(field.reads) - arguments
            if unknown:
                raise DeclarationError(f"{self.name}.tuning.by[{name!r}]: reads {sorted(unknown)}, not arguments of "
                                       f"__call__ ({', '.join(sorted(arguments))})")
        if self.tuned and writes_warmup_keys:
            raise DeclarationError(f"{self.name}: a tuned kernel's keys are its declaration's (every candidate of "
                                   "each): it writes no get_warmup_keys")
        for name, spec in cls.stand_ins.items():
            if name not in arguments:
                raise DeclarationError(f"{self.name}.stand_ins: {name!r} is not an argument of __call__ "
                                       f"({', '.join(sorted(arguments))})")
            for item in (spec.dtype, *spec.shape) if isinstance(spec, Tensor) else ():  # names, not functions
                if isinstance(item, str) and item not in self.fields:
                    raise DeclarationError(f"{self.name}.stand_ins[{name!r}]: {item!r} is not a field of CompileKey")
        if getattr(cls, "arguments", None) is not None:
            self.usual = self._usual_stand_ins(cls.arguments)
        self.optional = {name for name in self.usual if cls.arguments.arguments[name].optional}  # a call may pass None
        given = set(self.plain_reads()) | set(cls.stand_ins) | set(self.usual)
        for parameter in self.parameters if not writes_warmup_inputs else ():
            if parameter.name not in given and parameter.default is parameter.empty and not _takes_float(parameter):
                raise DeclarationError(_NO_STAND_IN.format(self.name, parameter.name))

    # --- dispatch ------------------------------------------------------------------------

    def _make(self, *values: Any) -> Any:
        fields = dict(zip(self.read, values))
        return self.key_of(fields)

    def key_of(self, given: dict[str, Any]) -> Any:
        """The key of field values (a dtype as a ``torch.dtype`` or its name), derived fields
        made; tuned fields as given (a candidate, at warmup) or else the bucket's winner,
        the bucket read from the fields and the selectors' values in ``given``."""
        fields = {}
        for name, field in self.fields.items():
            if field.kind == "derived":
                fields[name] = field.function(*(fields[read] for read in field.reads))
            elif name in given and field.kind != "tuned":
                fields[name] = _plain(given[name])
        if self.winners is not None:
            if all(name in given for name in self.tuned):
                fields.update((name, given[name]) for name in self.tuned)
            else:
                fields.update(self.winners.pick(self._bucket(fields, given)))
        return self.key_class(**fields)

    def read_from(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The values the fields read from ``arguments`` (a parameter left out: its default)."""
        given = {parameter.name: parameter.default for parameter in self.parameters
                 if parameter.default is not parameter.empty} | arguments
        values = {}
        for name in self.read:
            field = self.reading[name]
            missing = [read for read in field.reads if read not in given]
            if missing:
                raise TypeError(f"{self.name}: {name} reads {', '.join(missing)}, which the arguments lack")
            first = given[field.reads[0]]
            values[name] = (first.dtype if field.kind == "dtype" else first if field.function is None
                            else field.function(*(given[read] for read in field.reads)))  # a Size too
        return values

    def _bucket(self, fields: dict[str, Any], given: dict[str, Any]) -> tuple:
        missing = [name for name in (*self.winners.untuned_names, *self.selectors)
                   if name not in fields and name not in self.defaults and name not in given]
        if missing:
            raise TypeError(f"{self.name}.dispatch: missing {', '.join(missing)} (a tuned key's bucket)")
        return (*(fields[name] if name in fields else self.defaults[name] for name in self.winners.untuned_names),
                *(_plain(given[name]) for name in self.selectors))

    def launcher_source(self, own_dispatch: bool = False) -> tuple[str, dict[str, Any]]:
        """The source of the ``__call__`` (and ``launch_spec``) made around the author's:
        the key read from the arguments (by the class's own ``dispatch`` when it writes
        one), then the author's launcher given it; and ``reads``, the values read."""
        for parameter in self.parameters:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise DeclarationError(f"{self.name}.__call__: *{parameter.name} cannot be read by a declared key")
        parts, namespace = parameters_source(self.parameters)
        arguments = [f"{parameter.name}={parameter.name}" if parameter.kind is parameter.KEYWORD_ONLY
                     else parameter.name for parameter in self.parameters]
        reads = []
        for name in self.read:
            field = self.reading[name]
            if field.kind == "dtype":
                reads.append(f"{field.reads[0]}.dtype")
            elif field.function is None:
                reads.append(field.reads[0])
            elif isinstance(field.function, Size) and field.function.buckets is None:
                reads.append(f"{field.reads[0]}.shape[{field.function.dim}]")
            else:
                namespace[f"READ_{name}"] = field.function
                reads.append(f"READ_{name}({', '.join(field.reads)})")
        signature, call = ", ".join(["self", *parts]), ", ".join(arguments)
        make = (f"self.dispatch({', '.join(f'{name}={read}' for name, read in zip(self.read, reads))})" if own_dispatch
                else f"MAKE({', '.join(reads)}{',' if len(reads) == 1 else ''})")
        source = "\n".join([
            f"def reads({signature}):",
            f"    return ({', '.join(reads)}{',' if len(reads) == 1 else ''})",
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
        """The manifest config parameters the fields and selectors warm from, each once."""
        configs = [config for field in self.reading.values()
                   for config in (field.warm.configs if isinstance(field.warm, Warm) else (field.warm,))
                   if isinstance(config, Config)]
        return list({config.name: config for config in configs}.values())

    def warmup_keys(self, config: dict[str, Any]) -> list[Any]:
        """Every key the product of the fields' warm values gives, duplicates dropped."""
        names, choices = [], []
        for name, field in self.fields.items():
            if field.kind in ("derived", "tuned"):
                continue
            if field.warm is not None:
                values = _warm_values(field, config)
            elif name in self.defaults:
                values = [self.defaults[name]]
            else:
                raise ValueError(f"{self.name}.CompileKey.{name} declares no warm values: the kernel writes its own "
                                 "get_warmup_keys")
            names.append(name)
            choices.append(list(dict.fromkeys(values)))  # a value listed twice is one key
        self.selector_rows(config)  # checked as the fields' values are, though no key holds them
        candidates = self.winners.candidates if self.winners is not None else ({},)
        rows = math.prod(len(values) for values in choices) * len(candidates)
        if rows > MAX_KEY_ROWS:  # one config list read by several fields multiplies itself
            raise ValueError(f"{self.name}: this config gives {rows} combinations of key fields "
                             f"({' x '.join(str(len(values)) for values in choices)}), more than {MAX_KEY_ROWS}: "
                             "split it")
        return list(dict.fromkeys(self.key_of({**dict(zip(names, row)), **candidate})
                                  for row in itertools.product(*choices) for candidate in candidates))

    def selector_rows(self, config: dict[str, Any]) -> list[tuple]:
        """Every combination of the selectors' warm values in ``config``: the buckets of a key."""
        return [tuple(map(_plain, row)) for row in
                itertools.product(*(_warm_values(field, config) for field in self.selectors.values()))]

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

    def constants_named(self) -> set[str]:
        """The constexprs and launch options the fields name."""
        return {target for field in self.fields.values() for target in (field.constexpr, field.option) if target}

    def constants(self, key: Any) -> dict[str, Any]:
        """The constexprs and launch options the fields name."""
        constants = {}
        for name, field in self.fields.items():
            for target in (field.constexpr, field.option):
                if target is not None:
                    constants[target] = getattr(key, name)
        return constants

    def _usual_stand_ins(self, arguments: Arguments) -> dict[str, Tensor]:
        """The stand-ins of the tensors ``__call__`` shares with the public function's
        ``Arguments``: a size they name is the key field's that reads it (a dimension of one
        of them, or an int argument), the dtype the ``dtype_of`` field's."""
        sizes, dtypes, plain = read_names(self.fields, arguments)
        sizes.update(plain)
        names = [parameter.name for parameter in self.parameters]
        if not set(names) & set(arguments.arguments):
            raise DeclarationError(f"{self.name}.arguments: declares none of __call__'s arguments ({', '.join(names)})")
        return arguments.stand_ins(self.name, names, sizes, dtypes)

    def stand_ins(self, key: Any, declared: dict[str, Any]) -> dict[str, Any]:
        """``__call__``'s arguments for ``key``: a plain argument the key reads, the key's
        value; else as ``declared`` (a ``Tensor``'s stand-in, a plain value), else the
        usual one ``arguments`` gives (None for an optional one where a computed field of
        the key says so: ``topk_weights is not None``), else its default."""
        usual = [name for name in self.optional if name not in declared]
        declared = {**self.usual, **declared}
        dtypes = {field.reads[0]: getattr(key, name) for name, field in self.fields.items() if field.kind == "dtype"}
        sizes: dict[str, dict[int, int]] = {}
        for name, field in self.fields.items():
            if isinstance(field.function, Size):
                sizes.setdefault(field.reads[0], {})[field.function.dim] = getattr(key, name)
        values = {argument: getattr(key, name) for argument, name in self.plain_reads().items()}
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
            elif _takes_float(parameter):
                inputs[name] = FLOAT_STAND_IN
            else:
                raise DeclarationError(_NO_STAND_IN.format(self.name, name))
        for name, field in self.fields.items():  # an optional tensor a computed field reads: None where the key says
            absent = [read for read in field.reads if read in usual] if field.kind == "value" else []
            if absent and not isinstance(field.function, Size) and field.function(*map(inputs.get, field.reads)) \
                    != getattr(key, name):
                inputs.update(dict.fromkeys(absent))
        return inputs

    def plain_reads(self) -> dict[str, str]:
        """Argument -> the key field that holds it as it is (``argument()``): its stand-in is the key's value."""
        return {field.reads[0]: name for name, field in self.fields.items()
                if field.kind == "value" and field.function is None}


MAX_KEY_ROWS = 100_000
"""The most combinations of key field values one config may give (keys are compiled, locked, loaded)."""
FLOAT_STAND_IN = 1.5
"""A ``float`` argument's stand-in where none is declared: Triton passes any float as fp32,
specialising on no value, so every float launches the same binary."""
_NO_STAND_IN = ("{}: no stand-in for {!r}: declare it in stand_ins, read it with argument(), give it a default, "
                "annotate it float, or write warmup_inputs")


def _takes_float(parameter: inspect.Parameter) -> bool:
    return parameter.annotation in (float, "float")


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
    strides = None if spec.strides is None else [stride(key) if callable(stride) else stride for stride in spec.strides]
    aligned = spec.aligned(key) if callable(spec.aligned) else spec.aligned
    return TritonWarmupTensor(dtype, shape, strides, aligned=aligned, varying=spec.varying)


def _plain(value: Any) -> Any:
    """A dtype by its name, as keys and buckets hold it; any other value as it is."""
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value


def _warm_values(field: Any, config: dict[str, Any]) -> list[Any]:
    if isinstance(field.warm, Warm):
        return field.warm.values(config)
    return field.warm.values(config[field.warm.name]) if isinstance(field.warm, Config) else list(field.warm)


def _selector(kernel: str, name: str, declared: Any) -> Any:
    """A ``by`` selector's declaration: a field read from the call, with warm values."""
    field = getattr(declared, "metadata", {}).get(METADATA)
    if field is None or field.kind not in ("dtype", "value") or field.constexpr or field.option:
        raise DeclarationError(f"{kernel}.tuning.by[{name!r}]: expected a value read from the call (computed, "
                               "size_of, argument or dtype_of) that is no constant")
    if not isinstance(field.warm, (Config, list, tuple)):
        raise DeclarationError(f"{kernel}.tuning.by[{name!r}]: warm= must give the values a deployment tunes "
                               "(a Config or a list)")
    return field

