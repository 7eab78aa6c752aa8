"""Where the first launch of a fresh serving process goes (issue 16: within 0.2 ms).

Each experiment is a fresh process that loads every shipped manifest (from the load memo
after the first process), makes axpy's inputs, then times its first ``axpy`` call on the
host, split at the compiled launcher: the Python before it, the launcher (Triton's C
function, which calls the driver), the Python after. What runs before that call differs:

- ``baseline``: nothing (but ``load()``'s own rehearsal, ``jitkern.serve.rehearsal``).
- ``no-rehearsal``: ``load()`` without its rehearsal.
- ``other-binary-first``: a first call of another axpy binary (float16): what is left is
  what is new to this binary and this signature.
- ``same-binary-first``: a first call of this binary with another size (another input
  signature): what is left is what is new to this signature alone.
- ``rehearsal``: as ``other-binary-first``, but launched with an empty grid (Triton's
  launcher returns before calling the driver): whether the driver's first launch is
  part of the cost.

The "before" column is split at the kernel's ``launch`` (the public function's own
Python: its checks, the key, the ``LaunchSpec``; then jitkern's direct launch).

    python3 benchmarks/device/first_launch_split.py [--runs 5] [--experiments baseline no-rehearsal ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import glob, json, sys, time
clock = time.perf_counter
import torch
from jitkern.examples.axpy import AxpyKernel, axpy
from jitkern.serve import load, start_process
start_process()
if {experiment!r} == "no-rehearsal":
    import jitkern.serve.rehearsal
    jitkern.serve.rehearsal.rehearse = lambda kernel: False
load(sorted(glob.glob("warmup_manifests/*.json")))
marks = []
def timed(run):
    def timed_run(*args):
        marks.append(clock())
        run(*args)
        marks.append(clock())
    return timed_run
from jitkern.kernel import TritonJitKernel
kernel_launch = TritonJitKernel.launch
def marked_launch(self, spec):
    marks.append(clock())
    return kernel_launch(self, spec)
TritonJitKernel.launch = marked_launch
for held in AxpyKernel().binaries.held():
    for launch in [AxpyKernel().binaries.direct_of(held)]:
        if launch is not None:
            launch.launch.__globals__["run"] = timed(launch.launch.__globals__["run"])
x = torch.randn(1 << 20, device="cuda"); y = torch.randn_like(x); out = torch.empty_like(x)
if {experiment!r} == "other-binary-first":
    half = torch.randn(1 << 10, device="cuda", dtype=torch.float16)
    axpy(half, half, 2.0, torch.empty_like(half))
elif {experiment!r} == "same-binary-first":
    axpy(x[:1 << 19], y[:1 << 19], 2.0, out[:1 << 19])
elif {experiment!r} == "rehearsal":
    from jitkern.testing import record_launches
    half = torch.randn(1 << 10, device="cuda", dtype=torch.float16)
    with record_launches(dry_run=True) as recorded:
        axpy(half, half, 2.0, torch.empty_like(half))
    (kernel, spec), = recorded
    TritonJitKernel.launch(kernel, type(spec)((0,), spec.kwargs, spec.key))
torch.cuda.synchronize()
marks.clear()
start = clock()
axpy(x, y, 2.0, out)
end = clock()
torch.cuda.synchronize()
synced = clock()
nan = float("nan")
ok = len(marks) == 3
print("RESULT " + json.dumps(dict(
    host_ms=(end - start) * 1e3, public_ms=(marks[0] - start) * 1e3 if ok else nan,
    direct_ms=(marks[1] - marks[0]) * 1e3 if ok else nan,
    launcher_ms=(marks[2] - marks[1]) * 1e3 if ok else nan, after_ms=(end - marks[2]) * 1e3 if ok else nan,
    synced_ms=(synced - start) * 1e3)))
"""


def one(experiment: str, state_dir: str) -> dict:
    environment = dict(os.environ, JITKERN_STATE_DIR=state_dir,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHILD.format(experiment=experiment)], cwd=REPO, env=environment,
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{experiment}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("RESULT ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--experiments", nargs="*",
                        default=["baseline", "no-rehearsal", "other-binary-first", "same-binary-first", "rehearsal"])
    args = parser.parse_args()
    experiments = args.experiments
    with tempfile.TemporaryDirectory() as state_dir:
        one("baseline", state_dir)  # writes the load memo
        results = {name: [] for name in experiments}
        for _ in range(args.runs):
            for name in experiments:  # in turns: drift of the host falls on each alike
                results[name].append(one(name, state_dir))
    fields = ["host_ms", "public_ms", "direct_ms", "launcher_ms", "after_ms", "synced_ms"]
    print(f"first axpy call of a fresh process, median of {args.runs} (ms)")
    print(f"{'experiment':18} " + " ".join(f"{field:>12}" for field in fields))
    for name, runs in results.items():
        print(f"{name:18} " + " ".join(f"{statistics.median(run[field] for run in runs):12.3f}" for field in fields))


if __name__ == "__main__":
    main()
