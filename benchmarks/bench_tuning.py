"""The example grouped GEMM tuned by jitkern, against its declared defaults and against
Triton's own autotuner over the same nine configs, on the GPU.

    python benchmarks/bench_tuning.py [--cache-dir DIR] [--shapes deepseek,mixtral] [--batches 1,2,4,...,512]
                                      [--retune] [--smoke]

In order:
1. warm ``warmup_manifests/grouped-gemm-h200.json`` into ``--cache-dir``
   (``python -m jitkern.warmup``: compiles what is missing, every candidate);
2. tune it on this GPU (``python -m jitkern.warmup tune``), unless the cache holds a table
   for this GPU already (``--retune``: tune again), and say how long it took;
3. per-call GPU time, per shape and batch size (routed at random, no routed weights),
   of the whole call (the host-side sort and the GEMM) replayed in a CUDA graph
   (``triton.testing.do_bench_cudagraph`` medians), three ways:
   - **tuned**: ``jitkern.serve.load()`` takes the table, each bucket launches its winner;
   - **default**: the table's winners dropped, each bucket launches its declared default;
   - **Triton**: ``triton.autotune`` over the same configs, keyed on the batch
     (``num_pairs``, ``N``, ``K``), each config's ``pre_hook`` sorting the pairs for its
     BLOCK_SIZE_M (the kernel needs its ids padded so; jitkern refuses to adopt such a hook);
4. time to the first call, each in a fresh process from its first line (``import torch``
   included): jitkern (``load()`` then the calls: no benchmark, no compile) and Triton's
   autotuner (it benchmarks the nine configs at the first call of each batch size), to the
   first call of the first batch size and to the first call of every one.
It prints a short table last. ``--smoke`` runs tiny fp16 shapes on the CPU under
``TRITON_INTERPRET=1`` (a set timer tunes, host clocks time) to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402

MANIFEST = REPO / "warmup_manifests" / "grouped-gemm-h200.json"
SHAPES = {"deepseek": dict(experts=64, top_k=6, n=1408, k=2048), "mixtral": dict(experts=8, top_k=2, n=14336, k=4096)}
SMOKE_SHAPE = dict(experts=4, top_k=2, n=32, k=32)

# A fresh process: jitkern's path or Triton's autotuner, to the first call of each batch size.
FIRST_CALLS = """
import time
start = time.perf_counter()
import json, sys, torch
sys.path.insert(0, {repo!r}); sys.path.insert(0, {benchmarks!r})
import bench_tuning
device, dtype, shape, batches = {device!r}, getattr(torch, {dtype!r}), {shape!r}, {batches!r}
call = bench_tuning.jitkern_call({manifest!r}, {smoke!r}) if {way!r} == "jitkern" else bench_tuning.triton_call({smoke!r})
firsts = []
for tokens in batches:
    a, b, ids = bench_tuning.inputs(shape, tokens, dtype, device)
    call(a, b, ids)
    if device == "cuda":
        torch.cuda.synchronize()
    firsts.append(time.perf_counter() - start)
print("RESULT " + json.dumps(firsts))
"""


def inputs(shape: dict, tokens: int, dtype: torch.dtype, device: str) -> tuple:
    """A batch of ``tokens`` rows routed at random to ``top_k`` distinct experts each."""
    experts, top_k, n, k = shape["experts"], shape["top_k"], shape["n"], shape["k"]
    ids = torch.rand(tokens, experts, device=device).argsort(dim=1)[:, :top_k].to(torch.int32)
    return (torch.randn(tokens, k, dtype=dtype, device=device),
            (torch.randn(experts, n, k, device=device) * k**-0.5).to(dtype), ids)


def jitkern_call(manifest: str, smoke: bool):
    """``grouped_gemm`` after ``load()`` (the interpreter loads nothing: the tables are taken as it would)."""
    from jitkern.examples.grouped_gemm import grouped_gemm
    from jitkern.serve import load

    load([manifest])
    if smoke:
        from jitkern.manifest import resolve
        from jitkern.tuning import take_tables

        take_tables(resolve([manifest], "cuda:90")[0], "cuda:90", "smoke GPU")
    return lambda a, b, ids: grouped_gemm(a, b, ids)


def triton_call(smoke: bool):
    """The same kernel under ``triton.autotune`` over the same configs (see the module docstring)."""
    from jitkern import cdiv
    from jitkern.examples.grouped_gemm import TILES
    from jitkern.examples.kernels.grouped_gemm import grouped_gemm_kernel, padded_capacity, sort_by_expert

    routing: dict = {}

    def sort_for_config(nargs: dict) -> None:  # writes the kernel's id tensors: what jitkern will not adopt
        blocks = sort_by_expert(routing["ids"], routing["experts"], nargs["BLOCK_SIZE_M"])
        nargs["SortedIds"][: blocks.sorted_ids.numel()].copy_(blocks.sorted_ids)
        nargs["BlockExperts"][: blocks.block_experts.numel()].copy_(blocks.block_experts)
        nargs["NumUsed"].copy_(blocks.num_used)

    configs = [triton.Config({"BLOCK_SIZE_M": tile["BLOCK_SIZE_M"], "BLOCK_SIZE_N": tile["BLOCK_SIZE_N"],
                              "BLOCK_SIZE_K": tile["BLOCK_SIZE_K"], "GROUP_SIZE_M": tile["GROUP_SIZE_M"]},
                             num_warps=tile["num_warps"], num_stages=tile["num_stages"], pre_hook=sort_for_config)
               for tile in TILES]
    smoke_bench = (lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1]) if smoke else None
    autotuned = triton.autotune(configs, key=["num_pairs", "N", "K"], do_bench=smoke_bench)(grouped_gemm_kernel)
    largest = max(tile["BLOCK_SIZE_M"] for tile in TILES)
    smallest = min(tile["BLOCK_SIZE_M"] for tile in TILES)

    def call(a, b, ids):
        (tokens, k), (experts, n, _), top_k = a.shape, b.shape, ids.shape[1]
        pairs, device = tokens * top_k, a.device
        routing.update(ids=ids, experts=experts)
        capacity = padded_capacity(pairs, experts, largest)  # room for every config's padded ids
        out = torch.empty(tokens, top_k, n, dtype=a.dtype, device=device)
        sorted_ids = torch.empty(capacity, dtype=torch.int32, device=device)
        block_experts = torch.empty(capacity // smallest, dtype=torch.int32, device=device)
        num_used = torch.empty(1, dtype=torch.int32, device=device)
        grid = lambda meta: (padded_capacity(pairs, experts, meta["BLOCK_SIZE_M"]) // meta["BLOCK_SIZE_M"]  # noqa: E731
                             * cdiv(n, meta["BLOCK_SIZE_N"]),)
        autotuned[grid](a, b, out, None, sorted_ids, block_experts, num_used, n, k, pairs, a.stride(0), b.stride(0),
                        b.stride(1), TOP_K=top_k, MUL_ROUTED_WEIGHT=False)
        return out

    return call


def gpu_microseconds(call, smoke: bool) -> float:
    """GPU time of one call: the median of CUDA-graph replays (host clocks under ``--smoke``)."""
    if smoke:
        call()
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1e6
    return triton.testing.do_bench_cudagraph(call, rep=50, return_mode="median") * 1e3


def run(command: list[str], cache_dir: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, TRITON_CACHE_DIR=cache_dir,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)


def warm_and_tune(manifest: str, cache_dir: str, retune: bool, smoke: bool) -> str:
    """Warm and tune (see the module docstring); what tuning took, in words."""
    if smoke:
        return _smoke_tune(manifest, cache_dir)
    warmed = run([sys.executable, "-m", "jitkern.warmup", manifest, "--cache-dir", cache_dir, "--no-progress"],
                 cache_dir)
    if warmed.returncode:
        sys.exit(f"warmup failed:\n{warmed.stdout[-3000:]}{warmed.stderr[-3000:]}")
    check = run([sys.executable, "-m", "jitkern.warmup", "tune", manifest, "--cache-dir", cache_dir, "--check"],
                cache_dir)
    if check.returncode == 0 and not retune:
        return "a table for this GPU was in the cache (--retune to time it)"
    start = time.perf_counter()
    tuned = run([sys.executable, "-m", "jitkern.warmup", "tune", manifest, "--cache-dir", cache_dir], cache_dir)
    if tuned.returncode:
        sys.exit(f"tune failed:\n{tuned.stdout[-3000:]}{tuned.stderr[-3000:]}")
    return f"{time.perf_counter() - start:.1f} s (python -m jitkern.warmup tune, once per GPU kind)"


def _smoke_tune(manifest: str, cache_dir: str) -> str:
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    from jitkern.manifest import resolve
    from jitkern.tuning import store, tune

    timer = lambda launch, key: (launch(), [key.BLOCK_SIZE_N / 64 + key.num_warps / 100])[1]  # noqa: E731
    for table in tune(resolve([manifest], "cuda:90")[0], "cuda:90", "smoke GPU", timer, device="cpu"):
        store(table)
    return "a set timer (--smoke)"


def first_calls(way: str, manifest: str, cache_dir: str, shape: dict, batches: list[int], smoke: bool) -> list[float]:
    source = FIRST_CALLS.format(repo=str(REPO), benchmarks=str(REPO / "benchmarks"), way=way, manifest=manifest,
                                smoke=smoke, shape=shape, batches=batches, device="cpu" if smoke else "cuda",
                                dtype="float16" if smoke else "bfloat16")
    done = run([sys.executable, "-c", source], cache_dir)
    if done.returncode:
        sys.exit(f"a first-call run ({way}) failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("RESULT ", 1)[1])


def smoke_manifest(folder: str) -> str:
    path = os.path.join(folder, "smoke.json")
    config = {"dtypes": ["float16"], **{name: SMOKE_SHAPE[name] for name in ("n", "k", "top_k", "experts")},
              "max_tokens": 2}
    with open(path, "w") as file:
        json.dump({"format_version": 1, "name": "smoke", "targets": ["cuda:90"],
                   "modules": ["jitkern.examples.grouped_gemm"],
                   "kernels": [{"kernel": "jitkern.example.grouped_gemm", "config": config}]}, file)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", default=os.environ.get("TRITON_CACHE_DIR", str(REPO / ".triton-cache")))
    parser.add_argument("--shapes", default="deepseek,mixtral")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64,128,256,512")
    parser.add_argument("--retune", action="store_true", help="tune again even if the cache holds a table")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter: the script itself")
    args = parser.parse_args()
    smoke, scratch = args.smoke, tempfile.mkdtemp(prefix="bench-tuning-")
    cache_dir = os.path.join(scratch, "cache") if smoke else str(Path(args.cache_dir).resolve())
    manifest = smoke_manifest(scratch) if smoke else str(MANIFEST)
    shapes = {"smoke": SMOKE_SHAPE} if smoke else {name: SHAPES[name] for name in args.shapes.split(",")}
    batches = [1, 2] if smoke else [int(size) for size in args.batches.split(",")]
    device, dtype = ("cpu", torch.float16) if smoke else ("cuda", torch.bfloat16)
    tuning = warm_and_tune(manifest, cache_dir, args.retune, smoke)

    os.environ["TRITON_CACHE_DIR"] = cache_dir
    from jitkern.examples.grouped_gemm import GroupedGemmKernel

    tuned_call, autotuned_call = jitkern_call(manifest, smoke), triton_call(smoke)
    winners = GroupedGemmKernel().winners
    rows, source = dict(winners.rows), winners.source
    per_call = []
    for name, shape in shapes.items():
        for tokens in batches:
            a, b, ids = inputs(shape, tokens, dtype, device)
            winners.take(rows, source)
            tuned = gpu_microseconds(lambda: tuned_call(a, b, ids), smoke)
            winners.take({}, "")
            default = gpu_microseconds(lambda: tuned_call(a, b, ids), smoke)
            autotuned = gpu_microseconds(lambda: autotuned_call(a, b, ids), smoke)
            per_call.append((name, tokens, tuned, default, autotuned))
    winners.take(rows, source)
    starts = {(way, name): first_calls(way, manifest, cache_dir, shape, batches, smoke)
              for name, shape in shapes.items() for way in ("jitkern", "triton")}

    where = "CPU interpreter (--smoke: the script itself, no figures)" if smoke else torch.cuda.get_device_name()
    print(f"\ngrouped GEMM on {where}; tuning: {tuning}")
    print("per call, µs of GPU time (sort + GEMM in a CUDA graph, median):")
    print(f"{'shape':<9} {'batch':>5} {'tuned':>8} {'default':>8} {'Triton':>8} {'default/tuned':>13} "
          f"{'Triton/tuned':>12}")
    for name, tokens, tuned, default, autotuned in per_call:
        print(f"{name:<9} {tokens:>5} {tuned:>8.1f} {default:>8.1f} {autotuned:>8.1f} {default / tuned:>13.2f} "
              f"{autotuned / tuned:>12.2f}")
    print("from a fresh process's first line to the first call, s (first batch / every batch of the list):")
    for name in shapes:
        ours, theirs = starts[("jitkern", name)], starts[("triton", name)]
        print(f"{name:<9} jitkern {ours[0]:.2f} / {ours[-1]:.2f}   Triton's autotuner {theirs[0]:.2f} / "
              f"{theirs[-1]:.2f}")


if __name__ == "__main__":
    main()
