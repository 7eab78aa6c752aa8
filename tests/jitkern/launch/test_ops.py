"""Public functions as torch ops (``public_call(op=...)``, ``jitkern.launch.ops``): each op's
schema read from its function's signature, a step calling every shipped public function
traced by Dynamo as one graph with ``fullgraph=True``, fake tensors through each op, torch's
``opcheck`` of the examples' ops, and an eager call that never meets its op. The Step5 and
DeepSeek V4 ops are checked in ``tests/step5/test_step5_ops.py`` and
``tests/deepseek_v4/test_dsv4_ops.py``."""

import re
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from jitkern import DeclarationError, public_call
from jitkern.examples.axpy import axpy
from jitkern.examples.grouped_gemm import grouped_gemm
from jitkern.testing import check_op, op_call

REPO = Path(__file__).resolve().parents[3]


def clone(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bits (``torch.equal`` fails on NaN, which an ``out`` left as allocated may hold)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture
def public_calls(monkeypatch):
    """(function, args, kwargs) of every shipped public function, decode steps of 4 requests,
    on torch's default device (CUDA in the GPU mode)."""
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks import launch_samples

    return launch_samples.public_calls(torch.get_default_device().type, batch=4)


def gemm_inputs(tokens=5, experts=4, n=24, k=32, top_k=2):
    a = torch.randn(tokens, k).half()
    b = torch.randn(experts, n, k).half()
    return a, b, torch.randint(0, experts, (tokens, top_k)), torch.rand(tokens, top_k)


def test_an_ops_schema_is_read_from_its_functions_signature():
    assert str(torch.ops.jitkern_examples.axpy.default._schema) == \
        "jitkern_examples::axpy(Tensor x, Tensor y, float alpha) -> Tensor"
    assert str(torch.ops.jitkern_examples.axpy.out._schema) == \
        "jitkern_examples::axpy.out(Tensor x, Tensor y, float alpha, *, Tensor(a!) out) -> ()"
    assert str(torch.ops.jitkern_examples.grouped_gemm.default._schema) == \
        "jitkern_examples::grouped_gemm(Tensor a, Tensor b, Tensor topk_ids, Tensor? topk_weights=None) -> Tensor"


def test_a_step_calling_every_public_function_is_one_graph_of_their_ops(public_calls):
    """fullgraph=True: no graph break; the graph holds one node per call, each the function's
    op; eager and compiled (AOT autograd over the interpreter's kernels) write the same bytes."""
    def make_step(calls):
        def step():
            return [function(*args, **kwargs) for function, args, kwargs in calls]
        return step

    eager_calls, compiled_calls = tree_map(clone, public_calls), tree_map(clone, public_calls)
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g, _: g)(graph, example_inputs)

    expected = make_step(eager_calls)()
    got = torch.compile(make_step(compiled_calls), fullgraph=True, backend=backend)()
    (graph,) = graphs
    called = [node.target._schema.name.partition("::")[2] for node in graph.graph.nodes if node.op == "call_function"]
    assert called == [function.__name__ for function, _, _ in public_calls]
    for (function, args, kwargs), (_, compiled_args, compiled_kwargs) in zip(eager_calls, compiled_calls):
        for eager, compiled in zip([*args, *kwargs.values()], [*compiled_args, *compiled_kwargs.values()]):
            if isinstance(eager, torch.Tensor):
                assert same_bytes(eager, compiled), function.__name__
    for eager, compiled in zip(expected, got):
        assert (eager is None and compiled is None) or same_bytes(eager, compiled)


def test_an_eager_call_never_meets_its_op():
    """Eager calls keep the planned path: the op's dispatch is never entered."""
    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    seen = []
    x, y = torch.randn(100), torch.randn(100)
    with Ops():
        axpy(x, y, 2.0)
        grouped_gemm(*gemm_inputs())
    assert not any(name.startswith("jitkern_examples::") for name in seen), seen


def test_fake_tensors_take_each_op_through_its_functions_own_checks_and_allocation(public_calls, monkeypatch):
    """Under fake tensors each op's fake implementation runs its public function with nothing
    launched: a result it allocates has the function's shape and dtype, one it writes is
    its argument, and bad inputs fail there with the function's own errors."""
    from jitkern import TritonJitKernel

    monkeypatch.setattr(TritonJitKernel, "launch", lambda *_: pytest.fail("a fake implementation launched"))
    public_calls.append((grouped_gemm, gemm_inputs(tokens=5, n=24, top_k=2), {}))
    results = {}
    with FakeTensorMode() as mode:
        for function, args, kwargs in public_calls:
            args, kwargs = tree_map(lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v, (args, kwargs))
            result = function.op_call(*args, **kwargs)
            results.setdefault(function.__name__, []).append((result, args, kwargs))
        with pytest.raises(ValueError, match=re.escape("x: expected float32 or float16 or bfloat16 [*shape], got int64")):
            axpy.op_call(*mode.from_tensor(torch.zeros(4, dtype=torch.int64)).expand(2, 4), 1.0)
    (result, args, _), = results["axpy"]
    assert result is args[3]  # axpy(x, y, alpha, out): out, written by axpy.out
    for result, args, kwargs in results["build_prefill_groups"]:
        slots, _, _, query_start_loc = args
        expected = (slots.shape[0] // 8 + 2 * (query_start_loc.shape[0] - 1), 3)
        assert result is kwargs["out"] if kwargs else (tuple(result.shape), result.dtype) == (expected, torch.int32)
    (result, (a, b, topk_ids, _), _), = results["grouped_gemm"]
    assert (tuple(result.shape), result.dtype) == ((5, 2, 24), torch.float16)
    for name in ("update_decode", "update_verify", "update_prefill", "save_partial_states"):
        assert all(result is None for result, _, _ in results[name])
    for name in ("compress_windows", "decode_step"):
        assert all(result is args[4] if name == "compress_windows" else result is args[8]
                   for result, args, _ in results[name])


@pytest.mark.parametrize("with_out", [False, True])
def test_opcheck_of_the_examples_ops(with_out):
    x, y = torch.randn(1000), torch.randn(1000)
    check_op(axpy, x, y, 2.0, **({"out": torch.empty(1000)} if with_out else {}))
    a, b, topk_ids, topk_weights = gemm_inputs()
    check_op(grouped_gemm, a, b, topk_ids, topk_weights, **({"out": torch.empty(5, 2, 24).half()} if with_out else {}))
    overload, arguments = op_call(axpy, x, y, 2.0)
    assert overload is torch.ops.jitkern_examples.axpy.default and arguments == ((x, y, 2.0), {})


def test_a_dynamic_token_dimension_compiles_once():
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(lambda x, y: axpy(x, y, 2.0) * 2, fullgraph=True, backend=counter)
    for n in (100, 300, 1000):
        x, y = torch.randn(n), torch.randn(n)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        assert torch.equal(step(x, y), axpy(x, y, 2.0) * 2)
    assert counter.frame_count == 1


def test_bad_declarations_are_refused_in_one_line():
    def scale(x: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
        return out

    def untyped(x, alpha: float) -> None:
        pass

    cases = [
        (scale, dict(op="jitkern_tests::a", mutates=["nope"]), r"'nope' is not an argument \(x, alpha, out\)"),
        (scale, dict(op="jitkern_tests::b", mutates=["alpha"]), "mutates 'alpha', which is not a tensor"),
        (scale, dict(op="jitkern_tests::c", returns="out"), "returns='out' must be one of mutates"),
        (untyped, dict(op="jitkern_tests::d"), "argument 'x' is not annotated; annotate it torch.Tensor"),
        (scale, dict(op="no_namespace"), "expected 'namespace::name'"),
    ]
    for function, declaration, message in cases:
        with pytest.raises(DeclarationError, match=message) as refused:
            public_call(function, **declaration)
        assert "\n" not in str(refused.value)


def test_an_op_name_is_refused_to_another_function():
    def first(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def second(x: torch.Tensor) -> torch.Tensor:
        return x + 2

    public_call(first, op="jitkern_tests::taken")
    with pytest.raises(DeclarationError, match="op jitkern_tests::taken of .*second is taken by .*first"):
        public_call(second, op="jitkern_tests::taken")


def test_inductor_calls_the_op_and_compiles_no_kernel_of_it(public_calls):
    """Inductor takes the op as an opaque call (its writes done in place, no copies), so it
    never sees, specialises or compiles the Triton kernel behind it."""
    from torch._inductor.utils import run_and_get_code

    _axpy, (x, y, _, out), _ = public_calls[0]
    _decode, decode_args, _ = public_calls[1]
    eager_args, compiled_args = tree_map(clone, decode_args), tree_map(clone, decode_args)

    def step(x, y, out, decode_args):
        axpy(x, y, 2.0, out=out)
        public_calls[1][0](*decode_args)
        return axpy(out, y, 0.5)

    expected = step(x, y, out.clone(), eager_args)
    got, (code, *_) = run_and_get_code(torch.compile(step, fullgraph=True), x, y, out, compiled_args)
    assert torch.equal(got, expected) and all(same_bytes(a, b) for a, b in zip(eager_args[:-1], compiled_args[:-1]))
    assert "torch.ops.jitkern_examples.axpy.out(" in code and "torch.ops.step5.update_decode.default(" in code
    assert "@triton.jit" not in code and "copy_" not in code
