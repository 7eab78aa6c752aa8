"""Public calls repeated from a plan pass the launcher exactly what a full call passes, and
every input outside the planned signature takes the full call (its checks, its errors)."""

import re
from pathlib import Path

import pytest
import torch

from jitkern.launch import plans as call_plan
from jitkern.kernel import registry
from jitkern.examples.axpy import axpy
from jitkern.testing import DryRunDriver, record_launches

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
        registry.get_kernel(name).binaries.forget()  # binaries loaded from here on use this launcher
    return calls


def planned(function) -> int:
    return sum(len(plans) for plans in function.plans.values())


def launched(function, args, kwargs, launcher_calls) -> tuple:
    """The call's result, and its launches with the address of a result it made (not an
    argument: a fresh tensor each call) written as "result"."""
    launcher_calls.clear()
    result = function(*args, **kwargs)
    made = isinstance(result, torch.Tensor) and all(result is not value for value in (*args, *kwargs.values()))
    address = result.data_ptr() if made else None
    return result, [(grid, tuple("result" if value == address else value for value in values))
                    for grid, values in launcher_calls]


def test_every_shipped_public_call_repeats_the_launches_of_its_full_call(launcher_calls, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3]))
    from benchmarks import launch_samples

    for function, args, kwargs in launch_samples.public_calls("cpu"):
        name = f"{function.__name__}(**{list(kwargs)})"
        function(*args, **kwargs)
        full_result, full = launched(function, args, kwargs, launcher_calls)  # the second full call plans it
        assert planned(function), name
        checks = []
        with monkeypatch.context() as patch:  # a full call would ask for its signature
            patch.setattr(call_plan, "input_signature", lambda values: checks.append(1))
            result, repeated = launched(function, args, kwargs, launcher_calls)
        assert not checks, f"{name}: ran in full"
        assert repeated == full and full, name
        if full_result is None or any(full_result is value for value in (*args, *kwargs.values())):
            assert result is full_result, name
        else:  # made per call: a new tensor like the full call's
            assert result is not full_result and (result.dtype, result.shape, result.stride()) == \
                (full_result.dtype, full_result.shape, full_result.stride()), name


def test_inputs_outside_the_plan_run_in_full_and_fail_as_before(launcher_calls):
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy) == 1
    for _ in range(3):  # a bad call is never planned: it raises every time
        with pytest.raises(ValueError, match=re.escape("out: shape = (999,), but x has shape = (1000,)")):
            axpy(x, y, 2.0, torch.empty(999))
        with pytest.raises(ValueError, match="must be contiguous"):
            axpy(x, y, 2.0, torch.empty(2000)[::2])
        with pytest.raises(ValueError, match="alpha: expected a float"):
            axpy(x, y, "2", out)
        with pytest.raises(ValueError, match=re.escape("y: expected float32 (x's dtype) [*shape], got float64")):
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
    registry.get_kernel("jitkern.example.axpy").binaries.forget()
    monkeypatch.setattr(call_plan, "PLANS_MADE_AT_MOST", 2)
    from jitkern.examples import axpy as module

    fresh = call_plan.public_call(module.axpy.__wrapped__)
    for size in range(1, 6):
        for _ in range(2):
            fresh(torch.randn(size), torch.randn(size), 2.0, out[:size])
    assert planned(fresh) == 2


def test_each_planned_signature_is_repeated_and_the_last_used_plan_is_tried_first(launcher_calls, monkeypatch):
    from jitkern.kernel import TritonJitKernel

    small, large = ((torch.randn(size), torch.randn(size), 2.0, torch.empty(size)) for size in (64, 4096))
    for args in (small, large, small, large):  # each signature's second full call plans it
        axpy(*args)
    plans = axpy.plans[4]
    assert len(plans) == 2
    full_launches = []
    monkeypatch.setattr(TritonJitKernel, "launch", lambda self, spec: full_launches.append(spec))
    launcher_calls.clear()
    for args in (small, large, large, small, small):
        assert axpy(*args) is args[3]
        assert plans[0](args) is args[3], "the plan just used is not the first one tried"
    assert full_launches == [] and len(launcher_calls) == 10


def test_forgetting_binaries_drops_the_plans(launcher_calls):
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy)
    registry.get_kernel("jitkern.example.axpy").binaries.forget()
    assert not planned(axpy)


def test_record_launches_sees_every_launch_of_a_call_planned_before_it(launcher_calls):
    """A planned call launches straight from its binaries, past ``launch``: inside the
    block every call runs in full (no plan used, none made), so none is missed."""
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy)
    with record_launches() as launches:
        for _ in range(3):
            axpy(x, y, 2.0, out)
    assert [kernel.name for kernel, _ in launches] == ["jitkern.example.axpy"] * 3 and not planned(axpy)
    axpy(x, y, 2.0, out)
    axpy(x, y, 2.0, out)
    assert planned(axpy)  # planning resumes after the block


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


def _group_inputs(tokens: int) -> tuple:
    """``build_prefill_groups``' inputs for one request of ``tokens`` tokens: one launch, which
    writes every row (below 256 tokens the build's one program, from 256 the filled build)."""
    return (torch.arange(tokens), torch.arange(tokens), torch.zeros(tokens, dtype=torch.int32),
            torch.tensor([0, tokens], dtype=torch.int32))


@pytest.mark.parametrize("tokens", [0, 40, 300])
def test_a_planned_call_makes_its_output_anew_each_time(launcher_calls, tokens):
    from step5.ops.prefill import build_prefill_groups

    results = []
    for _ in range(4):  # each call's one launch writes the tensor that call returns
        launcher_calls.clear()
        results.append(build_prefill_groups(*_group_inputs(tokens)))
        groups = [getattr(values[4], "data_ptr", lambda: values[4])() for _, values in launcher_calls]
        assert groups == [results[-1].data_ptr()]
    assert planned(build_prefill_groups)
    assert len({id(result) for result in results}) == 4
    assert all(result.shape == (tokens // 8 + 2, 3) and result.dtype == torch.int32 for result in results)


@pytest.mark.parametrize("tokens", [0, 40, 300])
def test_a_planned_call_with_out_writes_and_returns_that_out(launcher_calls, tokens):
    from step5.ops.prefill import build_prefill_groups

    inputs = _group_inputs(tokens)
    outs = [torch.full((tokens // 8 + 2, 3), 0x7F7F7F7F, dtype=torch.int32) for _ in range(4)]
    for out in outs:  # a new out each call: the plan takes the call's own
        launcher_calls.clear()
        assert build_prefill_groups(*inputs, out=out) is out
        groups = [getattr(values[4], "data_ptr", lambda: values[4])() for _, values in launcher_calls]
        assert groups == [out.data_ptr()]
    assert planned(build_prefill_groups)


def test_a_bad_out_fails_alike_whether_or_not_the_call_was_planned(launcher_calls):
    from step5.ops.prefill import build_prefill_groups

    inputs, rows = _group_inputs(40), 40 // 8 + 2
    good = torch.empty(rows, 3, dtype=torch.int32)
    bad = {"dtype": torch.empty(rows, 3, dtype=torch.int64), "shape": torch.empty(rows + 1, 3, dtype=torch.int32),
           "contiguous": torch.empty(3, rows, dtype=torch.int32).t(), "device": good.to("meta"), "kind": [0] * 3}

    def errors() -> dict:
        messages = {}
        for name, out in bad.items():
            with pytest.raises(ValueError, match="^out: ") as raised:
                build_prefill_groups(*inputs, out=out)
            messages[name] = str(raised.value)
        return messages

    unplanned = errors()
    for _ in range(2):
        build_prefill_groups(*inputs, out=good)
    assert planned(build_prefill_groups)
    for _ in range(3):  # a bad call is never planned: it raises every time
        assert errors() == unplanned
    assert unplanned["shape"] == f"out: expected int32 [tokens // 8 + 2 * requests, 3] = ({rows}, 3), got int32 " \
        f"({rows + 1}, 3) on cpu" and "got int64" in unplanned["dtype"] and "got list" in unplanned["kind"]
    assert "contiguous" in unplanned["contiguous"] and "meta" in unplanned["device"]


def _copy_of_ones(x, out, step_makes_ones: bool):
    ones = call_plan.torch_step(torch.ones_like, x) if step_makes_ones else torch.ones_like(x)
    return call_plan.torch_step(torch.Tensor.copy_, out, ones)


def test_a_step_taking_a_tensor_that_no_argument_or_step_gave_is_never_planned(launcher_calls):
    made_by_step = call_plan.public_call(lambda x, out: _copy_of_ones(x, out, True))
    made_outside = call_plan.public_call(lambda x, out: _copy_of_ones(x, out, False))
    bound_method = call_plan.public_call(lambda x, out: call_plan.torch_step(out.zero_))
    for function in (made_by_step, made_outside, bound_method):
        for _ in range(3):
            x, out = torch.randn(8), torch.empty(8)
            assert function(x, out) is out
            assert bool((out == (0 if function is bound_method else 1)).all())
    assert planned(made_by_step) == 1
    assert not planned(made_outside) and not planned(bound_method)
