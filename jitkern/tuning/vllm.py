"""vLLM's tuned fused-MoE configs in and out of tuning tables.

vLLM ships one JSON file per expert shape and GPU, ``E=<experts>,N=<width>,device_name=<GPU>.json``
(the GPU's name with ``_`` for spaces), mapping a batch size M to a config::

    {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
           "num_warps": 4, "num_stages": 4}, "2": {...}, ..., "triton_version": "3.6.0"}

and a batch of M tokens takes the config of the listed size nearest M. Such a file fills
the buckets of a kernel whose tuning space tunes those names: each is matched, without
regard to case, to a tuned field by the field's name, its constexpr or its launch option
(``block_size_m`` or ``BLOCK_M``; ``num_warps``). The buckets filled are the deployment's,
narrowed by ``where`` (field or selector values, ``experts=64, n=1408``) to one selector
left free, the one M is a value of; each takes the config of the listed M nearest its
value, as vLLM would pick it. Every config must be a candidate of the space (warmup built
only those). Export is the reverse: a table's rows narrowed by ``where`` to one config per
value of the free selector, written with constexprs in capitals, options as named.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

from jitkern.kernel import registry
from jitkern.kernel.declare import METADATA
from jitkern.kernel.tuning import config_name
from jitkern.manifest import Deployment
from jitkern.tuning.deployment import tuned_buckets
from jitkern.tuning.table import Row, Table, TableError, table_of


def vllm_gpu(path: str) -> str | None:
    """The GPU a vLLM file names (``device_name=NVIDIA_H200`` gives ``NVIDIA H200``), or None."""
    found = re.search(r"device_name=([^,]+?)(?:,|\.json$)", os.path.basename(path))
    return found.group(1).replace("_", " ") if found else None


def _tuned_fields(kernel: Any) -> dict[str, Any]:
    """Each tuned field of the kernel's key, by name, and its declaration (its constexpr or option)."""
    return {field.name: field.metadata[METADATA] for field in dataclasses.fields(kernel.CompileKey)
            if field.name in kernel.winners.tuned_names}


def _names(kernel: Any) -> dict[str, str]:
    """How a vLLM file may name each tuned field (lower case) -> the field."""
    return {alias.lower(): name for name, declared in _tuned_fields(kernel).items()
            for alias in (name, declared.constexpr, declared.option) if alias}


def _free_selector(kernel: Any, where: dict[str, Any], source: str) -> str:
    selectors = list(kernel.winners.space.by)
    if not selectors:
        raise TableError(f"{source}: vLLM's files key configs by one batch size; {kernel.name}'s tuning space "
                         "selects by nothing (no by= selector to read it into): declare one, such as the batch "
                         "size, in its TuningSpace(by=...)")
    free = [name for name in selectors if name not in where]
    if len(free) != 1:
        raise TableError(f"{source}: vLLM's files key configs by one batch size; {kernel.name} selects by "
                         f"{', '.join(selectors)}: give all but one with --where ({', '.join(free) or 'none'} "
                         "left free)")
    return free[0]


def _matching(bucket: dict[str, Any], where: dict[str, Any]) -> bool:
    return all(bucket[name] == value for name, value in where.items())


def _check_where(kernel: Any, where: dict[str, Any], source: str) -> None:
    unknown = sorted(set(where) - set(kernel.winners.bucket_names))
    if unknown:
        raise TableError(f"{source}: --where {', '.join(unknown)}: not bucket fields of {kernel.name} "
                         f"({', '.join(kernel.winners.bucket_names)})")


def import_vllm(path: str, deployment: Deployment, kernel_name: str, target: str, gpu: str,
                where: dict[str, Any]) -> Table:
    """The table the vLLM file ``path`` gives ``kernel_name``'s buckets of ``deployment``
    that match ``where`` (see the module docstring); ``TableError`` naming the file."""
    kernel = registry.get_kernel(kernel_name)
    if kernel.winners is None:
        raise TableError(f"{path}: {kernel_name} declares no tuning space")
    _check_where(kernel, where, path)
    batch = _free_selector(kernel, where, path)
    try:
        with open(path, "rb") as file:
            document = json.load(file)
    except (OSError, ValueError) as error:
        raise TableError(f"{path}: cannot read vLLM's JSON: {error}") from None
    if not isinstance(document, dict):
        raise TableError(f"{path}: expected an object of batch size -> config")
    triton_version = document.pop("triton_version", None)
    names, sizes = _names(kernel), {}
    for size, entry in document.items():
        if not size.isdigit() or not isinstance(entry, dict):
            raise TableError(f"{path}: {size!r}: expected a batch size and its config")
        config = {names.get(name.lower(), name): value for name, value in entry.items()}
        if set(config) != set(kernel.winners.tuned_names):
            raise TableError(f"{path}: {size!r}: names {sorted(entry)}; {kernel.name} tunes "
                             f"{', '.join(kernel.winners.tuned_names)} (by name, constexpr or option, any case)")
        config = {name: config[name] for name in kernel.winners.tuned_names}
        if config not in kernel.winners.candidates:
            raise TableError(f"{path}: {size!r}: {config_name(config)} is not a candidate of {kernel.name}'s space "
                             "(warmup builds only those): add it to its configs and warm again")
        sizes[int(size)] = config
    if not sizes:
        raise TableError(f"{path}: no configs")
    rows = []
    for bucket in tuned_buckets(deployment).get(kernel_name, []):
        values = dict(zip(kernel.winners.bucket_names, bucket.values))
        if _matching(values, where):
            nearest = min(sizes, key=lambda size: (abs(size - values[batch]), size))  # vLLM's pick; a tie: the smaller
            rows.append(Row(values, sizes[nearest]))
    if not rows:
        raise TableError(f"{path}: no bucket of {kernel_name} in the manifests matches --where "
                         f"{','.join(f'{name}={value}' for name, value in where.items()) or '(none)'}")
    measured = f"imported from vLLM's {os.path.basename(path)}" + (f" (Triton {triton_version})" if triton_version
                                                                  else "")
    return table_of(kernel, target, gpu, rows, measured)


def export_vllm(table: Table, where: dict[str, Any]) -> bytes:
    """vLLM's JSON of ``table``'s rows that match ``where``: one config per value of the one
    selector left free; ``TableError`` when the rows give one value two configs."""
    kernel = registry.get_kernel(table.kernel)
    _check_where(kernel, where, table.name)
    batch = _free_selector(kernel, where, table.name)
    spelled = {name: declared.option or name.upper() for name, declared in _tuned_fields(kernel).items()}
    configs: dict[int, dict[str, Any]] = {}
    for row in table.rows:
        if set(row.config) != set(spelled) or set(row.bucket) != set(kernel.winners.bucket_names):
            raise TableError(f"{table.name}: a row of another tuning space than {kernel.name}'s")
        if not _matching(row.bucket, where):
            continue
        config = {spelled[name]: row.config[name] for name in kernel.winners.tuned_names}
        size = row.bucket[batch]
        if configs.setdefault(size, config) != config:
            differ = sorted(name for name in row.bucket if name != batch and name not in where)
            raise TableError(f"{table.name}: {batch}={size} has two configs; narrow the rows with --where "
                             f"({', '.join(differ)})")
    if not configs:
        raise TableError(f"{table.name}: no row matches --where "
                         f"{','.join(f'{name}={value}' for name, value in where.items()) or '(none)'}")
    document: dict[str, Any] = {str(size): configs[size] for size in sorted(configs)}
    document["triton_version"] = table.triton
    return (json.dumps(document, indent=4) + "\n").encode()
