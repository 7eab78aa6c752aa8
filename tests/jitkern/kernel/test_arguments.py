"""A public function's arguments declared once (``jitkern.kernel.arguments``): each check
passes what it should, and each failure is one ValueError naming the argument."""

from __future__ import annotations

import os
import random
import re

import numpy as np
import pytest
import torch

from jitkern import Arg, Arguments, Within

ROWS = Arguments(
    x=Arg("tokens width", (torch.float16, torch.bfloat16), strides="_ 1"),
    y=Arg("tokens width", "x"),
    index=Arg("tokens", (torch.int32, torch.int64), contiguous=True),
    table=Arg("_ rows 16", torch.uint8, strides="_ 16 1"),
    out=Arg("tokens width", "x", written=True, optional=True),
    count=int,
    blocks=range(1, 8),
    sizes=dict(tokens=range(1000), width=range(1, 2**31)),
)


def _call(tokens=None, width=None, dtype=torch.bfloat16):
    tokens = random.randint(2, 30) if tokens is None else tokens
    width = random.randint(3, 40) if width is None else width  # x[:, ::2] keeps two columns: a stride to refuse
    return dict(x=torch.randn(tokens, width + 3).to(dtype)[:, :width], y=torch.randn(tokens, width).to(dtype),
                index=torch.randint(0, 9, (tokens,)), table=torch.zeros(random.randint(1, 5), 4, 16, dtype=torch.uint8),
                out=None, count=random.randint(0, 9), blocks=random.randint(1, 7))


def test_a_good_call_binds_the_sizes_and_the_device():
    call = _call()
    checked = ROWS.check(call)
    assert (checked.tokens, checked.width, checked.device) == (*call["y"].shape, call["y"].device)
    ROWS.check(dict(call, out=torch.empty_like(call["y"])))  # an optional tensor given
    one_row = torch.zeros(3, 1, 16, dtype=torch.uint8).as_strided((3, 1, 16), (16, 99, 1))
    assert ROWS.check(dict(call, table=one_row)).rows == 1  # a dimension of size 1: any stride


WRONG = [  # (argument named, what makes it wrong, the error's words)
    ("x", lambda c: dict(x=c["x"].float()), "expected float16 or bfloat16 [tokens, width]"),
    ("x", lambda c: dict(x=c["x"][None]), "expected float16 or bfloat16 [tokens, width]"),
    ("x", lambda c: dict(x=[1, 2]), "got list"),
    ("x", lambda c: dict(x=c["x"][:, ::2]), "expected (_, 1)"),
    ("x", lambda c: dict(x=torch.zeros(1000, 4, dtype=torch.bfloat16)), "tokens = 1000 (dim 0); expected in [0, 1000)"),
    ("y", lambda c: dict(y=c["y"][:-1]), "but x has tokens ="),
    ("y", lambda c: dict(y=c["y"].half()), "expected bfloat16 (x's dtype) [tokens, width]"),
    ("index", lambda c: dict(index=torch.cat([c["index"], c["index"]])[::2]), "must be contiguous"),
    ("index", lambda c: dict(index=c["index"].float()), "expected int32 or int64 [tokens]"),
    ("table", lambda c: dict(table=torch.zeros(2, 4, 32, dtype=torch.uint8)[:, :, :16]), "strides (128, 32, 1)"),
    ("table", lambda c: dict(table=torch.zeros(2, 5, 15, dtype=torch.uint8)), "expected uint8 [_, rows, 16]"),
    ("table", lambda c: dict(table=c["table"][:1].as_strided((1, 4, 16), (2**31, 16, 1))), "must be below 2**31"),
    ("out", lambda c: dict(out=c["y"][:1].expand_as(c["y"])), "rows overlap in memory"),
    ("out", lambda c: dict(out=c["y"].to("meta")), "on meta, expected"),
    ("count", lambda c: dict(count=2.0), "expected an int, got float"),
    ("count", lambda c: dict(count=True), "expected an int, got bool"),
    ("blocks", lambda c: dict(blocks=0), "expected an int in [1, 8), got 0"),
]


@pytest.mark.parametrize("name, wrong, words", WRONG, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(WRONG)])
def test_each_failure_names_its_argument(name, wrong, words):
    call = _call()
    with pytest.raises(ValueError) as refused:
        ROWS.check(dict(call, **wrong(call)))
    assert str(refused.value).startswith(f"{name}: ") and words in str(refused.value), str(refused.value)


def test_the_first_argument_naming_a_size_binds_it():
    call = _call(tokens=5)
    with pytest.raises(ValueError, match=r"^index: tokens = 4 \(dim 0\), but x has tokens = 5$"):
        ROWS.check(dict(call, index=call["index"][:4]))


def test_a_dimension_named_as_an_int_argument_is_its_value_in_either_order():
    before = Arguments(block_size=range(1, 64), cache=Arg("blocks block_size 8", torch.float32))
    after = Arguments(cache=Arg("blocks block_size 8", torch.float32), block_size=int)
    cache = torch.zeros(3, 4, 8)
    assert before.check(dict(cache=cache, block_size=4)).block_size == 4
    assert after.check(dict(cache=cache, block_size=4)).blocks == 3
    with pytest.raises(ValueError, match=r"^cache: dim 1 is 4, expected block_size=2$"):
        before.check(dict(cache=cache, block_size=2))
    with pytest.raises(ValueError, match=r"^block_size: 2, but cache has block_size = 4$"):
        after.check(dict(cache=cache, block_size=2))


def test_a_float_argument_takes_any_real_number_but_a_bool():
    declared = Arguments(eps=float)
    for eps in (1e-6, 0, np.float32(0.5)):
        declared.check(dict(eps=eps))
    for eps, said in ((True, "bool"), ("1e-6", "str"), (None, "NoneType")):
        with pytest.raises(ValueError, match=f"^eps: expected a float, got {said}$"):
            declared.check(dict(eps=eps))


def test_a_bool_argument_takes_a_bool_alone():
    declared = Arguments(renormalize=bool)
    for value in (True, False):
        declared.check(dict(renormalize=value))
    for value, said in ((1, "int"), (0.0, "float"), ("yes", "str"), (None, "NoneType")):
        with pytest.raises(ValueError, match=f"^renormalize: expected a bool, got {said}$"):
            declared.check(dict(renormalize=value))


def test_declarations_that_cannot_work_are_refused_where_made():
    with pytest.raises(TypeError, match="^Arguments: x is 3; expected an Arg, int, a range of ints, float or bool$"):
        Arguments(x=3)
    with pytest.raises(ValueError, match="do not match shape"):
        Arg("a b", torch.float32, strides="_")
    with pytest.raises(TypeError, match="^Arg: values 3 is not a Within$"):
        Arg("a", torch.int32, values=3)
    with pytest.raises(TypeError, match="^Within: bound 1.5 is not an int"):
        Within(0, 1.5)
    with pytest.raises(ValueError, match="^Arguments: i's values are bounded by 'rowz', which no argument names$"):
        Arguments(i=Arg("n", torch.int32, values=Within(0, "rowz")), t=Arg("rows", torch.int32))
    with pytest.raises(ValueError, match="^Arguments: i's values are checked where 'j' is not padding, but it is no "):
        Arguments(i=Arg("n", torch.int32, values=Within(0, where="j")), j=Arg("n", torch.int32, values=Within(0)))


INDEX = (torch.int32, torch.int64)
INDEXED = Arguments(table=Arg("rows 4", torch.float32), capacity=int,
                    slots=Arg("n", INDEX, values=Within(0, "rows", padding=-1)),
                    base=Arg("n", INDEX, values=Within(0, lambda s: s.rows - s.capacity + 1, padding=-1,
                                                       note="{capacity} rows from a base fit the table's {rows}")),
                    positions=Arg("n", INDEX, values=Within(0, where="slots")),
                    starts=Arg("_", INDEX, values=Within(0, lambda s: s.n + 1, ascending=True)))


def _indexed(n: int, rows: int, capacity: int) -> dict:
    slots = torch.randint(0, rows, (n,))
    slots[torch.rand(n) < 0.3] = -1
    return dict(table=torch.zeros(rows, 4), capacity=capacity, slots=slots,
                base=torch.randint(0, rows - capacity + 1, (n,)), positions=torch.randint(0, 99, (n,)),
                starts=torch.randint(0, n + 1, (random.randint(1, 6),)).sort().values)


HOST_ONLY = pytest.mark.skipif(os.environ.get("JITKERN_TEST_MODE") == "gpu",
                               reason="values are read on host memory only (the interpreter), never on a GPU")


@HOST_ONLY
def test_index_values_are_checked_against_their_declared_ranges_on_the_host():
    """Each bad value is refused with its position and range; padding and the entries
    ``where`` skips pass; bounds are ints, size names or functions of the sizes."""
    n, rows, capacity = random.randint(2, 20), random.randint(8, 40), random.randint(1, 8)
    good = _indexed(n, rows, capacity)
    INDEXED.check(good)
    at = random.randrange(n)
    for name, value, message in (
            ("slots", rows, f"slots: slots[{at}] = {rows}; expected -1 (padding) or in [0, {rows})"),
            ("slots", -2, f"slots: slots[{at}] = -2; expected -1 (padding) or in [0, {rows})"),
            ("base", rows - capacity + 1, f"base: base[{at}] = {rows - capacity + 1}; expected -1 (padding) or in "
                                          f"[0, {rows - capacity + 1}) ({capacity} rows from a base fit the table's {rows})"),
            ("positions", -5, f"positions: positions[{at}] = -5; expected >= 0")):
        bad = {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in good.items()}
        bad[name][at] = value
        if name == "positions":
            bad["slots"][at] = 0  # a token with a slot: its position is read
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            INDEXED.check(bad)
    skipped = dict(good, slots=good["slots"].clone(), positions=good["positions"].clone())
    skipped["slots"][at], skipped["positions"][at] = -1, -5  # a padding token's position is not read
    INDEXED.check(skipped)
    starts = torch.tensor([0, 2, 1])
    with pytest.raises(ValueError, match=r"^starts: starts\[2\] = 1 is less than starts\[1\] = 2; expected "
                                         "non-decreasing values$"):
        INDEXED.check(dict(good, starts=starts))


def _table_holds_capacity(call, checked):
    if checked.rows < call["capacity"]:
        raise ValueError(f"table: {checked.rows} rows cannot hold capacity {call['capacity']}")


@HOST_ONLY
def test_relations_run_after_the_shapes_and_before_the_index_values():
    """A relation no shape states blames the argument it is about, not an index whose
    bound (rows - capacity + 1) the relation's failure made empty."""
    related = Arguments(**INDEXED.arguments, sizes=INDEXED.sizes, relations=_table_holds_capacity)
    n, rows = random.randint(2, 20), random.randint(8, 40)
    good = _indexed(n, rows, capacity=1)
    assert related.check(good).rows == rows
    with pytest.raises(ValueError, match=f"^table: {rows} rows cannot hold capacity {rows + 1}$"):
        related.check(dict(good, capacity=rows + 1))  # every base is out of range too
    with pytest.raises(ValueError, match="^table: expected float32"):
        related.check(dict(good, table=torch.zeros(rows, 4).half(), capacity=rows + 1))  # shapes first


@HOST_ONLY
def test_index_values_are_not_read_where_kernels_do_not_run_on_host_memory(monkeypatch):
    """Compiled kernels (no interpreter): reading a GPU tensor's values would synchronise."""
    bad = dict(_indexed(4, 8, 2), slots=torch.full((4,), 99))
    with pytest.raises(ValueError, match="^slots:"):
        INDEXED.check(bad)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    INDEXED.check(bad)


def test_a_whole_shape_of_any_rank_binds_as_one():
    same = Arguments(x=Arg("*shape", torch.float32), y=Arg("*shape", "x", contiguous=True))
    for rank in range(4):
        shape = tuple(random.randint(1, 5) for _ in range(rank))
        assert same.check(dict(x=torch.randn(shape), y=torch.randn(shape))).shape == shape
    with pytest.raises(ValueError, match=r"^y: shape = \(2, 3\), but x has shape = \(3, 2\)$"):
        same.check(dict(x=torch.randn(3, 2), y=torch.randn(2, 3)))
    with pytest.raises(ValueError, match=r"^x: expected float32 \[\*shape\], got float16"):
        same.check(dict(x=torch.randn(3).half(), y=torch.randn(3)))
