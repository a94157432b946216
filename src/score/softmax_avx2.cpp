// The softmax aggregate's head weights, 8 tokens at a time (score_avx2.h). Compiled with -mavx2 and
// -ffp-contract=off, without -mfma: every step is the IEEE operation the scalar code (head_softmax.h,
// quant_copy.cpp) performs, in the same order — convert, multiply, subtract, min/max, floor, the
// Horner polynomial, the exponent bits — so the weights are the same bits.
#include "score/score_avx2.h"

#include <immintrin.h>

namespace hill::score_avx2 {

void softmax_weights(const int32_t * dots, int stride, int32_t mul, int32_t offset, float q_scale, const float * s_k,
                     int s_stride, float c, float b, int n, float * w) {
    alignas(32) int32_t d[16];
    alignas(32) float s[16], out[16];
    for (int t = 0; t < 16; ++t) {
        d[t] = t < n ? dots[t * stride] : 0;
        s[t] = t < n ? s_k[t * s_stride] : 0.0f;
    }
    const __m256i vmul = _mm256_set1_epi32(mul), voff = _mm256_set1_epi32(offset);
    const __m256 vqs = _mm256_set1_ps(q_scale), vc = _mm256_set1_ps(c), vb = _mm256_set1_ps(b);
    const __m256 lo = _mm256_set1_ps(-125.0f), hi = _mm256_set1_ps(100.0f), one = _mm256_set1_ps(1.0f);
    for (int t = 0; t < n; t += 8) {
        const __m256i di = _mm256_sub_epi32(_mm256_mullo_epi32(vmul, _mm256_load_si256(reinterpret_cast<const __m256i *>(d + t))), voff);
        const __m256 dot = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(di), vqs), _mm256_load_ps(s + t));
        const __m256 x = _mm256_sub_ps(_mm256_mul_ps(dot, vc), vb);
        const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
        const __m256 xi = _mm256_floor_ps(xc);
        const __m256 f = _mm256_sub_ps(xc, xi);
        __m256 p = _mm256_mul_ps(f, _mm256_set1_ps(0.00133335581f));
        p = _mm256_mul_ps(f, _mm256_add_ps(_mm256_set1_ps(0.00961812911f), p));
        p = _mm256_mul_ps(f, _mm256_add_ps(_mm256_set1_ps(0.0555041087f), p));
        p = _mm256_mul_ps(f, _mm256_add_ps(_mm256_set1_ps(0.240226507f), p));
        p = _mm256_mul_ps(f, _mm256_add_ps(_mm256_set1_ps(0.693147181f), p));
        p = _mm256_add_ps(one, p);
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(xi), _mm256_set1_epi32(127)), 23);
        const __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
        const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // a NaN dot: the weight is that NaN
        _mm256_store_ps(out + t, _mm256_blendv_ps(r, x, nan));
    }
    for (int t = 0; t < n; ++t) w[t] = out[t];
}

}  // namespace hill::score_avx2
