// AVX2 integer dot products of quantized weights with int8 activations (q8_dot.h); compiled with
// -mavx2 -mfma -mf16c under the rules of kernels_avx2.h (no inline functions shared with other
// files: this file has its own helpers). Scalar reference: q8_dot.cpp, int8_dot_rows_scalar, whose
// bits these kernels give exactly (the order of the f32 operations is q8_dot.h's).
// Compiled three times: as itself (namespace hill::avx2); through q8_dot_vnni.cpp with -mavxvnni
// (HILL_Q8_NS = avx_vnni), where the byte and int16 products add their lanes with AVX-VNNI's
// vpdpbusd / vpdpwssd instead of maddubs + madd + add: the same exact integer sums, fewer
// instructions; and through q8_dot_avx512.cpp with AVX-512 F/BW/VL/VNNI (avx512_vnni): the same
// 256-bit instructions in their EVEX form, and a prefill kernel of 16 rows per 512-bit vector.
//
// The products of bytes: _mm256_maddubs_epi16 multiplies unsigned bytes by signed bytes and adds
// adjacent pairs into int16 lanes; _mm256_madd_epi16 then adds adjacent int16 pairs (times a
// factor: 1, or a k-quant's scales) into int32 lanes. Signed weights (Q8_0, Q4_0, Q5_0, IQ4_NL)
// go in as |w| with the activation's sign flipped where w < 0 (_mm256_sign_epi8): the same
// products. No int16 sum saturates: a pair is at most 2 · 128 · 127 = 32512 (signed weights,
// activations in [-127, 127]) or 2 · 63 · 127 (unsigned weights, at most 6 bits).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/kernels_avx2.h"
#include "compute/q8_dot.h"
#include "compute/vnni.h"

#ifndef HILL_Q8_NS
#define HILL_Q8_NS avx2
#endif

namespace hill::HILL_Q8_NS {

namespace {

inline void prefetch(const uint8_t * p) {
    _mm_prefetch(reinterpret_cast<const char *>(p), _MM_HINT_T0);
}

inline float f16_at(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m256i load32(const void * p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): q8_dot.h's order.
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

// 16 bytes of nibbles: weight j < 16 the low nibble of qs[j], j + 16 the high one, as 32 bytes.
inline __m256i nibbles(const uint8_t * qs) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// Byte j = 0x10 where bit j of qh is set, else 0.
inline __m256i fifth_bits(const uint8_t * p) {
    uint32_t qh;
    std::memcpy(&qh, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int(qh)),
        _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// ---- 32-weight blocks ----
// Each gives the block's 32 weights as bytes (signed: w = d · q; unsigned: w = d · q + m).

struct w_q8_0 {
    static constexpr size_t bytes = sizeof(block_q8_0);
    static constexpr bool is_signed = true, offset = false;
    static constexpr int bias = 0;
    static __m256i q(const uint8_t * b) { return load32(b + offsetof(block_q8_0, qs)); }
};

// Q4_0 and Q5_0 also give their unsigned codes qu = q + bias: the decode and batch tiles multiply
// those and subtract bias · Σ q8 per lane (one product per activation block, shared by the rows).
struct w_q4_0 {
    static constexpr size_t bytes = sizeof(block_q4_0);
    static constexpr bool offset = false;
    static constexpr int bias = 8;
    static __m256i qu(const uint8_t * b) { return nibbles(b + offsetof(block_q4_0, qs)); }
    static __m256i q(const uint8_t * b) { return _mm256_sub_epi8(qu(b), _mm256_set1_epi8(8)); }
};

struct w_q4_1 {
    static constexpr size_t bytes = sizeof(block_q4_1);
    static constexpr bool is_signed = false, offset = true;
    static constexpr int bias = 0;
    static __m256i q(const uint8_t * b) { return nibbles(b + offsetof(block_q4_1, qs)); }
};

struct w_q5_0 {
    static constexpr size_t bytes = sizeof(block_q5_0);
    static constexpr bool offset = false;
    static constexpr int bias = 16;
    static __m256i qu(const uint8_t * b) {
        return _mm256_or_si256(nibbles(b + offsetof(block_q5_0, qs)), fifth_bits(b + offsetof(block_q5_0, qh)));
    }
    static __m256i q(const uint8_t * b) { return _mm256_sub_epi8(qu(b), _mm256_set1_epi8(16)); }
};

struct w_q5_1 {
    static constexpr size_t bytes = sizeof(block_q5_1);
    static constexpr bool is_signed = false, offset = true;
    static constexpr int bias = 0;
    static __m256i q(const uint8_t * b) {
        return _mm256_or_si256(nibbles(b + offsetof(block_q5_1, qs)), fifth_bits(b + offsetof(block_q5_1, qh)));
    }
};

struct w_iq4_nl {
    static constexpr size_t bytes = sizeof(block_iq4_nl);
    static constexpr bool is_signed = true, offset = false;
    static constexpr int bias = 0;
    static __m256i q(const uint8_t * b) {
        const __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kvalues_iq4nl)));
        return _mm256_shuffle_epi8(table, nibbles(b + offsetof(block_iq4_nl, qs)));
    }
};

// Unsigned bytes u times signed bytes s, the 4 products of each int32 lane added (exact: no int16
// sum saturates, see the top), into acc.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(HILL_VNNI)
    return vnni_dpbusd(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// acc + the int16 pairs of p times those of f, added per int32 lane (exact).
inline __m256i dot_i16(__m256i acc, __m256i p, __m256i f) {
#if defined(HILL_VNNI)
    return vnni_dpwssd(acc, p, f);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, f));
#endif
}

// The 8 int32 lane sums of the block's products (lane i: weights 4i .. 4i + 3).
template <class W>
inline __m256i block_lanes(__m256i q, const int8_t * x) {
    const __m256i xv = load32(x);
    return W::is_signed ? dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q))
                        : dot_u8s8(_mm256_setzero_si256(), q, xv);
}

// R weight rows (rb bytes apart) times T activation rows (ldq bytes apart), all nb blocks; writes
// y[t · ldy + r]. pf: the next rows to prefetch (R · bytes per block, in address order), or null.
template <class W, int R, int T>
void legacy_tile(const uint8_t * w, size_t rb, int64_t nb, const uint8_t * xq, size_t ldq, float * y, int64_t ldy,
                 const uint8_t * pf) {
    __m256 a[R][T];
    float o[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) a[r][t] = _mm256_setzero_ps(), o[r][t] = 0.0f;
    }
    for (int64_t ib = 0; ib < nb; ++ib) {
        if (pf != nullptr) {
            for (size_t off = 0; off < R * W::bytes; off += 64) prefetch(pf + off);
            pf += R * W::bytes;
        }
        // d · dx as a product of two broadcasts: the scalar product's bits in every lane.
        __m256 dx[T];
        __m256i xc[T];  // bias types: −bias · Σ q8 per lane (VNNI), bias · q8 summed in int16 pairs (AVX2)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            const auto * xb = reinterpret_cast<const act_q8 *>(xq + size_t(t) * ldq) + ib;
            dx[t] = _mm256_broadcast_ss(&xb->d);
            if constexpr (W::bias != 0) {
#if defined(HILL_VNNI)
                xc[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                         dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(W::bias), load32(xb->q)));
#else
                xc[t] = _mm256_maddubs_epi16(_mm256_set1_epi8(W::bias), load32(xb->q));
#endif
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const uint8_t * b = w + size_t(r) * rb + size_t(ib) * W::bytes;
            __m256i q;
            if constexpr (W::bias != 0) {
                q = W::qu(b);
            } else {
                q = W::q(b);
            }
            const __m256 d = _mm256_set1_ps(f16_at(b));
            float m = 0.0f;
            if constexpr (W::offset) m = f16_at(b + 2);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const auto * xb = reinterpret_cast<const act_q8 *>(xq + size_t(t) * ldq) + ib;
                __m256i s;
                if constexpr (W::bias != 0) {
#if defined(HILL_VNNI)
                    s = dot_u8s8(xc[t], q, load32(xb->q));
#else
                    s = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(q, load32(xb->q)), xc[t]),
                                          _mm256_set1_epi16(1));
#endif
                } else {
                    s = block_lanes<W>(q, xb->q);
                }
                a[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx[t]), _mm256_cvtepi32_ps(s), a[r][t]);
                if constexpr (W::offset) o[r][t] = __builtin_fmaf(m * xb->d, float(xb->sum), o[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum(a[r][t]) + o[r][t];
    }
}

// ---- k-quant super-blocks ----
// Each unpacks one block into 8 vectors of 32 unsigned weight bytes (sub-block u: weights
// 32u .. 32u + 31), the int16 factors of madd per sub-block (the 16-weight groups' scales: lanes
// 0..7 group 2u, lanes 8..15 group 2u + 1), the groups' min factors mc (16 int16: at most
// 32 · 128, times a group's Σ q8 of at most 16 · 127 and summed in pairs, within int32), d and dm
// (q8_dot.h).

struct k_unpacked {
    __m256i q[8];
    __m256i sc[8];
    __m256i mc;
    float d, dm;
};

template <bool q5>
struct w_q45_k {
    static constexpr size_t bytes = q5 ? sizeof(block_q5_k) : sizeof(block_q4_k);
    static constexpr bool fold = false;
    static void unpack(const uint8_t * b, k_unpacked & k) {
        k.d = f16_at(b);
        k.dm = f16_at(b + 2);
        // The 8 6-bit scales and mins (ggml_type.h) with 32-bit word operations: bytes u of
        // w0, w1, w2 are scales[u], scales[u + 4], scales[u + 8].
        uint32_t w[3];
        std::memcpy(w, b + 4, 12);
        const uint32_t sc_lo = w[0] & 0x3f3f3f3f, mn_lo = w[1] & 0x3f3f3f3f;
        const uint32_t sc_hi = (w[2] & 0x0f0f0f0f) | ((w[0] >> 6) & 0x03030303) << 4;
        const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0f) | ((w[1] >> 6) & 0x03030303) << 4;
        // sc16: the 8 scales as int16 in both 128-bit halves; sub-block u's factor is lane u in all 16.
        const __m256i sc16 =
            _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(sc_hi), int(sc_lo))));
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u)
            k.sc[u] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(short(0x0101 * 2 * u + 0x0100)));
        // mc: min u in int16 lanes 2u and 2u + 1.
        const __m128i mn16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(mn_hi), int(mn_lo)));
        k.mc = _mm256_set_m128i(_mm_unpackhi_epi16(mn16, mn16), _mm_unpacklo_epi16(mn16, mn16));
        const uint8_t * qs = b + (q5 ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs));
        const __m256i m4 = _mm256_set1_epi8(15);
#pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
            const __m256i v = load32(qs + 32 * i);
            k.q[2 * i] = _mm256_and_si256(v, m4);
            k.q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        if constexpr (q5) {
            const __m256i qh = load32(b + offsetof(block_q5_k, qh));
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) {
                const __m256i bit = _mm256_set1_epi8(char(1 << u));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
                k.q[u] = _mm256_or_si256(k.q[u], _mm256_and_si256(set, _mm256_set1_epi8(16)));
            }
        }
    }
};

struct w_q6_k {
    static constexpr size_t bytes = sizeof(block_q6_k);
    static constexpr bool fold = true;
    static void unpack(const uint8_t * b, k_unpacked & k) {
        k.d = k.dm = f16_at(b + offsetof(block_q6_k, d));
        const auto * scales = reinterpret_cast<const int8_t *>(b + offsetof(block_q6_k, scales));
        // Sub-block u's factors: scale 2u in the low 128-bit half, 2u + 1 in the high one, picked
        // from the 8 int16 scales of its half of the block (shuffle control: int16 lane i of a half).
        const __m128i s16_lo = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(scales)));
        const __m128i s16_hi = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(scales + 8)));
        const __m256i half[2] = {_mm256_broadcastsi128_si256(s16_lo), _mm256_broadcastsi128_si256(s16_hi)};
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) {
            const int i0 = (2 * u) % 8, i1 = (2 * u + 1) % 8;
            const __m256i ctl = _mm256_set_m128i(_mm_set1_epi16(short(0x0101 * 2 * i1 + 0x0100)),
                                                 _mm_set1_epi16(short(0x0101 * 2 * i0 + 0x0100)));
            k.sc[u] = _mm256_shuffle_epi8(half[u / 4], ctl);
        }
        // 32 · sc for each of the 16 groups: the 16 scale bytes sign-extended, shifted by 5.
        k.mc = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(scales))), 5);
        const uint8_t * ql = b + offsetof(block_q6_k, ql);
        const uint8_t * qh = b + offsetof(block_q6_k, qh);
        const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3 << 4);
#pragma GCC unroll 8
        for (int n = 0; n < 2; ++n) {
            const __m256i l0 = load32(ql + 64 * n), l1 = load32(ql + 64 * n + 32), h = load32(qh + 32 * n);
            // qh bits 2k, 2k + 1 of byte l are bits 4, 5 of weight l of sub-block 4n + k.
            k.q[4 * n + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m2));
            k.q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m2));
            k.q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m2));
            k.q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi16(h, 2), m2));
        }
    }
};

// R weight rows (rb bytes apart) times T activation rows (ldq bytes apart), all nb super-blocks;
// writes y[t · ldy + r]. Per block and (row, activation row) the 8 int32 lanes of the products
// (lane i: bytes 4i .. 4i + 3 of each sub-block, times their group's scale) and of the mins go into
// 8 f32 lane accumulators, reduced once at the end (q8_dot.h's order). pf: the next rows to
// prefetch (R · bytes per block, in address order), or null.
template <class W, int R, int T>
void k_tile(const uint8_t * w, size_t rb, int64_t nb, const uint8_t * xq, size_t ldq, float * y, int64_t ldy,
            const uint8_t * pf) {
    __m256 a[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) a[r][t] = _mm256_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ++ib) {
        if (pf != nullptr) {
            for (size_t off = 0; off < R * W::bytes; off += 64) prefetch(pf + off);
            pf += R * W::bytes;
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            k_unpacked k;
            W::unpack(w + size_t(r) * rb + size_t(ib) * W::bytes, k);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const auto * xb = reinterpret_cast<const act_q8k *>(xq + size_t(t) * ldq) + ib;
                __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int u = 0; u < 8; ++u) {
                    s = dot_i16(s, _mm256_maddubs_epi16(k.q[u], load32(xb->q + 32 * u)), k.sc[u]);
                }
                const __m256i m = _mm256_madd_epi16(k.mc, load32(xb->bsum));  // Σ mc · Σ q8, in pairs of groups
                // d · dx (and −(dm · dx) = (−dm) · dx) as products of broadcasts: the scalar bits.
                const __m256 dx = _mm256_broadcast_ss(&xb->d);
                const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(k.d), dx);
                if constexpr (W::fold) {
                    a[r][t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(_mm256_sub_epi32(s, m)), a[r][t]);
                } else {
                    a[r][t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), a[r][t]);
                    a[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(-k.dm), dx), _mm256_cvtepi32_ps(m), a[r][t]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum(a[r][t]);
    }
}

// Activation rows per tile: each weight block is unpacked once per tile.
constexpr int legacy_t_tile = 4;
constexpr int legacy_r_tile = 2;  // weight rows per tile with several activation rows
constexpr int k_t_tile = 4;
constexpr int k_r_tile = 2;

template <class W, int R>
void legacy_tiles(const uint8_t * w, size_t rb, int64_t nb, const uint8_t * xq, size_t ldq, int64_t n_tok, float * y,
                  int64_t ldy, const uint8_t * pf) {
    int64_t t = 0;
    for (; t + legacy_t_tile <= n_tok; t += legacy_t_tile)
        legacy_tile<W, R, legacy_t_tile>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, t == 0 ? pf : nullptr);
    const uint8_t * p = t == 0 ? pf : nullptr;
    switch (n_tok - t) {
        case 3:
            legacy_tile<W, R, 3>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        case 2:
            legacy_tile<W, R, 2>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        case 1:
            legacy_tile<W, R, 1>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        default:
            break;
    }
}

// Rows in groups of four with one activation row (four independent accumulator chains, the
// weights of four rows streamed together; the group after next prefetched as the kernel goes, one
// sequential stream), one at a time with several (each block unpacked once per tile of activation
// rows; the row four ahead prefetched). Prefetch distances measured with bench_gemm (one thread,
// process CPU time per pass on the loaded 2-core VM): without prefetch Q4_0/Q8_0 took 2.5× the
// time; two groups ahead instead of one took ~10% less for Q4_0, Q8_0 and Q4_K.
template <class W>
void legacy_rows(const uint8_t * w, size_t rb, int64_t n_cols, const uint8_t * xq, size_t ldq, int64_t n_tok, float * y,
                 int64_t ldy, int64_t n_rows) {
    const int64_t nb = n_cols / 32;
    int64_t r = 0;
    if (n_tok == 1) {
        for (; r + 4 <= n_rows; r += 4) {
            const uint8_t * g = w + size_t(r) * rb;
            legacy_tile<W, 4, 1>(g, rb, nb, xq, ldq, y + r, ldy, r + 12 <= n_rows ? g + 8 * rb : g);
        }
    }
    for (; r + legacy_r_tile <= n_rows; r += legacy_r_tile) {
        const uint8_t * g = w + size_t(r) * rb;
        legacy_tiles<W, legacy_r_tile>(g, rb, nb, xq, ldq, n_tok, y + r, ldy,
                                       r + 2 * legacy_r_tile <= n_rows ? g + legacy_r_tile * rb : g);
    }
    for (; r < n_rows; ++r) {
        const uint8_t * row = w + size_t(r) * rb;
        legacy_tiles<W, 1>(row, rb, nb, xq, ldq, n_tok, y + r, ldy, r + 1 < n_rows ? row + rb : row);
    }
}

template <class W, int R>
void k_tiles(const uint8_t * w, size_t rb, int64_t nb, const uint8_t * xq, size_t ldq, int64_t n_tok, float * y,
             int64_t ldy, const uint8_t * pf) {
    int64_t t = 0;
    for (; t + k_t_tile <= n_tok; t += k_t_tile)
        k_tile<W, R, k_t_tile>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, t == 0 ? pf : nullptr);
    const uint8_t * p = t == 0 ? pf : nullptr;
    switch (n_tok - t) {
        case 3:
            k_tile<W, R, 3>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        case 2:
            k_tile<W, R, 2>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        case 1:
            k_tile<W, R, 1>(w, rb, nb, xq + size_t(t) * ldq, ldq, y + t * ldy, ldy, p);
            break;
        default:
            break;
    }
}

template <class W>
void k_rows(const uint8_t * w, size_t rb, int64_t n_cols, const uint8_t * xq, size_t ldq, int64_t n_tok, float * y,
            int64_t ldy, int64_t n_rows) {
    const int64_t nb = n_cols / 256;
    int64_t r = 0;
    if (n_tok == 1) {
        for (; r + 4 <= n_rows; r += 4) {
            const uint8_t * g = w + size_t(r) * rb;
            k_tile<W, 4, 1>(g, rb, nb, xq, ldq, y + r, ldy, r + 12 <= n_rows ? g + 8 * rb : g);
        }
    }
    for (; r + k_r_tile <= n_rows; r += k_r_tile) {
        const uint8_t * g = w + size_t(r) * rb;
        k_tiles<W, k_r_tile>(g, rb, nb, xq, ldq, n_tok, y + r, ldy, r + 2 * k_r_tile <= n_rows ? g + k_r_tile * rb : g);
    }
    for (; r < n_rows; ++r) {
        const uint8_t * row = w + size_t(r) * rb;
        k_tiles<W, 1>(row, rb, nb, xq, ldq, n_tok, y + r, ldy, r + 1 < n_rows ? row + rb : row);
    }
}

// Quantizes n (a multiple of 32) values with one scale: d = max|x| / 127, q = x · (1 / d) rounded
// to nearest, ties to even (as the scalar reference, nearbyint); sums[i] = Σ q over the values
// [16i, 16i + 16). Returns d.
float quantize_run(const float * x, int n, int8_t * q, int32_t * sums) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m256 lim = _mm256_set1_ps(127.0f);
    for (int j = 0; j < n; j += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; ++k) {
            __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), id),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
            v[k] = _mm256_cvtps_epi32(r);
        }
        sums[j / 16] = hsum_i32(_mm256_add_epi32(v[0], v[1]));
        sums[j / 16 + 1] = hsum_i32(_mm256_add_epi32(v[2], v[3]));
        // packs work per 128-bit lane: the permute puts the four 8-value groups back in order.
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + j),
                            _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    return d;
}

#if defined(HILL_VNNI)
// ---- Prefill: 8 weight rows as the 8 int32 lanes ----
// Per block, the 8 rows' 32 weight bytes are transposed so that vector g holds bytes 4g .. 4g + 3
// of every row (lane r: row r); then one vpdpbusd per 4 activation bytes (broadcast) adds them
// into all 8 rows' sums at once, and one fma per token and block scales the 8 rows (q8_dot.h,
// int8_gemm_rows_scalar: one accumulator per (t, r)). The activations come shifted to unsigned
// bytes (q8 + 128); −128 · Σ q of each row, added first, makes the sums exact.

// v[g] lane r = 32-bit word g of q[r].
inline void transpose8x8(const __m256i q[8], __m256i v[8]) {
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_epi32(q[2 * i], q[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(q[2 * i], q[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3: u[4h + k] holds word k (low half) and k + 4
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
        v[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
    }
}

// One block of 8 weight rows, prepared once for every activation row: v[g] lane r = bytes
// 4g .. 4g + 3 of row r's 32 weights, corr lane r = −128 · Σ q of row r, d lane r = row r's scale
// (rows beyond the matrix: zeros).
struct gemm_block8 {
    __m256i v[8];
    __m256i corr;
    __m256 d;
};

template <class W>
void gemm_prepare8(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, gemm_block8 * out) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ++ib) {
        __m256i q[8];
        alignas(32) float d[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
            const uint8_t * b = w + size_t(r < n_rows ? r : 0) * rb + size_t(ib) * W::bytes;
            q[r] = r < n_rows ? W::q(b) : _mm256_setzero_si256();
            d[r] = r < n_rows ? f16_at(b) : 0.0f;
        }
        gemm_block8 & o = out[ib];
        transpose8x8(q, o.v);
        __m256i wsum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) wsum = vnni_dpbusd(wsum, ones, o.v[g]);
        o.corr = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(wsum, 7));
        o.d = _mm256_load_ps(d);
    }
}

// T shifted activation rows (ldq bytes apart) times one prepared group of 8 rows over nb blocks:
// y[t · ldy + r] for r < n_rows. The T rows' accumulators stay in registers across the blocks.
template <int T>
void gemm_tile8(const gemm_block8 * p, int64_t nb, const uint8_t * xu, size_t ldq, float * y, int64_t ldy,
                int64_t n_rows) {
    __m256 acc[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib, xu += sizeof(act_q8)) {
        const gemm_block8 & b = p[ib];
        __m256i s[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) s[t] = b.corr;
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const __m256i wv = b.v[g];
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                int32_t x;
                std::memcpy(&x, xu + size_t(t) * ldq + offsetof(act_q8, q) + 4 * g, 4);
                s[t] = vnni_dpbusd(s[t], _mm256_set1_epi32(x), wv);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            const __m256 dx = _mm256_broadcast_ss(reinterpret_cast<const float *>(xu + size_t(t) * ldq));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(b.d, dx), _mm256_cvtepi32_ps(s[t]), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
        if (n_rows == 8) {
            _mm256_storeu_ps(y + t * ldy, acc[t]);
        } else {
            alignas(32) float a[8];
            _mm256_store_ps(a, acc[t]);
            for (int64_t r = 0; r < n_rows; ++r) y[t * ldy + r] = a[r];
        }
    }
}

// Tokens per register tile of gemm_tile8 (its T accumulators, T sums, a weight vector and the
// broadcasts fill the 16 ymm registers), and the prepared blocks per pass: about 128 KiB, in L2
// while every activation row passes over them.
constexpr int gemm_t_tile = 4;
constexpr size_t gemm_prepared_bytes = size_t(128) << 10;

// Rows [0, n_rows) times n_tok shifted activation rows: groups of 8 rows prepared a pass at a
// time, then each tile of activation rows over every prepared group (the tile's rows in L1 while
// the groups pass).
template <class W>
void legacy_gemm_rows(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, const uint8_t * xu, size_t ldq,
                      int64_t n_tok, float * y, int64_t ldy) {
    thread_local std::vector<gemm_block8> prepared;
    const int64_t n_groups = (n_rows + 7) / 8;
    const int64_t per_pass =
        std::clamp<int64_t>(int64_t(gemm_prepared_bytes / (sizeof(gemm_block8) * size_t(nb))), 1, n_groups);
    if (prepared.size() < size_t(per_pass * nb)) prepared.resize(size_t(per_pass * nb));
    for (int64_t g0 = 0; g0 < n_groups; g0 += per_pass) {
        const int64_t g1 = std::min(g0 + per_pass, n_groups);
        for (int64_t g = g0; g < g1; ++g) {
            gemm_prepare8<W>(w + size_t(8 * g) * rb, rb, nb, std::min<int64_t>(8, n_rows - 8 * g),
                             prepared.data() + (g - g0) * nb);
        }
        for (int64_t t = 0; t < n_tok; t += gemm_t_tile) {
            const int64_t nt = std::min<int64_t>(gemm_t_tile, n_tok - t);
            for (int64_t g = g0; g < g1; ++g) {
                const gemm_block8 * p = prepared.data() + (g - g0) * nb;
                const uint8_t * x = xu + size_t(t) * ldq;
                float * yt = y + t * ldy + 8 * g;
                const int64_t nr = std::min<int64_t>(8, n_rows - 8 * g);
                switch (nt) {
                    case 4: gemm_tile8<4>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 3: gemm_tile8<3>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 2: gemm_tile8<2>(p, nb, x, ldq, yt, ldy, nr); break;
                    default: gemm_tile8<1>(p, nb, x, ldq, yt, ldy, nr); break;
                }
            }
        }
    }
}

#if defined(__AVX512VNNI__)
// GCC 12's AVX-512 intrinsics pass a self-initialized "undefined" vector as the unused merge operand
// (_mm512_undefined_epi32), which -Wmaybe-uninitialized reports wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The AVX-512 build: 16 weight rows as the 16 int32 lanes of a zmm vector (two transposed groups
// of 8 side by side), each broadcast of 4 activation bytes serving 16 rows; otherwise as above.
struct gemm_block16 {
    __m512i v[8];
    __m512i corr;
    __m512 d;
};

template <class W>
void gemm_prepare16(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, gemm_block16 * out) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ++ib) {
        __m256i q[16], lo[8], hi[8];
        alignas(64) float d[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
            const uint8_t * b = w + size_t(r < n_rows ? r : 0) * rb + size_t(ib) * W::bytes;
            q[r] = r < n_rows ? W::q(b) : _mm256_setzero_si256();
            d[r] = r < n_rows ? f16_at(b) : 0.0f;
        }
        transpose8x8(q, lo);
        transpose8x8(q + 8, hi);
        gemm_block16 & o = out[ib];
        __m512i wsum = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            o.v[g] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[g]), hi[g], 1);
            wsum = _mm512_dpbusd_epi32(wsum, ones, o.v[g]);
        }
        o.corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(wsum, 7));
        o.d = _mm512_load_ps(d);
    }
}

template <int T>
void gemm_tile16(const gemm_block16 * p, int64_t nb, const uint8_t * xu, size_t ldq, float * y, int64_t ldy,
                 int64_t n_rows) {
    __m512 acc[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib, xu += sizeof(act_q8)) {
        const gemm_block16 & b = p[ib];
        __m512i s[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) s[t] = b.corr;
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const __m512i wv = b.v[g];
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                int32_t x;
                std::memcpy(&x, xu + size_t(t) * ldq + offsetof(act_q8, q) + 4 * g, 4);
                s[t] = _mm512_dpbusd_epi32(s[t], _mm512_set1_epi32(x), wv);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            float dx;
            std::memcpy(&dx, xu + size_t(t) * ldq, 4);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(b.d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(s[t]), acc[t]);
        }
    }
    const __mmask16 keep = __mmask16((1u << n_rows) - 1u);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

constexpr int gemm16_t_tile = 8;

template <class W>
void legacy_gemm_rows16(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, const uint8_t * xu, size_t ldq,
                        int64_t n_tok, float * y, int64_t ldy) {
    thread_local std::vector<gemm_block16> prepared;
    const int64_t n_groups = (n_rows + 15) / 16;
    const int64_t per_pass =
        std::clamp<int64_t>(int64_t(gemm_prepared_bytes / (sizeof(gemm_block16) * size_t(nb))), 1, n_groups);
    if (prepared.size() < size_t(per_pass * nb)) prepared.resize(size_t(per_pass * nb));
    for (int64_t g0 = 0; g0 < n_groups; g0 += per_pass) {
        const int64_t g1 = std::min(g0 + per_pass, n_groups);
        for (int64_t g = g0; g < g1; ++g) {
            gemm_prepare16<W>(w + size_t(16 * g) * rb, rb, nb, std::min<int64_t>(16, n_rows - 16 * g),
                              prepared.data() + (g - g0) * nb);
        }
        for (int64_t t = 0; t < n_tok; t += gemm16_t_tile) {
            const int64_t nt = std::min<int64_t>(gemm16_t_tile, n_tok - t);
            for (int64_t g = g0; g < g1; ++g) {
                const gemm_block16 * p = prepared.data() + (g - g0) * nb;
                const uint8_t * x = xu + size_t(t) * ldq;
                float * yt = y + t * ldy + 16 * g;
                const int64_t nr = std::min<int64_t>(16, n_rows - 16 * g);
                switch (nt) {
                    case 8: gemm_tile16<8>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 7: gemm_tile16<7>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 6: gemm_tile16<6>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 5: gemm_tile16<5>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 4: gemm_tile16<4>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 3: gemm_tile16<3>(p, nb, x, ldq, yt, ldy, nr); break;
                    case 2: gemm_tile16<2>(p, nb, x, ldq, yt, ldy, nr); break;
                    default: gemm_tile16<1>(p, nb, x, ldq, yt, ldy, nr); break;
                }
            }
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// The k-quants the same way (activations as they are: the weights are the unsigned operand): per
// super-block and sub-block u, the 8 rows' weight bytes transposed, per token s = Σ over the 32
// weights into each row's lane by vpdpbusd, times the groups' scales (vpmulld) into an int32 sum S
// per (t, row) kept in scratch; the mins M = Σ_g mc_g · Σ_g q8 by vpdpwssd on the transposed int16
// pairs of mc against the activation's bsum pairs. scratch: [2 · 8 · n_tok] 32-bit words.
template <class W>
void k_gemm_rows8(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, const uint8_t * xq, size_t ldq,
                  int64_t n_tok, float * y, int64_t ldy, float * scratch) {
    float * acc = scratch;
    auto * sum = reinterpret_cast<int32_t *>(scratch + 8 * n_tok);
    for (int64_t i = 0; i < 8 * n_tok; ++i) acc[i] = 0.0f;
    for (int64_t ib = 0; ib < nb; ++ib) {
        k_unpacked k[8];
        alignas(32) float d[8], dm[8];
        alignas(32) int16_t sc[8][8][16];  // [row][sub-block][lane]: k.sc
        for (int r = 0; r < 8; ++r) {
            if (r < n_rows) {
                W::unpack(w + size_t(r) * rb + size_t(ib) * W::bytes, k[r]);
            } else {
                for (int u = 0; u < 8; ++u) k[r].q[u] = k[r].sc[u] = _mm256_setzero_si256();
                k[r].mc = _mm256_setzero_si256();
                k[r].d = k[r].dm = 0.0f;
            }
            d[r] = k[r].d, dm[r] = -k[r].dm;
            for (int u = 0; u < 8; ++u) _mm256_store_si256(reinterpret_cast<__m256i *>(sc[r][u]), k[r].sc[u]);
        }
        for (int64_t i = 0; i < 8 * n_tok; ++i) sum[i] = 0;
        for (int u = 0; u < 8; ++u) {
            __m256i q[8], v[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; ++r) q[r] = k[r].q[u];
            transpose8x8(q, v);
            // Lanes r: the scale of group 2u (weights 0..15 of the sub-block) and of 2u + 1.
            const __m256i sc_lo = _mm256_setr_epi32(sc[0][u][0], sc[1][u][0], sc[2][u][0], sc[3][u][0], sc[4][u][0],
                                                    sc[5][u][0], sc[6][u][0], sc[7][u][0]);
            const __m256i sc_hi = _mm256_setr_epi32(sc[0][u][8], sc[1][u][8], sc[2][u][8], sc[3][u][8], sc[4][u][8],
                                                    sc[5][u][8], sc[6][u][8], sc[7][u][8]);
            const uint8_t * xb = xq + size_t(ib) * sizeof(act_q8k) + offsetof(act_q8k, q) + 32 * u;
            for (int64_t t = 0; t < n_tok; ++t, xb += ldq) {
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int g = 0; g < 4; ++g) {
                    int32_t x0, x1;
                    std::memcpy(&x0, xb + 4 * g, 4);
                    std::memcpy(&x1, xb + 16 + 4 * g, 4);
                    lo = vnni_dpbusd(lo, v[g], _mm256_set1_epi32(x0));
                    hi = vnni_dpbusd(hi, v[g + 4], _mm256_set1_epi32(x1));
                }
                __m256i * st = reinterpret_cast<__m256i *>(sum + 8 * t);
                const __m256i p = _mm256_add_epi32(_mm256_mullo_epi32(lo, sc_lo), _mm256_mullo_epi32(hi, sc_hi));
                _mm256_storeu_si256(st, _mm256_add_epi32(_mm256_loadu_si256(st), p));
            }
        }
        __m256i mc[8], mv[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) mc[r] = k[r].mc;
        transpose8x8(mc, mv);  // mv[i] lane r: row r's int16 pair (mc_2i, mc_2i+1)
        const __m256 dv = _mm256_load_ps(d), dmv = _mm256_load_ps(dm);
        const uint8_t * xb = xq + size_t(ib) * sizeof(act_q8k);
        for (int64_t t = 0; t < n_tok; ++t, xb += ldq) {
            const auto * a = reinterpret_cast<const act_q8k *>(xb);
            __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                int32_t pair;
                std::memcpy(&pair, a->bsum + 2 * i, 4);
                m = vnni_dpwssd(m, mv[i], _mm256_set1_epi32(pair));
            }
            const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(sum + 8 * t));
            const __m256 dx = _mm256_broadcast_ss(&a->d);
            __m256 r = _mm256_loadu_ps(acc + 8 * t);
            if constexpr (W::fold) {
                r = _mm256_fmadd_ps(_mm256_mul_ps(dv, dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(s, m)), r);
            } else {
                r = _mm256_fmadd_ps(_mm256_mul_ps(dv, dx), _mm256_cvtepi32_ps(s), r);
                r = _mm256_fmadd_ps(_mm256_mul_ps(dmv, dx), _mm256_cvtepi32_ps(m), r);
            }
            _mm256_storeu_ps(acc + 8 * t, r);
        }
    }
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) y[t * ldy + r] = acc[8 * t + r];
    }
}

#if defined(__AVX512VNNI__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 intrinsics: see above
#endif
// k_gemm_rows8 with 16 rows as the 16 lanes of a 512-bit vector (the AVX-512 build). scratch:
// [2 · 16 · n_tok] 32-bit words.
template <class W>
void k_gemm_rows16(const uint8_t * w, size_t rb, int64_t nb, int64_t n_rows, const uint8_t * xq, size_t ldq,
                   int64_t n_tok, float * y, int64_t ldy, float * scratch) {
    float * acc = scratch;
    auto * sum = reinterpret_cast<int32_t *>(scratch + 16 * n_tok);
    for (int64_t i = 0; i < 16 * n_tok; ++i) acc[i] = 0.0f;
    for (int64_t ib = 0; ib < nb; ++ib) {
        k_unpacked k[16];
        alignas(64) float d[16], dm[16];
        alignas(64) int32_t sc[8][2][16];  // [sub-block][group 2u, 2u + 1][row]
        for (int r = 0; r < 16; ++r) {
            if (r < n_rows) {
                W::unpack(w + size_t(r) * rb + size_t(ib) * W::bytes, k[r]);
            } else {
                for (int u = 0; u < 8; ++u) k[r].q[u] = k[r].sc[u] = _mm256_setzero_si256();
                k[r].mc = _mm256_setzero_si256();
                k[r].d = k[r].dm = 0.0f;
            }
            d[r] = k[r].d, dm[r] = -k[r].dm;
            for (int u = 0; u < 8; ++u) {
                alignas(32) int16_t lanes[16];
                _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), k[r].sc[u]);
                sc[u][0][r] = lanes[0], sc[u][1][r] = lanes[8];
            }
        }
        for (int64_t i = 0; i < 16 * n_tok; ++i) sum[i] = 0;
        for (int u = 0; u < 8; ++u) {
            __m256i q[16], lo8[8], hi8[8];
            __m512i v[8];
#pragma GCC unroll 16
            for (int r = 0; r < 16; ++r) q[r] = k[r].q[u];
            transpose8x8(q, lo8);
            transpose8x8(q + 8, hi8);
#pragma GCC unroll 8
            for (int g = 0; g < 8; ++g) v[g] = _mm512_inserti64x4(_mm512_zextsi256_si512(lo8[g]), hi8[g], 1);
            const __m512i sc_lo = _mm512_load_si512(sc[u][0]), sc_hi = _mm512_load_si512(sc[u][1]);
            const uint8_t * xb = xq + size_t(ib) * sizeof(act_q8k) + offsetof(act_q8k, q) + 32 * u;
            for (int64_t t = 0; t < n_tok; ++t, xb += ldq) {
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int g = 0; g < 4; ++g) {
                    int32_t x0, x1;
                    std::memcpy(&x0, xb + 4 * g, 4);
                    std::memcpy(&x1, xb + 16 + 4 * g, 4);
                    lo = _mm512_dpbusd_epi32(lo, v[g], _mm512_set1_epi32(x0));
                    hi = _mm512_dpbusd_epi32(hi, v[g + 4], _mm512_set1_epi32(x1));
                }
                int32_t * st = sum + 16 * t;
                const __m512i p = _mm512_add_epi32(_mm512_mullo_epi32(lo, sc_lo), _mm512_mullo_epi32(hi, sc_hi));
                _mm512_storeu_si512(st, _mm512_add_epi32(_mm512_loadu_si512(st), p));
            }
        }
        __m256i mc[16], mlo[8], mhi[8];
        __m512i mv[8];
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) mc[r] = k[r].mc;
        transpose8x8(mc, mlo);
        transpose8x8(mc + 8, mhi);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) mv[i] = _mm512_inserti64x4(_mm512_zextsi256_si512(mlo[i]), mhi[i], 1);
        const __m512 dv = _mm512_load_ps(d), dmv = _mm512_load_ps(dm);
        const uint8_t * xb = xq + size_t(ib) * sizeof(act_q8k);
        for (int64_t t = 0; t < n_tok; ++t, xb += ldq) {
            const auto * a = reinterpret_cast<const act_q8k *>(xb);
            __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                int32_t pair;
                std::memcpy(&pair, a->bsum + 2 * i, 4);
                m = _mm512_dpwssd_epi32(m, mv[i], _mm512_set1_epi32(pair));
            }
            const __m512i s = _mm512_loadu_si512(sum + 16 * t);
            const __m512 dx = _mm512_set1_ps(a->d);
            __m512 r = _mm512_loadu_ps(acc + 16 * t);
            if constexpr (W::fold) {
                r = _mm512_fmadd_ps(_mm512_mul_ps(dv, dx), _mm512_cvtepi32_ps(_mm512_sub_epi32(s, m)), r);
            } else {
                r = _mm512_fmadd_ps(_mm512_mul_ps(dv, dx), _mm512_cvtepi32_ps(s), r);
                r = _mm512_fmadd_ps(_mm512_mul_ps(dmv, dx), _mm512_cvtepi32_ps(m), r);
            }
            _mm512_storeu_ps(acc + 16 * t, r);
        }
    }
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) y[t * ldy + r] = acc[16 * t + r];
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

template <class W>
void gemm_rows(const uint8_t * w, size_t rb, int64_t n_cols, const uint8_t * xu, size_t ldq, int64_t n_tok, float * y,
               int64_t ldy, int64_t n_rows) {
    if constexpr (requires { W::fold; }) {
        // Activation rows in chunks of about 128 KiB, in L2 while the groups of G rows pass over
        // them; each chunk of a group into a [2 · G, chunk] scratch.
#if defined(__AVX512VNNI__)
        constexpr int64_t G = 16;
        const auto rows = k_gemm_rows16<W>;
#else
        constexpr int64_t G = 8;
        const auto rows = k_gemm_rows8<W>;
#endif
        const int64_t chunk = std::max<int64_t>(8, int64_t(128 << 10) / int64_t(ldq));
        thread_local std::vector<float> scratch;
        if (scratch.size() < size_t(2 * G * chunk)) scratch.resize(size_t(2 * G * chunk));
        for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
            for (int64_t r = 0; r < n_rows; r += G) {
                rows(w + size_t(r) * rb, rb, n_cols / 256, std::min<int64_t>(G, n_rows - r), xu + size_t(t0) * ldq,
                     ldq, std::min(chunk, n_tok - t0), y + t0 * ldy + r, ldy, scratch.data());
            }
        }
    } else {
#if defined(__AVX512VNNI__)
        legacy_gemm_rows16<W>(w, rb, n_cols / 32, n_rows, xu, ldq, n_tok, y, ldy);
#else
        legacy_gemm_rows<W>(w, rb, n_cols / 32, n_rows, xu, ldq, n_tok, y, ldy);
#endif
    }
}
#endif

}  // namespace

void quantize_activation_row(bool k_blocks, const float * x, int64_t n, void * dst) {
    int32_t sums[16];
    if (k_blocks) {
        auto * o = static_cast<act_q8k *>(dst);
        for (int64_t ib = 0; ib < n / 256; ++ib) {
            o[ib].d = quantize_run(x + 256 * ib, 256, o[ib].q, sums);
            for (int g = 0; g < 16; ++g) o[ib].bsum[g] = int16_t(sums[g]);
        }
        return;
    }
    auto * o = static_cast<act_q8 *>(dst);
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        o[ib].d = quantize_run(x + 32 * ib, 32, o[ib].q, sums);
        o[ib].sum = sums[0] + sums[1];
    }
}

void int8_dot_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq, size_t ldq,
                   int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    switch (type) {
        case ggml_type::q8_0:
            legacy_rows<w_q8_0>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q4_0:
            legacy_rows<w_q4_0>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q4_1:
            legacy_rows<w_q4_1>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q5_0:
            legacy_rows<w_q5_0>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q5_1:
            legacy_rows<w_q5_1>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::iq4_nl:
            legacy_rows<w_iq4_nl>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q4_k:
            k_rows<w_q45_k<false>>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q5_k:
            k_rows<w_q45_k<true>>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        case ggml_type::q6_k:
            k_rows<w_q6_k>(w, row_bytes, n_cols, xq, ldq, n_tok, y, ldy, n_rows);
            return;
        default:
            break;
    }
    __builtin_trap();  // the caller checked int8_dot_supported
}


#if defined(HILL_VNNI)
void int8_gemm_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xu, size_t ldq,
                    int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    switch (type) {
        case ggml_type::q8_0: gemm_rows<w_q8_0>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::q4_0: gemm_rows<w_q4_0>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::q5_0: gemm_rows<w_q5_0>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::iq4_nl: gemm_rows<w_iq4_nl>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::q4_k: gemm_rows<w_q45_k<false>>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::q5_k: gemm_rows<w_q45_k<true>>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        case ggml_type::q6_k: gemm_rows<w_q6_k>(w, row_bytes, n_cols, xu, ldq, n_tok, y, ldy, n_rows); return;
        default: break;
    }
    __builtin_trap();  // the caller checked int8_gemm_supported
}
#endif

}  // namespace hill::HILL_Q8_NS
