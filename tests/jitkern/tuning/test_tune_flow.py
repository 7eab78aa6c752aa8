"""The ``tune`` flow on the CPU (``jitkern.tuning.tune``): each bucket's candidates launched
under Triton's interpreter on the bucket's real inputs and timed by an injected, set timer;
the winner by the fixed rule (the fastest median, the first declared within 2%); a table per
kernel that a load then takes. The GPU's own timer runs in the gpu mode."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from tuned_kernels import CONFIGS, TunedDouble

from jitkern.examples.grouped_gemm import TILES, GroupedGemmKernel
from jitkern.kernel.calls import NoCallFor
from jitkern.kernel.recording import record_launches
from jitkern.manifest import resolve
from jitkern.tuning import NOISE, CudaTimer, TuneError, store, take_tables, tune, winner

GPU = os.environ.get("JITKERN_TEST_MODE") == "gpu"


def manifest(path, kernel: str, config: dict, modules=("tuned_kernels",)) -> str:
    path.write_text(json.dumps({"format_version": 1, "name": "tuned", "targets": ["cuda:90"], "modules": list(modules),
                                "kernels": [{"kernel": kernel, "config": config}]}))
    return str(path)


class SetTimes:
    """A timer whose samples are set per candidate (``seconds(key)``); it launches once, so
    each candidate runs on its bucket's real inputs."""

    def __init__(self, seconds):
        self.seconds, self.timed = seconds, []

    def __call__(self, launch, key):
        launch()
        self.timed.append(key)
        return [self.seconds(key) * factor for factor in (0.9, 1.0, 1.3)]  # median: seconds(key)


@pytest.fixture
def fresh(triton_cache):
    yield triton_cache
    for kernel in (TunedDouble(), GroupedGemmKernel()):
        kernel.winners.take({}, "")


def test_the_fastest_median_wins_and_within_the_noise_the_first_declared():
    assert winner([3.0, 1.0, 2.0]) == 1
    assert winner([1.0 + NOISE / 2, 1.0, 0.5]) == 2
    assert winner([1.0 + NOISE / 2, 1.0, 2.0]) == 0  # a tie within noise: the first declared
    assert winner([1.0, 1.0]) == 0


@pytest.mark.skipif(GPU, reason="the interpreter's flow; the gpu mode times for real")
def test_tune_times_every_candidate_of_each_bucket_and_writes_what_a_load_takes(fresh, tmp_path):
    deployment, _ = resolve([manifest(tmp_path / "m.json", "test.tuned_double", {"max_size": 2000})], "cuda:90")
    by_block = {64: 3e-6, 256: 1e-6, 1024: 2e-6}
    timer = SetTimes(lambda key: by_block[key.block] * (1 if key.block == 256 else 0.5 + key.num_warps / 8))
    [table] = tune(deployment, "cuda:90", "NVIDIA H200", timer, device="cpu")
    assert len(timer.timed) == 2 * 3  # the buckets size=1 and size=1024, each candidate
    assert [(row.bucket, row.config) for row in table.rows] == [
        ({"dtype": "float32", "size": 1}, CONFIGS[1]), ({"dtype": "float32", "size": 1024}, CONFIGS[1])]
    assert table.rows[0].microseconds == {"block=64,num_warps=1": 1.875, "block=256,num_warps=2": 1.0,
                                          "block=1024,num_warps=4": 2.0}
    # a timer with no describe(): its type's name, not its repr, whose address would change the table's bytes
    assert table.measured == f"{SetTimes.__module__}.SetTimes" and table.gpu == "NVIDIA H200"
    store(table)
    assert take_tables(deployment, "cuda:90", "NVIDIA H200") == []
    x = torch.randn(1500)
    assert TunedDouble().launch_spec(x, torch.empty_like(x)).key.block == 256  # not the default's 1024
    torch.testing.assert_close(TunedDouble()(x, torch.empty_like(x)), 2 * x)

    smaller, _ = resolve([manifest(tmp_path / "s.json", "test.tuned_double", {"max_size": 1})], "cuda:90")
    [again] = tune(smaller, "cuda:90", "NVIDIA H200", SetTimes(lambda key: key.block * 1e-9), device="cpu")
    assert [(row.bucket["size"], row.config) for row in again.rows] == [(1024, CONFIGS[1]), (1, CONFIGS[0])]  # kept


@pytest.mark.skipif(GPU, reason="the interpreter's flow; the gpu mode times for real")
def test_the_grouped_gemm_is_timed_on_each_buckets_routed_batch(fresh, tmp_path):
    """fp16 (the interpreter's bf16 dot is wrong), small experts: every candidate launches."""
    config = {"dtypes": ["float16"], "n": 32, "k": 32, "top_k": 2, "experts": 4, "max_tokens": 2}
    deployment, _ = resolve([manifest(tmp_path / "g.json", "jitkern.example.grouped_gemm", config,
                                      ["jitkern.examples.grouped_gemm"])], "cuda:90")
    faster_with_stages = SetTimes(lambda key: key.BLOCK_SIZE_N / 64 - key.num_stages / 10 + key.num_warps / 100)
    with record_launches() as launches:
        [table] = tune(deployment, "cuda:90", "NVIDIA H200", faster_with_stages, device="cpu")
    assert len(faster_with_stages.timed) == 2 * 2 * len(TILES)  # batches 1 and 2, weights or not
    assert {row.bucket["batch"] for row in table.rows} == {1, 2}
    assert all(row.config == TILES[0] for row in table.rows)  # n 64, 4 stages: within noise of the m32/m64 ones
    # each launch timed is what grouped_gemm makes of a random call of the bucket: its batch, its experts, the
    # routed weights given for the keys that multiply them, the pairs sorted into the candidate's blocks
    assert [spec.key for _, spec in launches] == faster_with_stages.timed
    for _, spec in launches:
        inputs, key = spec.kwargs, spec.key
        assert inputs["A"].shape == (inputs["num_pairs"] // 2, 32) and inputs["B"].shape == (4, 32, 32)
        assert (inputs["TopkWeights"] is not None) == key.mul_routed_weight
        ids, experts = inputs["SortedIds"], inputs["BlockExperts"]
        assert ids.numel() % key.BLOCK_SIZE_M == 0 and experts.numel() == ids.numel() // key.BLOCK_SIZE_M
        assert sorted(ids[ids < inputs["num_pairs"]].tolist()) == list(range(inputs["num_pairs"]))
    by_bucket = {}  # every candidate of a bucket runs on the same random call
    for _, spec in launches:
        by_bucket.setdefault((spec.kwargs["num_pairs"], spec.key.mul_routed_weight), set()).add(id(spec.kwargs["A"]))
    assert len(by_bucket) == 4 and all(len(a) == 1 for a in by_bucket.values())


@pytest.mark.skipif(GPU, reason="the interpreter's flow")
def test_a_call_whose_sizes_no_field_reads_is_refused_naming_the_size(fresh, tmp_path, monkeypatch):
    kernel = GroupedGemmKernel()
    key = kernel.get_warmup_keys(dtypes=["float16"], n=32, k=32, top_k=2, experts=4, max_tokens=1)[0]
    call = kernel.random_call(key, {"experts": 4, "batch": 3}, ("out",), "cpu")
    assert {name: None if value is None else tuple(value.shape) for name, value in call.items()} == dict(
        a=(3, 32), b=(4, 32, 32), topk_ids=(3, 2), out=None, topk_weights=(3, 2))
    assert call["a"].dtype == call["b"].dtype == torch.float16 and 0 <= call["topk_ids"].min() <= call["topk_ids"].max() < 4
    with pytest.raises(NoCallFor, match=r"^a \[M K\]: no key field or selector reads M$"):
        kernel.random_call(key, {"experts": 4}, (), "cpu")  # the batch selector not given: M unbound
    config = {"dtypes": ["float16"], "n": 32, "k": 32, "top_k": 2, "experts": 4, "max_tokens": 1}
    deployment, _ = resolve([manifest(tmp_path / "g.json", "jitkern.example.grouped_gemm", config,
                                      ["jitkern.examples.grouped_gemm"])], "cuda:90")
    drawn = GroupedGemmKernel.random_call
    monkeypatch.setattr(GroupedGemmKernel, "random_call",
                        lambda self, key, selectors, absent, device: drawn(self, key, {"experts": 4}, absent, device))
    with pytest.raises(TuneError, match=r"jitkern.example.grouped_gemm: no call of grouped_gemm for \[dtype=float16,"
                                        r".*\]: a \[M K\]: no key field or selector reads M; declare the size's field "
                                        r"or selector, or write inputs="):
        tune(deployment, "cuda:90", "NVIDIA H200", SetTimes(lambda key: 1.0), device="cpu")


def test_a_space_with_no_inputs_or_inputs_of_another_key_cannot_be_tuned(fresh, tmp_path, monkeypatch):
    deployment, _ = resolve([manifest(tmp_path / "m.json", "test.tuned_double", {"max_size": 1})], "cuda:90")
    space = TunedDouble().winners.space
    monkeypatch.setattr(TunedDouble().winners, "space", dataclasses.replace(space, inputs=None))
    with pytest.raises(TuneError, match=r"test.tuned_double: its TuningSpace names no public function \(calls=\) "
                                        r"nor inputs\(key, device, \*\*selectors\)"):
        tune(deployment, "cuda:90", "NVIDIA H200", SetTimes(lambda key: 1.0), device="cpu")
    halves = lambda key, device, size: dict(x=torch.randn(size, dtype=torch.float16), out=torch.empty(size))  # noqa
    monkeypatch.setattr(TunedDouble().winners, "space", dataclasses.replace(space, inputs=halves))
    with pytest.raises(TuneError, match=r"its tuning inputs for \[dtype=float32,block=64,num_warps=1\] launch "
                                        r"\[dtype=float16,block=64,num_warps=1\]"):
        tune(deployment, "cuda:90", "NVIDIA H200", SetTimes(lambda key: 1.0), device="cpu")


def test_the_cuda_timer_says_how_it_measures():
    assert CudaTimer().describe() == ("median of 30 samples of a CUDA graph of 10 launches (CUDA events) after 10 "
                                      "warm-up launches; within 2% of the fastest, the first candidate declared wins")


@pytest.mark.gpu
def test_tune_on_the_gpu_writes_a_table_whose_winner_a_call_takes(fresh, tmp_path):
    """A real timing on the GPU (JITKERN_TEST_MODE=gpu): every candidate measured, the table's
    winner what a call then launches, with no compile."""
    from jitkern.build.compile import run_compile
    from jitkern.testing import assert_no_compile

    deployment, _ = resolve([manifest(tmp_path / "m.json", "test.tuned_double", {"max_size": 65536})], None)
    run_compile(deployment, jobs=1, progress=False)
    target = deployment.targets[0]
    [table] = tune(deployment, target, torch.cuda.get_device_name(), CudaTimer(repeats=5))
    assert len(table.rows) == 3 and all(len(row.microseconds) == 3 for row in table.rows)
    assert all(0 < time < 1e4 for row in table.rows for time in row.microseconds.values())
    store(table)
    assert take_tables(deployment, target, torch.cuda.get_device_name()) == []
    x = torch.randn(70000, device="cuda")
    with assert_no_compile():
        torch.testing.assert_close(TunedDouble()(x, torch.empty_like(x)), 2 * x)
