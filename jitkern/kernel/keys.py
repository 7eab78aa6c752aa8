"""Enumerating compile keys: products of config values, rows that vary together.

Each helper yields rows (dicts of keyword arguments); ``unique_keys`` turns rows into
keys through a kernel's ``dispatch``, drops rows a condition rejects, and removes
duplicate keys keeping the first order seen.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator


def product(**axes: Iterable[Any]) -> list[dict[str, Any]]:
    """Every combination of the axes' values: ``product(a=[1, 2], b=[3])``."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(list(axes[n]) for n in names))]


def zipped(**columns: Iterable[Any]) -> list[dict[str, Any]]:
    """Rows whose values vary together: ``zipped(head=[64, 128], stride=[128, 256])``."""
    lists = {name: list(values) for name, values in columns.items()}
    lengths = {len(values) for values in lists.values()}
    if len(lengths) > 1:
        raise ValueError(f"zipped columns differ in length: { {n: len(v) for n, v in lists.items()} }")
    names = list(lists)
    return [dict(zip(names, row)) for row in zip(*lists.values())]


def combine(*row_sets: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The product of several row sets, each row the union of one row from each."""
    rows: list[dict[str, Any]] = [{}]
    for row_set in row_sets:
        row_set = list(row_set)
        rows = [{**left, **right} for left in rows for right in row_set]
    return rows


def unique_keys(
    make_key: Callable[..., Any],
    rows: Iterable[dict[str, Any]],
    where: Callable[[dict[str, Any]], bool] | None = None,
) -> list[Any]:
    """``make_key(**row)`` for each row ``where`` accepts, duplicates dropped, order kept."""
    return list(dict.fromkeys(_keys(make_key, rows, where)))


def _keys(make_key, rows, where) -> Iterator[Any]:
    for row in rows:
        if where is None or where(row):
            yield make_key(**row)
