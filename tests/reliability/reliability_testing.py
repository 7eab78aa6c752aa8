"""Shared steps of the reliability tests: warm a manifest here, look inside a cache."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from warmup_testing import cache_entries

from jitkern import hooks
from jitkern.kernel import registry
from jitkern.cache.entries import inspect_entry
from jitkern.build.compile import COMPILED, CACHED, compile_task, tasks_of
from jitkern.manifest import resolve


def warm(manifest: Path, keep_ir: bool = False) -> dict[Any, Path]:
    """Compile every key of ``manifest`` for cuda:90 in this process (``keep_ir``: as
    ``--keep-ir`` does); key -> its cache entry."""
    plan, _note = resolve([str(manifest)], "cuda:90")
    forget_all_binaries()  # so that every key goes to the cache
    entries: dict[Any, Path] = {}
    for task in tasks_of(plan):
        groups: list[dict] = []
        with hooks.watching(on_compile=lambda *, metadata_group, **_: groups.append(metadata_group)):
            outcome = compile_task(task, keep_ir)
        assert outcome.status in (COMPILED, CACHED), outcome.error
        metadata = next(path for name, path in groups[-1].items() if name.endswith(".json"))
        entries[task.key] = Path(metadata).parent
    return entries


def forget_all_binaries() -> None:
    for name in registry.kernel_names():
        registry.get_kernel(name).binaries.forget()


def entry_states(cache: Path) -> dict[str, str | None]:
    """Every kernel entry folder of the cache -> None when jitkern would use it, else why not
    (``MISSING`` for a partial entry: one whose group file was not written yet)."""
    states = {}
    for folder in cache_entries(cache):
        files = [path for path in folder.iterdir() if path.is_file() and not path.name.startswith("__grp__")]
        group_name = files[0].stem + ".json" if files else "none.json"
        states[folder.name] = inspect_entry(str(folder), group_name).problem
    return states


def files_of(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` and its size: a snapshot to compare."""
    return {str(path.relative_to(folder)): path.stat().st_size for path in sorted(folder.rglob("*")) if path.is_file()}


def drop_root_override() -> None:
    """For ``preexec_fn``: a root child loses the power to write where permissions say no
    (CAP_DAC_OVERRIDE), so a read-only directory is read-only for it as for anyone else."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override = 24, 1
    if libc.prctl(pr_capbset_drop, cap_dac_override, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE)")


def make_read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
