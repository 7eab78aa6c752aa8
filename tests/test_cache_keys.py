"""The Triton cache key of every shipped kernel, pinned in ``tests/cache_keys.json``.

A kernel's Triton cache key (``JITFunction.cache_key``) hashes the source of its
``@triton.jit`` function and of each helper it calls, each one's starting line, and the
constexpr globals they read. The entries of every cache built for a deployment are filed
under it, so a key that moves (an edit of a kernel or a helper, or of a line above one)
makes those caches miss. These tests say which kernels' keys moved, so that none moves by
accident; after a deliberate change, record the new keys (and rebuild the caches):

    python tests/test_cache_keys.py --update

The keys are computed with the interpreter off (the interpreter's functions have none):
the tests run in the compiled mode (``JITKERN_TEST_MODE=compiled``).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).with_name("cache_keys.json")
# importing them registers the kernels
MODULES = ("jitkern.examples.axpy", "jitkern.examples.grouped_gemm", "step5.ops.summary_update", "deepseek_v4")
PACKAGES = ("jitkern.examples", "step5", "deepseek_v4")  # where their kernel classes are defined
UPDATE = "python tests/test_cache_keys.py --update"
NOTE = ("The Triton cache key (JITFunction.cache_key) of each shipped kernel: its @triton.jit source and starting "
        f"line and its helpers'. tests/test_cache_keys.py fails when one changes; after a deliberate change: {UPDATE}")

pytestmark = pytest.mark.compiled


def shipped_cache_keys(modules=MODULES) -> dict[str, str]:
    """Kernel name -> Triton cache key, for each kernel class of ``PACKAGES``, once ``modules``
    are imported (in that order)."""
    from jitkern.kernel import registry

    for module in modules:
        importlib.import_module(module)
    kernels = {name: registry.get_kernel(name) for name in registry.kernel_names()}
    return {name: kernel.kernel.cache_key for name, kernel in kernels.items()
            if any(type(kernel).__module__ == package or type(kernel).__module__.startswith(package + ".")
                   for package in PACKAGES)}


def test_every_shipped_kernel_keeps_its_recorded_cache_key():
    recorded = json.loads(RECORD.read_text())["keys"]
    keys = shipped_cache_keys()
    changed = {name: ("new" if name not in recorded else "no longer shipped" if name not in keys else "changed")
               for name in sorted(recorded.keys() | keys.keys()) if recorded.get(name) != keys.get(name)}
    assert not changed, (
        "Triton cache keys moved: " + ", ".join(f"{name} ({how})" for name, how in changed.items())
        + f". Every cache built before misses these kernels. If the change is meant, record it: {UPDATE}")


OTHER_ORDER = """
import json, sys
sys.path.insert(0, {tests!r})
from deepseek_v4.kernels.decode_step import decode_step_kernel
from step5.ops.kernels.verify import update_verify_kernel
decode_step_kernel.cache_key, update_verify_kernel.cache_key  # hashed by Triton before their classes settle them
import test_cache_keys
print(json.dumps(test_cache_keys.shipped_cache_keys(reversed(test_cache_keys.MODULES))))
"""


def test_cache_keys_are_the_same_in_another_process_and_import_order():
    """A serving process imports and hashes kernels in its own order: it must find the keys
    warmup filed entries under (``jitkern.kernel.settle``)."""
    environment = dict(os.environ, TRITON_INTERPRET="0",
                       PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", OTHER_ORDER.format(tests=str(REPO / "tests"))], cwd=REPO,
                         env=environment, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.splitlines()[-1]) == shipped_cache_keys()


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print(f"usage: {UPDATE}  (records the Triton cache keys of the shipped kernels in {RECORD.name})")
        return 2
    os.environ["TRITON_INTERPRET"] = "0"  # before any kernel is decorated: the interpreter's have no key
    sys.path.insert(0, str(REPO))
    keys = dict(sorted(shipped_cache_keys().items()))
    RECORD.write_text(json.dumps({"note": NOTE, "keys": keys}, indent=2) + "\n")
    print(f"recorded {len(keys)} kernels' Triton cache keys in {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
