"""The guard in a serving loop that meets a key outside its manifest (issue 6, promise 8)."""

import json
import random

import pytest
import torch
from reliability_testing import forget_all_binaries, warm
from warmup_testing import cli, example_manifest

from jitkern import guard
from jitkern.examples.axpy import axpy
from jitkern.testing import assert_no_compile
from jitkern.serve import load

pytestmark = pytest.mark.compiled

# Requests of a serving loop: (dtype, elements). The float16 one is outside a float32 deployment.
REQUESTS = [(torch.float32, 1), (torch.float32, 64), (torch.float32, 1000), (torch.float16, 33), (torch.float32, 17)]
UNSEEN = "jitkern.example.axpy[dtype=float16,block_size=1024,layout=n_elements:i32]"


def serve() -> int:
    for dtype, elements in REQUESTS:
        x = torch.randn(elements).to(dtype)
        axpy(x, x, 0.5)
    return len(REQUESTS)


def start_serving(manifest) -> None:
    """A fresh serving process: nothing in memory, then a warm start from the cache."""
    forget_all_binaries()
    load([str(manifest)])


def test_error_mode_names_kernel_key_and_the_entry_to_add(dry_run_gpu, tmp_path):
    manifest = example_manifest(tmp_path / "serving.json", dtypes=["float32"])
    warm(manifest)
    start_serving(manifest)
    try:
        guard.set_mode("error")
        with pytest.raises(guard.ServeTimeCompile) as refused:
            serve()
    finally:
        guard.set_mode("off")
    message = str(refused.value)
    assert message.startswith(f"serve-time compile of {UNSEEN}")
    entry = json.loads(message.split("a manifest entry covering it: ", 1)[1])
    assert entry == {"kernel": "jitkern.example.axpy", "keys": [{
        "dtype": "float16", "block_size": 1024, "layout": "n_elements:i32"}]}


def test_record_mode_then_merge_and_warm_again_serves_with_zero_compiles(dry_run_gpu, triton_cache, tmp_path):
    manifest = example_manifest(tmp_path / "serving.json", dtypes=["float32"])
    record = tmp_path / "unseen.jsonl"
    warm(manifest)
    start_serving(manifest)
    try:
        guard.set_mode("record", record)
        assert serve() == len(REQUESTS)  # the loop goes on; the unseen key is written down
    finally:
        guard.set_mode("off")
    (line,) = record.read_text().splitlines()
    assert json.loads(line)["key"]["dtype"] == "float16"

    merged = cli("merge-record", record, manifest, cache_dir=triton_cache)
    assert merged.returncode == 0 and "1 key(s) added" in merged.stdout, merged.stderr
    again = cli("merge-record", record, manifest, cache_dir=triton_cache)
    assert "0 key(s) added" in again.stdout  # merging twice adds nothing
    assert len(warm(manifest)) == 4

    start_serving(manifest)
    try:
        guard.set_mode("error")
        with assert_no_compile():
            assert serve() == len(REQUESTS)
    finally:
        guard.set_mode("off")


def mixed_alignment_traffic(requests: int = 40) -> list[tuple[int, tuple[int, int, int]]]:
    """(elements, offsets of x, y and out in elements): each pointer aligned or not on its own."""
    rng = random.Random(20261201)
    return [(rng.choice([1, 15, 16, 17, 100, 1024, 4099]), tuple(rng.randrange(4) for _ in range(3)))
            for _ in range(requests)]


def serve_traffic(traffic) -> None:
    for elements, (x_at, y_at, out_at) in traffic:
        x, y, out = (torch.randn(elements + 4)[at:at + elements] for at in (x_at, y_at, out_at))
        axpy(x, y, 0.5, out=out)


def warm_then_serve_with_no_compile(manifest, traffic) -> None:
    """Warm the manifest, start a fresh serving process on it, and serve ``traffic`` under
    the guard in error mode: not one compile."""
    warm(manifest)
    start_serving(manifest)
    try:
        guard.set_mode("error")
        with assert_no_compile():
            serve_traffic(traffic)
    finally:
        guard.set_mode("off")


def test_record_merge_and_warm_converge_for_mixed_alignment_traffic(dry_run_gpu, triton_cache, tmp_path):
    """Whatever layouts the traffic has: one round of record -> merge-record -> warm, and the
    same traffic compiles nothing."""
    manifest = example_manifest(tmp_path / "serving.json", dtypes=["float32"])  # aligned tensors only
    record, traffic = tmp_path / "unseen.jsonl", mixed_alignment_traffic()
    warm(manifest)
    start_serving(manifest)
    try:
        guard.set_mode("record", record)
        serve_traffic(traffic)
    finally:
        guard.set_mode("off")
    layouts = {json.loads(line)["key"].get("layout", "") for line in record.read_text().splitlines()}
    assert any("X_ptr:*fp32" in layout and "Out_ptr" not in layout for layout in layouts), layouts

    merged = cli("merge-record", record, manifest, cache_dir=triton_cache)
    assert merged.returncode == 0 and " key(s) added" in merged.stdout, merged.stdout + merged.stderr
    (entry,) = json.loads(manifest.read_text())["kernels"]  # the traffic's layouts, as a domain: no explicit key
    assert set(entry["layout"]["unaligned"]) == {"x", "y", "out"} and "keys" not in entry, entry
    warm_then_serve_with_no_compile(manifest, traffic)


def test_record_merge_and_warm_converge_to_the_values_the_traffic_passes(dry_run_gpu, triton_cache, tmp_path):
    """A deployment declared by values (sizes that are multiples of 16) meets sizes of other
    classes: record -> merge-record adds those values to the entry's domain, no explicit
    key, and the same traffic then compiles nothing."""
    manifest = example_manifest(tmp_path / "serving.json", {"values": {"n_elements": [1024]}}, dtypes=["float32"])
    record = tmp_path / "unseen.jsonl"
    warm(manifest)
    start_serving(manifest)
    traffic = [(elements, (0, 0, 0)) for elements in (1024, 1000, 1, 2048, 17)]
    try:
        guard.set_mode("record", record)
        serve_traffic(traffic)
    finally:
        guard.set_mode("off")
    assert {json.dumps(json.loads(line)["values"]) for line in record.read_text().splitlines()} == \
        {'{"n_elements": 1000}', '{"n_elements": 1}'}  # 17 is of 1000's class: no second miss
    merged = cli("merge-record", record, manifest, cache_dir=triton_cache)
    assert merged.returncode == 0 and "2 key(s) added" in merged.stdout, merged.stdout + merged.stderr
    (entry,) = json.loads(manifest.read_text())["kernels"]
    assert entry["layout"] == {"values": {"n_elements": [1, 1000, 1024]}} and "keys" not in entry, entry
    warm_then_serve_with_no_compile(manifest, traffic)


def test_a_start_outside_the_declared_offsets_is_named_then_record_merge_and_warm_converge(
        dry_run_gpu, triton_cache, tmp_path):
    """x declared to start 8 bytes past a 16-byte boundary: an aligned x is refused naming the
    offset and the domain; recorded, merge-record adds its offset (0) to x's values, no
    explicit key, and the same traffic then compiles nothing."""
    manifest = example_manifest(tmp_path / "serving.json", {"values": {"x": [8]}}, dtypes=["float32"])
    record = tmp_path / "unseen.jsonl"
    warm(manifest)
    start_serving(manifest)
    traffic = [(1024, (2, 0, 0)), (1024, (0, 0, 0)), (1024, (1, 0, 0))]  # x 8, 0 and 4 bytes past 16
    try:
        guard.set_mode("error")
        serve_traffic(traffic[:1])
        with pytest.raises(guard.ServeTimeCompile, match=r"x: starts 0 bytes past 16, outside the declared \[8\]"):
            serve_traffic(traffic[1:2])
        guard.set_mode("record", record)
        serve_traffic(traffic)
    finally:
        guard.set_mode("off")
    assert len(record.read_text().splitlines()) == 1  # 4 bytes past 16 is of 8's class: no second miss
    merged = cli("merge-record", record, manifest, cache_dir=triton_cache)
    assert merged.returncode == 0 and "3 key(s) added" in merged.stdout, merged.stdout + merged.stderr  # x aligned too
    (entry,) = json.loads(manifest.read_text())["kernels"]
    assert entry["layout"] == {"values": {"x": [0, 8]}} and "keys" not in entry, entry
    warm_then_serve_with_no_compile(manifest, traffic)
