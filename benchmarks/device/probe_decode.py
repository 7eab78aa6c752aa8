"""Where the GPU time of a Step5 decode step goes (H200, CUDA graph, us per step).

    python benchmarks/device/probe_decode.py

Times, each in a CUDA graph of 20 steps: an empty kernel (1 and 1024 programs); the
shipped decode kernel at batch 1 and 1024 with no, one in eight, or every token closing a
region, at 1, 2 and 4 warps; and variants of its closing path (``MATH``): 0 stores the
key bytes instead of a summary (no math), 1 is the shipped math, 2 converts to fp8 with
the hardware (``cvt.rn.bf16`` then ``cvt.rn.satfinite.e4m3x2``), 3 also evaluates the
region row after row with an exp that flushes subnormals (``ex2.approx.ftz``), 4 keeps
the shipped order with that exp; 2-4 at 1, 2 and 4 warps, with how many summary bytes
differ from the shipped kernel's.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from benchmarks.bench_step5 import Timer, rows  # noqa: E402
from step5 import Step5CSATailRing, Step5SparseSummaryCache, Step5SummaryCacheSpec  # noqa: E402
from step5.ops import _summary_math as sm  # noqa: E402
from step5.ops.summary_update import UpdateDecodeKernel  # noqa: E402


@triton.jit
def _empty_kernel(X):
    pass


@triton.jit
def _bits(x):
    return x.to(tl.int16, bitcast=True)


@triton.jit
def _exp_ftz(x):
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                     dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _exp_of(x, FTZ: tl.constexpr):
    if FTZ:
        return _exp_ftz(x)
    else:
        return tl.exp(x)


@triton.jit
def _reordered_region(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, k7, z7, FTZ: tl.constexpr):
    """``_summarize_region``'s order (eight maxima at once, then the recurrence), its exp chosen."""
    zs = (sm._bf16_to_f32(z0), sm._bf16_to_f32(z1), sm._bf16_to_f32(z2), sm._bf16_to_f32(z3),
          sm._bf16_to_f32(z4), sm._bf16_to_f32(z5), sm._bf16_to_f32(z6), sm._bf16_to_f32(z7))
    keys = (k0, k1, k2, k3, k4, k5, k6, k7)
    m0, m1, m2, m3, m4, m5, m6, m7 = tl.reduce(zs, 0, sm._max8_combine)
    m0 = tl.maximum(sm._neg_inf(), m0)
    m1 = tl.maximum(m0, m1)
    m2 = tl.maximum(m1, m2)
    m3 = tl.maximum(m2, m3)
    m4 = tl.maximum(m3, m4)
    m5 = tl.maximum(m4, m5)
    m6 = tl.maximum(m5, m6)
    m7 = tl.maximum(m6, m7)
    ms = (m0, m1, m2, m3, m4, m5, m6, m7)
    w = _exp_of(zs[0] - tl.where(m0 == float("-inf"), 0.0, m0), FTZ)
    num = w * sm._bf16_to_f32(k0) + 0.0
    den = w
    for i in tl.static_range(1, 8):
        w = _exp_of(zs[i] - tl.where(ms[i] == float("-inf"), 0.0, ms[i]), FTZ)
        alpha = tl.where(ms[i - 1] == float("-inf"), 0.0, _exp_of(ms[i - 1] - ms[i], FTZ))
        num = num * alpha + w * sm._bf16_to_f32(keys[i])
        den = den * alpha + w
    return num, den


@triton.jit
def _summary_variant(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, k7, z7, MATH: tl.constexpr):
    if MATH == 3:
        keys = (k0, k1, k2, k3, k4, k5, k6, k7)
        zs = (z0, z1, z2, z3, z4, z5, z6, z7)
        m = sm._neg_inf()
        num = sm._zeros()
        den = sm._zeros()
        for i in tl.static_range(8):
            z = sm._bf16_to_f32(zs[i])
            m_new = tl.maximum(m, sm._row_max(z))
            alpha = tl.where(m == float("-inf"), 0.0, _exp_ftz(m - m_new))
            w = _exp_ftz(z - tl.where(m_new == float("-inf"), 0.0, m_new))
            num = num * alpha + w * sm._bf16_to_f32(keys[i])
            den = den * alpha + w
            m = m_new
        return num, den
    elif MATH == 4:
        return _reordered_region(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, k7, z7, True)
    else:
        return sm._summarize_region(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, k7, z7)


@triton.jit
def _probe_decode_kernel(
    Key, Z, Slots, Positions, RingBase, Mean, Ring,
    key_stride0, key_stride2, z_stride0, z_stride2, positions_stride, mean_stride0,
    BLOCK_SIZE: tl.constexpr, RING_CAPACITY: tl.constexpr, MATH: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    dim = tl.arange(0, 256)
    slot = tl.load(Slots + token).to(tl.int64)
    position = tl.load(Positions + token * positions_stride).to(tl.int64)
    base = tl.load(RingBase + token).to(tl.int64)
    key_ptr, z_ptr = sm._row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2)
    key = tl.load(key_ptr)
    z = tl.load(z_ptr)
    if (slot >= 0) & (base >= 0) & (position >= 0):
        if position % 8 == 7:
            first = (position - 7) % RING_CAPACITY
            r0 = sm._ring_row_after(Ring, base, first, 0, RING_CAPACITY)
            r1 = sm._ring_row_after(Ring, base, first, 1, RING_CAPACITY)
            r2 = sm._ring_row_after(Ring, base, first, 2, RING_CAPACITY)
            r3 = sm._ring_row_after(Ring, base, first, 3, RING_CAPACITY)
            r4 = sm._ring_row_after(Ring, base, first, 4, RING_CAPACITY)
            r5 = sm._ring_row_after(Ring, base, first, 5, RING_CAPACITY)
            r6 = sm._ring_row_after(Ring, base, first, 6, RING_CAPACITY)
            k0, z0 = tl.load(r0 + dim), tl.load(r0 + 256 + dim)
            k1, z1 = tl.load(r1 + dim), tl.load(r1 + 256 + dim)
            k2, z2 = tl.load(r2 + dim), tl.load(r2 + 256 + dim)
            k3, z3 = tl.load(r3 + dim), tl.load(r3 + 256 + dim)
            k4, z4 = tl.load(r4 + dim), tl.load(r4 + 256 + dim)
            k5, z5 = tl.load(r5 + dim), tl.load(r5 + 256 + dim)
            k6, z6 = tl.load(r6 + dim), tl.load(r6 + 256 + dim)
            sm._loads_issued(slot.to(tl.int32))
            address = slot // BLOCK_SIZE * mean_stride0 + slot % BLOCK_SIZE // 8 * 256
            if MATH == 0:
                mixed = _bits(k0) ^ _bits(k1) ^ _bits(k2) ^ _bits(k3) ^ _bits(k4) ^ _bits(k5) ^ _bits(k6) ^ _bits(key)
                mixed ^= _bits(z0) ^ _bits(z1) ^ _bits(z2) ^ _bits(z3) ^ _bits(z4) ^ _bits(z5) ^ _bits(z6) ^ _bits(z)
                tl.store(Mean + address + dim, mixed.to(tl.uint8))
            else:
                num, den = _summary_variant(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, key, z, MATH)
                summary = tl.div_rn(num, tl.maximum(den, 1e-20))
                if MATH == 1:
                    code = sm._fp8_e4m3_bytes(summary)
                else:
                    bits = summary.to(tl.int32, bitcast=True)
                    nan_sign = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, (bits >> 24) & 0x80, 0)
                    fp8 = summary.to(tl.bfloat16).to(tl.float32).to(tl.float8e4nv)
                    code = (fp8.to(tl.uint8, bitcast=True).to(tl.int32) | nan_sign).to(tl.uint8)
                tl.store(Mean + address + dim, code)
        else:
            row = sm._ring_row(Ring, base, position, RING_CAPACITY)
            tl.store(row + dim, key)
            tl.store(row + 256 + dim, z)


def decode_case(batch: int, closing: str, device):
    """Inputs of a decode step at ``batch``: no, one in eight, or every token closing."""
    block_size, capacity, span = 64, 8, 512
    ring = Step5CSATailRing(batch, batch, capacity=capacity, device=device)
    for request in range(batch):
        ring.allocate(request)
    ring.rows.copy_(torch.randn(ring.rows.shape, device=device).mul(3))
    mean = Step5SummaryCacheSpec(block_size).allocate(batch * span // block_size, device)
    regions = torch.randint(1, span // 8, (batch,))
    offsets = torch.randint(0, 7, (batch,))
    if closing == "all":
        offsets[:] = 7
    elif closing == "1/8":
        offsets[: max(1, batch // 8)] = 7
    positions = regions * 8 + offsets
    slots = torch.arange(batch) * span + positions
    ring.prepare(list(range(batch)), positions.tolist(), [1] * batch)
    key, z = rows(batch, device)
    return Step5SparseSummaryCache(mean), key, z, slots.to(device), positions.to(device), ring


def main() -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    timer = Timer(device, steps=20)
    table = []
    x = torch.zeros(1, device=device)
    for grid in (1, 1024):
        table.append((f"empty kernel, {grid} programs", timer(lambda: _empty_kernel[(grid,)](x, num_warps=1))))
    decode = UpdateDecodeKernel()
    for batch in (1, 1024):
        for closing in ("none", "1/8", "all"):
            cache, key, z, slots, positions, ring = decode_case(batch, closing, device)
            spec = decode.launch_spec(key, z, slots, positions, ring.metadata().base[:batch], cache.mean, ring.rows,
                                      ring.capacity)
            us = timer(lambda: decode.launch(spec))
            table.append((f"decode {batch:>4}, closing {closing:>4}, shipped", us))
            if closing == "none":
                continue
            shipped = None
            for math, warps in [(1, 1), (0, 1)] + [(m, w) for m in (2, 3, 4) for w in (1, 2, 4)]:
                kwargs = dict(spec.kwargs, MATH=math, num_warps=warps)
                cache.mean.fill_(0x55)
                ring_before = ring.rows.clone()
                _probe_decode_kernel[spec.grid](**kwargs)
                ring.rows.copy_(ring_before)
                result = cache.mean.clone()
                shipped = result if math == 1 else shipped
                diff = "" if math in (0, 1) else f" ({int((result != shipped).sum())} bytes differ)"
                us = timer(lambda: _probe_decode_kernel[spec.grid](**kwargs))
                table.append((f"decode {batch:>4}, closing {closing:>4}, MATH {math}, {warps} warps{diff}", us))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
    for name, us in table:
        print(f"{name:<52} {us:7.2f} us")


if __name__ == "__main__":
    main()
