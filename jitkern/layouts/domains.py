"""Layout domains: which layouts a deployment passes, and every binary they need.

A deployment declares its layout domain in terms of the kernel's tensors
(``LayoutDomain``): which may start at any element offset (``unaligned``), whose strides
vary (``strided``), and the values strides, integers and start offsets take (``values``).
``argument_domains`` gives each runtime argument's possible
specialisations inside a domain, ``enumerate_layouts`` every layout they combine to.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from jitkern.layouts.specialisation import LARGE, int_classes, int_text, layout_text, runtime_params
from jitkern.layouts.values import ValueDomain
from jitkern.layouts.stand_ins import TracedStride, TritonWarmupTensor

MAX_LAYOUTS = 1024  # binaries of one compile key a layout domain may give


class TooManyLayouts(ValueError):
    """A layout domain would give more binaries of one key than ``MAX_LAYOUTS``."""


@dataclass(frozen=True)
class LayoutDomain:
    """Which launch layouts a deployment passes, by the kernel's tensor argument names.

    ``unaligned``: tensors that may start at any element offset (a slice of a wider
    tensor, a pad), not only at a multiple of 16 bytes. ``strided``: tensors whose
    strides take any value (``"z"``), or one dimension's stride (``"z.0"``); the others
    are laid out as the kernel's stand-ins are (contiguous, unless the kernel says so).
    """

    unaligned: frozenset[str] = frozenset()
    strided: frozenset[str] = frozenset()
    values: dict[str, ValueDomain] = field(default_factory=dict)
    """Integers whose values a deployment names: a stride (``"z.0"``), a runtime integer
    argument of the kernel (``"n_tokens"``), or where a tensor starts (``"z"``: bytes past
    a 16-byte boundary, 0 to 15), each a ``ValueDomain``."""

    def allows_unaligned(self, tensor: str) -> bool:
        return tensor in self.unaligned

    def allows_any_stride(self, tensor: str, dim: int) -> bool:
        return tensor in self.strided or f"{tensor}.{dim}" in self.strided

    def stride_values(self, tensor: str, dim: int) -> ValueDomain | None:
        return self.values.get(f"{tensor}.{dim}")

    def offsets(self, tensor: str) -> ValueDomain | None:
        """The byte offsets past a 16-byte boundary at which ``tensor`` starts, where declared."""
        return self.values.get(tensor)


def name_stand_ins(inputs: dict[str, Any]) -> dict[str, Any]:
    """Name each stand-in tensor of ``inputs`` after its argument, so that the runtime
    arguments ``__call__`` derives from it (its address, its strides) can be traced."""
    return {name: value.named(name) if isinstance(value, TritonWarmupTensor) else value
            for name, value in inputs.items()}


@dataclass(frozen=True)
class ArgumentOrigins:
    """Where a key's runtime arguments come from: a tensor's address, a tensor's stride,
    or elsewhere (sizes and values ``__call__`` computes)."""

    tensors: dict[str, str]  # pointer argument -> tensor argument of __call__
    strides: dict[str, tuple[str, int]]  # integer argument -> (tensor, dim)

    def describe(self, argument: str) -> str:
        """``z`` for the pointer of tensor z, ``z.stride(0)`` for its stride, else the argument."""
        if argument in self.tensors:
            return self.tensors[argument]
        if argument in self.strides:
            tensor, dim = self.strides[argument]
            return f"{tensor}.stride({dim})"
        return argument


def origins(kwargs: dict[str, Any]) -> ArgumentOrigins:
    tensors, strides = {}, {}
    for name, value in kwargs.items():
        if isinstance(value, TritonWarmupTensor) and value.name:
            tensors[name] = value.name
        elif isinstance(value, TracedStride):
            strides[name] = (value.tensor, value.dim)
    return ArgumentOrigins(tensors, strides)


def argument_domains(kernel: Any, kwargs: dict[str, Any], base: dict[str, str],
                     layout: LayoutDomain) -> dict[str, tuple[str, ...]]:
    """Each runtime argument's possible specialisations in ``layout``, from a key's stand-in
    ``kwargs`` (``base`` is Triton's specialisation of them); ``kernel`` is the
    ``TritonJitKernel`` (its ``kernel``, ``large_ints`` and ``pinned_by_key``).

    A tensor's address: aligned, or also not where ``layout.unaligned`` says, or as the
    offsets ``layout.values`` declares for it start (unless Triton is told not to
    specialise it: ``do_not_specialize`` or ``..._on_alignment``). A stride of
    a tensor ``layout.strided`` names, or one that varies with the tensor's sizes (see
    ``TritonWarmupTensor.varying``): any integer; else as its stand-in. Any other integer
    (a size, a value ``__call__`` computes): any integer, unless the kernel lists it in
    ``pinned_by_key`` (its value is a function of the key). A stride (``"z.0"``) or an
    integer argument ``layout.values`` names: the classes of its declared values (a stride's
    with the class it takes at a dimension of size 1: see ``_classes``).
    """
    found = origins(kwargs)
    stand_ins = {value.name: value for value in kwargs.values() if isinstance(value, TritonWarmupTensor)}
    domains = {}
    for param in runtime_params(kernel.kernel):
        if param.name not in base:
            continue
        text, value = base[param.name], kwargs[param.name]
        if text.startswith("*"):
            tensor = found.tensors.get(param.name)
            offsets = layout.offsets(tensor) if tensor is not None else None
            movable = (tensor is not None and (layout.allows_unaligned(tensor) or offsets is not None)
                       and not (param.do_not_specialize or param.do_not_specialize_on_alignment))
            unaligned = text.replace("/16", "")
            aligned = unaligned.replace(LARGE, "/16" + LARGE) if unaligned.endswith(LARGE) else unaligned + "/16"
            if not movable:
                domains[param.name] = (text,)
            elif offsets is not None:  # 16-byte aligned where an offset is a multiple of 16
                starts = {offset % 16 == 0 for offset in offsets.witnesses(False)}
                domains[param.name] = tuple(text for text, is_aligned in ((aligned, True), (unaligned, False))
                                            if is_aligned in starts)
            else:
                domains[param.name] = (aligned, unaligned)
        elif isinstance(value, bool) or not isinstance(value, int):
            domains[param.name] = (text,)
        elif param.name in found.strides:
            tensor, dim = found.strides[param.name]
            varies = tensor not in stand_ins or stand_ins[tensor].stride_varies(dim)
            values = layout.stride_values(tensor, dim) or layout.values.get(param.name)
            every = int_classes(param, kernel.large_ints)
            grown = every  # the classes a stride that varies with the sizes takes
            if tensor in stand_ins and stand_ins[tensor].stride_of_sixteens(dim):
                grown = tuple(dict.fromkeys(int_text(param, 16 * n) for n in (1, *([2**28] if kernel.large_ints else ()))))
            domains[param.name] = (_classes(param, values, kernel.large_ints, also=grown if varies else (text,))
                                   if values else every if layout.allows_any_stride(tensor, dim)
                                   else grown if varies else (text,))
        elif param.name in kernel.pinned_by_key:
            domains[param.name] = (text,)
        elif param.name in layout.values:
            domains[param.name] = _classes(param, layout.values[param.name], kernel.large_ints)
        else:
            domains[param.name] = int_classes(param, kernel.large_ints)
    return domains


def _classes(param: Any, values: ValueDomain, large: bool, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The classes Triton gives the values of ``values``, and ``also``, in ``int_classes``' order.

    A stride's ``also`` is the class a launch passes where the dimension has size 1 (or the
    tensor no elements): ``launch_stride`` then gives the kernel's usual stride, whatever
    the tensor's own, in the declared values or not (a one-token batch whose rows are a
    slice of a 600-wide projection has stride 600 yet launches with the stand-in's). That
    is the stand-in's class, or any class where the stride varies with the sizes (the
    dense stride of later dimensions that vary)."""
    found = {int_text(param, value) for value in values.witnesses(large)} | set(also)
    return tuple(text for text in int_classes(param, True) if text in found)


def enumerate_layouts(domains: dict[str, tuple[str, ...]], base: dict[str, str]) -> list[str]:
    """Every layout text the argument domains allow, the base (``""``) first."""
    names = list(domains)
    layouts = []
    for combination in itertools.product(*(domains[name] for name in names)):
        differences = {name: text for name, text in zip(names, combination) if text != base[name]}
        layouts.append(layout_text(differences))
    return list(dict.fromkeys(layouts))
