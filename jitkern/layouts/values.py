"""Value domains: the values a deployment passes for one integer (a stride, a size).

A manifest may say an integer's values (``"z.0": [600]``) or range (``{"min": 1, "max":
512}``, ``{"multiple_of": 16}``) instead of "any" (``strided``). jitkern warms exactly the
classes Triton gives those values (1, a multiple of 16, other; i32 or i64): a witness of
each class the domain holds is specialised by Triton's own specialiser, so no rule of
Triton's is mirrored here beyond which values can tell the classes apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)


class EmptyDomain(ValueError):
    """A value domain no integer is in."""


@dataclass(frozen=True)
class ValueDomain:
    """The integers ``values`` (when given), else those in ``[low, high]`` that are multiples
    of ``multiple_of`` (a bound None: as far as the integer's type goes)."""

    values: tuple[int, ...] = ()
    low: int | None = None
    high: int | None = None
    multiple_of: int = 1

    def __post_init__(self):
        if self.multiple_of < 1:
            raise EmptyDomain(f"multiple_of must be at least 1, got {self.multiple_of}")
        if not self.values and self.low is not None and self.high is not None and self.low > self.high:
            raise EmptyDomain(f"min {self.low} is above max {self.high}")

    def __contains__(self, value: int) -> bool:
        if self.values:
            return value in self.values
        return ((self.low is None or value >= self.low) and (self.high is None or value <= self.high)
                and value % self.multiple_of == 0)

    def bounds(self) -> tuple[int | None, int | None]:
        """The lowest and highest value the domain holds (None: no bound given)."""
        if self.values:
            return min(self.values), max(self.values)
        return self.low, self.high

    def describe(self) -> str:
        if self.values:
            return f"[{', '.join(map(str, self.values))}]"
        parts = [f"{'' if self.low is None else self.low}..{'' if self.high is None else self.high}"]
        if self.multiple_of > 1:
            parts.append(f"multiples of {self.multiple_of}")
        return "{" + ", ".join(parts) + "}"

    def witnesses(self, large: bool) -> list[int]:
        """A value of each Triton class the domain holds: 1; the first multiple of 16; the first
        value that is neither; each within i32, and beyond it when ``large``. ``EmptyDomain``
        when there is none."""
        if self.values:
            return list(dict.fromkeys(self.values))
        spans = [I32] + ([(I64[0], I32[0] - 1), (I32[1] + 1, I64[1])] if large else [])
        found = []
        for low, high in spans:
            low = max(low, self.low) if self.low is not None else low
            high = min(high, self.high) if self.high is not None else high
            if low > high:
                continue
            if low <= 1 <= high and 1 % self.multiple_of == 0:
                found.append(1)
            sixteen = _first_multiple(low, math.lcm(16, self.multiple_of))
            if sixteen <= high:
                found.append(sixteen)
            other = next((v for v in (_first_multiple(low, self.multiple_of) + i * self.multiple_of for i in range(17))
                          if v <= high and v % 16 and v != 1), None)
            if other is not None:
                found.append(other)
        if not found:
            raise EmptyDomain(f"no integer is in {self.describe()}" + ("" if large else " below 2**31"))
        return found


def _first_multiple(low: int, step: int) -> int:
    return -(-low // step) * step


def domain_of(document: Any) -> ValueDomain:
    """A manifest's value domain: a list of integers, or ``{"min", "max", "multiple_of"}``."""
    if isinstance(document, list):
        if not document:
            raise EmptyDomain("an empty list of values")
        return ValueDomain(values=tuple(document))
    return ValueDomain(low=document.get("min"), high=document.get("max"), multiple_of=document.get("multiple_of", 1))
