"""Host cost of calling a public function through a torch op, by the way the op is made.

    python benchmarks/bench_ops.py [--calls 20000] [--repeats 15]

Each way calls a body that does nothing, with the arguments of Step5's ``update_decode``
(seven tensors, two of them written, and an int), so that only the way's own cost shows:

- ``python``: the body called as a function (the floor);
- ``is_compiling``: ``torch.compiler.is_compiling()`` tested first, the cost every eager
  call of a public function would pay to route itself to its op under ``torch.compile``
  (jitkern routes through Dynamo's ``_torchdynamo_inline`` instead, at no cost);
- ``by hand``: an op defined with ``torch.library.Library.define`` and a Python
  implementation for every device (``CompositeExplicitAutograd``): jitkern's ops;
- ``custom_op``: ``torch.library.custom_op``;
- ``triton_op``: ``torch.library.triton_op``, a ``custom_op`` whose body Inductor may trace
  (jitkern cannot use it: Inductor would launch the kernel with Triton's own JIT).

Inside a compiled graph Inductor's wrapper calls the op as ``by hand`` does here. Each
figure is the best over ``--repeats`` of the mean of ``--calls`` calls, the ways taking turns.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import torch

def body(key: torch.Tensor, z: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, ring_base: torch.Tensor,
         mean: torch.Tensor, ring: torch.Tensor, capacity: int) -> None:
    """What the op calls: nothing, so that the figures are the ways' own costs."""


def ways() -> tuple[torch.library.Library, dict[str, Callable[..., None]]]:
    """Each way, as a callable of the arguments (and the library holding the op by hand)."""
    library = torch.library.Library("jitkern_bench", "FRAGMENT")
    library.define("by_hand(Tensor key, Tensor z, Tensor slots, Tensor positions, Tensor ring_base, Tensor(a!) mean, "
                   "Tensor(b!) ring, int capacity) -> ()")
    library.impl("by_hand", body, "CompositeExplicitAutograd")
    custom = torch.library.custom_op("jitkern_bench::custom", body, mutates_args=("mean", "ring"))
    triton = torch.library.triton_op("jitkern_bench::triton", body, mutates_args=("mean", "ring"))
    is_compiling = torch.compiler.is_compiling

    def routed(*args):
        if is_compiling():
            raise AssertionError("not compiling here")
        return body(*args)

    return library, {"python": body, "is_compiling": routed, "by hand": torch.ops.jitkern_bench.by_hand.default,
                     "custom_op": custom, "triton_op": triton}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows = torch.zeros(64, 1, 256, dtype=torch.bfloat16)
    index = torch.zeros(64, dtype=torch.int64)
    arguments = (rows, rows, index, index, index.int(), torch.zeros(16, 32, 256, dtype=torch.uint8),
                 torch.zeros(64, 512, dtype=torch.bfloat16), 16)
    _library, callables = ways()
    taken: dict[str, list[float]] = {name: [] for name in callables}
    for _ in range(args.repeats):
        for name, way in callables.items():
            taken[name].append(timeit.timeit(lambda way=way: way(*arguments), number=args.calls) / args.calls * 1e6)
    floor = min(taken["python"])
    print(f"{'way':14} {'us a call':>10} {'over python us':>15}")
    for name, samples in taken.items():
        print(f"{name:14} {min(samples):10.3f} {min(samples) - floor:15.3f}")


if __name__ == "__main__":
    main()
