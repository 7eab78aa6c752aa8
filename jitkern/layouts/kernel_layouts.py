"""One kernel's layouts: its stand-ins, the binary a launch needs, the binaries a domain needs.

Every ``TritonJitKernel`` has one ``KernelLayouts`` (``kernel.layouts``), which the
manifest, the build, the guard and the test helpers ask; the kernel class itself only
declares.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Iterable

from jitkern.layouts.binary_key import BinaryKey, key_fields, key_name
from jitkern.layouts.domains import MAX_LAYOUTS, LayoutDomain, TooManyLayouts, argument_domains, enumerate_layouts
from jitkern.layouts.domains import name_stand_ins, origins
from jitkern.layouts.misses import explain_miss, explain_unwarmed_key
from jitkern.layouts.specialisation import (
    LARGE,
    int_classes,
    layout_text,
    parse_layout,
    runtime_params,
    specialisation,
    specialising_backend,
    stand_ins_for,
)
from jitkern.layouts.stand_ins import TritonWarmupTensor
from jitkern.layouts.values import ValueDomain


class DeclarationError(TypeError):
    """A kernel's declaration that cannot work; one line naming class, attribute and value."""


class WarmupMismatch(RuntimeError):
    """``warmup_inputs(key)`` produced a launch whose key is not ``key``, or stand-ins that
    Triton specialises otherwise than their layout says."""


class KernelLayouts:
    """The layouts of one ``TritonJitKernel``'s launches, derived from its stand-ins."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self._stand_ins: dict[tuple, tuple[dict[str, Any], dict[str, str]]] = {}  # (key, backend) -> kwargs, texts
        self.declared: dict[str, list[ValueDomain]] = {}
        """The value domains the deployment loaded in this process declares (``load()``), by the
        stride (``z.0``) or integer argument they name: a launch outside them is named so."""

    def stand_ins(self, key: Any) -> tuple[dict[str, Any], dict[str, str]]:
        """The runtime arguments of ``warmup_inputs(key)`` (its tensors named after their
        ``__call__`` arguments) and Triton's specialisation of them. ``WarmupMismatch``
        when they dispatch to another key."""
        memo = (key, specialising_backend())
        found = self._stand_ins.get(memo)
        if found is None:
            kernel = self.kernel
            inputs = kernel.warmup_inputs(key)
            spec = kernel.spec_for(key, **name_stand_ins(inputs))
            if spec.key != key:
                differ = [f"{name} {getattr(key, name)!r} -> {getattr(spec.key, name)!r}" for name in key_fields(key)
                          if getattr(key, name) != getattr(spec.key, name)]
                tensors = [f"{name} {value.dtype} {tuple(value.shape)}" for name, value in inputs.items()
                           if isinstance(value, TritonWarmupTensor)]
                raise WarmupMismatch(f"{kernel.name}: warmup_inputs({key_name(key)}) dispatches to "
                                     f"{key_name(spec.key)} ({', '.join(differ)}; the stand-ins: "
                                     f"{', '.join(tensors) or 'no tensors'}): declare stand-ins of the key's sizes "
                                     "(stand_ins), or hold in the key the size a computed field reads (size_of)")
            if not self._stand_ins:
                _check_plain_annotations(kernel, inputs)
                _check_pinned_strides(kernel, spec.kwargs)
            found = self._stand_ins[memo] = (spec.kwargs, specialisation(kernel.kernel, spec.kwargs))
        return found

    def stand_in_kwargs(self, binary: BinaryKey) -> dict[str, Any]:
        """Runtime arguments of ``binary``'s key that Triton specialises as its layout says."""
        kwargs, _ = self.stand_ins(binary.key)
        try:
            return stand_ins_for(self.kernel.kernel, kwargs, parse_layout(binary.layout))
        except ValueError as error:
            raise WarmupMismatch(f"{self.kernel.name}: {error}") from None

    def binary_key(self, spec: Any) -> BinaryKey:
        """The binary a launch (a ``LaunchSpec``) needs: its key, and how its arguments
        differ from the key's stand-ins."""
        _, base = self.stand_ins(spec.key)
        launched = specialisation(self.kernel.kernel, spec.kwargs)
        return BinaryKey(spec.key, layout_text({n: text for n, text in launched.items() if text != base.get(n)}))

    def binary_keys(self, keys: list[Any], domain: LayoutDomain = LayoutDomain()) -> list[BinaryKey]:
        """Every binary the ``keys`` need for launches inside ``domain``, as Triton specialises them."""
        binaries = []
        for key in keys:
            kwargs, base = self.stand_ins(key)
            domains = argument_domains(self.kernel, kwargs, base, domain)
            if math.prod(len(choices) for choices in domains.values()) > MAX_LAYOUTS:
                raise TooManyLayouts(f"{self.kernel.name}: this layout domain gives more than {MAX_LAYOUTS} binaries "
                                     "of one key; declare fewer strided or unaligned tensors, or mark arguments "
                                     "do_not_specialize")
            binaries += [BinaryKey(key, text) for text in enumerate_layouts(domains, base)]
        return list(dict.fromkeys(binaries))

    def seen(self, binary: BinaryKey, spec: Any) -> dict[str, Any]:
        """What a launch (a ``LaunchSpec`` of ``binary``) passed where its layout differs from
        the key's stand-ins, as a layout domain names it: ``{"unaligned": [tensors],
        "values": {"z.0": 608, "n_tokens": 1, "z": 8}}`` (what the guard records; ``z``: the
        bytes past 16 at which the unaligned tensor started)."""
        found = origins(self.stand_ins(binary.key)[0])
        unaligned, values = [], {}
        for name, text in parse_layout(binary.layout).items():
            if text.startswith("*") and name in found.tensors:
                unaligned.append(found.tensors[name])
                if hasattr(spec.kwargs.get(name), "data_ptr") and (offset := spec.kwargs[name].data_ptr() % 16):
                    values[found.tensors[name]] = offset
            elif not text.startswith("*") and isinstance(spec.kwargs.get(name), int):
                tensor_dim = found.strides.get(name)
                values[f"{tensor_dim[0]}.{tensor_dim[1]}" if tensor_dim else name] = spec.kwargs[name]
        return {"unaligned": unaligned, "values": values}

    def takes_every_class(self, key: Any, name: str, domain: LayoutDomain) -> bool:
        """Whether a stride (``z.0``) or integer argument of ``key`` takes every class Triton
        gives integers inside ``domain`` ("any": a value of it adds nothing to the domain)."""
        kwargs, base = self.stand_ins(key)
        strides = {f"{tensor}.{dim}": argument for argument, (tensor, dim) in origins(kwargs).strides.items()}
        argument = strides.get(name, name)
        param = next((param for param in runtime_params(self.kernel.kernel) if param.name == argument), None)
        if param is None or argument not in base:
            return False
        choices = argument_domains(self.kernel, kwargs, base, domain)[argument]
        return set(int_classes(param, self.kernel.large_ints)) <= set(choices)

    def usual_value(self, key: Any, name: str) -> int | None:
        """The stand-ins' value of a stride (``z.0``) or integer argument of ``key``."""
        kwargs = self.stand_ins(key)[0]
        strides = {f"{tensor}.{dim}": argument for argument, (tensor, dim) in origins(kwargs).strides.items()}
        value = kwargs.get(strides.get(name, name))
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def reasons(self, binary: BinaryKey, domain: LayoutDomain) -> dict[str, str]:
        """Why each runtime argument whose class the binary's layout names differs from its
        key's stand-ins: the declaration of ``domain`` that made it, in words."""
        kwargs, _ = self.stand_ins(binary.key)
        return {name: self._reason(name, kwargs, domain) for name in parse_layout(binary.layout)}

    def factors(self, key: Any, domain: LayoutDomain) -> dict[str, int]:
        """How many classes each argument of ``key`` takes inside ``domain`` (those that take
        more than one): their product is the number of binaries of the key."""
        kwargs, base = self.stand_ins(key)
        found = argument_domains(self.kernel, kwargs, base, domain)
        return {self._reason(name, kwargs, domain): len(choices) for name, choices in found.items() if len(choices) > 1}

    def _reason(self, name: str, kwargs: dict[str, Any], domain: LayoutDomain) -> str:
        found = origins(kwargs)
        if name in found.tensors:
            tensor = found.tensors[name]
            offsets = domain.offsets(tensor)
            return f"{tensor} unaligned" if offsets is None else f"{tensor} starts {offsets.describe()} past 16"
        if name in found.strides:
            tensor, dim = found.strides[name]
            values = domain.stride_values(tensor, dim) or domain.values.get(name)
            if values is not None:
                return f"{tensor}.{dim} in {values.describe()}"
            return f"{tensor}.{dim} strided" if domain.allows_any_stride(tensor, dim) else \
                f"{tensor}.{dim} varies with its sizes"
        if name in domain.values:
            return f"{name} in {domain.values[name].describe()}"
        return f"{name} any value"

    def tensor_dims(self, key: Any) -> dict[str, int]:
        """The tensors a layout domain may name (``__call__`` arguments), with their dimensions."""
        kwargs, _ = self.stand_ins(key)
        return {value.name: value.ndim for value in kwargs.values()
                if isinstance(value, TritonWarmupTensor) and value.name}

    def check_layout(self, binary: BinaryKey, domain: LayoutDomain = LayoutDomain(),
                     large_storage: bool = False) -> BinaryKey:
        """``binary`` with its layout in canonical form; ValueError if no launch inside
        ``domain`` has it (a pointer to storage over 2 GiB only where ``large_storage``)."""
        kwargs, base = self.stand_ins(binary.key)
        layout = parse_layout(binary.layout)
        unknown = sorted(layout.keys() - base.keys())
        if unknown:
            raise ValueError(f"{unknown} not among the runtime arguments of {self.kernel.name}: {', '.join(base)}")
        domains = argument_domains(self.kernel, kwargs, base, domain)
        for name, text in layout.items():
            possible = domains[name]
            if large_storage and possible[0].startswith("*"):
                possible += tuple(pointer + LARGE for pointer in possible)
            if text not in possible:  # Triton never specialises a launch so, or no launch inside domain is
                argument = origins(kwargs).describe(name)
                large = " (storage over 2 GiB: for targets that specialise on it, AMD's, alone)" \
                    if text.startswith("*") and text.endswith(LARGE) and not large_storage else ""
                raise ValueError(f"{name}{f' ({argument})' if argument != name else ''}: no launch of this key "
                                 f"specialises as {text!r}{large}, only as {' or '.join(map(repr, possible))}")
        canonical = {name: layout[name] for name in base if name in layout and layout[name] != base[name]}
        return BinaryKey(binary.key, layout_text(canonical))

    def explain_miss(self, binary: BinaryKey, warmed_layouts: list[str]) -> str:
        """Why ``binary`` is none of the ``warmed_layouts`` of its key, argument by argument."""
        kwargs, base = self.stand_ins(binary.key)
        full = lambda layout: {**base, **parse_layout(layout)}  # noqa: E731
        return explain_miss(full(binary.layout), [full(layout) for layout in warmed_layouts], origins(kwargs))

    def declare(self, domains: Iterable[LayoutDomain]) -> None:
        """The value domains of the deployment this process loaded (``load()``), replacing those
        of any load before: a launch outside them is named so."""
        declared: dict[str, list[ValueDomain]] = {}
        for domain in domains:
            for name, values in domain.values.items():
                if values not in declared.setdefault(name, []):
                    declared[name].append(values)
        self.declared = declared

    def outside(self, spec: Any) -> list[str]:
        """Each stride, integer or tensor start of a launch (a ``LaunchSpec``) outside every
        value domain declared for it, in words: ``z.0: stride 608 outside the declared [600]``."""
        found = origins(self.stand_ins(spec.key)[0])
        words = []
        for argument, value in spec.kwargs.items():
            tensor = found.tensors.get(argument)
            if tensor in self.declared and hasattr(value, "data_ptr"):
                offset = value.data_ptr() % 16
                if not any(offset in domain for domain in self.declared[tensor]):
                    words.append(f"{tensor}: starts {offset} bytes past 16, outside the declared "
                                 f"{' or '.join(domain.describe() for domain in self.declared[tensor])}")
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            name, what = argument, "value"
            if argument in found.strides:
                tensor, dim = found.strides[argument]
                name, what = (f"{tensor}.{dim}", "stride") if f"{tensor}.{dim}" in self.declared else (argument, "stride")
            domains = self.declared.get(name)
            if domains and not any(value in domain for domain in domains):
                words.append(f"{name}: {what} {value} outside the declared "
                             f"{' or '.join(domain.describe() for domain in domains)}")
        return words

    def explain(self, binary: BinaryKey, warmed: Iterable[BinaryKey]) -> str:
        """Why ``binary`` is none of the ``warmed`` binaries: the argument that differs from
        its key's warmed layouts, else the key fields that differ from the nearest warmed key."""
        warmed = list(warmed)
        layouts = [other.layout for other in warmed if other.key == binary.key]
        if layouts:
            return self.explain_miss(binary, layouts)
        return explain_unwarmed_key(binary.key, dict.fromkeys(other.key for other in warmed))


_PLAIN = {"bool": bool, "int": int, "float": float}


def _check_plain_annotations(kernel: Any, inputs: dict[str, Any]) -> None:
    """Each plain argument (a bool, an int, a float) of the stand-ins is annotated in
    ``__call__`` with a type it is of: the coverage checker draws the annotated type, as
    real calls pass it (a float's binary is not an int's)."""
    parameters = inspect.signature(type(kernel).__call__).parameters
    kernel_name = getattr(kernel, "name", type(kernel).__qualname__)
    for name, value in inputs.items():
        if type(value) not in (bool, int, float) or name not in parameters:
            continue
        annotation = parameters[name].annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        if annotation is inspect.Parameter.empty:
            raise DeclarationError(f"{kernel_name}: __call__'s {name} has no annotation: annotate the type real "
                                   f"calls pass (bool, int or float); its stand-in is {value!r}")
        if text not in _PLAIN or (_PLAIN[text] is not float and type(value) is not _PLAIN[text]):
            raise DeclarationError(f"{kernel_name}: __call__'s {name} is annotated {text or annotation!r}, and its "
                                   f"stand-in is the {type(value).__name__} {value!r}: annotate bool, int or float, "
                                   "the type real calls pass")


def _check_pinned_strides(kernel: Any, kwargs: dict[str, Any]) -> None:
    """A stride ``pinned_by_key`` names is one ``fixed_strides`` fixes: else a layout domain
    could vary it, while the key says it has one value."""
    strides = origins(kwargs).strides
    for name in sorted(getattr(kernel, "pinned_by_key", ())):
        if name in strides:
            tensor, dim = strides[name]
            if not {tensor, f"{tensor}.{dim}"} & set(kernel.fixed_strides):
                raise DeclarationError(f"{kernel.name}.pinned_by_key: {name!r} is {tensor}.stride({dim}), which "
                                       f"fixed_strides does not fix: add {tensor}.{dim!s} to fixed_strides (the "
                                       "public function refusing other strides), or do not pin it")


class NoLayouts:
    """The layouts of a kernel with no runtime arguments to lay out (a ``JitKernel`` that is
    not a Triton kernel): one binary per key."""

    def binary_keys(self, keys: list[Any], domain: LayoutDomain = LayoutDomain()) -> list[BinaryKey]:
        return [BinaryKey(key) for key in keys]

    def seen(self, binary: BinaryKey, spec: Any) -> dict[str, Any]:
        return {"unaligned": [], "values": {}}

    def takes_every_class(self, key: Any, name: str, domain: LayoutDomain) -> bool:
        return False

    def usual_value(self, key: Any, name: str) -> int | None:
        return None

    def reasons(self, binary: BinaryKey, domain: LayoutDomain) -> dict[str, str]:
        return {}

    def factors(self, key: Any, domain: LayoutDomain) -> dict[str, int]:
        return {}

    def tensor_dims(self, key: Any) -> dict[str, int]:
        return {}

    def check_layout(self, binary: BinaryKey, domain: LayoutDomain = LayoutDomain(),
                     large_storage: bool = False) -> BinaryKey:
        if binary.layout:
            raise ValueError("it has no runtime arguments to lay out")
        return binary


NO_LAYOUTS = NoLayouts()
