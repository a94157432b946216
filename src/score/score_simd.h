// Lane sums and the tiling of key blocks over query heads, shared by the scorer's SIMD kernels
// (score_avx2.cpp, score_packed.cpp; private to src/score). Include only from files compiled for
// AVX2: everything here is in an unnamed namespace, so each file has its own copy, built for its own
// instruction set (score_avx2.h's rule).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace hill {
namespace {

// Σ of the 8 lanes, pairwise: ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)), the order of hsum4
// too, so that a sum does not depend on whether it was reduced alone or with three others (which
// depends on the token's place in its block).
inline float hsum(__m256 v) {
    const __m256 h = _mm256_hadd_ps(v, v);
    const __m256 hh = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(hh), _mm256_extractf128_ps(hh, 1)));
}

// The lane sums of a, b, c, d, each as hsum computes it.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));  // + the other 64-bit half
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));  // + the neighbouring 32-bit lane
    return _mm_cvtsi128_si32(s);
}

inline __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// s[r] = the lane sum of a[r], four at a time.
template <int N>
inline void reduce(const __m256 (&a)[N], float * s) {
    int r = 0;
#pragma GCC unroll 2
    for (; r + 4 <= N; r += 4) _mm_storeu_ps(s + r, hsum4(a[r], a[r + 1], a[r + 2], a[r + 3]));
#pragma GCC unroll 4
    for (; r < N; ++r) s[r] = hsum(a[r]);
}

template <int N>
inline void reduce(const __m256i (&a)[N], int32_t * s) {
    int r = 0;
#pragma GCC unroll 2
    for (; r + 4 <= N; r += 4) {
        _mm_storeu_si128(reinterpret_cast<__m128i *>(s + r), hsum4_i32(a[r], a[r + 1], a[r + 2], a[r + 3]));
    }
#pragma GCC unroll 4
    for (; r < N; ++r) s[r] = hsum_i32(a[r]);
}

// Query heads [0, TH) of q against all n_k keys: tiles of 8 / TH keys, then single keys.
template <class Tile, int TH, class Q, class Out>
void dots_heads(const Q * q, int n_q, const uint8_t * const * k, int n_k, int n, Out * out) {
    constexpr int TK = 8 / TH;
    int t = 0;
    for (; t + TK <= n_k; t += TK) Tile::template run<TK, TH>(q, n_q, k + t, n, out + t * n_q);
    for (; t < n_k; ++t) Tile::template run<1, TH>(q, n_q, k + t, n, out + t * n_q);
}

// Head tiles of 4, then 2, then 1: a key is widened once per head tile, so once for GQA groups of 4.
template <class Tile, class Q, class Out>
void dots_block(const Q * q, int n_q, const uint8_t * const * k, int n_k, int n, Out * out) {
    int h = 0;
    for (; h + 4 <= n_q; h += 4) dots_heads<Tile, 4>(q + h * n, n_q, k, n_k, n, out + h);
    if (h + 2 <= n_q) {
        dots_heads<Tile, 2>(q + h * n, n_q, k, n_k, n, out + h);
        h += 2;
    }
    if (h < n_q) dots_heads<Tile, 1>(q + h * n, n_q, k, n_k, n, out + h);
}

}  // namespace
}  // namespace hill
