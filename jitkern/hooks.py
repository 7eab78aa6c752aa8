"""One place that owns Triton's compile hooks and fans them out to jitkern's watchers.

Triton has one slot per hook (``knobs.compilation.listener``, ``knobs.runtime.
jit_cache_hook``). jitkern installs a dispatcher in each the first time something
watches, keeps whatever a user had there before, and calls it too.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import triton

CompileListener = Callable[..., None]
"""Called as Triton's compilation listener: ``(src, metadata, metadata_group, times, cache_hit)``."""
CacheMissWatcher = Callable[..., None]
"""Called when a launch or warmup misses the in-process cache, before Triton loads or compiles."""

_compile_listeners: list[CompileListener] = []
_cache_miss_watchers: list[CacheMissWatcher] = []
_previous: dict[str, Any] = {}


def _on_compile(*, src, metadata, metadata_group, times, cache_hit) -> None:
    for listener in tuple(_compile_listeners):
        listener(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)
    if _previous.get("listener"):
        _previous["listener"](src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                              cache_hit=cache_hit)


def _on_cache_miss(**event: Any) -> bool:
    for watcher in tuple(_cache_miss_watchers):
        watcher(**event)
    previous = _previous.get("jit_cache_hook")
    return bool(previous(**event)) if previous else False


def _install() -> None:
    if "installed" in _previous:
        return
    _previous["listener"] = triton.knobs.compilation.listener
    _previous["jit_cache_hook"] = triton.knobs.runtime.jit_cache_hook
    triton.knobs.compilation.listener = _on_compile
    triton.knobs.runtime.jit_cache_hook = _on_cache_miss
    _previous["installed"] = True


def add_watchers(on_compile: CompileListener | None = None, on_cache_miss: CacheMissWatcher | None = None) -> None:
    """Start calling these watchers (a watcher already added is not added twice)."""
    _install()
    if on_compile is not None and on_compile not in _compile_listeners:
        _compile_listeners.append(on_compile)
    if on_cache_miss is not None and on_cache_miss not in _cache_miss_watchers:
        _cache_miss_watchers.append(on_cache_miss)


def remove_watchers(on_compile: CompileListener | None = None, on_cache_miss: CacheMissWatcher | None = None) -> None:
    if on_compile in _compile_listeners:
        _compile_listeners.remove(on_compile)
    if on_cache_miss in _cache_miss_watchers:
        _cache_miss_watchers.remove(on_cache_miss)


@contextlib.contextmanager
def watching(on_compile: CompileListener | None = None, on_cache_miss: CacheMissWatcher | None = None):
    add_watchers(on_compile, on_cache_miss)
    try:
        yield
    finally:
        remove_watchers(on_compile, on_cache_miss)
