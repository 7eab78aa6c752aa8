"""Compiled code, read without a GPU: how each window tile's reductions are laid out.

The interpreter sums a column's rows its own way (NumPy), so it cannot tell whether the
fused decode step sums them in the compressor's order; the GPU does it as the tile's
layout says. Every layout of a reduction over a tile's rows is read here from Triton's
TTGIR, as the rows' share of registers, lanes and warps: two kernels whose window tiles
reduce with the same shares sum each column's rows in the same order (registers first,
in row order, then the lanes, then the warps), whatever the columns.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

_ALIAS = re.compile(r"^(#[\w.]+) = (#ttg\.\w+<.*>)\s*$")
_BLOCKED = re.compile(r"#ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
                      r"warpsPerCTA = \[([\d, ]+)\], order = \[([\d, ]+)\]")
_REDUCE = re.compile(r'"tt\.reduce"\(.*<\{axis = (\d+) : i32\}>')
_COMBINE = re.compile(r"arith\.(\w+) %")
_TYPE = re.compile(r"^\s*\}\) : \(tensor<([\dx]+)x(\w+), (#[\w.]+(?:<\{.*?\}>)?)>\)")


@dataclasses.dataclass(frozen=True)
class RowReduction:
    """A reduction over dim 0 of a 2-D float tile: its combine op, its number of rows and
    how the rows are spread (per thread, over a warp's lanes, over warps)."""

    op: str
    rows: int
    per_thread: int
    lanes: int
    warps: int


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def row_reductions(ttgir: str) -> list[RowReduction]:
    """Every reduction over dim 0 of a 2-D float tensor in ``ttgir``, in program order.
    A tile laid out other than ``#ttg.blocked`` with row-major order is an error here."""
    aliases = {}
    found = []
    axis = combine = None
    for line in ttgir.splitlines():
        alias = _ALIAS.match(line)
        if alias:
            aliases[alias.group(1)] = alias.group(2)
            continue
        reduce = _REDUCE.search(line)
        if reduce:
            axis, combine = int(reduce.group(1)), None
            continue
        if axis is None:
            continue
        op = _COMBINE.search(line)
        if op and combine is None:
            combine = op.group(1)
        typed = _TYPE.match(line)
        if typed:
            shape, dtype, encoding = _ints(typed.group(1).replace("x", ",")), typed.group(2), typed.group(3)
            if len(shape) == 2 and axis == 0 and dtype.startswith("f"):
                layout = aliases.get(encoding, encoding)
                blocked = _BLOCKED.search(layout)
                if not blocked or _ints(blocked.group(4)) != [1, 0]:
                    raise AssertionError(f"a row reduction over a tile laid out as {layout}")
                size, lanes, warps = (_ints(blocked.group(i)) for i in (1, 2, 3))
                found.append(RowReduction(combine, shape[0], size[0], lanes[0], warps[0]))
            axis = None
    return found


def compile_for(kernel, key, target: str, layout: dict[str, str] | None = None,
                constants: dict[str, Any] | None = None):
    """The binary of ``key`` for ``target`` (nothing runs), from its stand-ins with the
    runtime arguments ``layout`` names specialised as it says (``{"State_ptr": "*fp32"}``:
    not 16-byte aligned) and ``constants`` replacing the key's (a sweep's tiling)."""
    from jitkern import LaunchSpec
    from jitkern.layouts.specialisation import stand_ins_for
    from jitkern.targets import compile_only, parse_target

    kwargs, _ = kernel.layouts.stand_ins(key)
    spec = LaunchSpec((1,), stand_ins_for(kernel.kernel, kwargs, layout or {}), key)
    with compile_only(parse_target(target)):
        return kernel.kernel.warmup(grid=(1,), **{**kernel.triton_kwargs(spec), **(constants or {})})


def registers(binary) -> int | None:
    """Registers per thread of an NVIDIA binary (``cuobjdump -res-usage``), None elsewhere."""
    cubin = binary.asm.get("cubin") if hasattr(binary, "asm") else None
    if cubin is None:
        return None
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return None
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        text = subprocess.run([str(tool), "-res-usage", file.name], capture_output=True, text=True).stdout
    match = re.search(r"REG:(\d+)", text)
    return int(match.group(1)) if match else None


# The state cache as the compressor and the fused step may see it: 16-byte aligned rows,
# an unaligned base, odd strides (a cache whose rows are 4 bytes off 16).
STATE_LAYOUTS = {
    "aligned": {},
    "unaligned": {"State_ptr": "*fp32"},
    "odd strides": {"State_ptr": "*fp32", "state_block_stride": "i32", "state_row_stride": "i32"},
}


def dtype_of(name: str) -> torch.dtype:
    return getattr(torch, name)
