"""Running ``python -m jitkern.warmup`` from tests, and reading what it left behind."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "warmup_manifests" / "jitkern-example.json"


def warmup(*args, cache_dir, background=False, **popen):
    """Run the CLI on ``cache_dir``, with no progress bar; ``background`` returns the ``Popen``."""
    return cli(*args, "--no-progress", cache_dir=cache_dir, background=background, **popen)


def cli(*args, cache_dir, background=False, **popen):
    """Run ``python -m jitkern.warmup ARGS`` on ``cache_dir`` (in ``env``, else this environment)."""
    environment = dict(popen.pop("env", os.environ), TRITON_CACHE_DIR=str(cache_dir), TRITON_INTERPRET="0")
    command = [sys.executable, "-m", "jitkern.warmup", *map(str, args)]
    if background:
        return subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **popen)
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, **popen)


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
