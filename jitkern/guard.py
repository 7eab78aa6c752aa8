"""Watching compiles in a serving process.

Once serving starts, a launch of a jitkern kernel that misses the binaries warmup loaded
means a compile (or a cache load) on somebody's request. The guard sees each one through
Triton's hooks and, by mode: ``off`` ignores it, ``warn`` warns, ``error`` raises
``ServeTimeCompile`` before anything compiles, ``record`` appends the key to a JSON-lines
file whose lines ``python -m jitkern.warmup merge-record`` adds to a manifest's ``keys``
(``jitkern.manifest.record``), and publishes each compile to Redis when it is configured.
Explicit warmups (``kernel.compile``, the CLI) are never flagged. A call of a tuned kernel
whose bucket its tuning table lacks (``jitkern.kernel.tuning``) launches the declared
default: warned once a bucket in warn and record modes, refused (``UntunedBucket``) in
error mode; it never benchmarks.

A plain ``@triton.jit`` kernel launched beside them (an engine's own) is flagged only when
Triton truly compiles it: its launch missing Triton's in-process binaries is followed by a
load from the disk cache, a wheel or Redis as often as by a compile (a load took 0.005 s
in vLLM's fused-MoE path), and only Triton's compile listener (``cache_hit``) tells them
apart, after the fact: in error mode that launch raises once its compile is done. Triton
kernels Inductor compiles for a model's own graph are not launches and never flagged.

Set the mode in code (``jitkern.guard.set_mode("error")``) or with ``JITKERN_GUARD``;
``JITKERN_GUARD_RECORD`` names the record file.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from typing import Any

from jitkern import hooks, settings
from jitkern.cache.manager import publish_compiles
from jitkern.kernel.tuning import watch_defaults
from jitkern.launch.spec import active_launch
from jitkern.layouts.binary_key import key_fields


class ServeTimeCompile(RuntimeError):
    """A launch at serve time needed a binary that warmup did not load."""


class ServeTimeCompileWarning(RuntimeWarning):
    pass


class UntunedBucket(RuntimeError):
    """In error mode: a call of a tuned kernel whose bucket no tuning table names a winner for."""


class UntunedBucketWarning(RuntimeWarning):
    pass


_state: dict[str, Any] = {"mode": "off", "record_file": None}
_recorded: set[tuple[str, str]] = set()
_lock = threading.Lock()
_plain_launch = threading.local()  # fn: the plain Triton kernel whose launch missed last in this thread


def set_mode(mode: str, record_file: str | Path | None = None) -> None:
    """Turn the guard to ``off``, ``warn``, ``error`` or ``record``."""
    if mode not in settings.GUARD_MODES:
        raise ValueError(f"guard mode {mode!r}: expected one of {', '.join(settings.GUARD_MODES)}")
    _state["mode"] = mode
    _state["record_file"] = Path(record_file or settings.current().guard_record_file)
    publish_compiles(mode == "record")
    watch_defaults(_on_default, on=mode != "off")
    if mode == "off":
        hooks.remove_watchers(on_compile=_on_compile, on_cache_miss=_on_cache_miss)
    else:
        hooks.add_watchers(on_compile=_on_compile, on_cache_miss=_on_cache_miss)


def mode() -> str:
    return _state["mode"]


def install_from_environment() -> None:
    """Apply ``JITKERN_GUARD`` (called on ``import jitkern``; off costs nothing)."""
    configured = settings.current()
    if configured.guard_mode != "off":
        set_mode(configured.guard_mode, configured.guard_record_file)


def describe_miss(fn: Any) -> tuple[str, dict[str, Any] | None]:
    """What missed, in words, and the manifest entry that would have covered it. When the
    process holds binaries of the launch's key, but none of its layout, the words say
    which argument differs and how; else which fields of the key differ from the nearest
    key it holds."""
    kernel, spec = active_launch.kernel, active_launch.spec
    if kernel is None or spec is None:
        name = getattr(fn, "name", None) or repr(fn)
        return f"Triton kernel {name} (not launched through a jitkern kernel)", None
    binary = kernel.layouts.binary_key(spec)
    why = "; ".join([*kernel.layouts.outside(spec), kernel.layouts.explain(binary, kernel.binaries.held())])
    return f"{kernel.describe(binary)} ({why})", {"kernel": kernel.name, "keys": [key_fields(binary)]}


def _on_cache_miss(*, fn, is_manual_warmup: bool, **_: Any) -> None:
    if is_manual_warmup:
        return
    if active_launch.kernel is None:  # a plain Triton kernel: flagged if Triton compiles it (_on_compile)
        _plain_launch.fn = fn
        return
    _flag(*describe_miss(fn))


def _on_compile(*, src, cache_hit: bool, **_: Any) -> None:
    """A plain kernel's launch that missed (``_on_cache_miss``) is flagged when Triton
    compiled its binary rather than finding it (in memory, on disk, in a wheel, in Redis)."""
    launched = getattr(_plain_launch, "fn", None)
    if launched is None or getattr(src, "fn", None) is not launched.jit_function:
        return  # not a launch: a warmup, or a kernel Inductor compiles for a model's graph
    _plain_launch.fn = None
    if not cache_hit:
        _flag(*describe_miss(launched))


def _flag(what: str, entry: dict[str, Any] | None) -> None:
    covering = f"; a manifest entry covering it: {json.dumps(entry)}" if entry else ""
    message = f"serve-time compile of {what}{covering}"
    current = _state["mode"]
    if current == "error":
        raise ServeTimeCompile(message)
    if current == "warn":
        warnings.warn(message, ServeTimeCompileWarning, stacklevel=3)
    elif current == "record" and entry is not None:
        kernel, spec = active_launch.kernel, active_launch.spec
        _record(entry, kernel.layouts.seen(kernel.layouts.binary_key(spec), spec))


def _on_default(*, kernel: str, bucket: str, config: str, source: str) -> None:
    table = f"its table {source}" if source else "no tuning table loaded"
    message = f"{kernel}: no tuned config for the bucket {bucket} ({table}): its default {config}"
    if _state["mode"] == "error":
        raise UntunedBucket(f"{message} is refused in error mode")
    warnings.warn(f"{message} launches", UntunedBucketWarning, stacklevel=2)


def _record(entry: dict[str, Any], seen: dict[str, Any]) -> None:
    """One line: the kernel, the binary key, and what made its layout (``seen``: the tensors
    that were unaligned, the values of the integers of another class) for ``merge-record``."""
    line = json.dumps({"kernel": entry["kernel"], "key": entry["keys"][0],
                       **{name: value for name, value in seen.items() if value}}, sort_keys=True)
    with _lock:
        if (entry["kernel"], line) in _recorded:
            return
        _recorded.add((entry["kernel"], line))
        with open(_state["record_file"], "a") as record:
            record.write(line + "\n")
