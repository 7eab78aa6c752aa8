"""A launch's layout: how Triton specialises its runtime arguments, derived from Triton.

Triton compiles one binary per specialisation of a kernel's runtime (non-constexpr)
arguments: a tensor's dtype and whether its address is a multiple of 16; an integer's
type (i32 / i64 / u64 by range) and whether it equals 1 or is a multiple of 16. A
kernel's ``CompileKey`` names what the kernel decides (block sizes, dtypes, launch
options). The rest is the *layout*, which jitkern derives here by asking Triton's own
specialiser (``native_specialize_impl``, the function Triton's binder calls), so no
kernel mirrors Triton's rules by hand.

A binary is a ``BinaryKey``: the kernel's key plus its layout, written as the runtime
arguments whose specialisation differs from the key's stand-ins (``warmup_inputs``), e.g.
``"Z:*bf16 z_stride0:i32"`` (``Z`` not 16-byte aligned, ``z_stride0`` not a multiple of
16). The empty layout is the stand-ins' own.

A deployment declares its layout domain in terms of the kernel's tensors (``Layout``):
which may start at any element offset (``unaligned``) and whose strides vary
(``strided``). ``enumerate_layouts`` turns a domain into every layout a launch inside it
can have; ``stand_ins_for`` builds arguments that Triton specialises exactly as a layout
says, and checks it with Triton's specialiser.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from jitkern.warmup_inputs import TracedStride, TritonWarmupTensor

if TYPE_CHECKING:
    from jitkern.kernel import TritonJitKernel

I32_LIMIT = 2**31


@dataclass(frozen=True)
class BinaryKey:
    """One binary of a kernel: its ``CompileKey`` and the layout of its runtime arguments."""

    key: Any
    layout: str = ""


def key_name(key: Any) -> str:
    """A stable, readable name of a key: ``head_size=1024,block_size=4`` (a binary key's
    layout last, when it has one: ``...,layout=Z:*bf16``)."""
    return ",".join(f"{name}={value}" for name, value in key_fields(key).items())


def key_fields(key: Any) -> dict[str, Any]:
    """The key as plain JSON-friendly values (dtypes become their names); a binary key's
    fields are its compile key's, and ``layout`` when it is not the stand-ins' own."""
    if isinstance(key, BinaryKey):
        return {**key_fields(key.key), **({"layout": key.layout} if key.layout else {})}
    return {f.name: _plain(getattr(key, f.name)) for f in dataclasses.fields(key)}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


@dataclass(frozen=True)
class Layout:
    """Which launch layouts a deployment passes, by the kernel's tensor argument names.

    ``unaligned``: tensors that may start at any element offset (a slice of a wider
    tensor, a pad), not only at a multiple of 16 bytes. ``strided``: tensors whose
    strides take any value (``"z"``), or one dimension's stride (``"z.0"``); the others
    are laid out as the kernel's stand-ins are (contiguous, unless the kernel says so).
    """

    unaligned: frozenset[str] = frozenset()
    strided: frozenset[str] = frozenset()

    def allows_unaligned(self, tensor: str) -> bool:
        return tensor in self.unaligned

    def allows_any_stride(self, tensor: str, dim: int) -> bool:
        return tensor in self.strided or f"{tensor}.{dim}" in self.strided


# --- Triton's specialisation, as text ---------------------------------------------------


def runtime_params(jit_function: Any) -> list[Any]:
    """The ``KernelParam`` of each non-constexpr argument (built from the signature for the
    interpreter's functions, which keep no params)."""
    params = getattr(jit_function, "params", None)
    if params is None:
        from triton.runtime.jit import KernelParam

        options = getattr(jit_function, "kwargs", {})
        dns = options.get("do_not_specialize") or ()
        dns_oa = options.get("do_not_specialize_on_alignment") or ()
        params = [
            KernelParam(i, p, i in dns or p.name in dns, i in dns_oa or p.name in dns_oa)
            for i, p in enumerate(inspect.signature(jit_function.fn).parameters.values())
        ]
    return [param for param in params if not param.is_constexpr]


def specialisation(jit_function: Any, kwargs: dict[str, Any]) -> dict[str, str]:
    """Runtime argument name -> Triton's specialisation of its value, as text:
    ``*bf16/16`` (a bf16 tensor at a multiple of 16), ``*bf16`` (elsewhere), ``i32/16``,
    ``i32``, ``i64/16``, ``1`` (the constexpr 1), ``fp32``, ``u1``..."""
    from triton._C.libtriton import native_specialize_impl

    backend = specialising_backend()
    ranged = marks_pointer_range(backend)
    texts = {}
    for param in runtime_params(jit_function):
        if param.name not in kwargs:
            continue
        kind, key = native_specialize_impl(backend, kwargs[param.name], param.is_const,
                                           not param.do_not_specialize, not param.do_not_specialize_on_alignment)
        if isinstance(kind, tuple):
            raise TypeError(f"{jit_function.__name__}: runtime argument {param.name} is a tuple; Triton specialises "
                            "each of its items (alignment, integer class), which a layout cannot name: pass them as "
                            "parameters of their own")
        texts[param.name] = _text(kind, key, ranged)
    return texts


def _text(kind: Any, key: Any, ranged: bool = False) -> str:
    """Triton's (type, key) as text. Key letters: ``D`` a multiple of 16 (``/16``); on a
    backend that marks pointers whose storage spans at most 2 GiB (``S``: AMD, for its
    buffer loads, ``ranged``), a pointer without the mark reads ``/large``. So a launch
    within 2 GiB reads the same on every backend."""
    if kind == "constexpr":
        return repr(key)
    letters = key if isinstance(key, str) else ""
    text = f"{kind}/16" if "D" in letters else str(kind)
    if ranged and text.startswith("*") and "S" not in letters:
        text += LARGE
    return text


LARGE = "/large"
"""A pointer whose storage spans more than 2 GiB, on a backend that specialises on it."""


def marks_pointer_range(backend: Any) -> bool:
    """Whether ``backend`` marks a pointer whose storage spans at most 2 GiB (Triton's AMD
    backend does while ``knobs.amd.use_buffer_ops`` is on): asked of Triton's specialiser."""
    from triton._C.libtriton import native_specialize_impl

    if getattr(backend, "supports_native_tensor_specialization", True):
        return False
    _kind, key = native_specialize_impl(backend, _SMALL_PROBE, False, True, True)
    return isinstance(key, str) and "S" in key


_SMALL_PROBE = TritonWarmupTensor(torch.uint8, (16,))


def specialising_backend() -> Any:
    """The backend class whose rules Triton applies: the active target's, else NVIDIA's
    (``BaseBackend``'s native rules), e.g. under the interpreter."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.driver import driver

    try:
        target = driver.active.get_current_target()
    except Exception:  # the interpreter, or no GPU and no compile-only driver
        return BaseBackend
    return backend_of(target)


@functools.cache
def backend_of(target: Any) -> Any:
    """The compiler class Triton picks for ``target`` (Triton's ``backends`` are keyed by
    package, ``nvidia`` and ``amd``, not by the target's ``cuda`` and ``hip``)."""
    from triton.backends import backends
    from triton.backends.compiler import BaseBackend

    for backend in backends.values():
        if backend.compiler.supports_target(target):
            return backend.compiler
    return BaseBackend


def layout_text(differences: dict[str, str]) -> str:
    return " ".join(f"{name}:{text}" for name, text in differences.items())


def parse_layout(text: str) -> dict[str, str]:
    """``"Z:*bf16 n:i32"`` -> ``{"Z": "*bf16", "n": "i32"}``; a ValueError names a bad part."""
    parsed = {}
    for part in text.split():
        name, colon, value = part.partition(":")
        if not colon or not name.isidentifier() or not value:
            raise ValueError(f"layout {text!r}: {part!r} is not ARGUMENT:SPECIALISATION (e.g. Z:*bf16)")
        parsed[name] = value
    return parsed


# --- the classes a domain allows, and stand-ins of each -----------------------------------

_INT_CLASSES = ("1", "i32/16", "i32")
_LARGE_INT_CLASSES = ("i64/16", "i64")


def int_classes(param: Any, large: bool) -> tuple[str, ...]:
    """The specialisations an integer argument takes over all values (below 2**31 unless
    ``large``): ``do_not_specialize`` leaves only the type; ``do_not_specialize_on_alignment``
    the type and 1 (Triton's specialiser then never marks a multiple of 16)."""
    if param.do_not_specialize:
        return ("i32", "i64") if large else ("i32",)
    if param.do_not_specialize_on_alignment:
        return ("1", "i32", "i64") if large else ("1", "i32")
    return _INT_CLASSES + (_LARGE_INT_CLASSES if large else ())


def representative(text: str, like: Any) -> Any:
    """A value Triton specialises as ``text``; a tensor stands in for a tensor ``like``."""
    if text.startswith("*"):
        return TritonWarmupTensor(like.dtype, like.shape, like.stride(), aligned="/16" in text, name=like.name,
                                  varying=like.varying, storage_bytes=I32_LIMIT if text.endswith(LARGE) else None)
    kind, _, divisible = text.partition("/")
    if kind == "1":
        return 1
    base = {"i32": 0, "i64": 2**32, "u64": 2**63}.get(kind)
    if base is None:
        return like  # floats and bools: not specialised by value
    return base + (16 if divisible else 17)


def stand_ins_for(jit_function: Any, kwargs: dict[str, Any], layout: dict[str, str]) -> dict[str, Any]:
    """``kwargs`` with each argument ``layout`` names replaced by a value of that
    specialisation (and traced strides by plain ints, as a real launch passes)."""
    unknown = layout.keys() - {p.name for p in runtime_params(jit_function)}
    if unknown:
        raise ValueError(f"layout names {sorted(unknown)}, not runtime arguments of {jit_function.__name__}")
    return {name: representative(layout[name], value) if name in layout else
            int(value) if isinstance(value, TracedStride) else value for name, value in kwargs.items()}


# --- tracing which tensor an argument comes from -------------------------------------------


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


def argument_domains(kernel: "TritonJitKernel", kwargs: dict[str, Any], base: dict[str, str],
                     layout: Layout) -> dict[str, tuple[str, ...]]:
    """Each runtime argument's possible specialisations in ``layout``, from a key's stand-in
    ``kwargs`` (``base`` is Triton's specialisation of them).

    A tensor's address: aligned, or also not where ``layout.unaligned`` says (unless Triton is told
    not to specialise it: ``do_not_specialize`` or ``..._on_alignment``). A stride of
    a tensor ``layout.strided`` names, or one that varies with the tensor's sizes (see
    ``TritonWarmupTensor.varying``): any integer; else as its stand-in. Any other integer
    (a size, a value ``__call__`` computes): any integer, unless the kernel lists it in
    ``pinned_by_key`` (its value is a function of the key).
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
            movable = (tensor is not None and layout.allows_unaligned(tensor)
                       and not (param.do_not_specialize or param.do_not_specialize_on_alignment))
            unaligned = text.replace("/16", "")
            aligned = unaligned.replace(LARGE, "/16" + LARGE) if unaligned.endswith(LARGE) else unaligned + "/16"
            domains[param.name] = (aligned, unaligned) if movable else (text,)
        elif isinstance(value, bool) or not isinstance(value, int):
            domains[param.name] = (text,)
        elif param.name in found.strides:
            tensor, dim = found.strides[param.name]
            varies = tensor not in stand_ins or stand_ins[tensor].stride_varies(dim)
            domains[param.name] = (int_classes(param, kernel.large_ints)
                                   if varies or layout.allows_any_stride(tensor, dim) else (text,))
        elif param.name in kernel.pinned_by_key:
            domains[param.name] = (text,)
        else:
            domains[param.name] = int_classes(param, kernel.large_ints)
    return domains


def enumerate_layouts(domains: dict[str, tuple[str, ...]], base: dict[str, str]) -> list[str]:
    """Every layout text the argument domains allow, the base (``""``) first."""
    names = list(domains)
    layouts = []
    for combination in itertools.product(*(domains[name] for name in names)):
        differences = {name: text for name, text in zip(names, combination) if text != base[name]}
        layouts.append(layout_text(differences))
    return list(dict.fromkeys(layouts))


# --- explaining a miss -----------------------------------------------------------------


def explain_miss(launched: dict[str, str], warmed: list[dict[str, str]], origins: ArgumentOrigins) -> str:
    """Why a launch's specialisation (argument -> text) is none of the ``warmed`` ones:
    each argument whose specialisation no warmed binary has, e.g. ``z: not 16-byte
    aligned; warmed binaries all assume 16-byte aligned``."""
    reasons = []
    for name, text in launched.items():
        seen = list(dict.fromkeys(binary[name] for binary in warmed if name in binary))
        if seen and text not in seen:
            warmed_words = f"all assume {_words(seen[0])}" if len(seen) == 1 else \
                f"cover {' / '.join(_words(other) for other in seen)}"
            reasons.append(f"{origins.describe(name)}: {_words(text)}; warmed binaries {warmed_words}")
    if reasons:
        return "; ".join(reasons)
    if launched in warmed:
        return ("its binary was warmed, but not where Triton looked it up: on another device than the one it was "
                "loaded on, or with other constants (a setting constants(key) reads changed since)")
    differing = layout_text({name: text for name, text in launched.items()
                             if any(binary.get(name) != text for binary in warmed)})
    return f"each argument's layout was warmed, but not together: {differing}"


def _words(text: str) -> str:
    if text.startswith("*"):
        kind = text[1:].removesuffix(LARGE).removesuffix("/16")
        storage = ", its storage over 2 GiB" if text.endswith(LARGE) else ""
        return f"a {kind} tensor {'16-byte aligned' if '/16' in text else 'not 16-byte aligned'}{storage}"
    if text == "1":
        return "equal to 1"
    kind, _, divisible = text.partition("/")
    if kind in ("i32", "i64", "u64"):
        return f"{kind} {'a multiple of 16' if divisible else 'not a multiple of 16 (or not specialised)'}"
    return text
