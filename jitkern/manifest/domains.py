"""A manifest's layout domains, checked against the kernels they name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jitkern.layouts.domains import LayoutDomain
from jitkern.layouts.specialisation import runtime_params
from jitkern.layouts.values import EmptyDomain, ValueDomain, domain_of
from jitkern.manifest.schema import LayoutDomainSchema, ManifestError


def tensor_dims(kernel: Any, keys: Any) -> dict[str, int]:
    """The tensors a layout may name, over all ``keys`` (an optional tensor is in some keys
    only), each with the dimensions it has in every key that has it."""
    dims: dict[str, int] = {}
    for key in keys:
        for tensor, ndim in kernel.layouts.tensor_dims(key).items():
            dims[tensor] = min(ndim, dims.get(tensor, ndim))
    return dims


def integer_arguments(kernel: Any, keys: Any) -> set[str]:
    """The kernel's runtime integer arguments (its ``@triton.jit`` parameters), over all ``keys``."""
    return {name for key in keys for name, text in kernel.layouts.stand_ins(key)[1].items()
            if text == "1" or text.startswith(("i", "u"))}


def kernel_domain(path: Path, index: int, kernel: Any, tensors: dict[str, int], own: LayoutDomainSchema,
                  shared: LayoutDomainSchema, integers: set[str] = frozenset()) -> LayoutDomain:
    """The kernel's layout domain: its entry's, with the manifest's for the tensors it has.
    A name the entry gives must be a tensor of the kernel (of ``tensors``: its keys' tensors
    and their dimensions) that its public function accepts so laid out; one the manifest
    gives, of any kernel, and of the dimensions each kernel that has the tensor has."""
    where = f"{path}: kernels[{index}]"
    chosen: dict[str, dict[str, str]] = {"unaligned": {}, "strided": {}}  # name -> where it was given
    for at, domain, manifests in ((f"{where}.layout", own, False), (f"{path}: layout", shared, True)):
        for field in chosen:
            for position, name in enumerate(getattr(domain, field)):
                tensor, dim = _layout_name(name, field)
                if tensor not in tensors and manifests:
                    continue  # another kernel's (check_shared_domain)
                if tensor not in tensors:
                    known = ", ".join(sorted(tensors)) or "none"
                    raise ManifestError(f"{at}.{field}[{position}]: {kernel.name} has no tensor {name!r} "
                                        f"(its tensors: {known})")
                if dim is not None and dim >= tensors[tensor]:
                    raise ManifestError(f"{at}.{field}[{position}]: {name!r}: {tensor!r} of {kernel.name} "
                                        f"(kernels[{index}]) has {tensors[tensor]} dimensions, no dimension {dim}")
                chosen[field].setdefault(name, at)
    for field, names in chosen.items():
        for name in sorted(names):
            refusal = _refusal(kernel, field, name)
            if refusal:
                raise ManifestError(f"{names[name]}.{field} lists {name!r}, which {kernel.name} (kernels[{index}]) "
                                    f"cannot serve: its public function requires {refusal}")
    values = _kernel_values(where, path, kernel, tensors, integers, own, shared)
    for field, meaning in (("strided", "any stride"), ("unaligned", "any start")):
        both = sorted(set(values) & set(chosen[field]))
        if both:
            raise ManifestError(f"{where}: layout lists {both[0]!r} both as {field} ({meaning}) and with values: "
                                "give one")
    return LayoutDomain(unaligned=frozenset(chosen["unaligned"]), strided=frozenset(chosen["strided"]), values=values)


def _kernel_values(where: str, path: Path, kernel: Any, tensors: dict[str, int], integers: set[str],
                   own: LayoutDomainSchema, shared: LayoutDomainSchema) -> dict[str, ValueDomain]:
    """The value domains of the entry's and the manifest's layout that name the kernel's
    tensors (their start offsets, ``z``), strides (``z.0``) or runtime integer arguments
    (the entry's first), each checked: a domain no integer is in,
    a stride the public function fixes, or values it refuses (beyond i32 where
    ``large_ints`` is False, a negative stride) are one error naming the field."""
    values = {}
    unspecialised = _unspecialised(kernel)
    for at, domain, manifests in ((f"{where}.layout", own, False), (f"{path}: layout", shared, True)):
        for name, document in domain.values.items():
            if manifests and name in values:
                continue  # the entry's own values of it come first
            field = f"{at}.values[{name!r}]"
            tensor, dim = _layout_name(name, "strided")
            stride = dim is not None and tensor in tensors
            if name in tensors:
                values[name] = _offsets(field, kernel, name, document)
                continue
            if not stride and name not in integers:
                if manifests:
                    continue  # another kernel's (check_shared_domain)
                raise ManifestError(f"{field}: {kernel.name} has no tensor, stride or integer argument {name!r} "
                                    f"(tensors: {', '.join(sorted(tensors)) or 'none'}; strides: TENSOR.DIM of "
                                    f"those; integer arguments: {', '.join(sorted(integers)) or 'none'})")
            if stride and dim >= tensors[tensor]:
                raise ManifestError(f"{field}: {tensor!r} of {kernel.name} has {tensors[tensor]} dimensions, "
                                    f"no dimension {dim}")
            refusal = _refusal(kernel, "strided", name) if stride else ""
            if refusal:
                raise ManifestError(f"{field}: {kernel.name}'s public function requires {refusal}")
            if not stride and name in unspecialised:
                if manifests:
                    continue  # the manifest's values are for the kernels that specialise it
                raise ManifestError(f"{field}: {name} is do_not_specialize in {kernel.kernel.__name__}: one binary "
                                    "takes all its values, so values here choose nothing; leave it out")
            values[name] = _domain(field, document, getattr(kernel, "large_ints", False))
            low, high = values[name].bounds()
            if stride and low is not None and low < 0:
                raise ManifestError(f"{field}: a stride is not negative, got {low}")
            if not getattr(kernel, "large_ints", False) and any(bound is not None and not -2**31 <= bound < 2**31
                                                                for bound in (low, high)):
                raise ManifestError(f"{field}: {kernel.name}'s public function refuses integers of 2**31 or more "
                                    "(its binaries keep them i32)")
    return values


def _unspecialised(kernel: Any) -> set[str]:
    """The kernel's runtime integers Triton does not specialise on (``do_not_specialize``)."""
    jit = getattr(kernel, "kernel", None)
    return {param.name for param in runtime_params(jit) if param.do_not_specialize} if jit is not None else set()


def _offsets(field: str, kernel: Any, tensor: str, document: Any) -> ValueDomain:
    """A tensor's start offsets: bytes past a 16-byte boundary, 0 to 15, as one error naming
    the field where they are not, or where the public function requires it aligned."""
    offsets = _domain(field, document, large=False)
    low, high = offsets.bounds()
    if low is None or high is None or low < 0 or high > 15:
        raise ManifestError(f"{field}: a tensor's values are the bytes past a 16-byte boundary at which it "
                            f"starts, 0 to 15; got {offsets.describe()}")
    refusal = _refusal(kernel, "unaligned", tensor)
    if refusal and any(offset % 16 for offset in offsets.witnesses(False)):
        raise ManifestError(f"{field}: {kernel.name}'s public function requires {refusal}")
    return offsets


def _domain(field: str, document: Any, large: bool) -> ValueDomain:
    """The value domain a layout's ``values`` entry gives (a list or a range), or one error
    naming the field where it holds no integer (of i32, or of i64 where ``large``)."""
    try:
        domain = domain_of(document if isinstance(document, list) else document.model_dump())
        domain.witnesses(large)
    except EmptyDomain as error:
        raise ManifestError(f"{field}: {error}") from None
    return domain


def _refusal(kernel: Any, field: str, name: str) -> str:
    """What the kernel's public function requires that the layout ``name`` breaks, if anything."""
    tensor, dim = _layout_name(name, field)
    if field == "unaligned":
        return f"{tensor!r} 16-byte aligned" if tensor in getattr(kernel, "aligned_tensors", ()) else ""
    fixed = getattr(kernel, "fixed_strides", frozenset())
    if tensor in fixed or name in fixed or (dim is None and any(f.startswith(f"{tensor}.") for f in fixed)):
        fixed_here = sorted(f for f in fixed if f == tensor or f.startswith(f"{tensor}."))
        return f"fixed strides of {', '.join(fixed_here)}"
    return ""


def _layout_name(name: str, field: str) -> tuple[str, int | None]:
    """``"z"`` -> ("z", None); ``"z.0"`` -> ("z", 0) where a dimension may be named (strides)."""
    tensor, dot, dim = name.partition(".")
    if dot and field == "strided" and _DIGITS.fullmatch(dim):
        return tensor, int(dim)
    return name, None


_DIGITS = re.compile(r"[0-9]+")


def check_dimension_names(where: str, domain: LayoutDomainSchema) -> None:
    """A dimension is named one way, ``z.0``: the layout matches names as written, so
    ``z.00`` would match no stride."""
    for position, name in enumerate(domain.strided):
        tensor, dim = _layout_name(name, "strided")
        if dim is not None and name != f"{tensor}.{dim}":
            raise ManifestError(f"{where}.strided[{position}]: {name!r} names dimension {dim} of {tensor!r}; "
                                f"write {tensor}.{dim}")


def check_shared_domain(path: Path, shared: LayoutDomainSchema, entries: list[Any]) -> None:
    """Each tensor the manifest's layout names is a tensor of one of its kernels (of the
    ``entries``, each a ``ResolvedEntry``) at least."""
    tensors, integers = set(), set()
    for entry in entries:
        keys = dict.fromkeys(binary.key for binary in entry.keys)
        tensors |= set(tensor_dims(entry.kernel, keys))
        integers |= integer_arguments(entry.kernel, keys)
    for field, names in (("unaligned", shared.unaligned), ("strided", shared.strided)):
        for position, name in enumerate(names):
            if _layout_name(name, field)[0] not in tensors:
                raise ManifestError(f"{path}: layout.{field}[{position}]: no kernel of this manifest has a tensor "
                                    f"{name!r} (tensors: {', '.join(sorted(tensors)) or 'none'})")
    for name in shared.values:
        tensor, dim = _layout_name(name, "strided")
        if tensor not in tensors and name not in integers:
            raise ManifestError(f"{path}: layout.values[{name!r}]: no kernel of this manifest has a tensor, stride or "
                                f"integer argument {name!r}")


def accepted_domain(kernel: Any, key: Any) -> LayoutDomain:
    """The widest layout domain of ``key``'s launches: every tensor unaligned and every
    stride any, but what the kernel's public function requires (``_refusal``)."""
    dims = kernel.layouts.tensor_dims(key)
    return LayoutDomain(unaligned=frozenset(tensor for tensor in dims if not _refusal(kernel, "unaligned", tensor)),
                  strided=frozenset(f"{tensor}.{dim}" for tensor, ndim in dims.items() for dim in range(ndim)
                                    if not _refusal(kernel, "strided", f"{tensor}.{dim}")))


