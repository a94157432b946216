#include "score/host_scorer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "compute/kernel_mode.h"
#include "core/error.h"
#include "core/fp16.h"
#include "score/score_avx2.h"

namespace hill {

namespace {

// ---- scalar references of the score_avx2 kernels ----

inline float widen(float x) {
    return x;
}
inline float widen(f16_bits h) {
    return fp16_to_fp32(h);
}
inline float widen(int8_t v) {
    return float(v);
}

template <class T>
inline float elem(const uint8_t * row, int i) {
    return widen(reinterpret_cast<const T *>(row)[i]);
}

template <class T>
void dots_scalar(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out) {
    for (int t = 0; t < n_k; ++t) {
        for (int h = 0; h < n_q; ++h) {
            float s = 0.0f;
            for (int i = 0; i < n; ++i) s += q[h * n + i] * elem<T>(k[t], i);
            out[t * n_q + h] = s;
        }
    }
}

void dots_i8_i8_scalar(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out) {
    for (int t = 0; t < n_k; ++t) {
        const auto * kt = reinterpret_cast<const int8_t *>(k[t]);
        for (int h = 0; h < n_q; ++h) {
            int32_t s = 0;
            for (int i = 0; i < n; ++i) s += int32_t(q[h * n + i]) * int32_t(kt[i]);
            out[t * n_q + h] = s;
        }
    }
}

template <class T>
float amax_scalar(const uint8_t * x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float a = std::fabs(elem<T>(x, i));
        if (std::isnan(a)) return a;
        m = std::max(m, a);
    }
    return m;
}

template <class T>
void quantize_scalar(const uint8_t * x, int n, float inv, int8_t * out) {
    for (int i = 0; i < n; ++i) out[i] = int8_t(std::lrint(elem<T>(x, i) * inv));
}

// ---- the kernels of one (key type, kernel_mode) ----

using dots_fn = void (*)(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out);

struct score_kernels {
    dots_fn dots_key;  // keys as stored (f32 or f16)
    float (*amax)(const uint8_t * x, int n);
    void (*quantize)(const uint8_t * x, int n, float inv, int8_t * out);
    dots_fn dots_i8;
    void (*dots_i8_i8)(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
    size_t elem_bytes;
};

template <class T>
score_kernels scalar_kernels() {
    return {dots_scalar<T>, amax_scalar<T>, quantize_scalar<T>, dots_scalar<int8_t>, dots_i8_i8_scalar, sizeof(T)};
}

score_kernels select_kernels(ggml_type type) {
    HILL_ASSERT(type == ggml_type::f32 || type == ggml_type::f16);
    const bool f16 = type == ggml_type::f16;
    if (kernel_mode_get() == kernel_mode::avx2) {
        namespace a = score_avx2;
        return f16 ? score_kernels{a::dots_f16, a::amax_f16, a::quantize_f16, a::dots_i8, a::dots_i8_i8, 2}
                   : score_kernels{a::dots_f32, a::amax_f32, a::quantize_f32, a::dots_i8, a::dots_i8_i8, 4};
    }
    return f16 ? scalar_kernels<f16_bits>() : scalar_kernels<float>();
}

float q_max_of(score_precision p) {
    HILL_ASSERT(p != score_precision::fp16);
    return p == score_precision::int8 ? 127.0f : 7.0f;
}

// quantize_symmetric with given kernels and q_max.
float quantize_with(const score_kernels & kern, const uint8_t * x, int n, float q_max, int8_t * out) {
    const float amax = kern.amax(x, n);
    if (!(amax <= FLT_MAX) || amax < quantize_min_amax) {  // inf or NaN element, or (nearly) all zeros
        std::fill(out, out + n, int8_t(0));
        return amax < quantize_min_amax ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    // |x · inv| <= max|x| · q_max / max|x|, which rounds to q_max: the values fit [-q_max, q_max].
    kern.quantize(x, n, q_max / amax, out);
    return amax / q_max;
}

}  // namespace

float quantize_symmetric(ggml_type type, const void * x, int n, score_precision p, int8_t * out) {
    HILL_ASSERT(n >= 0);
    return quantize_with(select_kernels(type), static_cast<const uint8_t *>(x), n, q_max_of(p), out);
}

host_scorer::host_scorer(const attention_shape & s, const score_params & p, int n_threads)
    : shape_(s), params_(p), n_threads_(n_threads) {
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0);
    HILL_ASSERT(s.head_dim > 0 && s.head_dim <= score_max_head_dim && n_threads >= 1);
    group_ = s.n_head / s.n_head_kv;
    key_stride_ = (s.head_dim + 63) / 64 * 64;
    dots_stride_ = (score_block * group_ + 15) / 16 * 16;
    const size_t nq = size_t(s.n_head) * size_t(s.head_dim);
    q_f32_.resize(nq);
    if (p.key != score_precision::fp16 && p.query == query_precision::int8) {
        q_i8_.resize(nq);
        q_scale_.resize(size_t(s.n_head));
    }
    if (p.key != score_precision::fp16) key_i8_.resize(size_t(n_threads) * score_block * size_t(key_stride_));
    dots_f32_.resize(size_t(n_threads) * size_t(dots_stride_));
    if (!q_i8_.empty()) dots_i32_.resize(dots_f32_.size());
    if (p.aggregate == score_aggregate::softmax) {
        HILL_ASSERT(s.scale > 0.0f);
        head_mass_.resize(size_t(s.n_head));
        log2_scale_ = log2_e * s.scale;
    }
}

int host_scorer::n_group() const {
    return params_.granularity == select_granularity::layer ? 1 : shape_.n_head_kv;
}

void host_scorer::prepare_query(const float * q, const float * head_mass) {
    std::copy(q, q + q_f32_.size(), q_f32_.begin());
    if (!head_mass_.empty()) {
        HILL_ASSERT(head_mass != nullptr);
        std::copy(head_mass, head_mass + head_mass_.size(), head_mass_.begin());
    }
    if (!q_i8_.empty()) {
        const score_kernels kern = select_kernels(ggml_type::f32);
        const int hd = shape_.head_dim;
        for (int h = 0; h < shape_.n_head; ++h) {
            q_scale_[size_t(h)] = quantize_with(kern, reinterpret_cast<const uint8_t *>(q + h * hd), hd,
                                                q_max_of(score_precision::int8), q_i8_.data() + h * hd);
        }
    }
    query_ready_ = true;
}

void host_scorer::score(const kv_view & keys, const int32_t * rows, float * scores, int64_t scores_stride,
                        thread_pool & pool) {
    const int hd = shape_.head_dim, n_kv_head = shape_.n_head_kv, group = group_;
    HILL_ASSERT(query_ready_);
    HILL_ASSERT(keys.n_kv >= 0 && keys.row_stride >= int64_t(n_kv_head) * hd);
    HILL_ASSERT(keys.n_kv == 0 || (keys.k != nullptr && scores != nullptr));
    HILL_ASSERT(n_group() == 1 || scores_stride >= keys.n_kv);
    HILL_ASSERT(pool.n_threads() <= n_threads_);
    const score_kernels kern = select_kernels(keys.type);
    const int64_t n = keys.n_kv;
    const size_t row_bytes = size_t(keys.row_stride) * kern.elem_bytes;
    const size_t head_bytes = size_t(hd) * kern.elem_bytes;
    const auto * k_base = static_cast<const uint8_t *>(keys.k);
    auto row_of = [&](int64_t j) { return k_base + size_t(rows != nullptr ? int64_t(rows[j]) : j) * row_bytes; };
    const bool per_layer = params_.granularity == select_granularity::layer;
    const score_aggregate agg = params_.aggregate;
    const bool key_int = params_.key != score_precision::fp16;
    const bool query_int = !q_i8_.empty();
    const float q_max = key_int ? q_max_of(params_.key) : 0.0f;
    const float c = log2_scale_;
    const float * b = head_mass_.empty() ? nullptr : head_mass_.data();  // softmax: b_h

    const auto job = [&](int ith, int nth) {
        int8_t * key_i8 = key_int ? key_i8_.data() + size_t(ith) * score_block * size_t(key_stride_) : nullptr;
        float * dots = dots_f32_.data() + size_t(ith) * size_t(dots_stride_);  // f32 [score_block, group]
        int32_t * dots_i = query_int ? dots_i32_.data() + size_t(ith) * size_t(dots_stride_) : nullptr;
        const uint8_t * row[score_block];   // the block's key rows
        const uint8_t * next[score_block];  // the next block's
        const uint8_t * k[score_block];     // their head vectors of the current KV head (or int8 copies)
        float s_k[score_block];             // int keys: their scales
        float token_score[score_block];     // layer granularity: the block's scores so far
        const int64_t j_end = n * (ith + 1) / nth;
        for (int64_t j0 = n * ith / nth; j0 < j_end; j0 += score_block) {
            const int nb = int(std::min<int64_t>(score_block, j_end - j0));
            for (int t = 0; t < nb; ++t) row[t] = row_of(j0 + t);
            const int n_next = int(std::clamp<int64_t>(j_end - j0 - score_block, 0, score_block));
            for (int t = 0; t < n_next; ++t) next[t] = row_of(j0 + score_block + t);
            for (int g = 0; g < n_kv_head; ++g) {
                const size_t h0 = size_t(g) * size_t(group);  // first query head of KV head g
                const float * q = q_f32_.data() + h0 * size_t(hd);
                for (int t = 0; t < nb; ++t) k[t] = row[t] + size_t(g) * head_bytes;
                // The next block's head vectors of this KV head, into L1 while this block's are scored:
                // the hardware prefetchers do not follow a row index list, and follow the KV-head-major
                // reads of a block poorly. On the 2-core AMD EPYC test VM (one thread, 64K tokens of 8
                // KV heads × 128, f16), this took scoring from DRAM from 7.3 to 10.9 GB/s for f16 keys
                // and from 4.8 to 7.1 GB/s for int8 keys and query (shuffled rows: 7.0 to 12.1, 4.0 to
                // 7.8), against 13 and 10 GB/s with the keys in L2. Prefetching whole rows one block
                // ahead at the block's start measured 7.7 / 5.0 (9.4 / 6.4); two or four blocks ahead,
                // no better than one.
                for (int t = 0; t < n_next; ++t) {
                    for (size_t o = 0; o < head_bytes; o += 64)
                        __builtin_prefetch(next[t] + size_t(g) * head_bytes + o, 0, 3);
                }
                if (!key_int) {
                    kern.dots_key(q, group, k, nb, hd, dots);
                } else {
                    for (int t = 0; t < nb; ++t) {
                        int8_t * kq = key_i8 + size_t(t) * size_t(key_stride_);
                        s_k[t] = quantize_with(kern, k[t], hd, q_max, kq);
                        k[t] = reinterpret_cast<const uint8_t *>(kq);
                    }
                    if (query_int) {
                        kern.dots_i8_i8(q_i8_.data() + h0 * size_t(hd), group, k, nb, hd, dots_i);
                        for (int t = 0; t < nb; ++t) {
                            for (int h = 0; h < group; ++h) {
                                dots[t * group + h] = float(dots_i[t * group + h]) * q_scale_[h0 + size_t(h)] * s_k[t];
                            }
                        }
                    } else {
                        kern.dots_i8(q, group, k, nb, hd, dots);
                        for (int t = 0; t < nb; ++t) {
                            for (int h = 0; h < group; ++h) dots[t * group + h] *= s_k[t];
                        }
                    }
                }
                for (int t = 0; t < nb; ++t) {
                    const float * d = dots + t * group;
                    float head_score = 0.0f;
                    for (int h = 0; h < group; ++h) {
                        const float v = head_term(agg, d[h], c, b != nullptr ? b[h0 + size_t(h)] : 0.0f);
                        head_score = h == 0 ? v : combine_scores(agg, head_score, v);
                    }
                    if (!per_layer) {
                        scores[int64_t(g) * scores_stride + j0 + t] = group_score(agg, head_score);
                    } else {
                        token_score[t] = g == 0 ? head_score : combine_scores(agg, token_score[t], head_score);
                    }
                }
            }
            if (per_layer) {
                for (int t = 0; t < nb; ++t) scores[j0 + t] = group_score(agg, token_score[t]);
            }
        }
    };
    pool.run(job, n * int64_t(shape_.n_head) * hd);
}

void head_log2_mass(const attention_shape & s, const float * q, const kv_view & keys, const int32_t * rows,
                    float * out) {
    HILL_ASSERT(s.scale > 0.0f && keys.n_kv >= 0 && keys.row_stride >= int64_t(s.n_head_kv) * s.head_dim);
    HILL_ASSERT(keys.type == ggml_type::f16 || keys.type == ggml_type::f32);
    const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
    const float c = log2_e * s.scale;
    const size_t elem = keys.type == ggml_type::f16 ? 2 : 4;
    const auto * base = static_cast<const uint8_t *>(keys.k);
    for (int h = 0; h < s.n_head; ++h) {
        const float * qh = q + size_t(h) * size_t(hd);
        const size_t head_off = size_t(h / group) * size_t(hd);
        // Two passes over the few tokens: the largest exponent, then the sum relative to it.
        float m = out[h];
        for (int pass = 0; pass < 2; ++pass) {
            double sum = pass == 1 && out[h] > -INFINITY ? std::exp2(double(out[h]) - double(m)) : 0.0;
            for (int64_t j = 0; j < keys.n_kv; ++j) {
                const uint8_t * row =
                    base + size_t(rows != nullptr ? int64_t(rows[j]) : j) * size_t(keys.row_stride) * elem;
                float d = 0.0f;
                for (int i = 0; i < hd; ++i) {
                    const size_t e = head_off + size_t(i);
                    const float k = elem == 2 ? fp16_to_fp32(reinterpret_cast<const f16_bits *>(row)[e])
                                              : reinterpret_cast<const float *>(row)[e];
                    d += qh[i] * k;
                }
                const float x = d * c;
                if (pass == 0) {
                    m = std::max(m, x);
                } else {
                    sum += std::exp2(double(x) - double(m));
                }
            }
            if (pass == 1 && sum > 0.0) out[h] = float(double(m) + std::log2(sum));
        }
    }
}

}  // namespace hill
