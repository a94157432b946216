#include "csd/hls/score_kernel.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "core/fp16.h"
#include "score/head_softmax.h"

#ifdef __SYNTHESIS__
#define HLS_CHECK(x)
#else
#include "core/error.h"
#define HLS_CHECK(x) HILL_ASSERT(x)  // on the CPU the bounds are checked; on the FPGA the host checks them
#endif

namespace hill::csd::hls {

namespace {

// Below this max|k| a head vector quantizes to zeros and scores 0 (as on the host: q_max / max|k|
// must stay finite).
constexpr float min_amax = 0x1p-100f;

// f16 bits to f32, without branches (a datapath on the FPGA; vectorizable on the CPU): the exponent
// and mantissa moved into place and rebiased by one exact multiplication by 2^112 (normal and
// subnormal values alike), inf/NaN given the all-ones exponent, then the sign.
inline float widen(uint16_t h) {
    const uint32_t em = uint32_t(h & 0x7fffu) << 13;
    const float finite = bits_to_f32(em) * 0x1p112f;
    const uint32_t mag = em >= (0x7c00u << 13) ? (em | 0x7f800000u) : f32_to_bits(finite);
    return bits_to_f32(mag | (uint32_t(h & 0x8000u) << 16));
}
inline float widen(float x) {
    return x;
}

// Σ a[i]·b[i] over D elements by a binary adder tree: D products, then log2(D) levels of adds, all
// unrolled (one pipeline stage per level on the FPGA). Exact in int32 (|Σ| <= D · 127 · 127).
template <int D>
int32_t dot_tree(const int8_t (&a)[max_head_dim], const int8_t (&b)[D]) {
    int32_t level[D];
    HLS_PRAGMA(HLS ARRAY_PARTITION variable = level complete)
    for (int i = 0; i < D; ++i) {
        HLS_PRAGMA(HLS UNROLL)
        level[i] = int32_t(int16_t(a[i]) * int16_t(b[i]));  // |127 · 127| fits 16 bits
    }
    for (int width = D / 2; width >= 1; width /= 2) {
        HLS_PRAGMA(HLS UNROLL)
        for (int i = 0; i < width; ++i) {  // each level adds the upper half onto the lower half
            HLS_PRAGMA(HLS UNROLL)
            level[i] = level[i] + level[i + width];
        }
    }
    return level[0];
}

// Round to nearest, ties to even, for |v| <= 2^22 (here |v| <= 127): adding and subtracting 1.5 · 2^23
// leaves no fraction bits, so the hardware rounds — as std::lrint does in the default rounding mode.
inline float round_even(float v) {
    constexpr float magic = 12582912.0f;  // 1.5 · 2^23
    return (v + magic) - magic;
}

// The host scorer's combine (score/host_scorer.cpp): sum, or max with NaN propagated.
inline float combine(bool agg_max, float a, float b) {
    if (!agg_max) return a + b;
    return (b > a || std::isnan(b)) && !std::isnan(a) ? b : a;
}

template <int D, class T>
void score_tokens_d(const kernel_config & c, const query_buffer & qb, const T * keys, int64_t row_stride,
                    int64_t n_tokens, float * out) {
    const float q_max = c.int4 ? 7.0f : 127.0f;
    const int group = c.n_head / c.n_head_kv;
    for (int64_t t = 0; t < n_tokens; ++t) {
        HLS_PRAGMA(HLS PIPELINE)
        const T * row = keys + t * row_stride;
        float token_score = 0.0f;
        for (int g = 0; g < c.n_head_kv; ++g) {
            // Cast the head vector: max|k| (NaN if any element is NaN), then k̂ = rint(k · q_max / max|k|).
            float x[D];
            HLS_PRAGMA(HLS ARRAY_PARTITION variable = x complete)
            float amax = 0.0f;
            bool nan = false;
            for (int i = 0; i < D; ++i) {
                HLS_PRAGMA(HLS UNROLL)
                x[i] = i < c.head_dim ? widen(row[g * c.head_dim + i]) : 0.0f;
                const float a = std::fabs(x[i]);
                nan = nan || std::isnan(a);
                amax = a > amax ? a : amax;
            }
            int8_t k[D];
            HLS_PRAGMA(HLS ARRAY_PARTITION variable = k complete)
            float s_k;
            if (nan || !(amax <= FLT_MAX) || amax < min_amax) {
                for (int i = 0; i < D; ++i) {
                    HLS_PRAGMA(HLS UNROLL)
                    k[i] = 0;
                }
                s_k = amax < min_amax && !nan ? 0.0f : std::numeric_limits<float>::quiet_NaN();
            } else {
                const float inv = q_max / amax;
                for (int i = 0; i < D; ++i) {
                    HLS_PRAGMA(HLS UNROLL)
                    k[i] = int8_t(round_even(x[i] * inv));
                }
                s_k = amax / q_max;
            }
            const bool agg_max = c.aggregate_max && !c.aggregate_softmax;
            float head_score = 0.0f;
            for (int h = 0; h < group; ++h) {
                const int hq = g * group + h;
                const float dot = float(dot_tree<D>(qb.q[hq], k)) * qb.scale[hq] * s_k;
                const float d = c.aggregate_softmax ? softmax_weight(dot, qb.log2_scale, qb.head_mass[hq]) : dot;
                head_score = h == 0 ? d : combine(agg_max, head_score, d);
            }
            if (c.per_kv_head) {
                out[t * c.n_head_kv + g] = c.aggregate_softmax ? softmax_score(head_score) : head_score;
            } else {
                token_score = g == 0 ? head_score : combine(agg_max, token_score, head_score);
            }
        }
        if (!c.per_kv_head) out[t] = c.aggregate_softmax ? softmax_score(token_score) : token_score;
    }
}

template <class T>
void dispatch(const kernel_config & c, const query_buffer & qb, const T * keys, int64_t row_stride, int64_t n_tokens,
              float * out) {
    if (c.head_dim <= 64) return score_tokens_d<64>(c, qb, keys, row_stride, n_tokens, out);
    if (c.head_dim <= 128) return score_tokens_d<128>(c, qb, keys, row_stride, n_tokens, out);
    score_tokens_d<256>(c, qb, keys, row_stride, n_tokens, out);
}

}  // namespace

void load_query(const kernel_config & c, const int8_t * q, const float * scale, const float * head_mass,
                float log2_scale, query_buffer & buf) {
    HLS_CHECK(c.n_head > 0 && c.n_head <= max_head && c.head_dim > 0 && c.head_dim <= max_head_dim);
    HLS_CHECK(!c.aggregate_softmax || head_mass != nullptr);
    for (int h = 0; h < max_head; ++h) {
        for (int i = 0; i < max_head_dim; ++i) buf.q[h][i] = h < c.n_head && i < c.head_dim ? q[h * c.head_dim + i] : 0;
        buf.scale[h] = h < c.n_head ? scale[h] : 0.0f;
        buf.head_mass[h] = h < c.n_head && c.aggregate_softmax ? head_mass[h] : 0.0f;
    }
    buf.log2_scale = c.aggregate_softmax ? log2_scale : 0.0f;
}

void score_tokens(const kernel_config & c, const query_buffer & qb, const void * keys, int64_t row_stride,
                  int64_t n_tokens, float * out) {
    HLS_CHECK(c.n_head > 0 && c.n_head <= max_head && c.n_head_kv > 0 && c.n_head_kv <= max_group);
    HLS_CHECK(c.n_head % c.n_head_kv == 0 && c.head_dim > 0 && c.head_dim <= max_head_dim);
    HLS_CHECK(row_stride >= int64_t(c.n_head_kv) * c.head_dim);
    if (c.key_f32) {
        dispatch(c, qb, static_cast<const float *>(keys), row_stride, n_tokens, out);
    } else {
        dispatch(c, qb, static_cast<const uint16_t *>(keys), row_stride, n_tokens, out);
    }
}

}  // namespace hill::csd::hls
