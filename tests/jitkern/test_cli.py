"""``python -m jitkern.warmup`` end to end: compile for cuda:90 here, with no GPU."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from warmup_testing import EXAMPLE, REPO, cache_entries, cli, example_manifest, launchers, report_of, totals, warmup

pytestmark = pytest.mark.compiled


def test_compile_then_everything_cached_then_check_finds_a_deleted_entry(tmp_path):
    cache = tmp_path / "cache"
    first = report_of([EXAMPLE, "--target", "cuda:90", "--jobs", "2"], cache, tmp_path)
    assert totals(first) == {"keys": 72, "compiled": 72, "cached": 0, "failed": 0}
    second = report_of([EXAMPLE, "--target", "cuda:90"], cache, tmp_path)
    assert totals(second) == {"keys": 72, "compiled": 0, "cached": 72, "failed": 0}

    check = warmup(EXAMPLE, "--target", "cuda:90", "--check", cache_dir=cache)
    assert check.returncode == 0 and "all 72 keys in the cache, whole" in check.stdout

    entries = cache_entries(cache)
    assert len(entries) == 72
    assert len(launchers(cache)) == 2  # one per launch signature: n_elements == 1 (a constant) or not
    assert len(list(cache.glob("*/cuda_utils*.so"))) == 1  # Triton's driver module, built once per cache
    victim = entries[0]
    for file in victim.iterdir():
        file.unlink()
    victim.rmdir()
    check = warmup(EXAMPLE, "--target", "cuda:90", "--check", cache_dir=cache)
    assert check.returncode == 1
    assert "1 of 72 keys cannot be used from the cache" in check.stdout
    (missing_line,) = [line for line in check.stdout.splitlines() if line.startswith("  jitkern.example.axpy[")]
    assert missing_line.endswith("for cuda:90: not in the cache")
    rerun = report_of([EXAMPLE, "--target", "cuda:90"], cache, tmp_path)
    assert totals(rerun) == {"keys": 72, "compiled": 1, "cached": 71, "failed": 0}


def test_two_warmups_into_fresh_caches_write_the_same_bytes_and_lock(tmp_path):
    """The host C modules (launchers, cuda_utils, jitkern_launch) are built from sources
    Triton writes into a new temporary folder each time; a build must not keep that path,
    or every warmup (and every repair) gives another lock digest than the one pinned."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    caches = [tmp_path / "first", tmp_path / "second"]
    for cache in caches:
        assert warmup(manifest, "--target", "cuda:90", "--jobs", "1", cache_dir=cache).returncode == 0
    modules = [sorted(str(path.relative_to(cache)) for path in cache.glob("*/*.so")) for cache in caches]
    assert modules[0] == modules[1] and len(modules[0]) == 4  # two launchers, cuda_utils, jitkern_launch
    for name in modules[0]:
        assert (caches[0] / name).read_bytes() == (caches[1] / name).read_bytes(), name
    assert (caches[0] / "jitkern-lock.json").read_bytes() == (caches[1] / "jitkern-lock.json").read_bytes()


def test_a_warmup_with_workers_leaves_nothing_in_the_temporary_folder(tmp_path):
    """Each worker made its own stand-in libcuda folder there and none was removed: CI
    machines gathered thousands."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    run = warmup(manifest, "--target", "cuda:90", "--jobs", "2", cache_dir=tmp_path / "cache",
                 env=dict(os.environ, TMPDIR=str(temporary)), process=True)  # a process's own temporary folder
    assert run.returncode == 0, run.stderr
    assert list(temporary.iterdir()) == []


def test_list_prints_every_key_and_the_count(tmp_path):
    run = warmup(EXAMPLE, "--list", cache_dir=tmp_path)
    assert run.returncode == 0
    lines = run.stdout.strip().splitlines()
    assert lines[-1] == "72 binary keys for cuda:90" and len(lines) == 74  # the manifest's target (no GPU here)
    binaries = [line.split("  # ")[0] for line in lines[:-2]]
    assert all(line.startswith("jitkern.example.axpy[dtype=") and line.endswith("] for cuda:90") for line in binaries)
    assert "jitkern.example.axpy[dtype=float16,block_size=1024,layout=X_ptr:*fp16] for cuda:90  # x unaligned" in lines
    assert lines[-2] == ("jitkern.example.axpy: 3 compile keys, each multiplied by x unaligned x2, y unaligned x2, "
                         "out unaligned x2, n_elements any value x3")  # 3 x 2 x 2 x 2 x 3 = 72
    assert not list(tmp_path.iterdir())


def test_help_shows_an_example_of_each_main_use(tmp_path):
    run = cli("--help", cache_dir=tmp_path)
    assert run.returncode == 0, run.stderr
    examples = run.stdout.split("examples:\n", 1)[1].replace("\\\n", " ")  # join continued lines
    commands = [line for line in examples.splitlines() if "python -m jitkern.warmup" in line]
    for use in ("--target cuda:90", "--check", "--list", "--load", "merge-record", "schema"):
        assert any(use in command for command in commands), use


def test_bad_manifest_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), "kernels": [{"kernel": "nope", "config": {}}]}))
    run = warmup(EXAMPLE, bad, "--target", "cuda:90", cache_dir=cache)
    assert run.returncode == 2
    assert f"{bad}: kernels[0].kernel: unknown kernel 'nope'" in run.stderr
    assert not cache.exists() or not cache_entries(cache)


def test_a_failing_key_does_not_stop_the_others(tmp_path):
    document = json.loads(EXAMPLE.read_text())
    document["kernels"][0]["config"] = {"dtypes": ["float32"], "block_sizes": [128, 1000]}  # 1000: not a power of 2
    del document["layout"]  # aligned tensors only: three binaries (classes of n_elements) a key
    manifest = tmp_path / "broken.json"
    manifest.write_text(json.dumps(document))
    report = tmp_path / "report.json"
    run = warmup(manifest, "--target", "cuda:90", "--report", report, cache_dir=tmp_path / "cache")
    assert run.returncode == 1
    summary = json.loads(report.read_text())
    assert totals(summary) == {"keys": 6, "compiled": 3, "cached": 0, "failed": 3}
    assert {failure["key"]["block_size"] for failure in summary["failures"]} == {1000}
    assert "FAILED jitkern.example.axpy" in run.stderr and "power of 2" in run.stderr


def test_two_workers_compile_the_same_set_as_one(tmp_path):
    """What workers buy is measured by ``benchmarks/bench_warmup.py``; here, that they
    compile exactly the entries one process does."""
    one = report_of([EXAMPLE, "--target", "cuda:90", "--jobs", "1"], tmp_path / "one", tmp_path)
    two = report_of([EXAMPLE, "--target", "cuda:90", "--jobs", "2"], tmp_path / "two", tmp_path)
    assert totals(one) == totals(two) == {"keys": 72, "compiled": 72, "cached": 0, "failed": 0}
    assert sorted(p.name for p in cache_entries(tmp_path / "one")) == sorted(p.name for p in cache_entries(tmp_path / "two"))


def test_under_the_interpreter_warmup_compiles_nothing_and_says_so(tmp_path):
    environment = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path), TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-m", "jitkern.warmup", str(EXAMPLE), "--target", "cuda:90"],
                         cwd=REPO, env=environment, capture_output=True, text=True)
    assert run.returncode == 0 and "nothing to compile" in run.stdout
    assert not list(tmp_path.iterdir())


REFUSED_BY_TRITON = '''
from jitkern.examples.axpy import AxpyKernel


class WarpsAxpy(AxpyKernel):
    name = "test.axpy_warps"

    def constants(self, key):  # num_warps 3: Triton refuses it before its cache lookup
        return dict(super().constants(key), num_warps=3 if key.block_size == 512 else 4)
'''


def test_a_key_that_fails_before_the_cache_lookup_is_named_and_the_others_locked(tmp_path):
    (tmp_path / "warps_axpy.py").write_text(REFUSED_BY_TRITON)
    manifest = tmp_path / "warps.json"
    manifest.write_text(json.dumps({"format_version": 1, "name": "warps", "targets": ["cuda:90"],
                                    "modules": ["warps_axpy"], "kernels": [
                                        {"kernel": "test.axpy_warps",
                                         "config": {"dtypes": ["float32"], "block_sizes": [1024, 512]}}]}))
    environment = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    cache = tmp_path / "cache"
    run = warmup(manifest, "--target", "cuda:90", "--jobs", "1", cache_dir=cache, env=environment,
                 process=True)  # its PYTHONPATH finds the manifest's module
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    refused = "cannot be compiled: AssertionError: num_warps must be a power of 2"
    unlocked = [line for line in run.stderr.splitlines() if line.startswith("not locked: ")]
    assert len(unlocked) == 3 and all("block_size=512" in line and line.endswith(refused) for line in unlocked)
    lock = json.loads((cache / "jitkern-lock.json").read_text())
    assert len(lock["keys"]) == 3 and all("block_size=1024" in key for key in lock["keys"])  # three layouts each

    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache, env=environment, process=True)
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stderr
    assert "3 of 6 keys cannot be used from the cache:" in check.stdout
    assert [line.removeprefix("not locked: ") for line in unlocked] == [
        line.removeprefix("  ") for line in check.stdout.splitlines() if "block_size=512" in line]


def test_usage_mistakes_are_one_line_before_anything_is_compiled_or_written(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "a-file").write_text("")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mistakes = [
        (["--report", tmp_path / "missing" / "r.json"], 2, f"--report {tmp_path}/missing/r.json: no directory"),
        (["--report", tmp_path], 2, f"--report {tmp_path}: is a directory"),
        (["--remote", "http://127.0.0.1:6379/0"], 2, "--remote: remote cache 'http://127.0.0.1:6379/0': expected"),
        (["--remote", "redis://127.0.0.1:port/0", "--check"], 2, "Port could not be cast to integer"),
        (["--remote", f"redis://127.0.0.1:{port}/0"], 1, f"redis://127.0.0.1:{port}/0: connecting failed"),
        (["--load"], 1, "--load loads the binaries onto this machine's GPU, and there is none here"),
        (["--target", "cuda:80,cuda:999"], 2, "target 'cuda:999': Triton 3.6.0 compiles for no such GPU"),
    ]
    for arguments, returncode, message in mistakes:
        run = warmup(EXAMPLE, "--target", "cuda:90", *arguments, cache_dir=cache)
        assert (run.returncode, len(run.stderr.splitlines())) == (returncode, 1) and message in run.stderr, \
            (arguments, run.stderr)
        assert not cache.exists()
    pack = cli("pack", EXAMPLE, "--target", "cuda:90", "--out", tmp_path / "a-file", cache_dir=cache)
    assert (pack.returncode, pack.stderr) == (2, f"error: --out {tmp_path}/a-file: not a directory\n")
    fleet = cli("pack", EXAMPLE, "--target", "cuda:90,cuda:80", "--out", tmp_path / "dist", cache_dir=cache)
    assert (fleet.returncode, fleet.stderr) == (
        2, "error: --target cuda:90,cuda:80: pack writes one wheel per target; run it once for each\n")
    assert not (tmp_path / "dist").exists()


def test_an_interrupted_warmup_says_so_in_one_line(tmp_path):
    cache = tmp_path / "cache"
    run = warmup(EXAMPLE, "--target", "cuda:90", "--jobs", "1", cache_dir=cache, background=True)
    deadline = time.monotonic() + 60
    while not (cache.exists() and cache_entries(cache)) and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    # A host module's C compiler (Triton's), left running when the warmup exits, may say so
    # after it, its source folder gone: those lines are the compiler's, not the warmup's.
    ours = [line for line in stderr.splitlines() if not line.startswith(("cc1", "compilation terminated"))]
    assert run.returncode == 130 and ours[-1] == "interrupted: run it again to compile what is left", stderr
    assert "Traceback" not in stderr, stderr


def test_merge_record_writes_through_a_symlink_keeps_the_mode_and_names_bad_lines(tmp_path):
    (tmp_path / "real").mkdir()
    manifest = tmp_path / "real" / "m.json"
    manifest.write_text(EXAMPLE.read_text())
    manifest.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(manifest)
    record = tmp_path / "record.jsonl"
    record.write_text(json.dumps({"kernel": "jitkern.example.axpy", "key": {"dtype": "float32", "block_size": 512}}))
    merged = cli("merge-record", record, link, cache_dir=tmp_path)
    assert merged.returncode == 0 and merged.stdout == f"1 key(s) added to {link}\n", merged.stderr
    assert link.is_symlink() and oct(manifest.stat().st_mode & 0o777) == "0o640"
    assert {"dtype": "float32", "block_size": 512} in json.loads(manifest.read_text())["kernels"][-1]["keys"]
    assert sorted(p.name for p in tmp_path.joinpath("real").iterdir()) == ["m.json"]

    for line, why in [("[1, 2]", 'expected {"kernel": NAME, "key": {...}}, got [1, 2]'),
                      ('"hello"', 'expected {"kernel": NAME, "key": {...}}, got "hello"'),
                      ('{"kernel": ["a"]}', 'expected {"kernel": NAME, "key": {...}}, got {"kernel": ["a"]}'),
                      ("{", "not JSON")]:
        record.write_text(json.dumps({"kernel": "jitkern.example.axpy", "key": {"dtype": "float16", "block_size": 512}})
                          + "\n" + line + "\n")
        bad = cli("merge-record", record, link, cache_dir=tmp_path)
        assert bad.returncode == 2 and bad.stderr.startswith(f"error: {record}, line 2: {why}"), bad.stderr
    record.write_text(json.dumps({"kernel": "jitkern.example.axpy", "key": {"dtype": "float33", "block_size": 512}}))
    invalid = cli("merge-record", record, link, cache_dir=tmp_path)
    assert invalid.returncode == 2 and invalid.stderr.startswith(f"error: {link} merged with {record}: "), invalid.stderr
    manifest.chmod(0o444)
    read_only = cli("merge-record", record, link, cache_dir=tmp_path)
    assert (read_only.returncode, read_only.stderr) == (2, f"error: {link}: read-only; make it writable to merge the "
                                                           "record into it\n")


def test_the_console_script_finds_a_manifests_modules_in_the_working_folder_as_python_m_does(tmp_path):
    source = (REPO / "jitkern" / "examples" / "axpy.py").read_text()
    (tmp_path / "own_axpy.py").write_text(source.replace('"jitkern.example.axpy"', '"own.axpy"'))
    manifest = json.loads(EXAMPLE.read_text())
    manifest.update(modules=["own_axpy"], kernels=[{"kernel": "own.axpy", "config": {"dtypes": ["float32"]}}])
    (tmp_path / "own.json").write_text(json.dumps(manifest))
    script = os.path.join(os.path.dirname(sys.executable), "jitkern-warmup")
    listed = subprocess.run([script, "own.json", "--list"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout.splitlines()[-1] == "24 binary keys for cuda:90", listed.stdout

