#include "score/attention_totals.h"

#include <algorithm>
#include <new>

#include <fmt/format.h>

#include "core/error.h"

namespace hill {

attention_totals::attention_totals(int n_seq, int n_layer, int64_t n_ctx) : n_seq_(n_seq), n_layer_(n_layer), n_ctx_(n_ctx) {
    HILL_ASSERT(n_seq >= 1 && n_layer >= 1 && n_ctx >= 1);
    const size_t n = size_t(n_seq) * size_t(n_layer) * size_t(n_ctx);
    try {
        totals_.assign(n, 0.0f);
    } catch (const std::bad_alloc &) {
        fail_input("cannot allocate the accumulated attention: {} bytes for {} sequences × {} layers × {} positions",
                   n * sizeof(float), n_seq, n_layer, n_ctx);
    }
}

uint64_t attention_totals::bytes_for(int n_seq, int n_layer, int64_t n_ctx) {
    return uint64_t(n_seq) * uint64_t(n_layer) * uint64_t(n_ctx) * sizeof(float);
}

std::string attention_totals::describe() const { return "the accumulated attention of every token (f32)"; }

uint64_t attention_totals::bytes() const { return totals_.size() * sizeof(float); }

size_t attention_totals::index(int seq, int il, int64_t t) const {
    HILL_ASSERT(seq >= 0 && seq < n_seq_ && il >= 0 && il < n_layer_ && t >= 0 && t < n_ctx_);
    return (size_t(seq) * size_t(n_layer_) + size_t(il)) * size_t(n_ctx_) + size_t(t);
}

void attention_totals::write(int seq, int il, int64_t p0, int64_t n, ggml_type, const void *, int64_t) {
    HILL_ASSERT(p0 >= 0 && n >= 0 && p0 + n <= n_ctx_);
    if (n == 0) return;
    std::fill_n(totals_.begin() + ptrdiff_t(index(seq, il, p0)), size_t(n), 0.0f);
}

void attention_totals::prepare_query(int seq, int il, const float *, const float *) {
    query_ = index(seq, il, 0);
    query_ready_ = true;
}

void attention_totals::score(int64_t n, float * scores, int64_t, thread_pool &) {
    HILL_ASSERT(query_ready_ && n >= 0 && n <= n_ctx_ && (n == 0 || scores != nullptr));
    std::copy_n(totals_.begin() + ptrdiff_t(query_), size_t(n), scores);
}

void attention_totals::observe(int seq, int il, std::span<const int32_t> positions, const float * weights) {
    for (size_t j = 0; j < positions.size(); ++j) {
        float & a = totals_[index(seq, il, positions[j])];
        a = a - a / 8.0f + weights[j];
    }
}

}  // namespace hill
