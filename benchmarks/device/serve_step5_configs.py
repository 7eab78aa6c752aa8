"""On the GPU: the Step5 deployment declared by values, one manifest per configuration
(``tests/manifests/step5-configs/``), loaded from a cache compiled elsewhere for cuda:90 and
serving its mixed-alignment schedule (z 8 bytes off 16) under the guard in error mode:
every step equal to the reference, zero compiles.

    TRITON_CACHE_DIR=CACHE python3 benchmarks/device/serve_step5_configs.py
"""

import random
import sys
import time

import torch

sys.path[:0] = ["tests/step5", "tests"]
torch.set_default_device("cuda")
from jitkern import hooks, settings  # noqa: E402
from jitkern.serve import load  # noqa: E402
from jitkern.testing import assert_no_compile, record_launches  # noqa: E402
import test_schedule as ts  # noqa: E402

events = []
with hooks.watching(on_compile=lambda *, cache_hit, src, **_: events.append(cache_hit)):
    loaded = load([str(p) for p in ts.CONFIG_MANIFESTS])
    print(f"loaded {sum(r.binaries for r in loaded)} binaries: "
          f"cache loads {events.count(True)}, fresh compiles {events.count(False)}")
    before = len(events)
    random.seed(11)
    with settings.scope(guard_mode="error"), assert_no_compile(), record_launches() as launches:
        bs, dt, cap = ts.deployment(ts.VALUES_MANIFEST)
        started = time.perf_counter()
        kinds = ts.run_schedule(ts.Schedule(bs, dt, cap, rows="mixed"), steps=48)
        long = ts.long_prefills(bs, dt, cap, rows="mixed")
        long.mixed_step()
        long.check(0)
        torch.cuda.synchronize()
    print(f"served {len(kinds) + 1} steps ({', '.join(sorted(set(kinds)))}, one two-launch prefill), "
          f"{len(launches)} launches, each step equal to the reference; "
          f"compile events while serving {len(events) - before}")
    assert len(events) == before
