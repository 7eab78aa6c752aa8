"""Triton's objects for a remembered binary, made without Triton's front end."""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import types
from typing import Any, Iterator


def compiled_kernel(src: Any, record: dict, files: dict[str, str]) -> Any:
    """The ``CompiledKernel`` that Triton's ``__init__`` makes of an entry's metadata and
    binary files (``files``), with the metadata and what the backend packs of it taken as
    the memo recorded them, not read, parsed and packed again (most of the time the
    ``__init__`` took). The memo's writer checked, per binary, that both make the same
    object; the loader, that the files are those recorded."""
    from triton.compiler.compiler import AsmDict, CompiledKernel, GPUTarget

    fields = dict(record["metadata_fields"])
    target = fields["target"]
    fields["target"] = GPUTarget(target["backend"], target["arch"], target["warp_size"])
    names = sorted(fields)
    kernel = CompiledKernel.__new__(CompiledKernel)
    kernel.metadata = collections.namedtuple("KernelMetadata", names)._make([fields[name] for name in names])
    kernel.packed_metadata = record["packed"]
    kernel.src, kernel.hash, kernel.name = src, record["hash"], kernel.metadata.name
    with open(files[record["binary"]], "rb") as file:
        kernel.kernel = file.read()
    kernel.asm = AsmDict({os.path.splitext(record["binary"])[1][1:]: kernel.kernel})  # {"cubin": ...}
    kernel.metadata_group = files
    kernel.module = kernel.function = kernel._run = None
    return kernel


def _as_imported(module: types.ModuleType) -> types.ModuleType:
    """A new module object holding what ``module`` holds now.

    Every launcher is the extension module ``__triton_launcher``, of single-phase init.
    CPython imports a file of it loaded before in the process (by an earlier ``load()``
    or launch) into the one module object ``sys.modules`` holds under that name, its
    attributes replaced by the file's: the object Triton returned for one source shows
    another launcher's ``launch`` once another file is imported again. Triton reads
    ``launch`` at once; an object kept for later must not change."""
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(vars(module))
    return copy


@contextlib.contextmanager
def sharing_identical_work() -> Iterator[None]:
    """Within the block, what Triton makes for each binary alike is made once.

    - ``CompiledKernel`` makes a ``namedtuple`` class for each binary's metadata (about a
      third of the time taking a binary took): one class per name and fields here. The
      classes would differ only in identity, which nothing compares.
    - Each launcher looks its C module up by the sha256 of its source, in the cache (which
      reads the module whole, to check it against the lock) and imports it: one lookup per
      source here, kept as what the module holds when it is imported (``_as_imported``).
    - CUDA's launcher writes that C source from the binary's argument types alone
      (``make_launcher`` ignores the constants' values): once per signature here, not per
      binary (the 293 shipped binaries have 45 signatures).
    """
    from triton.runtime import build

    original_namedtuple, original_module = collections.namedtuple, build.compile_module_from_src
    classes: dict[tuple, type] = {}
    modules: dict[tuple, Any] = {}
    sources: dict[str, str] = {}
    cuda_driver = sys.modules.get("triton.backends.nvidia.driver")
    original_source = getattr(cuda_driver, "make_launcher", None)

    def namedtuple(typename, field_names, **options):
        key = (typename, tuple(field_names), tuple(sorted(options.items())))
        if key not in classes:
            classes[key] = original_namedtuple(typename, field_names, **options)
        return classes[key]

    def compile_module_from_src(src, name, library_dirs=None, include_dirs=None, libraries=None, ccflags=None):
        key = (src, name, *(tuple(value or ()) for value in (library_dirs, include_dirs, libraries, ccflags)))
        if key not in modules:
            modules[key] = _as_imported(original_module(src, name, library_dirs, include_dirs, libraries, ccflags))
        return modules[key]

    def make_launcher(constants, signature, tensordesc_meta):
        key = repr((list(signature.items()), tensordesc_meta))
        if key not in sources:
            sources[key] = original_source(constants, signature, tensordesc_meta)
        return sources[key]

    users = [module for name, module in list(sys.modules.items())  # the backends' drivers import it by name
             if name.startswith("triton.") and getattr(module, "compile_module_from_src", None) is original_module]
    collections.namedtuple = namedtuple
    for module in users:
        module.compile_module_from_src = compile_module_from_src
    if original_source is not None:
        cuda_driver.make_launcher = make_launcher
    try:
        yield
    finally:
        collections.namedtuple = original_namedtuple
        for module in users:
            module.compile_module_from_src = original_module
        if original_source is not None:
            cuda_driver.make_launcher = original_source
