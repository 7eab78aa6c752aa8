"""The warmup cache as a deployment artifact, under faults (issue 6, promises 1-5).

Each test breaks something on purpose: damaged entries, a cache from another Triton
build, warmups killed at random points, four warmups and a reader on one cache at once,
read-only and unwritable directories. ``docs/reliability.md`` lists what each tried.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from reliability_testing import (drop_root_override, entry_states, files_of, forget_all_binaries, make_read_only,
                                 warm)
from warmup_testing import REPO, example_manifest, report_of, totals, warmup

from jitkern import guard
from jitkern.cache.entries import MISSING, inspect_entry
from jitkern.cache import DamagedCacheEntry
from jitkern.cache.identity import IDENTITY_FILE
from jitkern.examples.axpy import axpy
from jitkern.kernel import key_name
from jitkern.serve import MissingBinary, load

pytestmark = pytest.mark.compiled

AXPY = "jitkern.example.axpy"


def damage(entry, how: str) -> None:
    """Break one cache entry the way a bad copy or a full disk would."""
    (group,) = entry.glob("__grp__*.json")
    name = group.name.removeprefix("__grp__").removesuffix(".json")
    if how == "truncated binary":
        binary = entry / f"{name}.cubin"
        binary.write_bytes(binary.read_bytes()[: binary.stat().st_size // 2])
    elif how == "garbage metadata":
        (entry / f"{name}.json").write_text('{"name": "_axpy_kernel", "target": ')
    elif how == "missing group file":
        (entry / f"{name}.ptx").unlink()
    elif how == "no group":
        group.unlink()


PROBLEMS = {
    "truncated binary": "_axpy_kernel.cubin is truncated or not an ELF file",
    "garbage metadata": "metadata _axpy_kernel.json is not valid JSON",
    "missing group file": "_axpy_kernel.ptx is missing",
    "no group": "not in the cache",
}


# --- 1. integrity -------------------------------------------------------------------


def test_check_names_each_damaged_entry_by_key_and_warmup_replaces_it(tmp_path, triton_cache):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16"])  # 6 keys
    entries = warm(manifest, keep_ir=True)  # a .ptx to delete; binary-only entries: test_binary_only.py
    damaged = dict(zip(PROBLEMS, random.sample(sorted(entries, key=str), len(PROBLEMS))))
    for how, key in damaged.items():
        damage(entries[key], how)

    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache)
    assert check.returncode == 1
    assert "4 of 6 keys cannot be used from the cache" in check.stdout
    lines = [line.strip() for line in check.stdout.splitlines() if line.startswith("  ")]
    expected = {f"{AXPY}[{key_name(key)}] for cuda:90: {PROBLEMS[how]}" for how, key in damaged.items()}
    assert set(lines) == expected, check.stdout

    rerun = warmup(manifest, "--target", "cuda:90", cache_dir=triton_cache)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr.count("replaced a damaged entry") == 3
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache).returncode == 0
    assert set(entry_states(triton_cache).values()) == {None}


def test_a_serving_process_never_loads_a_damaged_entry(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])  # n_elements classes 1, 16k, other
    entries = warm(manifest)
    (victim,) = [key for key in entries if key.layout == "n_elements:i32"]
    damage(entries[victim], "truncated binary")
    forget_all_binaries()

    with pytest.raises(MissingBinary) as refused, pytest.warns(DamagedCacheEntry):  # names the key, compiles nothing
        load([str(manifest)])
    assert f"{AXPY}[{key_name(victim)}]: {PROBLEMS['truncated binary']}" in str(refused.value)
    assert inspect_entry(str(entries[victim]), "_axpy_kernel.json").problem == PROBLEMS["truncated binary"]

    x = torch.randn(33)
    try:
        guard.set_mode("error")
        with pytest.raises(guard.ServeTimeCompile, match=rf"{AXPY}\[{key_name(victim)}\]"):
            axpy(x, x, 2.0)
    finally:
        guard.set_mode("off")
    with pytest.warns(DamagedCacheEntry, match="truncated"):  # guard off: recompiled, never loaded
        axpy(x, x, 2.0)
    assert inspect_entry(str(entries[victim]), "_axpy_kernel.json").usable


def test_a_copied_cache_is_found_where_it_lies(tmp_path):
    """Triton's group files hold absolute paths; the entry's own folder is what counts."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    assert warmup(manifest, "--target", "cuda:90", cache_dir=tmp_path / "built").returncode == 0
    (tmp_path / "built").rename(tmp_path / "copied")
    report = report_of([manifest, "--target", "cuda:90"], tmp_path / "copied", tmp_path)
    assert totals(report) == {"keys": 3, "compiled": 0, "cached": 3, "failed": 0}


# --- 2. compiler identity -------------------------------------------------------------


ANOTHER_BUILD = (
    "import sys, triton.runtime.cache as cache\n"
    "key = cache.triton_key()\n"
    "cache.triton_key = lambda: key + '+another-build'  # what another wheel of 3.6.0 would hash\n"
    "from jitkern.warmup import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_a_cache_from_another_triton_build_is_named_in_one_line(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    built = subprocess.run(
        [sys.executable, "-c", ANOTHER_BUILD, str(manifest), "--target", "cuda:90", "--no-progress"],
        cwd=REPO, env=dict(os.environ, TRITON_CACHE_DIR=str(triton_cache), TRITON_INTERPRET="0",
                           JITKERN_STATE_DIR=str(tmp_path / "state")),  # no memo of this build's triton_key()
        capture_output=True, text=True)
    assert built.returncode == 0, built.stderr

    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache)
    assert check.returncode == 1
    (line,) = [line for line in check.stdout.splitlines() if line.startswith("this cache was made by")]
    assert line.endswith("3 of 3 keys would recompile")
    (made_by, this_process) = [part.split(" for cuda:90")[0] for part in line.split("; this process is ")]
    assert made_by != this_process and made_by.startswith("this cache was made by Triton 3.6.0 (build ")

    with pytest.raises(MissingBinary) as refused:
        load([str(manifest)])
    assert "\n" not in str(refused.value) and str(refused.value).endswith("3 of 3 keys would recompile")

    assert warmup(manifest, "--target", "cuda:90", cache_dir=triton_cache).returncode == 0
    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache)
    assert check.returncode == 0 and "made by" not in check.stdout
    makers = json.loads((triton_cache / IDENTITY_FILE).read_text())["makers"]
    assert len(makers) == 2 and {m["python"] for m in makers} == {".".join(map(str, sys.version_info[:3]))}


# --- 3. interrupted warmup ------------------------------------------------------------


def test_warmup_killed_at_random_points_is_finished_by_the_next_run(tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16", "bfloat16"],
                                block_sizes=[256, 1024])  # 18 keys
    cache, kills, whole, partial_left = tmp_path / "cache", 0, 0, 0
    for _attempt in range(6):
        run = warmup(manifest, "--target", "cuda:90", "--jobs", "2", cache_dir=cache, background=True,
                     start_new_session=True)
        kill_mid_entry(run, cache, delay=random.uniform(0.0, 0.3))
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)  # the CLI and its workers, mid-write or not
            kills += 1
        run.communicate()
        states = entry_states(cache) if cache.exists() else {}
        assert set(states.values()) <= {None, MISSING}, states  # whole, or invisible (no group file)
        assert sum(s is None for s in states.values()) >= whole
        whole = sum(s is None for s in states.values())
        partial_left += sum(s == MISSING for s in states.values())
    assert kills >= 3 and partial_left > 0, "no run was killed in the middle of writing an entry"

    report = report_of([manifest, "--target", "cuda:90"], cache, tmp_path)
    assert totals(report) == {"keys": 18, "compiled": 18 - whole, "cached": whole, "failed": 0}
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0


def kill_mid_entry(run, cache, delay: float) -> None:
    """Return ``delay`` seconds after the run starts writing a new entry (or when it ends)."""
    known = set(entry_states(cache)) if cache.exists() else set()
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline:
        if cache.exists() and set(entry_states(cache)) - known:
            time.sleep(delay)
            return
        time.sleep(0.002)


# --- 4. concurrency -------------------------------------------------------------------


READER = """
import json, os, sys
from jitkern.cache.entries import MISSING
from jitkern.cache import CacheEntryUnusable, refusing_compiles
from jitkern.manifest import load_manifest
from jitkern.targets import compile_only, parse_target

manifest, stop = load_manifest(sys.argv[1]), sys.argv[2]
seen = {"loaded": 0, "missing": 0, "damaged": []}
print("ready", flush=True)
with compile_only(parse_target("cuda:90")), refusing_compiles():
    while not os.path.exists(stop):
        for entry in manifest.entries:
            for key in entry.keys:
                entry.kernel.binaries.forget()
                try:
                    entry.kernel.compile(key)  # reads the entry as a serving process would
                    seen["loaded"] += 1
                except CacheEntryUnusable as error:
                    if error.problem == MISSING:
                        seen["missing"] += 1
                    else:
                        seen["damaged"].append(error.problem)
print(json.dumps(seen))
"""


def test_four_overlapping_warmups_and_a_reader_share_one_cache(tmp_path):
    configs = [(["float32"], [256, 1024]), (["float32", "float16"], [1024]), (["float16"], [256, 1024]),
               (["float32", "float16"], [256])]
    manifests = [example_manifest(tmp_path / f"m{i}.json", dtypes=d, block_sizes=b) for i, (d, b) in enumerate(configs)]
    union = example_manifest(tmp_path / "all.json", dtypes=["float32", "float16"], block_sizes=[256, 1024])
    cache, stop = tmp_path / "cache", tmp_path / "stop"
    environment = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_INTERPRET="0")
    reader = subprocess.Popen([sys.executable, "-c", READER, str(union), str(stop)], cwd=REPO, env=environment,
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "ready"
    runs = [warmup(m, "--target", "cuda:90", "--jobs", "1", cache_dir=cache, background=True) for m in manifests]
    for run in runs:
        stdout, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stdout + stderr
    stop.touch()
    seen = json.loads(reader.communicate(timeout=120)[0])
    assert seen["damaged"] == [] and seen["loaded"] > 0 and seen["missing"] > 0, seen

    assert warmup(union, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0
    assert len(entry_states(cache)) >= 12 and set(entry_states(cache).values()) <= {None, MISSING}
    assert len(json.loads((cache / IDENTITY_FILE).read_text())["makers"]) == 1


# --- 5. read-only and unwritable caches ---------------------------------------------


def test_warmup_into_an_unwritable_directory_fails_at_once(tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    (tmp_path / "a-file").write_text("")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    make_read_only(read_only)
    for cache in (tmp_path / "a-file" / "cache", read_only):
        run = warmup(manifest, "--target", "cuda:90", cache_dir=cache, preexec_fn=drop_root_override)
        assert run.returncode == 2
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith(f"error: cannot write the cache directory {cache}: ") and \
            line.endswith("; nothing was compiled"), line
    assert not list(read_only.iterdir())


SERVE = """
import contextlib, sys, warnings, torch
from jitkern import guard
from jitkern.examples.axpy import axpy
from jitkern.testing import assert_no_compile, dry_run_gpu
from jitkern.serve import MissingBinary, load

mode, manifest = sys.argv[1], sys.argv[2]
with dry_run_gpu(), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    guard.set_mode("warn" if mode == "warn" else "error")
    try:
        load([manifest])
        print("loaded")
    except MissingBinary as error:
        print("load refused:", error)
    x = torch.randn(33, dtype=torch.float16 if mode != "complete" else torch.float32)
    try:
        with assert_no_compile() if mode == "complete" else contextlib.nullcontext():
            axpy(x, x, 2.0)
        print("served")
    except guard.ServeTimeCompile as error:
        print("launch refused:", error)
for warning in caught:
    print("warning:", warning.message)
"""


def serve(mode: str, manifest, cache, private):
    environment = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_INTERPRET="0",
                       JITKERN_PRIVATE_CACHE_DIR=str(private))
    run = subprocess.run([sys.executable, "-c", SERVE, mode, str(manifest)], cwd=REPO, env=environment,
                         capture_output=True, text=True, preexec_fn=drop_root_override)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_serving_from_a_read_only_cache(tmp_path):
    warmed = example_manifest(tmp_path / "warmed.json", dtypes=["float32"])
    wider = example_manifest(tmp_path / "wider.json", dtypes=["float32", "float16"])
    cache, private = tmp_path / "cache", tmp_path / "private"
    assert warmup(warmed, "--target", "cuda:90", cache_dir=cache).returncode == 0
    make_read_only(cache)
    before = files_of(cache)

    complete = serve("complete", warmed, cache, private)
    assert complete.splitlines()[:2] == ["loaded", "served"], complete

    refused = serve("error", wider, cache, private)
    assert "load refused: 3 of 6 keys are not usable" in refused and f"{AXPY}[dtype=float16" in refused
    assert f"launch refused: serve-time compile of {AXPY}[dtype=float16,block_size=1024,layout=n_elements:i32" \
        in refused

    compiled = serve("warn", wider, cache, private)
    assert "served" in compiled and "is not writable" in compiled and f"private directory {private}" in compiled
    assert files_of(cache) == before
    assert [name for name in files_of(private) if name.endswith(".cubin")]
