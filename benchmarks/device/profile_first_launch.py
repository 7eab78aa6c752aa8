"""Where a fresh serving process's first public calls go after ``load()`` (issue 16: the
first launch within 0.2 ms). Loads every shipped manifest (from the load memo when
``JITKERN_STATE_DIR`` holds one), then times the first, second and third ``axpy`` call of
each of three signatures, each of another binary never launched before (host time, then
with a synchronise), and profiles the first call of a fourth signature.

    python3 benchmarks/device/profile_first_launch.py [--profile-first]
"""

import glob
import io
import pstats
import sys
import time
from cProfile import Profile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from jitkern.examples.axpy import axpy  # noqa: E402
from jitkern.serve import load, start_process  # noqa: E402

clock = time.perf_counter
start_process()
start = clock()
binaries = sum(row.binaries for row in load(sorted(glob.glob("warmup_manifests/*.json"))))
print(f"load(): {binaries} binaries in {clock() - start:.3f} s")


def arguments(dtype, size=1 << 20):
    x = torch.randn(size, device="cuda", dtype=dtype)
    return x, torch.randn_like(x), 2.0, torch.empty_like(x)


torch.cuda.synchronize()
if "--profile-first" in sys.argv:  # the process's very first call, profiled (slower, but where it goes)
    first_arguments = arguments(torch.float32)
    torch.cuda.synchronize()
    profiler = Profile()
    profiler.enable()
    axpy(*first_arguments)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    print("--- profile of the process's first call\n" + out.getvalue()[-3000:])
for dtype in (torch.float32, torch.float16, torch.bfloat16):  # three binaries, none launched before
    call_arguments = arguments(dtype)
    torch.cuda.synchronize()
    for call in ("first", "second", "third"):
        start = clock()
        axpy(*call_arguments)
        host = clock()
        torch.cuda.synchronize()
        print(f"{str(dtype):15} {call} call: host {1e3 * (host - start):.3f} ms, "
              f"with the synchronise {1e3 * (clock() - start):.3f} ms")
fourth = arguments(torch.float32, 1 << 19)  # another size: another signature
torch.cuda.synchronize()
profiler = Profile()
profiler.enable()
axpy(*fourth)
profiler.disable()
out = io.StringIO()
pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
print("--- profile of the first call of a fourth signature\n" + out.getvalue()[-2400:])
