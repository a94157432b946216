#include "score/page_bounds.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "score/selector.h"

namespace hill {

namespace {

// The f16 nearest to x on the side that keeps a bound: down (a minimum) or up (a maximum). NaN stays
// NaN; beyond the f16 range the rounding goes to ±inf or ±65504 as the side needs.
f16_bits f16_outward(float x, bool up) {
    f16_bits h = fp32_to_fp16(x);
    if (std::isnan(x)) return h;
    const float y = fp16_to_fp32(h);
    if (up ? y >= x : y <= x) return h;
    // One f16 step further out: magnitudes grow away from zero, shrink towards it.
    const bool neg = (h & 0x8000u) != 0;
    const uint16_t mag = h & 0x7fffu;
    if (up) return neg ? f16_bits(mag == 1 ? 0 : h - 1) : f16_bits(h + 1);  // -min subnormal rounds up to +0
    if (!neg && mag == 0) return f16_bits(0x8001u);                          // below +0: -min subnormal
    return neg ? f16_bits(h + 1) : f16_bits(h - 1);
}

float key_value(ggml_type type, const void * k, size_t i) {
    return type == ggml_type::f16 ? fp16_to_fp32(static_cast<const f16_bits *>(k)[i]) : static_cast<const float *>(k)[i];
}

}  // namespace

page_bounds::page_bounds(const attention_shape & s, const score_params & p, int page_size, int n_seq, int n_layer,
                         int64_t n_ctx, int n_threads, const page_chunking & chunking)
    : shape_(s), params_(p), page_size_(page_size), n_seq_(n_seq), n_layer_(n_layer), n_ctx_(n_ctx), n_threads_(n_threads),
      chunking_(chunking) {
    HILL_ASSERT(chunking.max_pages >= 1 && (chunking.max_pages == 1 || chunking.alpha > 0.0));
    HILL_ASSERT(s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0);
    HILL_ASSERT(page_size >= 1 && n_seq >= 1 && n_layer >= 1 && n_ctx >= 1 && n_threads >= 1);
    set_params(p);
    n_pages_ = (n_ctx + page_size - 1) / page_size;
    row_ = size_t(s.n_head_kv) * size_t(s.head_dim);
    const size_t n = size_t(n_seq) * size_t(n_layer) * size_t(n_pages_) * 2 * row_;
    try {
        bounds_.resize(n);
    } catch (const std::bad_alloc &) {
        fail_input("cannot allocate the page bounds: {} bytes for {} sequences × {} layers × {} positions", n * 2, n_seq,
                   n_layer, n_ctx);
    }
    q_.resize(size_t(s.n_head) * size_t(s.head_dim));
    head_mass_.resize(size_t(s.n_head));
    scratch_.resize(size_t(n_threads) * 4 * row_);
    if (chunking.max_pages > 1) {
        chunk_pages_.assign(size_t(n_seq) * size_t(n_layer), std::min(chunking.max_pages, chunking.start_pages));
        rank_.resize(size_t(n_pages_));
        candidates_.reserve(size_t(n_pages_));
        page_rank_.reserve(size_t(n_pages_));
    }
}

uint64_t page_bounds::bytes_for(const attention_shape & s, int page_size, int n_seq, int n_layer, int64_t n_ctx) {
    const uint64_t n_pages = uint64_t((n_ctx + page_size - 1) / page_size);
    return uint64_t(n_seq) * uint64_t(n_layer) * n_pages * 2 * uint64_t(s.n_head_kv) * uint64_t(s.head_dim) *
           sizeof(uint16_t);
}

std::string page_bounds::describe() const {
    if (chunking_.max_pages > 1) {
        return fmt::format("chunk bounds (min/max keys of {}-token pages, f16; chunks of 1-{} pages)", page_size_,
                           chunking_.max_pages);
    }
    return fmt::format("page bounds (min/max keys of {}-token pages, f16)", page_size_);
}

int page_bounds::chunk_pages(int seq, int il) const {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_);
    return chunking_.max_pages > 1 ? chunk_pages_[size_t(seq) * size_t(n_layer_) + size_t(il)] : 1;
}

uint64_t page_bounds::bytes() const {
    return bounds_.size() * sizeof(uint16_t) + (q_.size() + head_mass_.size() + scratch_.size()) * sizeof(float) +
           chunk_pages_.size() * sizeof(int) + rank_.size() * sizeof(rank_[0]) +
           (candidates_.capacity() + page_rank_.capacity() * 2) * sizeof(int64_t);
}

double page_bounds::bytes_per_token_layer() const { return 4.0 * double(row_) / double(page_size_); }

int page_bounds::n_group() const {
    return params_.granularity == select_granularity::kv_head ? shape_.n_head_kv : 1;
}

void page_bounds::set_params(const score_params & p) {
    HILL_ASSERT(p.aggregate != score_aggregate::softmax || shape_.scale > 0.0f);
    params_ = p;
    query_ready_ = false;
}

size_t page_bounds::page_offset(int seq, int il, int64_t page) const {
    return ((size_t(seq) * size_t(n_layer_) + size_t(il)) * size_t(n_pages_) + size_t(page)) * 2 * row_;
}

const uint16_t * page_bounds::bounds(int seq, int il, int64_t page) const {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_ && page >= 0 && page < n_pages_);
    return bounds_.data() + page_offset(seq, il, page);
}

void page_bounds::write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_);
    HILL_ASSERT(p0 >= 0 && n >= 0 && p0 + n <= n_ctx_ && (n == 0 || k != nullptr));
    HILL_ASSERT(type == ggml_type::f16 || type == ggml_type::f32);
    HILL_ASSERT(row_stride >= int64_t(row_));
    const size_t elem = type == ggml_type::f16 ? 2 : 4;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t t = p0 + j;
        const void * row = static_cast<const uint8_t *>(k) + size_t(j) * size_t(row_stride) * elem;
        uint16_t * mn = bounds_.data() + page_offset(seq, il, t / page_size_);
        uint16_t * mx = mn + row_;
        const bool reset = t % page_size_ == 0;
        for (size_t i = 0; i < row_; ++i) {
            const float x = key_value(type, row, i);
            const f16_bits lo = f16_outward(x, false), hi = f16_outward(x, true);
            if (reset || std::isnan(x)) {
                mn[i] = lo;
                mx[i] = hi;
                continue;
            }
            const float m0 = fp16_to_fp32(mn[i]), m1 = fp16_to_fp32(mx[i]);
            if (std::isnan(m0)) continue;  // a NaN key made the page's bounds NaN until it is reset
            if (x < m0) mn[i] = lo;
            if (x > m1) mx[i] = hi;
        }
    }
}

void page_bounds::prepare_query(int seq, int il, const float * q, const float * head_mass) {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_ && q != nullptr);
    HILL_ASSERT(params_.aggregate != score_aggregate::softmax || head_mass != nullptr);
    std::copy(q, q + q_.size(), q_.begin());
    if (params_.aggregate == score_aggregate::softmax) std::copy(head_mass, head_mass + head_mass_.size(), head_mass_.begin());
    query_page0_ = page_offset(seq, il, 0);
    query_pair_ = size_t(seq) * size_t(n_layer_) + size_t(il);
    query_ready_ = true;
}

float page_bounds::bound_score(const float * mn, const float * mx, int g) const {
    const int hd = shape_.head_dim, group = shape_.n_head / shape_.n_head_kv;
    const int heads_per_score = params_.granularity == select_granularity::kv_head ? group : shape_.n_head;
    const score_aggregate agg = params_.aggregate;
    const float c = log2_e * shape_.scale;
    float combined = 0.0f;
    for (int i = 0; i < heads_per_score; ++i) {
        const int h = g * heads_per_score + i;
        const size_t kv = size_t(h / group) * size_t(hd);
        const float * q = q_.data() + size_t(h) * size_t(hd);
        float u = 0.0f;
        for (int d = 0; d < hd; ++d) {
            const float qd = q[d];  // a zero query element adds 0, whatever the bounds (inf ones too)
            if (qd > 0.0f) u += qd * mx[kv + size_t(d)];
            if (qd < 0.0f) u += qd * mn[kv + size_t(d)];
        }
        const float term = head_term(agg, u, c, agg == score_aggregate::softmax ? head_mass_[size_t(h)] : 0.0f);
        combined = i == 0 ? term : combine_scores(agg, combined, term);
    }
    return group_score(agg, combined);
}

void page_bounds::widen(int64_t page0, int64_t n_pages, float * mn) const {
    float * mx = mn + row_;
    float * page = mn + 2 * row_;  // the next page's bounds
    fp16_to_fp32_row(bounds_.data() + query_page0_ + size_t(page0) * 2 * row_, mn, int64_t(2 * row_));
    for (int64_t j = page0 + 1; j < page0 + n_pages; ++j) {
        fp16_to_fp32_row(bounds_.data() + query_page0_ + size_t(j) * 2 * row_, page, int64_t(2 * row_));
        for (size_t i = 0; i < row_; ++i) mn[i] = std::min(mn[i], page[i]);
        for (size_t i = 0; i < row_; ++i) mx[i] = std::max(mx[i], page[row_ + i]);
    }
}

void page_bounds::score(int64_t n, float * scores, int64_t stride, thread_pool & pool) {
    HILL_ASSERT(query_ready_);
    HILL_ASSERT(n >= 0 && n <= n_ctx_);
    HILL_ASSERT(n == 0 || scores != nullptr);
    HILL_ASSERT(n_group() == 1 || stride >= n);
    HILL_ASSERT(pool.n_threads() <= n_threads_);
    const int64_t n_pages = (n + page_size_ - 1) / page_size_;
    const int n_g = n_group();
    // Scores of pages [j0, j1) of tokens [0, n): each page's own bounds.
    const auto score_pages = [&](const std::vector<int64_t> * pages, int64_t m) {
        const auto job = [&](int ith, int nth) {
            float * mn = scratch_.data() + size_t(ith) * 4 * row_;
            for (int64_t i = m * ith / nth; i < m * (ith + 1) / nth; ++i) {
                const int64_t j = pages != nullptr ? (*pages)[size_t(i)] : i;
                widen(j, 1, mn);
                const int64_t t0 = j * page_size_, t1 = std::min<int64_t>(n, t0 + page_size_);
                for (int g = 0; g < n_g; ++g) {
                    std::fill(scores + size_t(g) * size_t(stride) + t0, scores + size_t(g) * size_t(stride) + t1,
                              bound_score(mn, mn + row_, g));
                }
            }
        };
        // A page's work: its bounds widened (2 · row_) and scored by every query head, its scores stored.
        pool.run(job, m * (int64_t(page_size_) + 2 * int64_t(row_) + int64_t(shape_.n_head) * shape_.head_dim));
    };
    if (chunking_.max_pages <= 1 || n_pages <= 1) {
        score_pages(nullptr, n_pages);
        return;
    }
    // Adaptive chunks (LeoAM): chunks of c pages scored by their merged bounds, the best chunks holding
    // candidates_per_selected · ⌈α·n⌉ tokens refined page by page, the others out of the running.
    int & c = chunk_pages_[query_pair_];
    const int64_t n_chunks = (n_pages + c - 1) / c;
    const auto rank_chunks = [&](int ith, int nth) {
        float * mn = scratch_.data() + size_t(ith) * 4 * row_;
        for (int64_t k = n_chunks * ith / nth; k < n_chunks * (ith + 1) / nth; ++k) {
            float best = -INFINITY;  // the chunk's rank: its best group's score (NaN last)
            widen(k * c, std::min<int64_t>(c, n_pages - k * c), mn);
            for (int g = 0; g < n_g; ++g) {
                const float x = bound_score(mn, mn + row_, g);
                best = std::isnan(x) ? best : std::max(best, x);
            }
            rank_[size_t(k)] = {select_rank_key(best, k), k};
        }
    };
    pool.run(rank_chunks, n_chunks * (int64_t(c) * 2 * int64_t(row_) + int64_t(shape_.n_head) * shape_.head_dim));
    std::sort(rank_.begin(), rank_.begin() + ptrdiff_t(n_chunks), [](const auto & a, const auto & b) { return a.first > b.first; });
    const int64_t n_top = int64_t(std::ceil(chunking_.alpha * double(n)));
    const int64_t want = std::min<int64_t>(n, chunking_.candidates_per_selected * n_top);
    candidates_.clear();
    int64_t held = 0;
    for (int64_t i = 0; i < n_chunks && held < want; ++i) {
        const int64_t k = rank_[size_t(i)].second;
        for (int64_t j = k * c; j < std::min<int64_t>(n_pages, (k + 1) * c); ++j) {
            candidates_.push_back(j);
            held += std::min<int64_t>(n, (j + 1) * page_size_) - j * page_size_;
        }
    }
    for (int g = 0; g < n_g; ++g) std::fill(scores + size_t(g) * size_t(stride), scores + size_t(g) * size_t(stride) + n, -INFINITY);
    score_pages(&candidates_, int64_t(candidates_.size()));
    // The chunk size for the next step follows the runs of important pages: the best pages of the
    // candidates holding ⌈α·n⌉ tokens (group 0's ranking), their mean run length of consecutive pages,
    // and c one power of two closer to the largest power of two within it (clamped to [1, max_pages]).
    page_rank_.clear();
    for (const int64_t j : candidates_) page_rank_.emplace_back(select_rank_key(scores[j * page_size_], j), j);
    std::sort(page_rank_.begin(), page_rank_.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
    int64_t filled = 0, picked = 0;
    for (; picked < int64_t(page_rank_.size()) && filled < n_top; ++picked) {
        const int64_t j = page_rank_[size_t(picked)].second;
        filled += std::min<int64_t>(n, (j + 1) * page_size_) - j * page_size_;
    }
    if (picked == 0) return;
    std::sort(page_rank_.begin(), page_rank_.begin() + ptrdiff_t(picked),
              [](const auto & a, const auto & b) { return a.second < b.second; });
    int64_t runs = 1;
    for (int64_t i = 1; i < picked; ++i) runs += page_rank_[size_t(i)].second != page_rank_[size_t(i - 1)].second + 1 ? 1 : 0;
    int target = 1;
    while (target * 2 <= chunking_.max_pages && double(target * 2) <= double(picked) / double(runs)) target *= 2;
    c = c < target ? c * 2 : c > target ? c / 2 : c;
}

}  // namespace hill
