"""The guard tells a load from a compile for plain ``@triton.jit`` kernels (an engine's own,
launched beside jitkern's): in error mode, a kernel whose binary Triton finds on disk
launches; one that Triton truly compiles raises ``ServeTimeCompile``, once.

Each run is a fresh process, as a serving process is: one compiles a kernel for cuda:90
with jitkern's compile-only driver (``dry_run_gpu``) into the cache, the next serves.
"""

import json
import os
import subprocess
import sys

import pytest
from warmup_testing import REPO

pytestmark = pytest.mark.compiled

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def on_disk(X, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offsets, tl.load(X + offsets, mask=offsets < n) * 2, mask=offsets < n)


@triton.jit
def never_compiled(X, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offsets, tl.load(X + offsets, mask=offsets < n) + 1, mask=offsets < n)
'''

SERVE = '''
import json, sys
import torch
from jitkern import guard, hooks
from jitkern.testing import dry_run_gpu
import plain_kernels

compiles = []  # cache_hit of each compile Triton reports
hooks.add_watchers(on_compile=lambda *, src, cache_hit, **_: compiles.append([src.name, cache_hit]))
x = torch.zeros(1000)
outcomes = []
with dry_run_gpu("cuda:90"):
    for name in sys.argv[1:]:
        try:
            getattr(plain_kernels, name)[(4,)](x, 1000, BLOCK=256)
            outcomes.append([name, "launched"])
        except guard.ServeTimeCompile as error:
            outcomes.append([name, str(error)])
print(json.dumps({"mode": guard.mode(), "outcomes": outcomes, "compiles": compiles}))
'''


def serve(tmp_path, guard_mode: str, *kernels: str) -> dict:
    """A fresh process launching the plain kernels named, in order, with the guard's mode."""
    environment = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_INTERPRET="0",
                       JITKERN_GUARD=guard_mode, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    run = subprocess.run([sys.executable, "-c", SERVE, *kernels], cwd=REPO, env=environment, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_a_plain_kernel_loaded_from_disk_launches_and_one_compiled_raises_once(tmp_path):
    (tmp_path / "plain_kernels.py").write_text(KERNELS)
    warmed = serve(tmp_path, "off", "on_disk")  # a node's warmup: compiled into the cache
    assert warmed["compiles"] == [["on_disk", False]]

    served = serve(tmp_path, "error", "on_disk", "never_compiled", "never_compiled")
    assert served["mode"] == "error"
    # the guard's listener, added first, raised on never_compiled's fresh compile before ours saw it
    assert served["compiles"] == [["on_disk", True], ["never_compiled", True]]
    (first, loaded), (second, refused), (third, then_loaded) = served["outcomes"]
    assert (first, loaded) == ("on_disk", "launched")  # its launch missed Triton's in-process binaries: a load
    assert second == "never_compiled" and refused.startswith(
        "serve-time compile of Triton kernel never_compiled (not launched through a jitkern kernel)")
    assert (third, then_loaded) == ("never_compiled", "launched")  # compiled by the launch that raised: on disk now
