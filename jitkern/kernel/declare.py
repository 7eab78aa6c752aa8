"""A kernel declared once: each compile-key field says where a call's value comes from, and
how a deployment's config enumerates it; each tensor its usual stand-in.

A field of a kernel's ``CompileKey`` (a plain class, made a frozen, keyword-only
dataclass) is declared by its default::

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
a method the kernel writes. Keyword-only fields with and without defaults mix.
Fields declared ``tuned()`` are picked by the kernel's tuning space
(``jitkern.kernel.tuning``). ``jitkern.kernel.declaration`` makes all of this.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable

from jitkern.layouts.kernel_layouts import DeclarationError  # noqa: F401 - the author API raises it

METADATA = "jitkern"  # the key in a dataclass field's metadata holding its declaration
POSITIVE = range(1, 2**31)  # a size a manifest names: an int32 of at least 1
STAND_IN_SIZE = 16  # a stand-in's size of a dimension no key field fixes (tokens, blocks)
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl", "enable_fp_fusion",
                            "launch_cooperative_grid", "waves_per_eu", "matrix_instr_nonkdim", "kpack"})


@dataclass(frozen=True)
class Config:
    """A parameter of a manifest entry's ``config``, whose values warm key fields (``warm=``).

    ``type``: ``int``, ``bool``, ``str`` or a ``list[...]`` of one; a list's items are
    multiplied with the other fields' values. ``choices``: the values (of a list, the
    items) allowed, or a ``range`` of ints. ``check(value)``: why a value is refused, or None. ``expand(value)``:
    the field values a value gives, when they are not the value (or its items) itself: the
    batch-size buckets up to a maximum, say.
    """

    name: str
    type: Any
    default: Any = inspect.Parameter.empty  # none: the manifest must give it
    choices: tuple | range = ()
    check: Callable[[Any], str | None] | None = None
    expand: Callable[[Any], list[Any]] | None = None

    def values(self, value: Any) -> list[Any]:
        """The field values ``value`` (from a manifest) gives; ValueError naming the parameter."""
        items = list(value) if typing.get_origin(self.type) is list else [value]
        unknown = [item for item in items if self.choices and item not in self.choices]
        if unknown:
            allowed = (f"an int in [{self.choices.start}, {self.choices.stop})" if isinstance(self.choices, range)
                       else sorted(self.choices))
            raise ValueError(f"{self.name}: {unknown} not supported; use {allowed}")
        problem = self.check(value) if self.check is not None else None
        if problem:
            raise ValueError(f"{self.name}: {problem}")
        return list(self.expand(value)) if self.expand is not None else items


@dataclass(frozen=True, init=False)
class Warm:
    """A field's warm values as a function of manifest config parameters (``Config``s),
    where one alone does not give them: a width that is the head size times a factor of
    the compression ratio. ``function`` takes the parameters' values by their names and
    returns the field's values."""

    function: Callable[..., list[Any]]
    configs: tuple[Config, ...]

    def __init__(self, function: Callable[..., list[Any]], *configs: Config):
        names = list(inspect.signature(function).parameters)
        if names != [config.name for config in configs]:
            raise TypeError(f"Warm: the function's parameters {names} must be the configs' names, in order")
        object.__setattr__(self, "function", function)
        object.__setattr__(self, "configs", configs)

    def values(self, config: dict[str, Any]) -> list[Any]:
        """The field's values for a manifest's ``config``; ValueError naming a parameter."""
        for item in self.configs:
            item.values(config[item.name])  # each parameter checked as a field warmed by it is
        return list(self.function(*(config[item.name] for item in self.configs)))


@dataclass(frozen=True)
class Field:
    """How one key field is made: from the call (``reads`` its arguments), from other fields
    (``derived``) or fixed; and what warms it and what constant it becomes."""

    kind: str  # "dtype", "value" (read from the call), "derived" (from fields), "fixed", "tuned" (a table's)
    reads: tuple[str, ...] = ()
    function: Callable[..., Any] | None = None
    warm: Any = None  # a Config, a Warm, or a list of the values every deployment warms
    constexpr: str | None = None
    option: str | None = None


def dtype_of(tensor: str, *, warm: Any = None) -> Any:
    """The name of ``tensor``'s dtype (``"bfloat16"``); its stand-in gets that dtype."""
    return _field(Field("dtype", (tensor,), warm=warm))


def size_of(tensor: str, dim: int, *, warm: Any = None, constexpr: str | None = None, buckets: Any = None) -> Any:
    """``tensor.shape[dim]`` (with ``buckets``, a ``Buckets``: the bucket it falls in, a
    tuning selector's batch); its stand-in gets that size. ``warm="n"``: the manifest config's
    positive int ``n`` (with ``buckets``, the most: every bucket up to it)."""
    if isinstance(warm, str):
        warm = Config(warm, int, choices=POSITIVE, expand=buckets.upto if buckets is not None else None)
    return _field(Field("value", (tensor,), Size(dim, buckets), warm, constexpr))


def argument(name: str, *, warm: Any = None, constexpr: str | None = None, option: str | None = None,
             default: Any = dataclasses.MISSING) -> Any:
    """The value of ``__call__``'s plain argument ``name`` (an int, a bool); its stand-in is the key's."""
    return _field(Field("value", (name,), None, warm, constexpr, option), default)


def computed(function: Callable[..., Any], *, warm: Any = None, constexpr: str | None = None,
             option: str | None = None) -> Any:
    """``function`` of the ``__call__`` arguments its parameters name (``lambda mean: mean.shape[1] * 8``)."""
    return _field(Field("value", tuple(inspect.signature(function).parameters), function, warm, constexpr, option))


def derived(function: Callable[..., Any], attribute: str | None = None, *, constexpr: str | None = None,
            option: str | None = None) -> Any:
    """``function`` of the key fields its parameters name (a tiling of the head size), or
    that result's ``attribute`` (one field of the tiling)."""
    reads = tuple(inspect.signature(function).parameters)
    if attribute is not None:
        whole = function

        def function(*fields: Any) -> Any:
            return getattr(whole(*fields), attribute)
    return _field(Field("derived", reads, function, None, constexpr, option))


def fixed(value: Any, *, constexpr: str | None = None, option: str | None = None) -> Any:
    """A field every key of the kernel has with this value (a launch option, say)."""
    return _field(Field("fixed", warm=[value], constexpr=constexpr, option=option), value)


def tuned(*, constexpr: str | None = None, option: str | None = None) -> Any:
    """A field the kernel's tuning space picks per call (``jitkern.kernel.tuning``): each
    candidate config gives it a value, and a call takes its bucket's winner."""
    return _field(Field("tuned", constexpr=constexpr, option=option))


@dataclass(frozen=True)
class Size:
    dim: int
    buckets: Any = None  # a Buckets: the size's bucket

    def __call__(self, tensor: Any) -> int:
        size = tensor.shape[self.dim]
        return size if self.buckets is None else self.buckets.of(size)


def _field(declaration: Field, default: Any = dataclasses.MISSING) -> Any:
    return dataclasses.field(default=default, metadata={METADATA: declaration})


@dataclass(frozen=True)
class Tensor:
    """A tensor argument's usual stand-in (``TritonWarmupTensor``). ``shape`` items and
    ``dtype`` may name a key field; sizes, strides and ``aligned`` may be functions of the
    key (a view of one projection: its row stride twice its width); a
    ``dtype_of``/``size_of`` field of the tensor gives its own."""

    shape: tuple = (STAND_IN_SIZE,)
    dtype: Any = None  # a torch.dtype, or the name of a key field holding a dtype's name
    strides: tuple | None = None
    varying: tuple = (0,)
    aligned: Any = True
