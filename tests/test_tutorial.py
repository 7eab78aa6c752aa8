"""docs/writing-a-kernel.md, run as a new user would: its code blocks in order, in an empty
folder (a ``file=NAME`` block is written to NAME, a ``bash`` block is run)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compiled

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "writing-a-kernel.md"
BLOCK = re.compile(r"^```(\w+)(?: file=(\S+))?\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str | None, str]]:
    return [match.groups() for match in BLOCK.finditer(TUTORIAL.read_text())]


def test_the_tutorial_has_a_kernel_a_manifest_a_warmup_and_tests():
    kinds = [(language, name) for language, name, _ in blocks()]
    assert ("python", "rowscale.py") in kinds and ("json", "rowscale.json") in kinds
    assert ("python", "test_rowscale.py") in kinds and kinds.count(("bash", None)) >= 3


def test_every_code_block_of_the_tutorial_runs(tmp_path):
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("TRITON_", "JITKERN_TEST_MODE", "PYTEST_"))}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    for language, name, text in blocks():
        if name is not None:
            (tmp_path / name).write_text(text)
            continue
        assert language == "bash", f"a {language} block needs a file= name"
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{text}\n--- stdout\n{run.stdout[-5000:]}\n--- stderr\n{run.stderr[-5000:]}"
        if "pytest" in text:
            assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout
