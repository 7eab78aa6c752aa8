"""Tuning tables (``jitkern.tuning``): their schema, what makes one stale, ``tune --check``'s
lines, the winners a load takes and the keys it loads, and tables read as trusted as
binaries. On the CPU, on the grouped GEMM's shipped manifest, tables imported from the
shipped vLLM example."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jitkern import settings
from jitkern.cache.tables import TABLE_FILE, store_table, table_folder
from jitkern.examples.grouped_gemm import TILES, GroupedGemmKernel
from jitkern.manifest import resolve
from jitkern.tuning import (Row, Table, TableError, check_tables, import_vllm, serving_entries, staleness, store,
                            table_of, take_tables, tuned_buckets)

REPO = Path(__file__).resolve().parents[3]
MANIFEST = str(REPO / "warmup_manifests" / "grouped-gemm-h200.json")
VLLM_EXAMPLE = str(Path(__file__).with_name("E=64,N=1408,device_name=NVIDIA_H200.json"))  # a vLLM file made up for the tests
H200, KERNEL = "NVIDIA H200", "jitkern.example.grouped_gemm"
WHERE = "jitkern.example.grouped_gemm for cuda:90 on NVIDIA H200"


@pytest.fixture
def deployment(triton_cache):
    deployment, _note = resolve([MANIFEST], "cuda:90")
    yield deployment
    GroupedGemmKernel().winners.take({}, "")


def deepseek_table(deployment, gpu=H200) -> Table:
    """The shipped vLLM example's configs for the DeepSeek-like buckets (E=64, N=1408) only."""
    return import_vllm(VLLM_EXAMPLE, deployment, KERNEL, "cuda:90", gpu, {"experts": 64, "n": 1408})


def test_a_table_round_trips_as_the_same_bytes_whatever_its_rows_order(deployment):
    table = deepseek_table(deployment)
    assert len(table.rows) == 2 * 10  # routed weights or not, the batch buckets 1..512
    assert Table.from_bytes(table.to_bytes(), "t.json") == dataclasses.replace(
        table, rows=tuple(sorted(table.rows, key=lambda row: json.dumps(row.bucket, sort_keys=True))))
    shuffled = dataclasses.replace(table, rows=table.rows[::-1])
    assert shuffled.to_bytes() == table.to_bytes()
    document = json.loads(table.to_bytes())
    assert (document["kernel"], document["target"], document["gpu"]) == (KERNEL, "cuda:90", H200)
    assert document["measured"] == "imported from vLLM's E=64,N=1408,device_name=NVIDIA_H200.json (Triton 3.6.0)"


@pytest.mark.parametrize("change, said", [
    (lambda d: d.update(extra=1), r"extra: Extra inputs are not permitted"),
    (lambda d: d.update(format_version=2), r"format_version: Input should be 1"),
    (lambda d: d.pop("gpu"), r"gpu: Field required"),
    (lambda d: d["rows"][0]["config"].update(BLOCK_SIZE_M=[16]), r"rows.0.config.BLOCK_SIZE_M.*: Input should be"),
    (lambda d: d["rows"][0].update(bucket="n=1"), r"rows.0.bucket: Input should be an object"),
], ids=["extra", "version", "no-gpu", "list-value", "bucket-text"])
def test_the_schema_refuses_what_is_not_a_table_in_one_line_naming_the_field(deployment, change, said):
    document = json.loads(deepseek_table(deployment).to_bytes())
    change(document)
    with pytest.raises(TableError, match=rf"^t.json: not a tuning table: {said}") as raised:
        Table.from_bytes(json.dumps(document).encode(), "t.json")
    assert "\n" not in str(raised.value)
    with pytest.raises(TableError, match=r"^t.json: not a tuning table: \(top level\): Invalid JSON"):
        Table.from_bytes(b"{", "t.json")


def test_a_table_is_stale_on_another_gpu_triton_build_or_kernel_source(deployment):
    kernel, table = GroupedGemmKernel(), deepseek_table(deployment)
    assert staleness(table, kernel, H200) is None
    assert staleness(table, kernel, "NVIDIA H100") == "stale: measured on NVIDIA H200, this GPU is NVIDIA H100"
    assert staleness(dataclasses.replace(table, triton_build="0" * 16), kernel, H200).startswith(
        "stale: measured with Triton 3.6.0 build 0000000000000000, this process runs Triton 3.6.0 build ")
    assert staleness(dataclasses.replace(table, kernel_source="edited"), kernel, H200) == (
        "stale: measured on another source of the kernel (its @triton.jit function or a helper changed)")


def test_check_names_each_table_missing_stale_unbuilt_or_lacking_in_one_line(deployment, triton_cache):
    assert check_tables(deployment, H200) == [f"{WHERE}: no tuning table"]
    assert check_tables(deployment, None) == [f"{KERNEL} for cuda:90: no tuning table for any GPU"]
    table = deepseek_table(deployment)
    store(table)
    assert check_tables(deployment, H200) == [
        f"{WHERE}: lacks 20 of 40 buckets, which take their default config (first: dtype=bfloat16,n=14336,k=4096,"
        "top_k=2,mul_routed_weight=False,experts=8,batch=1)"]
    unbuilt = Row(table.rows[0].bucket, {**table.rows[0].config, "BLOCK_SIZE_M": 128})
    store(dataclasses.replace(table, rows=(unbuilt, *table.rows[1:])))
    assert check_tables(deployment, H200)[0] == (f"{WHERE}: names 1 config(s) warmup did not build, not candidates "
                                                  "of its space (first: BLOCK_SIZE_M=128,BLOCK_SIZE_N=64,"
                                                  "BLOCK_SIZE_K=64,GROUP_SIZE_M=8,num_warps=4,num_stages=4)")
    store(dataclasses.replace(table, kernel_source="edited"))
    assert check_tables(deployment, H200) == [f"{WHERE}: stale: measured on another source of the kernel (its "
                                              "@triton.jit function or a helper changed)"]
    assert check_tables(deployment, "NVIDIA H100") == [
        f"{KERNEL} for cuda:90 on NVIDIA H100: no tuning table (there are for NVIDIA_H200)"]
    h100 = deepseek_table(deployment, gpu="NVIDIA H100")
    copied = triton_cache / table_folder(KERNEL, "cuda:90", H200) / TABLE_FILE
    copied.write_bytes(h100.to_bytes())  # an H100's table copied where the H200's belongs, the lock not told
    [line] = check_tables(deployment, H200)
    assert line.startswith(f"{WHERE}: its tuning table cannot be used: tuning.json does not match the cache's "
                           "jitkern-lock.json (sha256 ")
    store_table(table_folder(KERNEL, "cuda:90", H200), "copied", h100.to_bytes())  # and locked so
    assert check_tables(deployment, H200) == [f"{WHERE}: stale: measured on NVIDIA H100, this GPU is NVIDIA H200"]
    store_table(table_folder(KERNEL, "cuda:90", H200), "copied", b"not json")
    [line] = check_tables(deployment, H200)
    assert line.startswith(f"{WHERE}: {table_folder(KERNEL, 'cuda:90', H200)}: not a tuning table: (top level): "
                           "Invalid JSON: ")


def test_a_load_takes_a_tables_winners_and_loads_winners_and_defaults_only(deployment):
    kernel = GroupedGemmKernel()
    everything = deployment.by_target["cuda:90"]
    assert len(everything) == 2 * 2 * 9  # both shapes, weights or not, every candidate
    assert take_tables(deployment, "cuda:90", H200) == [f"{WHERE}: no tuning table; every bucket takes its default "
                                                        "config"]
    defaults = serving_entries(deployment, "cuda:90")
    assert len(defaults) == 2 * 2 * 3  # the three default tiles
    store(deepseek_table(deployment))
    assert take_tables(deployment, "cuda:90", H200) == [
        f"{WHERE}: lacks 20 of 40 buckets, which take their default config (first: dtype=bfloat16,n=14336,k=4096,"
        "top_k=2,mul_routed_weight=False,experts=8,batch=1)"]
    assert len(kernel.winners.rows) == 20
    tuned = kernel.dispatch(dtype="bfloat16", n=1408, k=2048, top_k=6, mul_routed_weight=False, experts=64, batch=8)
    assert (tuned.BLOCK_SIZE_M, tuned.BLOCK_SIZE_N, tuned.num_stages) == (16, 128, 3)  # vLLM's "8": not the default
    loaded = serving_entries(deployment, "cuda:90")
    winners = {(key.key.n, key.key.BLOCK_SIZE_M, key.key.BLOCK_SIZE_N) for _, key in loaded}
    assert winners == {(14336, 16, 64), (14336, 32, 64), (14336, 64, 64),  # Mixtral's buckets: the defaults
                       (1408, 16, 64), (1408, 16, 128), (1408, 32, 128), (1408, 64, 128)}  # DeepSeek's: the table's
    assert len(loaded) == 2 * 7
    store(dataclasses.replace(deepseek_table(deployment), triton_build="0" * 16))
    [stale] = take_tables(deployment, "cuda:90", H200)
    assert stale.startswith(f"{WHERE}: stale: measured with Triton 3.6.0 build 0000000000000000") and \
        stale.endswith("every bucket takes its default config")
    assert kernel.winners.rows == {} and len(serving_entries(deployment, "cuda:90")) == 2 * 2 * 3


def test_a_table_is_trusted_as_a_binary_is_its_lock_pinned(deployment, triton_cache):
    table = deepseek_table(deployment)
    _path, lock_digest = store(table)
    locked = json.loads((triton_cache / "jitkern-lock.json").read_text())
    name = f"{KERNEL}[tuning table NVIDIA_H200] for cuda:90"
    assert locked["keys"] == {name: [table_folder(KERNEL, "cuda:90", H200)]}
    with settings.scope(lock_digest=lock_digest):
        assert take_tables(deployment, "cuda:90", H200)[0].startswith(f"{WHERE}: lacks 20 of 40")
        path = triton_cache / table_folder(KERNEL, "cuda:90", H200) / TABLE_FILE
        path.write_bytes(table.to_bytes().replace(b'"num_warps": 4', b'"num_warps": 8', 1))  # damaged or tampered
        with pytest.warns(RuntimeWarning, match=rf"refused {name.replace('[', '.').replace(']', '.')} from"):
            lines = take_tables(deployment, "cuda:90", H200)
        [line] = lines
        assert line.startswith(f"{WHERE}: its tuning table cannot be used: refused: tuning.json does not match the "
                               "lock (sha256 ") and line.endswith("…); every bucket takes its default config")


def test_a_deployments_buckets_are_its_keys_without_tuned_fields_times_the_selectors_values(deployment):
    buckets = tuned_buckets(deployment)[KERNEL]
    assert len(buckets) == 2 * 2 * 10
    assert {bucket.selectors["experts"] for bucket in buckets} == {8, 64}
    assert all(bucket.key.BLOCK_SIZE_M in {tile["BLOCK_SIZE_M"] for tile in TILES} for bucket in buckets)
    assert table_of(GroupedGemmKernel(), "cuda:90", H200, [], "").rows == ()
