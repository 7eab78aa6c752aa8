"""The Step5 public functions as torch ops (``torch.ops.step5.*``): torch's ``opcheck`` of
each (what it writes in place is ``mean`` and the ring, as its schema says), and a decode,
verify and prefill step compiled with ``fullgraph=True`` and a dynamic token dimension,
which writes the bytes the eager step writes. Kernels run under the default mode's
interpreter (on CUDA tensors in the GPU mode)."""

from __future__ import annotations

import pytest
import torch
from step5_testing import clone_inputs, decode_inputs, prefill_inputs, verify_inputs, written

from jitkern.testing import check_op
from step5.ops.summary_update import build_prefill_groups, update_decode, update_prefill, update_verify


def test_the_updates_write_mean_and_the_ring_in_place():
    for name in ("update_decode", "update_verify", "update_prefill"):
        schema = getattr(torch.ops.step5, name).default._schema
        assert [argument.name for argument in schema.arguments if argument.is_write] == ["mean", "ring"], name
        assert not schema.returns
    assert str(torch.ops.step5.build_prefill_groups.out._schema).endswith("Tensor(a!) out) -> ()")


def test_opcheck_of_every_step5_op():
    check_op(update_decode, *decode_inputs(4, capacity=8, block_size=64))
    check_op(update_verify, *verify_inputs(3, capacity=16, block_size=256, draft_tokens=3))
    step = prefill_inputs(3, capacity=8, block_size=64)
    group_args = (step["slots"], step["positions"], step["owners"], step["query_start_loc"])
    metadata = build_prefill_groups(*group_args)
    check_op(build_prefill_groups, *group_args)
    check_op(build_prefill_groups, *group_args, out=torch.empty_like(metadata))
    check_op(update_prefill, step["key"], step["z"], metadata, step["positions"], step["ring_base"],
             step["ring_slots"], step["mean"], step["ring"], step["capacity"])


def token_slices(inputs: list, tokens: int, dynamic: bool) -> list:
    """The first ``tokens`` tokens of a decode step's inputs (the same cache and ring), their
    token dimension marked dynamic."""
    sliced = [value[:tokens] if index < 5 else value for index, value in enumerate(inputs)]
    for value in sliced[:5] if dynamic else ():
        torch._dynamo.mark_dynamic(value, 0)
    return sliced


def test_a_compiled_decode_step_of_any_batch_writes_what_the_eager_one_writes():
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda *inputs: update_decode(*inputs), fullgraph=True, backend=counter)
    full = decode_inputs(8, capacity=8, block_size=64, closing=0.5)
    for tokens in (3, 5, 8):
        eager, traced = clone_inputs(full), clone_inputs(full)
        update_decode(*token_slices(eager, tokens, dynamic=False))
        compiled(*token_slices(traced, tokens, dynamic=True))
        for name, a, b in zip(("mean", "ring"), written(eager), written(traced)):
            assert torch.equal(a, b), f"{tokens} tokens: {name}"
    assert counter.frame_count == 1


@pytest.mark.parametrize("path", ["verify", "prefill"])
def test_a_compiled_verify_or_prefill_step_writes_what_the_eager_one_writes(path):
    def step(i: dict) -> torch.Tensor:
        if path == "verify":
            update_verify(*i["inputs"])
            return None
        groups = build_prefill_groups(i["slots"], i["positions"], i["owners"], i["query_start_loc"])
        update_prefill(i["key"], i["z"], groups, i["positions"], i["ring_base"], i["ring_slots"], i["mean"],
                       i["ring"], i["capacity"])
        return groups

    inputs = ({"inputs": verify_inputs(3, capacity=16, block_size=256, draft_tokens=3)} if path == "verify"
              else prefill_inputs(3, capacity=8, block_size=64))
    eager, traced = ({k: clone_inputs(v) if k == "inputs" else v for k, v in clone_inputs(inputs).items()}
                     for _ in range(2))
    expected = step(eager)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(traced)
    mine = lambda i: written(i["inputs"]) if path == "verify" else written(i)  # noqa: E731
    for a, b in zip(mine(eager), mine(traced)):
        assert torch.equal(a, b)
    assert expected is None and got is None or torch.equal(expected, got)
