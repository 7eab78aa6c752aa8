"""Test modes, because Triton fixes its mode when kernels are decorated.

- Default: kernels run on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``,
  set here before any test module imports a kernel). Tests marked ``compiled`` or
  ``gpu`` are deselected.
- ``JITKERN_TEST_MODE=compiled``: only tests marked ``compiled`` run; they compile for
  ``cuda:90`` with no GPU (and "launch" through ``jitkern.testing.DryRunDriver``).
  ``tests/test_compiled_mode.py`` starts that run in a subprocess, so one ``pytest``
  command runs both.
- ``JITKERN_TEST_MODE=gpu`` (on a machine with a GPU): the same reference tests as the
  default mode, on CUDA tensors (torch's default device) with compiled kernels, plus the
  tests marked ``gpu`` (CUDA graphs, no compiles after warmup).
"""

import os
import random
import sys
from pathlib import Path

import pytest

MODE = os.environ.get("JITKERN_TEST_MODE", "interpret")
if MODE not in ("interpret", "compiled", "gpu"):
    raise ValueError(f"JITKERN_TEST_MODE={MODE!r}: expected interpret, compiled or gpu")
COMPILED_MODE = MODE == "compiled"
os.environ["TRITON_INTERPRET"] = "1" if MODE == "interpret" else "0"
# Bytecode written, whatever the environment says: the tests start many Python processes,
# and each would compile the sources of torch and of jitkern again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import torch  # noqa: E402

if MODE == "gpu":
    torch.set_default_device("cuda")


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled: compiles for cuda:90 (runs in the compiled-mode subprocess)")
    config.addinivalue_line("markers", "gpu: needs a GPU (JITKERN_TEST_MODE=gpu)")


def _runs_in_this_mode(item) -> bool:
    compiled, gpu = item.get_closest_marker("compiled"), item.get_closest_marker("gpu")
    if MODE == "compiled":
        return compiled is not None
    if compiled is not None:
        return False
    if MODE == "gpu":  # the compiled-mode subprocess is a CPU concern
        return item.path.name != "test_compiled_mode.py"
    return gpu is None


COMPILED_MODE_RUN = Path(__file__).with_name("test_compiled_mode.py")


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(session, config, items):
    """Keep this mode's tests. In the default mode, the compiled tests of the files
    collected run in a subprocess (``tests/test_compiled_mode.py``), whose test is added
    when those files were named alone: a file run alone runs all of its CPU modes."""
    selected = [item for item in items if _runs_in_this_mode(item)]
    deselected = [item for item in items if item not in selected]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
    if MODE != "interpret":
        return
    compiled = list(dict.fromkeys(str(item.path) for item in deselected if item.get_closest_marker("compiled")))
    config.stash[COMPILED_FILES] = compiled
    if compiled and not any(item.path == COMPILED_MODE_RUN for item in items):
        items.extend(pytest.Module.from_parent(session, path=COMPILED_MODE_RUN).collect())


COMPILED_FILES = pytest.StashKey[list]()
_compiled_mode_runs = []  # the module of tests/test_compiled_mode.py, once selected


def pytest_collection_finish(session):
    """The compiled-mode subprocess, when selected, starts now and runs beside this one
    (under ``pytest -n``, only when its test runs: each worker collects every test)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in session.items:
        if item.path == COMPILED_MODE_RUN:
            item.module.start(session.config.stash.get(COMPILED_FILES, []), session.config.option.keyword)
            _compiled_mode_runs.append(item.module)
            return


def pytest_sessionfinish(session):
    for module in _compiled_mode_runs:
        module.stop()


@pytest.fixture(scope="session", autouse=True)
def _quick_interpreter():
    """Triton's interpreter without two repeated costs that were most of a Step5 test and a
    third of a DeepSeek V4 one (``jitkern.testing.quick_interpreter``)."""
    if MODE != "interpret":
        yield
        return
    from jitkern.testing import quick_interpreter

    with quick_interpreter():
        yield


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
    from jitkern.kernel import registry
    from jitkern.testing import dry_run_gpu

    for name in registry.kernel_names():
        registry.get_kernel(name).binaries.forget()
    with dry_run_gpu("cuda:90"):
        yield
