"""The fused decode step sums each window column's rows in the compressor's order, in the
compiled code (no GPU: compiled for cuda:90, cuda:80 and hip:gfx942, the targets of the
shipped manifests, read from Triton's TTGIR).

The interpreter cannot check this: it sums with NumPy whatever the tiling. On a GPU, a
reduction over a tile's rows follows the tile's layout, which Triton picks from the
tile's shape, ``num_warps`` and the loads' vector width (the state cache's alignment).
The fused step's tilings differ from the compressor's where the bits do not depend on
them; here every window reduction of the shipped tilings (on each target, for every
alignment of the cache) and of the H200 sweep's must spread a column's rows over
registers, lanes and warps exactly as the compressor's do.
"""

from __future__ import annotations

import collections

import pytest
from dsv4_layouts import STATE_LAYOUTS, compile_for, row_reductions

from deepseek_v4 import CompressWindowsKernel, DecodeStepKernel

pytestmark = pytest.mark.compiled

SHIPPED = [(512, 4), (512, 128), (128, 4), (128, 128)]


def _keys(head_dim: int, ratio: int):
    fused = DecodeStepKernel().get_warmup_keys(head_dim=head_dim, compress_ratio=ratio, index_dtypes=["int64"])[0]
    compressor = CompressWindowsKernel().get_warmup_keys(head_dim=head_dim, compress_ratio=ratio,
                                                         index_dtypes=["int64"])[0]
    return fused, compressor


def _reductions(kernel, key, target, layout, constants=None):
    found = row_reductions(compile_for(kernel, key, target, layout, constants).asm["ttgir"])
    assert found, "no row reduction found: has the TTGIR format changed?"
    return collections.Counter(found)


@pytest.mark.parametrize("target", ["cuda:90", "cuda:80", "hip:gfx942"])
@pytest.mark.parametrize("head_dim,ratio", SHIPPED, ids=str)
def test_shipped_tilings_reduce_as_the_compressor(head_dim, ratio, target, triton_cache):
    fused, compressor = _keys(head_dim, ratio)
    for name, layout in STATE_LAYOUTS.items():
        expected = _reductions(CompressWindowsKernel(), compressor, target, layout)
        assert _reductions(DecodeStepKernel(), fused, target, layout) == expected, f"{name} state cache"


@pytest.mark.parametrize("head_dim,ratio", SHIPPED, ids=str)
def test_sweep_tilings_reduce_as_the_compressor_on_cuda90(head_dim, ratio, triton_cache):
    """The H200 sweep may pick any of them to ship (then the test above checks it for AMD)."""
    from benchmarks.bench_deepseek_v4 import decode_variants

    fused, compressor = _keys(head_dim, ratio)
    tilings = {variant["tiling"] for variant in decode_variants(head_dim, ratio)}
    for name in ("aligned", "odd strides"):
        layout = STATE_LAYOUTS[name]
        expected = _reductions(CompressWindowsKernel(), compressor, "cuda:90", layout)
        for tiling in tilings:
            constants = dict(SCAN=tiling.scan, BLOCK_D=tiling.block_d, PROGRAM_D=tiling.program_d,
                             num_warps=tiling.num_warps)
            assert _reductions(DecodeStepKernel(), fused, "cuda:90", layout, constants) == expected, (
                f"{tiling}, {name} state cache")


def test_the_fused_step_has_no_barrier_between_its_stores_and_the_windows(triton_cache):
    """The window's own row comes from the token's inputs: no ``tl.debug_barrier`` (which
    TTGIR shows as ``gpu.barrier``; the reductions' own barriers come later, in LLVM)."""
    for head_dim, ratio in SHIPPED:
        fused, _ = _keys(head_dim, ratio)
        ttgir = compile_for(DecodeStepKernel(), fused, "cuda:90").asm["ttgir"]
        assert "gpu.barrier" not in ttgir
