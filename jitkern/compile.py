"""Compiling manifest keys: in this process or a pool of workers, for a local GPU or a
named target, and checking that a cache already holds every key.

A key's outcome is "compiled", "cached" (found in Triton's on-disk cache, or already in
this process) or "failed". Triton writes every cache file atomically and an entry's
group file last, so workers can share one cache directory, and a run that was
interrupted leaves partial entries that nobody uses (``jitkern.cache`` hands out whole
entries only): the next run finds the whole ones and compiles the rest.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from jitkern import c_launch, hooks, registry
from jitkern.cache import MISSING, DamagedCacheEntry, building_own_cache, lookup_entry, lookup_file, own_lock_shows_damage
from jitkern.kernel import JitKernel, TritonJitKernel, key_name
from jitkern.specialisation import BinaryKey
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


def compile_task(task: CompileTask) -> CompileOutcome:
    """Compile one key here; a compiler error becomes a failed outcome, not an exception.

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
                with compile_only(parse_target(task.target)), hooks.watching(on_compile=on_compile):
                    binary = kernel.compile(task.key)
                    notes = target_notes(kernel, task.key)
                if binary is not None:
                    build_launcher(binary)
        except Exception as error:  # the compiler's message is the useful part
            return CompileOutcome(task, FAILED, time.perf_counter() - start, _one_error(error))
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
) -> list[CompileOutcome]:
    """Compile every task, with ``jobs`` worker processes when ``jobs > 1`` (costliest
    kernels first: see ``JitKernel.compile_cost``). Outcomes come back in task order."""
    if jobs <= 1 or len(tasks) <= 1:
        outcomes = []
        for task in tasks:
            outcomes.append(compile_task(task))
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
        futures = {pool.submit(compile_task, task): task for task in by_cost}
        for future in as_completed(futures):
            outcome = future.result()
            by_task[futures[future]] = outcome
            on_outcome(outcome)
    return [by_task[task] for task in tasks]


def prepare_triton() -> None:
    """Triton's one-time work before its first binary: hashing its own build
    (``triton_key()``: its sources and libtriton, 0.7 s on our CPU machine) and importing
    its Gluon modules (0.16 s). Done before forking, workers inherit both, and the
    stand-in ``libcuda.so.1`` (one folder a run, removed when this process exits)."""
    from triton.runtime.cache import triton_key

    triton_key()
    import triton.experimental.gluon  # noqa: F401

    _stand_in_libcuda()


def _worker_context():
    """Fork where possible: workers start at once with every module imported, and they
    only compile through the compile-only driver, never touching a GPU the parent holds."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


def _one_error(error: Exception) -> str:
    lines = [line for line in traceback.format_exception_only(type(error), error) if line.strip()]
    return "".join(lines).strip()


# --- the launcher of a binary -------------------------------------------------------


def build_launcher(binary: Any) -> None:
    """Put the host C modules that loading the binary needs into Triton's cache too.

    Triton 3.6 compiles, with the host C compiler, one launcher per kernel signature the
    first time a process loads such a binary (about 0.3 s on the H200 machines), and its
    ``cuda_utils`` module once per process and cache (about 0.5 s): paid at warm start or
    on the first request; the direct launch needs ``jitkern.c_launch``'s module, built
    the same way. Their cache key is their C source and the platform, so modules built
    here are found there. With no GPU driver here, the link runs against a stand-in
    ``libcuda.so.1`` that names the library and defines nothing; the real driver resolves
    the symbols when the GPU process loads them (here the load itself fails, after the
    file is cached, and that is expected).
    """
    if binary.metadata.target.backend != "cuda":
        return
    import triton

    _build_host_module(launcher_source(binary.src, getattr(binary.metadata, "tensordesc_meta", None)),
                       "__triton_launcher")
    if _stand_in_libcuda() is not None:  # on a GPU machine the driver has built cuda_utils already
        _build_cuda_utils(triton.knobs.cache.dir)
    _build_c_launch(triton.knobs.cache.dir)


def launcher_source(source: Any, tensordesc_meta: Any) -> str:
    """The C source of the host launcher Triton builds for a binary of ``source``."""
    from triton.backends.nvidia import driver as cuda_driver

    constants = {
        ((source.fn.arg_names.index(name),) if isinstance(name, str) else name): value
        for name, value in source.constants.items()
    }
    return cuda_driver.make_launcher(constants, dict(source.signature), tensordesc_meta)


def cuda_utils_source() -> str:
    from triton.backends.nvidia import driver as cuda_driver

    with open(os.path.join(os.path.dirname(cuda_driver.__file__), "driver.c")) as file:
        return file.read()


def host_module_entry(c_source: str, name: str) -> tuple[str, str]:
    """(cache folder, file name) of a host C module, as ``compile_module_from_src`` keys it:
    by its C source and the platform."""
    import sysconfig

    from triton.runtime.build import platform_key
    from triton.runtime.cache import _base32

    key = hashlib.sha256((c_source + platform_key()).encode("utf-8")).hexdigest()
    return _base32(key), f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"


@functools.cache
def _build_cuda_utils(cache_dir: str) -> None:
    """Triton's ``cuda_utils`` module: one per cache, so once per cache and process, not
    once per key (``cache_dir`` keys the memo)."""
    _build_host_module(cuda_utils_source(), "cuda_utils")


@functools.cache
def _build_c_launch(cache_dir: str) -> None:
    """The direct launch's C module: once per cache and process (``cache_dir`` keys the
    memo). It calls no driver, so it links against nothing and loads on any machine; with
    no driver here it is built by the stand-in's compiler too, whose builds are reproducible."""
    from triton.runtime.build import compile_module_from_src

    stand_in = _stand_in_libcuda()
    with _environment(CC=stand_in.compiler if stand_in else None):
        compile_module_from_src(c_launch.SOURCE, c_launch.NAME)


def _build_host_module(c_source: str, name: str) -> None:
    from triton.backends.nvidia import driver as cuda_driver
    from triton.runtime.build import compile_module_from_src

    stand_in = _stand_in_libcuda()
    if stand_in is not None and _host_module_cached(c_source, name):
        return  # loading it here would fail (no driver) and make Triton build it again
    try:
        with _environment(CC=stand_in.compiler if stand_in else None):
            compile_module_from_src(
                src=c_source, name=name, library_dirs=cuda_driver.library_dirs(),
                include_dirs=cuda_driver.include_dirs, libraries=cuda_driver.libraries,
            )
    except ImportError:
        if stand_in is None:
            raise


def _host_module_cached(c_source: str, name: str) -> bool:
    """Whether Triton's cache holds this C module."""
    import triton
    from triton.runtime.cache import FileCacheManager

    folder, filename = host_module_entry(c_source, name)
    return (triton.knobs.cache.manager_class or FileCacheManager)(folder).get_file(filename) is not None


@dataclass(frozen=True)
class _StandIn:
    folder: str
    compiler: str  # the C compiler, told to keep libcuda.so.1 as a dependency


_stand_in: list[_StandIn | None] = []


def _stand_in_libcuda() -> _StandIn | None:
    """A stand-in ``libcuda.so.1`` when this machine has no GPU driver, else None.

    The stand-in defines no CUDA function, so the linker would drop it from the
    launcher's dependencies (``--as-needed``) and the GPU process could not resolve the
    launcher's CUDA calls: the compiler wrapper passes ``--no-as-needed``. Triton writes
    each C source into a new temporary folder, whose path ``assert`` would put into the
    module (``__FILE__``), so two builds of one source differed (and so did the lock's
    digest): the wrapper maps that folder to ``.``.
    """
    if _stand_in:
        return _stand_in[0]
    import atexit
    import shutil
    import subprocess
    import tempfile

    import triton
    from triton.backends.nvidia import driver as cuda_driver

    try:
        cuda_driver.libcuda_dirs()
        _stand_in.append(None)
        return None
    except (AssertionError, OSError, subprocess.CalledProcessError):
        pass
    folder = tempfile.mkdtemp(prefix="jitkern-libcuda-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # forked workers leave it to their parent
    real_compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or "cc"
    compiler = os.path.join(folder, "cc")
    with open(compiler, "w") as wrapper:
        wrapper.write("#!/bin/sh\n"
                      'for arg do case "$arg" in *.c) set -- "-ffile-prefix-map=${arg%/*}=." "$@"; break;; esac; done\n'
                      f'exec "{real_compiler}" -Wl,--no-as-needed "$@"\n')
    os.chmod(compiler, 0o755)
    source = os.path.join(folder, "stand_in.c")
    with open(source, "w") as file:
        file.write("void jitkern_libcuda_stand_in(void) {}\n")
    library = os.path.join(folder, "libcuda.so.1")
    subprocess.run([real_compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", library, source], check=True)
    previous = os.environ.get("TRITON_LIBCUDA_PATH")
    triton.knobs.nvidia.libcuda_path = folder
    # Setting the knob also exports TRITON_LIBCUDA_PATH; a child process (a warmup run
    # from a test, say) would then take the stand-in for a real driver.
    _environment_restore("TRITON_LIBCUDA_PATH", previous)
    _stand_in.append(_StandIn(folder, compiler))
    return _stand_in[0]


def _environment_restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Set environment variables for the block (None leaves a variable as it is)."""
    changed = {name: value for name, value in values.items() if value is not None}
    saved = {name: os.environ.get(name) for name in changed}
    os.environ.update(changed)
    try:
        yield
    finally:
        for name, value in saved.items():
            _environment_restore(name, value)


# --- checking a cache without compiling -------------------------------------------


class _Probe(Exception):
    """Raised from Triton's cache-miss hook to stop it after we learned the cache key."""

    def __init__(self, location: "EntryLocation"):
        self.location = location


@dataclass(frozen=True)
class EntryLocation:
    """Where Triton's cache keeps a key's binary: its folder (Triton's cache key) and
    group name, and the source Triton would compile (which keys its host launcher)."""

    folder: str
    group_name: str
    source: Any


def entry_location(kernel: JitKernel, key: Any, target: str) -> EntryLocation | None:
    """Where ``key``'s binary for ``target`` lives in Triton's cache; compiles nothing.

    Runs the kernel's warmup through Triton's own binding and specialisation, and stops
    it in the cache-miss hook: there Triton hands over the signature, constants and
    options it would compile with, from which the on-disk cache key follows exactly as
    ``triton.compile`` computes it. None when nothing would compile (the interpreter).
    Raises ``LookupError`` (one line) for a key that fails before that lookup (Triton's
    check of ``num_warps``, a launcher's ``TypeError``): it has no entry, and the other
    keys' checks and lock go on without it.
    """
    with compile_only(parse_target(target)), hooks.watching(on_cache_miss=_probe_cache), \
            _fresh_in_process_cache(kernel):
        try:
            kernel.compile(key)
        except _Probe as probe:
            return probe.location
        except Exception as error:
            raise LookupError(f"cannot be compiled: {_one_error(error).splitlines()[0]}") from None
    return None


def entry_files(kernel: JitKernel, key: Any, target: str, verified: bool = True) -> dict[str, dict[str, str]]:
    """Every cache file that loading ``key`` reads, by entry folder: the binary's entry
    and its host C modules (launcher, ``cuda_utils``, the direct launch's), each checked
    as a serving process checks it: whole and (``verified``) matching the trusted lock.
    ``verified=False`` is for the warmup that locks its own cache. Raises ``LookupError``
    naming the file and what is wrong with it."""
    location = entry_location(kernel, key, target)
    if location is None:
        return {}
    state = lookup_entry(location.folder, location.group_name, verified)
    if not state.usable:
        raise LookupError(state.problem)
    files = {location.folder: dict(state.files)}
    with open(state.files[location.group_name]) as file:
        metadata = json.load(file)
    if metadata.get("target", {}).get("backend") == "cuda":
        for c_source, name in ((launcher_source(location.source, metadata.get("tensordesc_meta")), "__triton_launcher"),
                               (cuda_utils_source(), "cuda_utils"), (c_launch.SOURCE, c_launch.NAME)):
            folder, filename = host_module_entry(c_source, name)
            path, problem = lookup_file(folder, filename, verified)
            if path is None:
                raise LookupError(f"its host module {filename} ({folder}) is not in the cache" if problem == MISSING
                                  else f"its host module in {folder}: {problem}")
            files[folder] = {filename: path}
    return files


def _probe_cache(*, fn, compile, **_: Any) -> None:
    raise _Probe(_entry_location(fn.jit_function, compile))


def _entry_location(jit_function, compile: dict) -> EntryLocation:
    """Mirror ``triton.compile``'s cache lookup for what the hook says it would build."""
    from triton.compiler.compiler import ASTSource, get_cache_invalidating_env_vars, make_backend
    from triton.runtime.cache import _base32, get_cache_key
    from triton.runtime.driver import driver

    backend = make_backend(driver.active.get_current_target())
    options = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in json.loads(compile["specialization_data"])["options"].items()
    }
    src = ASTSource(jit_function, compile["signature"], compile["constants"], compile["configs"][0])
    options = backend.parse_options(dict(options, **src.parse_options()))
    cache_key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    folder = _base32(hashlib.sha256(cache_key.encode("utf-8")).hexdigest())
    return EntryLocation(folder, f"{src.name[:150]}.json", src)


@contextlib.contextmanager
def _fresh_in_process_cache(kernel: JitKernel) -> Iterator[None]:
    """Hide the kernel's in-process binaries so the probe always reaches the cache."""
    jit_function = getattr(kernel, "kernel", None)
    if jit_function is None or not hasattr(jit_function, "device_caches"):
        yield
        return
    saved = jit_function.device_caches
    from collections import defaultdict

    jit_function.device_caches = defaultdict(jit_function.create_binder)
    try:
        yield
    finally:
        jit_function.device_caches = saved


def tasks_for(entries: Iterable[tuple[str, Any]], targets: list[str]) -> list[CompileTask]:
    """One task per (kernel, key) and target, duplicates dropped, order kept."""
    return list(dict.fromkeys(CompileTask(name, key, target) for target in targets for name, key in entries))


def default_jobs() -> int:
    return os.cpu_count() or 1


__all__ = ["CompileOutcome", "CompileTask", "compile_task", "compile_tasks", "entry_files", "tasks_for",
           "default_jobs", "COMPILED", "CACHED", "FAILED"]
