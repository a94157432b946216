// The 256-bit vpdpbusd / vpdpwssd for kernels compiled with VNNI: AVX-VNNI's VEX form, or, in a file
// compiled with AVX512-VNNI and AVX512-VL (which a CPU may have without AVX-VNNI: Zen 4, Ice Lake),
// the EVEX form of the same instructions. Defines HILL_VNNI where either is available, and nothing
// otherwise (plain AVX2 builds use maddubs + madd + add).
//
// Include only from files compiled for a SIMD target (kernels_avx2.h's rules): the helpers are in an
// unnamed namespace, so each file has its own copy, built for its own instruction set.
//
//   vnni_dpbusd(acc, u, s): acc + Σ of each 4 adjacent products u8 (u) × s8 (s), per int32 lane;
//   vnni_dpwssd(acc, p, f): acc + Σ of each 2 adjacent products s16 × s16, per int32 lane.
// Both exact (no intermediate saturation), as long as the int32 lanes do not overflow.
#pragma once

#include <immintrin.h>

namespace {

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define HILL_VNNI 1
inline __m256i vnni_dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i vnni_dpwssd(__m256i acc, __m256i p, __m256i f) { return _mm256_dpwssd_epi32(acc, p, f); }
#elif defined(__AVXVNNI__)
#define HILL_VNNI 1
inline __m256i vnni_dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
inline __m256i vnni_dpwssd(__m256i acc, __m256i p, __m256i f) { return _mm256_dpwssd_avx_epi32(acc, p, f); }
#endif

}  // namespace
