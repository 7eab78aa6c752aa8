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
a GPU (value checks run on every CPU call), when a launch had no direct launch, when a
launch or step (below) takes a tensor or float that is neither an argument nor an earlier
step's result (a view made inside, a float computed from one) or a value other than an
int, bool, str, None, dtype, device or tuple of ints, or when the function returns a
tensor made otherwise. The contract: the function's checks, its launchers and the values
its steps take read only what the signature holds (not tensor values, not addresses:
alignment is the kernel's layout, checked per launch).

Torch work a call needs besides its launches (allocating its output, filling it with -1)
goes through ``torch_step(fn, *args, **kwargs)``: a plan repeats each step, in the order
recorded among the launches, with the call's own tensors in place of the recorded ones,
and may return a step's result (a fresh output per call). Torch work done otherwise does
not happen in a planned call: a launch or result that takes its tensor keeps the call
unplanned, and an in-place change it makes would be lost.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import torch
from torch._C._dynamo.guards import TensorGuards

from jitkern import settings
from jitkern.launch import ops
from jitkern.launch.direct import generated_code

_TENSOR = torch.Tensor
_PLAIN = frozenset({int, bool, str, type(None)})
_CONSTANT = frozenset({torch.dtype, torch.device})  # a plan holds these (and tuples of ints) as recorded
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


class Recording(threading.local):
    """The launches (``kernel_launcher`` appends them) and torch steps, in order, of the
    public call this thread is recording (``launches`` is None when none is)."""

    launches: list | None = None


class TorchStep(NamedTuple):
    """A recorded ``torch_step``: what it called, with what, and what it returned."""

    function: Callable[..., Any]
    args: tuple
    kwargs: dict
    result: Any


recording = Recording()
_tables: list[dict] = []  # every public function's plans (public functions live as long as their module)
_in_full = [0]  # every_call_in_full blocks open: no plan is made


def forget_plans() -> None:
    """Drop every plan (a kernel's binaries changed)."""
    for table in _tables:
        table.clear()


@contextlib.contextmanager
def every_call_in_full() -> Iterator[None]:
    """Inside the block each public call runs in full, through its kernels' ``launch``: every
    plan is forgotten first and none is made (``jitkern.testing.record_launches``, whose
    record a plan's launches, straight from their binaries, would pass by)."""
    forget_plans()
    _in_full[0] += 1
    try:
        yield
    finally:
        _in_full[0] -= 1


def torch_step(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``: torch work of a public call (``torch.empty`` of its
    output, ``torch.Tensor.fill_``) that its plan repeats with the call's own tensors.
    ``function`` must not hold per-call values itself (not a tensor's bound method)."""
    result = function(*args, **kwargs)
    if recording.launches is not None:
        recording.launches.append(TorchStep(function, args, kwargs, result))
    return result


def public_call(function: Callable[..., Any] | None = None, *, op: str | None = None, mutates: Iterable[str] = (),
                returns: str | None = None) -> Callable[..., Any]:
    """Decorate a kernel's public function: a signature called twice is planned (see above).

    With ``op="namespace::name"`` it is also the torch op ``torch.ops.namespace.name``
    (``jitkern.launch.ops``), which ``torch.compile`` takes its calls as: ``mutates`` names
    the tensors it writes in place, ``returns`` the one of them it returns (``out``), if any.
    ``function.op_call`` is what Dynamo traces in its place: the op's call.
    """
    if function is None:
        return functools.partial(public_call, op=op, mutates=mutates, returns=returns)
    plans: dict[Any, list] = {}  # argument names -> plans, last used first
    seen: dict[tuple, None] = {}
    _tables.append(plans)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            values, names = args + tuple(kwargs.values()), (len(args), *kwargs)
        else:
            values, names = args, len(args)
        planned = plans.get(names)
        if planned:
            result = planned[0](values)  # the plan used last: most calls repeat it
            if result is _MISS and len(planned) > 1:
                result = _another_plan(planned, values)
            if result is not _MISS:
                if result is _REFUSED:  # its binary refused (another alignment, a hook set): in full, as planned
                    return function(*args, **kwargs)
                return result
        if recording.launches is not None:  # inside another public call: it records
            return function(*args, **kwargs)
        recording.launches = launches = []
        try:
            result = function(*args, **kwargs)
        finally:
            recording.launches = None
        if settings.settings.direct_launch and not _in_full[0] and made[0] < PLANS_MADE_AT_MOST:
            made[0] += _remember(plans, seen, names, values, launches, result)
        return result

    made = [0]  # plans this function made, evicted ones included
    call.plans = plans
    if op is not None:  # Dynamo traces the op's call in place of this function
        call.op_call = call._torchdynamo_inline = ops.register(function, call, op, tuple(mutates), returns)
    return call


def _another_plan(planned: list, values: tuple) -> Any:
    """What the first of ``planned``'s other plans that takes ``values`` returned, that plan
    moved first (unless its binary refused), or ``_MISS``."""
    for i in range(1, len(planned)):
        result = planned[i](values)
        if result is not _MISS:
            if result is not _REFUSED:
                planned.insert(0, planned.pop(i))
            return result
    return _MISS


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


def _plan(values: tuple, recorded: list, result: Any) -> Callable[[tuple], Any] | None:
    """Code that checks a call's signature and repeats the recorded steps and launches with
    its arguments (``_MISS`` for another signature), or None when the call cannot be
    repeated that way. Each launch goes through its binary's direct launch. When the first
    thing recorded is a launch that refuses (a pointer of another alignment), the code
    returns ``_REFUSED`` and the call runs in full; a launch that refuses later takes its
    kernel's own path, so that each step and launch happens exactly once."""
    arguments = [f"v{i}" for i in range(len(values))]
    by_identity = {id(value): arguments[i] for i, value in enumerate(values)
                   if isinstance(value, _TENSOR) or type(value) is float}
    if len(by_identity) < sum(isinstance(value, _TENSOR) or type(value) is float for value in values):
        return None  # an argument passed twice: another call's launches could not tell which it meant
    tensors = [(name, value) for name, value in zip(arguments, values) if isinstance(value, _TENSOR)]
    namespace: dict[str, Any] = {
        "MISS": _MISS, "REFUSED": _REFUSED, "LaunchSpec": None, "NONE": type(None),
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
    lines = ["def repeat(values):",
             f"    if len(values) != {len(values)}:",
             "        return MISS",
             f"    {''.join(f'{name}, ' for name in arguments)}= values",
             f"    if not ({' and '.join(checks)}):",
             "        return MISS"]
    for n, entry in enumerate(recorded):
        if type(entry) is TorchStep:
            line = _step_line(n, entry, by_identity, namespace)
            if line is None:
                return None
            lines.append(line)
            if isinstance(entry.result, _TENSOR) or type(entry.result) is float:
                by_identity[id(entry.result)] = f"s{n}"
            continue
        kernel, spec, launched = entry
        direct = kernel.binaries.direct_launch(spec, launched) if launched is not None else None
        if direct is None or set(direct.arg_names) != spec.kwargs.keys():
            return None
        items = [_source(spec.kwargs[name], by_identity, namespace) for name in direct.arg_names]
        if None in items:
            return None
        namespace.update({f"LAUNCH{n}": direct.launch_guarded, f"GRID{n}": tuple(spec.grid), f"KERNEL{n}": kernel,
                          f"KEY{n}": spec.key, f"NAMES{n}": direct.arg_names, "LaunchSpec": type(spec)})
        lines += [f"    if not LAUNCH{n}(GRID{n}, {', '.join(items)}):",
                  "        return REFUSED" if n == 0 else
                  f"        KERNEL{n}.launch(LaunchSpec(GRID{n}, dict(zip(NAMES{n}, ({', '.join(items)},))), KEY{n}))"]
    returned = "None" if result is None else by_identity.get(id(result))
    if returned is None:
        return None  # a tensor made outside a step
    lines.append(f"    return {returned}")
    exec(generated_code("\n".join(lines), "<public call plan>"), namespace)  # plans of one shape share their code
    return namespace["repeat"]


def _step_line(n: int, step: TorchStep, by_identity: dict, namespace: dict) -> str | None:
    """The plan's line repeating ``step``, its result named ``s{n}``; None when it cannot."""
    if isinstance(getattr(step.function, "__self__", None), _TENSOR):
        return None  # a tensor's bound method: the recorded tensor itself
    items = [_source(value, by_identity, namespace) for value in (*step.args, *step.kwargs.values())]
    if None in items:
        return None
    items[len(step.args):] = [f"{name}={item}" for name, item in zip(step.kwargs, items[len(step.args):])]
    namespace[f"STEP{n}"] = step.function
    return f"    s{n} = STEP{n}({', '.join(items)})"


def _source(value: Any, by_identity: dict, namespace: dict) -> str | None:
    """How a plan writes a recorded launch's or step's argument: the call's argument or the
    earlier step's result it is (a tensor, a float), or the constant it is; None for
    anything else (a tensor made otherwise, a float computed inside, another kind)."""
    if isinstance(value, _TENSOR) or type(value) is float:
        return by_identity.get(id(value))
    if type(value) in _PLAIN:
        return repr(value)
    if type(value) in _CONSTANT or type(value) in (tuple, torch.Size) and all(type(item) is int for item in value):
        name = f"CONSTANT{len(namespace)}"
        namespace[name] = value
        return name
    return None
