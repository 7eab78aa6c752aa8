"""The guard and ``assert_no_compile()`` see the launches made inside compiled graphs: a
public call in a graph of ``torch.compile(fullgraph=True)`` launches from its op's real
implementation, through the same path as an eager call, while tracing it launched nothing
(compiled mode: binaries for cuda:90, launches that launch nothing)."""

import pytest
import torch

from jitkern import guard
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.testing import assert_no_compile

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]

KERNEL = AxpyKernel()


def test_a_launch_inside_a_compiled_graph_is_seen_by_the_guard_and_assert_no_compile():
    x, y = torch.randn(1000), torch.randn(1000)
    KERNEL.compile(KERNEL.layouts.binary_key(KERNEL.launch_spec(x=x, y=y, out=x, alpha=1.0)))
    step = torch.compile(lambda x, y: axpy(x, y, 2.0) * 2, fullgraph=True, backend="aot_eager")
    step(x, y)  # the graph traced (fake implementations: nothing launched), then run
    with assert_no_compile():
        step(x, y)
    guard.set_mode("error")
    try:
        with pytest.raises(guard.ServeTimeCompile, match=r"compile of jitkern\.example\.axpy\[dtype=float16"):
            step(x.half(), y.half())  # a graph for float16, whose launch misses the binaries held
    finally:
        guard.set_mode("off")
