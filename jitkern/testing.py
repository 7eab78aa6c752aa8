"""Test helpers: prove that launches hit warmed binaries.

``assert_no_compile()`` fails (on exit) if anything inside it compiled afresh or a
launch missed the binaries already in the process, naming kernel and key.
``record_launches()`` collects every launch's kernel and ``LaunchSpec``, so tests can
check the keys serving uses against the keys a manifest enumerates.

Also a pytest plugin (entry point ``jitkern``): the fixture ``assert_no_compile`` runs
the test body inside ``assert_no_compile()``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import pytest

from jitkern import hooks
from jitkern.guard import describe_miss
from jitkern.kernel import LaunchSpec, TritonJitKernel, launch_observers


class UnexpectedCompile(AssertionError):
    pass


@contextlib.contextmanager
def assert_no_compile() -> Iterator[list[str]]:
    """Fail if a launch inside the block misses the warmed binaries or compiles.

    Under ``TRITON_INTERPRET=1`` nothing compiles, so nothing can fail here.
    """
    problems: list[str] = []

    def on_cache_miss(*, fn, is_manual_warmup: bool, **_: Any) -> None:
        what, _entry = describe_miss(fn)
        kind = "warmup of" if is_manual_warmup else "launch missed the warmed binaries:"
        problems.append(f"{kind} {what}")

    def on_compile(*, src, cache_hit: bool, **_: Any) -> None:
        if not cache_hit:
            problems.append(f"fresh compile of {getattr(src, 'name', src)}")

    with hooks.watching(on_compile=on_compile, on_cache_miss=on_cache_miss):
        yield problems
    if problems:
        raise UnexpectedCompile(f"{len(problems)} compile(s) where none was expected:\n  " + "\n  ".join(problems))


@contextlib.contextmanager
def record_launches() -> Iterator[list[tuple[TritonJitKernel, LaunchSpec]]]:
    """Collect ``(kernel, spec)`` for every launch made inside the block."""
    launches: list[tuple[TritonJitKernel, LaunchSpec]] = []

    def observe(kernel: TritonJitKernel, spec: LaunchSpec) -> None:
        launches.append((kernel, spec))

    launch_observers.append(observe)
    try:
        yield launches
    finally:
        launch_observers.remove(observe)


def missing_from(launches, keys_by_kernel: dict[str, list[Any]]) -> list[str]:
    """Launches whose key no manifest enumerates, described for an assertion message."""
    missing = []
    for kernel, spec in launches:
        if spec.key not in set(keys_by_kernel.get(kernel.name, ())):
            missing.append(kernel.describe(spec.key))
    return list(dict.fromkeys(missing))


@pytest.fixture(name="assert_no_compile")
def _assert_no_compile_fixture():
    """Run the test body inside ``assert_no_compile()``."""
    with assert_no_compile() as problems:
        yield problems
