"""What Triton's CPU interpreter computes wrongly, refused under ``TRITON_INTERPRET=1``."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch


def jit_callees(function: Any) -> list[Any]:
    """The Python functions of the ``@triton.jit`` functions ``function`` calls by a global
    name (Triton's own left out)."""
    callees = (function.__globals__.get(name) for name in function.__code__.co_names)
    return [callee.fn for callee in callees
            if callable(getattr(callee, "fn", None)) and not getattr(callee, "__module__", "").startswith("triton")]


def calls_dot(function: Any, seen: set | None = None) -> bool:
    """Whether ``function`` or a ``@triton.jit`` function it calls (by a global name) calls ``dot``."""
    seen = seen if seen is not None else set()
    seen.add(function)
    if "dot" in function.__code__.co_names:
        return True
    return any(calls_dot(callee, seen) for callee in jit_callees(function) if callee not in seen)


def refusing_bf16_dots(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` that refuses, under Triton's interpreter, a launch with a bf16 tensor of a
    kernel calling ``tl.dot``: the interpreter computes a bf16 ``tl.dot`` wrongly, with no
    error (triton-lang/triton#11584; results about 1e10 off)."""

    @functools.wraps(launch)
    def checked(self, spec):
        bf16 = [name for name, value in spec.kwargs.items() if getattr(value, "dtype", None) is torch.bfloat16]
        if bf16:
            raise InterpreterCannotRun(f"{self.name}: Triton's interpreter computes a bf16 tl.dot wrongly "
                                       f"(triton-lang/triton#11584), and {bf16[0]} is bf16: test it in fp16 here, "
                                       "or in bf16 on a GPU")
        return launch(self, spec)

    return checked


class InterpreterCannotRun(RuntimeError):
    """A launch Triton's CPU interpreter would compute wrongly, refused."""
