"""``load()``: a serving process takes every binary of its deployment, compiling nothing.

Each key is taken from Triton's cache (the cache directory, installed cache wheels,
Redis) onto this machine's GPU and its direct launch prepared, so the first request
launches at full speed; a restart takes them from the load memo (``jitkern.serve.memo``)
without Triton's front end; each kernel's launch is then rehearsed
(``jitkern.serve.rehearsal``).
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

from jitkern import hooks, settings
from jitkern.cache.entries import CacheEntryUnusable
from jitkern.cache.identity import cache_directory, foreign_cache_line
from jitkern.cache.manager import refusing_compiles
from jitkern.kernel import registry
from jitkern.layouts.binary_key import BinaryKey, key_name
from jitkern.serve import memo
from jitkern.serve.rehearsal import rehearse
from jitkern.targets import NoGPU, gpu_name, local_target, parse_target, target_name


@dataclass(frozen=True)
class LoadedKernel:
    kernel: str
    binaries: int
    seconds: float


class MissingBinary(RuntimeError):
    """``load`` found keys that the cache lacks or holds damaged; it compiled none of them."""


def load(manifest_paths: list[str]) -> list[LoadedKernel]:
    """Warm start: load every binary of the manifests into this process, compiling nothing.

    Each key is taken from Triton's cache (which may hold binaries of other targets too:
    only this GPU's target is looked up) onto this machine's GPU and its direct launch
    prepared, so the first request launches at full speed. Keys the cache lacks, or holds
    damaged, are not compiled: ``MissingBinary`` names each (after the others loaded). A
    cache made by another compiler build is reported in one line, with the count. Each
    kernel's launch is then rehearsed, launching nothing (``jitkern.serve.rehearsal``). On a
    machine with no GPU it raises ``NoGPU``.
    """
    with _collector_paused():
        loaded = _load(manifest_paths)
        for row in loaded:
            rehearse(registry.get_kernel(row.kernel))
    return loaded


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic collector paused while ``load()`` builds thousands of objects that
    live as long as the process: otherwise they can set off a full collection, which
    scans every object torch and the engine made (0.09 s on our CPU machine). At the end,
    one collection of the young generations (ours) moves them out of the way."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)
        gc.enable()


def _load(manifest_paths: list[str]) -> list[LoadedKernel]:
    if settings.interpreting():
        _resolve(manifest_paths)  # the manifests' errors, as below
        return []
    if local_target() is None:  # else Triton's "0 active drivers" traceback, from deep inside
        raise NoGPU("load() loads the binaries onto this machine's GPU, and there is none here "
                    "(python -m jitkern.warmup MANIFEST --check checks a cache with no GPU)")
    start_process()  # once per process: not a cost of any one binary
    fingerprint = memo.deployment_fingerprint(manifest_paths) if settings.current().load_memo else None
    recorded = memo.read_memo(fingerprint) if fingerprint else None
    remembered = memo.load_remembered(recorded) if recorded else None
    if remembered is not None:
        for name in remembered:
            registry.get_kernel(name).binaries.prepare()
        _warn_tuning(recorded["tuning_lines"])
        return [LoadedKernel(name, binaries, seconds) for name, (binaries, seconds) in remembered.items()]
    deployment = _resolve(manifest_paths)
    from jitkern.tuning import serving_entries, table_files, take_tables  # pydantic's too

    domains: dict[Any, list[Any]] = {}  # so the guard names a launch outside them
    for loaded_manifest in deployment.manifests:
        for entry in loaded_manifest.entries:
            domains.setdefault(entry.kernel, []).append(entry.domain)
    for kernel, declared in domains.items():
        kernel.layouts.declare(declared)
    here = deployment.targets[0]  # this GPU's target (with none: the manifests' first)
    gpu = gpu_name() or "an unnamed GPU"
    tuning_lines = take_tables(deployment, here, gpu)  # each tuned kernel's winners, from its table for this GPU
    _warn_tuning(tuning_lines)
    entries = serving_entries(deployment, here)  # of a tuned kernel's candidates, the winners and defaults only
    fresh: list[str] = []

    def on_compile(*, src, cache_hit: bool, **_: Any) -> None:
        if not cache_hit:  # only with a cache manager of the user's, which cannot refuse
            fresh.append(getattr(src, "name", str(src)))

    loaded: dict[str, LoadedKernel] = {}
    unusable: list[str] = []
    binaries: list[tuple[str, BinaryKey, Any]] = []  # what the memo records
    with hooks.watching(on_compile=on_compile), refusing_compiles():
        for name, key in entries:
            start = time.perf_counter()
            try:
                binaries.append((name, key if isinstance(key, BinaryKey) else BinaryKey(key),
                                 registry.get_kernel(name).compile(key)))
            except CacheEntryUnusable as error:
                unusable.append(f"{name}[{key_name(key)}]: {error.problem}")
                continue
            if fresh:
                unusable.append(f"{name}[{key_name(key)}]: not in the cache (it was compiled)")
                fresh.clear()
            previous = loaded.get(name, LoadedKernel(name, 0, 0.0))
            loaded[name] = LoadedKernel(name, previous.binaries + 1, previous.seconds + time.perf_counter() - start)
    for name in loaded:
        kernel = registry.get_kernel(name)
        if hasattr(kernel, "binaries"):
            kernel.binaries.prepare()
    if unusable:
        foreign = foreign_cache_line(here, len(unusable), len(entries))
        elsewhere = [str(manifest.path) for manifest in deployment.manifests
                     if here not in {target_name(parse_target(t)) for t in manifest.manifest.targets}]
        hint = (f"; {', '.join(elsewhere)} do not list {here} among their targets: build with --target {here}"
                if elsewhere else "")
        raise MissingBinary(foreign or (
            f"{len(unusable)} of {len(entries)} keys are not usable in the cache {cache_directory()} for {here} "
            f"(run python -m jitkern.warmup on the manifests{hint}):\n  " + "\n  ".join(unusable)))
    if fingerprint:
        memo.write_memo(fingerprint, deployment.modules, {name: registry.get_kernel(name) for name in loaded}, binaries,
                        table_files(deployment, here, gpu), tuning_lines)
    return list(loaded.values())


class TuningTableWarning(RuntimeWarning):
    """A tuned kernel's table is missing, stale or partial: the buckets it lacks take their defaults."""


def _warn_tuning(lines: list[str]) -> None:
    for line in lines:
        warnings.warn(f"jitkern: {line}", TuningTableWarning, stacklevel=4)


def _resolve(manifest_paths: list[str]) -> Any:
    """The manifests' ``Deployment`` for this machine's target. Imported here, not at the
    top: the manifest stage imports pydantic (0.05-0.1 s), which a load from the memo never needs."""
    from jitkern.manifest.deployment import resolve

    return resolve(manifest_paths, target=None)[0]


_process_started: list[float] = []


def start_process() -> float:
    """Pay a process's one-time costs of loading binaries; returns the seconds they took
    (0 after the first call): the GPU's context and Triton's hash of its own build
    (``triton_key()``, remembered per build by ``jitkern.memo``), which Triton
    otherwise pays at the first binary it looks up."""
    if _process_started:
        return 0.0
    import torch

    start = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context exists from here on
    from triton.runtime.cache import triton_key

    triton_key()
    _process_started.append(time.perf_counter() - start)
    return _process_started[0]
