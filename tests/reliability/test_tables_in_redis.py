"""A tuning table shared through Redis as the binaries are (issue 32): published with the
lock, checked there with no local cache, read through by a node with an empty cache, and
refused when Redis holds it otherwise than the pinned lock says. Against a real
``redis-server``, compiled for cuda:90 on the CPU, served through a dry run."""

import json
import os
import re
import warnings
from pathlib import Path

import pytest
from redis_testing import shared_redis
from tuned_kernels import CONFIGS, TunedDouble
from warmup_testing import warmup

from jitkern import settings
from jitkern.cache.tables import TABLE_FILE, table_folder
from jitkern.serve import load
from jitkern.tuning import Row, store, table_of

pytestmark = pytest.mark.compiled

TESTS = Path(__file__).resolve().parents[1]


def test_a_table_travels_through_redis_with_the_lock_and_is_refused_when_tampered(dry_run_gpu, triton_cache,
                                                                                   tmp_path, monkeypatch):
    manifest, built = tmp_path / "m.json", tmp_path / "built"
    manifest.write_text(json.dumps({"format_version": 1, "name": "tuned", "targets": ["cuda:90"],
                                    "modules": ["tuned_kernels"],
                                    "kernels": [{"kernel": "test.tuned_double", "config": {"max_size": 1024}}]}))
    env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert warmup(manifest, "--target", "cuda:90", cache_dir=built, env=env).returncode == 0
    table = table_of(TunedDouble(), "cuda:90", "NVIDIA H200", [Row({"dtype": "float32", "size": 1}, CONFIGS[1]),
                                                             Row({"dtype": "float32", "size": 1024}, CONFIGS[1])], "")
    with monkeypatch.context() as building:
        building.setenv("TRITON_CACHE_DIR", str(built))
        store(table)
    folder = table_folder("test.tuned_double", "cuda:90", "NVIDIA H200")
    with shared_redis(tmp_path) as server:
        run = warmup(manifest, "--target", "cuda:90", "--remote", server.url, cache_dir=built, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        lock_digest = re.search(r"lock sha256 (\w+)", run.stdout)[1]
        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url,
                       cache_dir=tmp_path / "empty", env=env)
        assert check.returncode == 0 and "all 4 keys in redis://" in check.stdout, check.stdout  # 3 binaries, 1 table

        try:
            with settings.scope(remote_cache=server.url, lock_digest=lock_digest):
                [loaded] = load([str(manifest)])
            assert loaded.binaries == 1 and TunedDouble().winners.rows == {("float32", 1): CONFIGS[1],
                                                                          ("float32", 1024): CONFIGS[1]}
            assert (triton_cache / folder / TABLE_FILE).read_bytes() == table.to_bytes()  # kept, as an entry is

            server.client.hset(f"jitkern:entry:{folder}", "file:tuning.json", table.to_bytes().replace(b"256", b"64"))
            (triton_cache / folder / TABLE_FILE).unlink()
            TunedDouble().binaries.forget()
            with settings.scope(remote_cache=server.url, lock_digest=lock_digest, load_memo=False), \
                    warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                load([str(manifest)])
            said = [str(warning.message) for warning in caught]
            assert any(re.match(r"jitkern: refused test.tuned_double\[tuning table NVIDIA_H200\] for cuda:90 from "
                                r"redis://.*: tuning.json does not match the lock", line) for line in said), said
            assert "jitkern: test.tuned_double for cuda:90 on NVIDIA H200: its tuning table cannot be used: refused " \
                   "from redis://" in "\n".join(said)
            assert TunedDouble().winners.rows == {}
        finally:
            TunedDouble().winners.take({}, "")
            TunedDouble().binaries.forget()
