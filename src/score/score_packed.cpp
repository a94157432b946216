// The scoring copy's dot products (packed int4 / int2 keys against int8 query heads; score_avx2.h),
// compiled three times, as q8_dot_avx2.cpp is: as itself with -mavx2 (namespace hill::score_avx2);
// through score_packed_vnni.cpp with -mavxvnni (score_vnni); and through score_packed_avx512.cpp with
// AVX-512 F/BW/VL/VNNI (score_avx512: the same 256-bit instructions in their EVEX form, for CPUs with
// AVX512-VNNI but not AVX-VNNI). The VNNI builds add the byte products with vpdpbusd (vnni.h); all
// three give the exact int32 sums, the same bits as the scalar references of quant_copy.cpp.
// score_avx2.h's rule holds: this file uses only its own helpers and those of score_simd.h / vnni.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "compute/vnni.h"
#include "score/score_avx2.h"
#include "score/score_simd.h"

#ifndef HILL_SCORE_NS
#define HILL_SCORE_NS score_avx2
#endif

namespace hill::HILL_SCORE_NS {

namespace {

// Nibble i of a packed int4 head vector of n elements (quant_copy.h): in its block of b elements
// (32, the last one n mod 32), byte j holds elements j (low nibble) and j + b/2 (high nibble).
inline int32_t nibble(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, half = (n - b0 < 32 ? n - b0 : 32) / 2, j = i - b0;
    const uint8_t byte = row[b0 / 2 + (j < half ? j : j - half)];
    return j < half ? byte & 0x0f : byte >> 4;
}

// The 32 elements of block i (a multiple of 32) of a packed int4 key, in query order: the block's 16
// bytes loaded into both 128-bit lanes and the upper lane shifted right by 4, so that after the mask
// the low lane holds elements 0..15 and the high lane 16..31.
struct unpack_u4 {
    static __m256i block(const uint8_t * key, int i) {
        const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(key + i / 2)));
        return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
    }
    static int32_t elem(const uint8_t * row, int n, int i) { return nibble(row, n, i); }
};

// Element i of a packed int2 head vector of n elements (quant_copy.h): in its block of b elements (32,
// the last one n mod 32), byte j holds elements j + m · b/4 in bits 2m, 2m + 1 (m = 0..3).
inline int32_t crumb(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, quarter = (n - b0 < 32 ? n - b0 : 32) / 4, j = i - b0;
    return (row[b0 / 4 + j % quarter] >> (2 * (j / quarter))) & 3;
}

// The same for a packed int2 key: the block's 8 bytes broadcast to the four 64-bit lanes and lane m
// shifted right by 2m, so that after the mask byte j of lane m holds element j + 8m.
struct unpack_u2 {
    static __m256i block(const uint8_t * key, int i) {
        int64_t bytes;
        std::memcpy(&bytes, key + i / 4, 8);
        return _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(bytes), _mm256_setr_epi64x(0, 2, 4, 6)),
                                _mm256_set1_epi8(0x03));
    }
    static int32_t elem(const uint8_t * row, int n, int i) { return crumb(row, n, i); }
};

// Element i of a packed int3 head vector of n elements (quant_copy.h): in its block of b elements (3b/8
// bytes from byte 3 · b0 / 8), the low two bits as crumb() reads them from the block's first b/4 bytes,
// the high bit of element j at bit j mod 8 of byte b/4 + j / 8.
inline int32_t field3(const uint8_t * row, int n, int i) {
    const int b0 = i / 32 * 32, quarter = (n - b0 < 32 ? n - b0 : 32) / 4, j = i - b0;
    const uint8_t * block = row + b0 / 8 * 3;
    return ((block[j % quarter] >> (2 * (j / quarter))) & 3) | ((block[quarter + j / 8] >> (j % 8)) & 1) << 2;
}

// The same for a packed int3 key: the low two bits as unpack_u2 unpacks them (the block's first 8 bytes),
// and the high bits (its next 4 bytes, byte m holding elements 8m .. 8m + 7) broadcast, byte m shuffled
// to the 8 bytes of lane m, each byte's own bit isolated (bit j in byte j), compared into 0 or 0xff and
// kept as 4.
struct unpack_u3 {
    static __m256i block(const uint8_t * key, int i) {
        const uint8_t * b = key + i / 8 * 3;
        int64_t low;
        int32_t high;
        std::memcpy(&low, b, 8);
        std::memcpy(&high, b + 8, 4);
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(low), _mm256_setr_epi64x(0, 2, 4, 6)),
                                            _mm256_set1_epi8(0x03));
        const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
        const __m256i spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(high), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        return _mm256_or_si256(lo, _mm256_and_si256(set, _mm256_set1_epi8(0x04)));
    }
    static int32_t elem(const uint8_t * row, int n, int i) { return field3(row, n, i); }
};

// A tile of TK packed keys (int4: dots_u4_i8, int3: dots_u3_i8, int2: dots_u2_i8, unpacked by U) × TH int8 query heads,
// TK · TH = 8 accumulators; the query vectors are read from L1 as memory operands. The key goes in as
// unsigned bytes (the stored field: k̂ + 8 in [1, 15], or u in [0, 3]), the query as signed ones.
// - AVX2: maddubs adds each pair of products into int16 (at most 2 · 15 · 127 = 3810), so 8 blocks add
//   up in int16 (30480 < 32767) before madd with ones widens them to int32 — one widening per 8 blocks.
// - VNNI (vnni.h): vpdpbusd adds each 4 products straight into the int32 lanes, one instruction per
//   block and head instead of two.
// Both give the exact int32 sums, so the same bits. The tail (n mod 32 elements) is scalar.
template <class U>
struct tile_packed {
    template <int TK, int TH>
    static void run(const int8_t * q, int n_q, const uint8_t * const * k, int n, int32_t * out) {
        const int n_full = n / 32 * 32;
        __m256i acc[TK * TH];
#pragma GCC unroll 8
        for (auto & a : acc) a = _mm256_setzero_si256();
#if defined(HILL_VNNI)
        for (int i = 0; i < n_full; i += 32) {
#pragma GCC unroll 8
            for (int t = 0; t < TK; ++t) {
                const __m256i kv = U::block(k[t], i);
#pragma GCC unroll 8
                for (int h = 0; h < TH; ++h) {
                    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + h * n + i));
                    acc[t * TH + h] = vnni_dpbusd(acc[t * TH + h], kv, qv);
                }
            }
        }
#else
        const __m256i ones = _mm256_set1_epi16(1);
        for (int i0 = 0; i0 < n_full; i0 += 256) {
            const int i1 = i0 + 256 < n_full ? i0 + 256 : n_full;
            __m256i a16[TK * TH];
#pragma GCC unroll 8
            for (auto & a : a16) a = _mm256_setzero_si256();
            for (int i = i0; i < i1; i += 32) {
#pragma GCC unroll 8
                for (int t = 0; t < TK; ++t) {
                    const __m256i kv = U::block(k[t], i);
#pragma GCC unroll 8
                    for (int h = 0; h < TH; ++h) {
                        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + h * n + i));
                        a16[t * TH + h] = _mm256_add_epi16(a16[t * TH + h], _mm256_maddubs_epi16(kv, qv));
                    }
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < TK * TH; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(a16[r], ones));
        }
#endif
        int32_t s[TK * TH];
        reduce(acc, s);
        for (int t = 0; t < TK; ++t) {
            for (int h = 0; h < TH; ++h) {
                int32_t v = s[t * TH + h];
                for (int j = n_full; j < n; ++j) v += int32_t(q[h * n + j]) * U::elem(k[t], n, j);
                out[t * n_q + h] = v;
            }
        }
    }
};

}  // namespace

void dots_u4_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    dots_block<tile_packed<unpack_u4>>(q, n_q, k, n_k, n, out);
}

void dots_u3_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    dots_block<tile_packed<unpack_u3>>(q, n_q, k, n_k, n, out);
}

void dots_u2_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    dots_block<tile_packed<unpack_u2>>(q, n_q, k, n_k, n, out);
}

}  // namespace hill::HILL_SCORE_NS
