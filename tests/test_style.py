"""The code passes ruff's checks as ``pyproject.toml`` configures them (pycodestyle, pyflakes)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None and os.environ.get("JITKERN_TEST_MODE") == "gpu":
        pytest.skip("ruff is not installed on this GPU machine: the CPU run checks the code")
    if ruff is None:
        pytest.fail("ruff is not installed: ./install.sh installs it")
    run = subprocess.run([ruff, "check", "--output-format", "concise", "--no-cache", str(REPO)], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
