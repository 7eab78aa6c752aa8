"""Index values out of range, on the CPU: each public Step5 function refuses them with one
``ValueError`` (argument, position, valid range) before anything launches.

Under Triton's interpreter a kernel's address out of range reads or writes host memory:
before these checks the process died (segfault, or malloc's heap corruption abort) on a
slot past ``mean`` or a ring base past the ring. Each case here starts from a random,
realistic step (``step5_testing``), puts one bad value at a random position, and checks
the message and that ``mean`` (poisoned) and the ring are untouched. In-range steps are
checked against the reference in ``test_summary_update.py``/``test_prefill_fused.py``.
"""

from __future__ import annotations

import os
import random
import re

import pytest
import torch

from jitkern.kernel.validation import runs_on_host
from step5 import Step5CSATailRing, Step5SparseSummaryCache
from step5.ops.summary_update import build_prefill_groups, update_decode, update_prefill, update_verify
from step5_testing import decode_inputs, prefill_inputs, verify_inputs

pytestmark = pytest.mark.skipif(os.environ.get("JITKERN_TEST_MODE") == "gpu",
                                reason="values are checked on host memory only; on a GPU, indices out of range "
                                       "are the caller's to avoid (reading them would synchronise the device)")

KINDS = ["one past the end", "large", "negative"]


def _bad(kind: str, end: int, dtype: torch.dtype) -> int:
    """A value of ``kind`` for an index whose valid values end (exclusive) at ``end``."""
    if kind == "one past the end":
        return end
    if kind == "large":
        return 2**31 - 1 if dtype == torch.int32 else random.choice([2**31, 2**40, 2**62])
    return random.randint(-(2**31), -2)  # -1 is padding


def _refused(call, args: dict, written: tuple[str, ...], message: str) -> None:
    """``call(**args)`` raises ``message`` (a regex, from its start) and writes nothing."""
    before = [args[name].clone() for name in written]
    with pytest.raises(ValueError, match="^" + message) as refused:
        call(**args)
    assert "\n" not in str(refused.value)
    for name, old in zip(written, before):
        assert torch.equal(args[name].view(torch.uint8), old.view(torch.uint8)), f"{name} written before the error"


def _with_value(tensor: torch.Tensor, at: int, value: int) -> torch.Tensor:
    changed = tensor.clone()
    changed[at] = value
    return changed


def _kv_slots(mean: torch.Tensor) -> int:
    return mean.shape[0] * mean.shape[1] * 8


def test_values_are_read_only_where_kernels_run_on_host_memory(monkeypatch):
    """CPU tensors under the interpreter; never a GPU's (a device sync; ``meta`` stands for
    it here), nor CPU tensors of a compile-only run, which launches nothing and whose
    metadata was never written."""
    assert runs_on_host(torch.zeros(1))
    assert not runs_on_host(torch.zeros(1, device="meta"))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not runs_on_host(torch.zeros(1))


# --- update_decode ---------------------------------------------------------------------------


def _decode_args() -> dict:
    capacity = random.choice([8, 12, 16])
    names = ["key", "z", "slots", "positions", "ring_base", "mean", "ring", "capacity"]
    return dict(zip(names, decode_inputs(random.randint(2, 12), capacity, random.choice([8, 64, 256]))))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["slots", "ring_base"])
def test_update_decode_refuses_an_index_out_of_range(name, kind):
    args = _decode_args()
    end = _kv_slots(args["mean"]) if name == "slots" else args["ring"].shape[0] - args["capacity"] + 1
    at = random.randrange(args[name].shape[0])
    value = _bad(kind, end, args[name].dtype)
    args[name] = _with_value(args[name], at, value)
    _refused(update_decode, args, ("mean", "ring"),
             re.escape(f"{name}: {name}[{at}] = {value}; expected -1 (padding) or in [0, {end})"))


def test_update_decode_refuses_a_negative_position_of_a_token_with_a_slot():
    args = _decode_args()
    at = random.randrange(args["slots"].shape[0])
    args["slots"][at] = at  # a KV slot, not padding
    args["positions"] = _with_value(args["positions"], at, random.randint(-1000, -1))
    _refused(update_decode, args, ("mean", "ring"),
             re.escape(f"positions: positions[{at}] = {int(args['positions'][at])}; expected >= 0 "
                       "(a token with a KV slot)"))
    args["slots"][at] = -1  # graph padding: its position is never read
    update_decode(**args)


def test_the_summary_cache_and_repeated_calls_are_checked_every_time():
    """The cache layer goes through the same checks, and a CPU call is never planned
    (``jitkern.launch.plans``), so the third call of a signature is checked in full too."""
    ring = Step5CSATailRing(4, 4, capacity=8)
    for request in range(4):
        ring.allocate(request)
    ring.prepare([0, 1, 2, 3], [3, 11, 20, 5], [1, 1, 1, 1])
    cache = Step5SparseSummaryCache(torch.zeros(4, 8, 256, dtype=torch.uint8))
    key, z = torch.randn(4, 1, 256).to(torch.bfloat16), torch.randn(4, 1, 256).to(torch.bfloat16)
    positions = torch.tensor([3, 11, 20, 5])
    slots = torch.tensor([3, 75, 148, 197])
    for _ in range(3):
        cache.update_decode(key, z, slots, positions, ring)
    bad = _with_value(slots, 2, 256)
    with pytest.raises(ValueError, match=re.escape("slots: slots[2] = 256; expected -1 (padding) or in [0, 256)")):
        cache.update_decode(key, z, bad, positions, ring)


# --- update_verify ---------------------------------------------------------------------------


def _verify_args() -> dict:
    draft_tokens = random.randint(0, 3)
    names = ["key", "z", "slots", "query_start_loc", "seq_lens", "ring_base", "mean", "ring", "capacity"]
    return dict(zip(names, verify_inputs(random.randint(2, 6), 8 + draft_tokens, random.choice([8, 64]),
                                         draft_tokens)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["slots", "ring_base", "query_start_loc"])
def test_update_verify_refuses_an_index_out_of_range(name, kind):
    args = _verify_args()
    tokens = args["slots"].shape[0]
    end = {"slots": _kv_slots(args["mean"]), "ring_base": args["ring"].shape[0] - args["capacity"] + 1,
           "query_start_loc": tokens + 1}[name]
    at = random.randrange(args[name].shape[0])
    value = _bad(kind, end, args[name].dtype)
    args[name] = _with_value(args[name], at, value)
    valid = f"in [0, {end})" if name == "query_start_loc" else f"-1 (padding) or in [0, {end})"
    _refused(update_verify, args, ("mean", "ring"), re.escape(f"{name}: {name}[{at}] = {value}; expected {valid}"))


def test_update_verify_refuses_decreasing_query_start_loc_and_negative_seq_lens():
    args = _verify_args()
    starts = args["query_start_loc"]
    at = random.randrange(2, starts.shape[0])  # starts[at - 1] >= q >= 1: the value stays >= 0
    args["query_start_loc"] = _with_value(starts, at, int(starts[at - 1]) - 1)
    _refused(update_verify, args, ("mean", "ring"),
             re.escape(f"query_start_loc: query_start_loc[{at}] = {int(starts[at - 1]) - 1} is less than "
                       f"query_start_loc[{at - 1}] = {int(starts[at - 1])}; expected non-decreasing values"))
    args = _verify_args()
    at = random.randrange(args["seq_lens"].shape[0])
    args["seq_lens"] = _with_value(args["seq_lens"], at, random.randint(-1000, -1))
    _refused(update_verify, args, ("mean", "ring"),
             re.escape(f"seq_lens: seq_lens[{at}] = {int(args['seq_lens'][at])}; expected >= 0"))


# --- build_prefill_groups and update_prefill -------------------------------------------------


def _prefill_args() -> dict:
    """A chunked-prefill step with at least one closing token (a metadata row to spoil)."""
    while True:
        args = prefill_inputs(random.randint(2, 5), random.choice([8, 12]), random.choice([8, 64]))
        if (args["positions"] % 8 == 7).any():
            return args


def _build(args: dict) -> dict:
    return {name: args[name] for name in ("slots", "positions", "owners", "query_start_loc")}


def _update(args: dict, metadata: torch.Tensor) -> dict:
    names = ("key", "z", "positions", "ring_base", "ring_slots", "mean", "ring", "capacity")
    return dict({name: args[name] for name in names}, metadata=metadata)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["slots", "query_start_loc"])
def test_build_prefill_groups_refuses_an_index_out_of_range(name, kind):
    """Slots go to the metadata as int32; query_start_loc counts the step's tokens."""
    args = _prefill_args()
    tokens, requests = args["slots"].shape[0], args["query_start_loc"].shape[0] - 1
    end = 2**31 if name == "slots" else tokens + 1
    at = random.randrange(args[name].shape[0])
    value = _bad(kind, end, args[name].dtype)
    args[name] = _with_value(args[name], at, value)
    valid = f"-1 (padding) or in [0, {end})" if name == "slots" else f"in [0, {end})"
    out = torch.full((tokens // 8 + 2 * requests, 3), 77, dtype=torch.int32)
    _refused(build_prefill_groups, dict(_build(args), out=out), ("out",),
             re.escape(f"{name}: {name}[{at}] = {value}; expected {valid}"))


def test_build_prefill_groups_refuses_negative_positions_and_decreasing_query_start_loc():
    args = _prefill_args()
    at = random.randrange(args["positions"].shape[0])
    args["positions"] = _with_value(args["positions"], at, random.randint(-1000, -1))
    _refused(build_prefill_groups, _build(args), (),
             re.escape(f"positions: positions[{at}] = {int(args['positions'][at])}; expected >= 0"))
    args = _prefill_args()
    starts = args["query_start_loc"]
    at = random.randrange(2, starts.shape[0])
    args["query_start_loc"] = _with_value(starts, at, int(starts[at - 1]) - 1)
    _refused(build_prefill_groups, _build(args), (),
             re.escape(f"query_start_loc: query_start_loc[{at}] = {int(starts[at - 1]) - 1} is less than "
                       f"query_start_loc[{at - 1}] = {int(starts[at - 1])}; expected non-decreasing values"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["ring_base", "ring_slots"])
def test_update_prefill_refuses_a_ring_index_out_of_range(name, kind):
    args = _prefill_args()
    metadata = build_prefill_groups(**_build(args))
    rows = args["ring"].shape[0]
    end = rows - args["capacity"] + 1 if name == "ring_base" else rows
    at = random.randrange(args[name].shape[0])
    value = _bad(kind, end, args[name].dtype)
    args[name] = _with_value(args[name], at, value)
    _refused(update_prefill, _update(args, metadata), ("mean", "ring"),
             re.escape(f"{name}: {name}[{at}] = {value}; expected -1 (padding) or in [0, {end})"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("column, field", [(0, "token"), (1, "KV slot"), (2, "ring rows")])
def test_update_prefill_refuses_metadata_addressing_out_of_range(column, field, kind):
    """A group row ``[token, KV slot, ring rows]`` names a token of the step, a slot of
    ``mean`` and at most 7 ring rows (the kernels read tokens ``token - 7 + ring rows ..``)."""
    args = _prefill_args()
    metadata = build_prefill_groups(**_build(args))
    tokens = args["positions"].shape[0]
    used = (metadata[: tokens // 8 + args["query_start_loc"].shape[0] - 1, 0] >= 0).nonzero()[:, 0]
    row = int(random.choice(used))
    end = {0: tokens, 1: _kv_slots(args["mean"]), 2: 8}[column]
    value = _bad(kind, end, torch.int32)
    metadata[row, column] = value
    _refused(update_prefill, _update(args, metadata), ("mean", "ring"),
             re.escape(f"metadata: row {row} = {metadata[row].tolist()}: {field} {value} is not in ["))


def test_update_prefill_refuses_the_metadata_of_another_step():
    """Metadata whose closing tokens or request rows are not this step's: refused, not a
    ring read at a negative position or a key row past the step."""
    args = _prefill_args()
    metadata = build_prefill_groups(**_build(args))
    tokens, requests = args["positions"].shape[0], args["query_start_loc"].shape[0] - 1
    n_groups = tokens // 8 + requests
    shifted = args["positions"] - 1  # no closing token where the metadata says
    row = int((metadata[:n_groups, 0] >= 0).nonzero()[0, 0])
    _refused(update_prefill, dict(_update(args, metadata), positions=shifted), ("mean", "ring"),
             re.escape(f"metadata: row {row} = {metadata[row].tolist()}: the token's position "))
    request = random.randrange(requests)
    metadata[n_groups + request, 1] = tokens + random.randint(1, 2**20)
    _refused(update_prefill, _update(args, metadata), ("mean", "ring"),
             re.escape(f"metadata: row {n_groups + request} = {metadata[n_groups + request].tolist()}: tokens "))
