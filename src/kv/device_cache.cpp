#include "kv/device_cache.h"

#include "core/error.h"

#include <algorithm>

namespace hill {

device_cache::device_cache(int n_seq, int32_t n_ctx, std::vector<int64_t> first_slot, std::vector<int64_t> n_rows)
    : n_ctx_(n_ctx), first_slot_(std::move(first_slot)), n_rows_(std::move(n_rows)) {
    HILL_ASSERT(n_seq > 0 && n_ctx > 0 && first_slot_.size() == n_rows_.size());
    rows_.resize(n_rows_.size());
    chosen_.resize(n_rows_.size());
    bool any = false;
    for (size_t il = 0; il < n_rows_.size(); ++il) {
        HILL_ASSERT(n_rows_[il] >= 0 && first_slot_[il] >= 0);
        rows_[il].resize(size_t(n_rows_[il]));
        chosen_[il].reserve(size_t(n_rows_[il]));
        any = any || n_rows_[il] > 0;
    }
    if (any) map_.assign(size_t(n_seq) * n_rows_.size() * size_t(n_ctx), no_slot);
}

void device_cache::use(int il, uint32_t slot) {
    HILL_ASSERT(holds(il, slot));
    rows_[size_t(il)][size_t(int64_t(slot) - first_slot_[size_t(il)])].used = step_;
}

int64_t device_cache::prepare_fills(int il, int64_t n, const std::function<uint32_t(int, int32_t)> & key) {
    std::vector<chosen> & c = chosen_[size_t(il)];
    c.clear();
    if (n <= 0) return 0;
    const std::vector<row_info> & rows = rows_[size_t(il)];
    for (size_t r = 0; r < rows.size(); ++r) {
        const row_info & x = rows[r];
        if (x.used == step_) continue;
        c.push_back({x.seq < 0 ? 0u : key(x.seq, x.pos) + 1u, uint32_t(r)});
    }
    // The lowest keys at the back, where fill() takes them (ties: lower rows first).
    const auto m = std::min<size_t>(c.size(), size_t(n));
    const auto lower = [](const chosen & a, const chosen & b) { return a.key != b.key ? a.key < b.key : a.row < b.row; };
    std::partial_sort(c.begin(), c.begin() + ptrdiff_t(m), c.end(), lower);
    c.resize(m);
    std::reverse(c.begin(), c.end());
    return int64_t(m);
}

uint32_t device_cache::fill(int seq, int il, int64_t t) {
    std::vector<chosen> & c = chosen_[size_t(il)];
    HILL_ASSERT(t >= 0 && t < n_ctx_ && slot(seq, il, t) == no_slot);
    if (c.empty()) return no_slot;
    row_info & x = rows_[size_t(il)][c.back().row];
    const auto s = uint32_t(first_slot_[size_t(il)] + int64_t(c.back().row));
    c.pop_back();
    HILL_ASSERT(x.used != step_);
    if (x.seq >= 0) map_[index(x.seq, il, x.pos)] = no_slot;
    x = row_info{int32_t(seq), int32_t(t), step_};
    map_[index(seq, il, t)] = s;
    return s;
}

void device_cache::plan_replacements(std::span<scored_token> incoming, std::span<const scored_token> held) {
    const auto higher = [](const scored_token & x, const scored_token & y) { return x.score > y.score; };
    heap_.clear();
    size_t next = 0;
    for (scored_token & t : incoming) {
        t.slot = no_slot;
        for (; next < held.size() && held[next].pos < t.pos; ++next) {
            heap_.push_back(held[next]);
            std::push_heap(heap_.begin(), heap_.end(), higher);
        }
        if (heap_.empty() || !(heap_.front().score < t.score)) continue;
        t.slot = heap_.front().slot;
        std::pop_heap(heap_.begin(), heap_.end(), higher);
        heap_.pop_back();
    }
}

void device_cache::replace(int il, uint32_t slot, int seq, int64_t t) {
    HILL_ASSERT(holds(il, slot) && t >= 0 && t < n_ctx_ && this->slot(seq, il, t) == no_slot);
    row_info & x = rows_[size_t(il)][size_t(int64_t(slot) - first_slot_[size_t(il)])];
    HILL_ASSERT(x.seq >= 0 && x.used == step_);
    map_[index(x.seq, il, x.pos)] = no_slot;
    x = row_info{int32_t(seq), int32_t(t), step_};
    map_[index(seq, il, t)] = slot;
}

void device_cache::forget(int seq, int64_t n) {
    if (map_.empty()) return;
    for (size_t il = 0; il < rows_.size(); ++il) {
        for (row_info & x : rows_[il]) {
            if (x.seq != seq || x.pos < n) continue;
            map_[index(seq, int(il), x.pos)] = no_slot;
            x = row_info{};
        }
        chosen_[il].clear();
    }
}

}  // namespace hill
