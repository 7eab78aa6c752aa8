"""On the GPU only (``JITKERN_TEST_MODE=gpu``): after warming from the shipped manifest,
the serving schedule compiles nothing."""

from pathlib import Path

import pytest
from test_dsv4_step_sequence import DEPLOYMENTS, VIEWS_MANIFEST, run_schedule

from jitkern import guard
from jitkern.testing import assert_no_compile
from jitkern.warmup import load

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
