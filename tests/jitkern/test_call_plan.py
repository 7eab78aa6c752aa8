"""Public calls repeated from a plan pass the launcher exactly what a full call passes, and
every input outside the planned signature takes the full call (its checks, its errors)."""

from pathlib import Path

import pytest
import torch

from jitkern import call_plan, registry
from jitkern.examples.axpy import axpy
from jitkern.testing import DryRunDriver

pytestmark = [pytest.mark.compiled, pytest.mark.usefixtures("dry_run_gpu")]


@pytest.fixture
def launcher_calls(monkeypatch):
    """Plans on CPU tensors (the dry-run GPU), and the arguments each launch passes to its
    launcher (after the grid, stream, function and metadata)."""
    monkeypatch.setattr(call_plan, "_FIRST_PLANNED_DEVICE", -1)
    calls = []

    def launcher_cls(self, src, metadata):
        def launch(grid_0, grid_1, grid_2, stream, function, packed_metadata, launch_metadata, enter, exit, *args):
            if enter is not None:
                enter(launch_metadata)
            calls.append(((grid_0, grid_1, grid_2), args))

        return launch

    monkeypatch.setattr(DryRunDriver, "launcher_cls", launcher_cls)
    for name in registry.kernel_names():
        registry.get_kernel(name).forget_binaries()  # binaries loaded from here on use this launcher
    return calls


def planned(function) -> int:
    return sum(len(plans) for plans in function.plans.values())


def test_every_shipped_public_call_repeats_the_launches_of_its_full_call(launcher_calls, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from benchmarks import launch_samples

    for function, args in launch_samples.public_calls("cpu"):
        if not hasattr(function, "plans"):
            continue  # build_prefill_groups returns a tensor it makes: always a full call
        function(*args)
        launcher_calls.clear()
        function(*args)  # the second full call of this signature plans it
        full = list(launcher_calls)
        assert planned(function), function.__name__
        launcher_calls.clear()
        checks = []
        with monkeypatch.context() as patch:  # a full call would ask for its signature
            patch.setattr(call_plan, "input_signature", lambda values: checks.append(1))
            function(*args)
        assert not checks, f"{function.__name__}: ran in full"
        assert launcher_calls == full and full, function.__name__


def test_inputs_outside_the_plan_run_in_full_and_fail_as_before(launcher_calls):
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy) == 1
    for _ in range(3):  # a bad call is never planned: it raises every time
        with pytest.raises(ValueError, match="out: expected torch.float32 \\(1000,\\)"):
            axpy(x, y, 2.0, torch.empty(999))
        with pytest.raises(ValueError, match="must be contiguous"):
            axpy(x, y, 2.0, torch.empty(2000)[::2])
        with pytest.raises(ValueError, match="alpha: expected a float"):
            axpy(x, y, "2", out)
        with pytest.raises(ValueError, match="y: expected torch.float32"):
            axpy(x, torch.empty(1000, dtype=torch.float64), 2.0, out)
    launcher_calls.clear()
    axpy(x, y, 3.5, out)  # the plan: a float's value goes to the kernel as it is
    assert launcher_calls[-1][1][3] == 3.5 and planned(axpy) == 1


def test_another_alignment_takes_the_full_call_and_launches_its_own_binary(launcher_calls):
    storage = torch.randn(2001)
    x, y, out = storage[:1000], torch.randn(1000), torch.empty(1000)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    shifted = storage[1:1001]  # same signature, address 4 bytes off 16
    launcher_calls.clear()
    axpy(shifted, y, 2.0, out)
    launched_x = launcher_calls[-1][1][0]  # an address from a direct launch, a tensor from Triton's path
    assert getattr(launched_x, "data_ptr", lambda: launched_x)() == shifted.data_ptr()


def test_a_launch_hook_set_after_planning_fires_on_planned_calls(launcher_calls, monkeypatch):
    import triton

    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    entered = []
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda metadata: entered.append(metadata.get()))
    axpy(x, y, 2.0, out)
    assert [metadata["name"] for metadata in entered] == ["_axpy_kernel"] and planned(axpy) == 1


def test_plans_are_bounded_and_a_function_whose_signatures_do_not_repeat_stops_planning(launcher_calls,
                                                                                         monkeypatch):
    out = torch.empty(100)
    for size in range(1, call_plan.PLANS_PER_CALL + 6):  # more sizes than a function keeps plans of
        for _ in range(2):
            axpy(torch.randn(size), torch.randn(size), 2.0, out[:size])
    assert planned(axpy) == call_plan.PLANS_PER_CALL
    launcher_calls.clear()
    axpy(torch.randn(3), torch.randn(3), 5.0, out[:3])  # evicted: a full call, then it is seen again
    assert launcher_calls[-1][1][3] == 5.0
    registry.get_kernel("jitkern.example.axpy").forget_binaries()
    monkeypatch.setattr(call_plan, "PLANS_MADE_AT_MOST", 2)
    from jitkern.examples import axpy as module

    fresh = call_plan.public_call(module.axpy.__wrapped__)
    for size in range(1, 6):
        for _ in range(2):
            fresh(torch.randn(size), torch.randn(size), 2.0, out[:size])
    assert planned(fresh) == 2


def test_forgetting_binaries_drops_the_plans(launcher_calls):
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy)
    registry.get_kernel("jitkern.example.axpy").forget_binaries()
    assert not planned(axpy)


def test_cpu_tensors_are_never_planned():
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    for _ in range(3):
        axpy(x, y, 2.0, out)
    assert not planned(axpy)


def test_a_call_passing_one_tensor_twice_is_not_planned(launcher_calls):
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    for _ in range(3):
        axpy(x, x, 2.0, out)  # a plan would not know whether a launch took x or y
    assert not planned(axpy)
    launcher_calls.clear()
    axpy(x, y, 2.0, out)
    assert launcher_calls[-1][1][:2] == (x.data_ptr(), y.data_ptr())
