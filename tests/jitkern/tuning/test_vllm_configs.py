"""vLLM's tuned fused-MoE JSON in and out of tuning tables (``jitkern.tuning.vllm``): the
shipped example imported for the grouped GEMM's DeepSeek-like buckets, exported back, and
each file or narrowing that cannot be one table refused in one line naming it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jitkern.examples.grouped_gemm import BATCHES, GroupedGemmKernel
from jitkern.manifest import resolve
from jitkern.tuning import Row, TableError, export_vllm, import_vllm, vllm_gpu

REPO = Path(__file__).resolve().parents[3]
MANIFEST = str(REPO / "warmup_manifests" / "grouped-gemm-h200.json")
EXAMPLE = Path(__file__).with_name("E=64,N=1408,device_name=NVIDIA_H200.json")  # a vLLM file made up for the tests
KERNEL, DEEPSEEK = "jitkern.example.grouped_gemm", {"experts": 64, "n": 1408}


@pytest.fixture(scope="module")
def deployment():
    return resolve([MANIFEST], "cuda:90")[0]


def imported(deployment, path=EXAMPLE, where=DEEPSEEK):
    return import_vllm(str(path), deployment, KERNEL, "cuda:90", "NVIDIA H200", where)


def test_the_gpu_is_read_from_a_vllm_files_name():
    assert vllm_gpu(str(EXAMPLE)) == "NVIDIA H200"
    assert vllm_gpu("E=8,N=14336,device_name=NVIDIA_A100-SXM4-80GB,dtype=fp8_w8a8.json") == "NVIDIA A100-SXM4-80GB"
    assert vllm_gpu("configs.json") is None


def test_each_bucket_takes_the_config_of_the_listed_batch_size_nearest_it_as_vllm_picks(deployment):
    listed = {int(size): config for size, config in json.loads(EXAMPLE.read_text()).items() if size.isdigit()}
    table = imported(deployment)
    assert len(table.rows) == 2 * len(BATCHES.upto(512))
    for row in table.rows:
        nearest = min(listed, key=lambda size: (abs(size - row.bucket["batch"]), size))
        assert row.config == listed[nearest]  # the tuned fields are named as vLLM names them
        assert (row.bucket["experts"], row.bucket["n"], row.microseconds) == (64, 1408, {})


def test_a_table_exported_and_imported_again_is_the_same(deployment, tmp_path):
    table = imported(deployment)
    exported = export_vllm(table, {**DEEPSEEK, "mul_routed_weight": False})
    document = json.loads(exported)
    assert list(document) == [str(size) for size in BATCHES.upto(512)] + ["triton_version"]
    assert list(document["1"]) == ["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
                                   "num_stages"]  # vLLM's spelling: constexprs in capitals, options as named
    again = tmp_path / "E=64,N=1408,device_name=NVIDIA_H200.json"
    again.write_bytes(exported)
    assert sorted(imported(deployment, again).rows, key=repr) == sorted(table.rows, key=repr)
    assert export_vllm(table, DEEPSEEK) == exported  # weighted or not, the same configs: one file holds both


@pytest.mark.parametrize("entry, said", [
    ({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 4},
     r"'1': BLOCK_SIZE_M=128,BLOCK_SIZE_N=64,BLOCK_SIZE_K=64,GROUP_SIZE_M=8,num_warps=4,num_stages=4 is not a "
     r"candidate of jitkern.example.grouped_gemm's space \(warmup builds only those\)"),
    ({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 4,
      "SPLIT_K": 1}, r"'1': names \[.*'SPLIT_K'.*\]; jitkern.example.grouped_gemm tunes BLOCK_SIZE_M, "),
], ids=["not-a-candidate", "unknown-name"])
def test_a_file_naming_what_the_space_cannot_launch_is_refused(deployment, tmp_path, entry, said):
    path = tmp_path / "E=64,N=1408,device_name=NVIDIA_H200.json"
    path.write_text(json.dumps({"1": entry}))
    with pytest.raises(TableError, match=rf"^{path}: {said}"):
        imported(deployment, path)


def test_a_narrowing_that_is_not_one_vllm_file_is_refused(deployment, tmp_path):
    with pytest.raises(TableError, match=r"vLLM's files key configs by one batch size; jitkern.example.grouped_gemm "
                                         r"selects by experts, batch: give all but one with --where \(experts, batch "
                                         r"left free\)"):
        imported(deployment, where={"n": 1408})
    with pytest.raises(TableError, match=r"--where width: not bucket fields of jitkern.example.grouped_gemm"):
        imported(deployment, where={**DEEPSEEK, "width": 1})
    with pytest.raises(TableError, match=r"no bucket of jitkern.example.grouped_gemm in the manifests matches --where "
                                         r"experts=64,n=4096"):
        imported(deployment, where={"experts": 64, "n": 4096})
    table = imported(deployment)
    weighted = dataclasses.replace(table, rows=tuple(
        Row(row.bucket, GroupedGemmKernel().winners.candidates[8]) if row.bucket["mul_routed_weight"] else row
        for row in table.rows))
    with pytest.raises(TableError, match=r"batch=1 has two configs; narrow the rows with --where \(dtype, "
                                         r"k, mul_routed_weight, top_k\)"):
        export_vllm(weighted, DEEPSEEK)
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(TableError, match=r"bad.json: expected an object of batch size -> config"):
        imported(deployment, tmp_path / "bad.json")


def test_a_kernel_selecting_by_nothing_is_told_to_declare_a_selector(tmp_path):
    from tuned_kernels import AutotunedScale

    manifest = tmp_path / "scale.json"
    manifest.write_text(json.dumps({"format_version": 1, "name": "scale", "targets": ["cuda:90"],
                                    "modules": ["tuned_kernels"],
                                    "kernels": [{"kernel": AutotunedScale.name, "config": {"sizes": [4096]}}]}))
    vllm = tmp_path / "N=4096,device_name=NVIDIA_H200.json"
    vllm.write_text(json.dumps({"1": {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}}))
    with pytest.raises(TableError, match=r"test\.autotuned_scale's tuning space selects by nothing \(no by= selector "
                                         r"to read it into\): declare one"):
        import_vllm(str(vllm), resolve([str(manifest)], "cuda:90")[0], AutotunedScale.name, "cuda:90", "NVIDIA H200",
                    {})
