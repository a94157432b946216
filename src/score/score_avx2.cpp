// AVX2/FMA/F16C kernels of the host scorer; see score_avx2.h for the rules of this file. Scalar
// references: host_scorer.cpp.
#include "score/score_avx2.h"
#include "score/score_simd.h"

#include <immintrin.h>

#include <cstring>

namespace hill::score_avx2 {

namespace {

// Key elements i.. of a row as f32: 8 at a time, and one for the tails.
struct load_f32 {
    static __m256 load8(const uint8_t * row, int i) {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(row) + i);
    }
    static float load1(const uint8_t * row, int i) { return reinterpret_cast<const float *>(row)[i]; }
};

struct load_f16 {
    static __m256 load8(const uint8_t * row, int i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * i)));
    }
    static float load1(const uint8_t * row, int i) { return _cvtsh_ss(reinterpret_cast<const uint16_t *>(row)[i]); }
};

struct load_i8 {
    static __m256 load8(const uint8_t * row, int i) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(row + i))));
    }
    static float load1(const uint8_t * row, int i) { return float(reinterpret_cast<const int8_t *>(row)[i]); }
};

// The arithmetic of a tile. f32: the f32 query against keys widened to f32 by L, FMA into f32 lanes,
// 8 elements per step.
template <class L>
struct math_f32 {
    using q_type = float;
    using vec = __m256;
    using key = __m256;
    using out_type = float;
    static constexpr int step = 8;
    static vec zero() { return _mm256_setzero_ps(); }
    static vec load_q(const float * q) { return _mm256_loadu_ps(q); }
    static key load_k(const uint8_t * row, int i) { return L::load8(row, i); }
    static vec madd(vec acc, key k, vec q) { return _mm256_fmadd_ps(k, q, acc); }
    static float product(float q, const uint8_t * row, int j) { return q * L::load1(row, j); }
};

// int8 × int8, 32 elements per step: maddubs multiplies unsigned by signed bytes, so the key's sign
// moves onto the query (|k| · sign(k)·q = k·q); with values in [-127, 127] each pair sum is at most
// 2 · 127² = 32258 and fits int16 without saturation; madd with ones widens the pairs to int32.
struct math_i8 {
    using q_type = int8_t;
    using vec = __m256i;
    struct key {
        __m256i v, abs;
    };
    using out_type = int32_t;
    static constexpr int step = 32;
    static vec zero() { return _mm256_setzero_si256(); }
    static vec load_q(const int8_t * q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q)); }
    static key load_k(const uint8_t * row, int i) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + i));
        return {v, _mm256_sign_epi8(v, v)};
    }
    static vec madd(vec acc, key k, vec q) {
        const __m256i pairs = _mm256_maddubs_epi16(k.abs, _mm256_sign_epi8(q, k.v));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
    static int32_t product(int8_t q, const uint8_t * row, int j) {
        return int32_t(q) * int32_t(reinterpret_cast<const int8_t *>(row)[j]);
    }
};

// A tile of TK keys × TH query heads with TK · TH <= 8 accumulators: 8 independent chains keep both
// FMA units busy through the FMA latency, and with the TH query vectors they fit the 16 registers.
// Per step, each query vector is loaded once and each key vector loaded and widened once, for
// TK · TH multiply-adds; the elements past the last whole step are added one by one. The unroll
// pragmas make GCC unroll the loops over the tile at -O2, so that the accumulators live in
// registers: without them it kept them in memory, and scored at half the speed.
template <class M>
struct tile {
    template <int TK, int TH>
    static void run(const typename M::q_type * q, int n_q, const uint8_t * const * k, int n,
                    typename M::out_type * out) {
        typename M::vec acc[TK * TH];
#pragma GCC unroll 8
        for (auto & a : acc) a = M::zero();
        int i = 0;
        for (; i + M::step <= n; i += M::step) {
            typename M::vec qv[TH];
#pragma GCC unroll 8
            for (int h = 0; h < TH; ++h) qv[h] = M::load_q(q + h * n + i);
#pragma GCC unroll 8
            for (int t = 0; t < TK; ++t) {
                const typename M::key kv = M::load_k(k[t], i);
#pragma GCC unroll 8
                for (int h = 0; h < TH; ++h) acc[t * TH + h] = M::madd(acc[t * TH + h], kv, qv[h]);
            }
        }
        typename M::out_type s[TK * TH];
        reduce(acc, s);
        for (int t = 0; t < TK; ++t) {
            for (int h = 0; h < TH; ++h) {
                typename M::out_type v = s[t * TH + h];
                for (int j = i; j < n; ++j) v += M::product(q[h * n + j], k[t], j);
                out[t * n_q + h] = v;
            }
        }
    }
};

// The maximum of the sign-cleared f32 bit patterns (f16 elements widened exactly) as integers: for
// IEEE floats of one sign that order is the numeric one, with inf above every finite value and NaN
// above inf, so the result is exact and does not depend on the order of the elements (a float max
// would drop or keep a NaN depending on where it stands). Cleared of the sign bit, the patterns are
// non-negative as int32, so the signed max orders them.
template <class L>
float amax(const uint8_t * x, int n) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_epi32(m, _mm256_and_si256(_mm256_castps_si256(L::load8(x, i)), mask));
    __m128i s = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    s = _mm_max_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_max_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    uint32_t bits = uint32_t(_mm_cvtsi128_si32(s));
    for (; i < n; ++i) {
        const float v = L::load1(x, i);
        uint32_t b;
        std::memcpy(&b, &v, 4);
        b &= 0x7fffffffu;
        bits = b > bits ? b : bits;
    }
    float r;
    std::memcpy(&r, &bits, 4);
    return r;
}

// Rounds 32 f32 (4 vectors) to int32 and packs them to 32 int8 in order. packs works within 128-bit
// lanes, leaving the 4-element groups in the order 0 2 4 6 1 3 5 7 (of a, b, c, d halves); the
// permute restores 0..7.
inline __m256i round_pack_32(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256i ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
    const __m256i cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <class L>
void quantize(const uint8_t * x, int n, float inv, int8_t * out) {
    const __m256 vi = _mm256_set1_ps(inv);
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i p = round_pack_32(_mm256_mul_ps(L::load8(x, i), vi), _mm256_mul_ps(L::load8(x, i + 8), vi),
                                        _mm256_mul_ps(L::load8(x, i + 16), vi), _mm256_mul_ps(L::load8(x, i + 24), vi));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i), p);
    }
    // cvtss_si32 rounds with the current rounding mode, as cvtps_epi32 above and std::lrint do.
    for (; i < n; ++i) out[i] = int8_t(_mm_cvtss_si32(_mm_set_ss(L::load1(x, i) * inv)));
}

}  // namespace

void dots_f32(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out) {
    dots_block<tile<math_f32<load_f32>>>(q, n_q, k, n_k, n, out);
}

void dots_f16(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out) {
    dots_block<tile<math_f32<load_f16>>>(q, n_q, k, n_k, n, out);
}

void dots_i8(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out) {
    dots_block<tile<math_f32<load_i8>>>(q, n_q, k, n_k, n, out);
}

void dots_i8_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    dots_block<tile<math_i8>>(q, n_q, k, n_k, n, out);
}

float amax_f32(const uint8_t * x, int n) {
    return amax<load_f32>(x, n);
}

float amax_f16(const uint8_t * x, int n) {
    return amax<load_f16>(x, n);
}

void quantize_f32(const uint8_t * x, int n, float inv, int8_t * out) {
    quantize<load_f32>(x, n, inv, out);
}

void quantize_f16(const uint8_t * x, int n, float inv, int8_t * out) {
    quantize<load_f16>(x, n, inv, out);
}

}  // namespace hill::score_avx2
