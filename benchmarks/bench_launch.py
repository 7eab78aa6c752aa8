"""Host cost of one launch, for every shipped kernel, three ways, and of each public call, in one run.

    python benchmarks/bench_launch.py [--launches 200] [--repeats 30] [--dry-run] [--every-layout]

(a) jitkern: ``kernel.launch(spec)`` with the LaunchSpec built beforehand (the direct launch);
(b) Triton: ``kernel[grid](**kwargs)`` with the same arguments, also built beforehand;
(c) bare: the compiled launcher (``CompiledKernel.run``) with the arguments Triton binds
    (tensors, whose addresses the launcher reads) and no launch hooks.
The ratios compare (a) with (c) and (b); (a) hands the launcher tensor addresses and, when
the kernel needs no scratch memory, skips its Python wrapper for the C launch function.
Then each public function (``benchmarks/launch_samples.public_calls``): "call us" is the
whole call (input validation, building each LaunchSpec, the launches: after the first call
of an input signature, ``jitkern.launch.plans`` repeats its launches), "bare us" the bare
launcher of each kernel it launches, summed, and "torch us" the torch work the call does
besides (``jitkern.torch_step``s: allocating its output, a fill), which a program calling
the bare launcher would do too: ``call/(torch+bare)`` is what jitkern adds to that. Each
figure is the median over ``--repeats`` of the mean host time of ``--launches`` launches;
the ways compared take turns within each repeat, so that drift of the host hits them alike.
"compiled us" is the same call inside a graph of ``torch.compile(fullgraph=True)`` (Inductor,
no CUDA graphs): the compiled function's guards, Inductor's wrapper calling the op, the op's
dispatch and its implementation, the planned public call (``--eager-only`` leaves it out).
Last, the GPU time per step of decode steps at batch 64 (Step5 summaries; DeepSeek V4 store
and compressor; both) replayed as one CUDA graph of 10 steps: captured by hand, and made
by ``torch.compile(mode="reduce-overhead")``. ``--dry-run`` runs on a machine with no GPU
through ``jitkern.testing.DryRunDriver`` (host overheads only; the bare launcher is a no-op).
``--every-layout`` first warms each sampled key in every layout of its tensors at any
offset (compiling what the cache lacks), so that (a) picks its binary among several
through the layout selector.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: `benchmarks` and our packages import from the repo


def recorded_launches(function: Callable, args: tuple, kwargs: dict) -> tuple[list, list]:
    """Call ``function``: the (kernel, spec) of each launch it made, and its torch steps
    (``jitkern.torch_step``: the allocation of its output, a fill)."""
    from jitkern.launch import plans

    plans.recording.launches = recorded = []
    try:
        function(*args, **kwargs)
    finally:
        plans.recording.launches = None
    steps = [entry for entry in recorded if isinstance(entry, plans.TorchStep)]
    launches = [entry for entry in recorded if not isinstance(entry, plans.TorchStep)]
    return [(kernel, spec) for kernel, spec, _launched in launches], steps


def host_microseconds(ways: list[Callable[[], None]], launches: int, repeats: int,
                      sync: Callable[[], None]) -> list[float]:
    """Median host us per launch of each way. The ways take turns, one block of
    ``launches`` each per repeat, so that the host's drift (clocks, other processes)
    falls on all of them alike and their ratios hold."""
    samples: list[list[float]] = [[] for _ in ways]
    for _ in range(repeats):
        for launch, taken in zip(ways, samples):
            sync()
            start = time.perf_counter()
            for _ in range(launches):
                launch()
            taken.append((time.perf_counter() - start) / launches * 1e6)
    sync()
    return [statistics.median(taken) for taken in samples]


def three_ways(kernel, spec, every_layout: bool = False):
    """The launch callables of one recorded launch: jitkern's direct launch, Triton, bare."""
    from triton.runtime.driver import driver

    from jitkern import LayoutDomain

    if every_layout:
        everywhere = LayoutDomain(unaligned=frozenset(kernel.layouts.tensor_dims(spec.key)))
        for binary in kernel.layouts.binary_keys([spec.key], everywhere):
            kernel.compile(binary)
    kernel.launch(spec)  # a first launch prepares the direct launch
    direct = kernel.binaries.direct_launch(spec)
    assert direct is not None and direct.launch(spec.kwargs, spec.grid), f"{kernel.name}: no direct launch"
    binary = direct.binary
    device = driver.active.get_current_device()
    jit_function = kernel.kernel
    triton_kwargs = kernel.triton_kwargs(spec)
    bound, _specialization, _options = jit_function.device_caches[device][4](**triton_kwargs)
    bound_args = tuple(bound.values())
    grid = tuple(spec.grid) + (1,) * (3 - len(spec.grid))
    stream = driver.active.get_current_stream(device)

    def via_jitkern():
        kernel.launch(spec)

    def via_triton():
        jit_function[spec.grid](**triton_kwargs)

    def via_bare():
        binary.run(grid[0], grid[1], grid[2], stream, binary.function, binary.packed_metadata, None, None, None,
                   *bound_args)

    return via_jitkern, via_triton, via_bare


def compiled_call(function: Callable, args: tuple, kwargs: dict) -> Callable[[], None]:
    """The call inside a compiled graph (Inductor, ``fullgraph=True``), compiled and run twice.
    Dynamo is reset first: the previous row's graph, of the same caller code, is not guarded
    against on every call of this one."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a, **k: function(*a, **k), fullgraph=True)
    for _ in range(2):
        compiled(*args, **kwargs)
    return lambda: compiled(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: host overheads through the dry-run driver")
    parser.add_argument("--every-layout", action="store_true", help="warm every alignment of each key's tensors first")
    parser.add_argument("--eager-only", action="store_true", help="no public call inside a compiled graph")
    args = parser.parse_args()

    import contextlib

    from benchmarks import launch_samples
    from jitkern.testing import dry_run_gpu

    device = "cpu" if args.dry_run else "cuda"
    sync = (lambda: None) if args.dry_run else torch.cuda.synchronize
    with dry_run_gpu() if args.dry_run else contextlib.nullcontext():
        launch_rows, call_rows, seen = [], [], set()
        for function, call_args, call_kwargs in launch_samples.public_calls(device):
            launches, steps = recorded_launches(function, call_args, call_kwargs)
            bare_ways = []
            for kernel, spec in launches:
                ways = three_ways(kernel, spec, args.every_layout)
                bare_ways.append(ways[2])
                if kernel.name not in seen:  # the first launch of each kernel
                    seen.add(kernel.name)
                    launch_rows.append((kernel.name, *host_microseconds(list(ways), args.launches, args.repeats,
                                                                         sync)))
            call_way = lambda function=function, a=call_args, k=call_kwargs: function(*a, **k)  # noqa: E731

            def torch_way(steps=steps):  # what a plain Triton program calling the bare launcher does besides
                for step in steps:
                    step.function(*step.args, **step.kwargs)

            compiled_ways = [] if args.eager_only else [compiled_call(function, call_args, call_kwargs)]
            call_us, torch_us, *taken = host_microseconds([call_way, torch_way, *compiled_ways, *bare_ways],
                                                          args.launches, args.repeats, sync)
            compiled_us, bare_us = taken[:len(compiled_ways)], taken[len(compiled_ways):]
            kernels = "+".join(kernel.name.split(".")[-1] for kernel, _ in launches)
            keywords = "".join(f", {name}=" for name in call_kwargs)  # "(..., out=)": another row of the function
            call_rows.append((f"{function.__module__.split('.')[0]}.{function.__name__}"
                              f"{f'(...{keywords})' if keywords else ''} ({kernels})", call_us, sum(bare_us),
                              torch_us if steps else 0.0, compiled_us[0] if compiled_us else None))
        graph_rows = [] if args.dry_run else [
            (name, launch_samples.graph_microseconds(launch_samples.decode_step(packages=packages)),
             launch_samples.graph_microseconds(launch_samples.decode_step(packages=packages), compiled=True))
            for name, packages in (("Step5 update_decode", ("step5",)),
                                   ("DeepSeek V4 save_partial_states + compress_windows", ("deepseek_v4",)),
                                   ("both", launch_samples.PACKAGES))]

    header = f"{'kernel':38} {'jitkern us':>10} {'triton us':>10} {'bare us':>8} {'jk/bare':>8} {'jk/triton':>9}"
    print(header)
    print("-" * len(header))
    for name, jitkern_us, triton_us, bare_us in sorted(launch_rows):
        print(f"{name:38} {jitkern_us:10.2f} {triton_us:10.2f} {bare_us:8.2f} "
              f"{jitkern_us / bare_us:8.2f} {jitkern_us / triton_us:9.2f}")
    header = (f"{'public call (its launches)':68} {'call us':>8} {'bare us':>8} {'call/bare':>9} {'torch us':>8} "
              f"{'call/(torch+bare)':>17} {'compiled us':>11} {'compiled/(torch+bare)':>21}")
    print("\n" + header)
    print("-" * len(header))
    for name, call_us, bare_us, torch_us, compiled_us in call_rows:
        compiled = "" if compiled_us is None else f" {compiled_us:11.2f} {compiled_us / (torch_us + bare_us):21.2f}"
        print(f"{name:68} {call_us:8.2f} {bare_us:8.2f} {call_us / bare_us:9.2f} {torch_us:8.2f} "
              f"{call_us / (torch_us + bare_us):17.2f}{compiled}")
    if graph_rows:
        header = f"{'decode step, batch 64: GPU us a step, graphs of 10':56} {'by hand':>8} {'reduce-overhead':>15}"
        print("\n" + header)
        print("-" * len(header))
        for name, by_hand, compiled in graph_rows:
            print(f"{name:56} {by_hand:8.2f} {compiled:15.2f}")

if __name__ == "__main__":
    main()
