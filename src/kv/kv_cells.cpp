#include "kv/kv_cells.h"

#include "core/error.h"

#include <algorithm>

namespace hill {

kv_cells::kv_cells(const kv_cells_params & p) : p_(p), capacity_(p.hot_slots) {
    HILL_ASSERT(p.n_layer > 0 && p.n_seq > 0 && p.n_ctx > 0 && p.hot_slots >= 0 && p.hot_slots < int64_t(no_slot));
    const size_t n_cells = size_t(p.n_seq) * size_t(p.n_layer) * size_t(p.n_ctx);
    n_tokens_.assign(size_t(p.n_seq), 0);
    hot_.assign(n_cells, no_slot);
    hits_.assign(n_cells, 0);
    moved_.assign(n_cells, never_moved);
    HILL_ASSERT(p.layer_slots.empty() || p.layer_slots.size() == size_t(p.n_layer));
    free_.resize(size_t(p.n_layer));
    for (int il = 0; il < p.n_layer; ++il) {
        const int64_t n = hot_slots(il);
        HILL_ASSERT(n >= 0 && n <= p.hot_slots);
        std::vector<uint32_t> & f = free_[size_t(il)];
        f.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) f[size_t(i)] = uint32_t(n - 1 - i);  // slot 0 first
    }
    n_hot_.assign(size_t(p.n_layer), 0);
    dropped_.assign(size_t(p.n_seq) * size_t(p.n_layer), 0);
    HILL_ASSERT(p.window.empty() || p.window.size() == size_t(p.n_layer));
}

bool kv_cells::can_truncate(int seq, int64_t n) const {
    if (n == 0 || n >= n_tokens(seq)) return true;
    for (int il = 0; il < p_.n_layer; ++il) {
        if (dropped_[size_t(seq) * size_t(p_.n_layer) + size_t(il)] > 0) return false;
    }
    return true;
}

void kv_cells::drop_outside_windows(int seq) {
    for (int il = 0; il < p_.n_layer; ++il) {
        if (window(il) == 0) continue;
        int64_t & d = dropped_[size_t(seq) * size_t(p_.n_layer) + size_t(il)];
        const int64_t end = kept_from(seq, il);
        for (; d < end; ++d) {
            if (is_hot(seq, il, d)) drop_hot(seq, il, d);
        }
    }
}

int64_t kv_cells::n_appending(std::span<const std::pair<int, int64_t>> after) const {
    int64_t k = 0;
    for (int s = 0; s < n_seq(); ++s) {
        int64_t n = n_tokens(s);
        for (const auto & [seq, m] : after) n = seq == s ? m : n;
        k += n > 0 && n < n_ctx() ? 1 : 0;
    }
    return k;
}

int64_t kv_cells::n_hot_free(int il) const {
    return std::max<int64_t>(0, std::min<int64_t>(int64_t(free_[size_t(il)].size()), capacity_ - n_hot_[size_t(il)]));
}

uint32_t kv_cells::peek_free(int il, int64_t k) const {
    HILL_ASSERT(k >= 0 && k < n_hot_free(il));
    const std::vector<uint32_t> & f = free_[size_t(il)];
    return f[f.size() - 1 - size_t(k)];
}

void kv_cells::set_hot_capacity(int64_t n) {
    HILL_ASSERT(n >= 0 && n <= p_.hot_slots);
    capacity_ = n;
}

void kv_cells::grow(int seq, int64_t n) {
    const int64_t t0 = n_tokens_[size_t(seq)];
    HILL_ASSERT(n >= 0 && t0 + n <= p_.n_ctx);
    for (int il = 0; il < p_.n_layer; ++il) {
        std::fill_n(col(hot_, seq, il) + t0, n, no_slot);
        std::fill_n(col(hits_, seq, il) + t0, n, uint16_t(0));
        std::fill_n(col(moved_, seq, il) + t0, n, never_moved);
    }
    n_tokens_[size_t(seq)] = t0 + n;
}

uint32_t kv_cells::take_hot(int seq, int il, int64_t t) {
    HILL_ASSERT(t >= 0 && t < n_tokens(seq) && !is_hot(seq, il, t) && n_hot_free(il) > 0);
    std::vector<uint32_t> & f = free_[size_t(il)];
    const uint32_t s = f.back();
    f.pop_back();
    col(hot_, seq, il)[t] = s;
    ++n_hot_[size_t(il)];
    return s;
}

void kv_cells::drop_hot(int seq, int il, int64_t t) {
    HILL_ASSERT(t >= 0 && t < n_tokens(seq) && is_hot(seq, il, t));
    uint32_t & s = col(hot_, seq, il)[t];
    free_[size_t(il)].push_back(s);
    s = no_slot;
    --n_hot_[size_t(il)];
}

void kv_cells::update_hits(int seq, int il, std::span<const int32_t> selected) {
    uint16_t * h = col(hits_, seq, il);
    const int64_t n = n_tokens(seq);
    size_t k = 0;
    for (int64_t t = 0; t < n; ++t) {
        const bool sel = k < selected.size() && selected[k] == t;
        k += sel ? 1 : 0;
        h[t] = hit_next(h[t], sel);
    }
    HILL_ASSERT(k == selected.size());
}

void kv_cells::truncate(int seq, int64_t n) {
    HILL_ASSERT(n >= 0 && can_truncate(seq, n));
    for (int il = 0; il < p_.n_layer; ++il) {
        int64_t & d = dropped_[size_t(seq) * size_t(p_.n_layer) + size_t(il)];
        d = std::min(d, n);
    }
    const int64_t n_old = n_tokens(seq);
    if (n >= n_old) return;
    for (int il = 0; il < p_.n_layer; ++il) {
        for (int64_t t = n; t < n_old; ++t) {
            if (is_hot(seq, il, t)) drop_hot(seq, il, t);
        }
    }
    n_tokens_[size_t(seq)] = n;
}

}  // namespace hill
