"""A public function's arguments declared once and checked in one call.

Most of what a kernel's public function checks is the same few things: each tensor's
dtype, rank and sizes (sizes named alike must agree across tensors), the strides its
kernel assumes, strides below 2**31 (binaries keep them i32), one device for all; each
int is an int (in its range). ``Arguments`` holds those declarations and ``check`` raises the first
failure as a ``ValueError`` naming the argument, reading only shapes, strides, dtypes
and devices. The index values a kernel addresses memory with (``Within``) are read only
where kernels run on host memory (``runs_on_host``), never on a GPU (a device sync).
What is particular to a function (a relation no shape states) is its ``relations``::

    DECODE = Arguments(key=Arg("tokens 1 256", torch.bfloat16),
                       slots=Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(0, "kv_slots", padding=-1)),
                       capacity=int, sizes=dict(tokens=range(2**30)), relations=check_ring)

    def update_decode(key, slots, capacity):
        tokens = DECODE.check(locals()).tokens

The checks cost a public call only until it is planned (``jitkern.launch.plans``): a
planned call repeats no validation.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Iterable, Mapping

import torch

from jitkern.kernel.declare import STAND_IN_SIZE, DeclarationError, Tensor
from jitkern.kernel.validation import (check_int, check_strides_below_i32, check_values_in, dtype_name, first_outside,
                                       runs_on_host, same_device)

ANY = "_"  # a dimension of any size, or a stride of any value
MOVES = "+"  # a stride of any value but 0: each index its own element (not an expanded tensor)


def _words(spec: str | Iterable[Any]) -> tuple[Any, ...]:
    """``"tokens 1 256"`` -> ``("tokens", 1, 256)``; a tuple is taken as it is."""
    if not isinstance(spec, str):
        return tuple(spec)
    return tuple(int(word) if word.isdigit() else word for word in spec.split())


Bound = int | str | Callable[["Checked"], int] | None  # an int, a bound size's name, or a function of them


class Within:
    """The values of an index tensor: each in ``[low, high)`` (``high`` None: no upper bound)
    or ``padding``, skipping the entries where the argument named ``where`` holds its own
    padding; ``ascending``: non-decreasing too (cumulative counts). A bound is an int, the
    name of a size or int argument, or a function of the ``Checked`` sizes; ``note``, said
    after the range, may name sizes in braces (``"the ring's {rows}"``)."""

    def __init__(self, low: Bound = 0, high: Bound = None, *, padding: int | None = None, where: str | None = None,
                 ascending: bool = False, note: str = "") -> None:
        for bound in (low, high):
            if not (bound is None or isinstance(bound, (int, str)) or callable(bound)):
                raise TypeError(f"Within: bound {bound!r} is not an int, a size's name or a function of the sizes")
        self.low, self.high, self.padding, self.where, self.ascending, self.note = low, high, padding, where, ascending, note

    def check(self, name: str, values: torch.Tensor, call: Mapping[str, Any], checked: Checked,
              valued: Mapping[str, Within]) -> None:
        """``values`` (the argument ``name`` of ``call``) against this range; host memory only."""
        sizes = vars(checked)
        low, high = (bound if bound is None or isinstance(bound, int) else
                     sizes[bound] if isinstance(bound, str) else bound(checked) for bound in (self.low, self.high))
        note = f" ({self.note.format_map(sizes)})" if self.note else ""
        values = values.reshape(-1)
        other = call[self.where] if self.where is not None else None  # None: an optional argument not given
        where = None if other is None else other.reshape(-1) != valued[self.where].padding
        check_values_in(name, values, low, high, padding=self.padding, where=where, note=note)
        if self.ascending and values.numel() > 1:
            at = first_outside(values[1:].long() - values[:-1].long(), 0)
            if at is not None:
                raise ValueError(f"{name}: {name}[{at + 1}] = {int(values[at + 1])} is less than {name}[{at}] = "
                                 f"{int(values[at])}; expected non-decreasing values")


class Arg:
    """One tensor argument: its ``shape`` (a name per dimension binds a size that every
    argument naming it must share; an int is that size; ``_`` any; ``*name`` alone, any
    rank, the whole shape bound as one), its ``dtype`` (a dtype,
    a tuple of them, or another argument's name: the same dtype as it), and the layout its
    kernel assumes: ``strides`` (an int per dimension it fixes, ``_`` for any, ``+`` for any
    but 0; a dimension of size 1 has no stride to check), ``contiguous``, ``written`` (a tensor the kernel
    writes row by row, whose rows must not overlap in memory). ``optional``: None passes.
    ``values``: the ``Within`` of an index tensor's values."""

    def __init__(self, shape: str | Iterable[Any], dtype: Any, *, strides: str | Iterable[Any] | None = None,
                 contiguous: bool = False, written: bool = False, optional: bool = False,
                 values: Within | None = None) -> None:
        if values is not None and not isinstance(values, Within):
            raise TypeError(f"Arg: values {values!r} is not a Within")
        self.shape = _words(shape)
        whole = self.shape[0] if len(self.shape) == 1 and isinstance(self.shape[0], str) else ""
        self.whole = whole[1:] if whole.startswith("*") else None  # "*shape": any rank, the whole shape named
        self.dtypes = (dtype,) if isinstance(dtype, (torch.dtype, str)) else tuple(dtype)
        self.strides = _words(strides) if strides is not None else None
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise ValueError(f"Arg: strides {self.strides} do not match shape {self.shape}")
        self.contiguous, self.written, self.optional, self.values = contiguous, written, optional, values

    def expected(self, dtypes: tuple[torch.dtype, ...]) -> str:
        """``bfloat16 [tokens, 1, 256]`` (``float16 (a's dtype) [E, N, K]``): what the error
        says was expected."""
        names = " or ".join(dtype_name(dtype) for dtype in dtypes)
        like = "".join(f" ({name}'s dtype)" for name in self.dtypes if isinstance(name, str))
        return f"{names}{like} [{', '.join(str(size) for size in self.shape)}]"


class Checked:
    """The sizes a check bound, by name (``checked.tokens``), and the tensors' ``device``."""

    def __init__(self, sizes: dict[str, int], device: torch.device | None) -> None:
        self.__dict__.update(sizes)
        self.device = device


class Arguments:
    """A public function's declared arguments: ``Arg`` for a tensor, ``int`` for an int
    argument, a ``range`` for an int within it, ``float`` for a real number (an int too, not
    a bool), ``bool`` for a bool; a dimension named as an int argument is that argument's
    value. ``sizes`` bounds named sizes (``tokens=range(2**30)``). ``relations``: what no
    shape states (rows a ring must hold for its capacity), a function of the call and the
    ``Checked`` sizes raising ``ValueError``, run after the shapes and before the index
    values, so that an error names the argument that is wrong."""

    def __init__(self, *, sizes: Mapping[str, range] | None = None,
                 relations: Callable[[Mapping[str, Any], Checked], None] | None = None,
                 **arguments: Arg | type) -> None:
        for name, declared in arguments.items():
            if not (isinstance(declared, (Arg, range)) or declared in (int, float, bool)):
                raise TypeError(f"Arguments: {name} is {declared!r}; expected an Arg, int, a range of ints, float "
                                "or bool")
        self.arguments, self.relations = arguments, relations
        self.sizes = dict(sizes or {})
        self.valued = {name: declared.values for name, declared in arguments.items()
                       if isinstance(declared, Arg) and declared.values is not None}
        named = {word for declared in arguments.values() if isinstance(declared, Arg) for word in declared.shape}
        for name, values in self.valued.items():
            for bound in (values.low, values.high):
                if isinstance(bound, str) and bound not in named | set(arguments) | set(self.sizes):
                    raise ValueError(f"Arguments: {name}'s values are bounded by {bound!r}, which no argument names")
            where = self.valued.get(values.where)
            if values.where is not None and (where is None or where.padding is None):
                raise ValueError(f"Arguments: {name}'s values are checked where {values.where!r} is not padding, "
                                 "but it is no argument with padding values")

    def fixed_strides(self, names: Iterable[str]) -> set[str]:
        """The strides the check fixes of the tensors among ``names``: a contiguous one's
        (``"ring"``), each dimension of an int stride (``"mean.1"``)."""
        fixed = set()
        for name in names:
            declared = self.arguments.get(name)
            if isinstance(declared, Arg) and declared.contiguous:
                fixed.add(name)
            elif isinstance(declared, Arg) and declared.strides is not None:
                fixed.update(f"{name}.{dim}" for dim, stride in enumerate(declared.strides) if type(stride) is int)
        return fixed

    def stand_ins(self, kernel: str, names: Iterable[str], sizes: Mapping[str, str],
                  dtypes: Mapping[str, str]) -> dict[str, Tensor]:
        """The usual stand-in (dense, aligned) of each tensor among ``names`` of a known rank:
        a dimension of an int size is that size, one named as a key field holds it (``sizes``:
        size name -> field) the key's, any other varies (``STAND_IN_SIZE``); its dtype, the
        declared one or the field's that reads it (``dtypes``: tensor -> field)."""
        found = {}
        for name in names:
            declared = self.arguments.get(name)
            if not isinstance(declared, Arg) or declared.whole is not None:
                continue
            field = dtypes.get(declared.dtypes[0] if isinstance(declared.dtypes[0], str) else name)
            dtype = declared.dtypes[0] if len(declared.dtypes) == 1 and field is None else field
            if dtype is None:
                raise DeclarationError(f"{kernel}.arguments: {name} has no one dtype; read it with dtype_of or "
                                       "declare its stand-in")
            free = [dim for dim, size in enumerate(declared.shape)
                    if type(size) is not int and (size == ANY or size not in sizes)]
            found[name] = Tensor(tuple(STAND_IN_SIZE if dim in free else sizes.get(size, size)
                                       for dim, size in enumerate(declared.shape)), dtype, varying=tuple(free))
        return found

    def check(self, call: Mapping[str, Any]) -> Checked:
        """Check the declared arguments among ``call`` (a call's ``locals()``), in their
        declared order, then the ``relations``, then the index values (``Within``); the first
        failure is a ``ValueError`` naming its argument."""
        sizes: dict[str, int] = {}
        bound_by: dict[str, str] = {}
        tensors: dict[str, torch.Tensor] = {}
        for name, declared in self.arguments.items():
            value = call[name]
            if declared is float or declared is bool:
                if isinstance(value, bool) != (declared is bool) or not isinstance(value, numbers.Real):
                    raise ValueError(f"{name}: expected a {declared.__name__}, got {type(value).__name__}")
            elif declared is int or type(declared) is range:
                check_int(name, value)
                if type(declared) is range and value not in declared:
                    raise ValueError(f"{name}: expected an int in [{declared.start}, {declared.stop}), got {value}")
                if name in sizes and sizes[name] != value:  # a dimension named as this argument came first
                    raise ValueError(f"{name}: {value}, but {bound_by[name]} has {name} = {sizes[name]}")
                sizes[name], bound_by[name] = value, name  # dimensions named as it are its value
            elif value is not None or not declared.optional:
                self._check_tensor(name, value, declared, tensors, sizes, bound_by)
                tensors[name] = value
        checked = Checked(sizes, same_device(**tensors) if tensors else None)
        if self.relations is not None:
            self.relations(call, checked)
        given = [(name, call[name]) for name in self.valued if call[name] is not None]
        if given and runs_on_host(given[0][1]):  # index values: read only where kernels run on host memory
            for name, values in given:
                self.valued[name].check(name, values, call, checked, self.valued)
        return checked

    def _check_tensor(self, name: str, tensor: Any, declared: Arg, tensors: dict[str, torch.Tensor],
                      sizes: dict[str, int], bound_by: dict[str, str]) -> None:
        dtypes = tuple(tensors[dtype].dtype if isinstance(dtype, str) else dtype for dtype in declared.dtypes)
        if not isinstance(tensor, torch.Tensor) or tensor.dtype not in dtypes or declared.whole is None and (
                tensor.dim() != len(declared.shape)
                or any(type(want) is int and size != want for size, want in zip(tensor.shape, declared.shape))):
            raise ValueError(f"{name}: expected {declared.expected(dtypes)}, got {describe(tensor)}")
        if declared.whole is not None:
            shape, want = tuple(tensor.shape), declared.whole
            if want in sizes and shape != sizes[want]:
                raise ValueError(f"{name}: {want} = {shape}, but {bound_by[want]} has {want} = {sizes[want]}")
            sizes.setdefault(want, shape)
            bound_by.setdefault(want, name)
        for dim, (size, want) in enumerate(zip(tensor.shape, () if declared.whole else declared.shape)):
            if type(want) is int or want == ANY:
                continue
            if want in sizes:
                if size != sizes[want] and bound_by[want] == want:
                    raise ValueError(f"{name}: dim {dim} is {size}, expected {want}={sizes[want]}")
                if size != sizes[want]:
                    raise ValueError(f"{name}: {want} = {size} (dim {dim}), but {bound_by[want]} has {want} = "
                                     f"{sizes[want]}")
                continue
            allowed = self.sizes.get(want)
            if allowed is not None and not allowed.start <= size < allowed.stop:  # `in` would specialise a SymInt
                raise ValueError(f"{name}: {want} = {size} (dim {dim}); expected in [{allowed.start}, {allowed.stop})")
            sizes[want], bound_by[want] = size, name
        check_strides_below_i32(name, tensor)
        if declared.contiguous and not tensor.is_contiguous():
            raise ValueError(f"{name}: must be contiguous, got strides {tuple(tensor.stride())}")
        if declared.strides is not None:
            for size, stride, want in zip(tensor.shape, tensor.stride(), declared.strides):
                if want != ANY and size > 1 and (stride == 0 if want == MOVES else stride != want):
                    raise ValueError(f"{name}: strides {tuple(tensor.stride())}; expected "
                                     f"({', '.join(str(want) for want in declared.strides)}) where a dimension is "
                                     "longer than 1")
        if declared.written:
            check_rows_apart(name, tensor)


def check_rows_apart(name: str, tensor: torch.Tensor) -> None:
    """The rows of a tensor a kernel writes (one per index of the dims before the last)
    lie apart in memory. Overlapping rows (an expanded tensor's stride 0, a stride shorter
    than a row) would take the writes of several programs, which race."""
    if tensor.numel() == 0:
        return
    reach = (tensor.shape[-1] - 1) * tensor.stride(-1) + 1  # elements the dims sorted so far span
    for stride, size in sorted((stride, size) for stride, size in zip(tensor.stride()[:-1], tensor.shape[:-1])
                               if size > 1):
        if stride < reach:
            raise ValueError(f"{name}: rows overlap in memory (strides {tuple(tensor.stride())} for shape "
                             f"{tuple(tensor.shape)}); the kernel writes each row")
        reach += stride * (size - 1)


def describe(value: Any) -> str:
    """A value as errors show it: a tensor's dtype, shape and device, else its type."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return f"{dtype_name(value.dtype)} {tuple(value.shape)} on {value.device}"
