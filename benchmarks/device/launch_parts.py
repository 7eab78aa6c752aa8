"""Where the host time of a direct launch goes: each Python part of it taken out in turn,
timed beside the bare launcher and Triton's C launch function.

    python benchmarks/device/launch_parts.py [kernel-name-suffix ...]   (default: decode_step)

Each kernel's first launch in ``benchmarks/launch_samples.public_calls`` is timed as
``bench_launch.py`` times it (median of 30 repeats of 200 launches, the ways taking turns).
A "without" row is the direct launch generated again with one part left out: it launches
the same binary, but it would accept calls the binary cannot take, so it exists only here.
What a row saves against "direct launch" is what that part costs. "C launch function" is
the floor: Triton's C function with every argument prepared beforehand. The arguments'
checks happen in one C call (``jitkern.launch.c_module``), priced as a whole by the distance
between the direct launch, without its Python parts, and the floor.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import bench_launch, launch_samples  # noqa: E402
from jitkern.launch.direct import bind_direct_launch  # noqa: E402


def first_launch(suffix: str):
    """(kernel, spec) of the first sampled launch of the kernel whose name ends with ``suffix``."""
    for function, args, kwargs in launch_samples.public_calls("cuda"):
        launches, _steps = bench_launch.recorded_launches(function, args, kwargs)
        for kernel, spec in launches:
            if kernel.name.endswith(suffix):
                return kernel, spec
    raise SystemExit(f"no sampled launch of a kernel named *{suffix}")


def _without(source: str, *starts: str) -> str:
    """``source`` less each line that starts (after its indent) with one of ``starts``, and
    the lines indented under it."""
    kept, under = [], None  # the indent of the line being left out
    for line in source.split("\n"):
        indent = len(line) - len(line.lstrip())
        if under is not None and indent > under:
            continue
        under = indent if line.lstrip().startswith(starts) else None
        if under is None:
            kept.append(line)
    return "\n".join(kept)


WITHOUT = {  # part of the generated `launch` -> that function's source without it
    "Triton's state checks": lambda source: re.sub(r"    if drivers\._active .*:\n        return False\n", "", source),
    "reading the current stream": lambda source: source.replace("get_stream(DEVICE)", "STREAM"),
    "the launch-hook block": lambda source: _without(source, "if RUNTIME_SET"),
}
WITHOUT["all three: the C call alone"] = lambda source, edits=tuple(WITHOUT.values()): functools.reduce(
    lambda text, edit: edit(text), edits, source)


def ways_of(kernel, spec) -> dict:
    """Every way to time for one launch: jitkern's, the bare launcher, the C floor, and the
    direct launch without each of its parts."""
    from triton.runtime.driver import driver

    via_jitkern, _via_triton, via_bare = bench_launch.three_ways(kernel, spec)
    direct = kernel.binaries.direct_launch(spec)
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    names = {"STREAM": stream}
    ways = {"kernel.launch(spec)": via_jitkern,
            "direct launch": lambda: direct.launch(spec.kwargs, spec.grid),
            "bare launcher": via_bare}
    head, guarded = direct.source.split("\ndef launch_guarded")
    for part, edit in WITHOUT.items():
        recipe = dict(direct.recipe, source=edit(head) + "\ndef launch_guarded" + guarded)
        without = bind_direct_launch(kernel.kernel, direct.binary, recipe, kernel.constants_for(spec.key))
        without.launch.__globals__.update(names)
        assert without.launch(spec.kwargs, spec.grid), part
        ways[f"without {part}"] = lambda launch=without.launch: launch(spec.kwargs, spec.grid)
    run, binary = direct.binary.run, direct.binary
    if hasattr(run, "launch"):  # Triton's CUDA launcher: its C function, everything prepared
        bound, _, _ = kernel.kernel.device_caches[device][4](**kernel.triton_kwargs(spec))
        prepared = tuple(value.data_ptr() if isinstance(value, torch.Tensor) else value for value in bound.values())
        grid = tuple(spec.grid) + (1,) * (3 - len(spec.grid))
        ways["C launch function"] = lambda: run.launch(
            *grid, stream, binary.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
            binary.packed_metadata, None, None, None, *prepared)
    return ways


def main() -> None:
    for suffix in sys.argv[1:] or ["decode_step"]:
        kernel, spec = first_launch(suffix)
        ways = ways_of(kernel, spec)
        times = dict(zip(ways, bench_launch.host_microseconds(list(ways.values()), 200, 30, torch.cuda.synchronize)))
        tensors = sum(isinstance(value, torch.Tensor) for value in spec.kwargs.values())
        print(f"\n{kernel.name}: {len(spec.kwargs)} runtime arguments, {tensors} of them tensors")
        for way, microseconds in times.items():
            saved = f"{times['direct launch'] - microseconds:+6.2f}" if way.startswith("without") else ""
            print(f"{way:48} {microseconds:7.2f} us {saved}")


if __name__ == "__main__":
    main()
