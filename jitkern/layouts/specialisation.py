"""A launch's layout: how Triton specialises its runtime arguments, derived from Triton.

Triton compiles one binary per specialisation of a kernel's runtime (non-constexpr)
arguments: a tensor's dtype and whether its address is a multiple of 16; an integer's
type (i32 / i64 / u64 by range) and whether it equals 1 or is a multiple of 16. A
kernel's ``CompileKey`` names what the kernel decides (block sizes, dtypes, launch
options). The rest is the *layout*, which jitkern derives here by asking Triton's own
specialiser (``native_specialize_impl``, the function Triton's binder calls), so no
kernel mirrors Triton's rules by hand.

A layout is written as the runtime arguments whose specialisation differs from the key's
stand-ins (``warmup_inputs``), e.g. ``"Z:*bf16 z_stride0:i32"`` (``Z`` not 16-byte
aligned, ``z_stride0`` not a multiple of 16). The empty layout is the stand-ins' own.
``stand_ins_for`` builds arguments that Triton specialises exactly as a layout says.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from jitkern.layouts.stand_ins import TracedStride, TritonWarmupTensor

I32_LIMIT = 2**31


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


def constexpr_names(jit_function: Any) -> set[str]:
    """The names of the kernel's ``tl.constexpr`` parameters."""
    return set(inspect.signature(jit_function.fn).parameters) - {param.name for param in runtime_params(jit_function)}


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


def int_text(param: Any, value: int) -> str:
    """Triton's specialisation of ``value`` passed for the integer parameter ``param``."""
    from triton._C.libtriton import native_specialize_impl

    kind, key = native_specialize_impl(specialising_backend(), value, param.is_const, not param.do_not_specialize,
                                       not param.do_not_specialize_on_alignment)
    return _text(kind, key)


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


def triton_lookup_key(jit_function: Any, kwargs: dict[str, Any]) -> str:
    """The key under which Triton looks up, in this process, the binary of a launch of
    ``jit_function`` with ``kwargs`` (runtime arguments and constants): its binder's
    specialisation and options, as ``JITFunction.run`` computes them."""
    import triton
    from triton.runtime.driver import driver
    from triton.runtime.jit import compute_cache_key

    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", jit_function.debug) or triton.knobs.runtime.debug
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    _kernels, key_cache, _target, _backend, binder = jit_function.device_caches[driver.active.get_current_device()]
    _bound, specialization, options = binder(**kwargs)
    return compute_cache_key(key_cache, specialization, options)
