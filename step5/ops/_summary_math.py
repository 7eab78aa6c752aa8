"""Triton helpers shared by the Step5 summary kernels: one row of the online softmax,
the fp8 encoding of a summary, and the addresses of ring rows and summaries.

The bf16 and fp8 conversions are done with integer operations rather than Triton's
``.to()``: Triton's CPU interpreter (our CI) rounds fp32 -> bf16 and fp32 -> fp8 wrongly
(no carry into the exponent, no saturation), so a kernel built on ``.to()`` could not be
checked byte for byte on the CPU. The integer forms below are exact on both the
interpreter and the GPU and cost a handful of ALU operations per byte of a
memory-bound kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

REGION = 8  # positions per region
DIM = 256  # index-head dimension
RING_ROW = 512  # a ring row is [key (256) | z (256)], bf16


@triton.jit
def _bf16_to_f32(x):
    """Exact: a bf16 is the high half of the fp32 with the same value."""
    return (x.to(tl.uint16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


# Only Triton builtins below, no ``tl.standard`` helpers (``tl.max``, ``tl.zeros``): those
# are decorated when triton is first imported, and a pytest plugin importing triton before
# TRITON_INTERPRET is set leaves them compiled-mode functions the interpreter cannot call.


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _row_max(z):
    """max_d z[d], a scalar."""
    return tl.reduce(z, 0, _max_combine)


@triton.jit
def _neg_inf():
    """A float32 scalar -inf, the running maximum before any row."""
    return _row_max(tl.full((2,), float("-inf"), tl.float32))


@triton.jit
def _zeros():
    return tl.full((256,), 0.0, tl.float32)


@triton.jit
def _accumulate(num, den, m, key, z):
    """One row of the region's online softmax, with a scalar running maximum ``m``.

    m_new = max(m, max_d z[d]);  alpha = exp(m - m_new)  (0 when m is -inf)
    w = exp(z - m_new)  (0 everywhere when m_new is -inf);  num = num*alpha + w*key;
    den = den*alpha + w. Kernels calling this compile with enable_fp_fusion=False: no FMA.
    """
    m_new = tl.maximum(m, _row_max(z))
    alpha = tl.where(m == float("-inf"), 0.0, tl.exp(m - m_new))
    w = tl.where(m_new == float("-inf"), 0.0, tl.exp(z - m_new))
    num = num * alpha + w * key
    den = den * alpha + w
    return num, den, m_new


@triton.jit
def _fp8_e4m3_bytes(x):
    """fp8_e4m3fn(bf16(x)) as uint8: round to nearest even twice, saturate to +-448, NaN stays NaN."""
    bits = x.to(tl.int32, bitcast=True)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    sign = (bits >> 24) & 0x80
    # bf16: add 0x7FFF plus the lowest kept bit (ties to even), keep the high 16 bits
    bf16_bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    magnitude = tl.minimum((bf16_bits & 0x7FFFFFFF).to(tl.float32, bitcast=True), 448.0)
    m_bits = magnitude.to(tl.int32, bitcast=True)
    # normal fp8 (>= 2^-6): round the fp32 mantissa to 3 bits, rebias the exponent 127 -> 7
    normal = ((m_bits + 0x7FFFF + ((m_bits >> 20) & 1)) >> 20) - (120 << 3)
    # subnormal fp8: a multiple of 2^-9; adding 2^23 rounds magnitude * 2^9 to an integer (RNE)
    subnormal = ((magnitude * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(magnitude >= 0.015625, normal, subnormal)
    code = tl.where(is_nan, 0x7F, code) | sign
    return code.to(tl.uint8)


@triton.jit
def _store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE: tl.constexpr):
    """mean[slot // BLOCK_SIZE, slot % BLOCK_SIZE // 8, :] = fp8(bf16(num / max(den, 1e-20)))."""
    summary = tl.div_rn(num, tl.maximum(den, 1e-20))  # IEEE division
    address = slot // BLOCK_SIZE * mean_stride0 + slot % BLOCK_SIZE // 8 * 256
    tl.store(Mean + address + dim, _fp8_e4m3_bytes(summary))


@triton.jit
def _ring_row(Ring, base, position, RING_CAPACITY: tl.constexpr):
    """Pointer to the ring row of ``position``: row ``base + position % capacity``."""
    return Ring + (base + position % RING_CAPACITY) * 512


@triton.jit
def _row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2):
    """Pointers to ``key[token, 0, :]`` and ``z[token, 0, :]``."""
    return Key + token * key_stride0 + dim * key_stride2, Z + token * z_stride0 + dim * z_stride2
