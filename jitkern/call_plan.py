"""Public calls remembered per input signature: validation and launch building paid once.

A kernel's public function checks its inputs (dtypes, shapes, strides, devices, plain
values) and then builds a ``LaunchSpec``. Neither reads tensor values, so both give the
same answer for every call whose inputs have the same **signature**: each tensor's
class, dtype, device, shape, strides and autograd state; each int, bool, str, None or
dict of them by type and value; each float by type alone (its value goes to the kernel
as it is). ``public_call`` runs the function in full for a signature it has seen less
than twice, then records the launches it made as a **plan** (up to 64 a function, the
last used first; a function that made 1024 plans makes no more, as its signatures do not
repeat enough for plans to pay). A plan checks the signature with torch's own C++
tensor guards (``TensorGuards``, what ``torch.compile`` checks its graphs' inputs with:
60-70 ns a tensor, a fifth of reading the attributes in Python) and
launches its binaries straight from the arguments, through each direct launch's
``launch_guarded``: it still checks on every launch what the signature does not hold,
such as each pointer's alignment.

So the same bad inputs raise the same errors (a call that raised records nothing), and
nothing reads device memory. A call is never recorded, and always runs in full, when an
argument is of another kind (a list, a float subclass), when two arguments are the same
tensor or float (a plan could not tell which one a launch took), when a tensor is not on
a GPU (value checks run on every CPU call), when a launch had no direct launch, when a launch
holds a tensor or float that is not an argument itself (a view made inside, a float
computed from one), or when the function returns a tensor it made. The contract: the
function's checks and its launchers read only what the signature holds (not tensor
values, not addresses: alignment is the kernel's layout, checked per launch).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch
from torch._C._dynamo.guards import TensorGuards

from jitkern import settings

_TENSOR = torch.Tensor
_PLAIN = frozenset({int, bool, str, type(None)})
PLANS_PER_CALL = 64  # signatures planned per public function and argument names, last used first
PLANS_MADE_AT_MOST = 1024  # then a public function plans no more: its signatures do not repeat enough
SEEN_SIGNATURES = 1024  # signatures called once, remembered to plan their second call
_MISS, _REFUSED = object(), object()
_FIRST_PLANNED_DEVICE = 0  # CPU tensors (-1) are never planned; tests of the plans on a CPU lower it


def input_signature(values: tuple) -> tuple | None:
    """What the checks can see of ``values`` (see the module's docstring); None when a value
    is of a kind left out, or a tensor is not on a GPU."""
    parts = []
    append = parts.append
    for value in values:
        kind = type(value)
        if isinstance(value, _TENSOR):
            device = value.get_device()
            if device < _FIRST_PLANNED_DEVICE:
                return None
            append((kind, value.dtype, device, value.shape, value.stride(), value.requires_grad))
        elif kind in _PLAIN:
            append((kind, value))
        elif kind is float:
            append(float)
        elif kind is dict and all(type(item) in _PLAIN for item in value.values()):
            append((dict, tuple(value.items())))
        else:
            return None
    return tuple(parts)


class _Recording(threading.local):
    """The launches of the public call this thread is recording (``kernel_launcher`` appends)."""

    launches: list | None = None


_recording = _Recording()
_tables: list[dict] = []  # every public function's plans (public functions live as long as their module)


def forget_plans() -> None:
    """Drop every plan (a kernel's binaries changed)."""
    for table in _tables:
        table.clear()


def public_call(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a kernel's public function: a signature called twice is planned (see above)."""
    plans: dict[Any, list] = {}  # argument names -> plans, last used first
    seen: dict[tuple, None] = {}
    _tables.append(plans)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            values, names = args + tuple(kwargs.values()), (len(args), *kwargs)
        else:
            values, names = args, len(args)
        planned = plans.get(names, ())
        for i, plan in enumerate(planned):
            result = plan(values)
            if result is not _MISS:
                if result is _REFUSED:  # its binary refused (another alignment, a hook set): in full, as planned
                    return function(*args, **kwargs)
                if i:
                    planned.insert(0, planned.pop(i))
                return result
        if _recording.launches is not None:  # inside another public call: it records
            return function(*args, **kwargs)
        _recording.launches = launches = []
        try:
            result = function(*args, **kwargs)
        finally:
            _recording.launches = None
        if settings.settings.direct_launch and made[0] < PLANS_MADE_AT_MOST:
            made[0] += _remember(plans, seen, names, values, launches, result)
        return result

    made = [0]  # plans this function made, evicted ones included
    call.plans = plans
    return call


def _remember(plans: dict, seen: dict, names: Any, values: tuple, launches: list, result: Any) -> bool:
    """Plan this signature if it is the second time it was called in full; whether it did."""
    signature = input_signature(values)
    if signature is None:
        return False
    if (names, signature) not in seen:
        if len(seen) >= SEEN_SIGNATURES:
            seen.clear()
        seen[(names, signature)] = None
        return False
    plan = _plan(values, launches, result)
    if plan is None:
        return False
    planned = plans.setdefault(names, [])
    planned.insert(0, plan)
    del planned[PLANS_PER_CALL:]
    return True


def _plan(values: tuple, launches: list, result: Any) -> Callable[[tuple], Any] | None:
    """Code that checks a call's signature and repeats the recorded launches with its
    arguments (``_MISS`` for another signature), or None when the call cannot be repeated
    that way. Each launch goes through its binary's direct launch. When the first refuses
    (a pointer of another alignment), the code returns ``_REFUSED`` and the call runs in
    full; a later one that refuses takes its kernel's own path, so that each launch
    happens exactly once."""
    arguments = [f"v{i}" for i in range(len(values))]
    by_identity = {id(value): arguments[i] for i, value in enumerate(values)
                   if isinstance(value, _TENSOR) or type(value) is float}
    if len(by_identity) < sum(isinstance(value, _TENSOR) or type(value) is float for value in values):
        return None  # an argument passed twice: another call's launches could not tell which it meant
    returned = "None" if result is None else by_identity.get(id(result))
    if returned is None:
        return None  # a tensor made inside (an output allocated per call)
    tensors = [(name, value) for name, value in zip(arguments, values) if isinstance(value, _TENSOR)]
    namespace: dict[str, Any] = {
        "MISS": _MISS, "REFUSED": _REFUSED, "LaunchSpec": launches[0][1].__class__ if launches else None,
        "GUARDS": TensorGuards(*(value for _, value in tensors),
                               dynamic_dims_sizes=[list(value.shape) for _, value in tensors],
                               dynamic_dims_strides=[list(value.stride()) for _, value in tensors]),
    }
    checks = [f"GUARDS.check({', '.join(name for name, _ in tensors)})"]
    for i, (name, value) in enumerate(zip(arguments, values)):
        if type(value) is float:
            checks.append(f"type({name}) is float")
        elif type(value) in _PLAIN or type(value) is dict:
            namespace[f"PLAIN{i}"] = value
            checks.append(f"type({name}) is {type(value).__name__ if value is not None else 'NONE'}"
                          f" and {name} == PLAIN{i}")
    namespace["NONE"] = type(None)
    lines = ["def repeat(values):",
             f"    if len(values) != {len(values)}:",
             "        return MISS",
             f"    {''.join(f'{name}, ' for name in arguments)}= values",
             f"    if not ({' and '.join(checks)}):",
             "        return MISS"]
    for n, (kernel, spec) in enumerate(launches):
        direct = kernel.direct_launch(spec)
        if direct is None:
            return None
        if set(direct.arg_names) != spec.kwargs.keys():
            return None
        items = []  # the launch's runtime arguments, in the direct launch's order
        for name in direct.arg_names:
            value = spec.kwargs[name]
            if isinstance(value, _TENSOR) or type(value) is float:
                if id(value) not in by_identity:
                    return None
                items.append(by_identity[id(value)])
            elif type(value) in _PLAIN:
                items.append(repr(value))
            else:
                return None
        namespace.update({f"LAUNCH{n}": direct.launch_guarded, f"GRID{n}": tuple(spec.grid), f"KERNEL{n}": kernel,
                          f"KEY{n}": spec.key, f"NAMES{n}": direct.arg_names})
        lines += [f"    if not LAUNCH{n}(GRID{n}, {', '.join(items)}):",
                  "        return REFUSED" if n == 0 else
                  f"        KERNEL{n}.launch(LaunchSpec(GRID{n}, dict(zip(NAMES{n}, ({', '.join(items)},))), KEY{n}))"]
    lines.append(f"    return {returned}")
    exec(compile("\n".join(lines), "<public call plan>", "exec"), namespace)
    return namespace["repeat"]
