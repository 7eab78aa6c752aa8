"""What a deployment tunes, and its tables: each tuned kernel's buckets, the tables a load
takes (winners only, stale tables refused), the keys it loads, and ``--check``'s lines.

A tuned kernel's buckets in a deployment are its manifest entries' keys without their
tuned fields, times every combination of its selectors' values in the entry's config (the
batch buckets up to ``max_tokens``, say). Entries of explicit ``keys`` name their tuned
fields themselves: nothing of them is tuned, and a load takes them all.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from jitkern.build.check import checking_every_file
from jitkern.cache.entries import MISSING
from jitkern.cache.roots import read_roots
from jitkern.cache.tables import TABLE_FILE, read_table, stored_tables, table_folder
from jitkern.kernel import registry
from jitkern.layouts.binary_key import BinaryKey
from jitkern.manifest import Deployment
from jitkern.tuning.table import Table, TableError, staleness, winners_of


@dataclass(frozen=True)
class Bucket:
    """One bucket of a tuned kernel: ``values`` (``winners.bucket_names``' values), a key
    of it (its tuned fields those of any candidate) and its selectors' values."""

    values: tuple
    key: Any
    selectors: dict[str, Any]


def tuned_buckets(deployment: Deployment) -> dict[str, list[Bucket]]:
    """Each tuned kernel of the deployment (by name) and its buckets, in manifest order."""
    found: dict[str, dict[tuple, Bucket]] = {}
    for loaded in deployment.manifests:
        for entry in loaded.entries:
            winners = getattr(entry.kernel, "winners", None)
            if winners is None or entry.config is None:
                continue
            for key in dict.fromkeys(binary.key for binary in entry.keys):
                for row in winners.selector_rows(entry.config):
                    selectors = dict(zip(winners.space.by, row))
                    bucket = winners.bucket_of(key, selectors)
                    found.setdefault(entry.kernel.name, {}).setdefault(bucket, Bucket(bucket, key, selectors))
    return {name: list(buckets.values()) for name, buckets in found.items()}


def tuned_kernel(deployment: Deployment, name: str | None) -> str:
    """The tuned kernel ``name`` of the deployment, or its only one; ValueError (one line) otherwise."""
    tuned = list(tuned_buckets(deployment))
    if name in tuned or (name is None and len(tuned) == 1):
        return name or tuned[0]
    raise ValueError(f"--kernel {name}: not a tuned kernel of the manifests" if name else
                     "name the kernel with --kernel" if tuned else "the manifests hold no tuned kernel")


def candidate_key(bucket: Bucket, config: dict[str, Any]) -> Any:
    """The compile key a call of ``bucket`` launches with ``config``."""
    return dataclasses.replace(bucket.key, **config)


def read(kernel: Any, target: str, gpu: str) -> tuple[Table | None, str]:
    """The table of ``kernel`` for ``target`` on ``gpu`` from the caches (trusted as a
    binary is), or None and why not (one line)."""
    folder = table_folder(kernel.name, target, gpu)
    data, problem = read_table(folder)
    if data is None:
        others = [name.rpartition("@")[2] for name in stored_tables(kernel.name, target) if name != folder]
        return None, ("no tuning table" + (f" (there are for {', '.join(others)})" if others else "")
                      if problem == MISSING else f"its tuning table cannot be used: {problem}")
    try:
        return Table.from_bytes(data, folder), ""
    except TableError as error:
        return None, str(error)


def assess(kernel: Any, buckets: list[Bucket], target: str, gpu: str, serving: str | None) -> tuple[
        Table | None, dict[tuple, dict[str, Any]], list[str]]:
    """``kernel``'s table for ``target`` and ``gpu``, the rows of it a process on GPU ``serving``
    takes (None: any, as the table names its GPU) and what is wrong with it, a line each: a
    table missing, unusable or stale (then no row), rows left out, ``buckets`` it lacks."""
    table, problem = read(kernel, target, gpu)
    problem = problem or staleness(table, kernel, serving or table.gpu)
    if problem:
        return table, {}, [problem]
    rows, problems = winners_of(table, kernel)
    lacking = [bucket for bucket in buckets if bucket.values not in rows]
    if lacking:
        problems.append(f"lacks {len(lacking)} of {len(buckets)} buckets, which take their default config (first: "
                        f"{kernel.winners.describe(lacking[0].values)})")
    return table, rows, problems


def take_tables(deployment: Deployment, target: str, gpu: str) -> list[str]:
    """Give each tuned kernel of the deployment the winners of its table for ``target`` on
    ``gpu`` (``Winners.take``; a missing, unusable or stale table: none, every bucket takes
    its default), and say what is wrong, one line each (``assess``)."""
    lines = []
    for name, buckets in tuned_buckets(deployment).items():
        kernel = registry.get_kernel(name)
        table, rows, problems = assess(kernel, buckets, target, gpu, gpu)
        kernel.winners.take(rows, table.name if rows else "")
        if problems and not rows:
            problems[-1] += "; every bucket takes its default config"
        lines += [f"{name} for {target} on {gpu}: {problem}" for problem in problems]
    return lines


def check_tables(deployment: Deployment, gpu: str | None) -> list[str]:
    """``tune --check``: one line per table of the deployment's tuned kernels that is
    missing, unusable (damaged, or not as the trusted lock or the cache's own lock lists
    it), stale, names configs warmup did not build or lacks buckets, for each target, on
    ``gpu`` (None: every table found, each for the GPU it names). Loads nothing."""
    lines = []
    with checking_every_file():
        for target in deployment.targets:
            for name, buckets in tuned_buckets(deployment).items():
                kernel = registry.get_kernel(name)
                gpus = [gpu] if gpu else [folder.rpartition("@")[2] for folder in stored_tables(name, target)]
                if not gpus:
                    lines.append(f"{name} for {target}: no tuning table for any GPU")
                for each in gpus:
                    table, _rows, problems = assess(kernel, buckets, target, each, gpu)
                    lines += [f"{name} for {target} on {gpu or (table.gpu if table else each)}: {problem}"
                              for problem in problems]
    return lines


def serving_entries(deployment: Deployment, target: str) -> list[tuple[str, Any]]:
    """The (kernel, binary key) pairs a load takes for ``target``: of a tuned kernel's
    candidates, those its buckets launch (the winners the kernel took, else the defaults)."""
    launched: dict[str, set] = {}
    candidates: dict[str, set] = {}
    for name, buckets in tuned_buckets(deployment).items():
        winners = registry.get_kernel(name).winners
        launched[name] = {candidate_key(bucket, winners.chosen(bucket.values)) for bucket in buckets}
        candidates[name] = {candidate_key(bucket, config) for bucket in buckets for config in winners.candidates}
    return [(name, key) for name, key in deployment.by_target[target]
            if (key.key if isinstance(key, BinaryKey) else key) not in candidates.get(name, ())
            or (key.key if isinstance(key, BinaryKey) else key) in launched[name]]


def table_files(deployment: Deployment, target: str, gpu: str) -> list[str]:
    """Where each root may hold the tables a load of ``deployment`` reads (there or not): the
    load memo is valid only while they are as it found them."""
    return [os.path.join(root, table_folder(name, target, gpu), TABLE_FILE)
            for name in tuned_buckets(deployment) for root in read_roots()]
