#include "kv/cold_logs.h"

#include "core/error.h"
#include "core/trace.h"
#include "kv/cold_reader.h"

#include <algorithm>
#include <cstring>

namespace hill {

cold_logs::cold_logs(cold_writer & writer, const kv_layout & layout, int n_seq, int64_t n_ctx)
    : writer_(writer), pool_(writer.pool()), layout_(layout), n_seq_(n_seq) {
    const cold_pool & pool = pool_;
    HILL_ASSERT(n_seq > 0 && n_ctx > 0 && pool.page_bytes() == layout.page_bytes());
    const int64_t pt = layout.page_tokens();
    const int64_t groups = (n_ctx + pt - 1) / pt;
    HILL_ASSERT(uint64_t(pool.n_pages()) >= uint64_t(n_seq) * uint64_t(layout.n_layer) * 2 * uint64_t(groups));
    const size_t pb = layout.page_bytes();
    logs_.resize(size_t(n_seq) * size_t(layout.n_layer));
    for (log_state & L : logs_) {
        L.groups.reserve(size_t(groups));
        L.open_k = aligned_buffer(pb);
        L.open_v = aligned_buffer(pb);
        L.next_k = aligned_buffer(pb);
        L.next_v = aligned_buffer(pb);
    }
    // Page writes in batches of about 8 MiB of K (and as much V): large requests, bounded staging.
    batch_groups_ = std::clamp<int64_t>(int64_t((size_t(8) << 20) / pb), 1, groups);
    staging_k_ = aligned_buffer(size_t(batch_groups_) * pb);
    staging_v_ = aligned_buffer(size_t(batch_groups_) * pb);
}

cold_log_view cold_logs::log(int seq, int il) const {
    const log_state & L = state(seq, il);
    return cold_log_view{L.groups, L.open_k.data(), L.open_v.data(), L.n_open, layout_.page_tokens()};
}

void cold_logs::write_groups(std::span<const uint8_t * const> k_pages, std::span<const uint8_t * const> v_pages,
                             std::vector<std::pair<uint32_t, uint32_t>> & out) {
    HILL_ASSERT(k_pages.size() == v_pages.size());
    trace_scope span("page write", "io", {{"pages", int64_t(2 * k_pages.size())},
                                          {"bytes", int64_t(2 * k_pages.size() * layout_.page_bytes())}});
    writes_.clear();
    for (size_t g = 0; g < k_pages.size(); ++g) {
        for (const uint8_t * data : {k_pages[g], v_pages[g]}) {
            const uint32_t page = pool_.alloc();
            HILL_ASSERT(page != cold_pool::no_page);  // the pool holds every log's n_ctx tokens
            writes_.push_back({page, data});
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
    for (size_t g = 0; g < k_pages.size(); ++g) out.emplace_back(writes_[2 * g].page, writes_[2 * g + 1].page);
}

void cold_logs::prepare(int seq, int il, int64_t n, const void * k, const void * v, cold_append & out) {
    log_state & L = state(seq, il);
    HILL_ASSERT(!L.pending && n >= 0);
    const int64_t pt = layout_.page_tokens();
    const size_t rb = layout_.row_bytes(), pb = layout_.page_bytes();
    const auto * kb = static_cast<const uint8_t *>(k);
    const auto * vb = static_cast<const uint8_t *>(v);
    out = cold_append{seq, il, n, {}, 0, false};
    const int64_t room = pt - L.n_open;
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
        // The open group, now full, then the whole groups of the rest in staged batches.
        const int64_t n_full = (n - first) / pt;
        std::vector<const uint8_t *> kp, vp;
        kp.push_back(L.open_k.data());
        vp.push_back(L.open_v.data());
        int64_t g = 0;
        size_t n_staged = 0;  // staging slots used by this batch
        while (true) {
            for (; g < n_full && int64_t(kp.size()) < batch_groups_; ++g) {
                const size_t slot = n_staged++;
                uint8_t * dk = staging_k_.data() + slot * pb;
                uint8_t * dv = staging_v_.data() + slot * pb;
                std::memcpy(dk, kb + size_t(first + g * pt) * rb, pb);
                std::memcpy(dv, vb + size_t(first + g * pt) * rb, pb);
                kp.push_back(dk);
                vp.push_back(dv);
            }
            write_groups(kp, vp, out.new_groups);
            kp.clear();
            vp.clear();
            n_staged = 0;
            if (g == n_full) break;
        }
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
}

void cold_logs::discard(const cold_append & a) {
    log_state & L = state(a.seq, a.il);
    for (size_t i = a.new_groups.size(); i-- > 0;) {
        pool_.free(a.new_groups[i].second);
        pool_.free(a.new_groups[i].first);
    }
    L.pending = false;
}

void cold_logs::truncate(int seq, int64_t n, cold_reader & reader) {
    const int64_t pt = layout_.page_tokens();
    const int n_layer = layout_.n_layer;
    // First every read (a group cut inside goes back to RAM, into the staging buffers), then the changes.
    std::vector<page_read> reads;
    for (int il = 0; il < n_layer; ++il) {
        log_state & L = state(seq, il);
        HILL_ASSERT(!L.pending);
        const int64_t g = n / pt;
        if (n % pt != 0 && g < int64_t(L.groups.size())) {
            reads.push_back({L.groups[size_t(g)].first, L.next_k.data()});
            reads.push_back({L.groups[size_t(g)].second, L.next_v.data()});
        }
    }
    std::vector<page_result> res(reads.size());
    if (!reads.empty() && reader.read_pages(reads, res) != 0) reader.check(res, "reading back a page of a truncated sequence");
    for (int il = 0; il < n_layer; ++il) {
        log_state & L = state(seq, il);
        const int64_t n_on_disk = int64_t(L.groups.size()) * pt;
        if (n >= n_on_disk + L.n_open) continue;
        const int64_t g = n / pt, r = n % pt;
        if (g >= int64_t(L.groups.size())) {
            L.n_open = n - n_on_disk;  // inside the open group
            continue;
        }
        const int64_t keep = g;  // whole groups below n
        for (size_t i = L.groups.size(); i-- > size_t(keep);) {
            pool_.free(L.groups[i].second);
            pool_.free(L.groups[i].first);
        }
        L.groups.resize(size_t(keep));
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
        for (size_t i = L.groups.size(); i-- > size_t(s.n_groups[size_t(il)]);) {
            pool_.free(L.groups[i].second);
            pool_.free(L.groups[i].first);
        }
        L.groups.resize(size_t(s.n_groups[size_t(il)]));
        std::memcpy(L.open_k.data(), s.open_k[size_t(il)].data(), s.open_k[size_t(il)].size());
        std::memcpy(L.open_v.data(), s.open_v[size_t(il)].data(), s.open_v[size_t(il)].size());
        L.n_open = s.n_open[size_t(il)];
    }
}

}  // namespace hill
