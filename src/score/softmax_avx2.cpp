// The softmax aggregate's head weights of a KV head's query heads, summed, 8 tokens at a time
// (score_avx2.h). Compiled with -mavx2 and
// -ffp-contract=off, without -mfma: every step is the IEEE operation the scalar code (head_softmax.h,
// quant_copy.cpp) performs, in the same order — convert, multiply, subtract, min/max, floor, the
// Horner polynomial, the exponent bits — so the weights are the same bits.
#include "score/score_avx2.h"

#include <immintrin.h>

namespace hill::score_avx2 {

void softmax_group(const int32_t * dots, int group, int32_t mul, const int32_t * offset, const float * q_scale,
                   const float * s_k, float c, const float * b, int n, float * acc) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i d_index = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(group));
    const __m256 vc = _mm256_set1_ps(c);
    const __m256 lo = _mm256_set1_ps(-125.0f), hi = _mm256_set1_ps(100.0f), one = _mm256_set1_ps(1.0f);
    for (int t = 0; t < n; t += 8) {
        // Lanes past the last token gather nothing (their 0 is computed and not stored).
        const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - t), lanes);
        const __m256 sk = _mm256_maskload_ps(s_k + t, valid);
        __m256 sum = _mm256_setzero_ps();
        for (int h = 0; h < group; ++h) {
            const __m256i d =
                _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), dots + t * group + h, d_index, valid, 4);
            const __m256i di = _mm256_sub_epi32(_mm256_mullo_epi32(_mm256_set1_epi32(mul), d), _mm256_set1_epi32(offset[h]));
            const __m256 dot = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(di), _mm256_set1_ps(q_scale[h])), sk);
            const __m256 x = _mm256_sub_ps(_mm256_mul_ps(dot, vc), _mm256_set1_ps(b != nullptr ? b[h] : 0.0f));
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
            const __m256 w = _mm256_blendv_ps(r, x, nan);
            sum = h == 0 ? w : _mm256_add_ps(sum, w);
        }
        if (n - t >= 8) {
            _mm256_storeu_ps(acc + t, sum);
        } else {
            alignas(32) float out[8];
            _mm256_store_ps(out, sum);
            for (int j = 0; j < n - t; ++j) acc[t + j] = out[j];
        }
    }
}

}  // namespace hill::score_avx2
