"""Compiling a deployment's keys: in this process or a pool of workers, for a named target.

A key's outcome is "compiled", "cached" (found in Triton's on-disk cache, or already in
this process) or "failed". Triton writes every cache file atomically and an entry's
group file last, so workers can share one cache directory, and a run that was
interrupted leaves partial entries that nobody uses (``jitkern.cache`` hands out whole
entries only): the next run finds the whole ones and compiles the rest.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from jitkern import hooks
from jitkern.build.host_modules import build_launcher, stub_libcuda
from jitkern.cache.entries import DamagedCacheEntry
from jitkern.cache.manager import binaries_only, own_lock_shows_damage
from jitkern.cache.trust import building_own_cache
from jitkern.kernel import registry
from jitkern.kernel.base import JitKernel, TritonJitKernel
from jitkern.layouts.binary_key import BinaryKey, key_name
from jitkern.targets import compile_only, current as current_target, fit_launch_options, parse_target

COMPILED, CACHED, FAILED = "compiled", "cached", "failed"


@dataclass(frozen=True)
class CompileTask:
    """One key to build: which kernel, which key, for which target (``cuda:90``, ``hip:gfx942``)."""

    kernel_name: str
    key: Any
    target: str

    def describe(self) -> str:
        return f"{self.kernel_name}[{key_name(self.key)}] for {self.target}"


@dataclass(frozen=True)
class CompileOutcome:
    task: CompileTask
    status: str
    seconds: float
    error: str = ""
    replaced: str = ""
    """Why the cache's entry for the key could not be used, when this run replaced it."""
    notes: tuple[str, ...] = ()
    """What the target could not grant the key, which was built without it (PDL before sm_90)."""


def compile_task(task: CompileTask, keep_ir: bool = False) -> CompileOutcome:
    """Compile one key here; a compiler error becomes a failed outcome, not an exception.

    The entry it writes holds what a serving process loads, the binary and its metadata
    (``keep_ir``: every IR file too, for debugging; ``binaries_only``). An entry already
    in the cache is used as it is, with its IR or without: it is whole and locked, and
    rewriting it would race the processes reading it.

    A damaged cache entry reads as absent (``jitkern.cache``), so it is compiled again
    and replaced; the outcome says what was wrong with it. So is an entry whose files
    differ from those the cache's own lock lists: it is never locked again as it is. The
    cache directory is this warmup's own: with ``JITKERN_LOCK_KEY`` set (to sign what it
    writes), it is not refused for want of a signature (``building_own_cache``).
    """
    kernel = registry.get_kernel(task.kernel_name)
    fresh_compiles: list[bool] = []

    def on_compile(*, cache_hit: bool, **_: Any) -> None:
        fresh_compiles.append(not cache_hit)

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DamagedCacheEntry)
        try:
            with own_lock_shows_damage(), building_own_cache():
                with compile_only(parse_target(task.target)), hooks.watching(on_compile=on_compile), \
                        binaries_only(not keep_ir):
                    binary = kernel.compile(task.key)
                    notes = target_notes(kernel, task.key)
                if binary is not None:
                    build_launcher(binary)
        except Exception as error:  # the compiler's message is the useful part
            return CompileOutcome(task, FAILED, time.perf_counter() - start, one_error(error))
    replaced = "; ".join(str(w.message) for w in caught if issubclass(w.category, DamagedCacheEntry))
    status = COMPILED if any(fresh_compiles) else CACHED
    return CompileOutcome(task, status, time.perf_counter() - start, replaced=replaced, notes=notes)


def target_notes(kernel: JitKernel, key: Any) -> tuple[str, ...]:
    """What the target compiled for now cannot grant ``key`` (``fit_launch_options``)."""
    if not isinstance(kernel, TritonJitKernel):
        return ()
    compile_key = key.key if isinstance(key, BinaryKey) else key
    return tuple(fit_launch_options(kernel.constants(compile_key), current_target())[1])


def compile_tasks(
    tasks: list[CompileTask],
    jobs: int,
    modules: list[str],
    on_outcome: Callable[[CompileOutcome], None] = lambda outcome: None,
    keep_ir: bool = False,
) -> list[CompileOutcome]:
    """Compile every task, with ``jobs`` worker processes when ``jobs > 1`` (costliest
    kernels first: see ``JitKernel.compile_cost``), keeping the IR files when ``keep_ir``
    (``compile_task``). Outcomes come back in task order."""
    if jobs <= 1 or len(tasks) <= 1:
        outcomes = []
        for task in tasks:
            outcomes.append(compile_task(task, keep_ir))
            on_outcome(outcomes[-1])
        return outcomes
    prepare_triton()  # once here, not once per forked worker
    by_task: dict[CompileTask, CompileOutcome] = {}
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(tasks)),
        mp_context=_worker_context(),
        initializer=registry.import_modules,
        initargs=(modules,),
    ) as pool:
        by_cost = sorted(tasks, key=lambda task: -registry.get_kernel(task.kernel_name).compile_cost)
        futures = {pool.submit(compile_task, task, keep_ir): task for task in by_cost}
        for future in as_completed(futures):
            outcome = future.result()
            by_task[futures[future]] = outcome
            on_outcome(outcome)
    return [by_task[task] for task in tasks]


def prepare_triton() -> None:
    """Triton's one-time work before its first binary: hashing its own build
    (``triton_key()``: its sources and libtriton, 0.7 s on our CPU machine) and importing
    its Gluon modules (0.16 s). Done before forking, workers inherit both, and the
    stub ``libcuda.so.1`` (one folder a run, removed when this process exits)."""
    from triton.runtime.cache import triton_key

    triton_key()
    import triton.experimental.gluon  # noqa: F401

    stub_libcuda()


def _worker_context():
    """Fork where possible: workers start at once with every module imported, and they
    only compile through the compile-only driver, never touching a GPU the parent holds."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


def one_error(error: Exception) -> str:
    lines = [line for line in traceback.format_exception_only(type(error), error) if line.strip()]
    return "".join(lines).strip()


def tasks_for(entries: Iterable[tuple[str, Any]], targets: list[str]) -> list[CompileTask]:
    """One task per (kernel, key) and target, duplicates dropped, order kept."""
    return list(dict.fromkeys(CompileTask(name, key, target) for target in targets for name, key in entries))


def tasks_of(deployment: Any) -> list[CompileTask]:
    """Every task of a ``Deployment`` (``jitkern.manifest``): each target's keys."""
    return [task for target, entries in deployment.by_target.items() for task in tasks_for(entries, [target])]


def default_jobs() -> int:
    return os.cpu_count() or 1


def run_compile(deployment: Any, jobs: int, progress: bool = True, keep_ir: bool = False) -> list[CompileOutcome]:
    """Compile every key of a ``Deployment`` (``jitkern.manifest``), with a progress bar;
    ``keep_ir``: the entries keep their IR files (``compile_task``)."""
    tasks = tasks_of(deployment)
    bar = progress_bar(len(tasks), "compiling", progress)
    try:
        return compile_tasks(tasks, jobs, deployment.modules, on_outcome=lambda outcome: bar.update(1),
                             keep_ir=keep_ir)
    finally:
        bar.close()


def progress_bar(total: int, description: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="key", disable=not enabled, file=sys.stderr, mininterval=0.5)
