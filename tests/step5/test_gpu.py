"""On the GPU only: CUDA-graph replays equal eager launches, and a warmed serving
schedule compiles nothing (``JITKERN_TEST_MODE=gpu``)."""

from __future__ import annotations

import pytest
import torch

from jitkern import guard
from jitkern.testing import assert_no_compile
from jitkern.serve import load
from step5.ops.summary_update import update_decode, update_verify
from step5_testing import decode_inputs, verify_inputs
from test_schedule import MANIFESTS, VALUES_MANIFEST, VIEWS_MANIFEST, Schedule, deployment, run_schedule

pytestmark = pytest.mark.gpu


def assert_graph_replays_equal_eager(update, make_inputs, trials: int = 3) -> None:
    static = make_inputs()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        update(*static)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update(*static)
    for _ in range(trials):
        fresh = make_inputs()
        for target, source in zip(static, fresh):
            if isinstance(target, torch.Tensor):
                target.copy_(source)
        graph.replay()
        update(*fresh)  # eager, on the same new inputs
        torch.cuda.synchronize()
        for name, replayed, eager in zip(("mean", "ring"), static[-3:-1], fresh[-3:-1]):
            assert torch.equal(replayed, eager), f"{update.__name__}: graph replay and eager differ in {name}"


@pytest.mark.parametrize("batch", [1, 64, 1024])
def test_update_decode_graph_replay_equals_eager(batch):
    assert_graph_replays_equal_eager(update_decode, lambda: decode_inputs(batch, capacity=8, block_size=64))


@pytest.mark.parametrize("batch", [1, 64, 1024])
def test_update_verify_graph_replay_equals_eager(batch):
    assert_graph_replays_equal_eager(update_verify, lambda: verify_inputs(batch, capacity=16, block_size=256,
                                                                          draft_tokens=3))


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_warmed_schedule_compiles_nothing(manifest):
    for loaded in load([str(manifest)]):
        assert loaded.binaries > 0
    block_size, draft_tokens, capacity = deployment(manifest)
    schedule = Schedule(block_size, draft_tokens, capacity)
    with assert_no_compile():
        run_schedule(schedule, steps=24)


@pytest.mark.parametrize("manifest", [VIEWS_MANIFEST, VALUES_MANIFEST], ids=["any-strides", "by-values"])
def test_warmed_schedule_of_mixed_layouts_compiles_nothing_with_the_guard_in_error_mode(manifest):
    """key and z as separate tensors, halves of a projection, slices at odd columns (z 8
    bytes off 16, odd row strides): every layout the manifest declares (any strides, or the
    values they take), loaded from a cache compiled with no GPU; the schedule checks every
    step's bytes against the reference."""
    for loaded in load([str(manifest)]):
        assert loaded.binaries > 0
    block_size, draft_tokens, capacity = deployment(manifest)
    schedule = Schedule(block_size, draft_tokens, capacity, rows="mixed")
    guard.set_mode("error")
    try:
        with assert_no_compile():
            run_schedule(schedule, steps=32)
    finally:
        guard.set_mode("off")


# --- the portable code paths (what sm_80 and AMD compile), on this GPU --------------------


def _compiled_ptx(kernel) -> list[str]:
    """The PTX of every binary of ``kernel`` this process compiled or loaded."""
    return [binary.asm["ptx"] for cache in kernel.kernel.device_caches.values() for binary in cache[0].values()]


def test_the_code_paths_this_process_runs():
    """With JITKERN_PORTABLE_PATHS=1 (benchmarks/device/check_portable_paths.sh) the kernels
    run their portable paths: no inline PTX, the integer fp8 encoding. Without it, on an
    sm_89+ GPU, the NVIDIA ones. So a switch that did nothing cannot pass for a proof."""
    from jitkern import settings
    from step5.ops.decode import UpdateDecodeKernel

    update_decode(*decode_inputs(64, capacity=8, block_size=64))
    ptx = _compiled_ptx(UpdateDecodeKernel())
    assert ptx
    portable = settings.current().portable_paths
    for marker in ("ex2.approx.ftz.f32", "fence.acq_rel.cta", "cvt.rn.satfinite.e4m3x2"):
        assert all((marker in text) != portable for text in ptx), (marker, portable)


@pytest.mark.parametrize("update, make_inputs", [
    (update_decode, lambda: decode_inputs(1024, capacity=8, block_size=64)),
    (update_verify, lambda: verify_inputs(256, capacity=16, block_size=256, draft_tokens=3)),
], ids=["decode", "verify"])
def test_portable_paths_write_what_the_nvidia_paths_write(update, make_inputs):
    """The same inputs through both paths of each kernel: the same ring bytes, and summary
    bytes within the one fp8 step the spec allows a GPU exp (``tl.exp`` against
    ``ex2.approx.ftz``), at least 99% equal."""
    from jitkern.kernel import registry
    from jitkern import settings
    from step5.reference import assert_summaries_close

    inputs = make_inputs()
    written = {}
    for portable in (False, True):
        for name in registry.kernel_names():  # launch through this mode's binaries, not the other's
            getattr(registry.get_kernel(name), "forget_binaries", lambda: None)()
        copy = [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]
        with settings.scope(portable_paths=portable):
            update(*copy)
        torch.cuda.synchronize()
        written[portable] = copy[-3:-1]  # mean, ring
    (native_mean, native_ring), (portable_mean, portable_ring) = written[False], written[True]
    assert torch.equal(portable_ring, native_ring)
    assert_summaries_close(portable_mean, native_mean, "mean")
    print(f"{update.__name__}: {float((portable_mean == native_mean).float().mean()):.4%} of summary bytes equal")


# --- num_warps (spec: "Why the Step5 kernels use one warp") ------------------------------------


@pytest.mark.parametrize("path", ["decode", "prefill", "verify"])
@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_summaries_do_not_depend_on_num_warps(path, num_warps):
    """Each summary kernel at ``num_warps`` (its key's code paths: the integer fp8 encoding
    at 4 warps, ``hardware_fp8_is_safe``) writes the bytes of the shipped 1-warp kernel,
    mean and ring, and those are the reference's within the spec's tolerance."""
    from step5_testing import (OTHER_POISON, assert_mean_matches, clone_inputs, prefill_inputs, run_reference,
                               run_update, written)

    inputs = {"decode": lambda: decode_inputs(512, capacity=8, block_size=64),
              "prefill": lambda: prefill_inputs(24, capacity=8, block_size=64),
              "verify": lambda: verify_inputs(128, capacity=16, block_size=256, draft_tokens=3)}[path]()
    runs = {}
    for name, warps in (("shipped", None), ("one", 1), ("many", num_warps)):
        runs[name] = clone_inputs(inputs)
        run_update(path, runs[name], warps)
    runs["reference"], runs["other"] = clone_inputs(inputs), clone_inputs(inputs)
    written(runs["other"])[0].fill_(OTHER_POISON)  # tells the bytes the reference wrote from the poison
    run_reference(path, runs["reference"])
    run_reference(path, runs["other"])
    torch.cuda.synchronize()
    (shipped_mean, shipped_ring), (mean, ring) = written(runs["shipped"]), written(runs["many"])
    assert torch.equal(written(runs["one"])[0], shipped_mean) and torch.equal(written(runs["one"])[1], shipped_ring)
    differing = int((mean != shipped_mean).sum())
    assert differing == 0, f"{path} at {num_warps} warps: {differing} summary bytes differ from 1 warp"
    assert torch.equal(ring, shipped_ring)
    assert_mean_matches(mean, written(runs["reference"])[0], written(runs["other"])[0])
    assert torch.equal(ring, written(runs["reference"])[1])
