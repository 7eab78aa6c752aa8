"""``load()`` remembered per deployment: a restarted serving process skips Triton's front end.

Loading a warmed binary through Triton (``JITFunction.warmup``) binds stand-in arguments,
imports Gluon for its specialiser, rebuilds the binary's cache key and reads every file
of its entry (the binary, its metadata, any IR); jitkern then generates and compiles the
binary's direct launch. About 4 ms a binary, over 1 s for a deployment of 300. What that
work finds depends only on the deployment: the manifests, the code of jitkern and of the
kernels, Triton's build, this GPU's target, the cache's roots and the settings. So the
first ``load()`` of a deployment records, per binary, its kernel, key and layout, the
Triton cache entry it came from, the specialisation Triton compiled it for (the
``ASTSource``'s signature, constexprs and attributes) and its direct launch's recipe
with the compiled code; per key of several layouts, its layout picker. A later process
whose deployment has the same **fingerprint** takes each entry straight from the cache,
checked as the cache manager checks every entry (whole, and matching the trusted lock
when one is pinned), builds Triton's own ``CompiledKernel`` from its binary and the
metadata the memo recorded, and binds the recorded direct launch to it.

Each kernel's Triton key (settled at import: its source, its helpers' and the values of
the ``constexpr`` globals they read) must also be the one recorded, and each key's
constexprs and launch options (``constants(key)``, which may read anything: a tuning
table in another module) exactly those recorded with its binaries, value and type, or
the process takes the full path.

The fingerprint is a sha256 of each manifest's path and bytes, ``triton_key()``, the
target and the number of GPUs, Triton's cache-invalidating settings and every
``TRITON_*`` variable, the files of Triton's bundled tools (``ptxas``), the cache
directory and cache wheels, jitkern's settings and the Python and torch versions. The
memo also lists the source files of every module loaded from jitkern's and the kernels'
packages, with each file's size, times, inode and device (as ``jitkern.memo``
does for Triton): an edited file, even rewritten in place, sends the process down the
full path, which records the new answer. So does anything the memo cannot vouch for: an
entry missing or damaged, a memo not this user's own (it holds compiled Python code, as
``__pycache__`` does), a user's own cache manager, a stage-inspection hook, a binary
without a direct launch, ``JITKERN_LOAD_MEMO=0``.

Triton's in-memory cache of the ``JITFunction`` does not hold a binary taken this way,
so a launch that falls back to Triton's own path reads the entry from the cache once (it
never compiles: the entry is there). ``CompiledKernel.asm`` holds the binary only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import os
import sys
import tempfile
import time
from typing import Any

import torch

from jitkern import settings
from jitkern.cache.manager import JitkernCacheManager, lookup_entry
from jitkern.cache.roots import read_roots
from jitkern.kernel import registry
from jitkern.launch.direct import known_code
from jitkern.layouts.binary_key import BinaryKey
from jitkern.layouts.domains import LayoutDomain
from jitkern.layouts.values import ValueDomain
from jitkern.memo import file_stats, triton_root
from jitkern.targets import gpu_name
from jitkern.serve.compiled import compiled_kernel, sharing_identical_work

FORMAT = 5
MEMO_FOLDER = "loads"
MAX_MEMOS = 32  # deployments remembered per machine; the oldest memo is dropped


class NotRemembered(Exception):
    """A value the memo cannot write down exactly: that deployment is not remembered."""


# --- the deployment's fingerprint ----------------------------------------------------


def deployment_fingerprint(manifest_paths: list[str]) -> str | None:
    """sha256 of what decides which binaries ``load()`` finds (see the module docstring);
    None when this process cannot be remembered (a user's cache manager, a hook)."""
    import triton
    from triton.compiler.compiler import get_cache_invalidating_env_vars
    from triton.runtime.cache import triton_key
    from triton.runtime.driver import driver

    if triton.knobs.runtime.add_stages_inspection_hook is not None:
        return None
    if triton.knobs.cache.manager_class is not JitkernCacheManager:
        return None
    target = driver.active.get_current_target()
    parts: dict[str, Any] = {
        "format": FORMAT,
        "manifests": [[os.path.abspath(path), _file_digest(path)] for path in manifest_paths],
        "triton": triton_key(),
        "target": [target.backend, target.arch, target.warp_size, type(driver.active).__qualname__,
                   torch.cuda.device_count() if torch.cuda.is_available() else 0, gpu_name()],  # tables are per GPU
        "triton_settings": sorted(get_cache_invalidating_env_vars().items()),
        "triton_environment": sorted((name, value) for name, value in os.environ.items() if name.startswith("TRITON_")),
        "tools": file_stats(sorted(_bundled_tools(triton_root()))),
        "roots": read_roots(),
        "jitkern": repr(settings.current()),
        "versions": [sys.version, torch.__version__, triton.__version__],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _file_digest(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def _bundled_tools(root: str) -> list[str]:
    """Triton's bundled compiler tools (``backends/*/bin``, ``ptxas`` among them): their
    version is part of every cache key Triton makes."""
    backends = os.path.join(root, "backends")
    found = []
    for backend in os.listdir(backends) if os.path.isdir(backends) else ():
        folder = os.path.join(backends, backend, "bin")
        if os.path.isdir(folder):
            found += [os.path.join(folder, name) for name in os.listdir(folder)]
    return found


def code_files(kernels: list[Any]) -> list[str]:
    """The source files of every loaded module of jitkern's package and of the packages
    the ``kernels``' classes and ``@triton.jit`` functions live in."""
    packages = {"jitkern"}
    for kernel in kernels:
        packages.add(type(kernel).__module__.partition(".")[0])
        packages.add(getattr(getattr(kernel, "kernel", None), "__module__", "jitkern").partition(".")[0])
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.partition(".")[0] in packages:
            files.add(os.path.abspath(path))
    return sorted(files)


# --- the memo ---------------------------------------------------------------------------


def memo_path(fingerprint: str) -> str:
    return os.path.join(settings.current().state_dir, MEMO_FOLDER, f"{fingerprint}.memo")


def read_memo(fingerprint: str) -> dict | None:
    """The memo of this deployment, when it is this user's own and writable by no one else
    (it holds compiled code) and every code file it lists is unchanged."""
    try:
        with open(memo_path(fingerprint), "rb") as file:
            status = os.fstat(file.fileno())
            if status.st_uid != os.getuid() or status.st_mode & 0o022:
                return None
            memo = marshal.loads(file.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(memo, dict) or memo.get("format") != FORMAT:
        return None
    if any(file_stats([entry[0] for entry in memo[files]]) != memo[files] for files in ("code", "tables")):
        return None
    return memo


def write_memo(fingerprint: str, modules: list[str], kernels: dict[str, Any],
               loaded: list[tuple[str, BinaryKey, Any]], tables: list[str] = (), tuning_lines: list[str] = ()) -> bool:
    """Record what ``load()`` took: the kernels' ``modules``, each binary (kernel name,
    binary key, Triton's binary) with its direct launch's recipe and code, each key's
    layout picker, and each tuned kernel's winners, with the stats of the table files that
    gave them (``tables``, there or not: a table written since sends a load down the full
    path) and what ``load()`` said of them. Whether it did: nothing is written when a
    value cannot be (a binary without a direct launch, a key field of a class ``marshal``
    does not keep). Written atomically, readable by this user only."""
    try:
        binaries = [_binary_record(name, binary_key, binary, kernels[name]) for name, binary_key, binary in loaded]
        pickers = [(name, _encode_key(key), recipe, layouts)
                   for name, kernel in kernels.items() for key, recipe, layouts in kernel.binaries.pickers()]
        recipes = [record["recipe"] for record in binaries] + [recipe for _, _, recipe, _ in pickers]
        sources = {recipe["source"]: recipe["source"] for recipe in recipes}
        for recipe in recipes:  # one object per source text, which marshal then writes once
            recipe["source"] = sources[recipe["source"]]
        memo = {"format": FORMAT, "code": file_stats(code_files(list(kernels.values()))), "modules": list(modules),
                "triton_keys": {name: kernel.kernel.cache_key for name, kernel in kernels.items()},
                "binaries": binaries, "pickers": pickers, "compiled": known_code(list(sources)),
                "declared": {name: _encode_declared(kernel) for name, kernel in kernels.items()},
                "tables": file_stats(list(tables)), "tuning_lines": list(tuning_lines),
                "winners": {name: (list(kernel.winners.rows.items()), kernel.winners.source)
                            for name, kernel in kernels.items() if getattr(kernel, "winners", None) is not None}}
        data = marshal.dumps(memo)
    except (NotRemembered, ValueError):
        return False
    path = memo_path(fingerprint)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".load.", dir=os.path.dirname(path))  # mode 0600
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
        _drop_oldest(os.path.dirname(path))
    except OSError:
        return False  # a read-only home: the next process takes the full path again
    return True


def _drop_oldest(folder: str) -> None:
    memos = sorted((entry.stat().st_mtime_ns, entry.path) for entry in os.scandir(folder)
                   if entry.name.endswith(".memo"))
    for _, path in memos[:-MAX_MEMOS]:
        os.remove(path)


def _binary_record(name: str, binary_key: BinaryKey, binary: Any, kernel: Any) -> dict:
    from triton.compiler.compiler import CompiledKernel, make_backend

    if not isinstance(binary, CompiledKernel) or not hasattr(kernel, "binaries"):
        raise NotRemembered(name)  # a kernel of another kind than TritonJitKernel
    src, group = binary.src, binary.metadata_group
    metadata = next((file for file in group if file.endswith(".json")), "")
    binary_file = f"{os.path.splitext(metadata)[0]}.{make_backend(binary.metadata.target).binary_ext}"
    direct = kernel.binaries.direct_of(binary_key)
    if binary_file not in group or getattr(src, "fn", None) is not kernel.kernel or direct is None \
            or direct.binary is not binary:  # a launch built for another binary: its arguments are not this one's
        raise NotRemembered(name)
    stats = _entry_stats(group, metadata)  # before the metadata is read: a later rewrite changes them
    with open(group[metadata]) as file:
        fields = json.load(file)
    record = {
        "kernel": name, "key": _encode_key(binary_key.key), "layout": binary_key.layout,
        "hash": binary.hash, "folder": os.path.basename(os.path.dirname(group[metadata])),
        "metadata": metadata, "binary": binary_file, "metadata_fields": fields, "packed": binary.packed_metadata,
        "signature": src.signature, "constexprs": src.constants, "attrs": src.attrs, "recipe": direct.recipe,
        "files": dict(group), "stats": stats, "constants": _exact_constants(kernel.constants_for(binary_key.key)),
    }
    two_files = {file: group[file] for file in (metadata, binary_file)}
    made, by_triton = compiled_kernel(src, record, two_files), CompiledKernel(src, two_files, binary.hash)
    if vars(made) != vars(by_triton) or made.metadata._fields != by_triton.metadata._fields:
        raise NotRemembered(name)  # another Triton, whose CompiledKernel holds more than ours makes
    if marshal.loads(marshal.dumps(record)) != record:
        raise NotRemembered(name)
    return record


def _entry_stats(files: dict[str, str], metadata: str) -> list[tuple]:
    """The stat fingerprints of a cache entry's group file and files. Equal to those of an
    entry the cache manager checked whole (and against the trusted lock, which the
    deployment's fingerprint names), the files are the ones it checked: a file replaced or
    rewritten in place changes its inode or ctime."""
    folder = os.path.dirname(files[metadata])
    return file_stats([os.path.join(folder, f"__grp__{metadata}"), *sorted(files.values())])


def _exact_constants(constants: dict[str, Any]) -> tuple:
    """A key's constexprs and launch options (``constants_for``), each value with its type:
    Triton compiles 1, True and 1.0 (or 0.0 and -0.0) as other binaries, which ``==`` would
    take for one. ``NotRemembered`` for a value ``marshal`` does not keep exactly."""
    return tuple((name, _exact(constants[name])) for name in sorted(constants))


def _exact(value: Any) -> tuple:
    if type(value) in (tuple, list):
        return type(value).__name__, tuple(_exact(item) for item in value)
    if type(value) in (type(None), bool, int, float, complex, str, bytes):
        return type(value).__name__, repr(value)
    raise NotRemembered(repr(value))


def _encode_declared(kernel: Any) -> dict[str, list[tuple]]:
    """The value domains the kernel's deployment declares (``KernelLayouts.declared``), as tuples."""
    return {name: [(domain.values, domain.low, domain.high, domain.multiple_of) for domain in domains]
            for name, domains in kernel.layouts.declared.items()}


def _encode_key(key: Any) -> tuple:
    """A compile key's fields as values ``marshal`` keeps exactly (a dtype by its name)."""
    fields = tuple((field.name, *_encode_field(getattr(key, field.name))) for field in dataclasses.fields(key))
    if _decode_key(type(key), fields) != key:
        raise NotRemembered(repr(key))
    return fields


def _encode_field(value: Any) -> tuple[str, Any]:
    return ("dtype", str(value).removeprefix("torch.")) if isinstance(value, torch.dtype) else ("value", value)


def _decode_key(key_class: type, fields: tuple) -> Any:
    return key_class(**{name: getattr(torch, value) if kind == "dtype" else value for name, kind, value in fields})


# --- loading from the memo ------------------------------------------------------------


def load_remembered(memo: dict) -> dict[str, tuple[int, float]] | None:
    """Load every binary of ``memo`` into its kernel: ``{kernel: (binaries, seconds)}``, or
    None, having loaded nothing, when an entry is not usable (the full path reports it)."""
    from triton.compiler.compiler import ASTSource, CompiledKernel

    registry.import_modules(memo["modules"])
    if any(registry.get_kernel(name).kernel.cache_key != key for name, key in memo["triton_keys"].items()):
        return None  # a global constexpr of another value (read from the environment, say): other binaries
    kernels = {name: registry.get_kernel(name) for name in dict.fromkeys(record["kernel"] for record in memo["binaries"])}
    for name, (rows, source) in memo["winners"].items():  # before any key is dispatched
        kernels[name].winners.take(dict(rows), source)
    constants_now: dict[tuple, tuple] = {}  # (kernel, encoded key) -> the key, its constants now
    found = []  # (record, its compile key, the entry's files, whether they are those recorded)
    for record in memo["binaries"]:
        key = _key_with_recorded_constants(kernels[record["kernel"]], record, constants_now)
        if key is None:
            return None  # constants(key) reads something that changed (a tuning table): another binary
        if _entry_stats(record["files"], record["metadata"]) == record["stats"]:  # as checked when recorded
            found.append((record, key, record["files"], True))
            continue
        state = lookup_entry(record["folder"], record["metadata"])
        if not state.usable:
            return None
        found.append((record, key, state.files, False))
    known_code(codes=memo["compiled"])
    loaded: dict[str, tuple[int, float]] = {}
    with sharing_identical_work():
        for record, key, files, as_recorded in found:
            start = time.perf_counter()
            kernel = kernels[record["kernel"]]
            src = ASTSource(kernel.kernel, record["signature"], record["constexprs"], record["attrs"])
            group = {name: files[name] for name in (record["metadata"], record["binary"])}
            binary = compiled_kernel(src, record, group) if as_recorded else CompiledKernel(src, group, record["hash"])
            kernel.binaries.adopt(BinaryKey(key, record["layout"]), binary, record["recipe"])
            binaries, seconds = loaded.get(record["kernel"], (0, 0.0))
            loaded[record["kernel"]] = (binaries + 1, seconds + time.perf_counter() - start)
    for name, declared in memo["declared"].items():
        kernels[name].layouts.declare(LayoutDomain(values={field: ValueDomain(*domain)})
                                      for field, domains in declared.items() for domain in domains)
    for name, key, recipe, layouts in memo["pickers"]:
        kernels[name].binaries.adopt_picker(_decode_key(kernels[name].CompileKey, key), recipe, layouts)
    return loaded


def _key_with_recorded_constants(kernel: Any, record: dict, current: dict[tuple, tuple]) -> Any:
    """The record's compile key, when the kernel's ``constants(key)`` give now exactly what
    they gave for the recorded binary (they may read more than the code files the memo
    lists: a tuning table); else None. Each key's constants are computed once (``current``)."""
    memo_key = (record["kernel"], record["key"])
    if memo_key not in current:
        key = _decode_key(kernel.CompileKey, record["key"])
        try:
            current[memo_key] = key, _exact_constants(kernel.constants_for(key))
        except NotRemembered:
            current[memo_key] = key, None
    key, constants = current[memo_key]
    return key if constants == record["constants"] else None
