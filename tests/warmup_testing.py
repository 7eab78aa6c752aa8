"""Running ``python -m jitkern.warmup`` from tests, reading what it left behind, and compiling a
key as warmup does."""

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "warmup_manifests" / "jitkern-example.json"
SUBCOMMANDS = ("schema", "merge-record", "pack", "tune")  # take no --jobs


def warmup(*args, cache_dir, background=False, process=False, **popen):
    """Run the CLI on ``cache_dir``, with no progress bar (see ``cli``)."""
    return cli(*args, "--no-progress", cache_dir=cache_dir, background=background, process=process, **popen)


def cli(*args, cache_dir, background=False, process=False, env=None, **popen):
    """Run ``python -m jitkern.warmup ARGS`` on ``cache_dir`` (in ``env``, else this
    environment): in this process, as a fresh process would run it, with no worker
    processes (a fork of this threaded process could deadlock); in a process of its own
    when that is the point (``process``, ``background`` returns the ``Popen``, ``popen``
    options such as ``preexec_fn``) or it asks for workers (``--jobs 2``). A process costs
    a second or more of imports."""
    environment = dict(env if env is not None else os.environ, TRITON_CACHE_DIR=str(cache_dir), TRITON_INTERPRET="0")
    arguments = [str(arg) for arg in args]
    workers = int(arguments[arguments.index("--jobs") + 1]) if "--jobs" in arguments else None
    if not (process or background or popen or (workers or 1) > 1):  # forking this threaded process could deadlock
        if workers is None and arguments[:1] != ["--help"] and arguments[0] not in SUBCOMMANDS:
            arguments += ["--jobs", "1"]
        return run_in_process(arguments, environment)
    command = [sys.executable, "-m", "jitkern.warmup", *arguments]
    if background:
        return subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **popen)
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, **popen)


def run_in_process(arguments: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    """``jitkern.warmup.main(arguments)`` here, as a fresh process with ``environment`` would
    run it: no binaries held in memory before or after (Triton's in-process ones would skip
    the cache), settings and the temporary folder read from that environment, warnings
    printed to its stderr; the environment is restored afterwards. What it prints comes back as a ``CompletedProcess``'s."""
    from jitkern import settings
    from jitkern.kernel import registry
    from jitkern.warmup import main

    forget = lambda: [registry.get_kernel(name).binaries.forget() for name in registry.kernel_names()]  # noqa: E731
    forget()
    saved, saved_temporary = dict(os.environ), tempfile.tempdir
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(environment)
        tempfile.tempdir = None  # read from TMPDIR again
        fresh = settings.Settings.from_environment()
        with settings.scope(**{field.name: getattr(fresh, field.name) for field in dataclasses.fields(fresh)}), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            try:
                returncode = main(arguments)
            except SystemExit as exit:  # argparse's usage errors
                returncode = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        tempfile.tempdir = saved_temporary
        forget()  # what it held ends with it, as a process's would
    return subprocess.CompletedProcess(["python", "-m", "jitkern.warmup", *arguments], returncode, out.getvalue(),
                                       err.getvalue())


def example_manifest(path: Path, layout: dict | None = None, **config) -> Path:
    """The example manifest with another config for its one kernel, and the layout
    ``layout`` (by default aligned tensors only), written to ``path``."""
    document = json.loads(EXAMPLE.read_text())
    document["kernels"][0]["config"] = config
    document.pop("layout")
    if layout is not None:
        document["layout"] = layout
    path.write_text(json.dumps(document))
    return path


def report_of(run_args, cache_dir, tmp_path):
    report = tmp_path / f"report-{time.monotonic_ns()}.json"
    run = warmup(*run_args, "--report", report, cache_dir=cache_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(report.read_text())


def totals(report):
    return {column: sum(row[column] for row in report["kernels"]) for column in ("keys", "compiled", "cached", "failed")}


def cache_entries(cache_dir: Path) -> list[Path]:
    """Kernel binaries in the cache (not the host C modules built beside them)."""
    return [entry for entry in cache_dir.iterdir() if entry.is_dir() and not list(entry.glob("*.so"))]


def launchers(folder: Path) -> list[Path]:
    return list(folder.glob("**/__triton_launcher*.so"))


def compile_as_named(kernel, binary):
    """Compile ``binary`` (under ``compile_only(target)``) and check that Triton filed it
    under the key ``warmed_lookup_key`` names without compiling, which ``uncovered_by_warmup``
    and the coverage checker rely on. Returns the compiled kernel."""
    from triton.runtime.driver import driver

    from jitkern.testing import warmed_lookup_key

    compiled = kernel.compile(binary)
    filed = kernel.kernel.device_caches[driver.active.get_current_device()][0]
    assert warmed_lookup_key(kernel, binary) in filed, kernel.describe(binary)
    return compiled
