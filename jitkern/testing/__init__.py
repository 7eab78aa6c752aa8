"""Test helpers: prove that launches hit warmed binaries.

- ``assert_no_compile()`` fails (on exit) if anything inside it compiled afresh or a
  launch missed the binaries already in the process, naming kernel and key.
- ``record_launches()`` collects every launch's kernel and ``LaunchSpec``, optionally
  without running anything (``dry_run``), so tests can compare the keys serving uses
  with the keys a manifest enumerates.
- ``uncovered_by_warmup()`` checks the same at Triton's level: the binary a real launch
  would look up is one warmup built.
- ``check_launcher()`` runs a kernel's launcher on real CPU tensors and fails one that
  does torch work, reads device memory or calls Triton's ``cdiv`` (``jitkern.testing.launchers``).
- ``check_coverage()`` draws launches from a deployment's layout domain (hypothesis) and
  checks each the same way (``jitkern.testing.coverage``).
- ``DryRunDriver``: Triton's whole launch path on a machine with no GPU, launching
  nothing (for testing hooks and launch paths in CI).
- ``check_op()``: torch's ``opcheck`` of the op a public function's call takes;
  ``op_call()``, that op and its arguments (``jitkern.testing.ops``).
- ``quick_interpreter()``: Triton's interpreter without two of its repeated costs: a
  kernel's ``tl.reduce`` combines whole blocks, not element by element, and the language's
  builtins are listed once (``jitkern.testing.interpreter``).

The pytest fixture ``assert_no_compile`` lives in the plugin package ``jitkern_pytest``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from jitkern import hooks
from jitkern.guard import describe_miss
from jitkern.kernel.base import TritonJitKernel
from jitkern.kernel.recording import record_launches
from jitkern.launch.spec import LaunchSpec
from jitkern.layouts import specialisation
from jitkern.layouts.binary_key import BinaryKey
from jitkern.testing.coverage import check_coverage, warmed_lookup_key
from jitkern.testing.dry_run import DryRunDriver, dry_run_gpu
from jitkern.testing.launchers import LauncherRuleBroken, check_launcher
from jitkern.testing.ops import OPCHECK_TESTS, check_op, op_call
from jitkern.testing.interpreter import quick_interpreter

__all__ = ["OPCHECK_TESTS", "DryRunDriver", "LauncherRuleBroken", "UnexpectedCompile", "assert_no_compile",
           "check_coverage", "check_launcher", "check_op", "dry_run_gpu", "missing_from", "op_call", "quick_interpreter",
           "record_launches", "triton_lookup_key", "uncovered_by_warmup", "warmed_lookup_key"]


class UnexpectedCompile(AssertionError):
    pass


@contextlib.contextmanager
def assert_no_compile() -> Iterator[list[str]]:
    """Fail if a launch of a jitkern kernel inside the block misses the warmed binaries, or
    anything compiles (a plain Triton kernel's binary found in a cache is no compile).

    Under ``TRITON_INTERPRET=1`` nothing compiles, so nothing can fail here. A compiled
    graph's first call compiles the graph (Inductor's own Triton kernels too): make it
    before the block.
    """
    problems: list[str] = []

    def on_cache_miss(*, fn, is_manual_warmup: bool, **_: Any) -> None:
        what, entry = describe_miss(fn)
        if entry is None:  # a plain Triton kernel: found in a cache, or compiled (on_compile)
            return
        kind = "warmup of" if is_manual_warmup else "launch missed the warmed binaries:"
        problems.append(f"{kind} {what}")

    def on_compile(*, src, cache_hit: bool, **_: Any) -> None:
        if not cache_hit:
            problems.append(f"fresh compile of {getattr(src, 'name', src)}")

    with hooks.watching(on_compile=on_compile, on_cache_miss=on_cache_miss):
        yield problems
    if problems:
        raise UnexpectedCompile(f"{len(problems)} compile(s) where none was expected:\n  " + "\n  ".join(problems))


def missing_from(launches, keys_by_kernel: dict[str, list[BinaryKey]]) -> list[str]:
    """Launches whose binary key no manifest enumerates, described for an assertion message."""
    known = {name: set(keys) for name, keys in keys_by_kernel.items()}
    missing = []
    for kernel, spec in launches:
        binary = kernel.layouts.binary_key(spec)
        if binary not in known.get(kernel.name, ()):
            missing.append(_describe_miss(kernel, binary, keys_by_kernel.get(kernel.name, ())))
    return list(dict.fromkeys(missing))


def _describe_miss(kernel: TritonJitKernel, binary: BinaryKey, warmed: Any) -> str:
    """The binary, and why it is not among the ``warmed`` binary keys."""
    return f"{kernel.describe(binary)}: {kernel.layouts.explain(binary, warmed)}"


def triton_lookup_key(kernel: TritonJitKernel, spec: LaunchSpec) -> str:
    """The key under which Triton looks up this launch's binary in the process (within
    ``dry_run_gpu()`` or ``compile_only(target)`` on a machine with no GPU)."""
    return specialisation.triton_lookup_key(kernel.kernel, kernel.triton_kwargs(spec))


def uncovered_by_warmup(launches, keys_by_kernel: dict[str, list[BinaryKey]]) -> list[str]:
    """Launches whose Triton binary is not among those that warming the keys builds, each
    with the argument that differs from the warmed binaries of its compile key.

    Compiles nothing: names each warmed binary by the key Triton's binder gives its stand-ins
    (``warmed_lookup_key``), as a compile files it, and asks Triton which binary each
    recorded launch would look up (use under ``compile_only(target)`` or ``dry_run_gpu()``).
    """
    uncovered = []
    warmed: dict[str, set[str]] = {}
    for kernel, spec in launches:
        if kernel.name not in warmed:
            warmed[kernel.name] = {warmed_lookup_key(kernel, key) for key in keys_by_kernel.get(kernel.name, ())}
        lookup_key = triton_lookup_key(kernel, spec)
        if lookup_key not in warmed[kernel.name]:
            miss = _describe_miss(kernel, kernel.layouts.binary_key(spec), keys_by_kernel.get(kernel.name, ()))
            uncovered.append(f"{miss} (Triton key {lookup_key})")
    return list(dict.fromkeys(uncovered))
