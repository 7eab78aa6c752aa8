"""Kernels written with ``triton.autotune`` or ``triton.heuristics``, taken in as declarations.

jitkern takes a kernel's constexprs and launch options from its key (``constants(key)``),
so that a key names one binary; Triton's wrappers choose them per launch instead. So a
kernel class whose ``kernel`` is wrapped is read, not run through the wrappers:

- ``triton.autotune``: its configs become the candidates of the class's tuning space
  (``jitkern.kernel.tuning``), one ``tuned()`` key field per constexpr and launch option
  they set, added to the class's ``CompileKey``; its first config is the default. Its
  ``key`` names what selects: each name must be a selector the class declares
  (``tuning = TuningSpace(by=...)``, bucketing the values) or a field of its key.
- ``triton.heuristics``: each value becomes a constant computed from the key (its fields
  and constants, by name), in the order Triton applies them.

What runs code around a launch (``pre_hook``, ``post_hook``, ``reset_to_zero``,
``restore_value``, a config's ``pre_hook``) or chooses configs by running them
(``prune_configs_by``) cannot be adopted: jitkern tunes ahead of serving and launches
nothing else. Each is one ``DeclarationError`` naming the class and the feature.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from jitkern import settings
from jitkern.kernel.declare import LAUNCH_OPTIONS, METADATA, tuned
from jitkern.kernel.tuning import TuningSpace
from jitkern.layouts.kernel_layouts import DeclarationError
from jitkern.layouts.specialisation import constexpr_names

CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # what a triton.Config sets beside constexprs


@dataclass(frozen=True)
class Adopted:
    """What a class's ``kernel`` holds: the ``@triton.jit`` function inside, the autotuner's
    configs (constexprs and launch options by name) and key, and the heuristics."""

    function: Any
    configs: tuple[dict[str, Any], ...] = ()
    key: tuple[str, ...] = ()
    heuristics: tuple[tuple[str, Callable[[dict], Any]], ...] = ()


def adopt(owner: str, kernel: Any) -> Adopted:
    """Unwrap ``kernel`` (a class's ``kernel`` attribute); ``DeclarationError`` for what cannot be adopted."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    configs: tuple[dict[str, Any], ...] = ()
    key: tuple[str, ...] = ()
    heuristics: list[tuple[str, Callable]] = []
    while not _jit_function(kernel):
        if isinstance(kernel, Autotuner):
            if configs:
                raise DeclarationError(f"{owner}.kernel: triton.autotune twice; one autotuner names every config")
            _refuse_hooks(owner, kernel)
            configs, key = _configs(owner, kernel.configs), tuple(kernel.keys)
        elif isinstance(kernel, Heuristics):
            heuristics += list(kernel.values.items())  # the outer wrapper's first, as Triton applies them
        else:
            raise DeclarationError(f"{owner}.kernel must be a @triton.jit function (or one wrapped in triton.autotune "
                                   f"or triton.heuristics), got {type(kernel).__name__}")
        kernel = kernel.fn
    return Adopted(kernel, configs, key, tuple(heuristics))


def _jit_function(kernel: Any) -> bool:
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return True
    if settings.interpreting():  # imported only then: 10 ms of a serving process's start otherwise
        from triton.runtime.interpreter import InterpretedFunction

        return isinstance(kernel, InterpretedFunction)
    return False


def _refuse_hooks(owner: str, autotuner: Any) -> None:
    unadoptable = [("pre_hook", autotuner.user_defined_pre_hook), ("post_hook", autotuner.user_defined_post_hook),
                   ("reset_to_zero", autotuner.reset_to_zero), ("restore_value", autotuner.restore_value),
                   ("prune_configs_by", autotuner.early_config_prune or autotuner.perf_model),
                   ("pre_hook of a Config", any(config.pre_hook for config in autotuner.configs)),
                   ("ir_override of a Config", any(getattr(c, "ir_override", None) for c in autotuner.configs))]
    for feature, used in unadoptable:
        if used:
            raise DeclarationError(f"{owner}.kernel: triton.autotune's {feature} cannot be adopted: jitkern picks "
                                   "configs from a table tuned ahead of serving and runs no code around a launch; "
                                   "drop it, or declare a TuningSpace")


def _configs(owner: str, configs: list[Any]) -> tuple[dict[str, Any], ...]:
    """Each ``triton.Config`` as a dict: its constexprs, then the launch options it sets.
    ``num_ctas`` left at Triton's 1 by every config is not one (a launch takes 1 anyway,
    and vLLM's tuning files, which never name it, can then be read in)."""
    options = [name for name in CONFIG_OPTIONS if any(getattr(config, name) is not None for config in configs)
               and not (name == "num_ctas" and all(config.num_ctas == 1 for config in configs))]
    made = tuple({**config.kwargs, **{name: getattr(config, name) for name in options
                                      if getattr(config, name) is not None}} for config in configs)
    if any(list(config) != list(made[0]) for config in made):
        raise DeclarationError(f"{owner}.kernel: triton.autotune's configs set different names "
                               f"({', '.join(sorted({name for config in made for name in config}))}); each must set "
                               "the same constexprs and launch options")
    return made


def adopt_autotuner(cls: type, adopted: Adopted) -> None:
    """Give ``cls`` the tuning space of its autotuner: its ``CompileKey`` with a ``tuned()``
    field per name the configs set, and ``tuning`` with the configs as candidates (and the
    class's own ``tuning`` selectors, default and inputs, when it declares them)."""
    at = cls.__qualname__
    declared = cls.__dict__.get("tuning")
    if declared is not None and declared.configs:
        raise DeclarationError(f"{at}.tuning: configs come from its triton.autotune; declare only by, default "
                               "and inputs")
    key_class = cls.__dict__.get("CompileKey")
    if key_class is None or not dataclasses.is_dataclass(key_class) or not key_class.__dataclass_params__.frozen:
        raise DeclarationError(f"{at}: an autotuned kernel declares a frozen CompileKey dataclass (the fields "
                               "besides the tuned ones; it may have none)")
    fields = {field.name: field.metadata.get(METADATA) for field in dataclasses.fields(key_class)}
    constants = {declared_field.constexpr or declared_field.option for declared_field in fields.values()
                 if declared_field is not None}
    names = list(adopted.configs[0])
    clash = sorted((set(names) & (constants | set(fields))))
    if clash:
        raise DeclarationError(f"{at}.CompileKey: {clash} are tuned by its triton.autotune configs; leave them out")
    selectors = set(declared.by) if declared is not None else set()
    for name in adopted.key:
        if name not in selectors and name not in fields and name not in constants:
            raise DeclarationError(f"{at}: triton.autotune key {name!r} is neither a field of CompileKey nor a "
                                   "selector of its tuning space: declare it, bucketing its values "
                                   f"(tuning = TuningSpace(by=dict({name}=computed(...))))")
    add_tuned_fields(cls, adopted.configs)
    cls.tuning = dataclasses.replace(declared or TuningSpace(), configs=adopted.configs)


def add_tuned_fields(cls: type, configs: Any) -> None:
    """Give ``cls.CompileKey`` a ``tuned()`` field per name the configs set and the key lacks
    (a launch option, else a constexpr of that name), typed as the first config's value: a
    tuning space's fields declared once, by its candidates."""
    key_class = cls.CompileKey
    example = configs[0] if configs and isinstance(configs[0], Mapping) else {}
    fields = {field.name for field in dataclasses.fields(key_class)}
    made = [(name, type(value), tuned(option=name) if name in LAUNCH_OPTIONS else tuned(constexpr=name))
            for name, value in example.items() if name not in fields]
    if not made:
        return
    kernel = getattr(cls, "kernel", None)
    if kernel is not None:
        constexprs = constexpr_names(kernel)
        unknown = [name for name, _, _ in made if name not in LAUNCH_OPTIONS and name not in constexprs]
        if unknown:
            raise DeclarationError(f"{cls.__qualname__}.tuning: its configs set {unknown}, neither fields of CompileKey, "
                                   f"constexprs of {kernel.__name__} ({', '.join(sorted(constexprs)) or 'none'}) "
                                   "nor launch options")
    tuned_key = dataclasses.make_dataclass(key_class.__name__, made, bases=(key_class,), frozen=True, kw_only=True)
    tuned_key.__qualname__, tuned_key.__module__ = key_class.__qualname__, key_class.__module__
    cls.CompileKey = tuned_key


def check_heuristics(cls: type, heuristics: tuple[tuple[str, Callable], ...], constants: set[str]) -> None:
    """Each heuristic names a constexpr of the kernel that nothing else gives."""
    for name, _function in heuristics:
        if name in constants:
            raise DeclarationError(f"{cls.__qualname__}: triton.heuristics sets {name!r}, which its key gives too")
        if name not in cls.kernel.arg_names:
            raise DeclarationError(f"{cls.__qualname__}: triton.heuristics sets {name!r}, not a parameter of "
                                   f"{cls.kernel.__name__}")


def heuristic_constants(kernel: Any, heuristics: tuple[tuple[str, Callable], ...], key: Any,
                        constants: dict[str, Any]) -> dict[str, Any]:
    """``constants`` with each heuristic's value, computed from the key's fields and constants
    by name (a heuristic sees what names a binary, not a launch's arguments)."""
    values = {field.name: getattr(key, field.name) for field in dataclasses.fields(key)} | constants
    constants = dict(constants)
    for name, function in heuristics:
        try:
            values[name] = constants[name] = function(values)
        except KeyError as missing:
            raise TypeError(f"{kernel.name}: triton.heuristics value {name!r} reads {missing}, neither a field of "
                            "its CompileKey nor one of its constants: declare it in the key") from None
    return constants
