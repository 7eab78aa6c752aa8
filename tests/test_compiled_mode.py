"""Runs the tests marked ``compiled`` in a subprocess with the interpreter off."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_compiled_mode_suite():
    environment = dict(os.environ, JITKERN_TEST_MODE="compiled", TRITON_INTERPRET="0")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests")],
        cwd=REPO, env=environment, capture_output=True, text=True,
    )
    assert run.returncode == 0, f"compiled-mode tests failed:\n{run.stdout[-20000:]}\n{run.stderr[-5000:]}"
