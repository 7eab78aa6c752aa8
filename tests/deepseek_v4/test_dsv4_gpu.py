"""On the GPU only (``JITKERN_TEST_MODE=gpu``): after warming from the shipped manifest,
the serving schedule compiles nothing; the fused decode step writes the bytes of its two
launches at deployment sizes."""

from pathlib import Path

import pytest
from dsv4_helpers import same_bits
from test_dsv4_decode_step import decode_case, on_copies, two_launches
from test_dsv4_step_sequence import DEPLOYMENTS, VIEWS_MANIFEST, run_schedule

from jitkern import guard
from jitkern.testing import assert_no_compile
from jitkern.serve import load

pytestmark = pytest.mark.gpu

MANIFEST = Path(__file__).resolve().parents[2] / "warmup_manifests" / "deepseek_v4-h200.json"


@DEPLOYMENTS
def test_warmed_schedule_compiles_nothing(ratio, head_dim, requests, lengths, max_chunk):
    for loaded in load([str(MANIFEST)]):
        assert loaded.binaries > 0
    with assert_no_compile():
        run_schedule(ratio, head_dim, requests, lengths, max_chunk)


@DEPLOYMENTS
def test_warmed_schedule_of_mixed_views_compiles_nothing_with_the_guard_in_error_mode(ratio, head_dim, requests,
                                                                                      lengths, max_chunk):
    """kv and score as views of a projection, of a padded one (4 bytes off 16, odd row
    stride) or separate; out at an odd column of a wider tensor: every layout the views
    manifest declares; the schedule checks every closed window against the reference."""
    for loaded in load([str(VIEWS_MANIFEST)]):
        assert loaded.binaries > 0
    guard.set_mode("error")
    try:
        with assert_no_compile():
            run_schedule(ratio, head_dim, requests, lengths, max_chunk, views=True)
    finally:
        guard.set_mode("off")


def test_pdl_is_launched_only_where_the_target_has_it():
    """An engine's pdl_kwargs on this GPU: with PDL on sm_90+, as the plain kernel with
    JITKERN_PORTABLE_PATHS=1 (what sm_80 and AMD build for the same key)."""
    import torch

    from deepseek_v4 import SavePartialStatesKernel, save_partial_states
    from jitkern import targets
    from jitkern.testing import record_launches

    tokens, width = 8, 256
    projection = torch.randn(tokens, 2 * width)
    store = dict(kv=projection[:, :width], score=projection[:, width:], ape=torch.randn(4, width),
                 positions=torch.arange(tokens), state_cache=torch.zeros(4, 4, 2 * width),
                 slot_mapping=torch.arange(tokens), block_size=4, state_width=width, compress_ratio=4)
    SavePartialStatesKernel().binaries.forget()  # one a load memo gave: not in Triton's caches, no PTX kept
    with record_launches() as launches:
        save_partial_states(**store, pdl_kwargs={"launch_pdl": True})
    torch.cuda.synchronize()
    (kernel, spec), = launches
    assert spec.key.launch_pdl  # the key asks for PDL on sm_90+ whatever the switch
    pdl = targets.current().pdl
    assert kernel.triton_kwargs(spec)["launch_pdl"] is pdl
    binaries = [b for cache in SavePartialStatesKernel().kernel.device_caches.values() for b in cache[0].values()
                if b.metadata.launch_pdl]
    assert bool(binaries) == pdl
    assert all("griddepcontrol" in b.asm["ptx"] for b in binaries)


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("batch", [64, 1023])
@pytest.mark.parametrize("ratio,head_dim", [(4, 512), (128, 512), (4, 128), (128, 128)], ids=lambda v: str(v))
def test_fused_decode_step_writes_the_bytes_of_store_then_compress(ratio, head_dim, batch, pdl):
    """Compiled, on CUDA: every byte of the cache and of ``out`` (poisoned with NaN) as
    ``save_partial_states`` then ``compress_windows`` leave them on a copy. Half the
    tokens close a window (far more than one in ``ratio``: each window holds the row its
    token stores in this launch, which the fused step takes from the token's inputs, and
    at ratio 128 a program takes several closing tokens in turn), a few are padding."""
    from deepseek_v4 import decode_step

    args, backing = decode_case(ratio, head_dim, requests=batch, padding=batch // 16, most=64 if ratio == 4 else None)
    args["pdl_kwargs"] = {"launch_pdl": pdl}
    two, two_backing = on_copies(args, backing)
    two_launches(two)
    decode_step(**args)
    for name in ("state_cache", "out"):
        assert same_bits(backing[name], two_backing[name]), name
