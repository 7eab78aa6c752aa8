"""On the GPU only (``JITKERN_TEST_MODE=gpu``): after warming from the shipped manifest,
the serving schedule compiles nothing."""

from pathlib import Path

import pytest
from test_dsv4_step_sequence import DEPLOYMENTS, run_schedule

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
