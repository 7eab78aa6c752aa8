"""A manifest's layout domains, checked against the kernels they name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jitkern.layouts.domains import LayoutDomain
from jitkern.manifest.schema import LayoutDomainSchema, ManifestError


def tensor_dims(kernel: Any, keys: Any) -> dict[str, int]:
    """The tensors a layout may name, over all ``keys`` (an optional tensor is in some keys
    only), each with the dimensions it has in every key that has it."""
    dims: dict[str, int] = {}
    for key in keys:
        for tensor, ndim in kernel.layouts.tensor_dims(key).items():
            dims[tensor] = min(ndim, dims.get(tensor, ndim))
    return dims


def kernel_domain(path: Path, index: int, kernel: Any, tensors: dict[str, int], own: LayoutDomainSchema,
                   shared: LayoutDomainSchema) -> LayoutDomain:
    """The kernel's layout domain: its entry's, with the manifest's for the tensors it has.
    A name the entry gives must be a tensor of the kernel (of ``tensors``: its keys' tensors
    and their dimensions) that its public function accepts so laid out; one the manifest
    gives, of any kernel, and of the dimensions each kernel that has the tensor has."""
    where = f"{path}: kernels[{index}]"
    chosen: dict[str, set[str]] = {"unaligned": set(), "strided": set()}
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
                chosen[field].add(name)
    for field, names in chosen.items():
        for name in sorted(names):
            refusal = _refusal(kernel, field, name)
            if refusal:
                raise ManifestError(f"{where}: layout.{field} lists {name!r}, which {kernel.name} cannot serve: "
                                    f"its public function requires {refusal}")
    return LayoutDomain(unaligned=frozenset(chosen["unaligned"]), strided=frozenset(chosen["strided"]))


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
    tensors = set()
    for entry in entries:
        tensors |= set(tensor_dims(entry.kernel, dict.fromkeys(binary.key for binary in entry.keys)))
    for field, names in (("unaligned", shared.unaligned), ("strided", shared.strided)):
        for position, name in enumerate(names):
            if _layout_name(name, field)[0] not in tensors:
                raise ManifestError(f"{path}: layout.{field}[{position}]: no kernel of this manifest has a tensor "
                                    f"{name!r} (tensors: {', '.join(sorted(tensors)) or 'none'})")


def accepted_domain(kernel: Any, key: Any) -> LayoutDomain:
    """The widest layout domain of ``key``'s launches: every tensor unaligned and every
    stride any, but what the kernel's public function requires (``_refusal``)."""
    dims = kernel.layouts.tensor_dims(key)
    return LayoutDomain(unaligned=frozenset(tensor for tensor in dims if not _refusal(kernel, "unaligned", tensor)),
                  strided=frozenset(f"{tensor}.{dim}" for tensor, ndim in dims.items() for dim in range(ndim)
                                    if not _refusal(kernel, "strided", f"{tensor}.{dim}")))


