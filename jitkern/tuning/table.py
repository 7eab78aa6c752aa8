"""A tuning table: one kernel's winner per bucket, for one target and GPU, and what it was
measured with.

JSON, checked by a pydantic schema (``TableSchema``) and then against the kernel's tuning
space; written with sorted keys and rows, so the same table gives the same bytes (and
lock digest)::

    {"format_version": 1, "kernel": "jitkern.example.grouped_gemm", "target": "cuda:90",
     "gpu": "NVIDIA H200", "triton": "3.6.0", "triton_build": "…", "kernel_source": "…",
     "measured": "median of 30 CUDA-graph replays …",
     "rows": [{"bucket": {"dtype": "bfloat16", …, "batch": 16},
               "config": {"BLOCK_SIZE_M": 16, …, "num_stages": 4},
               "microseconds": {"BLOCK_SIZE_M=16,…": 41.2, …}}]}

A table is **stale** for a process whose GPU name, Triton build (``triton_key()``, which
Triton's cache keys hash) or kernel source (the ``@triton.jit`` function's Triton cache
key) differs from the one it records: its timings are of another binary or GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Union

import pydantic
from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr

import triton

from jitkern.cache.identity import triton_build
from jitkern.cache.tables import store_table, table_folder, table_name
from jitkern.kernel.tuning import config_name

FORMAT_VERSION = 1
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]  # a key field's value as JSON holds it


class TableError(ValueError):
    """A table that cannot be used; one line naming the file and the field."""


class RowSchema(BaseModel):
    """One bucket's winner, and each candidate's median time when it was measured here."""

    model_config = ConfigDict(extra="forbid", title="TuningRow")

    bucket: dict[str, Scalar] = pydantic.Field(description="the key's untuned fields and the selectors' values")
    config: dict[str, Scalar] = pydantic.Field(description="the winner: a value for each tuned field")
    microseconds: dict[str, float] = pydantic.Field(default_factory=dict,
                                                    description="candidate name -> median microseconds")


class TableSchema(BaseModel):
    """A kernel's winners for one target and GPU, and what they were measured with."""

    model_config = ConfigDict(extra="forbid", title="TuningTable")

    format_version: Literal[1]
    kernel: str = pydantic.Field(min_length=1)
    target: str = pydantic.Field(min_length=1)
    gpu: str = pydantic.Field(min_length=1, description="the GPU's name as its driver gives it, e.g. NVIDIA H200")
    triton: str = pydantic.Field(description="Triton's version")
    triton_build: str = pydantic.Field(description="Triton's build, as jitkern-identity.json records it")
    kernel_source: str = pydantic.Field(description="the @triton.jit function's Triton cache key")
    measured: str = pydantic.Field(default="", description="how: the timer and its repeats, or the file imported")
    rows: list[RowSchema]


@dataclass(frozen=True)
class Row:
    bucket: dict[str, Any]
    config: dict[str, Any]
    microseconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """A parsed, schema-checked table (see the module docstring)."""

    kernel: str
    target: str
    gpu: str
    triton: str
    triton_build: str
    kernel_source: str
    measured: str
    rows: tuple[Row, ...]

    @property
    def folder(self) -> str:
        return table_folder(self.kernel, self.target, self.gpu)

    @property
    def name(self) -> str:
        """How the lock and messages name it: ``kernel[tuning table NVIDIA_H200] for cuda:90``."""
        return table_name(self.kernel, self.target, self.folder)

    def to_bytes(self) -> bytes:
        rows = sorted(self.rows, key=lambda row: json.dumps(row.bucket, sort_keys=True))
        document = {"format_version": FORMAT_VERSION, **{name: getattr(self, name) for name in (
            "kernel", "target", "gpu", "triton", "triton_build", "kernel_source", "measured")},
            "rows": [{"bucket": row.bucket, "config": row.config, "microseconds": row.microseconds} for row in rows]}
        return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> "Table":
        """The table in ``data``; ``TableError`` naming ``source`` and the first problem."""
        try:
            document = TableSchema.model_validate_json(data)
        except pydantic.ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
            raise TableError(f"{source}: not a tuning table: {where}: {problem['msg']}") from None
        rows = tuple(Row(dict(row.bucket), dict(row.config), dict(row.microseconds)) for row in document.rows)
        return cls(document.kernel, document.target, document.gpu, document.triton, document.triton_build,
                   document.kernel_source, document.measured, rows)

    def merged(self, newer: "Table") -> "Table":
        """``newer`` with this table's rows for the buckets it lacks (another deployment's)."""
        buckets = {json.dumps(row.bucket, sort_keys=True) for row in newer.rows}
        kept = tuple(row for row in self.rows if json.dumps(row.bucket, sort_keys=True) not in buckets)
        return replace(newer, rows=kept + newer.rows)


def kernel_source(kernel: Any) -> str:
    """The Triton cache key of the kernel's ``@triton.jit`` function: its source, starting line
    and helpers (the interpreter's functions have none: a compiled one's is made for them)."""
    function = kernel.kernel
    if not hasattr(function, "cache_key"):
        from triton.runtime.jit import JITFunction

        function = JITFunction(function.fn)
    return function.cache_key


def table_of(kernel: Any, target: str, gpu: str, rows: list[Row], measured: str) -> Table:
    """A table of ``kernel``'s ``rows`` measured here, now, on ``gpu`` for ``target``."""
    return Table(kernel.name, target, gpu, triton.__version__, triton_build(), kernel_source(kernel), measured,
                 tuple(rows))


def staleness(table: Table, kernel: Any, gpu: str) -> str | None:
    """Why ``table`` was not measured for this process serving ``kernel`` on ``gpu``, or None."""
    if table.gpu != gpu:
        return f"stale: measured on {table.gpu}, this GPU is {gpu}"
    if table.triton_build != triton_build():
        return (f"stale: measured with Triton {table.triton} build {table.triton_build}, this process runs "
                f"Triton {triton.__version__} build {triton_build()}")
    if table.kernel_source != kernel_source(kernel):
        return "stale: measured on another source of the kernel (its @triton.jit function or a helper changed)"
    return None


def winners_of(table: Table, kernel: Any) -> tuple[dict[tuple, dict[str, Any]], list[str]]:
    """The rows of ``table`` as ``kernel.winners.take`` takes them, and why any was left out:
    a bucket that is not the kernel's (another space), a config that is not one of its
    candidates (which are what warmup built), in one line each kind."""
    winners = kernel.winners
    names, taken, foreign, unbuilt = winners.bucket_names, {}, [], []
    for row in table.rows:
        if set(row.bucket) != set(names) or set(row.config) != set(winners.tuned_names):
            foreign.append(row)
        elif {name: row.config[name] for name in winners.tuned_names} not in winners.candidates:
            unbuilt.append(row)
        else:
            taken[tuple(row.bucket[name] for name in names)] = row.config
    problems = []
    if foreign:
        problems.append(f"{len(foreign)} row(s) of another space (buckets of {', '.join(sorted(foreign[0].bucket))} "
                        f"with configs of {', '.join(sorted(foreign[0].config))}; {kernel.name} has buckets of "
                        f"{', '.join(names)} and tunes {', '.join(winners.tuned_names)})")
    if unbuilt:
        problems.append(f"names {len(unbuilt)} config(s) warmup did not build, not candidates of its space "
                        f"(first: {config_name({name: unbuilt[0].config[name] for name in winners.tuned_names})})")
    return taken, problems


def store(table: Table, hmac_key: str = "") -> tuple[str, str]:
    """Write ``table`` into the cache directory and lock it (``jitkern.cache.tables``);
    its path and the lock's sha256."""
    return store_table(table.folder, table.name, table.to_bytes(), hmac_key)
