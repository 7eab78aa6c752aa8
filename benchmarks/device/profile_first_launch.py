"""Where a fresh serving process's first public calls go after ``load()`` (issue 16: the
first launch within 0.2 ms). Loads every shipped manifest (from the load memo when
``JITKERN_STATE_DIR`` holds one), then times the first, second and third ``axpy`` call of
one signature (host time, then with a synchronise), and profiles the same three calls of
another signature (another dtype: another binary, also never launched before).

    python3 benchmarks/device/profile_first_launch.py
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
from jitkern.warmup import load, start_process  # noqa: E402

clock = time.perf_counter
start_process()
start = clock()
binaries = sum(row.binaries for row in load(sorted(glob.glob("warmup_manifests/*.json"))))
print(f"load(): {binaries} binaries in {clock() - start:.3f} s")


def arguments(dtype):
    x = torch.randn(1 << 20, device="cuda", dtype=dtype)
    return x, torch.randn_like(x), 2.0, torch.empty_like(x)


timed, profiled = arguments(torch.float32), arguments(torch.float16)
torch.cuda.synchronize()
for call in ("first", "second", "third"):
    start = clock()
    axpy(*timed)
    host = clock()
    torch.cuda.synchronize()
    print(f"{call} call: host {1e3 * (host - start):.3f} ms, with the synchronise {1e3 * (clock() - start):.3f} ms")
for call in ("first", "second", "third"):
    profiler = Profile()
    profiler.enable()
    axpy(*profiled)
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(14)
    print(f"--- profile of the {call} call of another signature\n" + out.getvalue()[-2600:])
