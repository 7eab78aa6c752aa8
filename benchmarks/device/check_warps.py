"""Do the Step5 summary bytes depend on num_warps? (spec: "Why the Step5 kernels use one warp")

    python benchmarks/device/check_warps.py           # on a GPU; the table comes last
    python benchmarks/device/check_warps.py --dry     # no GPU: compiles every row for cuda:90

For each summary kernel (decode, prefill, verify) and num_warps 1, 2, 4 and 8: one step on
random inputs (``tests/step5/step5_testing.py``'s builders: fused or contiguous rows,
z of mixed scales with some -inf, graph padding, ring rows of earlier steps), the kernel
launched as its key at that num_warps compiles (``constants``: the integer fp8 encoding
at 4 warps), its summary bytes compared with the 1-warp kernel's and with the PyTorch
reference's (``step5.reference``; the spec allows a GPU exp one fp8 step in rare
bytes). Then each kernel at 4 warps with the hardware fp8 conversion forced on: what
ptxas 12.8 miscompiles, expect about 128 bytes of every summary to differ.

Columns: summaries written; bytes differing from the 1-warp kernel (mean, and ring);
mean bytes differing from the reference, and the most fp8 steps apart; fp8 conversions
whose merge operand comes from elsewhere in the SASS (``foreign_fp8_merges``, 0 when
the code is right). ``--dry`` fills only the last column. Compiles into Triton's cache
(a cold one is fine: about 20 binaries).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "step5")]

import torch  # noqa: E402
import triton  # noqa: E402

PATHS = ("decode", "prefill", "verify")
WARPS = (1, 2, 4, 8)
FORCED = 4  # the num_warps run again with HW_FP8=True


def make_inputs(path: str):
    from step5_testing import decode_inputs, prefill_inputs, verify_inputs

    if path == "decode":
        return decode_inputs(512, capacity=8, block_size=64)
    if path == "prefill":
        return prefill_inputs(32, capacity=8, block_size=64)
    return verify_inputs(128, capacity=16, block_size=256, draft_tokens=3)


def foreign_merges(binary) -> str:
    """How many fp8 conversions of ``binary`` merge an operand from elsewhere (``foreign_fp8_merges``)."""
    from step5_testing import foreign_fp8_merges
    from triton.tools.disasm import get_sass

    try:
        return str(len(foreign_fp8_merges(get_sass(binary.asm["cubin"]))))
    except Exception as error:  # no cuobjdump: say so in the table, check the bytes anyway
        return f"? ({type(error).__name__})"


def check(path: str, dry: bool) -> list[tuple]:
    from step5.ops.common import target_paths
    from step5.reference import fp8_step_distance
    from step5_testing import OTHER_POISON, clone_inputs, run_reference, run_update, written

    inputs = make_inputs(path)
    rows, results = [], {}
    if not dry:
        reference, other = clone_inputs(inputs), clone_inputs(inputs)
        written(other)[0].fill_(OTHER_POISON)
        run_reference(path, reference)
        run_reference(path, other)
        expected = written(reference)[0]
        wrote = expected == written(other)[0]  # the bytes the reference writes, whatever was there
        shipped = clone_inputs(inputs)
        run_update(path, shipped)  # the public function, as it ships
    configs = [(warps, {}) for warps in WARPS] + [(FORCED, {"HW_FP8": True})]
    for warps, overrides in configs:
        run = clone_inputs(inputs)
        sass = foreign_merges(run_update(path, run, warps, **overrides))
        fp8 = "hw forced" if overrides else ("hw" if target_paths(warps)["HW_FP8"] else "int")
        if dry:
            rows.append((path, warps, fp8, "-", "-", "-", "-", "-", sass))
            continue
        torch.cuda.synchronize()
        mean, ring = written(run)
        results[warps, bool(overrides)] = (mean, ring)
        one_mean, one_ring = results[1, False]
        distance = fp8_step_distance(mean[wrote], expected[wrote])
        rows.append((path, warps, fp8, int(wrote.sum()) // 256, int((mean != one_mean).sum()),
                     int((ring != one_ring).sum()), int((mean != expected).sum()),
                     int(distance.max()) if distance.numel() else 0, sass))
    if not dry:
        for tensor, name in zip(written(shipped), ("mean", "ring")):
            one = results[1, False][0 if name == "mean" else 1]
            assert torch.equal(tensor, one), f"{path}: the public function and the 1-warp launch differ in {name}"
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry", action="store_true",
                        help="no GPU: compile every row for cuda:90, fill the SASS column")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    import random

    random.seed(args.seed)
    if args.dry:
        from jitkern.testing import dry_run_gpu

        context, device = dry_run_gpu("cuda:90"), "cuda:90, compiled only (--dry)"
    else:
        import contextlib

        torch.set_default_device("cuda")
        context, device = contextlib.nullcontext(), torch.cuda.get_device_name()
    rows = []
    with context:
        for path in PATHS:
            rows += check(path, args.dry)
    header = ("kernel", "warps", "fp8", "summaries", "!=1w mean", "!=1w ring", "!=ref mean", "max steps",
              "bad merges")
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    print(f"\n{device}; Python {sys.version.split()[0]}, torch {torch.__version__}, Triton {triton.__version__}; "
          f"{time.perf_counter() - started:.1f} s")
    for row in [header] + rows:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)))


if __name__ == "__main__":
    main()
