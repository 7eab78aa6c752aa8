"""jitkern.kernel.grid: the launchers' host arithmetic gives Triton's answers."""

import random

import pytest
import triton

from jitkern import cdiv, next_power_of_2


def test_cdiv_and_next_power_of_2_agree_with_triton():
    draw = random.Random()
    values = [1, 2, 3, 15, 16, 17, 255, 256, 257, 2**31 - 1, 2**31, 2**40 + 3,
              *(draw.randrange(1, 2**34) for _ in range(500))]
    for n in values:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for block in (1, 2, 7, 8, 128, 256, draw.randrange(1, 5000)):
            assert cdiv(n, block) == triton.cdiv(n, block), (n, block)
    assert cdiv(0, 256) == triton.cdiv(0, 256) == 0


@pytest.mark.parametrize("n", [0, -1, -16])
def test_next_power_of_2_refuses_what_is_not_positive(n):
    with pytest.raises(ValueError, match="positive"):
        next_power_of_2(n)
