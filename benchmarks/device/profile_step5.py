"""Per-kernel GPU time of the Step5 prefill (8K and 256K tokens: the two launches of
``step5.ops.prefill_fused``), decode and verify (k=3) at batch 1024, with
``num_warps`` variants (and ``maxnreg`` variants of the two summary kernels), to see where
the time goes. Bypasses the keys on purpose. Arguments name the cases to run (words of
their labels: ``verify``, ``prefill``...); none runs every case.

    python3 benchmarks/device/profile_step5.py [verify] [decode] [all] [prefill]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.bench_step5 import Timer, bench_decode, bench_prefill, bench_verify  # noqa: E402
from jitkern.testing import record_launches  # noqa: E402

device = torch.device("cuda")
timer = Timer(device, steps=20)
captured = {}


def capture_timer(fn, graph=True):
    if "launches" not in captured:
        with record_launches(dry_run=True) as launches:
            fn()
        captured["launches"] = launches
    return 1.0


for label, bench in (("prefill 8K", lambda t: bench_prefill(8 * 1024, t, device)),
                     ("prefill 256K", lambda t: bench_prefill(256 * 1024, t, device)),
                     ("decode 1024", lambda t: bench_decode(1024, t, device)),
                     ("decode 1024 all closing", lambda t: bench_decode(1024, t, device, every_token_closes=True)),
                     ("verify 1024", lambda t: bench_verify(1024, t, device)),
                     ("verify 1024 none closing", lambda t: bench_verify(1024, t, device, none_closing=True))):
    if sys.argv[1:] and not any(word in label for word in sys.argv[1:]):
        continue
    captured.clear()
    try:
        bench(capture_timer)
    except Exception:
        pass  # the baseline part needs real timings; the launches are captured by then
    for kernel, spec in captured["launches"]:
        launch_kwargs = kernel.triton_kwargs(spec)
        register_caps = [launch_kwargs.get("maxnreg")]
        if kernel.name in ("step5.prefill_summary", "step5.prefill_update", "step5.update_decode",
                           "step5.update_verify"):
            register_caps += [cap for cap in (None, 96, 128, 168, 200, 255) if cap != register_caps[0]]
        for warps in (1, 2, 4, 8):
            for cap in register_caps if warps == 1 else register_caps[:1]:
                kwargs = dict(launch_kwargs, num_warps=warps, maxnreg=cap)
                launch = lambda: kernel.kernel[spec.grid](**kwargs)  # noqa: E731
                launch()
                graph_us = timer(launch)
                default = warps == launch_kwargs.get("num_warps", 4) and cap == launch_kwargs.get("maxnreg")
                print(f"{label:14} {kernel.name:28} grid {spec.grid[0]:>7} warps {warps} maxnreg {str(cap):>4}"
                      f"  {graph_us:8.2f} us{'  (key default)' if default else ''}")
