"""Triton's hash of its own build is remembered per build, and never used by another one."""

from __future__ import annotations

import json
import os
import time

import pytest

from jitkern import settings, memo as triton_build


@pytest.fixture
def state_dir(tmp_path):
    with settings.scope(state_dir=str(tmp_path)):
        yield tmp_path


def test_a_build_hashes_once_and_then_reads_its_answer(state_dir):
    calls = []

    def compute():
        calls.append(1)
        return "3.6.0-the-real-hash"

    assert triton_build.remembered_triton_key(compute) == "3.6.0-the-real-hash"
    assert triton_build.remembered_triton_key(compute) == "3.6.0-the-real-hash"
    assert len(calls) == 1
    memo = json.loads((state_dir / triton_build.MEMO_FILE).read_text())
    assert memo == {triton_build.fingerprint(): "3.6.0-the-real-hash"}


def test_another_build_never_reads_this_builds_answer(state_dir, monkeypatch):
    """A recorded answer under another fingerprint (another wheel, a reinstall) is not used."""
    (state_dir / triton_build.MEMO_FILE).write_text(json.dumps({"0" * 64: "3.6.0-another-build"}))
    assert triton_build.remembered_triton_key(lambda: "3.6.0-this-build") == "3.6.0-this-build"

    # This build's answer is recorded; a rebuilt Triton (another fingerprint) hashes again.
    monkeypatch.setattr(triton_build, "fingerprint", lambda root=None: "f" * 64)
    assert triton_build.remembered_triton_key(lambda: "3.6.0-rebuilt") == "3.6.0-rebuilt"
    memo = json.loads((state_dir / triton_build.MEMO_FILE).read_text())
    assert memo["f" * 64] == "3.6.0-rebuilt" and memo["0" * 64] == "3.6.0-another-build"


@pytest.mark.parametrize("change", ["size", "inode", "rewritten in place", "version", "new file"])
def test_the_fingerprint_covers_what_distinguishes_builds(change, tmp_path, monkeypatch):
    import triton

    root = tmp_path / "triton"
    for folder in ("runtime", "_C", "compiler", "backends/nvidia", "language"):
        (root / folder).mkdir(parents=True)
    for name in ("runtime/cache.py", "compiler/compiler.py", "backends/nvidia/driver.py", "language/core.py"):
        (root / name).write_text("x = 1\n")
    libtriton = os.path.basename(triton_build.fingerprint_files(str(root))[1])
    (root / "_C" / libtriton).write_bytes(b"\x7fELF" + b"\0" * 100)
    before = triton_build.fingerprint(str(root))
    if change == "size":
        (root / "compiler/compiler.py").write_text("x = 2  # a patched compiler\n")
    elif change == "inode":  # a reinstall: same bytes, a new file
        data = (root / "_C" / libtriton).read_bytes()
        (root / "_C" / libtriton).rename(root / "old")
        (root / "_C" / libtriton).write_bytes(data)
    elif change == "rewritten in place":  # same size, bytes and mtime: only its ctime tells
        path = root / "compiler/compiler.py"
        times = os.stat(path)
        time.sleep(0.01)
        path.write_text("x = 1\n")
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    elif change == "version":
        monkeypatch.setattr(triton, "__version__", triton.__version__ + ".post1")
    else:
        (root / "language/extra.py").write_text("")
    assert triton_build.fingerprint(str(root)) != before


def test_a_damaged_or_unwritable_memo_only_costs_the_hash(state_dir):
    (state_dir / triton_build.MEMO_FILE).write_text("{not json")
    assert triton_build.remembered_triton_key(lambda: "k") == "k"
    with settings.scope(state_dir="/proc/no-such-dir"):
        assert triton_build.remembered_triton_key(lambda: "k2") == "k2"


def test_import_jitkern_installs_it():
    from triton.runtime import cache

    assert cache.triton_key.__doc__.startswith("Triton's triton_key(), remembered")
    assert cache.triton_key() == triton_build._original[0]()
