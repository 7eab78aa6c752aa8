"""The pytest plugin loads once however it is named: by its entry point alone, as
``-p jitkern`` or as ``-p jitkern_pytest`` (the README's GPU command). Naming one module
twice made pytest stop before collecting ("Plugin already registered under a different
name")."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

# Runs with the plugin already loaded: loading it must import neither jitkern nor Triton
# (tests/conftest.py sets TRITON_INTERPRET before Triton is first imported).
PROBE = '''
import sys

IMPORTED_BY_PLUGINS = {"jitkern", "triton"} & set(sys.modules)


def test_plugin_imports_no_triton():
    assert not IMPORTED_BY_PLUGINS


def test_fixture_is_offered(assert_no_compile):
    assert assert_no_compile == []
'''


@pytest.mark.parametrize("plugin_args", [[], ["-p", "jitkern"], ["-p", "jitkern_pytest"]],
                         ids=["entry-point", "p-jitkern", "p-jitkern_pytest"])
def test_plugin_loads_once_however_named(tmp_path, plugin_args):
    if plugin_args != ["-p", "jitkern_pytest"] and not _installed():
        pytest.skip("jitkern is on PYTHONPATH, not installed: pytest finds no entry point of it")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # keep this repository's conftest and ini out
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args, "test_probe.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def _installed() -> bool:
    """Whether jitkern is installed as a distribution (``install.sh`` installs it; a GPU
    machine given the tree on ``PYTHONPATH`` has no entry points of it)."""
    try:
        importlib.metadata.distribution("jitkern")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
