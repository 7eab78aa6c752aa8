"""Fixtures of the reliability tests."""

import resource

import pytest
import torch


@pytest.fixture
def bounded_memory():
    """At most 6 GiB more address space than the process holds now, for the test: an input
    that makes the code under test allocate without bound then fails that test, naming
    the input, instead of the machine's OOM killer ending the whole run."""
    if torch.cuda.is_available():  # CUDA maps address space of its own: no cap there
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * resource.getpagesize()
    cap = held + (6 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
