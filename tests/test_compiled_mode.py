"""Runs the tests marked ``compiled`` in a subprocess with the interpreter off: those of
the files the session collected (``tests/conftest.py`` adds this test when they were
named alone, so a file run alone runs all of its CPU modes).

The subprocess starts as soon as collection is done (``pytest_collection_finish`` in
``tests/conftest.py`` calls ``start``), so that it runs beside the interpreter's tests on
a machine's other cores; the test below waits for it. With pytest-xdist installed it
spreads its own tests over two workers, a file to a worker (the Redis tests share one
server, file by file).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKERS = 2
NO_TESTS = 5  # pytest's exit status when -k left no compiled test in the files
# The interpreter's tests run in one process, the compiled ones in two: the one gets a core
# of its own, the two share what is left (on two cores the run ends about a minute sooner).
NICENESS = 5

_run: dict[str, object] = {}


def start(files: list[str] = (), keyword: str = "") -> None:
    """Start the compiled-mode run (once) of ``files`` (all tests when none), selected by
    ``-k keyword`` as the session's were, its output going to a temporary file."""
    if _run:
        return
    environment = dict(os.environ, JITKERN_TEST_MODE="compiled", TRITON_INTERPRET="0")
    spread = ["-n", str(WORKERS), "--dist", "loadfile"] if importlib.util.find_spec("xdist") and len(files) != 1 else []
    selection = ["-k", keyword] if keyword else []
    output = tempfile.TemporaryFile(mode="w+")
    _run["output"] = output
    _run["process"] = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *spread, *selection,
         *(files or [str(REPO / "tests")])],
        cwd=REPO, env=environment, stdout=output, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # a group of its own: stop() ends its xdist workers too
        preexec_fn=lambda: os.nice(NICENESS))


def stop() -> None:
    """End a run the session no longer waits for (it was interrupted or failed early)."""
    process = _run.get("process")
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_compiled_mode_suite():
    start()  # when collection did not start it (a pytest -n worker)
    process, output = _run["process"], _run["output"]
    returncode = process.wait()
    output.seek(0)
    text = output.read()
    output.close()
    assert returncode in (0, NO_TESTS), f"compiled-mode tests failed:\n{text[-25000:]}"
    print(text[-2000:])
