"""Settling a kernel's Triton cache key, so that warmup and serving look up the same one."""

from __future__ import annotations

from typing import Any


def settle_cache_key(jit_function: Any) -> None:
    """Make the Triton cache key of ``jit_function`` independent of what was hashed before.

    Triton 3.6 adds to a kernel's hash the ``constexpr`` globals its helpers use, but reads
    a helper's list of them before hashing it: a helper not hashed yet (by another kernel)
    contributes none. So the key of a kernel depended on the order in which a process
    hashed kernels, and a serving process could look up another key than warmup built
    (Step5's decode kernel did, after verify was hashed first). Hashing the ``@triton.jit``
    functions a kernel calls before their callers, each once, gives every caller its
    helpers' globals, whatever was hashed before. A function settled with one kernel
    keeps its key for the next; one hashed in another order before is hashed again.
    """
    if not hasattr(type(jit_function), "cache_key"):  # on the class: the property would hash it
        return  # the interpreter's functions have no cache key
    for function in _callees_first(jit_function):
        if function.hash is None or function.hash != getattr(function, "_jitkern_settled_key", None):
            function.hash = None
            function.cache_key  # noqa: B018 - hashes it, its callees' globals complete
            function._jitkern_settled_key = function.hash


def _callees_first(jit_function: Any) -> list[Any]:
    """``jit_function`` and the ``@triton.jit`` functions it calls, transitively (by the
    global and closure names its code reads, as Triton's hash finds them; Triton's own
    functions aside: their globals hold no constexprs of ours), each after its callees."""
    ordered: list[Any] = []
    seen: set[int] = set()

    def visit(function: Any) -> None:
        seen.add(id(function))
        for callee in _callees(function):
            if id(callee) not in seen:
                visit(callee)
        ordered.append(function)

    visit(jit_function)
    return ordered


def _callees(jit_function: Any) -> list[Any]:
    code = jit_function.fn.__code__
    closure = dict(zip(code.co_freevars, (cell.cell_contents for cell in jit_function.fn.__closure__ or ())))
    found = []
    for name in code.co_names + code.co_freevars:
        value = closure[name] if name in closure else jit_function.__globals__.get(name)
        if hasattr(value, "used_global_vals") and hasattr(value, "fn") \
                and not getattr(value, "__module__", "").startswith("triton."):
            found.append(value)
    return found
