#include "kv/cold_logs.h"

#include "core/error.h"
#include "core/trace.h"
#include "kv/cold_reader.h"

#include <algorithm>
#include <cstring>

namespace hill {

int64_t cold_logs::open_groups_for(const kv_layout & layout) {
    return std::max<int64_t>(1, open_tail_tokens / layout.page_tokens());
}

int64_t cold_logs::groups_held(const kv_layout & layout, int64_t n_ctx, int32_t window) {
    const int64_t pt = layout.page_tokens();
    const int64_t groups = (n_ctx + pt - 1) / pt;
    return window > 0 ? std::min(groups, 2 * ((window + pt - 1) / pt + 1)) : groups;
}

cold_logs::cold_logs(cold_writer & writer, const kv_layout & layout, int n_seq, int64_t n_ctx, int64_t open_groups,
                     std::span<const int32_t> window)
    : writer_(writer), pool_(writer.pool()), layout_(layout), n_seq_(n_seq) {
    const cold_pool & pool = pool_;
    HILL_ASSERT(n_seq > 0 && n_ctx > 0 && open_groups > 0 && pool.page_bytes() == layout.page_bytes());
    HILL_ASSERT(window.empty() || window.size() == size_t(layout.n_layer));
    window_.assign(size_t(layout.n_layer), 0);
    std::copy(window.begin(), window.end(), window_.begin());
    const int64_t pt = layout.page_tokens();
    const int64_t groups = (n_ctx + pt - 1) / pt;
    const int ppg = layout.pages_per_group();
    uint64_t held = 0;
    for (const int32_t w : window_) held += uint64_t(groups_held(layout, n_ctx, w));
    HILL_ASSERT(uint64_t(pool.n_pages()) >= uint64_t(n_seq) * uint64_t(ppg) * held);
    open_groups_ = std::min(open_groups, groups);
    const size_t open_bytes = size_t(open_groups_ * pt) * layout.row_bytes();  // the open tail's K rows (and as many V)
    logs_.resize(size_t(n_seq) * size_t(layout.n_layer));
    for (log_state & L : logs_) {
        L.groups.reserve(size_t(groups));
        L.open_k = aligned_buffer(open_bytes);
        L.open_v = aligned_buffer(open_bytes);
        L.next_k = aligned_buffer(open_bytes);
        L.next_v = aligned_buffer(open_bytes);
    }
    // Page writes in batches of about 16 MiB of K and V (and at least the open tail): large requests,
    // bounded staging.
    batch_groups_ = std::max(open_groups_, std::clamp<int64_t>(int64_t((size_t(16) << 20) / (size_t(ppg) * layout.page_bytes())), 1, groups));
    staging_ = aligned_buffer(size_t(batch_groups_) * size_t(ppg) * layout.page_bytes());
}

void cold_logs::free_group(const std::pair<uint32_t, uint32_t> & g) {
    if (g.first == cold_pool::no_page) return;  // dropped (sliding window)
    if (before_free_) before_free_();
    if (g.second != cold_pool::no_page) pool_.free(g.second);
    pool_.free(g.first);
}

cold_log_view cold_logs::log(int seq, int il) const {
    const log_state & L = state(seq, il);
    return cold_log_view{L.groups, L.open_k.data(), L.open_v.data(), L.n_open, layout_.page_tokens()};
}

void cold_logs::write_groups(std::span<const uint8_t * const> k_rows, std::span<const uint8_t * const> v_rows,
                             std::vector<std::pair<uint32_t, uint32_t>> & out) {
    HILL_ASSERT(k_rows.size() == v_rows.size() && int64_t(k_rows.size()) <= batch_groups_);
    const size_t ppg = size_t(layout_.pages_per_group()), pb = layout_.page_bytes();
    const int64_t pt = layout_.page_tokens();
    trace_scope span("page write", "io", {{"pages", int64_t(ppg * k_rows.size())},
                                          {"bytes", int64_t(ppg * k_rows.size() * pb)}});
    writes_.clear();
    for (size_t g = 0; g < k_rows.size(); ++g) {
        uint8_t * pages = staging_.data() + g * ppg * pb;
        if (layout_.cold == cold_records::token) {
            layout_.pack_records(k_rows[g], v_rows[g], pt, pages);
        } else {
            std::memcpy(pages, k_rows[g], pb);
            std::memcpy(pages + pb, v_rows[g], pb);
        }
        for (size_t i = 0; i < ppg; ++i) {
            const uint32_t page = pool_.alloc();
            HILL_ASSERT(page != cold_pool::no_page);  // the pool holds every log's n_ctx tokens
            writes_.push_back({page, pages + i * pb});
        }
    }
    results_.resize(writes_.size());
    if (writer_.write_pages(writes_, results_) != 0) {
        std::string cause;
        for (const page_result & r : results_) {
            if (r.status == page_status::io_error) {
                cause = pool_.describe(r);
                break;
            }
        }
        for (size_t i = writes_.size(); i-- > 0;) pool_.free(writes_[i].page);
        fail_input("cold pool: writing a page of KV failed: {}", cause);
    }
    for (size_t g = 0; g < k_rows.size(); ++g) {
        out.emplace_back(writes_[ppg * g].page, ppg == 2 ? writes_[ppg * g + 1].page : cold_pool::no_page);
    }
}

void cold_logs::prepare(int seq, int il, int64_t n, const void * k, const void * v, cold_append & out) {
    log_state & L = state(seq, il);
    HILL_ASSERT(!L.pending && n >= 0);
    const int64_t pt = layout_.page_tokens();
    const size_t rb = layout_.row_bytes();
    const auto * kb = static_cast<const uint8_t *>(k);
    const auto * vb = static_cast<const uint8_t *>(v);
    out = cold_append{seq, il, n, {}, 0, false};
    const int64_t room = open_groups_ * pt - L.n_open;
    const int64_t first = std::min(n, room);
    // Rows past n_open are not part of the log: writing them changes nothing a reader sees.
    std::memcpy(L.open_k.data() + size_t(L.n_open) * rb, kb, size_t(first) * rb);
    std::memcpy(L.open_v.data() + size_t(L.n_open) * rb, vb, size_t(first) * rb);
    if (n < room) {
        out.n_open_after = L.n_open + n;
        L.pending = true;
        return;
    }
    try {
        // The open tail, now full, then the whole groups of the rest, in batches; a sliding layer's
        // groups that the append moves out of its window (wholly below n_after - w) are not written.
        const int64_t n_full = (n - first) / pt;
        const int64_t n_on_disk = int64_t(L.groups.size()) * pt;
        const int32_t w = window_[size_t(il)];
        const int64_t drop_below = w > 0 ? n_on_disk + L.n_open + n - w : 0;
        std::vector<const uint8_t *> kp, vp;
        const auto add_group = [&](int64_t i, const uint8_t * k_rows, const uint8_t * v_rows) {
            if (n_on_disk + (i + 1) * pt <= drop_below) {
                out.new_groups.emplace_back(cold_pool::no_page, cold_pool::no_page);
                return;
            }
            kp.push_back(k_rows);
            vp.push_back(v_rows);
            if (int64_t(kp.size()) == batch_groups_) {
                write_groups(kp, vp, out.new_groups);
                kp.clear();
                vp.clear();
            }
        };
        for (int64_t i = 0; i < open_groups_; ++i) {
            add_group(i, L.open_k.data() + size_t(i * pt) * rb, L.open_v.data() + size_t(i * pt) * rb);
        }
        for (int64_t g = 0; g < n_full; ++g) {
            add_group(open_groups_ + g, kb + size_t(first + g * pt) * rb, vb + size_t(first + g * pt) * rb);
        }
        if (!kp.empty()) write_groups(kp, vp, out.new_groups);
        const int64_t rest = n - first - n_full * pt;
        std::memcpy(L.next_k.data(), kb + size_t(n - rest) * rb, size_t(rest) * rb);
        std::memcpy(L.next_v.data(), vb + size_t(n - rest) * rb, size_t(rest) * rb);
        out.staged_next = true;
        out.n_open_after = rest;
    } catch (...) {
        discard(out);
        throw;
    }
    L.pending = true;
}

void cold_logs::apply(const cold_append & a) {
    log_state & L = state(a.seq, a.il);
    HILL_ASSERT(L.pending);
    L.groups.insert(L.groups.end(), a.new_groups.begin(), a.new_groups.end());
    if (a.staged_next) {
        std::swap(L.open_k, L.next_k);
        std::swap(L.open_v, L.next_v);
    }
    L.n_open = a.n_open_after;
    L.pending = false;
    // A sliding layer: the groups now wholly below the window go back to the pool.
    if (const int32_t w = window_[size_t(a.il)]; w > 0) {
        const int64_t n_tokens = int64_t(L.groups.size()) * layout_.page_tokens() + L.n_open;
        const int64_t end =
            std::min<int64_t>(int64_t(L.groups.size()), std::max<int64_t>(0, n_tokens - w) / layout_.page_tokens());
        for (; L.n_dropped < end; ++L.n_dropped) {
            free_group(L.groups[size_t(L.n_dropped)]);
            L.groups[size_t(L.n_dropped)] = {cold_pool::no_page, cold_pool::no_page};
        }
    }
}

void cold_logs::discard(const cold_append & a) {
    log_state & L = state(a.seq, a.il);
    for (size_t i = a.new_groups.size(); i-- > 0;) free_group(a.new_groups[i]);
    L.pending = false;
}

void cold_logs::truncate(int seq, int64_t n, cold_reader & reader) {
    const int64_t pt = layout_.page_tokens();
    const int n_layer = layout_.n_layer;
    // First every read (a group cut inside goes back to RAM, into the next_ buffers), then the changes.
    const bool token = layout_.cold == cold_records::token;
    const size_t pb = layout_.page_bytes();
    std::vector<page_read> reads;
    std::vector<int> read_layer;                                        // token records: the layer of each read
    aligned_buffer records(token ? size_t(n_layer) * pb : 0);           // token records: the pages read
    for (int il = 0; il < n_layer; ++il) {
        log_state & L = state(seq, il);
        HILL_ASSERT(!L.pending);
        const int64_t g = n / pt;
        if (n % pt != 0 && g < int64_t(L.groups.size())) {
            HILL_ASSERT(L.groups[size_t(g)].first != cold_pool::no_page);  // kept: kv_cells::can_truncate
            if (token) {
                reads.push_back({L.groups[size_t(g)].first, records.data() + size_t(il) * pb});
                read_layer.push_back(il);
            } else {
                reads.push_back({L.groups[size_t(g)].first, L.next_k.data()});
                reads.push_back({L.groups[size_t(g)].second, L.next_v.data()});
            }
        }
    }
    std::vector<page_result> res(reads.size());
    if (!reads.empty() && reader.read_pages(reads, res) != 0) reader.check(res, "reading back a page of a truncated sequence");
    for (const int il : read_layer) {
        log_state & L = state(seq, il);
        layout_.unpack_records(records.data() + size_t(il) * pb, pt, L.next_k.data(), L.next_v.data());
    }
    for (int il = 0; il < n_layer; ++il) {
        log_state & L = state(seq, il);
        const int64_t n_on_disk = int64_t(L.groups.size()) * pt;
        if (n >= n_on_disk + L.n_open) continue;
        const int64_t g = n / pt, r = n % pt;
        if (g >= int64_t(L.groups.size())) {
            L.n_open = n - n_on_disk;  // inside the open tail
            continue;
        }
        const int64_t keep = g;  // whole groups below n
        for (size_t i = L.groups.size(); i-- > size_t(keep);) free_group(L.groups[i]);
        L.groups.resize(size_t(keep));
        L.n_dropped = std::min(L.n_dropped, keep);
        if (r > 0) {
            std::swap(L.open_k, L.next_k);
            std::swap(L.open_v, L.next_v);
        }
        L.n_open = r;
    }
}

void cold_logs::take_snapshot(int seq, snapshot & s) const {
    const size_t rb = layout_.row_bytes();
    s.seq = seq;
    s.n_groups.resize(size_t(layout_.n_layer));
    s.n_open.resize(size_t(layout_.n_layer));
    s.open_k.resize(size_t(layout_.n_layer));
    s.open_v.resize(size_t(layout_.n_layer));
    for (int il = 0; il < layout_.n_layer; ++il) {
        const log_state & L = state(seq, il);
        HILL_ASSERT(!L.pending);
        s.n_groups[size_t(il)] = int64_t(L.groups.size());
        s.n_open[size_t(il)] = L.n_open;
        s.open_k[size_t(il)].assign(L.open_k.data(), L.open_k.data() + size_t(L.n_open) * rb);
        s.open_v[size_t(il)].assign(L.open_v.data(), L.open_v.data() + size_t(L.n_open) * rb);
    }
}

void cold_logs::restore(const snapshot & s) {
    for (int il = 0; il < layout_.n_layer; ++il) {
        log_state & L = state(s.seq, il);
        HILL_ASSERT(!L.pending && int64_t(L.groups.size()) >= s.n_groups[size_t(il)]);
        for (size_t i = L.groups.size(); i-- > size_t(s.n_groups[size_t(il)]);) free_group(L.groups[i]);
        L.groups.resize(size_t(s.n_groups[size_t(il)]));
        L.n_dropped = std::min(L.n_dropped, int64_t(L.groups.size()));
        if (!s.open_k[size_t(il)].empty()) {  // an empty snapshot's data() may be null: memcpy's is UB then
            std::memcpy(L.open_k.data(), s.open_k[size_t(il)].data(), s.open_k[size_t(il)].size());
            std::memcpy(L.open_v.data(), s.open_v[size_t(il)].data(), s.open_v[size_t(il)].size());
        }
        L.n_open = s.n_open[size_t(il)];
    }
}

}  // namespace hill
