// The scoring copy's fields of up to eight head vectors of a key row (score_avx2.h: copy_fields). Compiled
// with -mavx2 -mf16c and -ffp-contract=off, without -mfma: every step is the IEEE operation the scalar
// reference (quant_copy.cpp, copy_fields_scalar) performs, in the same order per head. At 2 and 3 bits
// the heads are the lanes (element i of the eight heads is one vector), so that each head's sums run
// over its elements in order, as the scalar loop's do, while eight of them advance at once.
#include <immintrin.h>

#include "score/score_avx2.h"

namespace hill::score_avx2 {

namespace {

// The eight rows r[0..8) of an 8 × 8 block of f32, transposed in place.
void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Eight f32 values that hold integers in [0, 255], as bytes at out.
void store_bytes(__m256 x, uint8_t * out) {
    const __m256i v = _mm256_cvtps_epi32(x);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i *>(out), _mm_packus_epi16(w, w));
}

// out[h][i] = in[i][h] for an 8 × 8 matrix of bytes.
void transpose8x8_bytes(const uint8_t (*in)[8], uint8_t (*out)[8]) {
    const auto row = [&](int i) { return _mm_loadl_epi64(reinterpret_cast<const __m128i *>(in[i])); };
    const __m128i t01 = _mm_unpacklo_epi8(row(0), row(1)), t23 = _mm_unpacklo_epi8(row(2), row(3));
    const __m128i t45 = _mm_unpacklo_epi8(row(4), row(5)), t67 = _mm_unpacklo_epi8(row(6), row(7));
    // Columns 0-3 (then 4-7) of rows 0-3 and of rows 4-7, four bytes per column.
    const __m128i u0 = _mm_unpacklo_epi16(t01, t23), u1 = _mm_unpackhi_epi16(t01, t23);
    const __m128i u2 = _mm_unpacklo_epi16(t45, t67), u3 = _mm_unpackhi_epi16(t45, t67);
    // Columns (0, 1), (2, 3), (4, 5), (6, 7), eight bytes each.
    _mm_store_si128(reinterpret_cast<__m128i *>(out[0]), _mm_unpacklo_epi32(u0, u2));
    _mm_store_si128(reinterpret_cast<__m128i *>(out[2]), _mm_unpackhi_epi32(u0, u2));
    _mm_store_si128(reinterpret_cast<__m128i *>(out[4]), _mm_unpacklo_epi32(u1, u3));
    _mm_store_si128(reinterpret_cast<__m128i *>(out[6]), _mm_unpackhi_epi32(u1, u3));
}

// Round to nearest, ties to even (the scalar code's round_to_even, exact below 2^22).
__m256 round_even(__m256 x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace

void copy_fields(const uint8_t * k, bool f16, const float * rc, int m, int n, int bits, float c0, int rounds,
                 float * amax, float * sigma, uint8_t * u, float * work) {
    const int np = (n + 7) / 8 * 8;  // elements, padded with zeros to whole vectors
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    // k̃ = k · (1 / c), transposed into work [np, 8] (element i of head h at work[i · 8 + h]; heads past m
    // and elements past n zero), and per lane its maximum and whether it holds a NaN.
    __m256 mx = zero, nan = zero;
    for (int i0 = 0; i0 < np; i0 += 8) {
        __m256 r[8];
        for (int h = 0; h < 8; ++h) {
            const size_t e = size_t(h) * size_t(n) + size_t(i0);
            if (h >= m) {
                r[h] = zero;
            } else if (i0 + 8 <= n) {
                const __m256 x = f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(k + e * 2)))
                                     : _mm256_loadu_ps(reinterpret_cast<const float *>(k) + e);
                r[h] = _mm256_mul_ps(x, _mm256_loadu_ps(rc + e));
            } else {
                alignas(32) float t[8] = {};
                for (int j = 0; i0 + j < n; ++j) {
                    float v;
                    if (f16) {
                        uint16_t b;
                        __builtin_memcpy(&b, k + (e + size_t(j)) * 2, 2);
                        v = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(b)));
                    } else {
                        __builtin_memcpy(&v, k + (e + size_t(j)) * 4, 4);
                    }
                    t[j] = v * rc[e + size_t(j)];
                }
                r[h] = _mm256_load_ps(t);
            }
        }
        transpose8(r);
        for (int j = 0; j < 8; ++j) {
            _mm256_storeu_ps(work + size_t(i0 + j) * 8, r[j]);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(r[j], r[j], _CMP_UNORD_Q));
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, r[j]));
        }
    }
    mx = _mm256_blendv_ps(mx, _mm256_set1_ps(__builtin_nanf("")), nan);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mx);
    for (int h = 0; h < m; ++h) amax[h] = lanes[h];
    // The fields at the scale inv per lane, as bytes into u [m, n] (lanes that are NaN, of heads past m or
    // whose maximum is not finite and positive, store 0 or values nobody reads).
    const auto store_fields = [&](auto field_of) {
        // Eight elements at a time: their 8 × 8 bytes [i][h] transposed to [h][i], eight bytes per head.
        alignas(16) uint8_t b[8][8];
        for (int i0 = 0; i0 < n; i0 += 8) {
            const int len = n - i0 < 8 ? n - i0 : 8;
            for (int j = 0; j < len; ++j) {
                const __m256 f = field_of(_mm256_loadu_ps(work + size_t(i0 + j) * 8));
                store_bytes(_mm256_and_ps(f, _mm256_cmp_ps(f, f, _CMP_ORD_Q)), b[j]);
            }
            if (len < 8) {
                for (int h = 0; h < m; ++h) {
                    for (int j = 0; j < len; ++j) u[size_t(h) * size_t(n) + size_t(i0 + j)] = b[j][h];
                }
                break;
            }
            alignas(16) uint8_t t[8][8];
            transpose8x8_bytes(b, t);
            for (int h = 0; h < m; ++h) __builtin_memcpy(u + size_t(h) * size_t(n) + size_t(i0), t[h], 8);
        }
    };
    if (bits == 4) {
        // u = round(k̃ · (7 / max|k̃|)) + 8.
        const __m256 inv = _mm256_div_ps(_mm256_set1_ps(7.0f), mx), eight = _mm256_set1_ps(8.0f);
        store_fields([&](__m256 x) { return _mm256_add_ps(round_even(_mm256_mul_ps(x, inv)), eight); });
        return;
    }
    // y = k̃ · (1 / max|k̃|), in place.
    const __m256 ia = _mm256_div_ps(_mm256_set1_ps(1.0f), mx);
    for (int i = 0; i < n; ++i)
        _mm256_storeu_ps(work + size_t(i) * 8, _mm256_mul_ps(_mm256_loadu_ps(work + size_t(i) * 8), ia));
    const __m256 top = _mm256_set1_ps(float((1 << bits) - 1)), half = _mm256_set1_ps(0.5f);
    const auto level = [&](__m256 y, __m256 inv) {  // the clamped field u, as f32
        const __m256 f = round_even(_mm256_mul_ps(_mm256_add_ps(_mm256_mul_ps(y, inv), top), half));
        return _mm256_min_ps(_mm256_max_ps(f, zero), top);
    };
    __m256 ss = zero;
    for (int i = 0; i < n; ++i) {
        const __m256 y = _mm256_loadu_ps(work + size_t(i) * 8);
        ss = _mm256_add_ps(ss, _mm256_mul_ps(y, y));
    }
    __m256 sg = _mm256_mul_ps(_mm256_set1_ps(c0), _mm256_sqrt_ps(_mm256_div_ps(ss, _mm256_set1_ps(float(n)))));
    for (int round = 0; round < rounds; ++round) {
        const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), sg);
        __m256 yl = zero, ll = zero;
        for (int i = 0; i < n; ++i) {
            const __m256 y = _mm256_loadu_ps(work + size_t(i) * 8);
            const __m256 uf = level(y, inv);
            const __m256 l = _mm256_sub_ps(_mm256_add_ps(uf, uf), top);
            yl = _mm256_add_ps(yl, _mm256_mul_ps(y, l));
            ll = _mm256_add_ps(ll, _mm256_mul_ps(l, l));
        }
        sg = _mm256_div_ps(yl, ll);
    }
    _mm256_store_ps(lanes, sg);
    for (int h = 0; h < m; ++h) sigma[h] = lanes[h];
    const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), sg);
    store_fields([&](__m256 y) { return level(y, inv); });
}

}  // namespace hill::score_avx2
