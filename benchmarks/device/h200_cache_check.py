"""On the GPU: a cache compiled elsewhere for cuda:90 is used with zero fresh compiles.

    python benchmarks/device/h200_cache_check.py MANIFEST...

Loads every binary of the manifests (counting fresh compiles: must be 0), then runs the
example kernel on real tensors under ``assert_no_compile()`` and checks its bytes.
"""

import sys
import time

import torch
import triton

from jitkern import hooks
from jitkern.examples.axpy import axpy
from jitkern.testing import assert_no_compile
from jitkern.serve import load

fresh, hits = [], []
started = time.perf_counter()
with hooks.watching(on_compile=lambda *, cache_hit, src, **_: (hits if cache_hit else fresh).append(src.name)):
    loaded = load(sys.argv[1:])
print(f"load() of {sum(row.binaries for row in loaded)} binaries: {time.perf_counter() - started:.2f} s")
for row in loaded:
    print(f"loaded {row.kernel}: {row.binaries} binaries, {row.seconds * 1e3 / row.binaries:.2f} ms each")
print(f"cache loads {len(hits)}, fresh compiles {len(fresh)}")
assert not fresh, fresh

with assert_no_compile():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 17, 4096, 1_000_003):
            for offset in (0, 1):
                x = torch.randn(n + offset, device="cuda", dtype=dtype)[offset:]
                y = torch.randn(n, device="cuda", dtype=dtype)
                out = axpy(x, y, 0.5)
                expected = (0.5 * x.float() + y.float()).to(dtype)
                assert torch.equal(out, expected), (dtype, n, offset)
torch.cuda.synchronize()
print(f"axpy on real tensors under assert_no_compile(): 0 compiles, bytes equal (triton {triton.__version__}, "
      f"torch {torch.__version__}, {torch.cuda.get_device_name()})")
