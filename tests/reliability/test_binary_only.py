"""Binary-only cache entries (issue 30): a warmup stores what a serving process loads.

An entry a warmup compiles holds its binary and metadata only (``--keep-ir``: every IR
file too). Each test tries a guarantee of ``docs/reliability.md`` on such entries: the
lock, ``--check``, damage replaced, ``pack`` and an installed wheel, Redis publishing and
read-through, and that a cache made with its IR still serves as it did.
"""

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import triton
from redis_testing import shared_redis
from reliability_testing import forget_all_binaries, warm
from warmup_testing import REPO, cache_entries, example_manifest, totals, warmup

from jitkern import guard, settings
from jitkern.cache.entries import inspect_entry
from jitkern.cache.lock import LOCK_FILE, Lock
from jitkern.examples.axpy import axpy
from jitkern.kernel import key_name
from jitkern.serve import load
from jitkern.testing import assert_no_compile

pytestmark = pytest.mark.compiled

AXPY = "jitkern.example.axpy"
BINARY_ONLY = {"_axpy_kernel.cubin", "_axpy_kernel.json"}
WITH_IR = BINARY_ONLY | {f"_axpy_kernel.{ir}" for ir in ("source", "ttir", "ttgir", "llir", "ptx")}


def group_of(entry: Path) -> set[str]:
    """The files the entry's group file lists."""
    (group,) = entry.glob("__grp__*.json")
    return set(json.loads(group.read_text())["child_paths"])


def files_in(entry: Path) -> set[str]:
    return {path.name for path in entry.iterdir() if not path.name.startswith("__grp__")}


def lock_of(cache: Path) -> tuple[Lock, str]:
    data = (cache / LOCK_FILE).read_bytes()
    return Lock.from_bytes(data, "lock"), hashlib.sha256(data).hexdigest()


def warmed(tmp_path: Path, name: str, *options: str) -> tuple[Path, Path]:
    """The 3-key example manifest warmed by the CLI into ``tmp_path / name``."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    cache = tmp_path / name
    run = warmup(manifest, "--target", "cuda:90", *options, cache_dir=cache)
    assert run.returncode == 0, run.stdout + run.stderr
    return manifest, cache


def flip_a_byte(path: Path) -> None:
    """One byte changed past the ELF header: the file still reads as a whole ELF file."""
    data = bytearray(path.read_bytes())
    data[random.randrange(64, len(data))] ^= 1 << random.randrange(8)
    path.write_bytes(bytes(data))


def test_a_warmup_stores_the_binary_and_its_metadata_and_keep_ir_every_file(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    environment = dict(os.environ, TMPDIR=str(scratch))
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    for name, options in (("binary", ()), ("kept", ("--keep-ir",))):
        run = warmup(manifest, "--target", "cuda:90", *options, cache_dir=tmp_path / name, env=environment)
        assert run.returncode == 0, run.stdout + run.stderr
    binary, kept = cache_entries(tmp_path / "binary"), cache_entries(tmp_path / "kept")
    assert len(binary) == 3 and sorted(e.name for e in binary) == sorted(e.name for e in kept)  # the same cache keys
    for entry in binary:
        assert files_in(entry) == group_of(entry) == BINARY_ONLY, entry
    for entry in kept:
        assert files_in(entry) == group_of(entry) == WITH_IR, entry
    lock, _ = lock_of(tmp_path / "binary")
    assert {folder: set(files) for folder, files in lock.entries.items() if folder in {e.name for e in binary}} == \
        {entry.name: BINARY_ONLY for entry in binary}
    host = {path.relative_to(tmp_path / "binary") for path in (tmp_path / "binary").glob("*/*.so")}
    assert host and host == {path.relative_to(tmp_path / "kept") for path in (tmp_path / "kept").glob("*/*.so")}
    assert not list(scratch.glob("jitkern-ir-*"))  # the TTIR's scratch folders are gone


def test_the_compile_leaves_tritons_setting_as_it_was_and_keep_ir_wins_over_it(tmp_path, triton_cache, monkeypatch):
    monkeypatch.delenv("TRITON_STORE_BINARY_ONLY", raising=False)
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"], block_sizes=[256])
    for entry in warm(manifest).values():
        assert files_in(entry) == BINARY_ONLY
    assert "TRITON_STORE_BINARY_ONLY" not in os.environ and not triton.knobs.compilation.store_binary_only

    monkeypatch.setenv("TRITON_STORE_BINARY_ONLY", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "kept"))
    for entry in warm(manifest, keep_ir=True).values():
        assert files_in(entry) == group_of(entry) == WITH_IR
    assert os.environ["TRITON_STORE_BINARY_ONLY"] == "1" and "store_binary_only" not in vars(triton.knobs.compilation)


DAMAGE = {  # how -> what --check says of it
    "truncated binary": "_axpy_kernel.cubin is truncated or not an ELF file",
    "garbage metadata": "metadata _axpy_kernel.json is not valid JSON",
    "binary deleted": "_axpy_kernel.cubin is missing",
    "no group": "not in the cache",
}


def test_check_names_each_damaged_binary_only_entry_and_warmup_replaces_it(tmp_path, triton_cache):
    """``test_warmup_cache.py``'s damage test, on binary-only entries: with no IR file to
    delete, the one listed file deleted is the binary."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16"])  # 6 keys
    entries = warm(manifest)
    damaged = dict(zip(DAMAGE, random.sample(sorted(entries, key=str), len(DAMAGE))))
    for how, key in damaged.items():
        entry = entries[key]
        if how == "truncated binary":
            (entry / "_axpy_kernel.cubin").write_bytes((entry / "_axpy_kernel.cubin").read_bytes()[:1000])
        elif how == "garbage metadata":
            (entry / "_axpy_kernel.json").write_text('{"name": "_axpy_kernel", "target": ')
        elif how == "binary deleted":
            (entry / "_axpy_kernel.cubin").unlink()
        else:
            (entry / "__grp___axpy_kernel.json").unlink()

    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache)
    assert check.returncode == 1 and "4 of 6 keys cannot be used from the cache" in check.stdout, check.stdout
    lines = {line.strip() for line in check.stdout.splitlines() if line.startswith("  ")}
    assert lines == {f"{AXPY}[{key_name(key)}] for cuda:90: {DAMAGE[how]}" for how, key in damaged.items()}

    rerun = warmup(manifest, "--target", "cuda:90", cache_dir=triton_cache)
    assert rerun.returncode == 0 and rerun.stderr.count("replaced a damaged entry") == 3, rerun.stderr
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache).returncode == 0
    for entry in entries.values():
        assert inspect_entry(str(entry), "_axpy_kernel.json").usable and group_of(entry) == BINARY_ONLY


def test_a_cache_made_with_its_ir_still_checks_loads_and_a_warmup_keeps_it(dry_run_gpu, triton_cache, tmp_path):
    """A cache warmed before binary-only entries (``--keep-ir`` makes the same): a warmup
    finds every key, leaves each entry and the lock as they are; it checks and serves."""
    manifest, _ = warmed(tmp_path, triton_cache.name, "--keep-ir")
    before = {entry.name: files_in(entry) for entry in cache_entries(triton_cache)}
    _, lock_digest = lock_of(triton_cache)

    rerun = warmup(manifest, "--target", "cuda:90", cache_dir=triton_cache)
    assert rerun.returncode == 0 and f"sha256 {lock_digest}" in rerun.stdout, rerun.stdout + rerun.stderr
    assert "replaced" not in rerun.stderr and re.search(r"total\s+3\s+0\s+3\s+0", rerun.stdout), rerun.stdout
    assert {entry.name: files_in(entry) for entry in cache_entries(triton_cache)} == before
    assert all(files == WITH_IR for files in before.values())
    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=triton_cache)
    assert check.returncode == 0 and "all 3 keys in the cache, whole" in check.stdout, check.stdout

    forget_all_binaries()
    with settings.scope(lock_digest=lock_digest):
        load([str(manifest)])
    guard.set_mode("error")
    try:
        with assert_no_compile():
            axpy(torch.randn(33), torch.randn(33), 2.0)
    finally:
        guard.set_mode("off")


def test_an_entry_locked_with_its_ir_then_replaced_binary_only_is_locked_as_it_is_now(tmp_path):
    """The cache's own lock lists an entry with its IR; a byte of its binary changes; the
    binary-only warmup replaces it and locks the new entry's files, the lock and the
    wheel agree with it, and the IR files it left behind are in neither."""
    manifest, cache = warmed(tmp_path, "cache", "--keep-ir")
    lock, lock_digest = lock_of(cache)
    victim = random.choice(cache_entries(cache))
    flip_a_byte(victim / "_axpy_kernel.cubin")

    rerun = warmup(manifest, "--target", "cuda:90", cache_dir=cache)
    assert rerun.returncode == 0, rerun.stderr
    assert f"_axpy_kernel.cubin does not match the cache's {LOCK_FILE}" in rerun.stderr, rerun.stderr
    relocked, relocked_digest = lock_of(cache)
    assert relocked_digest != lock_digest and group_of(victim) == BINARY_ONLY and files_in(victim) == WITH_IR
    assert relocked.entries[victim.name] == {name: lock.entries[victim.name][name] for name in BINARY_ONLY}
    assert {folder: files for folder, files in relocked.entries.items() if folder != victim.name} == \
        {folder: files for folder, files in lock.entries.items() if folder != victim.name}
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0

    pack = subprocess.run([sys.executable, "-m", "jitkern.warmup", "pack", str(manifest), "--target", "cuda:90",
                           "--cache-dir", str(cache), "--out", str(tmp_path / "dist")],
                          cwd=REPO, capture_output=True, text=True)
    assert pack.returncode == 0, pack.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = {name for name in archive.namelist() if f"/{victim.name}/" in name}
        data = next(name for name in packed if "/__grp__" in name)
        assert set(json.loads(archive.read(data))["child_paths"]) == BINARY_ONLY
    assert {name.rsplit("/", 1)[1] for name in packed} == BINARY_ONLY | {"__grp___axpy_kernel.json"}


SERVE_WHEEL = """
import sys
from jitkern.testing import dry_run_gpu
from jitkern.serve import load
with dry_run_gpu():
    load([sys.argv[1]])  # refuses to compile: every binary comes from the wheel
print("loaded")
"""


@pytest.mark.parametrize("options", [(), ("--keep-ir",)], ids=["binary-only", "with its IR"])
def test_a_cache_ships_whole_through_redis_and_a_wheel(dry_run_gpu, triton_cache, tmp_path, options):
    """Published, read through by a node with an empty cache, packed, installed and
    loaded: each entry travels with the files its group lists, no more, no fewer."""
    expected = WITH_IR if options else BINARY_ONLY
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    built = tmp_path / "built"
    with shared_redis(tmp_path) as server:
        run = warmup(manifest, "--target", "cuda:90", *options, "--remote", server.url, cache_dir=built)
        assert run.returncode == 0 and "published to" in run.stdout, run.stdout + run.stderr
        lock, lock_digest = lock_of(built)
        for entry in cache_entries(built):
            fields = server.client.hkeys(f"jitkern:entry:{entry.name}")
            assert {field.decode() for field in fields} == {"record"} | {f"file:{name}" for name in expected}
        forget_all_binaries()
        with settings.scope(remote_cache=server.url, lock_digest=lock_digest):
            load([str(manifest)])
        report = tmp_path / "report.json"  # a binary-only warmup reading through Redis takes entries as they are
        rewarm = warmup(manifest, "--target", "cuda:90", "--report", report, cache_dir=tmp_path / "rewarmed",
                        env=dict(os.environ, JITKERN_REMOTE_CACHE=server.url, JITKERN_LOCK_DIGEST=lock_digest))
        assert rewarm.returncode == 0, rewarm.stdout + rewarm.stderr
        assert totals(json.loads(report.read_text())) == {"keys": 3, "compiled": 0, "cached": 3, "failed": 0}
    for node in (triton_cache, tmp_path / "rewarmed"):
        entries = cache_entries(node)
        assert len(entries) == 3 and all(group_of(e) == expected and files_in(e) >= expected for e in entries)

    pack = subprocess.run([sys.executable, "-m", "jitkern.warmup", "pack", str(manifest), "--target", "cuda:90",
                           "--cache-dir", str(built), "--out", str(tmp_path / "dist")],
                          cwd=REPO, capture_output=True, text=True)
    assert pack.returncode == 0, pack.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    package = site / "jitkern_cache_jitkern_example_cuda_90" / "cache"
    for entry in cache_entries(built):
        assert files_in(package / entry.name) == group_of(package / entry.name) == expected
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
    environment.update(PYTHONPATH=f"{site}{os.pathsep}{REPO}", HOME=str(tmp_path / "home"), TRITON_INTERPRET="0")
    served = subprocess.run([sys.executable, "-c", SERVE_WHEEL, str(manifest)], cwd=REPO, env=environment,
                            capture_output=True, text=True)
    assert served.stdout.splitlines() == ["loaded"], served.stdout + served.stderr
