"""Where a fresh serving process's start goes: imports, the GPU context, Triton's one-time
work, and ``load()`` per binary split into Triton's front end, its launcher, the driver's
module load and jitkern's own work. One fresh process per call; prints JSON and, with
``--profile FILE``, writes cProfile's top functions.

    python3 benchmarks/device/profile_start.py [--manifests ...] [--profile out.txt]
"""

from __future__ import annotations

import argparse
import glob
import json
import time

clock = time.perf_counter
marks = {"start": clock()}
import torch  # noqa: E402

marks["torch"] = clock()
import triton  # noqa: E402, F401 - timed

marks["triton"] = clock()
import jitkern  # noqa: E402,F401

marks["jitkern"] = clock()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifests", nargs="*", default=sorted(glob.glob("warmup_manifests/*.json")))
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    from triton.runtime import driver
    from triton.runtime.cache import triton_key
    from triton.compiler import compiler as triton_compiler

    from jitkern.serve import load

    result = {"import torch": marks["torch"] - marks["start"], "import triton": marks["triton"] - marks["torch"],
              "import jitkern": marks["jitkern"] - marks["triton"]}
    t = clock()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    result["cuda context"] = clock() - t
    t = clock()
    triton_key()
    result["triton_key"] = clock() - t
    t = clock()
    import triton.experimental.gluon  # noqa: F401
    result["gluon import"] = clock() - t

    spent = {"load_binary": 0.0, "launcher": 0.0, "CompiledKernel init": 0.0}
    utils = driver.active.utils
    original_load, original_launcher = utils.load_binary, driver.active.launcher_cls
    original_init = triton_compiler.CompiledKernel.__init__

    def timed(name, function):
        def wrapper(*a, **k):
            start = clock()
            try:
                return function(*a, **k)
            finally:
                spent[name] += clock() - start
        return wrapper

    utils.load_binary = timed("load_binary", original_load)
    driver.active.launcher_cls = timed("launcher", original_launcher)
    triton_compiler.CompiledKernel.__init__ = timed("CompiledKernel init", original_init)
    profiler = None
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    t = clock()
    loaded = load(args.manifests)
    result["load"] = clock() - t
    if profiler:
        profiler.disable()
        import io
        import pstats
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
        open(args.profile, "w").write(out.getvalue())
    result.update(spent)
    result["binaries"] = sum(row.binaries for row in loaded)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
