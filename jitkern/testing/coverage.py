"""The coverage checker: launches drawn from a layout domain all hit a warmed binary.

``check_coverage(kernel, config, layout)`` draws launches with hypothesis from what a
deployment declares, and asserts at Triton's level, for each one, that the binary
Triton would look up is one that warming ``config`` inside ``layout`` builds. It
checks jitkern's derivation of layouts against Triton itself, for any kernel.

A drawn launch is a set of stand-in tensors (``TritonWarmupTensor``): Triton's binder
reads a tensor's dtype and address and nothing else, so stand-ins reach every address,
stride and size (2**31 elements too) with no memory behind them. For every key of the
config, each tensor of the key's stand-ins is drawn on its own:

- its address at any element offset where the layout lists it as ``unaligned``, at one
  of its declared start offsets past a multiple of 16 bytes where the layout gives its
  ``values`` (``"z": [8]``), else at any multiple of 16 bytes;
- its strides, where the layout lists them as ``strided``, from 0, 1, 15, 16, 17, odd,
  even and up to 2**31 - 1 (beyond where the kernel declares ``large_ints``); else
  contiguous if its stand-in is, or as its stand-in. A dimension of size 1 takes any
  stride, unless the kernel lists it in ``fixed_strides``: it addresses one element
  whatever the stride, ``torch.Tensor.is_contiguous`` ignores it (a one-row slice of a
  wider tensor is contiguous), and ops such as a transpose leave any value there, so a
  public function lets it by (``jitkern.launch_stride`` is how a launcher passes it);
- the size of every dimension its stand-in declares ``varying``: 0, 1, 15, 16, 17,
  others, up to the kernel's ``size_limit``, and up to 2**31 - 1 elements in all
  (beyond with ``large_ints``).

A plain argument is passed as the key's ``warmup_inputs`` gives it (its value may name
the key), unless ``__call__`` annotates it ``bool``, ``int`` or ``float`` and the stand-in
is of another type: a real call passes that type (an int stand-in of a float ``alpha``
specialises as ``i32``, a real call's float as ``fp32``), so values of that type are drawn.

A drawn launch whose key is not the one drawn (a size the key depends on), or whose sizes
do not fit together (``__call__`` raises), is dropped.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from jitkern.kernel.base import TritonJitKernel
from jitkern.launch.spec import LaunchSpec
from jitkern.layouts.binary_key import BinaryKey
from jitkern.layouts.domains import LayoutDomain
from jitkern.layouts.kernel_layouts import WarmupMismatch
from jitkern.layouts.specialisation import I32_LIMIT, triton_lookup_key
from jitkern.layouts.values import ValueDomain
from jitkern.layouts.stand_ins import TritonWarmupTensor, contiguous_strides
from jitkern.targets import compile_only, parse_target

_BOUNDARY_SIZES = [0, 1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1000, 4096, I32_LIMIT - 1, I32_LIMIT - 16]
_BOUNDARY_STRIDES = [0, 1, 2, 3, 15, 16, 17, 256, 257, 768, 4095, 4096, I32_LIMIT - 1, I32_LIMIT - 16]
_LARGE = [I32_LIMIT, I32_LIMIT + 16, 2**33 + 1, 2**40]


class DrawnTensor(TritonWarmupTensor):
    """A stand-in at a given address."""

    def __init__(self, dtype: torch.dtype, shape, strides, address: int):
        super().__init__(dtype, shape, strides)
        self.address = address

    def data_ptr(self) -> int:
        return self.address

    def __repr__(self) -> str:
        return f"DrawnTensor({self.dtype}, shape={tuple(self.shape)}, strides={self.stride()}, address={self.address})"


@dataclass(frozen=True)
class _TensorPlan:
    """How to draw one tensor argument of a key's launch."""

    stand_in: TritonWarmupTensor
    varying_dims: tuple[int, ...]
    strided_dims: tuple[int, ...]
    fixed_dims: tuple[int, ...]
    any_offset: bool
    contiguous: bool
    valued_dims: tuple[tuple[int, ValueDomain], ...] = ()  # dimensions whose strides the layout names values of
    offsets: ValueDomain | None = None  # the bytes past 16 it starts at, where the layout names them


@dataclass(frozen=True)
class _PlainPlan:
    """A plain argument whose stand-in is not of the type ``__call__`` takes: draw that type."""

    takes: type


def check_coverage(kernel: TritonJitKernel, config: dict[str, Any] | None = None, layout: LayoutDomain | dict = LayoutDomain(),
                   *, keys: list[Any] | None = None, warmed: list[BinaryKey] | None = None, target: str = "cuda:90",
                   max_examples: int = 100) -> int:
    """Assert that every launch drawn from ``layout`` (a ``LayoutDomain`` or a manifest's
    ``{"unaligned": [...], "strided": [...]}``) for the keys of ``config`` (or ``keys``)
    looks up a binary that warming them builds (or that warming the binary keys
    ``warmed`` builds, e.g. a manifest's). Compiles nothing: a binary warmup builds is
    named by the key Triton's binder gives its stand-ins. Returns how many launches
    were checked."""
    from hypothesis import HealthCheck, Phase, assume, given, reject, settings
    from hypothesis.errors import Unsatisfiable
    from hypothesis import strategies as st

    layout = layout if isinstance(layout, LayoutDomain) else _domain(layout)
    semantic = list(keys) if keys is not None else kernel.get_warmup_keys(**(config or {}))
    binaries = kernel.layouts.binary_keys(semantic, layout) if warmed is None else list(warmed)
    checked = []
    with compile_only(parse_target(target)):
        lookup_keys = {warmed_lookup_key(kernel, binary) for binary in binaries}
        plans = [(key, _plan(kernel, key, layout)) for key in semantic]

        # No explain phase: the miss names its argument and value already, and explaining
        # re-runs the shrunk launch hundreds of times (most of a failing check's time).
        @settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), phases=set(Phase) - {Phase.explain})
        @given(st.data())
        def a_drawn_launch_hits_a_warmed_binary(data):
            key, plan = data.draw(st.sampled_from(plans), label="key")
            inputs = {name: _draw(data, name, part, kernel) for name, part in plan.items()}
            try:
                spec = kernel.spec_for(key, **inputs)  # a tuned key as the candidate it is
            except Exception:  # sizes that do not fit together, which the public function refuses
                reject()
            assume(spec.key == key)
            assume(all(spec.kwargs[name] in domain for name, domain in layout.values.items()
                       if isinstance(spec.kwargs.get(name), int)))
            checked.append(1)
            if triton_lookup_key(kernel.kernel, kernel.triton_kwargs(spec)) not in lookup_keys:
                binary = kernel.layouts.binary_key(spec)
                layouts = [warm.layout for warm in binaries if warm.key == key]
                raise AssertionError(f"{kernel.describe(binary)} misses every warmed binary: "
                                     f"{kernel.layouts.explain_miss(binary, layouts)}")

        try:
            a_drawn_launch_hits_a_warmed_binary()
        except Unsatisfiable:
            raise AssertionError(
                f"{kernel.name}: no launch drawn from the layout domain fits it (values of "
                f"{', '.join(layout.values) or 'nothing'}): a value no drawn size gives (the stand-in dimension "
                "__call__ reads it from does not vary: declare it in the Tensor's varying), or sizes the public "
                "function refuses") from None
    return len(checked)


def _domain(document: dict) -> LayoutDomain:
    """A manifest's ``{"unaligned": [...], "strided": [...], "values": {...}}`` as a ``LayoutDomain``."""
    from jitkern.layouts.values import domain_of

    return LayoutDomain(unaligned=frozenset(document.get("unaligned", ())), strided=frozenset(document.get("strided", ())),
                        values={name: domain_of(value) for name, value in document.get("values", {}).items()})


def warmed_lookup_key(kernel: TritonJitKernel, binary: BinaryKey) -> str:
    """The key under which Triton files the binary ``kernel.compile(binary)`` builds, named
    without compiling: the key Triton's binder gives the binary's stand-ins (within
    ``dry_run_gpu()`` or ``compile_only(target)`` on a machine with no GPU)."""
    spec = LaunchSpec((1,), kernel.layouts.stand_in_kwargs(binary), binary.key)
    return triton_lookup_key(kernel.kernel, kernel.triton_kwargs(spec))


def _plan(kernel: TritonJitKernel, key: Any, layout: LayoutDomain) -> dict[str, Any]:
    """The key's ``warmup_inputs``, each stand-in tensor, and each plain stand-in of another
    type than ``__call__`` takes, replaced by how to draw it."""
    inputs = kernel.warmup_inputs(key)
    plan = dict(inputs)
    takes = _plain_types(kernel)
    for name, value in inputs.items():
        if isinstance(value, TritonWarmupTensor):
            strided = tuple(dim for dim in range(value.ndim) if layout.allows_any_stride(name, dim))
            fixed = tuple(dim for dim in range(value.ndim) if {name, f"{name}.{dim}"} & kernel.fixed_strides)
            valued = tuple((dim, domain) for dim in range(value.ndim)
                           if (domain := layout.stride_values(name, dim)) is not None)
            plan[name] = _TensorPlan(value, value.varying, strided, fixed, layout.allows_unaligned(name),
                                     value.is_contiguous(), valued, layout.offsets(name))
        elif name in takes and type(value) is not takes[name]:  # not isinstance: True is an int
            plan[name] = _PlainPlan(takes[name])
    if not any(isinstance(part, _TensorPlan) for part in plan.values()):
        raise WarmupMismatch(f"{kernel.name}: warmup_inputs gives no tensor stand-ins to draw from")
    return plan


def _draw(data: Any, name: str, part: Any, kernel: TritonJitKernel) -> Any:
    """One argument of a drawn launch: drawn by its plan, or the stand-in as it is."""
    if isinstance(part, _TensorPlan):
        return _draw_tensor(data, name, part, kernel.large_ints, kernel.size_limit)
    if isinstance(part, _PlainPlan):
        return _draw_plain(data, name, part)
    return part


_PLAIN_TYPES = {"bool": bool, "int": int, "float": float}


def _plain_types(kernel: TritonJitKernel) -> dict[str, type]:
    """The parameters ``__call__`` annotates ``bool``, ``int`` or ``float`` (as text where
    annotations are postponed), each with that type."""
    parameters = inspect.signature(type(kernel).__call__).parameters
    names = {name: param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", "")
             for name, param in parameters.items()}
    return {name: _PLAIN_TYPES[text] for name, text in names.items() if text in _PLAIN_TYPES}


def _draw_plain(data: Any, name: str, plan: _PlainPlan) -> Any:
    from hypothesis import strategies as st

    values = {bool: st.booleans(),
              int: st.sampled_from(_BOUNDARY_SIZES) | st.integers(-I32_LIMIT, I32_LIMIT - 1),
              float: st.floats(allow_nan=False, allow_infinity=False)}[plan.takes]
    return data.draw(values, label=name)


def _draw_tensor(data: Any, name: str, plan: _TensorPlan, large: bool, size_limit: int) -> DrawnTensor:
    from hypothesis import assume
    from hypothesis import strategies as st

    stand_in = plan.stand_in
    limit = 2**48 if large else I32_LIMIT
    boundary = [size for size in _BOUNDARY_SIZES + (_LARGE if large else []) + [size_limit - 1] if size < size_limit]
    sizes = st.sampled_from(boundary) | st.integers(0, 300)
    shape = [data.draw(sizes, label=f"{name}.shape[{dim}]") if dim in plan.varying_dims else size
             for dim, size in enumerate(stand_in.shape)]
    assume(_numel(shape) < limit)
    strides = list(contiguous_strides(shape) if plan.contiguous else stand_in.stride())
    stride_values = st.sampled_from(_BOUNDARY_STRIDES + (_LARGE if large else [])) | st.integers(0, limit - 1)
    for dim in plan.strided_dims:
        strides[dim] = data.draw(stride_values, label=f"{name}.stride({dim})")
    for dim, domain in plan.valued_dims:
        strides[dim] = data.draw(_values(domain, 0, limit - 1), label=f"{name}.stride({dim}) in {domain.describe()}")
    declared = plan.strided_dims + plan.fixed_dims + tuple(dim for dim, _ in plan.valued_dims)
    for dim in range(len(shape)):  # a dimension of size 1 addresses alike whatever its stride
        if shape[dim] == 1 and dim not in declared:
            strides[dim] = data.draw(stride_values, label=f"{name}.stride({dim}) of size 1")
    assume(all(stride < limit for stride in strides))
    element = stand_in.dtype.itemsize
    if plan.any_offset:
        offset = data.draw(st.integers(0, 16 // element - 1), label=f"{name} offset") * element
    elif plan.offsets:
        offset = data.draw(_values(plan.offsets, 0, 15), label=f"{name} offset in {plan.offsets.describe()}")
    else:
        offset = 0
    address = 16 * data.draw(st.integers(1, 2**36), label=f"{name} address / 16") + offset
    return DrawnTensor(stand_in.dtype, shape, strides, address)


def _values(domain: ValueDomain, low: int, high: int) -> Any:
    """The values of ``domain`` (a range's bounds left out: ``low``, ``high``), its witnesses of
    each Triton class first among them."""
    from hypothesis import strategies as st

    if domain.values:
        return st.sampled_from(domain.values)
    low = max(low, domain.low) if domain.low is not None else low
    high = min(high, domain.high) if domain.high is not None else high
    step = domain.multiple_of
    witnesses = [value for value in domain.witnesses(True) if low <= value <= high]
    return st.sampled_from(witnesses) | st.integers(-(-low // step), high // step).map(lambda value: value * step)


def _numel(shape) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
