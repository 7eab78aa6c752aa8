"""Tests run kernels under Triton's CPU interpreter unless a test starts its own process.

TRITON_INTERPRET must be set before any kernel is decorated, so it is set here, before
the test modules import our packages. Tests that compile (the CLI, cache checks) run in
subprocesses with the variable cleared.
"""

import os
import random

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_random_generators(request):
    """A fresh, reproducible seed per test: printed on failure via the test id."""
    seed = abs(hash(request.node.nodeid)) % (2**31)
    random.seed(seed)
    torch.manual_seed(seed)
    yield
