"""Triton helpers shared by the Step5 summary kernels: the online softmax of a region,
the fp8 encoding of a summary, and the addresses of ring rows and summaries.

Some helpers take a path per target, chosen by two constexprs each kernel takes from its
``constants(key)`` (``step5.ops.common.target_paths``), so that one kernel compiles for
every GPU:

- The fp8 encoding (``HW_FP8``). On NVIDIA sm_89 and newer the hardware rounds
  (``cvt.rn.bf16.f32``, then ``cvt.rn.satfinite.e4m3x2.f32``), exactly as the spec
  asks. Elsewhere the same bytes come from integer operations: sm_80 and sm_86 have no
  fp8 conversion; AMD's hardware fp8 is the fnuz variant, not the OCP e4m3 the summary
  cache stores; and the CPU interpreter rounds fp32 -> bf16 and fp32 -> fp8 wrongly (no
  carry into the exponent, no saturation). ``test_fp8_encoding...`` checks each path
  where it runs. Nor at 4 warps, which ptxas 12.8 miscompiles
  (``step5.ops.common.hardware_fp8_is_safe``).
- The NVIDIA paths (``NVIDIA``): ``exp`` as ``tl.exp``'s own ``ex2.approx`` but flushing
  subnormals (below), a fence that keeps ptxas from sinking loads (``loads_issued``),
  and a select between pointers (``region_row``). Elsewhere (AMD, which has no PTX; the
  interpreter, which has no inline asm) ``tl.exp``, no fence, and a select between
  addresses.

``JITKERN_PORTABLE_PATHS=1`` makes an NVIDIA GPU take the portable paths (neither flag),
so they can be checked there against the references.
"""

import triton
import triton.language as tl


@triton.jit
def _bf16_to_f32(x):
    """Exact: a bf16 is the high half of the fp32 with the same value."""
    return (x.to(tl.uint16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


# Only Triton builtins below, no ``tl.standard`` helpers (``tl.max``, ``tl.zeros``): those
# are decorated when triton is first imported, and a pytest plugin importing triton before
# TRITON_INTERPRET is set leaves them compiled-mode functions the interpreter cannot call.


@triton.jit
def max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _row_max(z):
    """max_d z[d], a scalar."""
    return tl.reduce(z, 0, max_combine)


@triton.jit
def _neg_inf():
    """A float32 scalar -inf, the running maximum before any row."""
    return _row_max(tl.full((2,), float("-inf"), tl.float32))


@triton.jit
def _exp(x, NVIDIA: tl.constexpr):
    """e^x. With NVIDIA, as ``tl.exp`` computes it on NVIDIA (``ex2.approx`` of ``x * log2(e)``)
    but with subnormals flushed to zero (``.ftz``), which spares the fix-up ptxas wraps
    around each ``ex2.approx.f32``: 0.1-0.2 us of a decode step on an H200
    (``bench_step5.py``). A weight below 2^-126 is that far below the region's largest
    weight (1), so no summary byte moves by more than the spec's one step for a GPU exp (a
    zero may change sign: 0 steps). Elsewhere ``tl.exp``.
    """
    if NVIDIA:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def encode_fp8_e4m3(x, HW_FP8: tl.constexpr):
    """fp8_e4m3fn(bf16(x)) as uint8: round to nearest even twice, saturate to +-448, NaN stays NaN."""
    bits = x.to(tl.int32, bitcast=True)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    sign = (bits >> 24) & 0x80
    if not HW_FP8:
        # bf16: add 0x7FFF plus the lowest kept bit (ties to even), keep the high 16 bits
        bf16_bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        magnitude = tl.minimum((bf16_bits & 0x7FFFFFFF).to(tl.float32, bitcast=True), 448.0)
        m_bits = magnitude.to(tl.int32, bitcast=True)
        # normal fp8 (>= 2^-6): round the fp32 mantissa to 3 bits, rebias the exponent 127 -> 7
        normal = ((m_bits + 0x7FFFF + ((m_bits >> 20) & 1)) >> 20) - (120 << 3)
        # subnormal fp8: a multiple of 2^-9; adding 2^23 rounds magnitude * 2^9 to an integer (RNE)
        subnormal = ((magnitude * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
        code = tl.where(magnitude >= 0.015625, normal, subnormal)
    else:  # the hardware rounds both steps, saturating (satfinite)
        code = x.to(tl.bfloat16).to(tl.float32).to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32) & 0x7F
    code = tl.where(is_nan, 0x7F, code) | sign
    return code.to(tl.uint8)


@triton.jit
def store_summary(Mean, slot, dim, num, den, mean_stride0, BLOCK_SIZE: tl.constexpr, HW_FP8: tl.constexpr):
    """mean[slot // BLOCK_SIZE, slot % BLOCK_SIZE // 8, :] = fp8(bf16(num / max(den, 1e-20)))."""
    summary = tl.div_rn(num, tl.maximum(den, 1e-20))  # IEEE division
    address = slot // BLOCK_SIZE * mean_stride0 + slot % BLOCK_SIZE // 8 * 256
    tl.store(Mean + address + dim, encode_fp8_e4m3(summary, HW_FP8))


@triton.jit
def ring_row(Ring, base, position, RING_CAPACITY: tl.constexpr):
    """Pointer to the ring row of ``position``: row ``base + position % capacity``."""
    return Ring + (base + position % RING_CAPACITY) * 512


@triton.jit
def row_pointers(Key, Z, token, dim, key_stride0, key_stride2, z_stride0, z_stride2):
    """Pointers to ``key[token, 0, :]`` and ``z[token, 0, :]``."""
    return Key + token * key_stride0 + dim * key_stride2, Z + token * z_stride0 + dim * z_stride2


# --- the whole region at once: the same fp32 operations as the spec's row-by-row loop,
# evaluated in an order with more independent work in flight ---------------------------


@triton.jit
def _max8_combine(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7):
    return (tl.maximum(a0, b0), tl.maximum(a1, b1), tl.maximum(a2, b2), tl.maximum(a3, b3),
            tl.maximum(a4, b4), tl.maximum(a5, b5), tl.maximum(a6, b6), tl.maximum(a7, b7))


@triton.jit
def _alpha(m, m_new, NVIDIA: tl.constexpr):
    """exp(m - m_new), 0 when m is -inf (a scalar)."""
    return tl.where(m == float("-inf"), 0.0, _exp(m - m_new, NVIDIA))


@triton.jit
def _weights(z, m_new, NVIDIA: tl.constexpr):
    """exp(z - m_new), and 0 everywhere when m_new is -inf.

    Same bits as ``where(m_new == -inf, 0, exp(z - m_new))`` with the select on the scalar:
    m_new == -inf means every z of the row is -inf, and exp(-inf - 0) = +0.
    """
    return _exp(z - tl.where(m_new == float("-inf"), 0.0, m_new), NVIDIA)


@triton.jit
def _rescale_add(acc, alpha, w, key):
    """acc * alpha + w * key (no FMA: kernels compile with enable_fp_fusion=False)."""
    return acc * alpha + w * key


@triton.jit
def summarize_region(k0, z0, k1, z1, k2, z2, k3, z3, k4, z4, k5, z5, k6, z6, k7, z7, NVIDIA: tl.constexpr):
    """(num, den) of the region whose 8 raw bf16 rows are given in position order.

    Bit for bit the spec's sequential loop (m_new = max(m, max_d z_t); alpha = exp(m -
    m_new), 0 when m is -inf; w = exp(z_t - m_new); num = num*alpha + w*key_t; den =
    den*alpha + w): the same fp32 operations on the same operands, only evaluated in
    another order. The eight row
    maxima are independent reductions (one multi-operand reduce, so all of them overlap,
    and with several warps they share one exchange); then the scalar running maximum;
    then each row's weights, which depend only on that scalar; the num/den recurrence
    last. Row 0 has alpha = 0 and num = den = 0 before it, so ``0 * 0 + x`` is written
    ``x + 0.0`` (which still turns a -0 into +0) and ``den = 0 * 0 + w`` is just ``w``
    (w >= +0 or NaN).
    """
    m0, m1, m2, m3, m4, m5, m6, m7 = tl.reduce(
        (_bf16_to_f32(z0), _bf16_to_f32(z1), _bf16_to_f32(z2), _bf16_to_f32(z3),
         _bf16_to_f32(z4), _bf16_to_f32(z5), _bf16_to_f32(z6), _bf16_to_f32(z7)),
        0, _max8_combine,
    )
    # the running maximum after each row: m_new = max(m, max_d z_t[d]), from m = -inf
    m0 = tl.maximum(_neg_inf(), m0)
    m1 = tl.maximum(m0, m1)
    m2 = tl.maximum(m1, m2)
    m3 = tl.maximum(m2, m3)
    m4 = tl.maximum(m3, m4)
    m5 = tl.maximum(m4, m5)
    m6 = tl.maximum(m5, m6)
    m7 = tl.maximum(m6, m7)
    w = _weights(_bf16_to_f32(z0), m0, NVIDIA)
    num = w * _bf16_to_f32(k0) + 0.0
    den = w
    w = _weights(_bf16_to_f32(z1), m1, NVIDIA)
    alpha = _alpha(m0, m1, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k1))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z2), m2, NVIDIA)
    alpha = _alpha(m1, m2, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k2))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z3), m3, NVIDIA)
    alpha = _alpha(m2, m3, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k3))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z4), m4, NVIDIA)
    alpha = _alpha(m3, m4, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k4))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z5), m5, NVIDIA)
    alpha = _alpha(m4, m5, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k5))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z6), m6, NVIDIA)
    alpha = _alpha(m5, m6, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k6))
    den = den * alpha + w
    w = _weights(_bf16_to_f32(z7), m7, NVIDIA)
    alpha = _alpha(m6, m7, NVIDIA)
    num = _rescale_add(num, alpha, w, _bf16_to_f32(k7))
    den = den * alpha + w
    return num, den


@triton.jit
def loads_issued(anchor, NVIDIA: tl.constexpr):
    """Let no load written before this point move after it (``fence.acq_rel.cta``).

    ptxas otherwise sinks each of a region's 16 row loads down to its first use, which
    serialises them into several round trips to memory; with one warp it also deletes
    a ``bar.sync``. ``anchor`` is any int32 scalar (the asm needs an operand). Nothing
    elsewhere (AMD has no PTX; the interpreter has no inline asm).
    """
    if NVIDIA:
        tl.inline_asm_elementwise("fence.acq_rel.cta;\n\tmov.b32 $0, $1;", "=r,r", [anchor], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def ring_row_after(Ring, base, first, i: tl.constexpr, RING_CAPACITY: tl.constexpr):
    """Pointer to the ring row ``i`` positions after the one whose row index is ``first``
    (``first = position % capacity`` of a non-negative position, ``i < capacity``): one
    compare instead of a 64-bit signed remainder per row."""
    row = first + i
    row = tl.where(row >= RING_CAPACITY, row - RING_CAPACITY, row)
    return Ring + (base + row) * 512


@triton.jit
def region_row(Key, Z, Ring, token, base, first, i: tl.constexpr, ring_rows, dim,
                key_stride0, key_stride2, z_stride0, z_stride2, RING_CAPACITY: tl.constexpr, NVIDIA: tl.constexpr):
    """Row i of the region closed by ``token``: from the ring when ``i < ring_rows``, else
    token ``token - 7 + i`` of this step. The (uniform) choice is made on the pointers, so
    each row is one load, and the pointer not taken is never dereferenced. Without the
    NVIDIA paths the choice is made on the addresses as integers: AMD's compiler cannot
    lower a select between pointers into two different tensors (its
    CanonicalizePointers pass asserts), and ptxas makes longer code of it (5316 SASS
    lines for prefill instead of 5044)."""
    ring = ring_row_after(Ring, base, first, i, RING_CAPACITY)
    key_ptr, z_ptr = row_pointers(Key, Z, token - 7 + i, dim, key_stride0, key_stride2, z_stride0, z_stride2)
    from_ring = i < ring_rows
    if NVIDIA:
        return tl.load(tl.where(from_ring, ring + dim, key_ptr)), tl.load(tl.where(from_ring, ring + 256 + dim, z_ptr))
    else:
        key_row = tl.where(from_ring, (ring + dim).to(tl.int64), key_ptr.to(tl.int64)).to(Key.dtype)
        z_row = tl.where(from_ring, (ring + 256 + dim).to(tl.int64), z_ptr.to(tl.int64)).to(Z.dtype)
        return tl.load(key_row), tl.load(z_row)
