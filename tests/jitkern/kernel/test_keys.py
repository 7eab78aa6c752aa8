from dataclasses import dataclass

import pytest

from jitkern import keys


@dataclass(frozen=True)
class Key:
    a: int
    b: str


def test_product_is_every_combination_in_order():
    assert keys.product(a=[1, 2], b=["x", "y"]) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"},
    ]


def test_zipped_rows_vary_together_and_lengths_must_match():
    assert keys.zipped(a=[1, 2], b=["x", "y"]) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    with pytest.raises(ValueError, match="length"):
        keys.zipped(a=[1, 2], b=["x"])


def test_combine_merges_row_sets():
    rows = keys.combine(keys.product(a=[1, 2]), keys.zipped(b=["x", "y"]))
    assert rows == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_unique_keys_drops_rejected_rows_and_duplicates_keeping_order():
    rows = keys.product(a=[3, 1, 3, 2], b=["x"])
    assert keys.unique_keys(Key, rows) == [Key(3, "x"), Key(1, "x"), Key(2, "x")]
    assert keys.unique_keys(Key, rows, where=lambda row: row["a"] != 1) == [Key(3, "x"), Key(2, "x")]
