"""Settling a kernel's Triton cache key, so that warmup and serving look up the same one."""

from __future__ import annotations

from typing import Any


def settle_cache_key(jit_function: Any) -> None:
    """Make the Triton cache key of ``jit_function`` independent of what was hashed before.

    Triton 3.6 adds to a kernel's hash the ``constexpr`` globals its helpers use, but reads
    a helper's list of them before hashing it: a helper not hashed yet (by another kernel)
    contributes none. So the key of a kernel depended on the order in which a process
    hashed kernels, and a serving process could look up another key than warmup built
    (Step5's decode kernel did, after verify was hashed first). Hashing again from the
    helpers up until the key no longer changes gives the key with every helper's globals,
    whatever the order. A helper settled with one kernel keeps its key for the next.
    """
    if not hasattr(jit_function, "cache_key") or not hasattr(jit_function, "used_global_vals"):
        return  # the interpreter's functions have no cache key
    functions = _jit_helpers(jit_function)
    helpers_settled = all(function.hash is not None and function.hash == getattr(function, "_jitkern_settled_key", None)
                          for function in functions if function is not jit_function)
    previous, key = None, jit_function.cache_key  # with every helper settled, the first key is final
    while key != previous and not helpers_settled:
        for function in functions:
            if function.hash != getattr(function, "_jitkern_settled_key", None):  # a settled key is final
                function.hash = None
        previous, key = key, jit_function.cache_key
    for function in functions:
        function._jitkern_settled_key = function.hash


def _jit_helpers(jit_function: Any) -> list[Any]:
    """``jit_function`` and the ``@triton.jit`` functions its module globals reach, transitively
    (Triton's own functions aside: their globals hold no constexprs of ours)."""
    found, pending = {id(jit_function): jit_function}, [jit_function]
    while pending:
        for value in list(pending.pop().__globals__.values()):
            if hasattr(value, "used_global_vals") and hasattr(value, "__globals__") and id(value) not in found \
                    and not getattr(value, "__module__", "").startswith("triton."):
                found[id(value)] = value
                pending.append(value)
    return list(found.values())
