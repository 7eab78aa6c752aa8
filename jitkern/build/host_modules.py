"""The host C modules loading a binary needs, built into Triton's cache at warmup.

Triton 3.6 compiles, with the host C compiler, one launcher per kernel signature the
first time a process loads a binary, and its ``cuda_utils`` module once per process and
cache; the direct launch needs ``jitkern.launch.c_module``'s module, built the same way.
Their cache key is their C source and the platform, so modules built here are found on
the serving machine.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Any, Iterator

from jitkern.launch import c_module


def build_launcher(binary: Any) -> None:
    """Put the host C modules that loading the binary needs into Triton's cache too.

    Triton 3.6 compiles, with the host C compiler, one launcher per kernel signature the
    first time a process loads such a binary (about 0.3 s on the H200 machines), and its
    ``cuda_utils`` module once per process and cache (about 0.5 s): paid at warm start or
    on the first request; the direct launch needs ``jitkern.launch.c_module``'s module, built
    the same way. Their cache key is their C source and the platform, so modules built
    here are found there. With no GPU driver here, the link runs against a stub
    ``libcuda.so.1`` that names the library and defines nothing; the real driver resolves
    the symbols when the GPU process loads them (here the load itself fails, after the
    file is cached, and that is expected).
    """
    if binary.metadata.target.backend != "cuda":
        return
    import triton

    _build_host_module(launcher_source(binary.src, getattr(binary.metadata, "tensordesc_meta", None)),
                       "__triton_launcher")
    if stub_libcuda() is not None:  # on a GPU machine the driver has built cuda_utils already
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
    no driver here it is built by the stub's compiler too, whose builds are reproducible."""
    from triton.runtime.build import compile_module_from_src

    stub = stub_libcuda()
    with _environment(CC=stub.compiler if stub else None):
        compile_module_from_src(c_module.SOURCE, c_module.NAME)


def _build_host_module(c_source: str, name: str) -> None:
    from triton.backends.nvidia import driver as cuda_driver
    from triton.runtime.build import compile_module_from_src

    stub = stub_libcuda()
    if stub is not None and _host_module_cached(c_source, name):
        return  # loading it here would fail (no driver) and make Triton build it again
    try:
        with _environment(CC=stub.compiler if stub else None):
            compile_module_from_src(
                src=c_source, name=name, library_dirs=cuda_driver.library_dirs(),
                include_dirs=cuda_driver.include_dirs, libraries=cuda_driver.libraries,
            )
    except ImportError:
        if stub is None:
            raise


def _host_module_cached(c_source: str, name: str) -> bool:
    """Whether Triton's cache holds this C module."""
    import triton
    from triton.runtime.cache import FileCacheManager

    folder, filename = host_module_entry(c_source, name)
    return (triton.knobs.cache.manager_class or FileCacheManager)(folder).get_file(filename) is not None


@dataclass(frozen=True)
class _Stub:
    folder: str
    compiler: str  # the C compiler, told to keep libcuda.so.1 as a dependency


_stub: list[_Stub | None] = []


def stub_libcuda() -> _Stub | None:
    """A stub ``libcuda.so.1`` when this machine has no GPU driver, else None.

    The stub defines no CUDA function, so the linker would drop it from the
    launcher's dependencies (``--as-needed``) and the GPU process could not resolve the
    launcher's CUDA calls: the compiler wrapper passes ``--no-as-needed``. Triton writes
    each C source into a new temporary folder, whose path ``assert`` would put into the
    module (``__FILE__``), so two builds of one source differed (and so did the lock's
    digest): the wrapper maps that folder to ``.``.
    """
    if _stub:
        return _stub[0]
    import atexit
    import shutil
    import subprocess
    import tempfile

    import triton
    from triton.backends.nvidia import driver as cuda_driver

    try:
        cuda_driver.libcuda_dirs()
        _stub.append(None)
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
    # Its output in a pipe, not the terminal: a warmup interrupted here removes the folder
    # at exit while the compiler may still run, which should not print into the user's shell.
    built = subprocess.run([real_compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", library, source],
                           capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"{real_compiler} could not build the stub libcuda.so.1: {built.stderr.strip()}")
    previous = os.environ.get("TRITON_LIBCUDA_PATH")
    triton.knobs.nvidia.libcuda_path = folder
    # Setting the knob also exports TRITON_LIBCUDA_PATH; a child process (a warmup run
    # from a test, say) would then take the stub for a real driver.
    _environment_restore("TRITON_LIBCUDA_PATH", previous)
    _stub.append(_Stub(folder, compiler))
    return _stub[0]


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
