"""Tuning tables shipped with the cache (compiled for cuda:90, no GPU): the lock covers them,
``pack`` carries them, ``tune --check`` names them; a serving process's ``load()`` (a dry run)
takes the winners and loads winners and defaults only, serves under the guard in error mode
with no compile and refuses a bucket the table lacks; its memo takes the winners again, and
a table written since sends it down the full path; ``tune`` on a dry run times candidates
from the cache and compiles none."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
import torch
from tuned_kernels import CONFIGS, TunedDouble
from warmup_testing import cli, warmup

from jitkern import guard, hooks, settings
from jitkern.build.compile import run_compile
from jitkern.cache.tables import TABLE_FILE, table_folder
from jitkern.manifest import resolve
from jitkern.serve import load
from jitkern.serve.load import TuningTableWarning
from jitkern.testing import assert_no_compile
from jitkern.tuning import Row, TuneError, store, table_of, tune

pytestmark = pytest.mark.compiled

TESTS = Path(__file__).resolve().parents[2]
H200, NAME = "NVIDIA H200", "test.tuned_double[tuning table NVIDIA_H200] for cuda:90"


def manifest(path: Path, max_size: int = 65536) -> str:
    path.write_text(json.dumps({"format_version": 1, "name": "tuned", "targets": ["cuda:90"],
                                "modules": ["tuned_kernels"],
                                "kernels": [{"kernel": "test.tuned_double", "config": {"max_size": max_size}}]}))
    return str(path)


def double_table(winners: dict[int, dict]) -> object:
    """A table of the double kernel naming ``winners`` (size bucket -> config)."""
    rows = [Row({"dtype": "float32", "size": size}, config) for size, config in winners.items()]
    return table_of(TunedDouble(), "cuda:90", H200, rows, "set by the test")


@pytest.fixture
def fresh():
    yield
    guard.set_mode("off")
    TunedDouble().winners.take({}, "")
    TunedDouble().binaries.forget()


def test_the_lock_pack_and_check_cover_a_table(tmp_path, monkeypatch, fresh):
    cache, path = tmp_path / "cache", manifest(tmp_path / "m.json")
    env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    run = warmup(path, "--target", "cuda:90", cache_dir=cache, env=env)
    assert run.returncode == 0, run.stderr
    assert not any("tuning table" in key for key in json.loads((cache / "jitkern-lock.json").read_text())["keys"])
    check = cli("tune", path, "--check", "--gpu", H200, cache_dir=cache, env=env)
    assert check.returncode == 1 and check.stdout == "test.tuned_double for cuda:90 on NVIDIA H200: no tuning table\n"

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    store(double_table({1: CONFIGS[1], 1024: CONFIGS[1], 65536: CONFIGS[2]}))
    check = cli("tune", path, "--check", "--gpu", H200, cache_dir=cache, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert warmup(path, "--target", "cuda:90", cache_dir=cache, env=env).returncode == 0  # a warmup locks it again
    locked = json.loads((cache / "jitkern-lock.json").read_text())
    folder = table_folder("test.tuned_double", "cuda:90", H200)
    assert locked["keys"][NAME] == [folder] and list(locked["entries"][folder]) == [TABLE_FILE]

    packed = cli("pack", path, "--target", "cuda:90", "--out", tmp_path / "dist", cache_dir=cache, env=env)
    assert packed.returncode == 0, packed.stderr
    [wheel] = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [table] = [name for name in names if name.endswith(f"/cache/{folder}/{TABLE_FILE}")]
        assert archive.read(table) == (cache / folder / TABLE_FILE).read_bytes()
        wheel_lock = json.loads(archive.read(next(name for name in names if name.endswith("/jitkern-lock.json"))))
        assert wheel_lock["keys"][NAME] == [folder]

    damaged = (cache / folder / TABLE_FILE).read_bytes().replace(b'"block": 256', b'"block": 64', 1)
    (cache / folder / TABLE_FILE).write_bytes(damaged)
    packed = cli("pack", path, "--target", "cuda:90", "--out", tmp_path / "again", cache_dir=cache, env=env)
    assert packed.returncode == 1 and f"  {NAME}: tuning.json does not match the cache's jitkern-lock.json" in \
        packed.stderr
    check = cli("tune", path, "--check", "--gpu", H200, cache_dir=cache, env=env)
    assert check.returncode == 1 and check.stdout.startswith(
        "test.tuned_double for cuda:90 on NVIDIA H200: its tuning table cannot be used: tuning.json does not match")


@pytest.fixture
def warmed(tmp_path, triton_cache, fresh):
    """The double kernel's manifest warmed into a private cache, loads remembered in a private state folder."""
    path = manifest(tmp_path / "m.json")
    outcomes = run_compile(resolve([path], "cuda:90")[0], jobs=1, progress=False)
    assert [outcome.status for outcome in outcomes] == ["compiled"] * 3
    TunedDouble().binaries.forget()
    with settings.scope(state_dir=str(tmp_path / "state")):
        yield path


def test_a_load_takes_the_winners_serves_them_with_no_compile_and_refuses_a_bucket_the_table_lacks(warmed, dry_run_gpu):
    store(double_table({1: CONFIGS[1], 1024: CONFIGS[1]}))
    with pytest.warns(TuningTableWarning, match=r"test.tuned_double for cuda:90 on NVIDIA H200: lacks 1 of 3 "
                                                r"buckets, which take their default config \(first: dtype=float32,"
                                                r"size=65536\)"):
        [loaded] = load([warmed])
    assert loaded.binaries == 2  # the winner of two buckets, the default of the third: not the third candidate
    assert {binary.key.block for binary in TunedDouble().binaries.held()} == {256, 1024}
    guard.set_mode("error")
    with assert_no_compile():
        for size in (5, 1000, 1024, 60000):
            x = torch.empty(size)
            TunedDouble()(x, torch.empty_like(x))
    x = torch.empty(70000)
    with pytest.raises(guard.UntunedBucket, match=r"bucket dtype=float32,size=65536 \(its table "
                                                  r"test.tuned_double\[tuning table NVIDIA_H200\] for cuda:90\)"):
        TunedDouble()(x, torch.empty_like(x))


def test_a_loads_memo_takes_the_winners_again_until_a_table_is_written(warmed, dry_run_gpu, monkeypatch):
    store(double_table({1: CONFIGS[1], 1024: CONFIGS[1], 65536: CONFIGS[1]}))
    [first] = load([warmed])
    assert first.binaries == 1
    fronts = []
    from triton.runtime.jit import JITFunction

    warmup_of = JITFunction.warmup
    monkeypatch.setattr(JITFunction, "warmup", lambda self, *a, **k: fronts.append(1) or warmup_of(self, *a, **k))
    TunedDouble().winners.take({}, "")
    TunedDouble().binaries.forget()
    [again] = load([warmed])  # from the memo: no front end, the winners taken again
    assert (again.binaries, fronts) == (1, [])
    assert TunedDouble().dispatch(dtype="float32", size=1024).block == 256
    store(double_table({1: CONFIGS[0], 1024: CONFIGS[0], 65536: CONFIGS[0]}))
    [anew] = load([warmed])  # the table changed: the full path, the new winners
    assert fronts and anew.binaries == 1
    assert TunedDouble().dispatch(dtype="float32", size=1024).block == 64


def test_tune_times_candidates_from_the_cache_and_compiles_none(warmed, dry_run_gpu, tmp_path, monkeypatch):
    timed = []

    def timer(launch, key):
        launch()
        timed.append(key.block)
        return [abs(key.block - 256) + 1.0]

    deployment, fresh_compiles = resolve([warmed], "cuda:90")[0], []
    with hooks.watching(on_compile=lambda *, cache_hit, **_: fresh_compiles.append(1) if not cache_hit else None):
        [table] = tune(deployment, "cuda:90", H200, timer, device="cpu")
    assert fresh_compiles == [] and sorted(timed) == sorted([64, 256, 1024] * 3)
    assert {row.config["block"] for row in table.rows} == {256}
    TunedDouble().binaries.forget()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(TuneError, match=r"test.tuned_double\[dtype=float32,block=64,num_warps=1\]: not in the cache; "
                                        r"tuning compiles nothing: warm the manifests for this target first"):
        tune(deployment, "cuda:90", H200, timer, device="cpu")


def test_the_tune_command_imports_and_exports_vllms_configs_and_says_what_it_cannot_do(tmp_path):
    cache, grouped = tmp_path / "cache", TESTS.parent / "warmup_manifests" / "grouped-gemm-h200.json"
    example = Path(__file__).with_name("E=64,N=1408,device_name=NVIDIA_H200.json")
    where = ["--where", "experts=64,n=1408,mul_routed_weight=false"]
    imported = cli("tune", grouped, "--target", "cuda:90", "--import-vllm", example, *where, cache_dir=cache)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("jitkern.example.grouped_gemm[tuning table NVIDIA_H200] for cuda:90: 10 buckets")
    exported = cli("tune", grouped, "--target", "cuda:90", "--gpu", H200, "--export-vllm", tmp_path / "out.json",
                   *where, cache_dir=cache)
    assert exported.returncode == 0, exported.stderr
    listed = {size: config for size, config in json.loads(example.read_text()).items() if size in json.loads(
        (tmp_path / "out.json").read_text())}
    assert listed == {size: config for size, config in json.loads((tmp_path / "out.json").read_text()).items()
                      if size in listed}  # the batch sizes both list, with the same configs
    mistakes = [(["--import-vllm", example, "--where", "n"], 2, "error: --where 'n': expected FIELD=VALUE\n"),
                (["--import-vllm", example, "--kernel", "nope"], 2,
                 "error: --kernel nope: not a tuned kernel of the manifests\n"),
                (["--import-vllm", example, "--where", "n=1408"], 1, "error: "),
                ([], 1, "error: tune times candidates on this machine's GPU, and there is none here")]
    for arguments, status, said in mistakes:
        run = cli("tune", grouped, "--target", "cuda:90", *arguments, cache_dir=cache)
        assert run.returncode == status and run.stderr.startswith(said) and run.stderr.count("\n") == 1, run.stderr
