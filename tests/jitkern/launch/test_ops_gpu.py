"""On the GPU only (``JITKERN_TEST_MODE=gpu``): a serving decode step of Step5 and DeepSeek V4
ops, compiled with ``fullgraph=True`` under Inductor, in reduce-overhead mode (CUDA graphs)
and captured by hand in a ``torch.cuda.CUDAGraph``, writes the bytes of the eager step, and
with the shipped manifests loaded and the guard in error mode compiles no kernel."""

from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_map

import deepseek_v4
from jitkern import guard
from jitkern.serve import load
from jitkern.testing import assert_no_compile
from step5.ops.summary_update import update_decode

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = [str(REPO / "warmup_manifests" / name) for name in ("step5-bs256-mtp3.json", "deepseek_v4-h200.json")]


def decode_step(step5_args, store, compress):
    """One decode step as an engine's model makes it: Step5 summaries, the DeepSeek V4 store
    (with PDL, as engines ask for it) and compressor."""
    update_decode(*step5_args)
    deepseek_v4.save_partial_states(*store, pdl_kwargs={"launch_pdl": True})
    return deepseek_v4.compress_windows(*compress)


def step_inputs(monkeypatch):
    """Batch-64 inputs of ``decode_step`` (those of the CUDA-graph figures of
    ``docs/benchmarks.md``), the caches it writes at static addresses, as an engine's are."""
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks import launch_samples

    store, compress = launch_samples.dsv4_decode("cuda")
    inputs = (list(launch_samples.step5_decode("cuda")), list(store), list(compress))
    inputs[2][0] = inputs[1][4]  # the compressor reads the cache the store writes
    return inputs


def written(inputs) -> list[torch.Tensor]:
    """The bytes a step writes: Step5's mean and ring, the state cache, the compressor's out."""
    step5_args, store, compress = inputs
    return [tensor.contiguous().view(torch.uint8).clone() for tensor in (*step5_args[5:7], store[4], compress[4])]


def copy_of(inputs):
    copied = tree_map(lambda value: value.clone() if isinstance(value, torch.Tensor) else value, inputs)
    copied[2][0] = copied[1][4]
    for tensor in (*copied[0][5:7], copied[1][4], copied[2][4]):
        torch._dynamo.mark_static_address(tensor)  # written in place: CUDA graphs need them static
    return copied


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_compiled_decode_step_writes_the_eager_bytes_and_compiles_no_kernel(mode, monkeypatch):
    from torch._dynamo.utils import counters

    load(MANIFESTS)
    inputs = step_inputs(monkeypatch)
    eager, compiled_inputs = copy_of(inputs), copy_of(inputs)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(decode_step, fullgraph=True, mode=mode)
    for _ in range(2):  # the graph compiled (Inductor's work, not a kernel compile), then its CUDA graph recorded
        decode_step(*eager)
        compiled(*compiled_inputs)
    guard.set_mode("error")
    try:
        with assert_no_compile():
            for _ in range(3):  # a replay writes what an eager call does
                decode_step(*eager)
                compiled(*compiled_inputs)
            torch.cuda.synchronize()
    finally:
        guard.set_mode("off")
    assert counters["inductor"]["cudagraph_skips"] == 0
    for expected, got in zip(written(eager), written(compiled_inputs)):
        assert torch.equal(expected, got)


def test_a_compiled_step_captured_by_hand_replays_the_eager_bytes(monkeypatch):
    load(MANIFESTS)
    inputs = step_inputs(monkeypatch)
    eager, static = copy_of(inputs), copy_of(inputs)
    compiled = torch.compile(decode_step, fullgraph=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compiles the graph and plans each public call, outside the capture
            decode_step(*eager)
            compiled(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records, runs nothing
        compiled(*static)
    with assert_no_compile():
        graph.replay()
        decode_step(*eager)
        torch.cuda.synchronize()
    for expected, got in zip(written(eager), written(static)):
        assert torch.equal(expected, got)
