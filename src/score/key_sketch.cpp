#include "score/key_sketch.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <numeric>

#include <fmt/format.h>

#include "compute/ops.h"
#include "core/error.h"
#include "core/fp16.h"
#include "score/selector.h"

namespace hill {

void sketch_channel_importance(const weight_view & wq, const weight_view & wk, const attention_shape & s, float * imp) {
    const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
    HILL_ASSERT(wq.n_rows == int64_t(s.n_head) * hd && wk.n_rows == int64_t(s.n_head_kv) * hd);
    HILL_ASSERT(wq.n_cols == wk.n_cols && wq.data != nullptr && wk.data != nullptr);
    std::vector<float> row(size_t(wq.n_cols));
    const auto norm2 = [&](const weight_view & w, int64_t r) {
        dequantize_row(w.type, w.row(r), row.data(), w.n_cols);
        double acc = 0.0;
        for (const float x : row) acc += double(x) * double(x);
        return acc;
    };
    for (int g = 0; g < s.n_head_kv; ++g) {
        for (int d = 0; d < hd; ++d) {
            double q2 = 0.0;
            for (int i = 0; i < group; ++i) q2 += norm2(wq, int64_t(g * group + i) * hd + d);
            imp[size_t(g) * size_t(hd) + size_t(d)] = float(std::sqrt(norm2(wk, int64_t(g) * hd + d)) * std::sqrt(q2));
        }
    }
}

void sketch_choose_channels(const float * imp, int n_head_kv, int head_dim, int r, sketch_pairing pairing,
                            int32_t * channels) {
    HILL_ASSERT(r >= 1 && r <= head_dim);
    const bool paired = pairing != sketch_pairing::none;
    HILL_ASSERT(!paired || (r % 2 == 0 && head_dim % 2 == 0));
    const int unit = paired ? 2 : 1;
    const int n_units = head_dim / unit;
    // Unit u's channels: itself, or its RoPE pair.
    const auto first = [&](int u) { return pairing == sketch_pairing::adjacent ? 2 * u : u; };
    const auto second = [&](int u) { return pairing == sketch_pairing::adjacent ? 2 * u + 1 : u + head_dim / 2; };
    std::vector<std::pair<uint64_t, int>> rank(static_cast<size_t>(n_units));
    for (int g = 0; g < n_head_kv; ++g) {
        const float * w = imp + size_t(g) * size_t(head_dim);
        for (int u = 0; u < n_units; ++u) {
            const float v = paired ? w[first(u)] + w[second(u)] : w[u];
            rank[size_t(u)] = {select_rank_key(v, u), u};  // higher first, equal: lower unit first, NaN last
        }
        std::sort(rank.begin(), rank.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
        int32_t * out = channels + size_t(g) * size_t(r);
        for (int j = 0; j < r / unit; ++j) {
            const int u = rank[size_t(j)].second;
            out[j * unit] = int32_t(paired ? first(u) : u);
            if (paired) out[j * unit + 1] = int32_t(second(u));
        }
        std::sort(out, out + r);
    }
}

key_sketch::key_sketch(const attention_shape & s, const score_params & p, int r, std::vector<int32_t> channels,
                       int n_sinks, int n_window, int n_seq, int n_layer, int64_t n_ctx, int n_threads)
    : shape_(s), params_(p), r_(r), channels_(std::move(channels)), n_sinks_(n_sinks), n_window_(n_window),
      n_seq_(n_seq), n_layer_(n_layer), n_ctx_(n_ctx) {
    HILL_ASSERT(n_threads >= 1);
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0);
    HILL_ASSERT(r >= 1 && r <= s.head_dim && n_seq >= 1 && n_layer >= 1 && n_ctx >= 1 && n_sinks >= 0 && n_window >= 0);
    row_ = size_t(s.n_head_kv) * size_t(r);
    HILL_ASSERT(channels_.size() == size_t(n_layer) * row_);
    for (size_t i = 0; i < channels_.size(); ++i) {
        HILL_ASSERT(channels_[i] >= 0 && channels_[i] < s.head_dim && (i % size_t(r) == 0 || channels_[i] > channels_[i - 1]));
    }
    set_params(p);
    const size_t n = size_t(n_seq) * size_t(n_layer) * size_t(n_ctx) * row_;
    try {
        sketch_.assign(n, 0);
    } catch (const std::bad_alloc &) {
        fail_input("cannot allocate the key sketch: {} bytes for {} sequences × {} layers × {} positions", n * 2, n_seq,
                   n_layer, n_ctx);
    }
    qp_.resize(size_t(s.n_head) * size_t(r));
    scratch_.resize(size_t(n_threads) * row_);
    head_mass_.resize(size_t(s.n_head));
}

int key_sketch::channels_for(int head_dim) {
    const int r = (head_dim + 3) / 4;
    return std::min(head_dim, std::max(2, r + r % 2));
}

uint64_t key_sketch::bytes_for(const attention_shape & s, int r, int n_seq, int n_layer, int64_t n_ctx) {
    const uint64_t row = uint64_t(s.n_head_kv) * uint64_t(r);
    return uint64_t(n_seq) * uint64_t(n_layer) * uint64_t(n_ctx) * row * 2 + uint64_t(n_layer) * row * 4;
}

std::string key_sketch::describe() const {
    return fmt::format("the key sketch ({} of {} channels per KV head, f16)", r_, shape_.head_dim);
}

uint64_t key_sketch::bytes() const { return sketch_.size() * 2 + channels_.size() * 4; }

double key_sketch::bytes_per_token_layer() const { return double(row_) * 2.0; }

int key_sketch::n_group() const { return params_.granularity == select_granularity::kv_head ? shape_.n_head_kv : 1; }

void key_sketch::set_params(const score_params & p) {
    HILL_ASSERT(p.aggregate != score_aggregate::softmax || shape_.scale > 0.0f);
    params_ = p;
    query_ready_ = false;
}

const int32_t * key_sketch::channels(int il, int g) const {
    HILL_ASSERT(il >= 0 && il < n_layer_ && g >= 0 && g < shape_.n_head_kv);
    return channels_.data() + (size_t(il) * size_t(shape_.n_head_kv) + size_t(g)) * size_t(r_);
}

size_t key_sketch::token_offset(int seq, int il, int64_t t) const {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_ && t >= 0 && t <= n_ctx_);
    return ((size_t(seq) * size_t(n_layer_) + size_t(il)) * size_t(n_ctx_) + size_t(t)) * row_;
}

void key_sketch::write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) {
    HILL_ASSERT(p0 >= 0 && n >= 0 && p0 + n <= n_ctx_ && (n == 0 || k != nullptr));
    HILL_ASSERT(type == ggml_type::f16 || type == ggml_type::f32);
    uint16_t * dst = sketch_.data() + token_offset(seq, il, p0);
    const size_t hd = size_t(shape_.head_dim);
    for (int64_t t = 0; t < n; ++t) {
        for (int g = 0; g < shape_.n_head_kv; ++g) {
            const int32_t * c = channels(il, g);
            const size_t base = size_t(t) * size_t(row_stride) + size_t(g) * hd;
            for (int j = 0; j < r_; ++j) {
                const size_t i = base + size_t(c[j]);
                *dst++ = type == ggml_type::f16 ? static_cast<const f16_bits *>(k)[i]
                                                : fp32_to_fp16(static_cast<const float *>(k)[i]);
            }
        }
    }
}

void key_sketch::prepare_query(int seq, int il, const float * q, const float *) {
    const int group = shape_.n_head / shape_.n_head_kv;
    for (int h = 0; h < shape_.n_head; ++h) {
        const int32_t * c = channels(il, h / group);
        for (int j = 0; j < r_; ++j) qp_[size_t(h) * size_t(r_) + size_t(j)] = q[size_t(h) * size_t(shape_.head_dim) + size_t(c[j])];
    }
    query_base_ = token_offset(seq, il, 0);
    query_ready_ = true;
}

float key_sketch::head_dot(int h, const float * key) const {
    const int group = shape_.n_head / shape_.n_head_kv;
    const float * q = qp_.data() + size_t(h) * size_t(r_);
    const float * k = key + size_t(h / group) * size_t(r_);
    float d = 0.0f;
    for (int j = 0; j < r_; ++j) d += q[j] * k[j];
    return d;
}

void key_sketch::score(int64_t n, float * scores, int64_t stride, thread_pool & pool) {
    HILL_ASSERT(query_ready_ && n >= 0 && n <= n_ctx_ && (n == 0 || scores != nullptr));
    HILL_ASSERT(n_group() == 1 || stride >= n);
    const score_aggregate agg = params_.aggregate;
    const float c = log2_e * shape_.scale;
    const uint16_t * base = sketch_.data() + query_base_;
    if (agg == score_aggregate::softmax) {
        // b_h = log2 Σ_{u ∈ sinks ∪ window} 2^(c · d_h,u), with the partial dots (max subtracted).
        // Named variables, not a structured binding: the lambdas below capture them (clang < 16, the fuzz
        // preset's compiler, cannot capture a binding).
        const select_middle mid = middle_of(n, n_sinks_, n_window_);
        const int64_t s_end = mid.s_end, w_begin = mid.w_begin;
        float * kf = scratch_.data();
        for (int h = 0; h < shape_.n_head; ++h) {
            float m = -INFINITY;
            const auto dot = [&](int64_t u) {
                fp16_to_fp32_row(base + size_t(u) * row_, kf, int64_t(row_));
                return c * head_dot(h, kf);
            };
            const auto each = [&](auto && fn) {
                for (int64_t u = 0; u < s_end; ++u) fn(dot(u));
                for (int64_t u = w_begin; u < n; ++u) fn(dot(u));
            };
            each([&](float x) { m = std::max(m, x); });
            double sum = 0.0;
            if (std::isfinite(m)) each([&](float x) { sum += std::exp2(double(x - m)); });
            head_mass_[size_t(h)] = std::isfinite(m) && sum > 0.0 ? float(std::log2(sum)) + m : 0.0f;
        }
    }
    const int n_g = n_group(), group = shape_.n_head / shape_.n_head_kv;
    HILL_ASSERT(scratch_.size() >= size_t(pool.n_threads()) * row_);
    const int heads_per_score = params_.granularity == select_granularity::kv_head ? group : shape_.n_head;
    const auto job = [&](int ith, int nth) {
        float * key = scratch_.data() + size_t(ith) * row_;
        for (int64_t t = n * ith / nth; t < n * (ith + 1) / nth; ++t) {
            fp16_to_fp32_row(base + size_t(t) * row_, key, int64_t(row_));  // once per token, not per head
            for (int g = 0; g < n_g; ++g) {
                float combined = 0.0f;
                for (int i = 0; i < heads_per_score; ++i) {
                    const int h = g * heads_per_score + i;
                    const float term = head_term(agg, head_dot(h, key), c, head_mass_[size_t(h)]);
                    combined = i == 0 ? term : combine_scores(agg, combined, term);
                }
                scores[size_t(g) * size_t(stride) + size_t(t)] = group_score(agg, combined);
            }
        }
    };
    pool.run(job, n * int64_t(shape_.n_head) * int64_t(row_ / size_t(shape_.n_head_kv)));
}

}  // namespace hill
