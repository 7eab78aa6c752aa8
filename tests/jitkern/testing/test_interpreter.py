"""``quick_interpreter()``: Triton's interpreter reducing with a kernel's combine function
over whole blocks gives what the reduction means, for tuples of operands (a commutative
and a non-commutative combine), each axis, ``keep_dims``, a whole block, and a combine
function that needs scalars (which takes the interpreter's own loop); with the builtins
listed once, nested ``@triton.jit`` calls run and the language is whole after a launch."""

import os

import pytest
import torch
import triton
import triton.language as tl

from jitkern.testing import quick_interpreter

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="tests Triton's interpreter")


@triton.jit
def max_and_count(a_max, a_count, b_max, b_count):
    return tl.maximum(a_max, b_max), a_count + b_count


@triton.jit
def first_largest(a_value, a_index, b_value, b_index):
    """(value, index) of the larger; of equal values, the first: not commutative."""
    take_b = b_value > a_value
    return tl.where(take_b, b_value, a_value), tl.where(take_b, b_index, a_index)


@triton.jit
def larger_by_branch(a, b):
    if a > b:  # Python control flow: runs on scalars only
        return a
    return b


@triton.jit
def reduce_rows(X, Counts, Max, Sum, Arg, ROWS: tl.constexpr, COLS: tl.constexpr, AXIS: tl.constexpr):
    """Reduce a [ROWS, COLS] block along AXIS (-1: all of it, kept as [1, 1])."""
    offsets = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    x, counts = tl.load(X + offsets), tl.load(Counts + offsets)
    if AXIS == -1:
        largest, total = tl.reduce((x, counts), None, max_and_count, keep_dims=True)
        value, index = tl.reduce((x, offsets), None, first_largest, keep_dims=True)
        tl.store(Max + tl.arange(0, 1)[:, None], largest)
        tl.store(Sum + tl.arange(0, 1)[:, None], total)
        tl.store(Arg + tl.arange(0, 1)[:, None], index)
    else:
        largest, total = tl.reduce((x, counts), AXIS, max_and_count)
        value, index = tl.reduce((x, offsets), AXIS, first_largest)
        lanes = tl.arange(0, COLS) if AXIS == 0 else tl.arange(0, ROWS)
        tl.store(Max + lanes, largest)
        tl.store(Sum + lanes, total)
        tl.store(Arg + lanes, index)


@triton.jit
def reduce_by_branch(X, Out, N: tl.constexpr):
    tl.store(Out, tl.reduce(tl.load(X + tl.arange(0, N)), 0, larger_by_branch))


@triton.jit
def add_then_max(X, Out, N: tl.constexpr):
    """Calls a @triton.jit function (the interpreter patches the builtins at each call)."""
    x = tl.load(X + tl.arange(0, N))
    tl.store(Out, tl.max(plus_one(x), 0))


@triton.jit
def plus_one(x):
    return x + 1.0


@pytest.mark.parametrize("rows, cols, axis", [(1, 8, 1), (4, 16, 1), (4, 16, 0), (2, 4, -1), (1, 1, 0)])
def test_tuple_combines_reduce_as_meant(rows, cols, axis):
    x = torch.randint(-4, 4, (rows, cols)).float()  # ties, for first_largest
    x.view(-1)[torch.randint(x.numel(), ())] = float("-inf")
    counts = torch.randint(0, 100, (rows, cols), dtype=torch.int32)
    lanes = 1 if axis == -1 else (cols if axis == 0 else rows)
    largest, total, index = torch.full((lanes,), 7.5), torch.full((lanes,), -7, dtype=torch.int32), \
        torch.full((lanes,), -7, dtype=torch.int32)
    reduce_rows[(1,)](x, counts, largest, total, index, rows, cols, axis)
    flat = (x.reshape(1, -1), counts.reshape(1, -1)) if axis == -1 else (x, counts)
    along = 1 if axis == -1 else axis
    expected_index = flat[0].argmax(along).int()  # the first of equal largest values
    if axis == 1:
        expected_index += torch.arange(rows, dtype=torch.int32) * cols
    elif axis == 0:
        expected_index = expected_index * cols + torch.arange(cols, dtype=torch.int32)
    assert torch.equal(largest, flat[0].amax(along))
    assert torch.equal(total, flat[1].sum(along, dtype=torch.int32))
    assert torch.equal(index, expected_index)


def test_a_combine_that_needs_scalars_takes_the_interpreters_loop():
    x, out = torch.randn(8), torch.full((1,), 7.5)
    reduce_by_branch[(1,)](x, out, 8)
    assert out.item() == x.max().item()


def test_the_language_is_whole_after_a_launch_and_the_interpreter_after_the_block():
    from triton.runtime import interpreter

    def replaced():
        return (interpreter.ReduceOps.generic_reduce, interpreter._patch_builtin, interpreter._patch_lang,
                interpreter._get_np_dtype)

    before = replaced()
    with quick_interpreter():
        assert all(now is not then for now, then in zip(replaced(), before))
        x, out = torch.randn(8), torch.full((1,), 7.5)
        with pytest.raises(Exception):  # a launch that fails restores the language too
            add_then_max[(1,)](x, out, "eight")
        for _ in range(2):  # the second launch patches again what the first restored
            add_then_max[(1,)](x, out, 8)
            assert out.item() == (x + 1).max().item()
        # as after the interpreter's own launch (which leaves tl.core's names patched by a nested call)
        assert all(tl.core.is_builtin(member) for member in (tl.maximum, tl.load, tl.tensor.__add__, tl.math.exp))
    assert replaced() == before
