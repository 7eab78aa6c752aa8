"""Two test modes, because Triton fixes its mode when kernels are decorated.

- Default: kernels run on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``,
  set here before any test module imports a kernel). Tests marked ``compiled`` are
  deselected.
- ``JITKERN_TEST_MODE=compiled``: only tests marked ``compiled`` run; they compile for
  ``cuda:90`` with no GPU (and "launch" through ``jitkern.testing.DryRunDriver``).
  ``tests/test_compiled_mode.py`` starts that run in a subprocess, so one ``pytest``
  command runs both.
"""

import os
import random

import pytest

COMPILED_MODE = os.environ.get("JITKERN_TEST_MODE") == "compiled"
os.environ["TRITON_INTERPRET"] = "0" if COMPILED_MODE else os.environ.get("TRITON_INTERPRET", "1")

import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled: compiles for cuda:90 (runs in the compiled-mode subprocess)")


def pytest_collection_modifyitems(config, items):
    selected = [item for item in items if (item.get_closest_marker("compiled") is not None) == COMPILED_MODE]
    deselected = [item for item in items if item not in selected]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(autouse=True)
def _seed_random_generators():
    """Fresh random inputs each run; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("JITKERN_TEST_SEED", random.randrange(2**31)))
    print(f"JITKERN_TEST_SEED={seed}")
    random.seed(seed)
    torch.manual_seed(seed)
    yield


@pytest.fixture
def triton_cache(tmp_path, monkeypatch):
    """A private, empty Triton cache directory for the test."""
    cache = tmp_path / "triton-cache"
    cache.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def dry_run_gpu(triton_cache):
    """Compile for cuda:90 and run Triton's launch path without a GPU, starting with
    no binaries in the process (so what one test compiled does not hide another's miss)."""
    from jitkern import registry
    from jitkern.testing import dry_run_gpu

    for name in registry.kernel_names():
        registry.get_kernel(name).forget_binaries()
    with dry_run_gpu("cuda:90"):
        yield
