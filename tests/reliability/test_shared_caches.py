"""Shipping and sharing warmed caches (issue 15): the lock, Redis, cache wheels, faults.

Each test runs against a real ``redis-server`` and compiles for cuda:90 on the CPU; the
serving side loads through ``jitkern.testing.dry_run_gpu``. ``docs/reliability.md``
(section 9) lists what each tried and what held.
"""

import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from redis_testing import redis_server, shared_redis
from reliability_testing import forget_all_binaries
from warmup_testing import REPO, example_manifest, warmup

from jitkern import guard, hooks, settings
from jitkern.cache.entries import inspect_entry
from jitkern.cache.manager import lookup_entry
from jitkern.examples.axpy import axpy
from jitkern.cache.lock import LOCK_FILE, Lock
from jitkern.cache.remote import RECORD_FILE, RedisStore
from jitkern.testing import assert_no_compile
from jitkern.serve import MissingBinary, load

pytestmark = pytest.mark.compiled

AXPY = "jitkern.example.axpy"


def publish(manifest, cache, url, **environment):
    run = warmup(manifest, "--target", "cuda:90", "--remote", url, cache_dir=cache, env=dict(os.environ, **environment))
    return run, (re.search(r"lock sha256 (\w+)", run.stdout) or [None, None])[1]


def serve(manifest, **changes):
    """``load()`` in this process with these settings: "loaded" or the error, and the warnings."""
    forget_all_binaries()
    with settings.scope(**changes), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            load([str(manifest)])
            outcome = "loaded"
        except MissingBinary as error:
            outcome = str(error)
    return outcome, [str(w.message) for w in caught if issubclass(w.category, (RuntimeWarning,))]


def verified_entries(cache, lock: Lock) -> dict[str, str | None]:
    """Every entry folder in ``cache`` the lock names -> None when whole and matching, else why not."""
    states = {}
    for folder in lock.entries:
        if (cache / folder).is_dir() and any(name.startswith("__grp__") for name in os.listdir(cache / folder)):
            group = next(name for name in lock.entries[folder] if name.endswith(".json"))
            states[folder] = inspect_entry(str(cache / folder), group).problem
    return states


def binary_entry(lock: Lock, key: str) -> str:
    """The entry folder holding the key's binary (the others hold its host modules)."""
    return next(folder for folder in lock.keys[key] if any(name.endswith(".cubin") for name in lock.entries[folder]))


# --- the lock and Redis -------------------------------------------------------------------


def test_a_node_with_an_empty_cache_loads_every_key_from_redis(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    built = tmp_path / "built"
    with shared_redis(tmp_path) as server:
        run, lock_digest = publish(manifest, built, server.url)
        assert run.returncode == 0 and "entries written, 0 already there" in run.stdout, run.stdout + run.stderr
        again, same_digest = publish(manifest, built, server.url)
        assert "published to" in again.stdout and " 0 entries written" in again.stdout and same_digest == lock_digest
        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url, cache_dir=tmp_path / "empty")
        assert check.returncode == 0 and "all 3 keys in redis://" in check.stdout, check.stdout + check.stderr

        outcome, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest)
        assert (outcome, warned) == ("loaded", [])
        guard.set_mode("error")
        try:
            with assert_no_compile():
                axpy(torch.randn(33), torch.randn(33), 2.0)
        finally:
            guard.set_mode("off")
    lock = Lock.from_bytes((built / LOCK_FILE).read_bytes(), "lock")
    assert set(verified_entries(triton_cache, lock).values()) == {None}


def test_an_attacker_who_can_write_redis_gets_nothing_loaded(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    built = tmp_path / "built"
    with shared_redis(tmp_path) as server:
        run, lock_digest = publish(manifest, built, server.url, JITKERN_LOCK_KEY="the fleet's secret")
        assert run.returncode == 0, run.stderr
        honest = Lock.from_bytes((built / LOCK_FILE).read_bytes(), "lock")
        victim_key = sorted(honest.keys)[0]
        victim = binary_entry(honest, victim_key)

        # The attacker rewrites an entry and its record, and publishes a lock that matches them.
        store = RedisStore(server.url)
        files = dict(store.fetch(victim).files)
        cubin = next(name for name in files if name.endswith(".cubin"))
        files[cubin] = files[cubin][:200] + bytes([files[cubin][200] ^ 0xFF]) + files[cubin][201:]
        store.publish(victim, files, victim_key)
        forged = Lock(honest.keys, dict(honest.entries, **{victim: {n: hashlib.sha256(d).hexdigest()
                                                                        for n, d in files.items()}}))
        store.put_lock(forged, "jitkern-example@cuda:90")

        pinned, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest)
        assert f"{victim_key.removesuffix(' for cuda:90')}: refused from {server.url}: {cubin} does not match the lock" \
            in pinned, pinned
        (refusal,) = [line for line in warned if line.startswith("jitkern: refused")]
        assert refusal.startswith(f"jitkern: refused {victim_key} from {server.url}: {cubin} does not match")
        assert not (triton_cache / victim).exists() or not any(p.suffix == ".cubin" for p in (triton_cache / victim).iterdir())

        keyed, _ = serve(manifest, remote_cache=server.url, lock_key="the fleet's secret")
        assert keyed.startswith("1 of 3 keys are not usable") and "not in a trusted lock" in keyed, keyed
        unpinned, _ = serve(manifest, remote_cache=server.url)
        assert unpinned.startswith("1 of 3 keys"), unpinned  # the two others were materialised above

        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url,
                       cache_dir=tmp_path / "empty", env=dict(os.environ, JITKERN_LOCK_DIGEST=lock_digest))
        assert check.returncode == 1 and f"{victim_key}: entry {victim}: tampered or damaged: {cubin}" in check.stdout


def test_an_unreadable_redis_entry_is_refused_alone_and_republishing_repairs_damage(dry_run_gpu, triton_cache,
                                                                                    tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    built = tmp_path / "built"
    with shared_redis(tmp_path) as server:
        run, lock_digest = publish(manifest, built, server.url)
        assert run.returncode == 0, run.stderr
        lock = Lock.from_bytes((built / LOCK_FILE).read_bytes(), "lock")
        foreign_name, wrong_type, flipped = sorted(lock.keys)
        entry = {key: f"jitkern:entry:{binary_entry(lock, key)}" for key in lock.keys}
        server.client.hset(entry[foreign_name], b"file:\xff", b"x")  # a field name that is not UTF-8
        server.client.delete(entry[wrong_type])
        server.client.set(entry[wrong_type], b"not a hash")

        outcome, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest)
        assert outcome.startswith("2 of 3 keys are not usable"), outcome  # the third loaded from Redis
        assert not [line for line in warned if "reading local caches only" in line], warned
        assert f"jitkern: refused {foreign_name} from {server.url}: {entry[foreign_name]} has a field name that is " \
               "not UTF-8; nothing of it is loaded" in warned, warned
        assert f"jitkern: refused {wrong_type} from {server.url}: {entry[wrong_type]} holds another type" in "\n".join(warned)
        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url, cache_dir=built)
        assert check.returncode == 1 and "2 of 3 keys cannot be used" in check.stdout, check.stdout + check.stderr
        assert f"{wrong_type}: entry {entry[wrong_type].rsplit(':', 1)[1]}: tampered or damaged" in check.stdout

        server.client.hset(entry[flipped], "record", json.dumps({"files": {}, "hmac": "\u00e9"}))
        keyed, _ = serve(manifest, remote_cache=server.url, lock_key="the fleet's secret")
        assert f"{flipped.removesuffix(' for cuda:90')}: refused from {server.url}: not in a trusted lock" in keyed

        cubin = next(name for name in server.client.hkeys(entry[flipped]) if name.endswith(b".cubin"))
        data = server.client.hget(entry[flipped], cubin)
        server.client.hset(entry[flipped], cubin, data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])
        again, _ = publish(manifest, built, server.url)
        assert "published to" in again.stdout and ": 3 entries written" in again.stdout, again.stdout + again.stderr
        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url, cache_dir=built)
        assert check.returncode == 0 and "all 3 keys in redis://" in check.stdout, check.stdout + check.stderr
# --- the lock and the CLI's checks ------------------------------------------------------------


def test_a_node_trusting_the_hmac_key_restarts_on_its_local_copies_with_redis_down(dry_run_gpu, triton_cache,
                                                                                   tmp_path):
    """A node trusting Redis through ``JITKERN_LOCK_KEY`` alone keeps each entry it took from
    Redis with its signed record, so a restart with Redis down loads them from its cache
    directory. Before, it refused every local copy ('not in a trusted lock'): it fetched
    everything again, and with Redis down it could not start. A copy changed on disk, or a
    record rewritten to match it, is still refused."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=[random.choice(["float32", "float16", "bfloat16"])])
    secret = f"fleet-{random.getrandbits(64):x}"
    with redis_server(tmp_path) as server:
        run, _ = publish(manifest, tmp_path / "built", server.url, JITKERN_LOCK_KEY=secret)
        assert run.returncode == 0, run.stderr
        assert serve(manifest, remote_cache=server.url, lock_key=secret) == ("loaded", [])
    assert serve(manifest, remote_cache=server.url, lock_key=secret, remote_timeout=0.5) == ("loaded", [])

    lock = Lock.from_bytes((tmp_path / "built" / LOCK_FILE).read_bytes(), "lock")
    victim_key = random.choice(sorted(lock.keys))
    victim = binary_entry(lock, victim_key)
    cubin = next(triton_cache.glob(f"{victim}/*.cubin"))
    flip_a_byte(cubin)
    changed, _ = serve(manifest, remote_cache=server.url, lock_key=secret, remote_timeout=0.5)
    assert changed.startswith("1 of 3 keys are not usable") and f"{cubin.name} does not match the lock" in changed, changed
    record = json.loads((triton_cache / victim / RECORD_FILE).read_text())
    record["files"][cubin.name] = hashlib.sha256(cubin.read_bytes()).hexdigest()  # the HMAC no longer matches
    (triton_cache / victim / RECORD_FILE).write_text(json.dumps(record))
    forged, _ = serve(manifest, remote_cache=server.url, lock_key=secret, remote_timeout=0.5)
    assert forged.startswith("1 of 3 keys are not usable") and "not in a trusted lock" in forged, forged


def test_a_warmup_with_the_hmac_key_signs_its_cache_and_does_not_distrust_it(triton_cache, tmp_path):
    """``JITKERN_LOCK_KEY`` set for a warmup signs each entry beside its files, so a copy of
    the directory serves nodes that trust that key alone; warming again compiles nothing.
    Before, the second warmup refused its own entries as unsigned and compiled every key
    again, and nodes trusting the key alone refused the copy."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=[random.choice(["float32", "float16", "bfloat16"])])
    secret = f"fleet-{random.getrandbits(64):x}"
    signed = dict(os.environ, JITKERN_LOCK_KEY=secret)
    first = warmup(manifest, "--target", "cuda:90", cache_dir=tmp_path / "built", env=signed)
    assert first.returncode == 0 and "signed with JITKERN_LOCK_KEY: " in first.stdout, first.stdout + first.stderr
    again = warmup(manifest, "--target", "cuda:90", cache_dir=tmp_path / "built", env=signed)
    assert again.returncode == 0 and "replaced" not in again.stderr, again.stderr
    assert re.search(r"all\s+total\s+3\s+0\s+3\s+0\s", again.stdout), again.stdout  # keys, compiled, cached, failed
    assert "signed with JITKERN_LOCK_KEY: 0 entries' records written" in again.stdout
    unsigned = warmup(manifest, "--target", "cuda:90", cache_dir=tmp_path / "unsigned")
    assert unsigned.returncode == 0 and "signed with" not in unsigned.stdout

    from jitkern.testing import dry_run_gpu as gpu

    for copied, expected in (("built", "loaded"), ("unsigned", "3 of 3 keys are not usable")):
        shutil.rmtree(triton_cache)
        shutil.copytree(tmp_path / copied, triton_cache)
        with gpu("cuda:90"):
            outcome, _ = serve(manifest, lock_key=secret)
        assert outcome.startswith(expected) and (copied == "built" or "not in a trusted lock" in outcome), outcome


def warmed_and_locked(tmp_path):
    """A 3-key cache warmed by the CLI (which locks it): manifest, cache, lock, its digest."""
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    cache = tmp_path / "cache"
    run = warmup(manifest, "--target", "cuda:90", cache_dir=cache)
    assert run.returncode == 0, run.stderr
    data = (cache / LOCK_FILE).read_bytes()
    return manifest, cache, Lock.from_bytes(data, "lock"), hashlib.sha256(data).hexdigest()


def flip_a_byte(path: Path) -> None:
    """One byte changed past the ELF header: the file still reads as a whole ELF file."""
    data = bytearray(path.read_bytes())
    data[random.randrange(64, len(data))] ^= 1 << random.randrange(8)
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:random.randrange(1, path.stat().st_size // 2)])


def host_module(cache: Path, lock: Lock, prefix: str) -> Path:
    """One of the host C modules the lock lists whose file name starts with ``prefix``."""
    return random.choice([cache / folder / name for folder, files in sorted(lock.entries.items()) for name in files
                          if name.startswith(prefix)])


def keys_loading(lock: Lock, folder: str) -> list[str]:
    return sorted(key for key, folders in lock.keys.items() if folder in folders)


@pytest.mark.parametrize("module", ["__triton_launcher", "cuda_utils", "jitkern_launch"])
def test_check_verifies_every_host_module_a_key_loads(tmp_path, module):
    manifest, cache, lock, lock_digest = warmed_and_locked(tmp_path)
    path = host_module(cache, lock, module)
    original = path.read_bytes()
    pinned = dict(os.environ, JITKERN_LOCK_DIGEST=lock_digest)
    for damage, problem, environment in [(flip_a_byte, "does not match the lock", pinned),
                                         (truncate, "is truncated or not an ELF file", os.environ),
                                         (Path.unlink, "is not in the cache", os.environ)]:
        damage(path)
        check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache, env=environment)
        lines = sorted(line.strip() for line in check.stdout.splitlines() if line.startswith("  "))
        expected = keys_loading(lock, path.parent.name)
        assert check.returncode == 1 and [line.partition(": ")[0] for line in lines] == expected, check.stdout
        assert all(path.parent.name in line and path.name in line and problem in line for line in lines), lines
        path.write_bytes(original)
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache, env=pinned).returncode == 0
    path.unlink()  # as in a cache made before the module existed: a warmup adds it (and locks it anew)
    assert warmup(manifest, "--target", "cuda:90", cache_dir=cache, process=True).returncode == 0  # builds it anew
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0


@pytest.mark.parametrize("victim", ["cubin", "launcher"])
def test_pack_refuses_what_the_trusted_lock_refuses_and_writes_no_wheel(tmp_path, victim):
    manifest, cache, lock, lock_digest = warmed_and_locked(tmp_path)
    if victim == "cubin":
        folder = binary_entry(lock, random.choice(sorted(lock.keys)))
        (path,) = (cache / folder).glob("*.cubin")
    else:
        path = host_module(cache, lock, "__triton_launcher")
    flip_a_byte(path)
    dist = tmp_path / "dist"
    pack = subprocess.run([sys.executable, "-m", "jitkern.warmup", "pack", str(manifest), "--target", "cuda:90",
                           "--cache-dir", str(cache), "--out", str(dist)], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, JITKERN_LOCK_DIGEST=lock_digest))
    refused = sorted(line.strip().partition(": ")[0] for line in pack.stderr.splitlines() if line.startswith("  "))
    assert pack.returncode == 1 and refused == keys_loading(lock, path.parent.name), pack.stderr
    assert f"{path.name} does not match the lock" in pack.stderr and "no wheel was written" in pack.stderr
    assert not dist.exists() or not list(dist.iterdir())


@pytest.mark.parametrize("victim", ["cubin", "launcher"])
def test_a_warmup_replaces_a_file_its_own_lock_shows_changed_instead_of_locking_it(tmp_path, victim):
    """With no lock pinned the cache's own lock authenticates nothing, but it shows damage."""
    manifest, cache, lock, lock_digest = warmed_and_locked(tmp_path)
    key = random.choice(sorted(lock.keys))
    if victim == "cubin":
        (path,) = (cache / binary_entry(lock, key)).glob("*.cubin")
    else:
        path = host_module(cache, lock, "__triton_launcher")
    flip_a_byte(path)
    check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache)
    assert check.returncode == 1 and f"{path.name} does not match the cache's {LOCK_FILE}" in check.stdout

    rerun = warmup(manifest, "--target", "cuda:90", cache_dir=cache)
    assert rerun.returncode == 0, rerun.stderr
    replaced = [line for line in rerun.stderr.splitlines() if line.startswith("replaced a damaged entry of")]
    assert replaced and all(f"{path.name} does not match the cache's {LOCK_FILE}" in line for line in replaced)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == lock.entries[path.parent.name][path.name]
    assert hashlib.sha256((cache / LOCK_FILE).read_bytes()).hexdigest() == lock_digest
    assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0


def test_an_unreadable_lock_fails_the_check_and_a_warmup_writes_it_anew(tmp_path):
    """A cut or garbled lock shows no damage of the entries (and cannot be pinned): --check
    says so instead of passing, and the next warmup writes the same lock again."""
    manifest, cache, lock, lock_digest = warmed_and_locked(tmp_path)
    data = (cache / LOCK_FILE).read_bytes()
    for damaged in (data[:random.randrange(1, len(data) - 2)], data.replace(b'"entries"', b'"entrie\xff"')):
        (cache / LOCK_FILE).write_bytes(damaged)
        check = warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache)
        assert check.returncode == 1, check.stdout
        assert f"the cache's lock cannot be read, so it shows no damage: {cache / LOCK_FILE}: not a valid jitkern lock" \
            in check.stdout
        rerun = warmup(manifest, "--target", "cuda:90", cache_dir=cache)
        assert rerun.returncode == 0 and "replaced the cache's unreadable lock" in rerun.stderr, rerun.stderr
        assert hashlib.sha256((cache / LOCK_FILE).read_bytes()).hexdigest() == lock_digest
        assert warmup(manifest, "--target", "cuda:90", "--check", cache_dir=cache).returncode == 0


# --- cache wheels ---------------------------------------------------------------------------


SERVE_WHEEL = """
import sys, warnings
from jitkern.testing import dry_run_gpu
from jitkern.serve import MissingBinary, load
with dry_run_gpu(), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        load([sys.argv[1]])  # refuses to compile: every binary comes from the wheel
        print("loaded")
    except MissingBinary as error:
        print("refused:", error)
for warning in caught:
    print("warning:", warning.message)
"""


def test_an_installed_cache_wheel_serves_with_no_cache_directory(tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32"])
    for target in ("cuda:90", "cuda:80"):
        cache = tmp_path / f"cache-{target[-2:]}"
        assert warmup(manifest, "--target", target, cache_dir=cache).returncode == 0
        pack = subprocess.run([sys.executable, "-m", "jitkern.warmup", "pack", str(manifest), "--target", target,
                               "--cache-dir", str(cache), "--out", str(tmp_path / f"dist-{target[-2:]}")],
                              cwd=REPO, capture_output=True, text=True)
        assert pack.returncode == 0, pack.stderr
    (wheel,) = (tmp_path / "dist-90").glob("*.whl")
    assert re.fullmatch(r"jitkern_cache_jitkern_example_cuda_90-1\.0\.0-cp3\d+-cp3\d+-.*x86_64\.whl", wheel.name)

    def installed(wheel_path, folder):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                        str(folder), str(wheel_path)], check=True, capture_output=True)
        environment = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
        environment.update(PYTHONPATH=f"{folder}{os.pathsep}{REPO}", HOME=str(tmp_path / "home"), TRITON_INTERPRET="0")
        return environment

    def run(environment, *command):
        done = subprocess.run([sys.executable, *command], cwd=REPO, env=environment, capture_output=True, text=True)
        return done.stdout + done.stderr

    site = tmp_path / "site"
    environment = installed(wheel, site)
    served = run(environment, "-c", SERVE_WHEEL, str(manifest))
    assert served.splitlines() == ["loaded"], served
    check = run(environment, "-m", "jitkern.warmup", str(manifest), "--target", "cuda:90", "--check", "--no-progress")
    assert "all 3 keys in the cache, whole" in check, check

    package = site / "jitkern_cache_jitkern_example_cuda_90" / "cache"
    lock = Lock.from_bytes((package / LOCK_FILE).read_bytes(), "lock")
    victim_key = sorted(lock.keys)[0]
    (cubin,) = (package / binary_entry(lock, victim_key)).glob("*.cubin")
    cubin.write_bytes(cubin.read_bytes()[:300] + b"\0" + cubin.read_bytes()[301:])
    refused = run(environment, "-c", SERVE_WHEEL, str(manifest))
    assert "refused: 1 of 3 keys" in refused and f"{cubin.name} does not match the lock" in refused, refused
    assert f"warning: jitkern: refused {victim_key} from {package}: {cubin.name} does not match" in refused

    (other,) = (tmp_path / "dist-80").glob("*.whl")
    environment = installed(other, tmp_path / "site-80")
    foreign = run(environment, "-c", SERVE_WHEEL, str(manifest))
    assert foreign.splitlines()[0] == ("refused: the cache wheel jitkern_cache_jitkern_example_cuda_80 was made for "
                                       "cuda:80; this process serves cuda:90: 3 of 3 keys would recompile"), foreign


# --- faults ---------------------------------------------------------------------------------


def test_redis_absent_slow_killed_or_flushed_loads_whole_entries_or_says_why(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16", "bfloat16"])  # 9 keys
    built = tmp_path / "built"
    with redis_server(tmp_path) as server:
        run, lock_digest = publish(manifest, built, server.url)
        assert run.returncode == 0, run.stderr
        snapshot = {key: server.client.dump(key) for key in server.client.keys("*")}
    lock = Lock.from_bytes((built / LOCK_FILE).read_bytes(), "lock")

    def one_unavailable_line(warned):
        return len([line for line in warned if "reading local caches only" in line]) == 1

    # absent at start: the server is gone; one line, every key named, in one timeout at most
    start = time.monotonic()
    absent, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest, remote_timeout=0.5)
    assert absent.startswith("9 of 9 keys are not usable") and one_unavailable_line(warned), (absent, warned)
    assert time.monotonic() - start < 5

    with redis_server(tmp_path) as server:
        for key, value in snapshot.items():
            server.client.restore(key, 0, value)
        # slow past the timeout
        server.client.execute_command("CLIENT", "PAUSE", 3000)
        start = time.monotonic()
        slow, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest, remote_timeout=0.3)
        assert slow.startswith("9 of 9 keys") and one_unavailable_line(warned) and time.monotonic() - start < 2.5
        time.sleep(max(0.0, 3.1 - (time.monotonic() - start)))

        # killed in the middle of a load: after the third key
        loaded = []

        def kill_after_three(**_):
            loaded.append(1)
            if len(loaded) == 3:
                server.kill()

        with hooks.watching(on_compile=kill_after_three):
            # a new URL for the same server: this process gave up the first one when it was slow
            killed, warned = serve(manifest, remote_cache=server.url + "?db=0", lock_digest=lock_digest)
        assert killed.startswith("6 of 9 keys") and one_unavailable_line(warned), (killed, warned)
        states = verified_entries(triton_cache, lock)
        assert len(states) == 3 and set(states.values()) == {None}
        for folder in states:
            assert lookup_entry(folder, next(n for n in lock.entries[folder] if n.endswith(".json"))).usable

    with redis_server(tmp_path) as server:
        for key, value in snapshot.items():
            server.client.restore(key, 0, value)
        server.client.flushall()
        flushed, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest)
        assert flushed.startswith("6 of 9 keys") and warned == [], (flushed, warned)  # the lock was kept locally
        guard.set_mode("error")
        try:
            with settings.scope(remote_cache=server.url), pytest.raises(guard.ServeTimeCompile, match=AXPY):
                axpy(torch.randn(33, dtype=torch.float16), torch.randn(33, dtype=torch.float16), 2.0)
        finally:
            guard.set_mode("off")


def test_publishing_into_a_full_redis_leaves_whole_entries_only(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16", "bfloat16"],
                                block_sizes=[256, 1024])  # 18 keys, about 1.2 MB in Redis
    built = tmp_path / "built"
    with redis_server(tmp_path, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction") as server:
        run, _ = publish(manifest, built, server.url)
        assert run.returncode == 1
        (line,) = run.stderr.strip().splitlines()[-1:]
        assert line.startswith(f"error: publishing to {server.url}: ") and "maxmemory" in line, run.stderr
        check = warmup(manifest, "--target", "cuda:90", "--check", "--remote", server.url, cache_dir=built)
        missing = [line for line in check.stdout.splitlines() if line.startswith("  ")]
        assert check.returncode == 1 and missing and all("missing from the remote cache" in m for m in missing)
        lock_digest = hashlib.sha256((built / LOCK_FILE).read_bytes()).hexdigest()
        (built / LOCK_FILE).rename(triton_cache / LOCK_FILE)  # the pinned lock is found in the node's cache
        outcome, warned = serve(manifest, remote_cache=server.url, lock_digest=lock_digest)
        assert outcome.startswith(f"{len(missing)} of 18 keys") and warned == [], (outcome, warned)


def _loader(arguments):
    """One serving process of the fleet: its own empty cache, loading until every key is in."""
    url, lock_digest, manifest, cache = arguments
    os.environ["TRITON_CACHE_DIR"] = cache
    deadline, attempts = time.monotonic() + 90, 0
    while True:
        attempts += 1
        outcome, warned = serve(manifest, remote_cache=url, lock_digest=lock_digest)
        # "not in a trusted lock" while the pinned lock is not published yet is a refusal, not a torn read
        torn = [line for line in warned if any(word in line for word in ("does not match", "damaged", "missing"))]
        if outcome == "loaded" or time.monotonic() > deadline or torn:
            return outcome, torn, attempts
        time.sleep(0.05)


def test_sixteen_loaders_and_two_publishers_on_one_redis(dry_run_gpu, tmp_path):
    manifest = example_manifest(tmp_path / "m.json", dtypes=["float32", "float16", "bfloat16"])  # 9 keys
    built = tmp_path / "built"
    assert warmup(manifest, "--target", "cuda:90", cache_dir=built).returncode == 0
    lock_digest = hashlib.sha256((built / LOCK_FILE).read_bytes()).hexdigest()
    with redis_server(tmp_path) as server:
        publishers = [warmup(manifest, "--target", "cuda:90", "--remote", server.url, cache_dir=built, background=True)
                      for _ in range(2)]
        caches = [str(tmp_path / f"node-{i}") for i in range(16)]
        with multiprocessing.get_context("fork").Pool(16) as pool:
            results = pool.map(_loader, [(server.url, lock_digest, str(manifest), cache) for cache in caches])
        for run in publishers:
            stdout, stderr = run.communicate(timeout=120)
            assert run.returncode == 0, stderr
    assert [(outcome, warned) for outcome, warned, _ in results] == [("loaded", [])] * 16, results
    lock = Lock.from_bytes((built / LOCK_FILE).read_bytes(), "lock")
    for cache in caches:
        assert set(verified_entries(Path(cache), lock).values()) == {None}
    print("attempts per loader:", [attempts for _, _, attempts in results])
