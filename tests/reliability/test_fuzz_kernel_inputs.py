"""Reliability promise 7: a bad kernel input is a ``ValueError`` naming the argument, before any launch.

For every public kernel function (and the Step5 ring and cache that feed them), hypothesis
builds valid inputs: small random sizes, both index dtypes, padding slots (-1), and the
strided views each function takes (``key``/``z`` slices of a wider tensor, a strided
``positions``, ``mean`` blocks inside a larger page buffer, ``kv``/``score`` columns of one
projection, caches strided in dims 0 and 1, ...). They must pass validation and launch
(recorded, nothing run: ``record_launches(dry_run=True)``).

Then each valid input is called again once per mutation of the function's table, each
call with exactly one mutated argument: a wrong dtype, one dim more or fewer, a wrong size
of one dim, a tensor on another device (``meta``; ``cpu`` when torch's default device is
CUDA), a stride the function does not take, an out-of-range or non-int size, a non-tensor.
Only changes that are invalid for that argument are in the tables (a strided
``positions`` or a wider ``ape`` are valid, so they are not mutations). Every call must
raise ``ValueError`` and launch nothing, and the message must name the argument:

- ``strict`` mutations (the argument is wrong on its own): it starts with ``<argument>:``;
- relational ones (the argument disagrees with another one, and which of the two is wrong
  cannot be told, e.g. ``key``'s token count against ``z``'s): it starts with the name of
  one of the function's parameters and names the mutated argument as a word.

Running the whole table on every example (rather than drawing one mutation) means every
kind of mutation of every argument is tried on every run.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TESTS = Path(__file__).resolve().parents[1]
for _helpers in ("step5", "deepseek_v4"):  # reuse the builders of those suites' valid inputs
    if str(TESTS / _helpers) not in sys.path:
        sys.path.insert(0, str(TESTS / _helpers))

from dsv4_helpers import projection_views, strided_cache  # noqa: E402
from step5_testing import poisoned_mean, random_rows, strided_index  # noqa: E402

from deepseek_v4 import compress_windows, decode_step, save_partial_states  # noqa: E402
from deepseek_v4.common import RATIOS  # noqa: E402
from jitkern.examples.axpy import axpy  # noqa: E402
from jitkern.testing import record_launches  # noqa: E402
from step5 import Step5CSATailRing, Step5SparseSummaryCache, Step5SummaryCacheSpec  # noqa: E402
from step5.ops.summary_update import (  # noqa: E402
    build_prefill_groups,
    summary_geometry,
    update_decode,
    update_prefill,
    update_verify,
)

pytestmark = pytest.mark.usefixtures("bounded_memory")  # tests/reliability/conftest.py

FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
VALID = settings(max_examples=25, **FUZZ)
MUTATED = settings(max_examples=12, **FUZZ)

ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32,
              torch.int64, torch.uint8, torch.bool]
INDEX_DTYPES = (torch.int32, torch.int64)
NOT_TENSORS = [None, [0, 1, 2], 7]


def other_device() -> torch.device:
    """A device the test's tensors are not on: ``meta`` on the CPU; the CPU in the GPU test mode."""
    return torch.device("cpu") if torch.get_default_device().type == "cuda" else torch.device("meta")


# --- building tensors of other shapes and strides --------------------------------------------


def resized(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """A contiguous tensor like ``tensor`` with dim ``dim`` of ``size``."""
    shape = list(tensor.shape)
    shape[dim] = size
    return torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)


def spread(tensor: torch.Tensor, dim: int, step: int = 2) -> torch.Tensor:
    """``tensor``'s values in a view whose dim ``dim`` has ``step`` times the stride."""
    dim %= tensor.dim()
    shape = list(tensor.shape)
    shape[dim] *= step
    index = [slice(None)] * tensor.dim()
    index[dim] = slice(None, None, step)
    view = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)[tuple(index)]
    view.copy_(tensor)
    return view


def padded(tensor: torch.Tensor, dim: int, extra: int) -> torch.Tensor:
    """``tensor``'s values in a view of a tensor ``extra`` wider in dim ``dim`` (the dims
    before it get larger strides)."""
    dim %= tensor.dim()
    shape = list(tensor.shape)
    shape[dim] += extra
    view = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device).narrow(dim, 0, tensor.shape[dim])
    view.copy_(tensor)
    return view


def huge_stride(tensor: torch.Tensor, dim: int, excess: int) -> torch.Tensor:
    """A slice of ``tensor`` one wide in dim ``dim``, with a stride there of ``2**31 + excess``:
    a valid view (a dim of size 1 is never stepped over) that would need i64 binaries."""
    one = tensor.narrow(dim, 0, 1)
    strides = list(one.stride())
    strides[dim] = 2**31 + excess
    return one.as_strided(one.shape, strides)


def overlapping_rows(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``tensor`` with every index of dim ``dim`` on the same memory (an expanded tensor, stride 0)."""
    return tensor.narrow(dim, 0, 1).expand(tensor.shape)


def fewer_dims(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.flatten(0, 1) if tensor.dim() >= 2 else torch.zeros((), dtype=tensor.dtype, device=tensor.device)


def other_than(value: int, low: int, high: int):
    return st.integers(low, high).filter(lambda n: n != value)


# --- mutations and the two properties -----------------------------------------------------------

Draw = Callable[[Any], Any]


@dataclass(frozen=True)
class Mutation:
    argument: str
    what: str
    make: Callable[[Draw, dict], Any]  # (draw, valid arguments) -> the argument's wrong value
    strict: bool = True  # False: relational (see the module docstring)


def tensor_mutations(name: str, allowed: tuple, *, device: bool = True) -> list[Mutation]:
    """The mutations every tensor argument of a fixed rank and dtype set has."""
    wrong = [dtype for dtype in ALL_DTYPES if dtype not in allowed]
    mutations = [
        Mutation(name, "wrong dtype", lambda draw, a: a[name].to(draw(st.sampled_from(wrong)))),
        Mutation(name, "not a tensor", lambda draw, a: draw(st.sampled_from(NOT_TENSORS))),
        Mutation(name, "one dim more", lambda draw, a: a[name].unsqueeze(draw(st.integers(0, a[name].dim())))),
        Mutation(name, "one dim fewer", lambda draw, a: fewer_dims(a[name])),
    ]
    if device:
        mutations.append(Mutation(name, "on another device", lambda draw, a: a[name].to(other_device())))
    return mutations


def index_mutations(name: str, args: dict, *, counted: bool = True, strided_ok: bool = False,
                    length_strict: bool = True) -> list[Mutation]:
    """A 1-D int32/int64 tensor: with one entry per token when ``counted``; contiguous
    unless ``strided_ok`` (then any positive stride, but not 0)."""
    tokens = args[name].shape[0]
    mutations = tensor_mutations(name, INDEX_DTYPES)
    if counted:
        mutations.append(Mutation(name, "another length",
                                  lambda draw, a: resized(a[name], 0, draw(other_than(tokens, 0, tokens + 3))),
                                  strict=length_strict))
    if tokens > 1:
        mutations.append(Mutation(name, "stride 0 (expanded)", lambda draw, a: a[name][:1].expand(tokens)))
        if not strided_ok:
            mutations.append(Mutation(name, "stride 2", lambda draw, a: spread(a[name], 0)))
    return mutations


def float_mutations(name: str, args: dict, written: bool = False) -> list[Mutation]:
    """A float32 tensor of a fixed rank whose last dim must be contiguous (others may be
    strided, below 2**31); one the kernel writes (``written``) with rows apart in memory."""
    mutations = tensor_mutations(name, (torch.float32,)) + stride_mutations(name, args)
    if args[name].shape[-1] > 1:
        mutations.append(Mutation(name, "last dim strided", lambda draw, a: spread(a[name], -1)))
    for dim, size in enumerate(args[name].shape[:-1]):
        if written and size > 1:
            mutations.append(Mutation(name, f"rows overlapping in dim {dim}",
                                      lambda draw, a, dim=dim: overlapping_rows(a[name], dim)))
    return mutations


def stride_mutations(name: str, args: dict) -> list[Mutation]:
    """A stride of 2**31 or more in a dim before the last (the kernels' integers are i32)."""
    return [Mutation(name, f"dim {dim} stride of 2**31 or more",
                     lambda draw, a, dim=dim: huge_stride(a[name], dim, draw(st.integers(0, 2**31))))
            for dim, size in enumerate(args[name].shape[:-1]) if size]


def scalar_mutations(name: str, what: str, values: list, strict: bool = True) -> list[Mutation]:
    return [Mutation(name, what, lambda draw, a: draw(st.sampled_from(values)), strict)]


def names_argument(message: str, argument: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(argument)}(?!\w)", message) is not None


def assert_accepted(function: Callable, args: dict, launches: bool = True) -> Any:
    with record_launches(dry_run=True) as recorded:
        result = function(**args)
    if launches:
        assert recorded, "valid inputs launched nothing"
    return result


def assert_each_mutation_rejected(draw: Draw, function: Callable, args: dict, mutations: list[Mutation]) -> None:
    """Call ``function`` once per mutation, that argument wrong and every other one valid."""
    parameters = set(inspect.signature(function).parameters)
    assert mutations
    for mutation in mutations:
        assert mutation.argument in parameters, mutation
        value = mutation.make(draw, args)
        what = f"{getattr(function, '__qualname__', function)}: {mutation.argument} <- {mutation.what}"
        with record_launches(dry_run=True) as launches:
            try:
                function(**{**args, mutation.argument: value})
            except ValueError as error:
                message = str(error)
            except Exception as error:  # noqa: BLE001 - anything but ValueError is the failure
                raise AssertionError(f"{what}: raised {type(error).__name__}, not ValueError: {error}") from error
            else:
                raise AssertionError(f"{what}: accepted")
        assert not launches, f"{what}: launched before raising {message!r}"
        prefix = message.split(":", 1)[0]
        if mutation.strict:
            assert prefix == mutation.argument, f"{what}: the message does not start with it: {message!r}"
        else:
            assert prefix in parameters and names_argument(message, mutation.argument), \
                f"{what}: the message does not name it: {message!r}"


# --- Step5: valid inputs ------------------------------------------------------------------------

ROW_LAYOUTS = st.sampled_from(["contiguous", "fused", "odd_rows", "interleaved"])


@st.composite
def index(draw, values: list[int], strided_ok: bool = False) -> torch.Tensor:
    return strided_index(values, draw(st.sampled_from(INDEX_DTYPES)), strided_ok and draw(st.booleans()))


@st.composite
def ints(draw, count: int, low: int, high: int) -> list[int]:
    return draw(st.lists(st.integers(low, high), min_size=count, max_size=count))


@st.composite
def summary_state(draw, draft_tokens: int = 0) -> dict:
    """``mean`` (blocks possibly strided in a page buffer), a ring of 1-3 requests, its capacity."""
    block_size = 8 * draw(st.integers(1, 4))
    mean = poisoned_mean(draw(st.integers(1, 4)), block_size, strided=draw(st.booleans()))
    capacity = draw(st.integers(7 + draft_tokens, 16 + draft_tokens))
    ring = torch.zeros(draw(st.integers(1, 3)) * capacity + draw(st.integers(0, 3)), 512, dtype=torch.bfloat16)
    return dict(mean=mean, ring=ring, capacity=capacity)


@st.composite
def step_indices(draw, tokens: int, state: dict) -> dict:
    """slots (-1: padding), positions (possibly strided), ring bases (-1: no ring)."""
    slots = draw(ints(tokens, -1, state["mean"].shape[0] * state["mean"].shape[1] * 8 - 1))
    bases = [-1] + list(range(0, state["ring"].shape[0] - state["capacity"] + 1, state["capacity"]))
    return dict(
        slots=draw(index(slots)),
        positions=draw(index(draw(ints(tokens, 0, 300)), strided_ok=True)),
        ring_base=draw(index(draw(st.lists(st.sampled_from(bases), min_size=tokens, max_size=tokens)))),
    )


@st.composite
def decode_args(draw) -> dict:
    tokens = draw(st.integers(1, 8))
    key, z = random_rows(tokens, draw(ROW_LAYOUTS))
    state = draw(summary_state())
    return dict(key=key, z=z, **draw(step_indices(tokens, state)), **state)


@st.composite
def prefill_args(draw) -> dict:
    tokens = draw(st.integers(1, 24))
    requests = draw(st.integers(0 if tokens >= 8 else 1, 3))  # something to launch
    key, z = random_rows(tokens, draw(ROW_LAYOUTS))
    state = draw(summary_state())
    indices = draw(step_indices(tokens, state))
    ring_slots = draw(index(draw(ints(tokens, -1, state["ring"].shape[0] - 1))))
    metadata = torch.full((tokens // 8 + 2 * requests, 3), -1, dtype=torch.int32)  # build_prefill_groups' layout
    return dict(key=key, z=z, metadata=metadata, positions=indices["positions"], ring_base=indices["ring_base"],
                ring_slots=ring_slots, **state)


@st.composite
def verify_args(draw) -> dict:
    requests, q = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    tokens = requests * q
    key, z = random_rows(tokens, draw(ROW_LAYOUTS))
    state = draw(summary_state(draft_tokens=q - 1))
    indices = draw(step_indices(tokens, state))
    seq_lens = [first + q for first in draw(ints(requests, 0, 300))]
    return dict(key=key, z=z, slots=indices["slots"], query_start_loc=draw(index(list(range(0, tokens + 1, q)))),
                seq_lens=draw(index(seq_lens)), ring_base=indices["ring_base"], **state)


@st.composite
def prefill_groups_args(draw) -> dict:
    tokens, requests = draw(st.integers(1, 24)), draw(st.integers(0, 3))
    return dict(
        slots=draw(index(draw(ints(tokens, -1, 200)))),
        positions=draw(index(draw(ints(tokens, 0, 300)), strided_ok=True)),
        owners=draw(index(draw(ints(tokens, 0, max(requests - 1, 0))))),
        query_start_loc=draw(index(sorted(draw(ints(requests, 0, tokens))) + [tokens])),
    )


@st.composite
def mean_args(draw) -> dict:
    return dict(mean=draw(summary_state())["mean"])


# --- Step5: mutations -----------------------------------------------------------------------------


def rows_mutations(args: dict) -> list[Mutation]:
    """key and z: bf16 [tokens, 1, 256]; key's token count is the one the others are checked against."""
    tokens = args["key"].shape[0]
    mutations = []
    for name in ("key", "z"):
        mutations += tensor_mutations(name, (torch.bfloat16,)) + [
            Mutation(name, "dim 1 not 1", lambda draw, a, n=name: resized(a[n], 1, draw(st.sampled_from([0, 2, 3])))),
            Mutation(name, "dim 2 not 256",
                     lambda draw, a, n=name: resized(a[n], 2, draw(st.sampled_from([0, 1, 128, 255, 257, 512])))),
            Mutation(name, "another token count",
                     lambda draw, a, n=name: resized(a[n], 0, draw(other_than(tokens, 0, tokens + 3))),
                     strict=name == "z"),
        ]
    return mutations


def mean_mutations(args: dict, device: bool = True) -> list[Mutation]:
    """uint8 [blocks, block_size // 8 >= 1, 256], strides (any, 256, 1) (a dimension of
    size 1 has no stride to check)."""
    padded_rows = [Mutation("mean", "row stride not 256", lambda draw, a: padded(a["mean"], 2, draw(st.integers(1, 64))))]
    return tensor_mutations("mean", (torch.uint8,), device=device) + padded_rows * (args["mean"].shape[1] > 1) + [
        Mutation("mean", "dim 2 not 256",
                 lambda draw, a: resized(a["mean"], 2, draw(st.sampled_from([0, 1, 128, 255, 257, 512])))),
        Mutation("mean", "no region per block", lambda draw, a: resized(a["mean"], 1, 0)),
        Mutation("mean", "element stride 2", lambda draw, a: spread(a["mean"], 2)),
    ]


def ring_mutations(args: dict, draft_tokens: int = 0) -> list[Mutation]:
    """ring: contiguous bf16 [rows >= capacity, 512]; capacity: an int >= 7 + draft tokens."""
    capacity, rows = args["capacity"], args["ring"].shape[0]
    return tensor_mutations("ring", (torch.bfloat16,)) + [
        Mutation("ring", "dim 1 not 512",
                 lambda draw, a: resized(a["ring"], 1, draw(st.sampled_from([0, 1, 256, 511, 513, 1024])))),
        Mutation("ring", "fewer rows than capacity",
                 lambda draw, a: resized(a["ring"], 0, draw(st.integers(0, capacity - 1)))),
        Mutation("ring", "row stride above 512", lambda draw, a: padded(a["ring"], 1, draw(st.integers(1, 64)))),
        Mutation("ring", "every other row", lambda draw, a: spread(a["ring"], 0)),
        Mutation("ring", "element stride 2", lambda draw, a: spread(a["ring"], 1)),
        *scalar_mutations("capacity", "not an int", [True, False, float(capacity), str(capacity), None, [capacity]]),
        Mutation("capacity", "below 7 + draft tokens", lambda draw, a: draw(st.integers(-3, 6 + draft_tokens))),
        Mutation("capacity", "more rows than the ring has",
                 lambda draw, a: draw(st.integers(rows + 1, rows + 20)), strict=False),
    ]


def decode_mutations(args: dict) -> list[Mutation]:
    return (rows_mutations(args) + index_mutations("slots", args)
            + index_mutations("positions", args, strided_ok=True) + index_mutations("ring_base", args)
            + mean_mutations(args) + ring_mutations(args))


def metadata_mutations(args: dict) -> list[Mutation]:
    """int32 [tokens // 8 + 2 * requests, 3], contiguous."""
    rows, tokens = args["metadata"].shape[0], args["key"].shape[0]
    mutations = tensor_mutations("metadata", (torch.int32,)) + [
        Mutation("metadata", "not 3 columns",
                 lambda draw, a: resized(a["metadata"], 1, draw(st.sampled_from([0, 1, 2, 4, 6])))),
        Mutation("metadata", "an odd number of request rows", lambda draw, a: resized(a["metadata"], 0, rows + 1)),
        Mutation("metadata", "column stride 2", lambda draw, a: spread(a["metadata"], 1)),
    ]
    if tokens >= 8:
        mutations.append(Mutation("metadata", "fewer rows than tokens // 8",
                                  lambda draw, a: resized(a["metadata"], 0, draw(st.integers(0, tokens // 8 - 1)))))
    if rows > 1:
        mutations.append(Mutation("metadata", "row stride above 3",
                                  lambda draw, a: padded(a["metadata"], 1, draw(st.integers(1, 5)))))
    return mutations


def prefill_mutations(args: dict) -> list[Mutation]:
    return (rows_mutations(args) + metadata_mutations(args) + index_mutations("positions", args, strided_ok=True)
            + index_mutations("ring_base", args) + index_mutations("ring_slots", args)
            + mean_mutations(args) + ring_mutations(args))


def verify_mutations(args: dict) -> list[Mutation]:
    requests = args["seq_lens"].shape[0]
    q = args["key"].shape[0] // requests
    return (
        rows_mutations(args) + index_mutations("slots", args) + index_mutations("ring_base", args)
        + index_mutations("query_start_loc", args, counted=False) + [
            Mutation("query_start_loc", "not requests + 1 entries",
                     lambda draw, a: resized(a["query_start_loc"], 0, draw(other_than(requests + 1, 0, requests + 4)))),
        ]
        + index_mutations("seq_lens", args, counted=False) + [
            Mutation("seq_lens", "another request count",  # against query_start_loc
                     lambda draw, a: resized(a["seq_lens"], 0, draw(other_than(requests, 0, requests + 3))),
                     strict=False),
        ]
        + mean_mutations(args) + ring_mutations(args, draft_tokens=q - 1)
    )


def prefill_groups_mutations(args: dict) -> list[Mutation]:
    # slots sets the token count: another length of it is relational
    return (index_mutations("slots", args, length_strict=False) + index_mutations("positions", args, strided_ok=True)
            + index_mutations("owners", args) + index_mutations("query_start_loc", args, counted=False)
            + [Mutation("query_start_loc", "empty", lambda draw, a: resized(a["query_start_loc"], 0, 0))])


# --- Step5 update paths ---------------------------------------------------------------------------


@VALID
@given(args=decode_args())
def test_update_decode_accepts_valid_inputs(args):
    assert_accepted(update_decode, args)


@MUTATED
@given(data=st.data())
def test_update_decode_rejects_each_wrong_argument(data):
    args = data.draw(decode_args())
    assert_each_mutation_rejected(data.draw, update_decode, args, decode_mutations(args))


@VALID
@given(args=prefill_args())
def test_update_prefill_accepts_valid_inputs(args):
    assert_accepted(update_prefill, args)


@MUTATED
@given(data=st.data())
def test_update_prefill_rejects_each_wrong_argument(data):
    args = data.draw(prefill_args())
    assert_each_mutation_rejected(data.draw, update_prefill, args, prefill_mutations(args))


@VALID
@given(args=verify_args())
def test_update_verify_accepts_valid_inputs(args):
    assert_accepted(update_verify, args)


@MUTATED
@given(data=st.data())
def test_update_verify_rejects_each_wrong_argument(data):
    args = data.draw(verify_args())
    assert_each_mutation_rejected(data.draw, update_verify, args, verify_mutations(args))


@VALID
@given(args=prefill_groups_args())
def test_build_prefill_groups_accepts_valid_inputs(args):
    tokens, requests = args["slots"].shape[0], args["query_start_loc"].shape[0] - 1
    groups = assert_accepted(build_prefill_groups, args, launches=tokens // 8 + 2 * requests > 0)  # else no rows
    assert groups.shape == (tokens // 8 + 2 * requests, 3) and groups.dtype == torch.int32


@MUTATED
@given(data=st.data())
def test_build_prefill_groups_rejects_each_wrong_argument(data):
    args = data.draw(prefill_groups_args())
    assert_each_mutation_rejected(data.draw, build_prefill_groups, args, prefill_groups_mutations(args))


@VALID
@given(args=mean_args())
def test_summary_geometry_and_cache_accept_valid_mean(args):
    mean = args["mean"]
    assert assert_accepted(summary_geometry, args, launches=False) == (mean.stride(0), mean.shape[1] * 8)
    assert assert_accepted(Step5SparseSummaryCache, args, launches=False).block_size == mean.shape[1] * 8


@MUTATED
@given(data=st.data())
def test_summary_geometry_and_cache_reject_each_wrong_mean(data):
    args = data.draw(mean_args())
    for function in (summary_geometry, Step5SparseSummaryCache):  # one tensor: no device to disagree with
        assert_each_mutation_rejected(data.draw, function, args, mean_mutations(args, device=False))


# --- Step5 ring and cache ------------------------------------------------------------------------


@st.composite
def ring_args(draw) -> dict:
    draft_tokens = draw(st.integers(0, 3))
    return dict(
        max_requests=draw(st.integers(1, 4)), max_tokens=draw(st.integers(1, 32)), draft_tokens=draft_tokens,
        capacity=draw(st.none() | st.integers(7 + draft_tokens, 16 + draft_tokens)),
        device=draw(st.sampled_from([None, torch.get_default_device().type])),
        index_dtype=draw(st.sampled_from(INDEX_DTYPES)),
    )


def ring_constructor_mutations(args: dict) -> list[Mutation]:
    draft_tokens = args["draft_tokens"]
    mutations = []
    for name in ("max_requests", "max_tokens"):
        mutations += scalar_mutations(name, "below 1", [0, -1, -8])
        mutations += scalar_mutations(name, "not an int", [True, 2.0, "2", None])
    return mutations + [
        *scalar_mutations("draft_tokens", "negative", [-1, -3]),
        *scalar_mutations("draft_tokens", "not an int", [True, 1.0, "1", None]),
        Mutation("capacity", "below 7 + draft tokens", lambda draw, a: draw(st.integers(-3, 6 + draft_tokens))),
        *scalar_mutations("capacity", "not an int", [True, 7.5 + draft_tokens, float(8 + draft_tokens), "16", [16]]),
        *scalar_mutations("index_dtype", "not int32 or int64",
                          [torch.float32, torch.int16, torch.uint8, torch.bool, "int32", None]),
        *scalar_mutations("device", "not a device", ["not-a-device", 1.5, [], "cpu:x"]),
    ]


@VALID
@given(args=ring_args())
def test_tail_ring_accepts_valid_sizes(args):
    ring = assert_accepted(Step5CSATailRing, args, launches=False)
    assert ring.capacity >= 7 + args["draft_tokens"]
    assert ring.rows.shape == (args["max_requests"] * ring.capacity, 512)
    assert ring.metadata().base.shape == (args["max_tokens"],) and ring.metadata().base.dtype == args["index_dtype"]


@MUTATED
@given(data=st.data())
def test_tail_ring_rejects_each_wrong_size(data):
    args = data.draw(ring_args())
    assert_each_mutation_rejected(data.draw, Step5CSATailRing, args, ring_constructor_mutations(args))


@st.composite
def ring_schedule(draw) -> tuple[Step5CSATailRing, list, dict]:
    """A ring with some requests allocated (returned too), and a valid step schedule for ``prepare``:
    some of them and some requests without a ring (None), in any order."""
    ring = Step5CSATailRing(draw(st.integers(1, 4)), draw(st.integers(1, 32)))
    live = [r for r in range(ring.max_requests) if draw(st.booleans())]
    for request in live:
        ring.allocate(request)
    stepping = [r for r in live if draw(st.booleans())] + [None] * draw(st.integers(0, 2))
    request_ids = draw(st.permutations(stepping))
    count = len(request_ids)
    budget = ring.max_tokens
    query_lens = []
    for _ in request_ids:
        query_lens.append(draw(st.integers(0, budget)))
        budget -= query_lens[-1]
    real = sum(query_lens)
    return ring, live, dict(request_ids=request_ids, first_positions=draw(ints(count, 0, 100)),
                            query_lens=query_lens, num_tokens=draw(st.none() | st.integers(real, ring.max_tokens)))


def replace_one(draw, values: list, new) -> list:
    values = list(values)
    values[draw(st.integers(0, len(values) - 1))] = new
    return values


def prepare_mutations(ring: Step5CSATailRing, args: dict) -> list[Mutation]:
    count = len(args["request_ids"])
    real = sum(args["query_lens"])
    mutations = [
        Mutation("request_ids", "one more entry than the others", lambda draw, a: a["request_ids"] + [None],
                 strict=False),
        *scalar_mutations("request_ids", "not a sequence", [None, 3]),
        *scalar_mutations("num_tokens", "above max_tokens", [ring.max_tokens + 1, ring.max_tokens + 9]),
        *scalar_mutations("num_tokens", "not an int", [True, float(real), str(real), [real]]),
    ]
    if real:
        mutations.append(Mutation("num_tokens", "fewer than the requests' tokens",
                                  lambda draw, a: draw(st.integers(-2, real - 1))))
    for name in ("first_positions", "query_lens"):
        mutations += [
            Mutation(name, "another length",
                     lambda draw, a, n=name: a[n] + [1] if count == 0 or draw(st.booleans()) else a[n][:-1]),
            *scalar_mutations(name, "not a sequence", [None, 5]),
        ]
    if count:
        mutations += [
            Mutation("request_ids", "an id without ring rows", lambda draw, a: replace_one(draw, a["request_ids"],
                                                                                             "no such request")),
            Mutation("request_ids", "an unhashable id", lambda draw, a: replace_one(draw, a["request_ids"], [0])),
            Mutation("query_lens", "more tokens than max_tokens",
                     lambda draw, a: replace_one(draw, a["query_lens"], ring.max_tokens + 1)),
        ]
        for name in ("first_positions", "query_lens"):
            mutations += [
                Mutation(name, "a negative entry",
                         lambda draw, a, n=name: replace_one(draw, a[n], draw(st.integers(-5, -1)))),
                Mutation(name, "an entry that is no int",
                         lambda draw, a, n=name: replace_one(draw, a[n], draw(st.sampled_from([2.5, 1.0, "3", None,
                                                                                                True])))),
            ]
    return mutations


@VALID
@given(case=ring_schedule())
def test_tail_ring_prepare_accepts_valid_schedules(case):
    ring, _live, args = case
    metadata = assert_accepted(ring.prepare, args, launches=False)
    assert metadata.base.shape == metadata.slot_mapping.shape == (ring.max_tokens,)


@MUTATED
@given(data=st.data())
def test_tail_ring_prepare_rejects_each_wrong_schedule(data):
    ring, live, args = data.draw(ring_schedule())
    assert_each_mutation_rejected(data.draw, ring.prepare, args, prepare_mutations(ring, args))
    allocate = [*scalar_mutations("request_id", "None or unhashable", [None, [0], {"id": 1}])]
    if live:
        allocate += scalar_mutations("request_id", "already allocated", live)
    assert_each_mutation_rejected(data.draw, ring.allocate, dict(request_id=ring.max_requests), allocate)


@st.composite
def cache_step(draw) -> tuple[str, Step5SparseSummaryCache, dict]:
    """A summary cache, a ring prepared for a decode, verify or prefill step, and the step's inputs."""
    kind = draw(st.sampled_from(["decode", "verify", "prefill"]))
    draft_tokens = draw(st.integers(0, 2))
    spec = Step5SummaryCacheSpec(block_size=8 * draw(st.integers(1, 4)))
    cache = Step5SparseSummaryCache(spec.allocate(draw(st.integers(1, 4))))
    requests = draw(st.integers(1, 3))
    ring = Step5CSATailRing(requests, 48, draft_tokens=draft_tokens, index_dtype=draw(st.sampled_from(INDEX_DTYPES)))
    ids = []
    for request in range(requests):
        ids.append(request if draw(st.booleans()) else None)
        if ids[-1] is not None:
            ring.allocate(request)
    firsts = draw(ints(requests, 0, 100))
    counts = {"decode": [1] * requests, "verify": [1 + draft_tokens] * requests,
              "prefill": draw(ints(requests, 1, 12))}[kind]
    padding = 0 if kind == "verify" else draw(st.integers(0, 2))
    tokens = sum(counts) + padding
    ring.prepare(ids, firsts, counts, num_tokens=tokens)
    key, z = random_rows(tokens, draw(ROW_LAYOUTS))
    slots = draw(index(draw(ints(tokens, -1, cache.mean.shape[0] * cache.block_size - 1))))
    positions = draw(index(draw(ints(tokens, 0, 300)), strided_ok=True))
    if kind == "decode":
        args = dict(key=key, z=z, slots=slots, positions=positions)
    elif kind == "verify":
        q = 1 + draft_tokens
        args = dict(key=key, z=z, slots=slots, query_start_loc=draw(index(list(range(0, tokens + 1, q)))),
                    seq_lens=draw(index([first + q for first in firsts])))
    else:
        args = dict(key=key, z=z, metadata=torch.full((tokens // 8 + 2 * requests, 3), -1, dtype=torch.int32),
                    positions=positions)
    return kind, cache, dict(args, ring=ring)


def cache_step_mutations(kind: str, args: dict) -> list[Mutation]:
    counted = "positions" if kind == "prefill" else "slots"
    max_tokens = args["ring"].max_tokens
    return [
        *scalar_mutations(counted, "not a tensor", NOT_TENSORS),
        Mutation(counted, "more tokens than the ring's max_tokens",
                 lambda draw, a: resized(a[counted], 0, draw(st.integers(max_tokens + 1, max_tokens + 4)))),
        Mutation("ring", "not a Step5CSATailRing", lambda draw, a: draw(st.sampled_from([None, a["ring"].rows, 8]))),
    ]


@VALID
@given(case=cache_step())
def test_summary_cache_steps_accept_valid_inputs(case):
    kind, cache, args = case
    assert_accepted(getattr(cache, f"update_{kind}"), args)


@MUTATED
@given(data=st.data())
def test_summary_cache_steps_reject_each_wrong_argument(data):
    kind, cache, args = data.draw(cache_step())
    assert_each_mutation_rejected(data.draw, getattr(cache, f"update_{kind}"), args, cache_step_mutations(kind, args))


@VALID
@given(regions=st.integers(1, 16), blocks=st.integers(0, 4))
def test_summary_cache_spec_accepts_blocks_of_whole_regions(regions, blocks):
    spec = assert_accepted(Step5SummaryCacheSpec, dict(block_size=8 * regions), launches=False)
    assert spec.page_size_bytes == regions * 256
    mean = assert_accepted(spec.allocate, dict(num_blocks=blocks, device=torch.get_default_device()), launches=False)
    assert summary_geometry(mean) == (regions * 256, 8 * regions)


@MUTATED
@given(data=st.data())
def test_summary_cache_spec_rejects_each_wrong_field(data):
    block_size = 8 * data.draw(st.integers(1, 16))
    spec_mutations = [
        Mutation("block_size", "not a multiple of 8",
                 lambda draw, a: draw(st.integers(1, 200).filter(lambda n: n % 8))),
        *scalar_mutations("block_size", "not positive", [0, -8, -16]),
        *scalar_mutations("block_size", "not an int", [True, 16.0, "16", None]),
        *scalar_mutations("tokens_per_state", "not 8", [4, 16, 8.0, None]),
        *scalar_mutations("head_size", "not 256", [128, 512, 256.0]),
        *scalar_mutations("num_kv_heads", "not 1", [0, 2, 1.0]),
        *scalar_mutations("dtype", "not uint8", [torch.int8, torch.float32, "uint8"]),
    ]
    assert_each_mutation_rejected(data.draw, Step5SummaryCacheSpec, dict(block_size=block_size), spec_mutations)
    allocate_mutations = [
        *scalar_mutations("num_blocks", "negative", [-1, -5]),
        *scalar_mutations("num_blocks", "not an int", [True, 2.0, "2", None]),
        *scalar_mutations("device", "not a device", ["not-a-device", 1.5, []]),
    ]
    spec = Step5SummaryCacheSpec(block_size=block_size)
    assert_each_mutation_rejected(data.draw, spec.allocate, dict(num_blocks=2, device=None), allocate_mutations)


# --- DeepSeek V4: save_partial_states ---------------------------------------------------------------

PDL_KWARGS = st.sampled_from([None, {}, {"launch_pdl": True}, {"launch_pdl": False}])
WRONG_PDL_KWARGS = [{"launch_pdll": True}, {"launch_pdl": True, "other": 1}, 5, [1], "launch_pdl"]


def pdl_mutations() -> list[Mutation]:
    """Not a dict of launch_pdl alone; or its value not a bool (bool("no") would ask for PDL), each tried."""
    return [*scalar_mutations("pdl_kwargs", "not {'launch_pdl': bool}", WRONG_PDL_KWARGS),
            *(Mutation("pdl_kwargs", f"launch_pdl={value!r}", lambda draw, a, value=value: {"launch_pdl": value})
              for value in ("no", 1, None))]


@st.composite
def save_args(draw) -> dict:
    ratio = draw(st.sampled_from(sorted(RATIOS)))
    head_size, tokens = draw(st.integers(1, 12)), draw(st.integers(1, 8))
    state_width = head_size + draw(st.integers(0, 4))
    block_size, blocks = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    state_cache, _ = strided_cache(blocks, block_size, state_width + head_size + draw(st.integers(0, 3)),
                                   extra_rows=draw(st.integers(0, 2)), extra_cols=draw(st.integers(0, 3)))
    if draw(st.booleans()):
        kv, score = projection_views(tokens, head_size, pad=draw(st.integers(0, 3)))
    else:
        kv, score = torch.randn(tokens, head_size), torch.randn(tokens, head_size)
    ape = padded(torch.randn(ratio, head_size + draw(st.integers(0, 2))), -1, draw(st.integers(0, 3)))
    return dict(
        kv=kv, score=score, ape=ape, positions=draw(index(draw(ints(tokens, 0, 300)))), state_cache=state_cache,
        slot_mapping=draw(index(draw(ints(tokens, -1, blocks * block_size - 1)))), block_size=block_size,
        state_width=state_width, compress_ratio=ratio, pdl_kwargs=draw(PDL_KWARGS),
    )


def save_mutations(args: dict) -> list[Mutation]:
    tokens, head_size = args["kv"].shape
    ratio, block_size, state_width = args["compress_ratio"], args["block_size"], args["state_width"]
    row = args["state_cache"].shape[2]
    return [
        *float_mutations("kv", args),
        Mutation("kv", "no columns", lambda draw, a: resized(a["kv"], 1, 0)),
        Mutation("kv", "another token count", lambda draw, a: resized(a["kv"], 0, draw(other_than(tokens, 0, 11))),
                 strict=False),  # against score
        Mutation("kv", "another width", lambda draw, a: resized(a["kv"], 1, draw(other_than(head_size, 1, 15))),
                 strict=False),
        *float_mutations("score", args),
        Mutation("score", "another token count",
                 lambda draw, a: resized(a["score"], 0, draw(other_than(tokens, 0, 11)))),
        Mutation("score", "another width",
                 lambda draw, a: resized(a["score"], 1, draw(other_than(head_size, 0, 15)))),
        *float_mutations("ape", args),
        Mutation("ape", "not compress_ratio rows", lambda draw, a: resized(a["ape"], 0, draw(other_than(ratio, 0, 9)))),
        Mutation("ape", "narrower than kv", lambda draw, a: resized(a["ape"], 1, draw(st.integers(0, head_size - 1)))),
        *index_mutations("positions", args),
        *index_mutations("slot_mapping", args),
        *float_mutations("state_cache", args, written=True),
        Mutation("state_cache", "dim 1 not block_size",
                 lambda draw, a: resized(a["state_cache"], 1, draw(other_than(block_size, 0, 10)))),
        Mutation("state_cache", "rows narrower than state_width + H",
                 lambda draw, a: resized(a["state_cache"], 2, draw(st.integers(0, state_width + head_size - 1)))),
        *scalar_mutations("block_size", "not positive", [0, -1, -4]),
        *scalar_mutations("block_size", "not an int", [True, float(block_size), str(block_size), None]),
        Mutation("block_size", "not the cache's dim 1", lambda draw, a: draw(other_than(block_size, 1, 10)),
                 strict=False),
        Mutation("state_width", "below kv's width", lambda draw, a: draw(st.integers(-2, head_size - 1))),
        *scalar_mutations("state_width", "not an int", [True, float(state_width), str(state_width), None]),
        Mutation("state_width", "too wide for the cache's rows",
                 lambda draw, a: draw(st.integers(row - head_size + 1, row + 5)), strict=False),
        *scalar_mutations("compress_ratio", "not 4 or 128", [8, 2, 0, float(ratio), str(ratio), None, True]),
        *pdl_mutations(),
    ]


@VALID
@given(args=save_args())
def test_save_partial_states_accepts_valid_inputs(args):
    assert_accepted(save_partial_states, args)


@MUTATED
@given(data=st.data())
def test_save_partial_states_rejects_each_wrong_argument(data):
    args = data.draw(save_args())
    assert_each_mutation_rejected(data.draw, save_partial_states, args, save_mutations(args))


# --- DeepSeek V4: compress_windows --------------------------------------------------------------------


@st.composite
def compress_args(draw) -> dict:
    ratio = draw(st.sampled_from(sorted(RATIOS)))
    head_dim, tokens, requests = draw(st.integers(1, 8)), draw(st.integers(1, 8)), draw(st.integers(1, 3))
    width = RATIOS[ratio].state_width(head_dim)
    block_size, blocks = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    positions = draw(ints(tokens, 0, 3 * ratio))
    max_blocks = max(positions) // block_size + 1 + draw(st.integers(0, 2))
    block_table = padded(torch.randint(0, blocks, (requests, max_blocks), dtype=torch.int32), 1,
                         draw(st.integers(0, 3)))  # rows may be strided
    state_cache, _ = strided_cache(blocks, block_size, 2 * width + draw(st.integers(0, 3)),
                                   extra_rows=draw(st.integers(0, 2)), extra_cols=draw(st.integers(0, 3)))
    out = padded(torch.zeros(tokens, head_dim + draw(st.integers(0, 2))), 1, draw(st.integers(0, 3)))
    return dict(
        state_cache=state_cache, block_table=block_table, positions=draw(index(positions)),
        req_indices=draw(index(draw(ints(tokens, 0, requests - 1)))), out=out, compress_ratio=ratio,
        head_dim=head_dim, block_size=block_size, pdl_kwargs=draw(PDL_KWARGS),
        max_position=draw(st.none() | st.integers(max(positions), max_blocks * block_size - 1)),
    )


def compress_mutations(args: dict) -> list[Mutation]:
    tokens, head_dim, block_size = args["positions"].shape[0], args["head_dim"], args["block_size"]
    width = RATIOS[args["compress_ratio"]].state_width(head_dim)
    row, max_blocks = args["state_cache"].shape[2], args["block_table"].shape[1]
    mutations = [
        *float_mutations("state_cache", args),
        Mutation("state_cache", "dim 1 not block_size",
                 lambda draw, a: resized(a["state_cache"], 1, draw(other_than(block_size, 0, 10)))),
        Mutation("state_cache", "rows narrower than 2W",
                 lambda draw, a: resized(a["state_cache"], 2, draw(st.integers(0, 2 * width - 1)))),
        *tensor_mutations("block_table", (torch.int32,)),
        *stride_mutations("block_table", args),
        *index_mutations("positions", args, length_strict=False),  # positions sets the token count
        *index_mutations("req_indices", args),
        *float_mutations("out", args, written=True),
        Mutation("out", "not one row per token", lambda draw, a: resized(a["out"], 0, draw(other_than(tokens, 0, 11)))),
        Mutation("out", "narrower than head_dim", lambda draw, a: resized(a["out"], 1, draw(st.integers(0, head_dim - 1)))),
        *scalar_mutations("compress_ratio", "not 4 or 128", [8, 2, 0, 4.0, "4", None, True]),
        *scalar_mutations("head_dim", "not a positive int", [0, -1, True, float(head_dim), str(head_dim), None]),
        Mutation("head_dim", "too wide for the cache's rows", lambda draw, a: row, strict=False),
        *scalar_mutations("block_size", "not a positive int", [0, -2, True, float(block_size), None]),
        Mutation("block_size", "not the cache's dim 1", lambda draw, a: draw(other_than(block_size, 1, 10)),
                 strict=False),
        *pdl_mutations(),
        *scalar_mutations("max_position", "negative or not an int", [-1, -100, 10.0, "10", True]),
        Mutation("max_position", "beyond the block table",
                 lambda draw, a: draw(st.integers(max_blocks * block_size, max_blocks * block_size + 50)),
                 strict=False),
    ]
    if max_blocks > 1:
        mutations.append(Mutation("block_table", "column stride 2", lambda draw, a: spread(a["block_table"], 1)))
    return mutations


@VALID
@given(args=compress_args())
def test_compress_windows_accepts_valid_inputs(args):
    assert_accepted(compress_windows, args)


@MUTATED
@given(data=st.data())
def test_compress_windows_rejects_each_wrong_argument(data):
    args = data.draw(compress_args())
    assert_each_mutation_rejected(data.draw, compress_windows, args, compress_mutations(args))


# --- DeepSeek V4: decode_step ------------------------------------------------------------------------


@st.composite
def decode_step_args(draw) -> dict:
    """A decode batch: a request per token, each with blocks of its own (so no token stores
    a row another one's window reads); padding tokens store nothing but may close windows."""
    ratio = draw(st.sampled_from(sorted(RATIOS)))
    head_dim, tokens = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    width = RATIOS[ratio].state_width(head_dim)
    block_size = draw(st.integers(1, 8))
    positions = draw(ints(tokens, 0, 3 * ratio))
    max_blocks = max(positions) // block_size + 1 + draw(st.integers(0, 2))
    requests = draw(st.permutations(range(tokens)))
    table = torch.randperm(tokens * max_blocks, dtype=torch.int32).view(tokens, max_blocks)
    slots = [int(table[r, p // block_size]) * block_size + p % block_size if draw(st.integers(0, 3)) else -1
             for p, r in zip(positions, requests)]
    state_cache, _ = strided_cache(tokens * max_blocks, block_size, 2 * width + draw(st.integers(0, 3)),
                                   extra_rows=draw(st.integers(0, 2)), extra_cols=draw(st.integers(0, 3)))
    if draw(st.booleans()):
        kv, score = projection_views(tokens, width, pad=draw(st.integers(0, 3)))
    else:
        kv, score = torch.randn(tokens, width), torch.randn(tokens, width)
    ape = padded(torch.randn(ratio, width + draw(st.integers(0, 2))), -1, draw(st.integers(0, 3)))
    return dict(
        kv=kv, score=score, ape=ape, positions=draw(index(positions)), state_cache=state_cache,
        slot_mapping=draw(index(slots)), block_table=padded(table, 1, draw(st.integers(0, 3))),
        req_indices=draw(index(list(requests))),
        out=padded(torch.zeros(tokens, head_dim + draw(st.integers(0, 2))), 1, draw(st.integers(0, 3))),
        compress_ratio=ratio, head_dim=head_dim, block_size=block_size, state_width=width, pdl_kwargs=draw(PDL_KWARGS),
        max_position=draw(st.none() | st.integers(max(positions), max_blocks * block_size - 1)),
    )


def decode_step_mutations(args: dict) -> list[Mutation]:
    """The store's table and the compressor's for the arguments the store does not take;
    and ``state_width`` other than the compressor's ``W``."""
    width, row = args["state_width"], args["state_cache"].shape[2]
    compress_only = {"block_table", "req_indices", "out", "head_dim", "max_position"}
    return [
        *save_mutations(args),
        *[mutation for mutation in compress_mutations(args) if mutation.argument in compress_only],
        Mutation("state_width", "wider than W", lambda draw, a: draw(st.integers(width + 1, row + 3)), strict=False),
    ]


@VALID
@given(args=decode_step_args())
def test_decode_step_accepts_valid_inputs(args):
    assert_accepted(decode_step, args)


@MUTATED
@given(data=st.data())
def test_decode_step_rejects_each_wrong_argument(data):
    args = data.draw(decode_step_args())
    assert_each_mutation_rejected(data.draw, decode_step, args, decode_step_mutations(args))


# --- jitkern.examples.axpy ----------------------------------------------------------------------------

AXPY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@st.composite
def axpy_args(draw) -> dict:
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    dtype = draw(st.sampled_from(AXPY_DTYPES))
    x, y = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    out = draw(st.sampled_from([None, torch.empty(shape, dtype=dtype)]))
    alpha = draw(st.floats(-10, 10, allow_nan=False) | st.integers(-3, 3))
    return dict(x=x, y=y, alpha=alpha, out=out)


def axpy_mutations(args: dict) -> list[Mutation]:
    """x sets dtype, shape and device: changing x's is relational (y and out then disagree)."""
    x = args["x"]
    other_shape = st.sampled_from(["more", "fewer", "size"])

    def reshaped(draw, tensor):
        how = draw(other_shape)
        if how == "more":
            return tensor.unsqueeze(0)
        if how == "fewer" and tensor.dim() > 1:
            return tensor[0]
        return resized(tensor, 0, tensor.shape[0] + 1)

    def like(a, name):
        return a[name] if a[name] is not None else torch.empty_like(a["x"])

    mutations = [
        Mutation("x", "unsupported dtype",
                 lambda draw, a: a["x"].to(draw(st.sampled_from([d for d in ALL_DTYPES if d not in AXPY_DTYPES])))),
        Mutation("x", "another supported dtype",
                 lambda draw, a: a["x"].to(draw(st.sampled_from([d for d in AXPY_DTYPES if d != x.dtype]))),
                 strict=False),
        Mutation("x", "another shape", lambda draw, a: reshaped(draw, a["x"]), strict=False),
        Mutation("x", "on another device", lambda draw, a: a["x"].to(other_device()), strict=False),
        *scalar_mutations("x", "not a tensor", NOT_TENSORS),
        *scalar_mutations("alpha", "not a real number", [None, "2", True, torch.tensor(2.0), 1j]),
    ]
    for name in ("y", "out"):
        mutations += [
            Mutation(name, "another dtype",
                     lambda draw, a, n=name: like(a, n).to(draw(st.sampled_from([d for d in ALL_DTYPES
                                                                                 if d != x.dtype])))),
            Mutation(name, "another shape", lambda draw, a, n=name: reshaped(draw, like(a, n))),
            Mutation(name, "on another device", lambda draw, a, n=name: like(a, n).to(other_device())),
            *scalar_mutations(name, "not a tensor", [v for v in NOT_TENSORS if name == "y" or v is not None]),
        ]
    if max(x.shape) > 1:
        dim = [size > 1 for size in x.shape].index(True)
        for name in ("x", "y", "out"):
            mutations.append(Mutation(name, "not contiguous", lambda draw, a, n=name: spread(like(a, n), dim)))
    return mutations


@VALID
@given(args=axpy_args())
def test_axpy_accepts_valid_inputs(args):
    assert_accepted(axpy, args)


@MUTATED
@given(data=st.data())
def test_axpy_rejects_each_wrong_argument(data):
    args = data.draw(axpy_args())
    assert_each_mutation_rejected(data.draw, axpy, args, axpy_mutations(args))
